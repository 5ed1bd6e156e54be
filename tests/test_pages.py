"""What every page renders from results: one typography (:func:`ntkbook.book.report.typeset`),
tables whose cells cannot break their row, the boxes under a chapter's title, and the banner of a
smoke build."""

from __future__ import annotations

import pytest

from ntkbook.book import build as bookbuild
from ntkbook.book import report


@pytest.mark.parametrize("raw, typeset", [
    ("slope -0.340 (decreasing)", "slope −0.340 (decreasing)"),
    ("27.3 -> 31.3 %", "27.3 → 31.3 %"),
    (">= 6x on MNIST; <= 2x", "≥ 6× on MNIST; ≤ 2×"),
    ("ratio 1.9x; paper 7.9x.", "ratio 1.9×; paper 7.9×."),
    ("synthetic (400 x 400)", "synthetic (400 × 400)"),
    ("float64 singular values of X X^T X", "float64 singular values of $X X^\\top X$"),
    ("(-1/2) and -.5", "(−1/2) and −.5"),
    # left alone: identifiers, dates, ranges, code, math, roles, URLs, words
    ("`mnist_3v8` fgsm-pgd PGD-10 top-10%", "`mnist_3v8` fgsm-pgd PGD-10 top-10%"),
    ("2026-11-30, ranks 57-112, 3x3, 0x1f", "2026-11-30, ranks 57-112, 3x3, 0x1f"),
    ("$-1/2$ and $a->b$ and `x -> -1`", "$-1/2$ and $a->b$ and `x -> -1`"),
    ("{ref}`A.x <sec-a-1>` at https://x.org/a-1->b", "{ref}`A.x <sec-a-1>` at https://x.org/a-1->b"),
    ("x-axis, W_Q, exact", "x-axis, W_Q, exact"),
])
def test_typeset(raw, typeset):
    assert report.typeset(raw) == typeset


def test_table_cells_are_typeset_and_cannot_split_the_row():
    md = report.markdown_table(["choice", "ours"], [("top set", "τ = 10% by clean |I|, slope -0.3")],
                               caption="**Table 4.1.** The choices.").data
    lines = md.splitlines()
    assert lines[0] == "**Table 4.1.** The choices." and lines[1] == ""
    row = lines[-1]
    assert row == "| top set | τ = 10% by clean \\|I\\|, slope −0.3 |"
    # unescaped pipes split cells: the row has exactly as many as the header
    import re
    assert len(re.findall(r"(?<!\\)\|", row)) == len(re.findall(r"(?<!\\)\|", lines[2]))


def test_run_box_names_the_knobs_of_the_parameters_cell():
    knobs = report.chapter_knobs("modular_mlp")
    assert knobs[0] == "scale" and {"p", "width", "epochs", "seeds", "kernel"} <= set(knobs)
    box = report.run_this_chapter("modular_mlp")
    assert "`scale`, `p`, `width`" in box
    assert report.chapter_knobs("no_such_chapter") == []


def test_about_these_numbers_is_a_collapsed_provenance_line():
    from ntkbook.store import Result

    r = Result(name="lanczos_ghosts", config={}, provenance={"date": "2026-11-30", "device": "cpu"})
    box = report.about_these_numbers(r)
    assert box.startswith("```{admonition} About these numbers\n:class: dropdown")
    assert "`lanczos_ghosts`" in box and "2026-11-30" in box and "**Provenance.**" not in box


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_smoke_build_has_a_banner_on_every_page(scale):
    site = bookbuild.site_config({"title": "t"}, None, scale=scale)
    theme = site["sphinx"]["config"]["html_theme_options"]
    if scale == "smoke":
        assert "not the paper-scale results" in theme["announcement"]
    else:
        assert "announcement" not in theme


def test_config_has_no_second_search_bar():
    import yaml

    cfg = yaml.safe_load((bookbuild.REPO / "_config.yml").read_text())
    assert cfg["sphinx"]["config"]["html_theme_options"]["navbar_persistent"] == []


def test_build_typesets_running_text_but_not_code_or_math():
    from docutils import nodes

    para = nodes.paragraph("", "", nodes.Text("slope -0.34, 1.9x, a -> b "),
                           nodes.literal("", "x = -1 -> 2"), nodes.math("", "-1/2"))
    block = nodes.literal_block("", "print(-1)")
    doc = nodes.container("", para, block)
    bookbuild._typeset_doctree(None, doc, "x")
    assert para.astext() == "slope −0.34, 1.9×, a → b x = -1 -> 2-1/2"
    assert block.astext() == "print(-1)"


def test_recorded_smoke_times_come_from_an_empty_cache(tmp_path, monkeypatch):
    """`--record-times` at smoke scale executes the chapters with an empty smoke cache, so the
    times stored for the run boxes are those of a run from scratch, not of reused results."""
    import os

    monkeypatch.setenv("NTKBOOK_CACHE", str(tmp_path))
    (tmp_path / "stored").mkdir()
    with bookbuild._fresh_smoke_cache(True):
        inside = os.environ["NTKBOOK_CACHE"]
        assert inside != str(tmp_path) and os.path.isdir(inside) and not os.listdir(inside)
    assert os.environ["NTKBOOK_CACHE"] == str(tmp_path) and not os.path.exists(inside)
    with bookbuild._fresh_smoke_cache(False):
        assert os.environ["NTKBOOK_CACHE"] == str(tmp_path)
    monkeypatch.delenv("NTKBOOK_CACHE")
    with bookbuild._fresh_smoke_cache(True):
        assert os.environ["NTKBOOK_CACHE"]
    assert "NTKBOOK_CACHE" not in os.environ
