"""Experiments: one module each, with a ``Config`` dataclass and a ``run`` function.

Each experiment module defines

- ``NAME``: its name in the store and on the command line,
- ``VERSION``: a string bumped whenever the meaning of its result changes,
- ``Config``: a frozen dataclass with classmethods ``smoke()`` and ``paper()``,
- ``run(config, points) -> Result``: ``points`` is a :class:`ntkbook.store.PointStore`
  through which a sweep saves each finished point (so an interrupted run resumes),
- optionally ``estimate_seconds(config) -> float``, a rough CPU time shown before a long run.

:func:`load_or_run` is what chapters call: the paper-scale result comes from ``results/``
(computed and saved there when missing); the smoke-scale result is computed from scratch.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ntkbook.progress import format_seconds
from ntkbook.store import Result, Store, config_hash, provenance

__all__ = ["EXPERIMENTS", "get", "make_config", "load_or_run", "results_dir", "cache_dir"]

#: name -> module path of every experiment: each module of this package (its file name is its
#: ``NAME``), found without importing it.
EXPERIMENTS: dict[str, str] = {
    info.name: f"{__name__}.{info.name}"
    for info in pkgutil.iter_modules(__path__)
    if not info.name.startswith("_")
}

SCALES = ("smoke", "paper")


def get(name: str) -> ModuleType:
    """The experiment module registered under ``name``."""
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    module = importlib.import_module(EXPERIMENTS[name])
    if getattr(module, "NAME", None) != name:
        raise RuntimeError(f"experiment module {module.__name__} must define NAME = {name!r}")
    return module


def make_config(name: str, scale: str, **overrides: Any):
    """``Config.smoke()`` or ``Config.paper()`` of experiment ``name``, with field overrides."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    import dataclasses

    config = getattr(get(name).Config, scale)()
    return dataclasses.replace(config, **overrides) if overrides else config


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def results_dir() -> Path:
    """Where paper-scale results live: ``$NTKBOOK_RESULTS`` or ``<repo>/results``."""
    return Path(os.environ.get("NTKBOOK_RESULTS", _repo_root() / "results"))


def cache_dir() -> Path:
    """Where smoke-scale results go: ``$NTKBOOK_CACHE`` or ``<repo>/.cache/results``."""
    return Path(os.environ.get("NTKBOOK_CACHE", _repo_root() / ".cache" / "results"))


def run_and_save(name: str, config: Any, store: Store) -> Result:
    """Run experiment ``name`` with ``config``, checkpointing points in ``store``, and save."""
    module = get(name)
    points = store.points(name, module.VERSION, config)
    est = getattr(module, "estimate_seconds", None)
    msg = f"computing {name} (config {config_hash(config)})"
    if est is not None:
        msg += f", roughly {format_seconds(est(config))} on 2 CPU cores"
    print(msg, flush=True)
    t0 = time.perf_counter()
    result = module.run(config, points)
    result.provenance = {**provenance(), **result.provenance, "wall_time_s": time.perf_counter() - t0}
    if points.reused:
        result.provenance["resumed_points"] = len(points.reused)
    store.save(result, module.VERSION)
    # The result is complete: its per-point checkpoints are no longer needed.
    if points.folder is not None:
        import shutil

        shutil.rmtree(points.folder, ignore_errors=True)
    return result


def load_or_run(name: str, scale: str = "paper", *, recompute: bool = False, **overrides: Any) -> Result:
    """The result of experiment ``name`` at ``scale``.

    Paper scale: loaded from :func:`results_dir` when stored, else computed and saved there.
    Smoke scale: always computed from scratch (saved under :func:`cache_dir`).
    """
    config = make_config(name, scale, **overrides)
    module = get(name)
    if scale == "paper":
        store = Store(results_dir())
        if store.has(name, module.VERSION, config) and not recompute:
            return store.load(name, module.VERSION, config)
    else:
        store = Store(cache_dir())
        import shutil

        shutil.rmtree(store.entry_dir(name, module.VERSION, config), ignore_errors=True)
    return run_and_save(name, config, store)
