"""The results store: round trip, stable hashing, content hashes, locks, checkpoints, provenance,
resume after interruption, and the command line."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from ntkbook import experiments, store as store_mod
from ntkbook.__main__ import main as cli
from ntkbook.codehash import code_hash
from ntkbook.experiments import demo_sweep
from ntkbook.store import PointStore, Result, Store, StoreError, config_hash


def result_files(root):
    """The files in a results folder other than its git-ignored entry locks (``.locks/``)."""
    return [p for p in root.rglob("*")
            if p.is_file() and store_mod.LOCKS not in p.relative_to(root).parts]


@pytest.fixture(autouse=True)
def _scratch(tmp_path, monkeypatch):
    """Checkpoints and locks of every test in its own folder; a clean, committed tree."""
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.delenv("NTKBOOK_ALLOW_DIRTY", raising=False)
    monkeypatch.delenv("NTKBOOK_GIT_COMMIT", raising=False)
    clean_git(monkeypatch)


def clean_git(monkeypatch, commit="c0ffee" * 6 + "abcd", status=""):
    def fake(*args):
        if args[0] == "rev-parse":
            return commit
        if args[0] == "status":
            return status
        return None

    monkeypatch.setattr(store_mod, "_git", fake)


@dataclasses.dataclass(frozen=True)
class Cfg:
    widths: tuple[int, ...] = (1, 2, 3)
    lr: float = 0.1
    name: str = "x"


def test_round_trip(tmp_path):
    store = Store(tmp_path)
    cfg = {"a": 1, "b": [1, 2]}
    res = Result("exp", cfg, arrays={"x": np.arange(5.0), "m": np.eye(3)},
                 scalars={"table": {"row": [1.5, 2.5]}, "s": 3.0}, provenance={"device": "cpu"})
    folder = store.save(res, "2")
    assert folder.name.startswith("2-")
    back = store.load("exp", "2", cfg)
    np.testing.assert_array_equal(back["x"], np.arange(5.0))
    np.testing.assert_array_equal(back["m"], np.eye(3))
    assert back["table"] == {"row": [1.5, 2.5]}
    assert back.provenance["device"] == "cpu"
    assert store.has("exp", "2", cfg) and not store.has("exp", "3", cfg)
    with pytest.raises(StoreError, match="no stored result"):
        store.load("exp", "3", cfg)
    meta = json.loads((folder / "result.json").read_text())
    assert meta["format"] == 2 and meta["integrity"]["hashed"] == "at save"


def test_nonfinite_round_trip_as_floats(tmp_path):
    """nan/inf come back as Python floats whatever went in (Python float, numpy float32/64)."""
    store = Store(tmp_path)
    scalars = {"a": float("nan"), "b": np.float64("inf"), "c": np.float32("-inf"),
               "d": [1.0, float("nan")], "e": {"f": np.float64("nan")}}
    store.save(Result("exp", {"k": 1}, scalars=scalars), "1")
    back = store.load("exp", "1", {"k": 1}).scalars
    values = [back["a"], back["b"], back["c"], back["d"][1], back["e"]["f"]]
    assert all(type(v) is float for v in values)
    assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
    assert math.isnan(back["d"][1]) and math.isnan(back["e"]["f"]) and back["d"][0] == 1.0


def test_config_hash_is_stable():
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})
    assert config_hash(Cfg()) == config_hash({"widths": [1, 2, 3], "lr": 0.1, "name": "x"})
    assert config_hash(Cfg()) != config_hash(Cfg(lr=0.2))
    # fixed values: the hash must not change between runs, machines or store formats
    assert config_hash({"a": 1}) == "015abd7f5cc5"
    assert config_hash({"a": float("nan")}) == config_hash({"a": "nan"})


def test_resume_after_interruption(tmp_path):
    calls = []

    def compute(i):
        calls.append(i)
        if i == 3 and len(calls) <= 4:
            raise KeyboardInterrupt  # the first run is interrupted at point 3
        return {"v": np.full(2, float(i))}, {"i": i}

    points = PointStore(tmp_path / "points")
    with pytest.raises(KeyboardInterrupt):
        for i in range(5):
            points.cached(f"point={i}", lambda i=i: compute(i))
    assert calls == [0, 1, 2, 3]
    resumed = PointStore(tmp_path / "points")
    values = [resumed.cached(f"point={i}", lambda i=i: compute(i)) for i in range(5)]
    assert calls == [0, 1, 2, 3, 3, 4]  # 0..2 were reused, not recomputed
    assert resumed.reused == ["point=0", "point=1", "point=2"]
    assert [s["i"] for _, s in values] == list(range(5))
    np.testing.assert_array_equal(values[4][0]["v"], [4.0, 4.0])


def test_point_keys_with_dots_do_not_collide(tmp_path):
    """Keys that differ only after a dot ("l2=0.1" / "l2=0.2") are two checkpoints, not one."""
    points = PointStore(tmp_path)
    a = points.cached("l2=0.1", lambda: ({"v": np.ones(2)}, {"x": 0.1}))
    b = points.cached("l2=0.2", lambda: ({"v": np.zeros(2)}, {"x": 0.2}))
    again = PointStore(tmp_path)
    assert again.cached("l2=0.1", lambda: pytest.fail("recomputed"))[1]["x"] == 0.1
    assert again.cached("l2=0.2", lambda: pytest.fail("recomputed"))[1]["x"] == 0.2
    assert a[1]["x"] != b[1]["x"] and len(list(tmp_path.glob("*.json"))) == 2


def _flaky_demo(monkeypatch, config, fail_at=2):
    real = demo_sweep.rms_error
    seen = []

    def flaky(n, repeats, seed):
        seen.append(n)
        if n == config.sample_sizes[fail_at] and seen.count(n) == 1:
            raise KeyboardInterrupt
        return real(n, repeats, seed)

    monkeypatch.setattr(demo_sweep, "rms_error", flaky)
    return seen


def test_demo_experiment_resumes(tmp_path, monkeypatch):
    """An experiment interrupted mid-sweep resumes from its checkpoints when run again."""
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path / "results")
    seen = _flaky_demo(monkeypatch, config)
    with pytest.raises(KeyboardInterrupt):
        experiments.run_and_save("demo_sweep", config, store)
    assert not store.has("demo_sweep", demo_sweep.VERSION, config)
    # checkpoints are outside the results folder: an interrupted run leaves nothing there but
    # the git-ignored entry lock
    assert not result_files(tmp_path / "results")
    assert list(store.points_dir("demo_sweep", demo_sweep.VERSION, config).rglob("*.json"))
    result = experiments.run_and_save("demo_sweep", config, store)
    assert seen == [16, 64, 256, 256, 1024]
    assert result.provenance["resumed_points"] == 2
    assert result.provenance["code_sha256"] == code_hash(demo_sweep.__name__)
    loaded = store.load("demo_sweep", demo_sweep.VERSION, config)
    np.testing.assert_allclose(loaded["rms_error"], result["rms_error"])
    assert -0.7 < loaded["loglog_slope"] < -0.3
    # a finished entry leaves no checkpoints behind
    assert not list(store.points_dir("demo_sweep", demo_sweep.VERSION, config).rglob("*.json"))


def test_recompute_clears_checkpoints(tmp_path, monkeypatch):
    """A planted stale checkpoint survives neither --recompute nor a change of code."""
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path)
    code = code_hash(demo_sweep.__name__)
    key = f"n={config.sample_sizes[0]}"
    for planted_code in (code, "0123456789abcdef"):
        points = store.points("demo_sweep", demo_sweep.VERSION, config, planted_code)
        points.cached(key, lambda: ({}, {"rms_error": 123.0}))
    result = experiments.run_and_save("demo_sweep", config, store, recompute=True)
    assert result["rms_error"][0] != 123.0
    assert "resumed_points" not in result.provenance
    # checkpoints of other code are never reused ...
    other = Store(tmp_path / "other", scratch=store.scratch)
    stale = other.points("demo_sweep", demo_sweep.VERSION, config, "feedfacefeedface")
    stale.cached(key, lambda: ({}, {"rms_error": 123.0}))
    result = experiments.run_and_save("demo_sweep", config, other)
    assert result["rms_error"][0] != 123.0 and "resumed_points" not in result.provenance
    # ... while those of the current code are (the planted value is what resuming would use)
    third = Store(tmp_path / "third", scratch=store.scratch)
    third.points("demo_sweep", demo_sweep.VERSION, config, code).cached(
        key, lambda: ({}, {"rms_error": 123.0}))
    result = experiments.run_and_save("demo_sweep", config, third)
    assert result["rms_error"][0] == 123.0 and result.provenance["resumed_points"] == 1


def _saved(tmp_path):
    store = Store(tmp_path)
    cfg = {"k": 1}
    folder = store.save(Result("exp", cfg, arrays={"x": np.ones(10)}, scalars={"s": 1}), "1")
    return store, cfg, folder


def test_corrupt_npz_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    (folder / "result.npz").write_bytes(b"not a zip file")
    with pytest.raises(StoreError, match="result.npz does not match the sha256.*--recompute"):
        store.load("exp", "1", cfg)
    with pytest.raises(StoreError, match="result.npz does not match"):
        store.has("exp", "1", cfg)


def test_truncated_npz_is_not_stored(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    data = (folder / "result.npz").read_bytes()
    (folder / "result.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="truncated"):
        store.has("exp", "1", cfg)
    rows = store.list()
    assert rows[0]["status"] == "corrupt" and "truncated" in rows[0]["error"]


def test_corrupt_json_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    (folder / "result.json").write_text("{ truncated")
    with pytest.raises(StoreError, match="corrupt store file .*result.json.*--recompute"):
        store.load("exp", "1", cfg)


def test_edited_json_value_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    text = (folder / "result.json").read_text()
    (folder / "result.json").write_text(text.replace('"s": 1', '"s": 2'))
    with pytest.raises(StoreError, match="does not match its content hash"):
        store.load("exp", "1", cfg)


def _resign(folder, meta):
    """Write ``meta`` with a correct content hash (a consistent but wrong entry)."""
    meta["integrity"]["json_sha256"] = store_mod._json_digest(meta)
    (folder / "result.json").write_text(json.dumps(meta))


def test_mismatched_entry_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    meta = json.loads((folder / "result.json").read_text())
    meta["config"] = {"k": 2}
    _resign(folder, meta)
    with pytest.raises(StoreError, match="another config"):
        store.load("exp", "1", cfg)
    meta["version"] = "0"
    _resign(folder, meta)
    with pytest.raises(StoreError, match="does not match its key"):
        store.load("exp", "1", cfg)


def test_npz_from_another_entry_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    other = store.save(Result("exp", {"k": 2}, arrays={"x": np.zeros(10)}), "1")
    (folder / "result.npz").write_bytes((other / "result.npz").read_bytes())
    with pytest.raises(StoreError, match="does not match the sha256"):
        store.load("exp", "1", cfg)


def test_legacy_entry_needs_rehash(tmp_path):
    """A format-1 entry (no hashes, non-finite strings) is refused until rehashed; rehash turns
    its strings into floats, adds the hashes and says they were added after the fact."""
    store, cfg, folder = _saved(tmp_path)
    meta = json.loads((folder / "result.json").read_text())
    meta.pop("integrity")
    meta["format"] = 1
    meta["scalars"] = {"s": 1, "bad": "nan", "big": ["inf", "-inf", 2.0], "word": "nanny"}
    (folder / "result.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="no content hashes.*rehash"):
        store.load("exp", "1", cfg)
    assert store.list()[0]["status"] == "legacy"
    assert "1 non-finite" not in "".join(store.rehash(dry_run=True))
    with pytest.raises(StoreError, match="no content hashes"):  # a dry run writes nothing
        store.load("exp", "1", cfg)
    lines = store.rehash()
    assert "3 non-finite strings migrated" in lines[0]
    back = store.load("exp", "1", cfg)
    assert math.isnan(back["bad"]) and back["big"][:2] == [math.inf, -math.inf]
    assert back["word"] == "nanny"
    meta = json.loads((folder / "result.json").read_text())
    assert meta["integrity"]["hashed"].startswith("after the fact")
    assert "format 1 -> 2" in meta["migrations"][0]
    assert "already hashed, verified" in store.rehash()[0]


def test_corrupt_checkpoint_is_reported(tmp_path):
    points = PointStore(tmp_path)
    points.cached("p", lambda: ({"a": np.ones(3)}, {}))
    next(tmp_path.glob("*.npz")).write_bytes(b"garbage")
    with pytest.raises(StoreError, match="does not match its content hash"):
        PointStore(tmp_path).cached("p", lambda: ({"a": np.ones(3)}, {}))


def test_edited_checkpoint_is_reported(tmp_path):
    points = PointStore(tmp_path)
    points.cached("p", lambda: ({}, {"v": 1.5}))
    js = next(tmp_path.glob("*.json"))
    js.write_text(js.read_text().replace("1.5", "2.5"))
    with pytest.raises(StoreError, match="does not match its content hash"):
        PointStore(tmp_path).cached("p", lambda: ({}, {"v": 1.5}))


def test_checkpoint_of_another_key_is_refused(tmp_path, monkeypatch):
    points = PointStore(tmp_path)
    points.cached("p=1", lambda: ({}, {"v": 1.0}))
    # two keys that land on one file (as a path collision would): the key inside decides
    monkeypatch.setattr(PointStore, "_path", lambda self, key: self.folder / "same")
    PointStore(tmp_path).cached("p=1", lambda: ({}, {"v": 1.0}))
    with pytest.raises(StoreError, match="belongs to point 'p=1', not 'p=2'"):
        PointStore(tmp_path).cached("p=2", lambda: ({}, {"v": 2.0}))


def test_checkpoint_of_other_code_is_refused(tmp_path):
    PointStore(tmp_path, code="aaaa").cached("p", lambda: ({}, {"v": 1.0}))
    with pytest.raises(StoreError, match="written by other code"):
        PointStore(tmp_path, code="bbbb").cached("p", lambda: ({}, {"v": 2.0}))


def test_checkpoint_json_is_written_after_its_npz(tmp_path, monkeypatch):
    """A crash between the two writes of a point must leave it unfinished (recomputed on
    resume), never a json that claims a point whose arrays are missing."""
    real = store_mod._atomic_write_bytes
    written = []

    def crash_on_second(path, data):
        written.append(path.suffix)
        if len(written) == 2:
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(store_mod, "_atomic_write_bytes", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        PointStore(tmp_path).cached("p", lambda: ({"a": np.ones(3)}, {"v": 1}))
    assert written == [".npz", ".json"]
    monkeypatch.setattr(store_mod, "_atomic_write_bytes", real)
    again = PointStore(tmp_path)
    arrays, scalars = again.cached("p", lambda: ({"a": np.ones(3)}, {"v": 1}))
    assert again.computed == ["p"] and scalars == {"v": 1}


def test_result_json_is_written_after_its_npz(tmp_path, monkeypatch):
    real = store_mod._atomic_write_bytes
    order = []
    monkeypatch.setattr(store_mod, "_atomic_write_bytes",
                        lambda path, data: (order.append(path.name), real(path, data)))
    Store(tmp_path).save(Result("exp", {"k": 1}, arrays={"x": np.ones(2)}), "1")
    assert order == ["result.npz", "result.json"]


def test_every_write_is_fsynced(tmp_path, monkeypatch):
    """Each file's data is fsynced before its rename (and then its folder)."""
    import stat

    files, folders = [], []
    real = store_mod.os.fsync

    def spy(fd):
        mode = os.fstat(fd).st_mode
        (files if stat.S_ISREG(mode) else folders).append(fd)
        real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", spy)
    PointStore(tmp_path / "p").cached("p", lambda: ({"a": np.ones(3)}, {}))
    Store(tmp_path / "s").save(Result("exp", {"k": 1}, arrays={"x": np.ones(2)}), "1")
    assert len(files) == 4  # two files per point and per result
    assert len(folders) == 4


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    store = Store(tmp_path / "results")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ntkbook.store.os.replace", boom)
    with pytest.raises(StoreError, match="disk is full"):
        store.save(Result("exp", {"k": 1}, arrays={"x": np.ones(3)}), "1")
    assert not store.has("exp", "1", {"k": 1})
    assert not result_files(tmp_path / "results")


def test_lock_refuses_or_waits(tmp_path):
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path)
    with store.lock("demo_sweep", demo_sweep.VERSION, config):
        with pytest.raises(StoreError, match="being computed by pid"):
            experiments.run_and_save("demo_sweep", config, store, wait=False)
    experiments.run_and_save("demo_sweep", config, store, wait=False)
    assert store.has("demo_sweep", demo_sweep.VERSION, config)


def test_provenance_refuses_uncommitted_code(tmp_path, monkeypatch):
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path, scale="paper", require_clean=True)
    clean_git(monkeypatch, status=" M lib/ntkbook/ntk/features.py\n?? lib/ntkbook/new.py")
    with pytest.raises(StoreError, match=r"uncommitted changes \(lib/ntkbook/ntk/features.py, "
                                         r"lib/ntkbook/new.py\).*NTKBOOK_ALLOW_DIRTY"):
        experiments.run_and_save("demo_sweep", config, store)
    assert not store.has("demo_sweep", demo_sweep.VERSION, config)
    monkeypatch.setenv("NTKBOOK_ALLOW_DIRTY", "1")
    result = experiments.run_and_save("demo_sweep", config, store)
    prov = store.load("demo_sweep", demo_sweep.VERSION, config).provenance
    assert prov["git_dirty"] is True and "cannot be reproduced" in prov["WARNING"]
    assert result.provenance["git_dirty_files"] == ["lib/ntkbook/ntk/features.py", "lib/ntkbook/new.py"]


def test_provenance_without_git(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_git", lambda *a: None)
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path, scale="paper", require_clean=True)
    with pytest.raises(StoreError, match="commit of the code is unknown.*NTKBOOK_GIT_COMMIT"):
        experiments.run_and_save("demo_sweep", config, store)
    monkeypatch.setenv("NTKBOOK_GIT_COMMIT", "1234abcd")
    experiments.run_and_save("demo_sweep", config, store)
    prov = store.load("demo_sweep", demo_sweep.VERSION, config).provenance
    assert prov["git_commit"] == "1234abcd" and prov["git_commit_source"] == "NTKBOOK_GIT_COMMIT"
    assert prov["git_dirty"] is None


def test_provenance_of_a_clean_tree(tmp_path):
    prov = store_mod.provenance()
    assert prov["git_dirty"] is False and prov["git_commit_source"] == "git"
    assert "WARNING" not in prov


def test_cli_list_and_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("NTKBOOK_CACHE", str(tmp_path / "cache"))
    assert cli(["list"]) == 0
    assert "demo_sweep" in capsys.readouterr().out
    assert cli(["run", "demo_sweep", "--scale", "smoke"]) == 0
    assert "saved demo_sweep" in capsys.readouterr().out
    store = experiments.store_for("smoke")
    assert store.has("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    assert cli(["run", "demo_sweep", "--scale", "smoke"]) == 0
    assert "already stored" in capsys.readouterr().out
    assert cli(["verify"]) == 0
    # a damaged entry: `run` and `verify` fail with the repair command; --recompute repairs it
    folder = store.entry_dir("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    (folder / "result.npz").write_bytes(b"")
    assert cli(["run", "demo_sweep", "--scale", "smoke"]) == 2
    assert "--scale smoke --recompute" in capsys.readouterr().err
    assert cli(["verify"]) == 1
    assert "corrupt" in capsys.readouterr().out
    assert cli(["list"]) == 0
    assert "CORRUPT" in capsys.readouterr().out
    assert cli(["run", "demo_sweep", "--scale", "smoke", "--recompute"]) == 0
    assert cli(["verify"]) == 0


def test_cli_results_folder_at_smoke_scale(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NTKBOOK_CACHE", str(tmp_path / "cache"))
    assert cli(["run", "demo_sweep", "--scale", "smoke", "--results", str(tmp_path / "mine")]) == 0
    assert Store(tmp_path / "mine").has("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    assert not (tmp_path / "cache").exists()


def test_cli_set_overrides(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    assert cli(["run", "demo_sweep", "--scale", "smoke", "--results", str(out),
                "--set", "sample_sizes=16,32", "--set", "repeats=20"]) == 0
    config = demo_sweep.Config(sample_sizes=(16, 32), repeats=20)
    assert Store(out).load("demo_sweep", demo_sweep.VERSION, config)["rms_error"].shape == (2,)
    assert cli(["run", "demo_sweep", "--scale", "smoke", "--set", "repeat=3"]) == 2
    err = capsys.readouterr().err
    assert "no config field 'repeat'" in err and "repeats, sample_sizes, seed" in err
    assert cli(["run", "demo_sweep", "--scale", "smoke", "--set", "repeats=0.5"]) == 2
    assert "demo_sweep.repeats is a int" in capsys.readouterr().err
    parsed = experiments.parse_overrides("demo_sweep", "smoke", ["sample_sizes=[8, 9]", "seed=2"])
    assert parsed == {"sample_sizes": (8, 9), "seed": 2}
    with pytest.raises(experiments.ConfigError, match="valid fields: repeats, sample_sizes, seed"):
        experiments.load_or_run("demo_sweep", "smoke", samples=3)


def test_load_or_run_paper_uses_store(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path))
    first = experiments.load_or_run("demo_sweep", "paper")
    monkeypatch.setattr(demo_sweep, "rms_error", lambda *a: pytest.fail("should load, not recompute"))
    second = experiments.load_or_run("demo_sweep", "paper")
    np.testing.assert_array_equal(first["rms_error"], second["rms_error"])
    with pytest.raises(ValueError, match="scale must be one of"):
        experiments.load_or_run("demo_sweep", "huge")
    with pytest.raises(KeyError, match="unknown experiment"):
        experiments.get("nope")


def test_load_or_run_smoke_reuses_only_todays_result(tmp_path, monkeypatch):
    """A smoke result is reused only when today's code computed it in this environment: a change
    of code hash or of a package version recomputes it, and ``recompute`` always does."""
    monkeypatch.setenv("NTKBOOK_CACHE", str(tmp_path))
    calls = []
    real = demo_sweep.rms_error

    def counted(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(demo_sweep, "rms_error", counted)
    n = len(demo_sweep.Config.smoke().sample_sizes)
    first = experiments.load_or_run("demo_sweep", "smoke")
    assert len(calls) == n
    second = experiments.load_or_run("demo_sweep", "smoke")
    assert len(calls) == n, "today's smoke result was recomputed instead of reused"
    assert second.provenance["date"] == first.provenance["date"]
    np.testing.assert_array_equal(first["rms_error"], second["rms_error"])
    experiments.load_or_run("demo_sweep", "smoke", recompute=True)
    assert len(calls) == 2 * n
    # other code: the stored result is not today's and is recomputed (and replaced)
    monkeypatch.setattr(experiments, "code_hash", lambda name: "0123456789abcdef")
    third = experiments.load_or_run("demo_sweep", "smoke")
    assert len(calls) == 3 * n and third.provenance["code_sha256"] == "0123456789abcdef"
    experiments.load_or_run("demo_sweep", "smoke")
    assert len(calls) == 3 * n
    # another jax version: recomputed too
    real_prov = store_mod.provenance

    def other_jax(**kw):
        prov = real_prov(**kw)
        return {**prov, "versions": {**prov["versions"], "jax": "0.0.1"}}

    monkeypatch.setattr(store_mod, "provenance", other_jax)
    experiments.load_or_run("demo_sweep", "smoke")
    assert len(calls) == 4 * n


def test_computed_here_compares_code_and_environment():
    prov = {**store_mod.provenance(), "code_sha256": "abc"}
    assert store_mod.computed_here(prov, "abc")
    assert not store_mod.computed_here(prov, "abd")
    assert not store_mod.computed_here(prov, "")
    for key, other in (("python", "2.7.18"), ("backend", "gpu"), ("device", "NVIDIA H200"), ("x64", None)):
        assert not store_mod.computed_here({**prov, key: other}, "abc"), key
    assert not store_mod.computed_here({k: v for k, v in prov.items() if k != "versions"}, "abc")


def test_every_experiment_has_presets():
    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        assert isinstance(module.VERSION, str)
        for scale in experiments.SCALES:
            config = experiments.make_config(name, scale)
            assert dataclasses.is_dataclass(config)
            config_hash(config)  # JSON-able


def test_rehash_re_signs_entries_of_the_first_format_2_store(tmp_path):
    """The first format-2 store hashed the json without its integrity fields: rehash re-signs
    such entries (after checking their npz), and refuses an entry edited since."""
    store, cfg, folder = _saved(tmp_path)
    meta = json.loads((folder / "result.json").read_text())
    body = {k: v for k, v in meta.items() if k != "integrity"}
    meta["integrity"]["json_sha256"] = store_mod._json_digest(body)
    (folder / "result.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="content hash"):
        store.load("exp", "1", cfg)
    assert "re-signed" in store.rehash()[0]
    assert store.load("exp", "1", cfg)["s"] == 1
    meta = json.loads((folder / "result.json").read_text())
    meta["scalars"]["s"] = 2  # edited: neither hash matches, so it is not re-signed
    (folder / "result.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="content hash"):
        store.rehash()


def test_archive_is_read_but_never_listed_with_the_experiments(tmp_path, capsys):
    """Entries moved to ``<root>/archive/<name>/`` (a retired experiment's) are found by config
    values, content hashes checked; ``list`` leaves them out, ``verify`` checks them."""
    store = Store(tmp_path / "results")
    archived = Store(tmp_path / "results" / store_mod.ARCHIVE)
    for n in (32, 128):
        archived.save(Result("retired", {"n_per_class": n, "layers": [16]}, arrays={"x": np.arange(3.0) * n},
                             provenance={"git_commit": "abc"}), "1")
    store.save(Result("live", {"a": 1}, arrays={"x": np.zeros(2)}), "1")
    assert [row["name"] for row in store.list()] == ["live"]
    assert store.archive().root == archived.root
    found = store.archive().find("retired", n_per_class=128, layers=(16,))  # a tuple matches the stored list
    assert found.config["n_per_class"] == 128 and np.array_equal(found["x"], np.arange(3.0) * 128)
    assert store.archive().find("retired", n_per_class=64) is None
    assert store.archive().find("other") is None
    with pytest.raises(StoreError, match="2 entries of retired"):
        store.archive().find("retired", layers=[16])
    folder = archived.entry_dir("retired", "1", {"n_per_class": 32, "layers": [16]})
    (folder / "result.npz").write_bytes(b"damaged")
    with pytest.raises(StoreError, match="does not match the sha256"):
        store.archive().find("retired", n_per_class=32)
    assert cli(["verify", "--results", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "corrupt" in out and "retired" in out
    assert "archived (retired experiment)" in out  # the intact archived entry, checked and labelled


def test_no_experiment_is_named_like_the_archive():
    assert store_mod.ARCHIVE not in experiments.EXPERIMENTS
