"""The book's execution status: every chapter, how long it takes to execute at each scale, and
when the stored results it reads were computed and whether today's code computed them.

Nothing here is typed by hand or computed: the times are the measured ones of
``results/chapters.json`` (written by ``python -m ntkbook.book.build --record-times``: seconds,
CPU cores and date per chapter per scale), the stored entries and their provenance come from the
store (:meth:`ntkbook.store.Store.list`), and "today's code" is
:func:`ntkbook.freshness.freshness`, the judgement each chapter's "About these numbers" box shows.

Which experiments a chapter reads is read from its source, the way
:func:`ntkbook.book.report.chapter_knobs` reads its knobs (:func:`chapter_experiments`): the
registered experiments its code cells load by name (``load_or_run("gram_conditioning", scale)``,
``load_stored(...)``) or import (``from ntkbook.experiments import gemma_probe``), the
``EXPERIMENTS`` of the :mod:`ntkbook.claims` modules it imports (the experiments their rules and
loaders read, e.g. ``claims.lanczos.stored_results``), for a page that calls
``scorecard.collect()`` every experiment that call reads (:func:`scorecard_experiments`), and the
experiments these load as their inputs (``gemma_probe`` reads ``gemma_pos_windows``).

:func:`chapter_rows` returns one dict per chapter of ``_toc.yml``; :func:`markdown` renders them
as the table of the book's status page (``book/status.md``).
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["chapter_times", "scorecard_experiments", "chapter_experiments", "stored_entries",
           "chapter_rows", "code_cell", "markdown"]

_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", re.M | re.S)
_CLAIMS_IMPORT = re.compile(r"^\s*from ntkbook\.claims import ([^\n]+)$|"
                            r"^\s*from ntkbook\.claims\.(\w+) import|"
                            r"^\s*import ntkbook\.claims\.(\w+)", re.M)
_EXPERIMENTS_IMPORT = re.compile(r"^\s*from ntkbook\.experiments import ([^\n]+)$", re.M)
_LOAD_CALL = re.compile(r"\b(?:load_or_run|load_stored|stored)\(\s*[\"'](\w+)[\"']")


def chapter_times(chapters_json: Path | Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{chapter: {scale: {"seconds", "cpus", "date"}}}`` from ``results/chapters.json`` (a path
    or its parsed content, ``{scale: {"book/<chapter>.md": {...}}}``); a missing file is ``{}``."""
    if not isinstance(chapters_json, Mapping):
        path = Path(chapters_json)
        chapters_json = json.loads(path.read_text()) if path.exists() else {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for scale, entries in chapters_json.items():
        if not isinstance(entries, Mapping):
            continue
        for chapter, entry in entries.items():
            if isinstance(entry, Mapping) and "seconds" in entry:
                out.setdefault(chapter, {})[scale] = dict(entry)
    return out


def scorecard_experiments() -> tuple[str, ...]:
    """The experiments :func:`ntkbook.book.scorecard.collect` reads, sorted: those of every claims
    module (:func:`~ntkbook.book.scorecard.claim_modules`) and those whose own, not superseded,
    ``scorecard(result)`` is still called."""
    from ntkbook.book import scorecard
    from ntkbook.experiments import EXPERIMENTS

    names = {n for module in scorecard.claim_modules() for n in module.EXPERIMENTS}
    replaced = scorecard.superseded()
    names |= {n for n, mod in EXPERIMENTS.items()
              if n not in replaced and hasattr(importlib.import_module(mod), "scorecard")}
    return tuple(sorted(names))


def _loaded(code: str) -> set[str]:
    """Experiment names given as a literal first argument to ``load_or_run``, ``load_stored`` or a
    claims module's ``stored`` (e.g. ``claims.stored("gemma_reinit", scale)``)."""
    return set(_LOAD_CALL.findall(code))


def _inputs(names: Iterable[str]) -> set[str]:
    """``names`` and, recursively, the experiments whose stored results their modules load as
    inputs (``experiments.load_or_run("gemma_pos_windows", ...)`` in ``gemma_probe.run``)."""
    import inspect

    from ntkbook.experiments import EXPERIMENTS

    seen: set[str] = set()
    todo = [n for n in names if n in EXPERIMENTS]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        source = inspect.getsource(importlib.import_module(EXPERIMENTS[name]))
        todo += [n for n in _loaded(source) if n in EXPERIMENTS and n not in seen]
    return seen


def chapter_experiments(chapter: str, repo: Path | None = None) -> tuple[str, ...]:
    """The registered experiments whose stored results ``chapter`` (``"book/gemma.md"`` or
    ``"gemma"``) reads, sorted: those its code cells load by name (``load_or_run("x", ...)``,
    ``load_stored("x", ...)``) or import (``from ntkbook.experiments import x``), those of the
    claims modules they import (``EXPERIMENTS``), all of :func:`scorecard_experiments` if a code
    cell calls ``scorecard.collect()``, and the experiments these load as their inputs. A chapter
    that reads none (or does not exist) gives ``()``."""
    from ntkbook.experiments import EXPERIMENTS
    from ntkbook.paths import repo_root

    path = Path(repo or repo_root()) / (chapter if chapter.endswith(".md") else f"book/{chapter}.md")
    if not path.exists():
        return ()
    code = "\n".join(_CODE_CELL.findall(path.read_text(encoding="utf-8")))
    names = _loaded(code)
    for m in _EXPERIMENTS_IMPORT.finditer(code):
        names |= {part.split(" as ")[0].strip(" ()") for part in m.group(1).split(",")}
    for m in _CLAIMS_IMPORT.finditer(code):
        if m.group(1):
            modules = [part.split(" as ")[0].strip(" ()") for part in m.group(1).split(",")]
        else:
            modules = [m.group(2) or m.group(3)]
        for module in filter(None, modules):
            try:
                claims = importlib.import_module(f"ntkbook.claims.{module}")
            except ImportError:  # a name imported from the package itself, not a module
                continue
            names |= set(getattr(claims, "EXPERIMENTS", ()))
    if re.search(r"\bscorecard\.collect\(", code):
        names |= set(scorecard_experiments())
    return tuple(sorted(_inputs(n for n in names if n in EXPERIMENTS)))


def stored_entries(store, names: Iterable[str]) -> list[dict[str, Any]]:
    """One dict per stored entry of the experiments ``names`` in ``store`` (a
    :class:`~ntkbook.store.Store`), in the store's order: ``name``, ``entry`` (its folder),
    ``status`` (``"ok"``, or ``"corrupt"``, ``"legacy"``, ``"unfinished"``: no freshness then),
    ``date`` (ISO, of the computation), ``scale`` (``"paper"``, ``"smoke"`` or ``"custom"``) and
    ``changed`` (the fields in which its config differs from that preset), and ``freshness`` (the
    :class:`~ntkbook.freshness.Freshness` of the entry, ``None`` unless ``status`` is ``"ok"``)."""
    from ntkbook.book.report import preset_of
    from ntkbook.freshness import freshness
    from ntkbook.store import Result

    wanted = set(names)
    out = []
    for row in store.list():
        if row["name"] not in wanted:
            continue
        entry = {"name": row["name"], "entry": row["entry"], "status": row["status"],
                 "date": None, "scale": None, "changed": [], "freshness": None}
        if row["status"] == "ok":
            result = Result(row["name"], row.get("config") or {}, provenance=row.get("provenance") or {},
                            reverified=list(row.get("reverified") or []),
                            rekeyed=list(row.get("rekeyed") or []))
            scale, changed = preset_of(result)
            entry.update(date=str(row.get("date") or "")[:10] or None, scale=scale, changed=changed,
                         freshness=freshness(result))
        out.append(entry)
    return out


def chapter_rows(store, chapters_json: Path | Mapping[str, Any], chapters: Sequence[str] | None = None,
                 repo: Path | None = None) -> list[dict[str, Any]]:
    """One dict per chapter (``chapters``, by default those of ``_toc.yml`` in its order):

    - ``chapter``: its path, ``"book/<name>.md"``;
    - ``times``: ``{scale: {"seconds", "cpus", "date"}}``, its measured execution times from
      ``chapters_json`` (empty where none is recorded);
    - ``experiments``: the experiments it reads (:func:`chapter_experiments`);
    - ``entries``: their stored entries in ``store`` (:func:`stored_entries`);
    - ``missing``: the experiments it reads of which ``store`` holds no entry;
    - ``computed``: ``(first, last)`` dates (ISO) of those entries' computations, ``None`` if none;
    - ``earlier``: the entries that are not usable as today's code: computed by earlier code
      (and not reproduced by today's since) or not readable (corrupt, legacy, unfinished);
    - ``today``: every entry it reads is stored and computed or reproduced by today's code (``None``
      for a chapter that reads no stored result)."""
    from ntkbook.book.build import toc_chapters
    from ntkbook.paths import repo_root

    repo = Path(repo or repo_root())
    times = chapter_times(chapters_json)
    rows = []
    for chapter in (chapters if chapters is not None else toc_chapters(repo)):
        names = chapter_experiments(chapter, repo)
        entries = stored_entries(store, names) if names else []
        dates = sorted(e["date"] for e in entries if e["date"])
        earlier = [e for e in entries if e["freshness"] is None or not e["freshness"].today]
        missing = [n for n in names if not any(e["name"] == n for e in entries)]
        rows.append({"chapter": chapter, "times": times.get(chapter, {}), "experiments": names,
                     "entries": entries, "missing": missing,
                     "computed": (dates[0], dates[-1]) if dates else None, "earlier": earlier,
                     "today": (not earlier and not missing) if names else None})
    return rows


def _time_cell(entry: Mapping[str, Any] | None) -> str:
    from ntkbook.progress import format_seconds

    if not entry:
        return "not yet measured"
    return f"{format_seconds(float(entry['seconds']))} ({entry['date']})"


def _results_cell(row: Mapping[str, Any]) -> str:
    parts = []
    for name in row["experiments"]:
        entries = [e for e in row["entries"] if e["name"] == name]
        if not entries:
            parts.append(f"`{name}` (not stored)")
            continue
        scales = sorted({e["scale"] for e in entries if e["scale"]})
        what = f"`{name}`"
        if len(entries) > 1:
            what += f" ({len(entries)} entries)"
        elif scales and scales != ["paper"]:
            what += f" ({scales[0]})"
        parts.append(what)
    return ", ".join(parts) if parts else "none"


def code_cell(row: Mapping[str, Any]) -> str:
    """The "code" cell of a row of :func:`chapter_rows`: ``"today's code"`` (every entry), or which
    entries are not, e.g. ``"computed by earlier code: `modular_transformer` (last re-verified
    2026-12-02)"``; ``"no stored result"`` for a chapter that reads none."""
    from ntkbook.freshness import EARLIER, TODAY

    if row["today"] is None:
        return "no stored result"
    notes = []
    for e in row["earlier"]:
        f = e["freshness"]
        if f is None:
            notes.append(f"`{e['name']}` ({e['status']})")
        else:
            since = (f"last re-verified {f.last_reverified[:10]}" if f.last_reverified
                     else "never re-verified")
            notes.append(f"`{e['name']}` ({since})")
    notes += [f"`{n}` (not stored)" for n in row["missing"]]
    if not notes:
        return TODAY
    head = (EARLIER if not row["missing"] else "not stored" if not row["earlier"]
            else f"{EARLIER} or not stored")
    return f"{head}: " + ", ".join(dict.fromkeys(notes))


def markdown(rows: Sequence[Mapping[str, Any]], caption: str | None = None):
    """The status table (Markdown, :func:`ntkbook.book.report.markdown_table`): one line per row of
    :func:`chapter_rows` with the chapter (linked), its execution time at smoke and at paper scale
    (with the date measured), the stored results it reads, when they were computed, and whether
    today's code computed them (:func:`code_cell`)."""
    from ntkbook.book.report import markdown_table

    lines = []
    for row in rows:
        doc = row["chapter"].removesuffix(".md").removeprefix("book/")
        computed = row["computed"]
        when = ("" if computed is None else computed[0] if computed[0] == computed[1]
                else f"{computed[0]} to {computed[1]}")
        lines.append(("{doc}`" + doc + "`", _time_cell(row["times"].get("smoke")),
                      _time_cell(row["times"].get("paper")), _results_cell(row), when or "–",
                      code_cell(row)))
    return markdown_table(["Chapter", "Smoke scale", "Paper scale", "Stored results it reads",
                           "Computed", "Code"], lines, caption=caption)
