"""The reproduction report (``book/report.md``, ``ntkbook.book.reproduction``): in the back matter
after the scorecard, its verdicts and counts generated from the scorecard's rows, never typed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from ntkbook.book import build as bookbuild
from ntkbook.book import reproduction as rp
from ntkbook.book import scorecard
from ntkbook.data import fetch

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "book" / "report.md"


def test_the_page_is_in_the_back_matter_after_the_scorecard_and_reads_no_data_set():
    chapters = bookbuild.toc_chapters(REPO)
    assert chapters.index("book/report.md") == chapters.index("book/scorecard.md") + 1
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    back = next(p for p in toc["parts"] if p["caption"] == "Back matter")
    assert {"file": "book/report"} in back["chapters"]
    assert fetch.CHAPTERS["report"] == ()


def _prose(text: str) -> str:
    """The Markdown a reader reads, without the front matter, code cells and role targets."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"```\{code-cell\}.*?```", "", text, flags=re.S)
    return re.sub(r"\{(ref|doc|glue:md)\}`[^`]*`", "ROLE", text)


def test_no_number_is_typed_in_the_prose():
    """Counts and verdicts come from the stored results (glue): the prose names tables by number
    and models and data sets by their names, and types no other digit."""
    prose = _prose(PAGE.read_text())
    for name in ("2L-ReLU", "CIFAR-10", "Gemma-3-270M", "4-bit"):
        prose = prose.replace(name, "NAME")
    prose = re.sub(r"\bTables? \d+\b", "TABLE", prose)
    assert not re.findall(r".{0,30}\d.{0,30}", prose)
    # and the verdict tables it cites are generated, numbered 1 and 2, each cited in the text
    assert 'rp.results_table(rows, "A", 1)' in PAGE.read_text() and 'rp.results_table(rows, "B", 2)' in PAGE.read_text()
    raw = _prose(PAGE.read_text())
    assert "Table 1 lists" in raw and "Table 2 lists" in raw


def _row(claim_id: str, paper: str, chapter: str, verdict: str, source: str = "") -> scorecard.Row:
    claim = scorecard.Claim(id=claim_id, paper=paper, claim="A claim with $x^2$ and a | pipe.",
                            reported="about 3", chapter=chapter)
    return scorecard.Row(claim=claim, verdict=verdict, ours="x", note="", source=source,
                         experiments=[claim_id.split(".")[1]])


def test_tables_counts_and_easy_claims_follow_the_rows():
    rows = [_row("A.one", "A", "influence", "reproduces", "`one`, paper scale, NVIDIA H200, 2026-11-30, today's code"),
            _row("A.two", "A", "influence", "does not", "`two`, paper scale, CPU, 2026-12-01, today's code"),
            _row("A.three", "A", "attention_width", scorecard.NOT_TESTED, "`three`, paper scale, CPU, 2026-12-01"),
            _row("B.four", "B", "gemma", "partly", "`four`, paper scale, CPU, 2026-12-02")]
    table = rp.results_table(rows, "A", 1)
    lines = table.splitlines()
    assert lines[:2] == ["| claim | verdict | measured in |", "|---|---|---|"]
    body = [ln for ln in lines if ln.startswith("| {ref}")]
    assert [ln.split(" | ")[1] for ln in body] == ["reproduces", "does not", "not tested"]
    assert all(ln.count(" | ") == 2 for ln in body), "a pipe in a claim split its row"
    assert lines[-1].startswith("**Table 1.** The claims of Paper A") and "3 claims: 1 reproduce, 0 partly, 1 do not, 1 not tested" in lines[-1]
    assert rp.headline(rows, "B") == "1 claims: 0 reproduce, 1 partly, 0 do not"
    assert rp.reproduced(rows, "A") == "{ref}`A.one <sc-a-one>`"
    assert rp.reproduced(rows, "B") == "none of its claims reproduced"
    assert rp.scope(rows, "A") == ("- {doc}`Influence <influence>`: 2 claims ({ref}`A.one <sc-a-one>`, "
                                   "{ref}`A.two <sc-a-two>`)\n"
                                   "- {doc}`Attention width <attention_width>`: 1 claim ({ref}`A.three <sc-a-three>`)")
    assert rp.sources(rows, "A") == ("3 stored experiments (`one`, `three`, `two`), computed on CPU and NVIDIA H200")
    with pytest.raises(ValueError, match="unknown paper"):
        rp.paper_rows(rows, "C")
    # a verdict that changes changes the page
    moved = [rows[0], dataclasses.replace(rows[1], verdict="reproduces"), *rows[2:]]
    assert rp.headline(moved, "A") == "3 claims: 2 reproduce, 0 partly, 0 do not, 1 not tested"

