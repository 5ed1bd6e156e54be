"""The results store: config-hashed, provenance-stamped, atomic, resumable.

An entry is keyed by ``(experiment name, config hash, experiment version)`` and lives in a folder
``<root>/<name>/<version>-<hash>/`` holding

- ``result.npz``   the arrays of the result,
- ``result.json``  scalars and tables (JSON), the config, and provenance (date, git commit and
  whether the tree was dirty, package versions, device, wall time),
- ``points/``      per-point checkpoints of a sweep, so that an interrupted run resumes.

Writes are atomic (temporary file + :func:`os.replace`). A corrupt entry, or one whose stored
key does not match the key it is filed under, raises :class:`StoreError`; it is never used
silently.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import io
import json
import os
import platform
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

__all__ = [
    "Result",
    "Store",
    "StoreError",
    "PointStore",
    "config_hash",
    "canonical_json",
    "provenance",
]

FORMAT = 1


class StoreError(RuntimeError):
    """A store entry is missing, corrupt, or does not match its key."""


@dataclass
class Result:
    """What an experiment returns and the store saves.

    Attributes:
      name: experiment name.
      config: the config as a plain dict (``dataclasses.asdict``).
      arrays: named numpy arrays (saved to ``.npz``).
      scalars: JSON-serialisable numbers, strings, lists and dicts (tables).
      provenance: filled in by the store when the result is computed.
    """

    name: str
    config: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key in self.arrays:
            return self.arrays[key]
        if key in self.scalars:
            return self.scalars[key]
        raise KeyError(
            f"result {self.name!r} has no entry {key!r}; arrays: {sorted(self.arrays)}, "
            f"scalars: {sorted(self.scalars)}"
        )


def _to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return repr(obj)  # JSON has no nan/inf; keep them readable and stable
    return obj


def canonical_json(obj: Any) -> str:
    """Canonical JSON of a config: sorted keys, no whitespace, tuples as lists."""
    return json.dumps(_to_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_hash(config: Any, length: int = 12) -> str:
    """Stable hash of a config (a dataclass or a dict), independent of key order."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:length]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Where and with what a result was computed."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("jax", "jaxlib", "flax", "optax", "numpy", "scipy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    try:
        import jax

        device = ", ".join(sorted({d.device_kind for d in jax.devices()}))
        backend = jax.default_backend()
    except Exception as exc:  # pragma: no cover - reported, not hidden
        device, backend = f"unknown ({exc})", "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "versions": versions,
        "python": platform.python_version(),
        "device": device,
        "backend": backend,
        "host": platform.node(),
    }


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise StoreError(
            f"corrupt store file {path}: {exc}. Delete the entry folder {path.parent} "
            f"and run the experiment again."
        ) from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"corrupt store file {path}: {exc}. Delete the entry folder {path.parent} "
            f"and run the experiment again."
        ) from exc


class PointStore:
    """Per-point checkpoints of one sweep: each finished point is saved at once.

    ``points.cached(key, compute)`` returns the stored point when there is one, else calls
    ``compute() -> (arrays, scalars)``, saves it atomically and returns it. An interrupted sweep
    rerun with the same config therefore resumes after its last finished point.
    A ``PointStore(None)`` computes everything and saves nothing.
    """

    def __init__(self, folder: Path | None):
        self.folder = None if folder is None else Path(folder)
        self.computed: list[str] = []
        self.reused: list[str] = []

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        return self.folder / f"{safe}-{digest}"

    def cached(
        self,
        key: str,
        compute: Callable[[], tuple[Mapping[str, Any], Mapping[str, Any]]],
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if self.folder is not None:
            base = self._path(key)
            npz, js = base.with_suffix(".npz"), base.with_suffix(".json")
            if js.exists():
                meta = _read_json(js)
                if meta.get("key") != key:
                    raise StoreError(
                        f"checkpoint {js} belongs to point {meta.get('key')!r}, not {key!r}. "
                        f"Delete {self.folder} and run again."
                    )
                arrays = _read_npz(npz) if npz.exists() else {}
                if set(arrays) != set(meta.get("array_names", [])):
                    raise StoreError(
                        f"checkpoint {base} is incomplete (arrays {sorted(arrays)} but "
                        f"{meta.get('array_names')} expected). Delete it and run again."
                    )
                self.reused.append(key)
                return arrays, meta["scalars"]
        arrays, scalars = compute()
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        scalars = _to_jsonable(dict(scalars))
        if self.folder is not None:
            # npz first, json last: the json marks the point as finished.
            _atomic_write_bytes(npz, _npz_bytes(arrays))
            meta = {"key": key, "array_names": sorted(arrays), "scalars": scalars}
            _atomic_write_bytes(js, json.dumps(meta, indent=1).encode())
        self.computed.append(key)
        return arrays, scalars


class Store:
    """A folder of experiment results.

    >>> store = Store("results")
    >>> result = store.get_or_run(experiment, config)   # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # -- keys ------------------------------------------------------------------------------
    def entry_dir(self, name: str, version: str, config: Any) -> Path:
        return self.root / name / f"{version}-{config_hash(config)}"

    # -- reading ---------------------------------------------------------------------------
    def has(self, name: str, version: str, config: Any) -> bool:
        return (self.entry_dir(name, version, config) / "result.json").exists()

    def load(self, name: str, version: str, config: Any) -> Result:
        folder = self.entry_dir(name, version, config)
        js = folder / "result.json"
        if not js.exists():
            raise StoreError(
                f"no stored result for {name!r} (version {version}, config hash "
                f"{config_hash(config)}) in {folder}. Compute it with "
                f"`python -m ntkbook run {name} --scale <smoke|paper>`."
            )
        meta = _read_json(js)
        expected = {"name": name, "version": version, "config_hash": config_hash(config)}
        found = {k: meta.get(k) for k in expected}
        if found != expected:
            raise StoreError(
                f"store entry {folder} does not match its key: expected {expected}, found "
                f"{found}. Delete the folder and run the experiment again."
            )
        if canonical_json(meta.get("config")) != canonical_json(config):
            raise StoreError(
                f"store entry {folder} was computed for another config (hash collision or "
                f"edited file). Delete the folder and run the experiment again."
            )
        arrays = _read_npz(folder / "result.npz")
        missing = set(meta.get("array_names", [])) - set(arrays)
        if missing:
            raise StoreError(f"store entry {folder} lacks arrays {sorted(missing)}; delete it.")
        return Result(
            name=name,
            config=meta["config"],
            arrays=arrays,
            scalars=meta["scalars"],
            provenance=meta["provenance"],
        )

    def list(self) -> list[dict[str, Any]]:
        """One row per entry: name, version, hash, date, device, wall time, finished or not."""
        rows = []
        if not self.root.exists():
            return rows
        for folder in sorted(self.root.glob("*/*")):
            if not folder.is_dir():
                continue
            row: dict[str, Any] = {"name": folder.parent.name, "entry": folder.name}
            js = folder / "result.json"
            if js.exists():
                try:
                    meta = _read_json(js)
                    prov = meta.get("provenance", {})
                    row.update(
                        finished=True,
                        date=prov.get("date"),
                        device=prov.get("device"),
                        wall_s=prov.get("wall_time_s"),
                    )
                except StoreError as exc:
                    row.update(finished=False, error=str(exc))
            else:
                n = len(list((folder / "points").glob("*.json")))
                row.update(finished=False, points=n)
            rows.append(row)
        return rows

    # -- writing ---------------------------------------------------------------------------
    def points(self, name: str, version: str, config: Any) -> PointStore:
        return PointStore(self.entry_dir(name, version, config) / "points")

    def save(self, result: Result, version: str) -> Path:
        folder = self.entry_dir(result.name, version, result.config)
        _atomic_write_bytes(folder / "result.npz", _npz_bytes(result.arrays))
        meta = {
            "format": FORMAT,
            "name": result.name,
            "version": version,
            "config_hash": config_hash(result.config),
            "config": _to_jsonable(result.config),
            "array_names": sorted(result.arrays),
            "scalars": _to_jsonable(result.scalars),
            "provenance": _to_jsonable(result.provenance),
        }
        _atomic_write_bytes(folder / "result.json", json.dumps(meta, indent=1).encode())
        return folder
