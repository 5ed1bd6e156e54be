"""Every stored paper-scale result names the clean commit that computed it, and that commit is in
this repository's history: a number in the book can always be traced to the code that made it.

A result that cannot name its commit (e.g. computed elsewhere before the store recorded commits)
would be listed in ``AWAITING_RECOMPUTE`` with why and how to recompute it; none is now. The list
can only shrink: an entry listed here that has a recorded commit, or that
is no longer stored, fails the test until it is removed from the list."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
ENTRIES = sorted(p.parent for p in RESULTS.glob("*/*/result.json"))

#: "<experiment>/<entry>" -> why it has no recorded commit and how to recompute it
AWAITING_RECOMPUTE: dict[str, str] = {}


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def _key(entry: Path) -> str:
    return f"{entry.parent.name}/{entry.name}"


def _provenance(entry: Path) -> dict:
    return json.loads((entry / "result.json").read_text())["provenance"]


def test_there_are_stored_results():
    assert len(ENTRIES) >= 10, ENTRIES


def test_history_is_available():
    """The commit checks need the full history (a shallow CI checkout: fetch-depth 0)."""
    assert _git("rev-parse", "--is-shallow-repository").stdout.strip() == "false", (
        "this clone is shallow: clone with the full history (actions/checkout: fetch-depth: 0)")


@pytest.mark.parametrize("entry", ENTRIES, ids=_key)
def test_result_names_a_clean_commit_in_the_history(entry):
    prov = _provenance(entry)
    commit, key = prov.get("git_commit"), _key(entry)
    if key in AWAITING_RECOMPUTE:
        assert not commit, (f"{key} now has a recorded commit ({commit}): remove it from "
                            f"AWAITING_RECOMPUTE")
        return
    assert commit, f"{key}: no recorded commit; recompute it from a clean commit"
    assert prov.get("git_dirty") is False, f"{key}: computed from uncommitted changes; recompute it from a clean commit"
    assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, f"{key}: commit {commit} is unknown here"
    assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, (
        f"{key}: commit {commit[:10]} is not in the history of HEAD")


@pytest.mark.parametrize("key", sorted(AWAITING_RECOMPUTE))
def test_awaiting_entries_are_still_stored(key):
    assert (RESULTS / key / "result.json").is_file(), f"{key} is no longer stored: remove it from AWAITING_RECOMPUTE"


def test_reverifications_name_clean_commits_in_the_history():
    for entry in ENTRIES:
        for rec in json.loads((entry / "result.json").read_text()).get("reverified") or []:
            prov = rec["provenance"]
            assert prov["git_dirty"] is False, _key(entry)
            assert _git("merge-base", "--is-ancestor", prov["git_commit"], "HEAD").returncode == 0, _key(entry)
