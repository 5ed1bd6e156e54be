"""The browser check fails on each defect class it is meant to catch: each test builds a small page
that is correct, then the same page with one deliberate defect, and checks that only the defect is
reported (so the check can fail, and is not so loose that it fails on a good page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ntkbook.book import build as bookbuild, htmlcheck

pytestmark = pytest.mark.book


@pytest.fixture(scope="module")
def chromium():
    path = htmlcheck.find_chromium()
    if path is None:
        pytest.skip("Debian's chromium is not installed (make test installs it when run as root); "
                    "the browser check was skipped")
    return path


@pytest.fixture(scope="module")
def mathjax():
    try:
        return bookbuild.ensure_mathjax() / "tex-chtml.js"
    except RuntimeError as exc:  # no npm and no MathJax: the math checks cannot run
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = tmp_path_factory.mktemp("img")
    fig = plt.figure(figsize=(2, 1))
    fig.savefig(folder / "fig.png")
    plt.close(fig)
    return folder / "fig.png"


FIGURE = ('<figure id="fig-x"><img alt="Test curve rising to the right" src="{src}" style="width:300px">'
          '<figcaption><p><span class="caption-number">Fig. 1.1 </span>'
          '<span class="caption-text">What to see: the curve rises.</span></p></figcaption></figure>')
SHORT_EQ = ('<div class="math notranslate nohighlight" id="equation-eq-ok"><span class="eqno">(1.1)</span>'
            '\\[ \\kappa(G^3) = \\kappa(G)^3 \\]</div>')
LONG_EQ = ('<div class="math notranslate nohighlight" id="equation-eq-long"><span class="eqno">(1.2)</span>'
           '\\[ ' + " + ".join(f"\\frac{{\\partial f_{{{i}}}(x)}}{{\\partial W_{{\\mu}}}}" for i in range(14))
           + ' = 0 \\]</div>')
TABLE = ('<table><tr><th>quantity</th><th>value</th></tr><tr><td>kappa</td><td>10</td></tr></table>')
WIDE_TABLE = ('<table style="display:table"><tr>' + "".join(f"<th>a long column heading {i}</th>" for i in range(12))
              + '</tr><tr>' + "".join(f"<td>{i}.0</td>" for i in range(12)) + '</tr></table>')
PROSE = ('<p>The condition number of <span class="math notranslate nohighlight">\\(G^3\\)</span> is '
         'the cube of that of G; the code calls <code class="literal">res["eigs"]</code>.</p>')


def _page(folder: Path, name: str, body: str, mathjax: Path | None = None, png: Path | None = None,
          css: str = "") -> Path:
    head = '<meta name="viewport" content="width=device-width, initial-scale=1">'
    if css:
        head += f"<style>{css}</style>"
    if mathjax is not None:
        head += f'<script defer src="{mathjax.as_uri()}"></script>'
    src = png.as_uri() if png else ""
    html = (f"<html><head><title>Test page</title>{head}</head><body><main><article "
            f'style="max-width:900px; margin:0 auto; padding:0 8px">{body.replace("{src}", src)}'
            "</article></main></body></html>")
    path = folder / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    return path


def _problems(path, chromium, width=1400):
    return htmlcheck.check_page(path, chromium=chromium, width=width).problems


def test_good_page_passes_at_both_widths(tmp_path, chromium, mathjax, png):
    page = _page(tmp_path, "good", PROSE + SHORT_EQ + FIGURE + TABLE, mathjax, png)
    for width in htmlcheck.WIDTHS:
        report = htmlcheck.check_page(page, chromium=chromium, width=width)
        assert report.ok, (width, report.problems)
        assert report.width == width and report.math_rendered == report.math == 2


def test_overflowing_equation_fails_at_phone_width(tmp_path, chromium, mathjax):
    page = _page(tmp_path, "eq", SHORT_EQ + LONG_EQ, mathjax)
    problems = _problems(page, chromium, width=400)
    assert any("display equation (1.2)" in p for p in problems), problems
    assert not any("(1.1)" in p for p in problems), problems


def test_equation_number_overlap_fails(tmp_path, chromium, mathjax):
    # an equation that fits the column but not beside its number (the number floats right)
    mid = ('<div class="math" id="equation-eq-mid" style="position:relative">'
           '<span class="eqno" style="position:absolute; right:0; top:50%; transform:translateY(-50%)">(2.1)</span>'
           '\\[ ' + " + ".join(f"x_{{{i}}}" for i in range(10)) + ' \\]</div>')
    page = _page(tmp_path, "eqno", mid, mathjax)
    problems = _problems(page, chromium, width=400)
    assert any("(2.1) overlaps its equation number" in p for p in problems), problems


def test_wide_table_without_scroll_box_fails_and_scrolling_one_passes(tmp_path, chromium):
    bad = _page(tmp_path, "table", WIDE_TABLE)
    problems = _problems(bad, chromium, width=400)
    assert any("table 1" in p and "does not scroll" in p for p in problems), problems
    good = _page(tmp_path, "table_ok", f'<div style="overflow-x:auto">{WIDE_TABLE}</div>')
    assert _problems(good, chromium, width=400) == []


def test_uncaptioned_figure_and_missing_alt_fail(tmp_path, chromium, png):
    bare = _page(tmp_path, "bare", '<div class="cell_output"><img alt="" src="{src}"></div>', png=png)
    problems = _problems(bare, chromium)
    assert any("no caption" in p for p in problems) and any("no alt text" in p for p in problems), problems
    path_alt = _page(tmp_path, "pathalt", FIGURE.replace("Test curve rising to the right",
                                                         "../_images/fig.png"), png=png)
    problems = _problems(path_alt, chromium)
    assert problems and all("alt is a file name" in p for p in problems), problems
    unnumbered = _page(tmp_path, "unnum", FIGURE.replace('<span class="caption-number">Fig. 1.1 </span>', ""),
                       png=png)
    assert any("not numbered" in p for p in _problems(unnumbered, chromium))


@pytest.mark.parametrize("text, kind", [
    ("<p>the width grows like \\kappa^6</p>", "raw LaTeX"),
    ("<p>the bound $m = 10^{18}$ holds</p>", "raw LaTeX ($)"),
    ("<div class='output'><pre>keys: ['dense1']['kernel']</pre></div>", "Python repr"),
    ("<div class='output'><pre>{'slope': 0.5, 'ok': True}</pre></div>", "Python repr"),
    ("<div class='output stream highlight-myst-ansi'><pre>KernelOperator: array([1., 2.])</pre></div>",
     "Python repr"),
    ("<p>eigenvalues array([1., 2.])</p>", "Python repr"),
    ("<p>the overlap changes by -0.00 here</p>", "negative zero"),
    ("<p>overlap 1.000000000000 of the dimension</p>", "more than eight decimals"),
    ("<p>about 3.19e+07 operations</p>", "e-notation"),
    ("<div class='output stream'><pre>computing modular_mlp (config 137333628741, code 7a4b), roughly 31.5s</pre>"
     "</div>", "progress log"),
    ("<div class='output stream'><pre>modular_mlp p=23: 3/24 ( 12%) elapsed 13.4s, ~1m34s left</pre></div>",
     "progress log"),
])
def test_text_leftovers_fail(tmp_path, chromium, text, kind):
    page = _page(tmp_path, "leftover", text)
    problems = _problems(page, chromium)
    assert any(kind in p for p in problems), problems


def test_code_inputs_and_inline_code_are_not_leftovers(tmp_path, chromium):
    body = ('<div class="cell_input"><pre>x = res["eigs"]; d = {\'a\': 1}; print("$", r"\\kappa")</pre></div>'
            '<p>Call <code class="literal">params[\'dense1\']</code>; an overlap of 0.98 and -0.5.</p>'
            '<div class="highlight-python notranslate"><div class="highlight"><pre>return [{"claim": "x"}]'
            '</pre></div></div>')
    assert _problems(_page(tmp_path, "code", body), chromium) == []


def test_latex_in_title_fails(tmp_path, chromium):
    page = _page(tmp_path, "title", "<p>fine</p>")
    page.write_text(page.read_text().replace("<title>Test page</title>", "<title>The \\kappa^6 bound</title>"))
    assert any("page title" in p for p in _problems(page, chromium))


def test_long_inline_math_fails_at_phone_width(tmp_path, chromium, mathjax):
    long_inline = ("<p>A kernel is invariant if <span class='math notranslate nohighlight'>\\("
                   + " + ".join(f"K(x_{{{i}}}, y_{{{i}}})" for i in range(8)) + "\\)</span> holds.</p>")
    page = _page(tmp_path, "inline", PROSE + long_inline, mathjax)
    assert _problems(page, chromium, width=1400) == []
    problems = _problems(page, chromium, width=400)
    assert any("inline math" in p for p in problems), problems
