"""Check built HTML pages in headless Chromium: figures load, math renders, no error output.

For each page a copy with a small reporting script is written beside it (so relative links
resolve), opened with ``chromium --headless --dump-dom``, and the script's JSON report is read
back from the dumped DOM. The script waits for MathJax to finish typesetting before it counts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PageReport", "check_page", "find_chromium"]

_REPORT_JS = r"""
<script>
(function () {
  function report() {
    var root = document.querySelector('main') || document.body;
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
    var out = {
      title: document.title,
      images: imgs.length, broken: broken,
      math: math.length, math_rendered: rendered,
      math_errors: root.querySelectorAll('mjx-merror').length,
      mathjax: !!(window.MathJax && window.MathJax.startup),
      errors: errors
    };
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

    @property
    def problems(self) -> list[str]:
        out = []
        if self.broken_images:
            out.append(f"{len(self.broken_images)} image(s) failed to load: {self.broken_images}")
        if self.math_rendered < self.math:
            out.append(f"only {self.math_rendered} of {self.math} math elements were rendered by MathJax")
        if self.math_errors:
            out.append(f"{self.math_errors} MathJax error(s)")
        out.extend(f"error output: {e!r}" for e in self.errors)
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


def check_page(page: str | os.PathLike, *, chromium: str | None = None, timeout: float = 90) -> PageReport:
    """Open ``page`` (a built HTML file) in headless Chromium and report what it shows."""
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
    profile = tempfile.mkdtemp(prefix="ntkbook-chromium-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        cmd = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--allow-file-access-from-files", f"--user-data-dir={profile}",
            "--virtual-time-budget=20000", "--dump-dom", Path(tmp).as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(tmp)
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
    )
