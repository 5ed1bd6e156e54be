"""The reproduction report (``book/report.md``): the parts of the page that come from the scorecard.

Everything with a number or a verdict in it is generated here from the rows of
:func:`ntkbook.book.scorecard.collect` (the verdict rules of :mod:`ntkbook.claims` applied to the
stored paper-scale results): the scope of each paper (the claims tested, by chapter), the results
table per paper, the counts, and the claims that reproduced (what was easy). The page's prose says
how the work was done and what was difficult; it types no number of its own.
"""

from __future__ import annotations

import re
from typing import Iterable

from ntkbook.book import scorecard
from ntkbook.book.scorecard import NOT_MEASURED, NOT_TESTED, Row

__all__ = ["PAPERS", "paper_rows", "scope", "results_table", "headline", "reproduced", "sources"]

#: the papers the report covers, with the background claims both build on
PAPERS = {"A": "Paper A", "B": "Paper B", "background": "the background both papers build on"}

_VERDICT = {"reproduces": "reproduces", "partly": "partly", "does not": "does not",
            NOT_TESTED: "not tested", NOT_MEASURED: "not yet measured"}


def paper_rows(rows: Iterable[Row], paper: str) -> list[Row]:
    """The rows of the claims of ``paper`` ("A", "B" or "background"), in catalogue order."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}: one of {', '.join(PAPERS)}")
    return [r for r in rows if r.claim.paper == paper]


def _chapter(chapter: str) -> str:
    """A link to ``book/<chapter>.md`` under its short name (the scorecard's), narrow on a phone."""
    short = scorecard._CHAPTER_SHORT.get(chapter)
    return f"{{doc}}`{short} <{chapter}>`" if short else f"{{doc}}`{chapter}`"


def _chapters(rows: list[Row]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r.claim.chapter not in seen:
            seen.append(r.claim.chapter)
    return seen


def scope(rows: Iterable[Row], paper: str) -> str:
    """The claims of ``paper`` the book tests, as a Markdown list by chapter: one item per chapter
    ({doc} link) naming its claims by id (linked to their details on the scorecard page)."""
    sel = paper_rows(rows, paper)
    if not sel:
        return "No claim of this paper is catalogued."
    items = []
    for chapter in _chapters(sel):
        ids = ", ".join(f"{{ref}}`{r.claim.id} <{scorecard.card_label(r.claim.id)}>`"
                        for r in sel if r.claim.chapter == chapter)
        n = sum(1 for r in sel if r.claim.chapter == chapter)
        items.append(f"- {_chapter(chapter)}: {n} claim{'s' if n != 1 else ''} ({ids})")
    return "\n".join(items)


def headline(rows: Iterable[Row], paper: str) -> str:
    """The counts of ``paper``'s verdicts in one phrase ("12 claims: 5 reproduce, ...")."""
    return scorecard.headline(paper_rows(rows, paper))


def results_table(rows: Iterable[Row], paper: str, number: int) -> str:
    """``paper``'s claims and verdicts as a Markdown table (claim, verdict, chapter), followed by its
    caption paragraph "**Table <number>.** ..." (the browser check's form of a numbered table)."""
    from ntkbook.book.report import _table_cell, typeset

    sel = paper_rows(rows, paper)
    lines = ["| claim | verdict | measured in |", "|---|---|---|"]
    for r in sel:
        c = r.claim
        lines.append(f"| {{ref}}`{c.id} <{scorecard.card_label(c.id)}>`: {_table_cell(typeset(c.claim))} "
                     f"| {_VERDICT[r.verdict]} | {_chapter(c.chapter)} |")
    caption = (f"**Table {number}.** The claims of {PAPERS[paper]} and our verdicts, from the stored "
               f"paper-scale results ({headline(sel, paper)}); each claim links to its details on the "
               "scorecard: the paper's number, ours, the rule and the stored result.")
    return "\n".join(lines) + "\n\n" + caption


def reproduced(rows: Iterable[Row], paper: str) -> str:
    """The claims of ``paper`` that reproduce, as a sentence with their ids linked; or says none did."""
    sel = [r for r in paper_rows(rows, paper) if r.verdict == "reproduces"]
    if not sel:
        return "none of its claims reproduced"
    return ", ".join(f"{{ref}}`{r.claim.id} <{scorecard.card_label(r.claim.id)}>`" for r in sel)


def sources(rows: Iterable[Row], paper: str) -> str:
    """The stored results ``paper``'s verdicts read: the experiments, and the devices they ran on
    (from the rows' provenance, e.g. "paper scale, NVIDIA H200, 2026-11-30")."""
    sel = [r for r in paper_rows(rows, paper) if r.verdict != NOT_MEASURED]
    experiments = sorted({e for r in sel for e in r.experiments})
    devices = sorted({m.group(0).strip() for r in sel
                      for m in re.finditer(r"\b(CPU|NVIDIA [^,;()]+|TPU[^,;()]*)", r.source)})
    if not experiments:
        return "no stored result yet"
    text = f"{len(experiments)} stored experiment{'s' if len(experiments) != 1 else ''} (" + \
        ", ".join(f"`{e}`" for e in experiments) + ")"
    if devices:
        text += ", computed on " + " and ".join([", ".join(devices[:-1]), devices[-1]] if len(devices) > 1 else devices)
    return text
