"""Experiments: one module each, with a ``Config`` dataclass and a ``run`` function.

Each experiment module defines

- ``NAME``: its name in the store and on the command line,
- ``VERSION``: a string bumped whenever the meaning of its result changes,
- ``Config``: a frozen dataclass with classmethods ``smoke()`` and ``paper()``,
- ``run(config, points) -> Result``: ``points`` is a :class:`ntkbook.store.PointStore`
  through which a sweep saves each finished point (so an interrupted run resumes),
- optionally ``estimate_seconds(config) -> float``, a rough CPU time shown before a long run,
- optionally ``NONFINITE_ALLOWED``: ``{pattern: reason}``, the scalars that may be NaN or infinite
  (e.g. "the epoch at which accuracy crossed 90 %: NaN when it never did"); any other non-finite
  scalar makes the run fail instead of being stored (:func:`check_finite`),
- optionally what :mod:`ntkbook.freshness` uses to re-verify a stored entry
  (``REPRODUCE_TOLERANCE``, ``reproduce_sample``, ``sample_view``),
- ``PRECISION`` when it computes materialised eNTKs (required then; a test checks it): the
  ``precision=`` it passes to :mod:`ntkbook.ntk.entk` (one of ``entk.PRECISIONS``), with its
  reason; :func:`run_and_save` records it in the provenance of each new result (changing it changes
  the stored numbers: a new ``VERSION``).

:func:`load_or_run` is what chapters call: the paper-scale result comes from ``results/``
(computed and saved there when missing); the smoke-scale result is computed and cached in
:func:`cache_dir`, and reused only while today's code and environment are the ones that computed it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Sequence

from ntkbook.codehash import SCHEME, code_hash
from ntkbook.errors import ConfigError, NtkbookError
from ntkbook.paths import cache_dir, results_dir, scratch_dir
from ntkbook.progress import format_seconds
from ntkbook.store import Result, Store, canonical_json, config_hash

__all__ = [
    "EXPERIMENTS", "ConfigError", "NonFiniteResult", "get", "make_config", "config_from_dict",
    "parse_overrides", "check_finite", "load_or_run", "load_stored", "NotStored", "run_and_save",
    "store_for", "code_hash",
]

#: name -> module path of every experiment: each module of this package (its file name is its
#: ``NAME``), found without importing it.
EXPERIMENTS: dict[str, str] = {
    info.name: f"{__name__}.{info.name}"
    for info in pkgutil.iter_modules(__path__)
    if not info.name.startswith("_")
}

SCALES = ("smoke", "paper")


class NonFiniteResult(NtkbookError):
    """A run produced a NaN or infinite scalar its experiment does not declare possible."""


def get(name: str) -> ModuleType:
    """The experiment module registered under ``name``."""
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    module = importlib.import_module(EXPERIMENTS[name])
    if getattr(module, "NAME", None) != name:
        raise RuntimeError(f"experiment module {module.__name__} must define NAME = {name!r}")
    return module


def make_config(name: str, scale: str, **overrides: Any):
    """``Config.smoke()`` or ``Config.paper()`` of experiment ``name``, with field overrides.

    An unknown field is a ``TypeError`` that lists the valid ones.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    import dataclasses

    config = getattr(get(name).Config, scale)()
    if not overrides:
        return config
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(
            f"{name} has no config field(s) {', '.join(unknown)}; valid fields: "
            f"{', '.join(sorted(fields))}"
        )
    return dataclasses.replace(config, **overrides)


def config_from_dict(name: str, values: dict[str, Any]):
    """The ``Config`` of experiment ``name`` a stored entry's config dict describes (lists back to
    the tuples of tuple fields); its canonical JSON equals the dict's, or a ConfigError says why.
    """
    import dataclasses

    preset = make_config(name, "paper")
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)}
    unknown = sorted(set(values) - set(fields))
    missing = sorted(set(fields) - set(values))
    if unknown or missing:
        raise ConfigError(f"a stored config of {name} does not match today's Config fields "
                          f"(unknown: {unknown}, missing: {missing}); its VERSION should have "
                          f"changed with the fields")

    def typed(value: Any, like: Any) -> Any:
        if isinstance(like, tuple) and isinstance(value, list):
            inner = like[0] if like else None
            return tuple(typed(v, inner) for v in value)
        return value

    config = dataclasses.replace(preset, **{k: typed(v, fields[k]) for k, v in values.items()})
    if canonical_json(config) != canonical_json(values):
        raise ConfigError(f"the stored config of {name} cannot be rebuilt exactly: {values}")
    return config


def parse_overrides(name: str, scale: str, assignments: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` (from ``--set``) to config overrides of the fields' types.

    A value is read as JSON where it can be (``3``, ``1e-3``, ``true``, ``[1,2]``, ``null``),
    else as a string; comma-separated values fill a tuple field. It is then converted to the type
    of the field's preset value (an int field refuses ``0.5``; a tuple field gets a tuple).
    """
    import dataclasses
    import json

    config = make_config(name, scale)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for text in assignments:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--set expects key=value, got {text!r}")
        if key not in fields:
            raise ConfigError(
                f"{name} has no config field {key!r}; valid fields: {', '.join(sorted(fields))}"
            )
        current = fields[key]
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(current, tuple) and not isinstance(value, list):
            value = [json.loads(v) if _is_json(v) else v for v in raw.split(",") if v.strip()]
        out[key] = _coerce(name, key, value, current)
    return out


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _coerce(name: str, key: str, value: Any, current: Any) -> Any:
    bad = ConfigError(f"{name}.{key} is a {type(current).__name__} (preset {current!r}); got {value!r}")
    if current is None or value is None:
        return value
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise bad
        return value
    if isinstance(current, int):
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, float) and value.is_integer())):
            raise bad
        return int(value)
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if isinstance(current, str):
        return value if isinstance(value, str) else str(value)
    if isinstance(current, tuple):
        if not isinstance(value, list):
            raise bad
        if current:
            return tuple(_coerce(name, key, v, current[0]) for v in value)
        return tuple(value)
    return value


def store_for(scale: str, root: str | os.PathLike | None = None) -> Store:
    """The store of a scale: paper results in :func:`results_dir` (computed only from committed
    code), smoke results in :func:`cache_dir`; ``root`` overrides the folder for either scale."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    default = results_dir() if scale == "paper" else cache_dir()
    folder = Path(root) if root is not None else default
    root_id = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    return Store(folder, scratch=scratch_dir() / root_id, scale=scale,
                 require_clean=(scale == "paper"), cli_root=root is not None)


def check_finite(name: str, result: Result, allowed: dict[str, str] | None = None) -> None:
    """Refuse a result with a NaN or infinite scalar that is not declared possible (``allowed``:
    ``{fnmatch pattern over the scalar's path: reason}``, the experiment's ``NONFINITE_ALLOWED``).
    Paths read like ``table.mnist10/relu.flip_pgd[2]``."""
    import fnmatch
    import math

    bad: list[str] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")
        elif isinstance(obj, float) and not math.isfinite(obj):
            if not any(fnmatch.fnmatchcase(path, pat) for pat in (allowed or {})):
                bad.append(f"{path} = {obj}")

    walk(result.scalars, "")
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise NonFiniteResult(
            f"{name} produced non-finite values, so its result was not stored: {shown}. Check the "
            f"config (too few seeds or repeats for a spread or a slope?), or, if such a value can "
            f"be a true answer, declare it in {name}.NONFINITE_ALLOWED with the reason."
        )


def run_and_save(name: str, config: Any, store: Store, *, recompute: bool = False,
                 current_only: bool = False, wait: bool = True) -> Result:
    """Run experiment ``name`` with ``config``, checkpointing points, and save it in ``store``.

    Holds the entry's lock (see :meth:`ntkbook.store.Store.get_or_compute`): a concurrent run of
    the same entry is waited for and its result loaded. Without ``recompute`` a stored, verified
    entry is loaded, not recomputed; with ``current_only`` only if today's code computed it in
    this environment (:func:`ntkbook.store.computed_here`).
    """
    module = get(name)
    code = code_hash(module.__name__)

    def announce() -> None:
        est = getattr(module, "estimate_seconds", None)
        msg = f"computing {name} (config {config_hash(config)}, code {code})"
        if est is not None:
            msg += f", roughly {format_seconds(est(config))} on 2 CPU cores"
        print(msg, flush=True)

    def compute(points):
        from ntkbook.ntk.entk import recording_routes  # lazy: listing experiments needs no jax

        with recording_routes() as routes:
            result = module.run(config, points)
        if routes:  # the eNTK routes of the kernels this process computed (ntkbook.ntk.entk)
            result.provenance["entk_routes"] = sorted(routes)
        check_finite(name, result, getattr(module, "NONFINITE_ALLOWED", None))
        if hasattr(module, "PRECISION"):
            result.provenance["precision"] = module.PRECISION
        result.provenance["code_hash_scheme"] = SCHEME
        return result

    return store.get_or_compute(name, module.VERSION, config, compute,
                                code=code, recompute=recompute, current_only=current_only, wait=wait,
                                on_start=announce)


def load_or_run(name: str, scale: str = "paper", *, recompute: bool = False, **overrides: Any) -> Result:
    """The result of experiment ``name`` at ``scale``.

    Paper scale: loaded from :func:`results_dir` when stored (after checking its content hashes),
    else computed and saved there (only from committed code, see :class:`ntkbook.store.Store`).
    Smoke scale: computed and saved under :func:`cache_dir`; a smoke result stored there is
    reused only when today's code computed it in this environment (same code hash, package
    versions, backend), so an edit to the code recomputes it (``recompute`` always does).
    """
    config = make_config(name, scale, **overrides)
    store = store_for(scale)
    return run_and_save(name, config, store, recompute=recompute, current_only=scale == "smoke")


class NotStored(NtkbookError):
    """No stored paper-scale result for any of the configs a page may read."""


def load_stored(name: str, scale: str = "paper", alternatives: Sequence[Mapping[str, Any]] = (),
                **overrides: Any) -> Result:
    """The stored result of experiment ``name`` at ``scale``, where a page may read a reduced
    config until the full one is computed.

    Paper scale: the paper preset with ``overrides`` if it is stored, else the first of
    ``alternatives`` (overrides on top of the same, e.g. fewer tasks while the others are still
    computing) that is stored; nothing is computed (a page never starts an hours-long run), and
    when none is stored the error names the configs tried and the command to compute the first.
    The result's provenance line names the changed fields, so a reduced config is never hidden.
    Smoke scale: :func:`load_or_run` with ``overrides``."""
    if scale != "paper":
        return load_or_run(name, scale, **overrides)
    module = get(name)
    store = store_for(scale)
    tried = []
    for extra in ({}, *alternatives):
        config = make_config(name, scale, **{**overrides, **extra})
        if store.has(name, module.VERSION, config):
            return store.load(name, module.VERSION, config)
        tried.append(extra)
    sets = " ".join(f"--set {k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                    for k, v in overrides.items())
    command = f"python -m ntkbook run {name} --scale paper {sets}".strip()
    raise NotStored(f"{name}: no stored paper-scale result for the paper preset"
                    + (f" or the reduced configs {tried[1:]}" if len(tried) > 1 else "")
                    + f"; compute it with `{command}` (from a clean commit).")
