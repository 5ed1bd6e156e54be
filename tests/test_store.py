"""The results store: round trip, stable hashing, resume after interruption, corrupt entries."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.__main__ import main as cli
from ntkbook.experiments import demo_sweep
from ntkbook.store import PointStore, Result, Store, StoreError, config_hash


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


def test_config_hash_is_stable():
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})
    assert config_hash(Cfg()) == config_hash({"widths": [1, 2, 3], "lr": 0.1, "name": "x"})
    assert config_hash(Cfg()) != config_hash(Cfg(lr=0.2))
    # a fixed value: the hash must not change between runs or machines
    assert config_hash({"a": 1}) == "015abd7f5cc5"


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


def test_demo_experiment_resumes(tmp_path, monkeypatch):
    """An experiment interrupted mid-sweep resumes from its checkpoints when run again."""
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path))
    config = demo_sweep.Config.smoke()
    store = Store(tmp_path)
    real = demo_sweep.rms_error
    seen = []

    def flaky(n, repeats, seed):
        seen.append(n)
        if n == config.sample_sizes[2] and seen.count(n) == 1:
            raise KeyboardInterrupt
        return real(n, repeats, seed)

    monkeypatch.setattr(demo_sweep, "rms_error", flaky)
    with pytest.raises(KeyboardInterrupt):
        experiments.run_and_save("demo_sweep", config, store)
    assert not store.has("demo_sweep", demo_sweep.VERSION, config)
    result = experiments.run_and_save("demo_sweep", config, store)
    assert seen == [16, 64, 256, 256, 1024]
    assert result.provenance["resumed_points"] == 2
    loaded = store.load("demo_sweep", demo_sweep.VERSION, config)
    np.testing.assert_allclose(loaded["rms_error"], result["rms_error"])
    assert -0.7 < loaded["loglog_slope"] < -0.3


def _saved(tmp_path):
    store = Store(tmp_path)
    cfg = {"k": 1}
    folder = store.save(Result("exp", cfg, arrays={"x": np.ones(10)}, scalars={"s": 1}), "1")
    return store, cfg, folder


def test_corrupt_npz_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    (folder / "result.npz").write_bytes(b"not a zip file")
    with pytest.raises(StoreError, match="corrupt store file .*result.npz"):
        store.load("exp", "1", cfg)


def test_corrupt_json_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    (folder / "result.json").write_text("{ truncated")
    with pytest.raises(StoreError, match="corrupt store file .*result.json"):
        store.load("exp", "1", cfg)


def test_mismatched_entry_is_reported(tmp_path):
    store, cfg, folder = _saved(tmp_path)
    meta = json.loads((folder / "result.json").read_text())
    meta["config"] = {"k": 2}
    (folder / "result.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="another config"):
        store.load("exp", "1", cfg)
    meta["version"] = "0"
    (folder / "result.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="does not match its key"):
        store.load("exp", "1", cfg)


def test_corrupt_checkpoint_is_reported(tmp_path):
    points = PointStore(tmp_path)
    points.cached("p", lambda: ({"a": np.ones(3)}, {}))
    next(tmp_path.glob("*.npz")).write_bytes(b"garbage")
    with pytest.raises(StoreError, match="corrupt"):
        PointStore(tmp_path).cached("p", lambda: ({"a": np.ones(3)}, {}))


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    store = Store(tmp_path)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("ntkbook.store.os.replace", boom)
    with pytest.raises(OSError):
        store.save(Result("exp", {"k": 1}, arrays={"x": np.ones(3)}), "1")
    assert not store.has("exp", "1", {"k": 1})
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_cli_list_and_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("NTKBOOK_CACHE", str(tmp_path / "cache"))
    assert cli(["list"]) == 0
    assert "demo_sweep" in capsys.readouterr().out
    assert cli(["run", "demo_sweep", "--scale", "smoke"]) == 0
    assert "saved demo_sweep" in capsys.readouterr().out
    assert Store(tmp_path / "cache").has("demo_sweep", demo_sweep.VERSION, demo_sweep.Config.smoke())
    assert cli(["run", "demo_sweep", "--scale", "smoke"]) == 0
    assert "already stored" in capsys.readouterr().out


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


def test_every_experiment_has_presets():
    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        assert isinstance(module.VERSION, str)
        for scale in experiments.SCALES:
            config = experiments.make_config(name, scale)
            assert dataclasses.is_dataclass(config)
            config_hash(config)  # JSON-able
