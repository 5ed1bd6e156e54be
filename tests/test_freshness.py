"""Whether a stored result still comes from today's code (ntkbook.freshness), `reproduce`, and
the refusal of non-finite results."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ntkbook import experiments, freshness
from ntkbook.experiments import demo_sweep
from ntkbook.influence.readout import sweep_part
from ntkbook import store as store_mod
from ntkbook.store import Result, Store

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.delenv("NTKBOOK_ALLOW_DIRTY", raising=False)


# -- compare -------------------------------------------------------------------------------------
def test_compare_identical_within_and_beyond_tolerance():
    stored = freshness.flatten({"a": np.array([1.0, 2.0, 1e-30])},
                               {"t": {"x": 0.5, "n": 3, "s": "ok", "v": [1.0, 2.0]}})
    same = freshness.compare(stored, dict(stored))
    assert same.agree and "identical" in same.summary()
    # 1e-30 next to 2.0: within the array's scale (atol is relative to the largest magnitude)
    close = dict(stored, a=np.array([1.0 + 1e-9, 2.0, 0.0]))
    assert freshness.compare(stored, close).agree
    far = dict(stored, a=np.array([1.001, 2.0, 1e-30]))
    cmp = freshness.compare(stored, far)
    assert not cmp.agree and cmp.failures[0].key == "a" and "`a`" in cmp.summary()
    assert math.isclose(cmp.failures[0].max_abs, 1e-3, rel_tol=1e-6)
    # a scalar's tolerance is relative to itself: a change of a tiny scalar is seen
    tiny = freshness.flatten({}, {"x": 1e-30})
    assert not freshness.compare(tiny, freshness.flatten({}, {"x": 2e-30})).agree


@pytest.mark.parametrize("fresh, why", [
    ({"a": np.ones(3)}, "shape"),
    ({"a": np.array([1.0, np.nan])}, "NaN"),
    ({"a": np.array([1.0, np.inf])}, "infinity"),
    ({}, "missing in the rerun"),
    ({"a": np.ones(2), "b": 1.0}, "missing in the stored result"),
])
def test_compare_mismatches_are_failures(fresh, why):
    cmp = freshness.compare({"a": np.ones(2)}, fresh)
    assert not cmp.agree and why in cmp.summary()


def test_compare_nan_and_inf_agree_with_themselves_and_ignore_patterns():
    stored = {"a": np.array([np.nan, np.inf, 1.0]), "run.seconds": 3.0, "label": "x"}
    fresh = {"a": np.array([np.nan, np.inf, 1.0]), "run.seconds": 9.0, "label": "x"}
    cmp = freshness.compare(stored, fresh)
    assert cmp.agree and "run.seconds" in cmp.ignored  # wall times are never compared
    assert "weights_load_s" in freshness.compare({"weights_load_s": 4.0}, {"weights_load_s": 0.6}).ignored
    assert not freshness.compare(stored, dict(fresh, label="y")).agree
    cmp = freshness.compare({"a": 1.0, "b": 1.0}, {"a": 1.1, "b": 1.0},
                            {"loose": {"a": {"rtol": 0.2}}})
    assert cmp.agree


def test_flatten_paths():
    flat = freshness.flatten({"x": np.zeros(2)},
                             {"table": {"m/relu": {"flip": [0.1, 0.2]}}, "rows": [{"w": 16}]})
    assert set(flat) == {"x", "table.m/relu.flip", "rows[0].w"}
    np.testing.assert_array_equal(flat["table.m/relu.flip"], [0.1, 0.2])


# -- freshness -----------------------------------------------------------------------------------
def _demo_result(code: str | None, reverified=()):
    config = dataclasses.asdict(demo_sweep.Config.smoke())
    prov = {"date": "2026-11-01T00:00:00+00:00", "code_sha256": code,
            "versions": {"jax": "0.0.1", "jaxlib": "0.0.1"}, "backend": "gpu"}
    return Result("demo_sweep", config, provenance=prov, reverified=list(reverified))


def test_freshness_states():
    now = experiments.code_hash(demo_sweep.__name__)
    env = {"jax": "0.0.1", "jaxlib": "0.0.1", "backend": "gpu", "x64": False}
    f = freshness.freshness(_demo_result(now), env=env)
    assert f.today and f.label == freshness.TODAY and f.sentence() == "Today's code."
    f = freshness.freshness(_demo_result("0" * 16), env=env)
    assert not f.today and "never re-verified" in f.sentence()
    assert "python -m ntkbook reproduce demo_sweep" in f.sentence()
    rec = {"date": "2026-12-01T10:00:00+00:00", "agree": True, "code_sha256": now,
           "sample": "seed 0 of 3", "environment": env}
    f = freshness.freshness(_demo_result("0" * 16, [rec]), env=env)
    assert f.today and f.sample == "seed 0 of 3" and "on a sample: seed 0 of 3" in f.sentence()
    old = dict(rec, code_sha256="1" * 16, sample=None)
    f = freshness.freshness(_demo_result("0" * 16, [old]), env=env)
    assert not f.today and "last re-verified on 2026-12-01" in f.sentence()
    # the environment beside the code: another jax or backend is said, not hidden
    f = freshness.freshness(_demo_result(now), env={**env, "jax": "0.0.2", "backend": "cpu"})
    assert f.today and f.env_changes == ("jax 0.0.1 -> 0.0.2", "backend gpu -> cpu")
    assert "another environment" in f.sentence()


def test_every_stored_config_is_rebuilt_exactly():
    store = experiments.store_for("paper")
    for row in store.list():
        assert row["status"] == "ok", row
        config = experiments.config_from_dict(row["name"], row["config"])
        assert store.entry_dir(row["name"], row["version"], config).name == row["entry"]


# -- non-finite results --------------------------------------------------------------------------
def test_non_finite_scalars_are_refused_unless_declared(tmp_path):
    res = Result("x", {}, scalars={"slope": math.nan, "table": {"a": [1.0, math.inf]}})
    with pytest.raises(experiments.NonFiniteResult, match=r"slope = nan.*table\.a\[1\] = inf"):
        experiments.check_finite("x", res)
    experiments.check_finite("x", res, {"slope": "why", "table.a*": "why"})
    with pytest.raises(experiments.NonFiniteResult, match="slope"):
        experiments.check_finite("x", res, {"table.a*": "why"})


def test_a_run_with_a_nan_is_not_stored(tmp_path, monkeypatch):
    store = Store(tmp_path / "results")
    config = demo_sweep.Config.smoke()
    real = demo_sweep.run

    def broken(cfg, points=None):
        out = real(cfg, points)
        out.scalars["loglog_slope"] = math.nan
        return out

    monkeypatch.setattr(demo_sweep, "run", broken)
    with pytest.raises(experiments.NonFiniteResult, match="loglog_slope"):
        experiments.run_and_save("demo_sweep", config, store)
    assert not store.has("demo_sweep", demo_sweep.VERSION, config)


# -- samples -------------------------------------------------------------------------------------
def test_sweep_part_cuts_seeds_and_keeps_first_seed_arrays():
    res = Result("x", {"seeds": [0, 1, 2]},
                 arrays={"t/relu/inf": np.arange(6).reshape(3, 2), "t/relu/slice": np.ones(4),
                         "u/relu/inf": np.zeros((3, 2))},
                 scalars={"table": {"t/relu": {"flip": [0.1, 0.2, 0.3]},
                                    "u/relu": {"flip": [0.0, 0.0, 0.0]}}})
    arrays, scalars = sweep_part(res, ["t"], ["relu"], [0], first_seed_only=("slice",))
    assert set(arrays) == {"t/relu/inf", "t/relu/slice"}
    np.testing.assert_array_equal(arrays["t/relu/inf"], [[0, 1]])
    assert arrays["t/relu/slice"].shape == (4,)
    assert scalars == {"table": {"t/relu": {"flip": [0.1]}}}
    with pytest.raises(ValueError, match="beginning with its first seed"):
        sweep_part(res, ["t"], ["relu"], [1])


def test_sample_configs_are_subsets():
    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        if not hasattr(module, "reproduce_sample"):
            continue
        assert hasattr(module, "sample_view"), name
        full = module.Config.paper()
        sub, what = module.reproduce_sample(full)
        assert what and sub != full, name
        for f in dataclasses.fields(full):  # swept tuples shrink to subsets; other knobs may
            a, b = getattr(full, f.name), getattr(sub, f.name)  # change (e.g. fewer snapshots)
            if isinstance(a, tuple):
                assert set(b) <= set(a), (name, f.name)
        if hasattr(full, "seeds"):  # a seeded sweep (gram_conditioning has one subset seed, kept)
            assert sub.seeds[0] == full.seeds[0], name  # first-seed-only arrays stay comparable
        else:
            assert sub.seed == full.seed, name  # the same image subset


# -- reproduce -----------------------------------------------------------------------------------
def test_reproduce_records_agreement_in_the_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_GIT_COMMIT", "abc1234")
    store = Store(tmp_path / "results")
    config = demo_sweep.Config.smoke()
    experiments.run_and_save("demo_sweep", config, store)
    reps = freshness.reproduce("demo_sweep", store, report=lambda s: None)
    assert len(reps) == 1 and reps[0].agree and reps[0].recorded is not None
    loaded = store.load("demo_sweep", demo_sweep.VERSION, config)
    assert loaded.reverified[0]["agree"] and loaded.reverified[0]["code_sha256"]
    assert store.list()[0]["status"] == "ok"  # the re-signed JSON still verifies
    # the result itself is untouched
    assert loaded.scalars == store.load("demo_sweep", demo_sweep.VERSION, config).scalars
    with pytest.raises(freshness.ReproduceError, match="no stored entry 9-x"):
        freshness.reproduce("demo_sweep", store, entries=["9-x"], report=lambda s: None)
    with pytest.raises(freshness.ReproduceError, match="defines no sample"):
        freshness.reproduce("demo_sweep", store, sample=True, report=lambda s: None)


def test_a_reverification_from_another_environment_says_so(tmp_path, monkeypatch):
    """The record ``reproduce()`` really writes (with its ``provenance`` and ``environment``
    keys): re-verified on a GPU with another jax, read on this CPU, the difference is said."""
    monkeypatch.setenv("NTKBOOK_GIT_COMMIT", "abc1234")
    store = Store(tmp_path / "results")
    config = demo_sweep.Config.smoke()
    real = store_mod.provenance
    with monkeypatch.context() as m:  # the entry is computed by other code, on a GPU
        m.setattr(store_mod, "provenance", lambda: {**real(), "backend": "gpu"})
        m.setattr(experiments, "code_hash", lambda name: "0" * 16)
        experiments.run_and_save("demo_sweep", config, store)
    gpu = {"jax": "0.4.30", "jaxlib": "0.4.30", "backend": "gpu", "x64": False}
    with monkeypatch.context() as m:  # and re-verified by today's code on a GPU with jax 0.4.30
        m.setattr(freshness, "environment", lambda: dict(gpu))
        (rep,) = freshness.reproduce("demo_sweep", store, report=lambda s: None)
    loaded = store.load("demo_sweep", demo_sweep.VERSION, config)
    (rec,) = loaded.reverified
    env_keys = ("jax", "jaxlib", "backend")  # (x64 is the rerun's own flag)
    assert {k: rec["environment"][k] for k in env_keys} == {k: gpu[k] for k in env_keys}
    assert "provenance" in rec  # the shape reproduce() writes
    here = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "backend": "cpu", "x64": False}
    f = freshness.freshness(loaded, env=here)
    assert f.today and f.since == rec["date"]
    assert f.env_changes == ("jax 0.4.30 -> 0.12.0.1", "jaxlib 0.4.30 -> 0.12.0.1",
                             "backend gpu -> cpu")
    assert "another environment" in f.sentence() and "(other environment)" in f.short()
    assert freshness.freshness(loaded, env={**gpu, "x64": True}).env_changes == ()


def _copy_tree(tmp_path: Path) -> Path:
    """A copy of the library (no git) and of the stored demo_sweep entry."""
    root = tmp_path / "tree"
    shutil.copytree(REPO / "lib", root / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    entry = next((REPO / "results" / "demo_sweep").iterdir())
    shutil.copytree(entry, root / "results" / "demo_sweep" / entry.name)
    return root


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "lib"), "NTKBOOK_GIT_COMMIT": "abc1234",
           "NTKBOOK_SCRATCH": str(root / ".scratch"), "NTKBOOK_RESULTS": str(root / "results")}
    return subprocess.run([sys.executable, "-m", "ntkbook", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_an_edited_experiment_makes_its_result_stale_until_a_rerun_agrees(tmp_path):
    root = _copy_tree(tmp_path)
    # 0. the copied entry re-verified by the copied code (whatever the stored entry's state)
    assert _cli(root, "reproduce", "demo_sweep").returncode == 0
    out = _cli(root, "verify", "--results", str(root / "results"))
    assert out.returncode == 0 and "today's code" in out.stdout, out.stdout + out.stderr
    src = root / "lib" / "ntkbook" / "experiments" / "demo_sweep.py"
    text = src.read_text()
    # 1. text only (a comment, a docstring): nothing that can move a number, still today's
    doc = '"""The RMS error at every sample size'
    assert text.count(doc) == 1, "demo_sweep changed: update this test's edit"
    src.write_text(text.replace(doc, '"""The root-mean-square error at every sample size')
                   + "\n# a comment\n")
    out = _cli(root, "verify", "--results", str(root / "results"))
    assert out.returncode == 0 and "today's code" in out.stdout, out.stdout
    # 2. code that runs, edited without changing the numbers: stale until reproduced, then
    # today's again
    line = "    slope = loglog_slope(n, errors)\n"
    assert line in text, "demo_sweep changed: update this test's edit"
    src.write_text(text.replace(line, "    slope = loglog_slope(n, list(errors))\n"))
    out = _cli(root, "verify", "--results", str(root / "results"))
    assert "earlier code, last re-verified" in out.stdout, out.stdout
    out = _cli(root, "reproduce", "demo_sweep")
    assert out.returncode == 0 and "reproduces it" in out.stdout, out.stdout + out.stderr
    out = _cli(root, "verify", "--results", str(root / "results"))
    assert out.returncode == 0 and "today's code" in out.stdout, out.stdout
    # 3. an edit that moves a number: reproduce fails, names the entry and the value, and the
    # entry stays "earlier code"
    src.write_text(text.replace(line, "    errors = [e * 1.5 for e in errors]\n" + line))
    moved = _cli(root, "reproduce", "demo_sweep")
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "DOES NOT reproduce" in moved.stdout and "demo_sweep" in moved.stderr
    out = _cli(root, "verify", "--results", str(root / "results"))
    assert "earlier code, last re-verified" in out.stdout, out.stdout


def test_cli_errors_are_one_line(tmp_path):
    root = _copy_tree(tmp_path)
    out = _cli(root, "reproduce", "demo_sweep", "--entry", "9-nothing")
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    out = _cli(root, "reproduce")
    assert out.returncode == 2 and "--all" in out.stderr


# -- CI re-verifies the cheap stored entries -----------------------------------------------------
#: stored entries recomputed by every test run, whole or (``True``) on the experiment's sample
#: (``reproduce_sample``: ``gram_conditioning`` on its first data set, a third of its minute): a
#: code change that moves one of their numbers fails here, naming the entry and the value. The
#: weekly workflow ``.github/workflows/reproduce.yml`` reproduces them whole (``--slow``).
CHEAP = {"demo_sweep": False, "gram_conditioning": True, "lanczos_ghosts": False}


def _reproduce_stored(name: str, tmp_path, sample: bool) -> None:
    src = experiments.store_for("paper")
    store = Store(tmp_path / "results")
    for entry in (src.root / name).iterdir():
        shutil.copytree(entry, store.root / name / entry.name)
    reps = freshness.reproduce(name, store, sample=sample, record=False, report=lambda s: None)
    assert reps, f"no stored {name} entry was reproduced"
    for rep in reps:
        assert rep.agree, (f"today's code no longer reproduces the stored {name} entry "
                           f"{rep.entry.name}" + (f" on its sample ({rep.sample})" if sample else "")
                           + f": {rep.comparison.summary(n=5)}")


@pytest.mark.parametrize("name", CHEAP)
def test_cheap_stored_results_are_reproduced_by_todays_code(name, tmp_path):
    _reproduce_stored(name, tmp_path, sample=CHEAP[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, sampled in CHEAP.items() if sampled])
def test_cheap_stored_results_are_reproduced_whole(name, tmp_path):
    _reproduce_stored(name, tmp_path, sample=False)


def test_the_gram_sample_is_the_first_data_set_and_its_view_matches_the_whole():
    """The sample's config is the first data set, and the view of the stored (whole) result and of
    a result of the sample's config hold the same keys."""
    from ntkbook.experiments import gram_conditioning

    whole = gram_conditioning.Config.paper()
    sub, what = gram_conditioning.reproduce_sample(whole)
    assert sub.datasets == whole.datasets[:1] and sub.n_per_class == whole.n_per_class
    assert what == f"data set {whole.datasets[0]} (of {len(whole.datasets)})"
    stored = experiments.load_stored("gram_conditioning", "paper")
    a, s = gram_conditioning.sample_view(stored, sub)
    assert a and all(k == "rel_ridges" or k.startswith(f"{sub.datasets[0]}/") for k in a)
    assert set(s["per_dataset"]) == {sub.datasets[0]}
    assert len(a) < len(stored.arrays)  # the other data sets are left out


def test_a_reverification_from_uncommitted_code_is_refused_in_a_clean_store(tmp_path):
    from ntkbook.store import StoreError

    store = Store(tmp_path / "results", require_clean=True)
    store.save(Result("exp", {"k": 1}, arrays={"x": np.ones(2)}), "1")
    dirty = {"date": "2026-12-01", "agree": True, "code_sha256": "0" * 16,
             "provenance": {"git_commit": "abc", "git_dirty": True}}
    with pytest.raises(StoreError, match="not a known commit"):
        store.add_reverification("exp", "1", {"k": 1}, dirty)
    clean = dict(dirty, provenance={"git_commit": "abc", "git_dirty": False})
    store.add_reverification("exp", "1", {"k": 1}, clean)
    assert store.load("exp", "1", {"k": 1}).reverified == [clean]
    assert json.loads((store.entry_dir("exp", "1", {"k": 1}) / "result.json").read_text())[
        "reverified"] == [clean]


# -- the tolerances of values that are round-off by construction ---------------------------------
def _stored_flat(name: str) -> dict:
    """The flattened values of an experiment's one stored paper entry, read from its files."""
    (entry,) = (experiments.store_for("paper").root / name).iterdir()
    meta = json.loads((entry / "result.json").read_text())
    with np.load(entry / "result.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return freshness.flatten(arrays, meta["scalars"])


def _agrees(name: str, **changes) -> bool:
    stored = _stored_flat(name)
    fresh = dict(stored)
    for key, change in changes.items():
        fresh[key] = change(np.asarray(stored[key], dtype=float))
    return freshness.compare(stored, fresh, getattr(experiments.get(name), "REPRODUCE_TOLERANCE", None)).agree


def test_lanczos_ghosts_tolerance_lets_round_off_move_and_nothing_else():
    # what round-off moved on another CPU: ghosts +3 (of 35), the first ghost 2 steps later, the
    # plain per-step trajectories anywhere
    assert _agrees("lanczos_ghosts", synthetic_plain_ghosts=lambda x: x + 3,
                   synthetic_first_ghost_step=lambda x: x + 2,
                   synthetic_plain_orth=lambda x: x[::-1].copy(),
                   entk_plain_ritz=lambda x: 2 * x,
                   synthetic_reorth_orth=lambda x: 3 * x)
    # what would be a different result: half as many ghosts, a ghost in the re-orthogonalised run,
    # its Ritz values moved by 1e-4, orthogonality kept by the plain run, re-orthogonalisation at 1e-12
    assert not _agrees("lanczos_ghosts", synthetic_plain_ghosts=lambda x: x / 2)
    assert not _agrees("lanczos_ghosts", entk_reorth_ghosts=lambda x: x + 1)
    assert not _agrees("lanczos_ghosts", synthetic_reorth_ritz=lambda x: x * (1 + 1e-4))
    assert not _agrees("lanczos_ghosts", entk_plain_max_orth=lambda x: x * 0.5)
    assert not _agrees("lanczos_ghosts", synthetic_reorth_max_orth=lambda x: x + 1e-12)
    assert not _agrees("lanczos_ghosts", **{"synthetic_reorth_steps_to_1e-10": lambda x: x + 1})


def test_gram_conditioning_tolerance_only_loosens_the_naive_kappa_and_the_identity_error():
    assert _agrees("gram_conditioning", **{"per_dataset.mnist.kappa_Gt_naive_eigh": lambda x: x * 1.5,
                                           "per_dataset.cifar10.identity_rel_error": lambda x: x * 3})
    assert not _agrees("gram_conditioning", **{"per_dataset.mnist.kappa_Gt_naive_eigh": lambda x: x * 3})
    assert not _agrees("gram_conditioning", **{"per_dataset.mnist.kappa_G": lambda x: x * (1 + 1e-4)})
    assert not _agrees("gram_conditioning", **{"per_dataset.mnist.kappa_Gt_measured": lambda x: x * (1 + 1e-4)})


def test_compare_up_to_sign_aligns_each_column_and_nothing_more():
    v = np.array([[0.6, 0.0], [0.8, 1.0]])
    stored = {"vec": v}
    tol = {"up_to_sign": {"vec": "eigenvectors"}}
    flipped = {"vec": v * np.array([-1.0, 1.0])}
    assert freshness.compare(stored, flipped, tol).agree
    assert not freshness.compare(stored, flipped).agree  # without the pattern a flip is a change
    # one entry negated is not a sign: still a failure
    assert not freshness.compare(stored, {"vec": np.array([[-0.6, 0.0], [0.8, 1.0]])}, tol).agree
    # aligned, the usual tolerance applies
    assert not freshness.compare(stored, {"vec": -v * (1 + 1e-4)}, tol).agree
    # a NaN is never aligned away
    assert not freshness.compare(stored, {"vec": np.array([[np.nan, 0.0], [0.8, 1.0]])}, tol).agree


def test_modular_transformer_tolerance_lets_signs_and_lanczos_round_off_move_and_nothing_else():
    # what a rerun on another x86 CPU moved (2026-12-04): eigenvector columns negated, entries by
    # 7e-9 once aligned, Lanczos's 1e-15 error by a factor of two
    key = "replay/ml_eigenvectors/W_Q"
    assert _agrees("modular_transformer",
                   **{key: lambda x: x * np.where(np.arange(x.shape[1]) % 2, -1.0, 1.0) + 7e-9,
                      "main_analysis.lanczos.W_in.default.max_rel_error": lambda x: 2 * x})
    # what would be a different result: an eigenvector moved by 1e-4, one entry's sign, an
    # eigenvalue by 1e-4, a Lanczos error a hundred times larger, the eigenvectors of another tensor
    assert not _agrees("modular_transformer", **{key: lambda x: x + 1e-4 * np.abs(x).max()})
    assert not _agrees("modular_transformer", **{key: lambda x: np.where(
        np.arange(x.size).reshape(x.shape) == np.argmax(np.abs(x)), -x, x)})
    assert not _agrees("modular_transformer",
                       **{"replay/ml_eigenvalues/W_Q": lambda x: x * (1 + 1e-4)})
    assert not _agrees("modular_transformer",
                       **{"main_analysis.lanczos.W_in.default.max_rel_error": lambda x: 100 * x})
    assert not _agrees("modular_transformer", **{key: lambda x: x[:, ::-1].copy()})
