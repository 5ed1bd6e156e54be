"""The refactor proof (``tools/prove_refactor.py``): a refactor that changes the code hash but not
what the code computes re-keys the stored results it touched, with evidence; one that changes a
single bit of an output, or refuses a stored configuration, re-keys nothing and says what differed.

Every case runs ``demo_sweep``'s smoke preset (a fraction of a second) in fresh interpreters, with a
copy of the library before the refactor and one after it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from ntkbook import experiments, freshness
from ntkbook import store as store_mod
from ntkbook.codehash import SCHEME, Library, code_hash
from ntkbook.experiments import demo_sweep
from ntkbook.store import Store

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib"
MODULE = "ntkbook.experiments.demo_sweep"
BASE, HEAD = "ba5e" + "0" * 36, "4ead" + "0" * 36

_spec = importlib.util.spec_from_file_location("prove_refactor_tool", ROOT / "tools" / "prove_refactor.py")
tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tool
_spec.loader.exec_module(tool)

#: a refactor: the mean written another way, same operations, same bits
REFACTOR = ("estimates = np.maximum(z, 0.0).mean(axis=1)", "estimates = np.mean(np.maximum(z, 0.0), axis=1)")
#: a behaviour change of one unit in the last place of every estimate
ONE_ULP = ("estimates = np.maximum(z, 0.0).mean(axis=1)",
           "estimates = np.nextafter(np.maximum(z, 0.0).mean(axis=1), np.inf)")
#: validation refactored wrongly: a configuration accepted before is refused now
STRICTER = ('v.positive_int(NAME, "repeats", self.repeats, "an RMS error needs one estimate")',
            'v.require(NAME, "repeats", self.repeats, 0 < self.repeats <= 150, "at most 150", "a cap")')


def _lib_copy(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    lib = tmp_path / name / "lib"
    shutil.copytree(LIB / "ntkbook", lib / "ntkbook", ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        path = lib / "ntkbook" / "experiments" / "demo_sweep.py"
        text = path.read_text()
        assert text.count(edit[0]) == 1, edit[0]
        path.write_text(text.replace(*edit))
    return lib


def _entry_of(tmp_path: Path, monkeypatch, lib: Path, **overrides) -> Store:
    """A store with demo_sweep's smoke entry, vouched for by the code hash of ``lib``."""
    store = Store(tmp_path / "results")
    with monkeypatch.context() as m:
        m.setattr(experiments, "code_hash", lambda name: code_hash(name, Library(lib)))
        experiments.run_and_save("demo_sweep", demo_sweep.Config(**{**_smoke(), **overrides}), store)
    return store


def _smoke() -> dict:
    import dataclasses

    return dataclasses.asdict(demo_sweep.Config.smoke())


def _prove(tmp_path: Path, store: Store, base: Path, head: Path, **kw):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    lines: list[str] = []
    reports = tool.rekey_refactor(store, base, head, base_commit=BASE, head_commit=HEAD, work=work,
                                  only=["demo_sweep"], report=lines.append, **kw)
    return reports, lines


def _fresh_under(result, lib: Path, monkeypatch) -> freshness.Freshness:
    monkeypatch.setattr(freshness, "code_hash", lambda name: code_hash(name, Library(lib)))
    return freshness.freshness(result)


def test_a_behaviour_preserving_refactor_is_proved_and_re_keyed(tmp_path, monkeypatch):
    base, head = _lib_copy(tmp_path, "base"), _lib_copy(tmp_path, "head", REFACTOR)
    assert code_hash(MODULE, Library(base)) != code_hash(MODULE, Library(head))  # the hash sees it
    store = _entry_of(tmp_path, monkeypatch, base)
    stored = store.load("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    assert not _fresh_under(stored, head, monkeypatch).today  # stale by the refactor alone

    (rep,), lines = _prove(tmp_path, store, base, head)
    assert any("identical at BASE and HEAD" in ln for ln in lines), lines
    assert rep.after == freshness.TODAY and len(rep.records) == 1
    after = store.load("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    (rec,) = after.rekeyed
    assert rec["code_sha256"] == code_hash(MODULE, Library(head)) and rec["reverified"] is None
    assert rec["scheme"] == SCHEME and rec["git_commit"] == HEAD and rec["base_commit"] == BASE
    assert rec["base_code_sha256"] == code_hash(MODULE, Library(base))
    assert "byte for byte" in rec["how"]
    f = _fresh_under(after, head, monkeypatch)
    assert f.today and f.since == stored.provenance["date"]  # dated by the record it re-keys
    assert after.scalars == stored.scalars and after.provenance == stored.provenance
    # run again: already vouched for, nothing new
    (again,), _ = _prove(tmp_path, store, base, head)
    assert again.records == [] and "already" in again.note


def test_a_one_ulp_change_is_refused_with_what_differed(tmp_path, monkeypatch):
    base, head = _lib_copy(tmp_path, "base"), _lib_copy(tmp_path, "head", ONE_ULP)
    store = _entry_of(tmp_path, monkeypatch, base)
    (rep,), lines = _prove(tmp_path, store, base, head)
    assert rep.records == [] and rep.after == freshness.EARLIER and "proof failed" in rep.note
    said = " ".join(lines)
    assert "NOT identical" in said and "rms_error" in said
    assert store.load("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke()).rekeyed == []


def test_a_stored_configuration_refused_by_the_refactor_is_caught(tmp_path, monkeypatch):
    """The smoke preset (100 repeats) is accepted by both and computes the same; the stored entry
    (200 repeats) is refused after the refactor, so the proof fails, and says so."""
    base, head = _lib_copy(tmp_path, "base"), _lib_copy(tmp_path, "head", STRICTER)
    store = _entry_of(tmp_path, monkeypatch, base, repeats=200)
    (rep,), lines = _prove(tmp_path, store, base, head)
    said = " ".join(lines)
    assert rep.records == [] and "smoke run with" in said and "repeats must be at most 150" in said


def test_an_untouched_experiment_needs_no_proof(tmp_path, monkeypatch):
    base = _lib_copy(tmp_path, "base")
    head = _lib_copy(tmp_path, "head", ('"""Root-mean-square error', '"""The root-mean-square error'))
    assert tool.touched(base, head, ["demo_sweep"]) == {}
    store = _entry_of(tmp_path, monkeypatch, base)
    reports, lines = _prove(tmp_path, store, base, head)
    assert reports == [] and lines == []


def test_a_dry_run_proves_and_records_nothing(tmp_path, monkeypatch):
    base, head = _lib_copy(tmp_path, "base"), _lib_copy(tmp_path, "head", REFACTOR)
    store = _entry_of(tmp_path, monkeypatch, base)
    (rep,), _ = _prove(tmp_path, store, base, head, dry_run=True)
    assert len(rep.records) == 1 and rep.after == freshness.TODAY
    assert store.load("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke()).rekeyed == []


def test_vouching_records_follow_re_keyings_to_the_record_they_re_key():
    rev = [{"agree": True, "code_sha256": "b" * 16}, {"agree": False, "code_sha256": "a" * 16},
           {"agree": True, "code_sha256": "c" * 16}]
    rekeyed = [{"code_sha256": "a" * 16, "reverified": 2}, {"code_sha256": "a" * 16, "reverified": 1}]
    result = store_mod.Result("demo_sweep", {}, provenance={"code_sha256": "a" * 16}, reverified=rev,
                              rekeyed=rekeyed)
    # the provenance and re-verification 2 (through its re-keying); not 1, which disagreed
    assert tool.vouching_records(result, "a" * 16) == [None, 2]
    assert tool.vouching_records(result, "b" * 16) == [0]
    assert tool.vouching_records(result, "d" * 16) == []


@pytest.mark.parametrize("change, said", [
    (lambda a: a.astype(np.float32), "float32"),
    (lambda a: a[:-1], "[3]"),
    (lambda a: np.where(np.arange(a.size) == 0, -0.0 if a[0] == 0 else np.nextafter(a[0], 1), a), "1 of 4"),
])
def test_compare_outputs_sees_dtype_shape_and_one_bit(tmp_path, change, said):
    a = np.array([0.0, 1.0, 2.5, np.nan])
    for stem, arr in (("base", a), ("head", change(a))):
        np.savez(tmp_path / f"{stem}.npz", x=arr)
        (tmp_path / f"{stem}.json").write_text(json.dumps({"scalars": {"s": 1.0}, "configs": {}}))
    (diff,) = tool.compare_outputs(tmp_path / "base", tmp_path / "head")
    assert said in diff
    np.savez(tmp_path / "head.npz", x=a)
    assert tool.compare_outputs(tmp_path / "base", tmp_path / "head") == []
    (tmp_path / "head.json").write_text(json.dumps({"scalars": {"s": 1.0000000000000002}, "configs": {}}))
    (diff,) = tool.compare_outputs(tmp_path / "base", tmp_path / "head")
    assert diff.startswith("scalars s:")


def test_wall_times_and_the_commit_that_ran_are_not_results(tmp_path):
    for stem, t, commit in (("base", 1.5, None), ("head", 2.5, HEAD)):
        np.savez(tmp_path / f"{stem}.npz", x=np.zeros(2))
        (tmp_path / f"{stem}.json").write_text(json.dumps(
            {"scalars": {"points": [{"t_lanczos": t, "ap": 0.5}], "data_commit": commit}, "configs": {}}))
    assert len(tool.compare_outputs(tmp_path / "base", tmp_path / "head")) == 2
    assert tool.compare_outputs(tmp_path / "base", tmp_path / "head", ignore={"points*.t_*": "a wall time"},
                                commits=({None, BASE}, {None, HEAD})) == []
    # a commit that is not the one that ran is a difference
    (diff,) = tool.compare_outputs(tmp_path / "base", tmp_path / "head", ignore={"points*.t_*": "a wall time"},
                                   commits=({None}, {BASE}))
    assert diff.startswith("scalars data_commit")


def test_each_side_records_its_own_commit_whatever_head_is_meanwhile(tmp_path, monkeypatch):
    """A commit made while a long proof runs must not reach its results: each side's smoke run is
    told the commit it stands for (NTKBOOK_GIT_COMMIT), so a data entry computed on the way records
    BASE's or HEAD's commit, both of which the comparison passes over."""
    seen = {}

    def fake_run_smoke(name, lib, out, configs, *, env=None, timeout=3600):
        seen[out.name.rsplit(".", 1)[1]] = (env or {}).get(store_mod.COMMIT_ENV)
        return "stop here"

    monkeypatch.setattr(tool, "run_smoke", fake_run_smoke)
    tool.prove("demo_sweep", LIB, LIB, {}, tmp_path, commits=({None, BASE}, {None, HEAD}))
    assert seen == {"base": BASE}  # the base side failed (on purpose): the head side did not run
    monkeypatch.setattr(tool, "run_smoke", lambda name, lib, out, configs, *, env=None, timeout=3600:
                        seen.__setitem__(out.name.rsplit(".", 1)[1], (env or {}).get(store_mod.COMMIT_ENV)) or "")
    with pytest.raises(FileNotFoundError):  # no outputs were written by the fake runs
        tool.prove("demo_sweep", LIB, LIB, {}, tmp_path, commits=({None, BASE}, {None, HEAD}))
    assert seen == {"base": BASE, "head": HEAD}
    seen.clear()
    with pytest.raises(FileNotFoundError):
        tool.prove("demo_sweep", LIB, LIB, {}, tmp_path)  # no commits named: nothing pinned
    assert seen == {"base": None, "head": None}
