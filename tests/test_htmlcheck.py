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


def _png(path: Path, inches: float = 2, dpi: float = 100, font_pt: float | None = 10) -> Path:
    """A PNG ``inches`` wide at ``dpi``, carrying the font metadata ntkbook.book.report.show
    writes (smallest text ``font_pt`` points), or none with ``font_pt=None``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(inches, inches / 2))
    meta = {} if font_pt is None else {htmlcheck.FONT_KEY: str(font_pt), htmlcheck.DPI_KEY: str(dpi)}
    fig.savefig(path, dpi=dpi, metadata=meta)
    plt.close(fig)
    return path


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    """A figure with 10 pt text at 100 dpi, 200 px wide: 14 px text shown at 200 px or wider."""
    return _png(tmp_path_factory.mktemp("img") / "fig.png")


FIGURE = ('<figure id="fig-x"><img alt="Test curve rising to the right" src="{src}" style="width:300px">'
          '<figcaption><p><span class="caption-number">Fig. 1.1 </span>'
          '<span class="caption-text">What to see: the curve rises.</span></p></figcaption></figure>')
SHORT_EQ = ('<div class="math notranslate nohighlight" id="equation-eq-ok"><span class="eqno">(1.1)</span>'
            '\\[ \\kappa(G^3) = \\kappa(G)^3 \\]</div>')
LONG_EQ = ('<div class="math notranslate nohighlight" id="equation-eq-long"><span class="eqno">(1.2)</span>'
           '\\[ ' + " + ".join(f"\\frac{{\\partial f_{{{i}}}(x)}}{{\\partial W_{{\\mu}}}}" for i in range(14))
           + ' = 0 \\]</div>')
# running text a reader reads first, citing the figure (pages without MathJax)
READ = ('<p>The condition number of the Gram matrix grows like the cube of that of the data, as Fig. 1.1 '
        'shows.</p>')
TABLE = ('<table><tr><th>quantity</th><th>value</th></tr><tr><td>kappa</td><td>10</td></tr></table>')
WIDE_TABLE = ('<table style="display:table"><tr>' + "".join(f"<th>a long column heading {i}</th>" for i in range(12))
              + '</tr><tr>' + "".join(f"<td>{i}.0</td>" for i in range(12)) + '</tr></table>')
PROSE = ('<p>The condition number of <span class="math notranslate nohighlight">\\(G^3\\)</span> is '
         'the cube of that of G, as Fig. 1.1 shows; the code calls <code class="literal">res["eigs"]</code>.</p>')


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
    path_alt = _page(tmp_path, "pathalt", READ + FIGURE.replace("Test curve rising to the right",
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
    body = (READ + '<div class="cell_input"><pre>x = res["eigs"]; d = {\'a\': 1}; print("$", r"\\kappa")</pre></div>'
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


# --- figure text as displayed (issue 18) -------------------------------------------------------

def test_small_figure_text_fails_at_each_width_it_is_small(tmp_path, chromium):
    # 6 pt at 100 dpi in a 600 px image shown 300 px wide: 6 * 100/72 * 0.5 = 4.2 px, at any width
    small = _png(tmp_path / "small.png", inches=6, dpi=100, font_pt=6)
    page = _page(tmp_path, "small", READ + FIGURE, png=small)
    for width in htmlcheck.WIDTHS:
        problems = _problems(page, chromium, width)
        assert [p for p in problems if "smallest text" in p] == [
            f"Fig. 1.1: its smallest text is 4.2 px at {width} px (6 pt at 100 dpi, a 600 px wide image "
            f"shown 300 px wide); the least is 9 px"], problems


def test_figure_text_small_only_on_a_phone_fails_only_there(tmp_path, chromium):
    # 8 pt at 200 dpi = 22 px in a 1200 px image, shrunk to the column: ~16 px at 1400, ~7 px at 400
    wide = _png(tmp_path / "wide.png", inches=6, dpi=200, font_pt=8)
    page = _page(tmp_path, "wide", READ + FIGURE.replace('style="width:300px"', 'style="max-width:100%"'),
                 png=wide)
    assert _problems(page, chromium, 1400) == []
    problems = _problems(page, chromium, 400)
    assert len(problems) == 1 and problems[0].startswith("Fig. 1.1: its smallest text is ") \
        and " px at 400 px (8 pt at 200 dpi, a 1200 px wide image" in problems[0], problems


def test_narrow_variant_served_below_a_breakpoint_passes(tmp_path, chromium):
    # the wide layout is too small on a phone; a <picture> serves a narrow one there, which is read
    wide = _png(tmp_path / "wide.png", inches=6, dpi=200, font_pt=8)
    narrow = _png(tmp_path / "narrow.png", inches=3, dpi=200, font_pt=8)
    picture = (f'<picture><source media="(max-width: 600px)" srcset="{narrow.as_uri()}">'
               f'<img alt="Test curve rising to the right" src="{wide.as_uri()}" style="max-width:100%"></picture>')
    figure = FIGURE.replace('<img alt="Test curve rising to the right" src="{src}" style="width:300px">', picture)
    page = _page(tmp_path, "picture", READ + figure)
    for width in htmlcheck.WIDTHS:
        assert _problems(page, chromium, width) == [], width


def test_figure_without_font_metadata_fails_and_logo_is_not_a_figure(tmp_path, chromium, png):
    import base64

    plain = _png(tmp_path / "plain.png", font_pt=None)
    page = _page(tmp_path, "nometa", READ + FIGURE, png=plain)
    logo = f'<header><img alt="Book logo" src="{plain.as_uri()}"></header>'  # the theme's, outside <main>
    page.write_text(page.read_text().replace("<body>", "<body>" + logo))
    problems = _problems(page, chromium)
    assert problems == ["Fig. 1.1: figure not rendered by ntkbook.book.report.show (its PNG has no "
                        "ntkbook:min_font_pt and ntkbook:dpi, so the size of its text is unknown)"], problems
    # an image inlined as a data: URI is read too
    small = _png(tmp_path / "small.png", inches=6, dpi=100, font_pt=6)
    uri = "data:image/png;base64," + base64.b64encode(small.read_bytes()).decode()
    page = _page(tmp_path, "datauri", READ + FIGURE.replace("{src}", uri))
    problems = _problems(page, chromium)
    assert len(problems) == 1 and "Fig. 1.1: its smallest text is 4.2 px" in problems[0], problems


def test_png_text_chunks_are_read():
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(htmlcheck.FONT_KEY, "7.5")
    info.add_itxt(htmlcheck.DPI_KEY, "150", zip=True)
    import io

    buf = io.BytesIO()
    Image.new("RGB", (321, 4)).save(buf, format="PNG", pnginfo=info)
    assert htmlcheck.png_info(buf.getvalue()) == (321, {htmlcheck.FONT_KEY: "7.5", htmlcheck.DPI_KEY: "150"})
    with pytest.raises(ValueError):
        htmlcheck.png_info(b"GIF89a")


# --- figures and tables cited in the text ------------------------------------------------------

def _figure(n: int, cites: str = "") -> str:
    return (f'<figure id="fig-{n}"><img alt="Test curve number {n}" src="{{src}}" style="width:300px">'
            f'<figcaption><p><span class="caption-number">Fig. 1.{n} </span>'
            f'<span class="caption-text">What to see in panel {n}. {cites}</span></p></figcaption></figure>')


CAPTIONED_TABLE = ('<table id="table-k"><caption><span class="caption-number">Table 1 </span>'
                   '<span class="caption-text">Condition numbers.</span></caption>'
                   '<thead><tr><th>quantity</th><th>value</th></tr></thead><tbody><tr><td>kappa</td><td>10</td>'
                   '</tr></tbody></table>')
PARAGRAPH_TABLE = (TABLE + '<p><strong>Table 2.</strong> Raw pixels; Table 1 and Fig. 1.2 say more.</p>')


def test_uncited_figures_and_tables_fail(tmp_path, chromium, png):
    # Fig. 1.1 is cited by a numref link, Table 1 by number; Fig. 1.2 and Table 2 only in captions
    prose = ('<p>The condition number grows with the depth of the network, as '
             '<a class="reference internal" href="#fig-1"><span class="std std-numref">the first figure</span>'
             '</a> and Table 1 show for every data set we measured.</p>')
    body = prose + _figure(1, "Compare Fig. 1.2.") + _figure(2) + CAPTIONED_TABLE + PARAGRAPH_TABLE
    problems = _problems(_page(tmp_path, "uncited", body, png=png), chromium)
    assert problems == ["Fig. 1.2 is never cited in the text (cite it by number or with {numref})",
                        "Table 2 is never cited in the text (cite it by number or with {numref})"], problems
    cited = prose.replace("show for", "show (with Figs. 1.1–1.2 and Table 2) for")
    body = cited + _figure(1) + _figure(2) + CAPTIONED_TABLE + PARAGRAPH_TABLE
    assert _problems(_page(tmp_path, "cited", body, png=png), chromium) == []


def test_table_numbered_by_chapter_is_a_caption_and_cited_by_chapter_number(tmp_path, chromium):
    # "**Table 4.3.**" (the third table of chapter 4) is a caption; "Table 4", "Table 3", "Fig. 4.3" and
    # the caption's own "Table 4.3" do not cite it, "Table 4.3" in the text does
    caption = TABLE + '<p><strong>Table 4.3.</strong> Condition numbers, as Table 4.3 of the paper.</p>'
    near = '<p>Table 4 and Table 3 of the paper, and Fig. 4.3, say otherwise.</p>'
    problems = _problems(_page(tmp_path, "chapter-uncited", READ + near + caption), chromium)
    assert problems == ["Table 4.3 is never cited in the text (cite it by number or with {numref})"], problems
    cited = '<p>As Table 4.3 shows, the condition number grows with depth.</p>'
    assert _problems(_page(tmp_path, "chapter-cited", READ + near + cited + caption), chromium) == []


@pytest.mark.parametrize("text, cites", [
    ("see Fig. 3.2 and Figs. 3.7–3.10", {("Fig.", "3.2"), ("Fig.", "3.7"), ("Fig.", "3.8"), ("Fig.", "3.9"),
                                        ("Fig.", "3.10")}),
    ("Figure 1(b) and Tables 4 and 5", {("Fig.", "1"), ("Table", "4"), ("Table", "5")}),
    ("Table 12) and the Table of contents", {("Table", "12")}),
    ("as Table 4.3 shows; Tables 4.4 and 4.5, then Table 4.10.", {("Table", "4.3"), ("Table", "4.4"),
                                                                   ("Table", "4.5"), ("Table", "4.10")}),
])
def test_cited_numbers(text, cites):
    assert htmlcheck.cited_numbers(text) == cites


# --- table rows with more cells than the header ------------------------------------------------

def test_table_row_with_more_cells_than_header_fails(tmp_path, chromium):
    bad = TABLE.replace("<td>10</td>", "<td>10</td><td>extra</td>")
    problems = _problems(_page(tmp_path, "row", READ + bad), chromium)
    assert problems == ['table 1 ("quantity"), row 2: 3 cells, its header 2: more cells than its header'], problems
    spans = ('<table><thead><tr><th colspan="2">pair</th><th>c</th></tr></thead><tbody>'
             '<tr><td rowspan="2">a</td><td>b</td><td>c</td></tr><tr><td>b</td><td>c</td></tr></tbody></table>')
    assert _problems(_page(tmp_path, "spans", READ + spans), chromium) == []


def test_markdown_row_split_by_a_bare_pipe_fails(tmp_path, chromium):
    # the renderer drops the extra cells of "|I|" silently: the check reads the page's source, which
    # the built site ships as _sources/<page>.ipynb
    import json

    def site(name, row):
        (tmp_path / name / "book").mkdir(parents=True)
        (tmp_path / name / "_sources" / "book").mkdir(parents=True)
        table = f"| choice | ours | why |\n|---|---|---|\n| ridge | λ = 0.001 | stated |\n{row}\n"
        nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
            {"output_type": "display_data", "data": {"text/markdown": table}}]}]}
        (tmp_path / name / "_sources" / "book" / "p.ipynb").write_text(json.dumps(nb))
        return _page(tmp_path / name / "book", "p", READ + TABLE)

    problems = _problems(site("bare", "| top set | τ = 10% by clean |I|, 50 points | paper |"), chromium)
    assert len(problems) == 1 and "Markdown table row with 5 cells under a header of 3" in problems[0] \
        and "|I|" in problems[0], problems
    assert _problems(site("escaped", "| top set | τ = 10% by clean \\|I\\|, 50 points | paper |"), chromium) == []


# --- ASCII arrows and inequalities in prose ----------------------------------------------------

@pytest.mark.parametrize("snippet", ["27.3 -> 31.3", "x <- y", "A => B", "slope >= 0.5", "kappa <= 10",
                                     "0.5 +- 0.1"])
def test_ascii_arrow_in_prose_fails(tmp_path, chromium, snippet):
    problems = _problems(_page(tmp_path, "arrow", READ + f"<p>We find {snippet} here.</p>"), chromium)
    assert len(problems) == 1 and "ASCII arrow or inequality" in problems[0] and snippet in problems[0], problems


def test_arrows_in_code_math_and_urls_pass(tmp_path, chromium, mathjax):
    body = (PROSE + '<p>Run <code class="literal">a -> b >= c</code>; see <a href="https://x.org/a->b">'
            'https://x.org/a->b</a>; the bound <span class="math notranslate nohighlight">\\(x \\ge 0\\)</span> '
            'holds and 27.3 → 31.3 ≥ 6 ± 1.</p><pre>if a >= b: x => y</pre>'
            '<div class="cell_input"><pre>f = lambda: a <= b</pre></div>')
    assert _problems(_page(tmp_path, "arrow_ok", body, mathjax), chromium) == []


# --- the first screen holds prose --------------------------------------------------------------

MACHINERY = ('<h1>Chapter title</h1><details open><summary>Show code cell source</summary><pre>'
             + "\n".join(f"x{i} = {i}  # a parameter" for i in range(50)) + '</pre></details>'
             '<div class="admonition tip"><p class="admonition-title">Run this chapter</p><p>'
             + "Command, data and time of this chapter, in a box that a reader does not read first. " * 6
             + '</p></div>')


def test_first_screen_without_prose_fails_at_laptop_width(tmp_path, chromium, png):
    provenance = ('<div class="cell_output"><p><strong>Provenance.</strong> Numbers from an experiment at '
                  'paper scale, computed on a date on a CPU at a commit in a few minutes.</p></div>')
    bad = _page(tmp_path, "machinery", MACHINERY.replace("</h1>", "</h1>" + provenance)
                + '<pre>' + "\n".join(["log line"] * 10) + '</pre>' + READ + FIGURE, png=png)
    problems = _problems(bad, chromium, 1400)
    assert len(problems) == 1 and problems[0].startswith(
        "the first screen (1400 x 900) holds no prose: the first paragraph of running text shows its "
        "first lines at "), problems
    assert _problems(bad, chromium, 400) == []  # checked on a laptop's screen only
    good = _page(tmp_path, "finding", '<h1>Chapter title</h1>' + READ + MACHINERY + FIGURE, png=png)
    assert _problems(good, chromium, 1400) == []
    summary = ('<h1>Chapter title</h1><div class="admonition note in-this-chapter">'
               '<p class="admonition-title">In this chapter</p><p>'
               + "What the chapter derives and measures, and its verdicts, in running text. " * 3
               + '</p></div>')
    boxed = _page(tmp_path, "summary", summary + MACHINERY.replace("<h1>Chapter title</h1>", "")
                  + '<pre>' + "\n".join(["log line"] * 30) + '</pre>' + READ + FIGURE, png=png)
    assert _problems(boxed, chromium, 1400) == []  # the "In this chapter" summary is prose
    other = _page(tmp_path, "note", summary.replace(" in-this-chapter", "")
                  + MACHINERY.replace("<h1>Chapter title</h1>", "") + '<pre>'
                  + "\n".join(["log line"] * 30) + '</pre>' + READ + FIGURE, png=png)
    assert len(_problems(other, chromium, 1400)) == 1  # any other box is not
    short = _page(tmp_path, "short", '<h1>Title</h1><p>Short.</p><p>As Fig. 1.1 shows.</p>' + FIGURE, png=png)
    assert _problems(short, chromium, 1400) == [
        "the page has no paragraph of running text (a paragraph of at least 80 characters outside boxes, "
        "code, figures and labelled notes)"]


@pytest.fixture(scope="module")
def tippy():
    try:
        return bookbuild.ensure_tippy()
    except RuntimeError as exc:  # no npm and no copy of popper / tippy.js: the preview checks cannot run
        pytest.skip(str(exc))


# a page as Sphinx writes it (<html data-content_root>, so the preview check applies) citing its figure
# with a {numref} link and its equation with an {eq} link; the previews are attached as sphinx-tippy
# does (its per-page script: tippy(link, {content, allowHTML, onShow: typeset the math}), run on load)
REFS = ('<p>The condition number of the Gram matrix is the cube of that of the data, as '
        '<a class="reference internal" href="#fig-x"><span class="std std-numref">Fig. 1.1</span></a> shows '
        'and equation <a class="reference internal" href="#equation-eq-ok">(1.1)</a> states.</p>')
TIPS = {"#fig-x": FIGURE, "#equation-eq-ok": '<div class="math notranslate nohighlight">\\[ \\kappa(G^3) = \\kappa(G)^3 \\]</div>'}


def _preview_page(folder: Path, name: str, tippy: Path, mathjax: Path, png: Path, tips: dict | None,
                  typeset: bool = True) -> Path:
    import json

    page = _page(folder, name, REFS + SHORT_EQ + FIGURE, mathjax, png)
    html = page.read_text().replace("<html>", '<html data-content_root="./">')
    scripts = "".join(f'<script defer src="{(tippy / f).as_uri()}"></script>'
                      for f in ("popper.min.js", "tippy-bundle.umd.min.js"))
    if tips is not None:
        on_show = "onShow(i) { MathJax.typesetPromise([i.popper]); }," if typeset else ""
        tips = {k: v.replace("{src}", png.as_uri()) for k, v in tips.items()}
        scripts += ("<script>window.onload = function () { const tips = " + json.dumps(tips) + ";"
                    " for (const [sel, html] of Object.entries(tips)) { for (const a of document.querySelectorAll("
                    "'a[href=\"' + sel + '\"]')) { tippy(a, {content: html, allowHTML: true, " + on_show + "}); } } };"
                    "</script>")
    page.write_text(html.replace("</head>", scripts + "</head>"))
    return page


def test_references_show_their_previews(tmp_path, chromium, mathjax, png, tippy):
    """On a page built by Sphinx, the first {numref} and the first {eq} reference must show a preview
    holding the figure and the typeset equation; a page without previews, or whose equation preview
    is left as raw LaTeX, fails; a hand-written page (no data-content_root) is not asked for any."""
    good = _preview_page(tmp_path, "previews", tippy, mathjax, png, TIPS)
    for width in htmlcheck.WIDTHS:
        report = htmlcheck.check_page(good, chromium=chromium, width=width)
        assert report.ok and report.previews_checked == ["numref", "eq"], (width, report.problems)
    none = _preview_page(tmp_path, "no-previews", tippy, mathjax, png, None)
    assert _problems(none, chromium) == [
        "{numref} reference Fig. 1.1 (#fig-x) has no preview (sphinx-tippy did not attach one) at 1400 px",
        "{eq} reference (1.1) (#equation-eq-ok) has no preview (sphinx-tippy did not attach one) at 1400 px"]
    raw = _preview_page(tmp_path, "raw-preview", tippy, mathjax, png, TIPS, typeset=False)
    assert _problems(raw, chromium) == [
        "{eq} reference (1.1) (#equation-eq-ok) shows no preview with its content when hovered: "
        "no typeset math at 1400 px"]
    empty = _preview_page(tmp_path, "figure-less", tippy, mathjax, png, {**TIPS, "#fig-x": "<p>Fig. 1.1</p>"})
    assert _problems(empty, chromium) == [
        "{numref} reference Fig. 1.1 (#fig-x) shows no preview with its content when hovered: no figure at 1400 px"]
    plain = _page(tmp_path, "hand-written", REFS + SHORT_EQ + FIGURE, mathjax, png)
    report = htmlcheck.check_page(plain, chromium=chromium)
    assert report.ok and report.previews_checked == [], report.problems
