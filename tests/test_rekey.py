"""The one-off re-keying of stored results to the behaviour hash (``tools/rekey.py``).

An entry stored under the legacy hash (the bytes of every module reached) is re-keyed from the
commit its record names, never recomputed: it becomes "today's code" exactly when the behaviour
of that commit's code is today's, keeps the date, sample and environment of the record it
re-keys, and a record whose stored hash is not its commit's code is refused, with the reason.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from ntkbook import experiments, freshness
from ntkbook import store as store_mod
from ntkbook.codehash import SCHEME, Library, code_hash, legacy_code_hash
from ntkbook.experiments import demo_sweep
from ntkbook.store import Store

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib"
COMMIT = "c0ffee" + "0" * 34  # the commit the legacy entries claim

_spec = importlib.util.spec_from_file_location("rekey_tool", ROOT / "tools" / "rekey.py")
rekey_tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = rekey_tool  # its dataclasses look their module up there
_spec.loader.exec_module(rekey_tool)


def _lib_copy(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    """A copy of the library, with one text substitution in demo_sweep (that must apply once)."""
    lib = tmp_path / name
    shutil.copytree(LIB / "ntkbook", lib / "ntkbook", ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        path = lib / "ntkbook" / "experiments" / "demo_sweep.py"
        text = path.read_text()
        assert text.count(edit[0]) == 1, edit[0]
        path.write_text(text.replace(*edit))
    return lib


def _legacy_entry(tmp_path: Path, monkeypatch, lib_then: Path) -> Store:
    """A store holding demo_sweep's smoke result as the legacy scheme stored it: the legacy hash
    of ``lib_then``, no scheme name, and commit :data:`COMMIT` (clean)."""
    store = Store(tmp_path / "results")
    real = store_mod.provenance
    with monkeypatch.context() as m:
        m.setattr(store_mod, "provenance",
                  lambda: {**real(), "git_commit": COMMIT, "git_dirty": False})
        m.setattr(experiments, "code_hash", lambda name: legacy_code_hash(name, lib_then))
        m.setattr(experiments, "SCHEME", None)
        experiments.run_and_save("demo_sweep", demo_sweep.Config.smoke(), store)
    return store


def _load(store: Store):
    return store.load("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())


def test_a_docstring_edit_since_the_commit_is_stale_before_and_today_after(tmp_path, monkeypatch):
    then = _lib_copy(tmp_path, "then", ('"""Root-mean-square error', '"""The root-mean-square error'))
    store = _legacy_entry(tmp_path, monkeypatch, then)
    stored = _load(store)
    assert stored.provenance["code_sha256"] == legacy_code_hash("ntkbook.experiments.demo_sweep", then)
    assert stored.provenance["code_sha256"] != legacy_code_hash("ntkbook.experiments.demo_sweep")
    assert not freshness.freshness(stored).today  # the legacy hash is not today's

    reports = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    (rep,) = reports
    assert rep.before == freshness.EARLIER and rep.after == freshness.TODAY and not rep.notes
    after = _load(store)
    (rec,) = after.rekeyed
    assert rec["scheme"] == SCHEME and rec["reverified"] is None and rec["git_commit"] == COMMIT
    assert rec["code_sha256"] == code_hash("ntkbook.experiments.demo_sweep")
    assert rec["legacy_code_sha256"] == stored.provenance["code_sha256"]
    f = freshness.freshness(after)
    assert f.today and f.since == stored.provenance["date"] and f.sample is None
    # the result itself is untouched, and the entry still verifies
    assert after.scalars == stored.scalars and after.provenance == stored.provenance
    assert [r["status"] for r in store.list()] == ["ok"]
    # a second run records nothing new
    again = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    assert again[0].records == [] and len(_load(store).rekeyed) == 1


def test_a_behaviour_edit_since_the_commit_stays_earlier_code(tmp_path, monkeypatch):
    then = _lib_copy(tmp_path, "then", ("z = rng.standard_normal((repeats, n))",
                                        "z = rng.standard_normal((repeats, n)) * 1.0001"))
    store = _legacy_entry(tmp_path, monkeypatch, then)
    (rep,) = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    assert len(rep.records) == 1 and rep.after.startswith("earlier code")
    (rec,) = _load(store).rekeyed
    assert rec["code_sha256"] == code_hash("ntkbook.experiments.demo_sweep", then)
    assert rec["code_sha256"] != code_hash("ntkbook.experiments.demo_sweep")
    assert not freshness.freshness(_load(store)).today


def test_a_commit_that_is_not_the_code_is_refused(tmp_path, monkeypatch):
    then = _lib_copy(tmp_path, "then")
    store = _legacy_entry(tmp_path, monkeypatch, then)
    other = _lib_copy(tmp_path, "other", ('"""Root-mean-square error', '"""RMS error'))
    (rep,) = rekey_tool.rekey(store, {COMMIT: other}.get, report=lambda line: None)
    assert rep.records == [] and "is not the code hash of commit" in rep.notes[0]
    assert _load(store).rekeyed == []
    (rep,) = rekey_tool.rekey(store, {}.get, report=lambda line: None)  # commit unknown here
    assert rep.records == [] and "not in this repository" in rep.notes[0]


def test_a_dry_run_records_nothing(tmp_path, monkeypatch):
    then = _lib_copy(tmp_path, "then")
    store = _legacy_entry(tmp_path, monkeypatch, then)
    (rep,) = rekey_tool.rekey(store, {COMMIT: then}.get, dry_run=True, report=lambda line: None)
    assert len(rep.records) == 1 and rep.after == freshness.TODAY
    assert _load(store).rekeyed == []


def test_a_rekeyed_reverification_keeps_its_sample_date_and_environment():
    """Freshness reads a re-keying as the record it re-keys (real record shapes)."""
    now = code_hash("ntkbook.experiments.demo_sweep")
    prov = {"date": "2026-11-01T00:00:00+00:00", "code_sha256": "0" * 16, "git_commit": COMMIT,
            "git_dirty": False, "versions": {"jax": "0.12.0.1", "jaxlib": "0.12.0.1"},
            "backend": "cpu", "x64": False}
    rev = {"date": "2026-12-01T10:00:00+00:00", "agree": True, "code_sha256": "1" * 16,
           "sample": "seed 0 of 3", "provenance": {"git_commit": COMMIT, "git_dirty": False},
           "environment": {"jax": "0.4.30", "jaxlib": "0.4.30", "backend": "gpu", "x64": True}}
    rekeyed = [{"scheme": SCHEME, "code_sha256": now, "reverified": 0, "git_commit": COMMIT}]
    result = store_mod.Result("demo_sweep", {}, provenance=prov, reverified=[rev], rekeyed=rekeyed)
    env = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "backend": "cpu", "x64": False}
    f = freshness.freshness(result, env=env)
    assert f.today and f.sample == "seed 0 of 3" and f.since == rev["date"]
    assert f.env_changes == ("jax 0.4.30 -> 0.12.0.1", "jaxlib 0.4.30 -> 0.12.0.1",
                             "backend gpu -> cpu")
    # a re-keying of another hash vouches for nothing
    result.rekeyed = [dict(rekeyed[0], code_sha256="2" * 16)]
    assert not freshness.freshness(result, env=env).today



# -- ast-1 (presets hashed) to ast-2 (presets left out) ------------------------------------------
def _ast1_entry(tmp_path: Path, monkeypatch, lib_then: Path) -> Store:
    """demo_sweep's smoke result as scheme ``ast-1`` stored it: that scheme's hash of ``lib_then``
    (presets included), and commit :data:`COMMIT` (clean)."""
    store = Store(tmp_path / "results")
    real = store_mod.provenance
    with monkeypatch.context() as m:
        m.setattr(store_mod, "provenance",
                  lambda: {**real(), "git_commit": COMMIT, "git_dirty": False})
        m.setattr(experiments, "code_hash",
                  lambda name: code_hash(name, Library(lib_then), scheme="ast-1"))
        m.setattr(experiments, "SCHEME", "ast-1")
        experiments.run_and_save("demo_sweep", demo_sweep.Config.smoke(), store)
    return store


SMOKE_EDIT = ("return cls(sample_sizes=(16, 64, 256, 1024), repeats=100)",
              "return cls(sample_sizes=(16, 64, 256, 1024), repeats=99)")


def test_an_ast1_entry_whose_commit_differs_only_in_a_preset_is_today_after(tmp_path, monkeypatch):
    """The commit's smoke preset differs from today's: its ``ast-1`` hash is not today's, but its
    ``ast-2`` hash is, so after re-keying the entry is today's, with its own date."""
    then = _lib_copy(tmp_path, "then", SMOKE_EDIT)
    store = _ast1_entry(tmp_path, monkeypatch, then)
    stored = _load(store)
    module = "ntkbook.experiments.demo_sweep"
    assert stored.provenance["code_hash_scheme"] == "ast-1"
    assert stored.provenance["code_sha256"] == code_hash(module, Library(then), scheme="ast-1")
    assert stored.provenance["code_sha256"] != code_hash(module, scheme="ast-1")  # the preset
    assert not freshness.freshness(stored).today

    (rep,) = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    assert rep.before == freshness.EARLIER and rep.after == freshness.TODAY and not rep.notes
    (rec,) = _load(store).rekeyed
    assert rec["scheme"] == SCHEME == "ast-2" and rec["from_scheme"] == "ast-1"
    assert rec["code_sha256"] == code_hash(module) and rec["reverified"] is None
    f = freshness.freshness(_load(store))
    assert f.today and f.since == stored.provenance["date"]
    again = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    assert again[0].records == [] and len(_load(store).rekeyed) == 1


def test_an_ast1_entry_of_other_behaviour_stays_earlier_code(tmp_path, monkeypatch):
    then = _lib_copy(tmp_path, "then", ("z = rng.standard_normal((repeats, n))",
                                        "z = rng.standard_normal((repeats, n)) * 1.0001"))
    store = _ast1_entry(tmp_path, monkeypatch, then)
    (rep,) = rekey_tool.rekey(store, {COMMIT: then}.get, report=lambda line: None)
    assert len(rep.records) == 1 and rep.after.startswith("earlier code")
    assert not freshness.freshness(_load(store)).today


def test_a_legacy_entry_rekeyed_to_ast1_is_rekeyed_again_from_that_record(tmp_path, monkeypatch):
    """An entry whose provenance holds a legacy hash of an unknown commit, vouched for by an
    ``ast-1`` re-keying from a commit that is known (as ``tools/prove_refactor.py`` records):
    the re-keying is re-keyed, and the entry stays today's."""
    then = _lib_copy(tmp_path, "then", SMOKE_EDIT)
    store = _legacy_entry(tmp_path, monkeypatch, then)
    module = "ntkbook.experiments.demo_sweep"
    refactor = "abc123" + "0" * 34
    config = demo_sweep.Config.smoke()
    store.add_rekey("demo_sweep", demo_sweep.VERSION, config, {
        "date": "2026-12-04T00:00:00+00:00", "scheme": "ast-1", "reverified": None,
        "code_sha256": code_hash(module, Library(then), scheme="ast-1"), "git_commit": refactor,
        "legacy_code_sha256": _load(store).provenance["code_sha256"], "how": "a proved refactor"})
    # the provenance's own commit is unknown here: only the re-keying can be re-keyed
    (rep,) = rekey_tool.rekey(store, {refactor: then}.get, report=lambda line: None)
    assert rep.after == freshness.TODAY and not rep.notes, rep.line()
    new = [r for r in _load(store).rekeyed if r["scheme"] == SCHEME]
    assert len(new) == 1 and new[0]["git_commit"] == refactor and new[0]["from_scheme"] == "ast-1"
    assert new[0]["code_sha256"] == code_hash(module)
