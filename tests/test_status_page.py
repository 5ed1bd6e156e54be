"""The execution status page (``book/status.md``, ``ntkbook.book.status``): a row for every page of
``_toc.yml`` with its measured times, and stored results of earlier code shown as such."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ntkbook import experiments
from ntkbook.book import build as bookbuild
from ntkbook.book import status
from ntkbook.experiments import demo_sweep
from ntkbook.freshness import EARLIER, TODAY
from ntkbook.progress import format_seconds
from ntkbook.store import Result, Store

REPO = Path(__file__).resolve().parents[1]
TIMES = REPO / "results" / "chapters.json"


@pytest.fixture(scope="module")
def rows():
    return status.chapter_rows(Store(REPO / "results"), TIMES, repo=REPO)


def test_a_row_for_every_page_of_the_toc_with_the_recorded_times(rows):
    assert [r["chapter"] for r in rows] == bookbuild.toc_chapters(REPO)
    assert "book/status.md" in [r["chapter"] for r in rows]
    recorded = json.loads(TIMES.read_text())
    for row in rows:
        want = {s: e[row["chapter"]] for s, e in recorded.items() if row["chapter"] in e}
        assert row["times"] == want, row["chapter"]
    table = status.markdown(rows).data.splitlines()
    body = [ln for ln in table if ln.startswith("| {doc}")]
    assert len(body) == len(rows)
    for row, line in zip(rows, body):
        assert line.startswith(f"| {{doc}}`{row['chapter'][5:-3]}` |")
        for scale in ("smoke", "paper"):
            t = row["times"].get(scale)
            assert (format_seconds(float(t["seconds"])) if t else "not yet measured") in line


def test_the_experiments_a_page_reads_come_from_its_source():
    # loaded by name (load_or_run, or claims.stored: gemma_reinit), and the input its experiments load
    # (gemma_probe, gemma_controls, gemma_kernel_inputs and gemma_reinit read gemma_pos_windows)
    assert status.chapter_experiments("gemma", REPO) == ("gemma_bootstrap", "gemma_controls", "gemma_kernel_inputs",
                                                         "gemma_pos_windows", "gemma_probe", "gemma_reinit")
    assert status.chapter_experiments("book/modular_mlp.md", REPO) == ("modular_mlp",)
    # a claims module imported: its EXPERIMENTS (the Lanczos cross-checks of the other operators)
    assert {"lanczos_ghosts", "modular_transformer"} <= set(status.chapter_experiments("entk_lanczos", REPO))
    # the scorecard reads what scorecard.collect reads; a chapter name in a dict is not a read
    assert set(status.scorecard_experiments()) <= set(status.chapter_experiments("scorecard", REPO))
    assert status.chapter_experiments("fork", REPO) == ()
    assert status.chapter_experiments("no_such_page", REPO) == ()


def _chapter(repo: Path, name: str, code: str) -> str:
    (repo / "book").mkdir(parents=True, exist_ok=True)
    (repo / "book" / f"{name}.md").write_text(f"# {name}\n\n```{{code-cell}} ipython3\n{code}\n```\n")
    return f"book/{name}.md"


def _store_demo(store: Store, code: str | None, seed: int, date: str) -> None:
    config = dataclasses.asdict(dataclasses.replace(demo_sweep.Config.paper(), seed=seed))
    prov = {"date": date, "code_sha256": code, "device": "cpu"}
    store.save(Result("demo_sweep", config, scalars={"loglog_slope": -0.5}, provenance=prov),
               demo_sweep.VERSION)


def test_a_stored_result_of_earlier_code_is_not_todays(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    page = _chapter(tmp_path / "repo", "demo", 'res = load_or_run("demo_sweep", scale)')
    times = {"paper": {page: {"seconds": 75.3, "cpus": 2, "date": "2026-12-04"}}}
    store = Store(tmp_path / "results")
    now = experiments.code_hash(demo_sweep.__name__)
    _store_demo(store, now, 7, "2026-12-02T10:00:00+00:00")
    [row] = status.chapter_rows(store, times, chapters=[page], repo=tmp_path / "repo")
    assert row["experiments"] == ("demo_sweep",) and row["today"] is True
    assert row["computed"] == ("2026-12-02", "2026-12-02")
    assert status.code_cell(row) == TODAY
    # a second entry whose code hash is not today's: the page is no longer all today's code
    _store_demo(store, "0" * 16, 9, "2026-11-01T00:00:00+00:00")
    [row] = status.chapter_rows(store, times, chapters=[page], repo=tmp_path / "repo")
    assert row["today"] is False and [e["date"] for e in row["earlier"]] == ["2026-11-01"]
    assert row["computed"] == ("2026-11-01", "2026-12-02")
    cell = status.code_cell(row)
    assert cell.startswith(EARLIER) and "`demo_sweep` (never re-verified)" in cell
    line = status.markdown([row]).data.splitlines()[-1]
    assert "1m15s (2026-12-04)" in line and "not yet measured" in line  # no smoke time recorded
    assert "`demo_sweep` (2 entries)" in line and "2026-11-01 to 2026-12-02" in line and EARLIER in line


def test_a_page_that_reads_nothing_stored_and_an_experiment_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    repo = tmp_path / "repo"
    pages = [_chapter(repo, "plain", "x = 1"), _chapter(repo, "reads", 'load_stored("demo_sweep")')]
    plain, reads = status.chapter_rows(Store(tmp_path / "results"), {}, chapters=pages, repo=repo)
    assert plain["today"] is None and status.code_cell(plain) == "no stored result"
    assert reads["missing"] == ["demo_sweep"] and reads["today"] is False
    assert status.code_cell(reads).startswith("not stored")
