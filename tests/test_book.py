"""The book: every chapter executes at smoke scale, the book builds with warnings as errors,
and the built HTML shows its figures and math and no error output in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import book_builds
import nbformat
import pytest

from ntkbook.book import build as bookbuild, htmlcheck

REPO = Path(__file__).resolve().parents[1]
OUT = book_builds.SMOKE_OUT
CHAPTERS = bookbuild.toc_chapters(REPO)

pytestmark = pytest.mark.book


@pytest.fixture(scope="session")
def smoke_build():
    """The whole book built at smoke scale, once per test run (tests/book_builds.py: under xdist it
    was started in the background when the run began): exit code, output, chapter summary and
    ``git status`` before and after."""
    return book_builds.result("smoke")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_executes(smoke_build, chapter):
    chapters = smoke_build["summary"].get("chapters", smoke_build["summary"])
    entry = chapters.get(chapter)
    assert entry is not None, f"{chapter} was not executed:\n{smoke_build['log'][-3000:]}"
    assert entry["status"] == "ok", entry.get("error")


def test_book_builds_with_warnings_as_errors(smoke_build):
    assert smoke_build["code"] == 0, smoke_build["log"][-5000:]
    assert (OUT / "html" / "index.html").exists()


def test_every_chapter_has_a_page_and_links_resolve(smoke_build):
    """No partial build, and every internal link (pages, images, scripts, #anchors) resolves
    (lychee, offline)."""
    assert smoke_build["code"] == 0, "the book did not build"
    assert htmlcheck.missing_pages(OUT / "html", CHAPTERS) == []
    assert htmlcheck.check_links(OUT / "html") == []


def test_source_tree_stays_clean(smoke_build):
    assert smoke_build["status_after"] == smoke_build["status_before"]


def _expected_figures(chapter: str) -> int:
    """Images the page must show: glue figures of the source, plus figure outputs of shown cells."""
    nb_path = OUT / "src" / Path(chapter).with_suffix(".ipynb")
    nb = nbformat.read(nb_path, as_version=4)
    n = (REPO / chapter).read_text().count("```{glue:figure}")
    for cell in nb.cells:
        if cell.cell_type != "code" or "remove-cell" in cell.metadata.get("tags", []) \
                or "remove-output" in cell.metadata.get("tags", []):
            continue
        n += sum(1 for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))
    return n


def _chromium() -> str:
    path = htmlcheck.find_chromium()
    if path is None:
        pytest.skip("Debian's chromium is not installed (make test installs it when run as root); "
                    "the browser check of the HTML was skipped")
    return path


def check_page(smoke_build, chapter: str, width: int) -> None:
    """At ``width`` CSS px: figures load, numbered, captioned, with alt text; math
    renders and fits; tables fit or scroll in their own box; no error output or text leftovers."""
    chromium = _chromium()
    assert smoke_build["code"] == 0, "the book did not build"
    page = OUT / "html" / Path(chapter).with_suffix(".html")
    report = htmlcheck.check_page(page, chromium=chromium, width=width)
    assert report.ok, f"{page} at {width} px:\n" + "\n".join(report.problems)
    assert report.images >= _expected_figures(chapter), (
        f"{page}: {report.images} images shown, the notebook has {_expected_figures(chapter)} figures")
    source = (REPO / chapter).read_text()
    # the previews of references were tried (and passed, above) where the chapter has such references
    for kind in ("numref", "eq"):
        if "{" + kind + "}`" in source:
            assert kind in report.previews_checked, f"{page}: no {{{kind}}} reference's preview was checked"
    if "$$" in source or "$" in source:
        assert report.math > 0 and report.math_rendered == report.math


def test_the_two_widths_are_the_two_page_checks():
    """A width added to ``htmlcheck.WIDTHS`` needs its own test file (laptop: here; phone:
    tests/test_book_phone.py), else it would go unchecked."""
    assert len(htmlcheck.WIDTHS) == 2 and htmlcheck.WIDTHS[0] > htmlcheck.WIDTHS[1]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_page_in_browser_at_laptop_width(smoke_build, chapter):
    """:func:`check_page` at a laptop's width (a phone's: tests/test_book_phone.py)."""
    check_page(smoke_build, chapter, htmlcheck.WIDTHS[0])


def test_browser_check_catches_broken_figure(tmp_path):
    chromium = _chromium()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(tmp_path / "ok.png", dpi=100, metadata={htmlcheck.FONT_KEY: "10", htmlcheck.DPI_KEY: "100"})
    plt.close(fig)
    figure = ('<figure><img alt="A test image" src="{}"><figcaption><span class="caption-number">Fig. 1 '
              '</span><span class="caption-text">What to see.</span></figcaption></figure>')
    prose = "<p>" + "A paragraph of running text that cites Fig. 1 and says what it shows. " * 2 + "</p>"
    good = tmp_path / "good.html"
    good.write_text(f'<html><body><main>{prose}{figure.format("ok.png")}</main></body></html>')
    assert htmlcheck.check_page(good, chromium=chromium).ok
    bad = tmp_path / "bad.html"
    bad.write_text(f'<html><body><main>{figure.format("ok.png")}{figure.format("missing.png")}</main></body></html>')
    report = htmlcheck.check_page(bad, chromium=chromium)
    assert not report.ok and report.broken_images == ["missing.png"]
    err = tmp_path / "err.html"
    err.write_text('<html><body><main><div class="output stderr">Traceback (most recent call last)</div>'
                   '</main></body></html>')
    assert not htmlcheck.check_page(err, chromium=chromium).ok


def test_failing_chapter_names_chapter_and_cell(tmp_path):
    chapter = tmp_path / "broken.md"
    chapter.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n# Broken\n\n"
        "```{code-cell} ipython3\n:tags: [parameters]\nscale = 'paper'\n```\n\n"
        "```{code-cell} ipython3\nraise ValueError('deliberate failure')\n```\n"
    )
    with pytest.raises(bookbuild.ChapterError, match=r"broken.md failed in cell .*ValueError: deliberate failure"):
        bookbuild.execute_chapter(chapter, tmp_path / "out" / "broken.ipynb", "smoke")


# ------------------------------------------------------------------------------------------------
# conventions of the chapters' sources (fast: no execution)
# ------------------------------------------------------------------------------------------------
import re  # noqa: E402

#: chapters of the "reader" helper: the Run-this-chapter box and the provenance line are checked here
READER_CHAPTERS = ["book/intro.md", "book/ntk_in_one_page.md", "book/entk_lanczos.md", "book/attention_width.md",
                   "book/modular_mlp.md", "book/modular_transformer.md", "book/gemma.md", "book/influence.md"]
NO_EXERCISES = {"book/scorecard.md", "book/report.md", "book/status.md", "book/fork.md", "book/cite.md", "book/references.md"}
FEWER_EXERCISES = {"book/intro.md": 1, "book/ntk_in_one_page.md": 1}


def _cells(chapter: str):
    import jupytext

    return jupytext.read(REPO / chapter).cells


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c not in NO_EXERCISES])
def test_chapter_has_exercises(chapter):
    text = (REPO / chapter).read_text()
    n = len(re.findall(r"^```\{exercise\}", text, re.M))
    lo = FEWER_EXERCISES.get(chapter, 3)
    assert lo <= n <= 5, f"{chapter}: {n} exercises (want {lo}-5, sphinx-exercise)"
    labels = re.findall(r"^```\{exercise\}\n:label: (\S+)", text, re.M)
    for label in labels:
        assert re.search(rf"^```\{{solution(-start)?\}} {re.escape(label)}$", text, re.M), \
            f"{chapter}: exercise {label} has no solution"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_glue_figures_have_name_alt_and_caption(chapter):
    text = (REPO / chapter).read_text()
    for m in re.finditer(r"^```\{glue:figure\} (\S+)\n(.*?)^```$", text, re.M | re.S):
        body = m.group(2)
        assert f":name: {m.group(1)}" in body, f"{chapter}: glue:figure {m.group(1)} has no :name:"
        assert re.search(r"^:alt: \S", body, re.M), f"{chapter}: glue:figure {m.group(1)} has no :alt:"
        caption = "\n".join(ln for ln in body.splitlines() if not ln.startswith(":")).strip()
        assert caption, f"{chapter}: glue:figure {m.group(1)} has no caption"


@pytest.mark.parametrize("chapter", READER_CHAPTERS)
def test_reader_chapters_open_with_their_finding(chapter):
    """Title, then an "In this chapter" box whose verdict line is glued from the results, then the
    run box and the folded provenance (``opening``); no code is shown before the first sentence,
    the parameters cell included (papermill still finds it by its tag; the run box names its
    knobs)."""
    text = (REPO / chapter).read_text()
    cells = _cells(chapter)
    code = [c for c in cells if c.cell_type == "code"]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert params and "scale" in params[0].source
    assert len([ln for ln in params[0].source.splitlines() if "=" in ln]) >= 2, \
        f"{chapter}: the parameters cell holds only the scale (add the knobs a student would turn)"
    # everything before the first prose paragraph: removed code, the box, the opening
    lines = text[text.index("\n# ") + 1:].splitlines()[1:]
    fence, colon, end = None, False, len(lines)
    for i, ln in enumerate(lines):
        if fence:
            fence = None if ln.strip() == fence else fence
        elif ln.startswith("```"):
            fence = re.match(r"`+", ln).group(0)
        elif ln.startswith(":::"):
            colon = ln.strip() != ":::"
        elif not colon and ln.strip() and not ln.startswith(("#", "(")):
            end = i
            break
    head = "\n".join(lines[:end])
    shown = re.findall(r"^```\{code-cell\}[^\n]*\n(?!:tags: \[[^\]]*\bremove-(?:cell|input)\b)", head, re.M)
    assert not shown, f"{chapter}: a code cell is shown before the first sentence"
    box = re.search(r"^:::\{admonition\} In this (?:chapter|book)\n(.*?)^:::$", head, re.M | re.S)
    assert box, f"{chapter}: no 'In this chapter' box before the first sentence"
    assert re.search(r"\*\*(Derives|Builds)\*\*", box.group(1)) and "**Measures**" in box.group(1)
    key = re.search(r"```\{glue:md\} (\S+)", box.group(1))
    assert key, f"{chapter}: the box's verdict line is not glued from the results"
    assert re.search(rf'glue\("{key.group(1)}", (?:chapter_verdicts\(|Markdown\(f"\*\*Verdicts)', text), \
        f"{chapter}: the verdict line is not generated (chapter_verdicts or the scorecard's headline)"
    after = head[box.end():]
    glued = [k for k in re.findall(r"```\{glue:md\} (\S+)", after)
             if re.search(rf'glue\("{k}", Markdown\(str\(opening\(', text)]
    assert "opening(" in after or glued, f"{chapter}: no run box (opening) after the summary"
    assert "provenance_line(" not in text and "run_this_chapter(" not in text, \
        f"{chapter}: use opening(): the run box and the folded provenance"
    uses_results = any("load_or_run(" in c.source for c in code)
    if uses_results:
        assert re.search(r"opening\(\"[a-z_]+\", \[", head), f"{chapter}: the opening does not name its results"
    for c in code:
        tags = c.metadata.get("tags", [])
        if "remove-input" in tags:
            assert not re.search(r"\b(plot_\w+|glue\(\"fig-|Markdown\()", c.source) or \
                "claim_line(" in c.source, f"{chapter}: a figure or table cell is remove-input:\n{c.source[:200]}"


def test_figures_of_reader_chapters_are_readable():
    """Every figure of the intro, eNTK and modular chapters (drawn from the stored paper-scale
    results) keeps its smallest text at 9 pt or more when scaled to the text column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ntkbook.experiments import load_or_run
    from ntkbook.plotting import MIN_FONT_PX, display_font_px
    from ntkbook.plotting import entk as entk_plots, intro as intro_plots, modular as modular_plots

    mm = load_or_run("modular_mlp", "paper")
    demo = load_or_run("demo_sweep", "paper")
    eigs = np.linspace(1, 100, 50)
    figures = {
        "intro overview": intro_plots.plot_overview(eigs, eigs ** 3, demo),
        "entk convergence": entk_plots.plot_entk_convergence(load_or_run("entk_convergence", "paper")),
        "lanczos ghosts": entk_plots.plot_lanczos_ghosts(load_or_run("lanczos_ghosts", "paper")),
        "grokking": modular_plots.plot_grokking(mm),
        "spectra": modular_plots.plot_spectra(mm),
        "eigenvectors": modular_plots.plot_eigenvectors(mm, "final"),
        "dynamics": modular_plots.plot_dynamics(mm),
        "crosscheck": modular_plots.plot_crosscheck(mm),
    }
    small = {name: round(display_font_px(fig), 1) for name, fig in figures.items()
             if display_font_px(fig) < MIN_FONT_PX}
    for fig in figures.values():
        plt.close(fig)
    assert not small, f"text smaller than 9 pt at display size (px): {small}"
    # the lanczos panel (a): one legend entry per plotted Ritz value
    fig = entk_plots.plot_lanczos_ghosts(load_or_run("lanczos_ghosts", "paper"))
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    plt.close(fig)
    n_top = int(load_or_run("lanczos_ghosts", "paper").config["n_top"])
    assert sum(lab.startswith("$\\theta_") for lab in labels) == n_top, labels


def test_progress_lines_are_moved_out_of_the_page():
    import nbformat

    outs = [nbformat.v4.new_output("stream", name="stdout", text=(
        "computing modular_mlp (config 137333628741, code 7a4b010b), roughly 31.5s on 2 CPU cores\n"
        "modular_mlp p=23 square: 3/24 ( 12%) elapsed 13.4s, ~1m34s left | seed 0\n"
        "ranks 45-88 vs sum features: 18.84 of 22\n"
        "modular_mlp p=23 square: done, 24/24 in 1m52s\n")),
        nbformat.v4.new_output("stream", name="stdout", text="computing demo_sweep (config 6995a411f747)\n")]
    removed: list[str] = []
    kept = bookbuild._strip_progress(outs, removed)
    assert [o["text"] for o in kept] == ["ranks 45-88 vs sum features: 18.84 of 22\n"]
    assert len(removed) == 4
