"""The results store: config-hashed, content-hashed, locked, provenance-stamped, resumable.

An entry is keyed by ``(experiment name, experiment version, config hash)`` and lives in a folder
``<root>/<name>/<version>-<config hash>/`` holding

- ``result.npz``   the arrays of the result,
- ``result.json``  scalars and tables (JSON), the config, provenance (date, git commit, whether the
  code was committed, package versions, device, wall time) and ``integrity``: the sha256 of the
  npz file and of the JSON content itself (everything but ``integrity``, canonically serialised).

Every read (:meth:`Store.has`, :meth:`Store.load`, :meth:`Store.list`) checks both hashes, so a
truncated, bit-flipped or hand-edited entry is a :class:`StoreError` naming the file and the
command that repairs it; it is never used silently. Non-finite floats are stored as JSON's
``NaN``/``Infinity`` tokens and come back as Python floats, whatever their type going in.

The entry locks live with the results they protect, in ``<root>/.locks/`` (which holds a
``.gitignore`` of its own, so git never sees them): ``<root>/.locks/<name>/<version>-<config
hash>.lock`` is an ``fcntl.flock`` lock. Computing or rewriting an entry holds it exclusively (a
second run of the same entry waits for the first, then loads its result, or refuses at once with
``wait=False``); reading it (:meth:`Store.load`, :meth:`Store.has`, :meth:`Store.list`) holds it
shared, so any number of readers go together and never see a half-written entry, whichever
checkout or scratch folder they run from. A results folder that is read-only is read without
locks (nothing can write it).

The per-point checkpoints of a sweep are working files and never go into ``<root>`` (tracked by git
for ``results/``): they live under a *scratch* folder, by default ``<repo>/.cache/store/<root id>/``
(``$NTKBOOK_SCRATCH`` overrides ``<repo>/.cache/store``), in
``points/<name>/<version>-<config hash>/<code hash>/``: one ``.npz`` + ``.json`` pair per finished
point; the folder is keyed by a hash of the experiment's code, so checkpoints written by other code
are never reused (they are deleted when the entry is next computed).

An entry can carry ``reverified``: records of later reruns with other code that reproduced it
(:meth:`Store.add_reverification`, written by ``python -m ntkbook reproduce``), and ``rekeyed``:
records that state the hash, under a newer hashing scheme, of the code that computed it or re-verified
it (:meth:`Store.add_rekey`); whether a stored result still comes from today's code is decided
above the store (:mod:`ntkbook.freshness`), which knows the experiments' code.

The results of an experiment whose code was retired stay readable in ``<root>/archive/<name>/``
(:data:`ARCHIVE`, :meth:`Store.archive`): the same entries, moved there when the experiment module
was deleted, never listed with the experiments' entries, never recomputed and never judged against
today's code (no code computes them any more); ``<root>/archive/README.md`` names the commit that
last held their code.

Writes are atomic (temporary file, ``fsync``, :func:`os.replace`, ``fsync`` of the folder); the
npz is written before the JSON that carries its hash, so a crash between the two leaves an entry
whose hashes do not match, which is reported, not used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import errno
import fcntl
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ntkbook.errors import NtkbookError
from ntkbook.paths import scratch_dir

__all__ = [
    "Result",
    "Store",
    "StoreError",
    "PointStore",
    "config_hash",
    "canonical_json",
    "provenance",
    "environment",
    "migrate_nonfinite",
    "ARCHIVE",
]

#: 1: no content hashes, non-finite floats as strings; 2: sha256 integrity, non-finite as floats.
FORMAT = 2

#: folder of the entry locks inside a results folder (with a ``.gitignore`` that ignores it all)
LOCKS = ".locks"

#: folder of a results folder that holds the entries of retired experiments (never an experiment's name)
ARCHIVE = "archive"

#: environment variables read by :func:`provenance`
ALLOW_DIRTY_ENV = "NTKBOOK_ALLOW_DIRTY"
COMMIT_ENV = "NTKBOOK_GIT_COMMIT"


class StoreError(NtkbookError, RuntimeError):
    """A store entry is missing, corrupt, locked by another run, or does not match its key."""


@dataclass
class Result:
    """What an experiment returns and the store saves.

    Attributes:
      name: experiment name.
      config: the config as a plain dict (``dataclasses.asdict``).
      arrays: named numpy arrays (saved to ``.npz``).
      scalars: JSON-serialisable numbers, strings, lists and dicts (tables).
      provenance: filled in by the store when the result is computed.
      reverified: records of later reruns, with other code, that reproduced this result
        (filled in by the store when loading; see :meth:`Store.add_reverification`).
      rekeyed: records that give the code hash, under a newer scheme, of the code behind the
        provenance or a re-verification (see :meth:`Store.add_rekey`).
    """

    name: str
    config: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    reverified: list[dict[str, Any]] = field(default_factory=list)
    rekeyed: list[dict[str, Any]] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        if key in self.arrays:
            return self.arrays[key]
        if key in self.scalars:
            return self.scalars[key]
        raise KeyError(
            f"result {self.name!r} has no entry {key!r}; arrays: {sorted(self.arrays)}, "
            f"scalars: {sorted(self.scalars)}"
        )


# -- JSON ----------------------------------------------------------------------------------------
def _to_jsonable(obj: Any) -> Any:
    """Plain JSON types; every float (Python or numpy, finite or not) becomes a Python float."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _to_jsonable(obj.item())
    if isinstance(obj, float):
        return float(obj)
    return obj


def _config_jsonable(obj: Any) -> Any:
    # Config hashes predate the float convention: non-finite config values hash as their repr.
    obj = _to_jsonable(obj)
    if isinstance(obj, dict):
        return {k: _config_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_config_jsonable(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return repr(obj)
    return obj


def canonical_json(obj: Any) -> str:
    """Canonical JSON of a config: sorted keys, no whitespace, tuples as lists."""
    return json.dumps(_config_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_hash(config: Any, length: int = 12) -> str:
    """Stable hash of a config (a dataclass or a dict), independent of key order."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:length]


def _json_digest(meta: Mapping[str, Any]) -> str:
    """sha256 of a JSON document's content, all but the digest itself (``integrity.json_sha256``)."""
    body = dict(meta)
    if isinstance(body.get("integrity"), Mapping):
        body["integrity"] = {k: v for k, v in body["integrity"].items() if k != "json_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def migrate_nonfinite(obj: Any) -> tuple[Any, int]:
    """Format-1 non-finite strings (``"nan"``, ``"inf"``, ``"-inf"``) back to floats.

    Returns the converted object and how many values were converted.
    """
    if isinstance(obj, dict):
        out, n = {}, 0
        for k, v in obj.items():
            out[k], m = migrate_nonfinite(v)
            n += m
        return out, n
    if isinstance(obj, list):
        pairs = [migrate_nonfinite(v) for v in obj]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    if isinstance(obj, str) and obj in ("nan", "inf", "-inf"):
        return float(obj), 1
    return obj, 0


# -- provenance ----------------------------------------------------------------------------------
#: the packages whose versions a result records; jax and jaxlib are compared with the reader's
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "scipy")


def environment() -> dict[str, Any]:
    """What of the environment can move a number: ``jax`` and ``jaxlib`` versions, the JAX
    ``backend`` (``cpu``, ``gpu``, ``tpu``; GPU float32 matmuls default to TF32), and whether
    ``jax_enable_x64`` is on now (experiments that need float64 also turn it on inside ``run``)."""
    import importlib.metadata as md

    env: dict[str, Any] = {}
    for pkg in ("jax", "jaxlib"):
        try:
            env[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            env[pkg] = None
    try:
        import jax

        env["backend"] = jax.default_backend()
        env["x64"] = bool(jax.config.jax_enable_x64)
    except Exception as exc:  # pragma: no cover - reported, not hidden
        env["backend"], env["x64"] = f"unknown ({exc})", None
    return env


def computed_here(prov: Mapping[str, Any], code: str) -> bool:
    """Whether a result with provenance ``prov`` was computed by the code with hash ``code`` in
    this environment: the same package versions, Python, JAX backend and devices, and x64 flag.
    Such a result is what a rerun here would compute (the experiments are seeded), so a smoke
    result can be reused instead of recomputed."""
    if not code or prov.get("code_sha256") != code:
        return False
    now = provenance()
    return all(prov.get(k) == now[k] for k in ("versions", "python", "backend", "device", "x64"))


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


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def provenance(*, allow_dirty: bool | None = None) -> dict[str, Any]:
    """Where and with what a result was computed.

    ``git_commit`` is ``HEAD`` of the checkout that holds this library, or ``$NTKBOOK_GIT_COMMIT``
    where there is no git (a copied tree on a GPU machine). ``git_dirty`` says whether the code
    that computes results (``lib/`` and ``pyproject.toml``, untracked files included) differs
    from that commit (``None``: unknown). ``allow_dirty`` (default ``$NTKBOOK_ALLOW_DIRTY``) is
    recorded; :class:`Store` refuses to compute into a ``require_clean`` store without it.
    """
    import importlib.metadata as md

    versions = {}
    for pkg in PACKAGES:
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
    commit, source, dirty, dirty_files = _git("rev-parse", "HEAD"), "git", None, []
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=normal", "--",
                      ":(top)lib", ":(top)pyproject.toml")
        if status is not None:
            dirty_files = [line.split(maxsplit=1)[-1] for line in status.splitlines() if line.strip()]
            dirty = bool(dirty_files)
    elif os.environ.get(COMMIT_ENV):
        commit, source = os.environ[COMMIT_ENV].strip(), COMMIT_ENV
    else:
        source = None
    if allow_dirty is None:
        allow_dirty = _env_flag(ALLOW_DIRTY_ENV)
    prov: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_commit_source": source,
        "git_dirty": dirty,
        "versions": versions,
        "python": platform.python_version(),
        "device": device,
        "backend": backend,
        "x64": environment()["x64"],
        "host": platform.node(),
    }
    if dirty_files:
        prov["git_dirty_files"] = dirty_files[:50]
    if allow_dirty and dirty is not False:
        prov["WARNING"] = (
            "computed with NTKBOOK_ALLOW_DIRTY from code that is not a known commit "
            f"(git_dirty={dirty}, git_commit={commit}): this result cannot be reproduced "
            "from the repository history"
        )
    return prov


# -- files ---------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp's 0600 would hide results from other users
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _write_or_explain(path: Path, data: bytes, what: str) -> None:
    """:func:`_atomic_write_bytes`, with a failure to write turned into a :class:`StoreError`."""
    try:
        _atomic_write_bytes(path, data)
    except OSError as exc:
        why = {
            errno.ENOSPC: "the disk is full",
            errno.EFBIG: "the file is larger than this process may write (disk quota or ulimit -f)",
            errno.EACCES: "no permission to write there",
            errno.EPERM: "no permission to write there",
            errno.EROFS: "the file system is read-only",
            errno.EDQUOT: "the disk quota is exhausted",
        }.get(exc.errno, "the write failed")
        raise StoreError(
            f"could not write {path} ({why}: {exc}). {what}"
        ) from exc


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path, repair: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read store file {path}: {exc}. {repair}") from exc


def _decode_npz(data: bytes, path: Path, repair: str) -> dict[str, np.ndarray]:
    """The arrays of an npz file; any decoding failure is a :class:`StoreError`."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # zlib.error, BadZipFile, ValueError, TokenError, EOFError, ...
        raise StoreError(
            f"corrupt store file {path}: {type(exc).__name__}: {exc}. {repair}"
        ) from exc
    for k, a in arrays.items():
        if a.dtype.kind not in "biufcSU":
            raise StoreError(f"corrupt store file {path}: array {k!r} has dtype {a.dtype}. {repair}")
    return arrays


def _decode_json(data: bytes, path: Path, repair: str) -> dict[str, Any]:
    try:
        meta = json.loads(data.decode("utf-8"))
    except Exception as exc:  # UnicodeDecodeError, JSONDecodeError, RecursionError, ...
        raise StoreError(
            f"corrupt store file {path}: {type(exc).__name__}: {exc}. {repair}"
        ) from exc
    if not isinstance(meta, dict):
        raise StoreError(f"corrupt store file {path}: not a JSON object. {repair}")
    return meta


def _read_json(path: Path, repair: str = "") -> dict[str, Any]:
    return _decode_json(_read_bytes(path, repair), path, repair)


# -- checkpoints ---------------------------------------------------------------------------------
class PointStore:
    """Per-point checkpoints of one sweep: each finished point is saved at once.

    ``points.cached(key, compute)`` returns the stored point when there is one, else calls
    ``compute() -> (arrays, scalars)``, saves it atomically and returns it. An interrupted sweep
    rerun with the same config (and the same code) therefore resumes after its last finished
    point. ``code`` (a hash of the experiment's code) is written into every checkpoint and checked
    when one is reused. A ``PointStore(None)`` computes everything and saves nothing.
    """

    def __init__(self, folder: Path | None, *, code: str = "", repair: str = ""):
        self.folder = None if folder is None else Path(folder)
        self.code = code
        self.repair = repair or (
            f"Delete the checkpoints in {self.folder} (or run again with --recompute)."
        )
        self.computed: list[str] = []
        self.reused: list[str] = []

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        return self.folder / f"{safe}-{digest}"

    def _load(self, key: str, npz: Path, js: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        meta = _read_json(js, self.repair)
        if meta.get("key") != key:
            raise StoreError(
                f"checkpoint {js} belongs to point {meta.get('key')!r}, not {key!r}. {self.repair}"
            )
        if meta.get("code", "") != self.code:
            raise StoreError(
                f"checkpoint {js} was written by other code (code hash {meta.get('code')!r}, "
                f"now {self.code!r}). {self.repair}"
            )
        digest = meta.get("json_sha256")
        if digest is not None and digest != _json_digest({**meta, "json_sha256": None}):
            raise StoreError(f"checkpoint {js} does not match its content hash. {self.repair}")
        if not npz.exists():
            raise StoreError(f"checkpoint {js} has no arrays file {npz.name}. {self.repair}")
        data = _read_bytes(npz, self.repair)
        if meta.get("npz_sha256") is not None and _sha256(data) != meta["npz_sha256"]:
            raise StoreError(f"checkpoint {npz} does not match its content hash. {self.repair}")
        arrays = _decode_npz(data, npz, self.repair)
        if set(arrays) != set(meta.get("array_names", [])):
            raise StoreError(
                f"checkpoint {npz} is incomplete (arrays {sorted(arrays)} but "
                f"{meta.get('array_names')} expected). {self.repair}"
            )
        if not isinstance(meta.get("scalars"), dict):
            raise StoreError(f"checkpoint {js} has no scalars. {self.repair}")
        return arrays, meta["scalars"]

    def cached(
        self,
        key: str,
        compute: Callable[[], tuple[Mapping[str, Any], Mapping[str, Any]]],
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if self.folder is not None:
            base = self._path(key)
            npz, js = base.parent / (base.name + ".npz"), base.parent / (base.name + ".json")
            if js.exists():
                arrays, scalars = self._load(key, npz, js)
                self.reused.append(key)
                return arrays, scalars
        arrays, scalars = compute()
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        scalars = _to_jsonable(dict(scalars))
        if self.folder is not None:
            resume = (f"The points finished so far are kept in {self.folder}; fix the cause and "
                      f"run the same command again to resume.")
            # npz first, json last: the json marks the point as finished and carries the npz hash.
            data = _npz_bytes(arrays)
            _write_or_explain(npz, data, resume)
            meta = {"key": key, "code": self.code, "array_names": sorted(arrays),
                    "scalars": scalars, "npz_sha256": _sha256(data), "json_sha256": None}
            meta["json_sha256"] = _json_digest(meta)
            _write_or_explain(js, json.dumps(meta, indent=1).encode(), resume)
        self.computed.append(key)
        return arrays, scalars


# -- the store -----------------------------------------------------------------------------------
def _make_lock_folder(folder: Path, locks_root: Path) -> None:
    """Create ``folder`` (below ``locks_root``), with ``locks_root/.gitignore`` ignoring it all."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = locks_root / ".gitignore"
    if not ignore.exists():
        try:  # not a result: a plain exclusive create is enough (a concurrent creator wins)
            with open(ignore, "x") as fh:
                fh.write("# entry locks of ntkbook.store: working files, never committed\n*\n")
        except OSError:
            pass


class Store:
    """A folder of experiment results.

    Args:
      root: the folder of entries (``results/`` for paper scale).
      scratch: where checkpoints and locks go (default: see the module docstring).
      scale: the scale its entries belong to, used in repair commands of error messages.
      require_clean: refuse to compute into this store from uncommitted code, or without a known
        commit, unless ``$NTKBOOK_ALLOW_DIRTY`` is set (the result is then marked).

    >>> store = Store("results", scale="paper", require_clean=True)
    >>> result = store.get_or_compute("exp", "1", config, run)   # doctest: +SKIP
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        scratch: str | os.PathLike | None = None,
        scale: str | None = None,
        require_clean: bool = False,
        cli_root: bool = False,
    ):
        self.root = Path(root)
        if scratch is None:
            root_id = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
            scratch = scratch_dir() / root_id
        self.scratch = Path(scratch)
        self.scale = scale
        self.require_clean = require_clean
        self.cli_root = cli_root

    # -- keys ------------------------------------------------------------------------------
    def entry_dir(self, name: str, version: str, config: Any) -> Path:
        return self.root / name / f"{version}-{config_hash(config)}"

    def points_dir(self, name: str, version: str, config: Any) -> Path:
        """Parent of the entry's checkpoint folders (one per code hash)."""
        return self.scratch / "points" / name / f"{version}-{config_hash(config)}"

    def lock_path(self, name: str, version: str, config: Any) -> Path:
        """The entry's lock file, in the results folder itself (``<root>/.locks/``), so that every
        process using this results folder, from any checkout, meets the same lock."""
        return self.root / LOCKS / name / f"{version}-{config_hash(config)}.lock"

    def repair_command(self, name: str) -> str:
        cmd = f"python -m ntkbook run {name} --scale {self.scale or '<smoke|paper>'} --recompute"
        if self.cli_root or self.scale is None:
            cmd += f" --results {self.root}"
        return cmd

    def _repair(self, name: str) -> str:
        return f"Repair: `{self.repair_command(name)}` (or restore the file from git)."

    # -- locking ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str, version: str, config: Any, *, shared: bool = False,
             wait: bool = True) -> Iterator[None]:
        """Hold the entry's lock: exclusive to compute or write it, shared to read it.

        A busy exclusive lock is waited for (a message says so) or, with ``wait=False``, refused
        with a :class:`StoreError`. A shared lock that cannot be created (a read-only scratch
        folder) is skipped: reading then takes its chances with a concurrent writer, and a torn
        read shows up as a hash mismatch.
        """
        path = self.lock_path(name, version, config)
        try:
            _make_lock_folder(path.parent, self.root / LOCKS)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if shared:  # a read-only results folder: nobody can write it, nothing to guard
                yield
                return
            raise StoreError(
                f"cannot write to {self.root}: the lock file {path} cannot be created ({exc}). "
                f"Nothing was computed. Choose a writable results folder (--results DIR or "
                f"$NTKBOOK_RESULTS)."
            ) from exc
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
                if not wait:
                    raise StoreError(
                        f"{name} ({path.stem}) is being computed by {holder}; it holds {path}. "
                        f"Wait for it to finish (run without --no-wait), or stop that process."
                    ) from None
                print(f"waiting for {holder} to finish computing {name} ({path.stem}) ...",
                      file=sys.stderr, flush=True)
                fcntl.flock(fd, mode)
            if not shared:
                who = (f"pid {os.getpid()} on {platform.node()} since "
                       f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}")
                os.ftruncate(fd, 0)
                os.pwrite(fd, who.encode(), 0)
            yield
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------
    def _verified(self, name: str, version: str, config: Any) -> tuple[dict, dict] | None:
        """(meta, arrays) of a verified entry, ``None`` when there is none; else StoreError."""
        folder = self.entry_dir(name, version, config)
        js = folder / "result.json"
        if not js.exists():
            return None
        repair = self._repair(name)
        meta = _read_json(js, repair)
        integrity = meta.get("integrity")
        if not isinstance(integrity, dict):
            raise StoreError(
                f"store entry {folder} has no content hashes (written before store format 2). "
                f"Run `python -m ntkbook rehash --results {self.root}` to add them, or recompute: "
                f"`{self.repair_command(name)}`."
            )
        if integrity.get("json_sha256") != _json_digest(meta):
            raise StoreError(
                f"store file {js} does not match its content hash (edited or corrupt). {repair}"
            )
        npz = folder / "result.npz"
        if not npz.exists():
            raise StoreError(f"store entry {folder} has no result.npz. {repair}")
        data = _read_bytes(npz, repair)
        if _sha256(data) != integrity.get("npz_sha256"):
            raise StoreError(
                f"store file {npz} does not match the sha256 recorded in {js.name} "
                f"(truncated, corrupt, or from another run). {repair}"
            )
        expected = {"name": name, "version": version, "config_hash": config_hash(config)}
        found = {k: meta.get(k) for k in expected}
        if found != expected:
            raise StoreError(
                f"store entry {folder} does not match its key: expected {expected}, found "
                f"{found}. {repair}"
            )
        if canonical_json(meta.get("config")) != canonical_json(config):
            raise StoreError(
                f"store entry {folder} was computed for another config (hash collision or "
                f"edited file). {repair}"
            )
        arrays = _decode_npz(data, npz, repair)
        if set(meta.get("array_names", [])) != set(arrays):
            raise StoreError(
                f"store entry {folder} holds arrays {sorted(arrays)}, not the "
                f"{sorted(meta.get('array_names', []))} its json lists. {repair}"
            )
        return meta, arrays

    def has(self, name: str, version: str, config: Any, *, wait: bool = True) -> bool:
        """Whether the entry is stored. A stored entry that fails its checks raises StoreError.

        While another process computes the entry, waits for it (or refuses, ``wait=False``)."""
        with self.lock(name, version, config, shared=True, wait=wait):
            return self._verified(name, version, config) is not None

    def load(self, name: str, version: str, config: Any) -> Result:
        with self.lock(name, version, config, shared=True):
            return self._load(name, version, config)

    def _load(self, name: str, version: str, config: Any) -> Result:
        found = self._verified(name, version, config)
        if found is None:
            raise StoreError(
                f"no stored result for {name!r} (version {version}, config hash "
                f"{config_hash(config)}) in {self.entry_dir(name, version, config)}. Compute it "
                f"with `python -m ntkbook run {name} --scale {self.scale or '<smoke|paper>'}`."
            )
        meta, arrays = found
        return Result(name=name, config=meta["config"], arrays=arrays, scalars=meta["scalars"],
                      provenance=meta["provenance"], reverified=meta.get("reverified", []),
                      rekeyed=meta.get("rekeyed", []))

    def _entry_folders(self) -> list[Path]:
        """Every ``<root>/<name>/<entry>`` folder, sorted (the lock folder, hidden names and the
        :data:`ARCHIVE` left out)."""
        if not self.root.exists():
            return []
        return [f for f in sorted(self.root.glob("*/*"))
                if f.is_dir() and not f.name.startswith(".") and not f.parent.name.startswith(".")
                and f.parent.name != ARCHIVE]

    def archive(self) -> Store:
        """The store of this folder's archived entries, ``<root>/archive`` (see the module
        docstring), for reading: :meth:`find`, :meth:`list`, :meth:`load`."""
        return Store(self.root / ARCHIVE, scratch=self.scratch / ARCHIVE, scale=self.scale)

    def find(self, name: str, **match: Any) -> Result | None:
        """The one entry of ``name`` whose config has the values ``match`` (compared as JSON, so a
        tuple matches the list it was stored as), content hashes checked; ``None`` when no entry
        matches, :class:`StoreError` when several do. For stores whose configs no experiment
        module can build any more (:meth:`archive`)."""
        want = {k: json.loads(canonical_json(v)) for k, v in match.items()}
        found = []
        for folder in self._entry_folders():
            if folder.parent.name != name or not (folder / "result.json").exists():
                continue
            meta = self._read_entry_meta(folder)
            config = meta.get("config") or {}
            if all(k in config and config[k] == v for k, v in want.items()):
                found.append((str(meta.get("version")), config))
        if len(found) > 1:
            raise StoreError(f"{len(found)} entries of {name} in {self.root} have the config values "
                             f"{want}; name more of them")
        return self.load(name, *found[0]) if found else None

    def _read_entry_meta(self, folder: Path) -> dict[str, Any]:
        """The JSON of an entry folder, unverified (to learn its key); writes replace it atomically."""
        return _read_json(folder / "result.json", self._repair(folder.parent.name))

    def list(self) -> list[dict[str, Any]]:
        """One row per entry: name, entry, status ("ok", "corrupt", "legacy", "unfinished"), ..."""
        rows = []
        if not self.root.exists():
            return rows
        for folder in self._entry_folders():
            row: dict[str, Any] = {"name": folder.parent.name, "entry": folder.name}
            js = folder / "result.json"
            if not js.exists():
                row.update(status="unfinished", finished=False)
                rows.append(row)
                continue
            try:
                meta = self._read_entry_meta(folder)
                version = str(meta.get("version"))
                if folder.name != f"{version}-{config_hash(meta.get('config'))}":
                    raise StoreError(f"store entry {folder} is filed under the wrong name")
                with self.lock(folder.parent.name, version, meta.get("config"), shared=True):
                    meta, _ = self._verified(folder.parent.name, version, meta.get("config"))
                prov = meta.get("provenance", {})
                row.update(status="ok", finished=True, date=prov.get("date"),
                           device=prov.get("device"), wall_s=prov.get("wall_time_s"),
                           git_commit=prov.get("git_commit"), git_dirty=prov.get("git_dirty"),
                           hashed=meta["integrity"].get("hashed"), version=version,
                           config=meta.get("config"), provenance=prov,
                           reverified=meta.get("reverified", []),
                           rekeyed=meta.get("rekeyed", []))
            except StoreError as exc:
                status = "legacy" if "no content hashes" in str(exc) else "corrupt"
                row.update(status=status, finished=False, error=str(exc))
            rows.append(row)
        return rows

    # -- writing ---------------------------------------------------------------------------
    def points(self, name: str, version: str, config: Any, code: str = "") -> PointStore:
        """The checkpoints of the entry for experiment code ``code`` (a hash)."""
        return PointStore(self.points_dir(name, version, config) / (code or "nocode"), code=code,
                          repair=f"Repair: `{self.repair_command(name)}` clears the checkpoints.")

    def clear_points(self, name: str, version: str, config: Any, keep: str | None = None) -> None:
        """Delete the entry's checkpoints, except those of code hash ``keep``."""
        parent = self.points_dir(name, version, config)
        if not parent.is_dir():
            return
        for sub in parent.iterdir():
            if keep is None or sub.name != (keep or "nocode"):
                shutil.rmtree(sub, ignore_errors=True)

    def check_writable(self, name: str, version: str, config: Any) -> None:
        """Fail now, not after hours of compute, when the entry cannot be written."""
        folder = self.entry_dir(name, version, config)
        what = (f"Nothing was computed. Choose a writable results folder "
                f"(--results DIR or $NTKBOOK_RESULTS).")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probe.", suffix=".tmp")
            os.close(fd)
            os.unlink(tmp)
        except OSError as exc:
            raise StoreError(f"cannot write to {folder}: {exc}. {what}") from exc
        for stale in folder.glob(".result.*.tmp"):  # left by a run killed while saving
            stale.unlink(missing_ok=True)

    def check_provenance(self, name: str, prov: Mapping[str, Any]) -> None:
        """In a ``require_clean`` store, refuse uncommitted code unless explicitly allowed."""
        if not self.require_clean or prov.get("WARNING"):
            return
        allow = f"set {ALLOW_DIRTY_ENV}=1 (or pass --allow-dirty) to store it marked as such"
        if prov.get("git_commit") is None:
            raise StoreError(
                f"refusing to compute {name} into {self.root}: the git commit of the code is "
                f"unknown (no git here). Set {COMMIT_ENV}=<the commit this tree was copied "
                f"from>, or {allow}."
            )
        if prov.get("git_dirty"):
            files = ", ".join(prov.get("git_dirty_files", [])[:10])
            raise StoreError(
                f"refusing to compute {name} into {self.root}: the code has uncommitted changes "
                f"({files}). Results there must be reproducible from a commit: commit first, or "
                f"{allow}."
            )

    def save(self, result: Result, version: str) -> Path:
        with self.lock(result.name, version, result.config):
            return self._save(result, version)

    def _save(self, result: Result, version: str) -> Path:
        folder = self.entry_dir(result.name, version, result.config)
        what = "The result was not stored (its checkpoints are kept: run again to resume)."
        data = _npz_bytes(result.arrays)
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
        meta["integrity"] = {"algorithm": "sha256", "npz_sha256": _sha256(data), "hashed": "at save"}
        meta["integrity"]["json_sha256"] = _json_digest(meta)
        # npz first, json last: the json carries the npz hash.
        _write_or_explain(folder / "result.npz", data, what)
        _write_or_explain(folder / "result.json", json.dumps(meta, indent=1).encode(), what)
        return folder

    def get_or_compute(
        self,
        name: str,
        version: str,
        config: Any,
        compute: Callable[[PointStore], Result],
        *,
        code: str = "",
        recompute: bool = False,
        current_only: bool = False,
        wait: bool = True,
        on_start: Callable[[], None] | None = None,
    ) -> Result:
        """The stored entry, or ``compute(points)`` saved under the entry's exclusive lock.

        A concurrent run of the same entry is waited for and its result returned (or, with
        ``wait=False``, refused). ``recompute`` ignores a stored entry and clears every
        checkpoint; otherwise checkpoints of other code than ``code`` are cleared and the rest
        resumed. ``current_only`` (smoke results) returns a stored entry only when today's code
        (``code``) computed it in today's environment (:func:`computed_here`), and recomputes it
        otherwise. Provenance (commit, code hash, wall time, resumed points) is added here.
        """
        import time

        def usable() -> bool:
            found = self._verified(name, version, config)
            return found is not None and (not current_only or computed_here(found[0]["provenance"], code))

        if not recompute:  # a stored entry is read under the shared lock, like any other read
            with self.lock(name, version, config, shared=True, wait=wait):
                if usable():
                    return self._load(name, version, config)
        with self.lock(name, version, config, wait=wait):
            # another process may have stored it between the two locks
            if not recompute and usable():
                return self._load(name, version, config)
            prov = provenance()
            self.check_provenance(name, prov)
            self.check_writable(name, version, config)
            self.clear_points(name, version, config, keep=None if recompute else code)
            points = self.points(name, version, config, code)
            if on_start is not None:
                on_start()
            t0 = time.perf_counter()
            result = compute(points)
            result.provenance = {**prov, **result.provenance, "code_sha256": code,
                                 "wall_time_s": time.perf_counter() - t0}
            if points.reused:
                result.provenance["resumed_points"] = len(points.reused)
            self._save(result, version)
            # The result is complete: its per-point checkpoints are no longer needed.
            self.clear_points(name, version, config)
            return result

    def add_reverification(self, name: str, version: str, config: Any,
                           record: Mapping[str, Any]) -> Path:
        """Append ``record`` (a rerun with other code that reproduced the entry: its date, code
        hash, commit, environment, sample, largest differences) to the entry's ``reverified``
        list, and re-sign the JSON. The result itself (arrays, scalars, config, provenance) is
        not touched. In a ``require_clean`` store the rerun must come from committed code.
        """
        prov = record.get("provenance", {})
        if self.require_clean and not prov.get("WARNING"):
            if prov.get("git_commit") is None or prov.get("git_dirty"):
                raise StoreError(
                    f"refusing to record a re-verification of {name} in {self.root}: the code "
                    f"that reproduced it is not a known commit (git_commit="
                    f"{prov.get('git_commit')}, git_dirty={prov.get('git_dirty')}). Commit "
                    f"first, or set {ALLOW_DIRTY_ENV}=1 to record it marked as such."
                )
        return self._append_record(name, version, config, "reverified", record,
                                   "re-verification")

    def add_rekey(self, name: str, version: str, config: Any, record: Mapping[str, Any]) -> Path:
        """Append ``record`` to the entry's ``rekeyed`` list and re-sign the JSON: the code hash,
        under a newer hashing scheme, of the code that computed the entry or re-verified it (the
        record says which, the commit and how that hash was established). Nothing is recomputed;
        the result itself is not touched."""
        if not record.get("git_commit"):
            raise StoreError(f"refusing to record a re-keying of {name} without the commit whose "
                             f"code it hashes")
        return self._append_record(name, version, config, "rekeyed", record, "re-keying")

    def _append_record(self, name: str, version: str, config: Any, key: str,
                       record: Mapping[str, Any], what: str) -> Path:
        with self.lock(name, version, config):
            found = self._verified(name, version, config)
            if found is None:
                raise StoreError(f"no stored entry {self.entry_dir(name, version, config)} to "
                                 f"record a {what} in")
            meta, _ = found
            meta = {k: v for k, v in meta.items() if k != "integrity"} | {
                "integrity": {k: v for k, v in meta["integrity"].items() if k != "json_sha256"}}
            meta[key] = [*meta.get(key, []), _to_jsonable(dict(record))]
            meta["integrity"]["json_sha256"] = _json_digest(meta)
            js = self.entry_dir(name, version, config) / "result.json"
            _write_or_explain(js, json.dumps(meta, indent=1).encode(),
                              f"The {what} was not recorded.")
            return js

    # -- maintenance -----------------------------------------------------------------------
    def rehash(self, *, dry_run: bool = False) -> list[str]:
        """Upgrade format-1 entries: non-finite strings to floats, then add content hashes.

        Hashing after the fact cannot vouch for what happened to a file before; the entry says so
        (``integrity.hashed``) and records the migration. Entries that already carry hashes are
        verified, not rewritten. Returns one line per entry.
        """
        lines = []
        if not self.root.exists():
            return lines
        for folder in self._entry_folders():
            js = folder / "result.json"
            if not js.exists():
                continue
            name = folder.parent.name
            head = _read_json(js, self._repair(name))
            with self.lock(name, str(head.get("version")), head.get("config")):
                meta = _read_json(js, self._repair(name))
                if isinstance(meta.get("integrity"), dict):
                    integrity = meta["integrity"]
                    body = {k: v for k, v in meta.items() if k != "integrity"}
                    if (integrity.get("json_sha256") != _json_digest(meta)
                            and integrity.get("json_sha256") == _json_digest(body)):
                        # signed by the first format-2 store, whose json hash left out the
                        # integrity fields: re-sign, after checking the npz against its hash
                        data = _read_bytes(folder / "result.npz", self._repair(name))
                        if _sha256(data) != integrity.get("npz_sha256"):
                            raise StoreError(f"{folder}: result.npz does not match its hash; not "
                                             f"re-signed. {self._repair(name)}")
                        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                        meta.setdefault("migrations", []).append(
                            f"{now}: json hash re-signed to cover the integrity fields (`rehash`)")
                        meta["integrity"].pop("json_sha256")
                        meta["integrity"]["json_sha256"] = _json_digest(meta)
                        if not dry_run:
                            _write_or_explain(js, json.dumps(meta, indent=1).encode(),
                                              "Not re-signed.")
                        lines.append(f"{folder}: json hash re-signed"
                                     + (" [dry run]" if dry_run else ""))
                        continue
                    self._verified(name, str(meta.get("version")), meta.get("config"))
                    lines.append(f"{folder}: already hashed, verified")
                    continue
                npz = folder / "result.npz"
                data = _read_bytes(npz, self._repair(name))
                arrays = _decode_npz(data, npz, self._repair(name))
                if set(arrays) != set(meta.get("array_names", [])):
                    raise StoreError(f"{folder}: arrays do not match the json; not rehashed. "
                                     f"{self._repair(name)}")
                scalars, n = migrate_nonfinite(meta.get("scalars", {}))
                now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                meta["scalars"] = scalars
                meta["format"] = FORMAT
                meta.setdefault("migrations", []).append(
                    f"{now}: format 1 -> {FORMAT} by `python -m ntkbook rehash`: {n} non-finite "
                    f"string(s) in scalars turned into floats; content hashes added"
                )
                meta.pop("integrity", None)
                meta["integrity"] = {
                    "algorithm": "sha256", "npz_sha256": _sha256(data),
                    "hashed": f"after the fact on {now} (the content before that is not covered)",
                }
                meta["integrity"]["json_sha256"] = _json_digest(meta)
                if not dry_run:
                    _write_or_explain(js, json.dumps(meta, indent=1).encode(), "Not rehashed.")
                lines.append(f"{folder}: hashed ({n} non-finite strings migrated)"
                             + (" [dry run]" if dry_run else ""))
        return lines
