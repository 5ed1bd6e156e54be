"""Whether a stored result still comes from today's code, and the rerun that proves it.

Every result records the hash of the code that computed it (``provenance["code_sha256"]``: the
:func:`ntkbook.codehash.code_hash` of its experiment, over the normalised syntax of every
definition its ``run`` and ``Config`` reach, so a docstring, a comment or an unreached helper
changes nothing) and the environment (jax and jaxlib versions, backend, x64 flag).
:func:`freshness` compares them with today's:

- **today's code**: the result was computed, or later reproduced (:func:`reproduce`), by code
  whose hash is today's; or the code that computed or reproduced it is known (its commit) and its
  hash under today's scheme, recorded when the hashing scheme changed (``rekeyed``, see
  ``tools/rekey.py``), is today's;
- **computed by earlier code**: the code has changed since; the result is shown with the date it
  was last re-verified (or "never re-verified") until a rerun reproduces it.

:func:`reproduce` recomputes a stored entry with today's code in a temporary store (the whole entry,
or with ``sample=True`` the stated part of it the experiment defines), compares every stored array
and scalar within the experiment's tolerance (:func:`compare`), reports the largest differences, and
on agreement records in the entry that today's code reproduces it.

An experiment module may define, besides ``NAME``, ``VERSION``, ``Config`` and ``run``:

- ``REPRODUCE_TOLERANCE``: a dict with ``rtol`` and ``atol`` (defaults :data:`DEFAULT_TOLERANCE`),
  ``ignore``: ``{pattern: reason}`` for values that are not results (timings) or are round-off by
  construction, ``loose``: ``{pattern: {"rtol": .., "atol": ..}}``, and ``up_to_sign``:
  ``{pattern: reason}`` for arrays whose columns are eigenvectors, defined only up to sign: each
  column of the rerun is compared after taking the sign that matches the stored column (the rest
  of the comparison unchanged). Patterns are :mod:`fnmatch` patterns over the keys of
  :func:`flatten`.
- ``reproduce_sample(config) -> (config, description)``: a cheaper config whose points are a
  subset of ``config``'s, and ``sample_view(result, sample_config) -> (arrays, scalars)``: the
  part of a result (the stored one or the sample's) that belongs to those points.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ntkbook import experiments
from ntkbook.codehash import code_hash
from ntkbook.errors import NtkbookError
from ntkbook.store import Result, Store, environment, provenance

__all__ = [
    "entk_routes", "latest_whole_rerun",
    "DEFAULT_TOLERANCE", "TODAY", "EARLIER", "Freshness", "freshness", "Difference", "Comparison",
    "flatten", "compare", "Reproduction", "reproduce",
]

#: relative tolerance, and absolute tolerance as a fraction of the largest stored magnitude of an
#: array (of the value itself for a scalar): a rerun on the same kind of machine agrees to round-off
DEFAULT_TOLERANCE = {"rtol": 1e-6, "atol": 1e-9}

#: values never compared: wall times (named ``*seconds*`` by the experiments, and the Gemma data
#: set's ``weights_load_s``)
WALL_TIMES = {"*seconds*": "a wall time, not a result", "*weights_load_s": "a wall time, not a result"}

TODAY = "today's code"
EARLIER = "computed by earlier code"

#: environment entries compared with the reader's (what can move a number)
ENV_KEYS = ("jax", "jaxlib", "backend")


# -- freshness -----------------------------------------------------------------------------------
def _env_of(prov: Mapping[str, Any]) -> dict[str, Any]:
    """The environment a provenance record (``versions``, ``backend``, ``x64``) or a
    re-verification record (``environment``) states."""
    if isinstance(prov.get("environment"), Mapping):
        return dict(prov["environment"])
    versions = prov.get("versions") or {}
    return {"jax": versions.get("jax"), "jaxlib": versions.get("jaxlib"),
            "backend": prov.get("backend"), "x64": prov.get("x64")}


@dataclass(frozen=True)
class Freshness:
    """Whether a result comes from today's code (see the module docstring).

    Attributes:
      name: the experiment.
      today: the result was computed or reproduced by today's code.
      code_now: today's code hash of the experiment.
      code_then: the code hash it was computed with (``None``: not recorded).
      since: the date (ISO) of the computation or re-verification that vouches for today's code.
      sample: what a vouching re-verification recomputed, when it was a sample (else ``None``).
      last_reverified: the date of the latest re-verification (any code), ``None`` if never.
      env_changes: how the vouching record's environment differs from the reader's, e.g.
        ``("jax 0.4.30 -> 0.7.2", "backend gpu -> cpu")``.
    """

    name: str
    today: bool
    code_now: str
    code_then: str | None
    since: str | None = None
    sample: str | None = None
    last_reverified: str | None = None
    env_changes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``"today's code"`` or ``"computed by earlier code"``."""
        return TODAY if self.today else EARLIER

    def short(self) -> str:
        """A few words for a table cell: "today's code", "today's code (re-verified on a sample)",
        "earlier code, last re-verified 2026-12-01", "earlier code, never re-verified"."""
        if self.today:
            text = TODAY + (" (re-verified on a sample)" if self.sample else "")
        else:
            text = "earlier code, " + (f"last re-verified {self.last_reverified[:10]}"
                                       if self.last_reverified else "never re-verified")
        return text + (" (other environment)" if self.env_changes else "")

    def sentence(self) -> str:
        """One sentence for a reader, e.g. "Today's code (re-verified on 2026-12-01 on a sample:
        seed 0)." or "Computed by earlier code (never re-verified: run `python -m ntkbook
        reproduce influence_width`)."""
        if self.today:
            how = ""
            if self.sample:
                how = f" (re-verified on {self.since[:10]} on a sample: {self.sample})"
            elif self.since and self.last_reverified and self.since == self.last_reverified:
                how = f" (re-verified on {self.since[:10]})"
            text = "Today's code" + how
        else:
            last = (f"last re-verified on {self.last_reverified[:10]}" if self.last_reverified
                    else "never re-verified")
            text = (f"Computed by earlier code ({last}; `python -m ntkbook reproduce {self.name}` "
                    f"checks it against today's)")
        if self.env_changes:
            text += f"; in another environment ({', '.join(self.env_changes)})"
        return text + "."


def _vouchers(result: Result, code_now: str) -> list[tuple[str, str | None, Mapping[str, Any]]]:
    """(date, sample, record) of every record that says today's code computed or reproduced the
    result: the provenance, an agreeing re-verification, or either of those re-keyed (its hash
    under today's scheme recorded later) — dated and placed by the record it re-keys."""
    prov = result.provenance or {}
    reverified = list(result.reverified or [])
    out = []
    if prov.get("code_sha256") == code_now:
        out.append((str(prov.get("date") or ""), None, prov))
    out += [(str(r.get("date") or ""), r.get("sample"), r) for r in reverified
            if r.get("agree", True) and r.get("code_sha256") == code_now]
    for rec in result.rekeyed or []:
        if rec.get("code_sha256") != code_now:
            continue
        index = rec.get("reverified")
        if index is None:  # the provenance re-keyed
            out.append((str(prov.get("date") or ""), None, prov))
        elif 0 <= int(index) < len(reverified) and reverified[int(index)].get("agree", True):
            r = reverified[int(index)]
            out.append((str(r.get("date") or ""), r.get("sample"), r))
    return out


def freshness(result: Result, *, env: Mapping[str, Any] | None = None) -> Freshness:
    """The :class:`Freshness` of ``result`` (loaded from a store or just computed)."""
    prov = result.provenance or {}
    code_now = code_hash(experiments.get(result.name).__name__)
    code_then = prov.get("code_sha256") or None
    agreeing = [r for r in result.reverified or [] if r.get("agree", True)]
    last = max((r.get("date", "") for r in agreeing), default=None) or None
    vouching = _vouchers(result, code_now)
    env = dict(env) if env is not None else environment()
    if not vouching:
        return Freshness(result.name, False, code_now, code_then, last_reverified=last,
                         env_changes=_env_changes(_env_of(prov), env))
    # the strongest voucher: a full computation or rerun over a sample; the latest of those
    since, sample, record = max(vouching, key=lambda v: (v[1] is None, v[0]))
    return Freshness(result.name, True, code_now, code_then, since=since or None, sample=sample,
                     last_reverified=last, env_changes=_env_changes(_env_of(record), env))


def _env_changes(then: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"{k} {then.get(k)} -> {now.get(k)}" for k in ENV_KEYS
                 if then.get(k) is not None and then.get(k) != now.get(k))


# -- comparison ----------------------------------------------------------------------------------
def flatten(arrays: Mapping[str, Any], scalars: Mapping[str, Any]) -> dict[str, Any]:
    """Every value of a result under one key: arrays by their names, scalars by their path
    (``table.mnist10/relu.flip_pgd[2]``); lists of plain numbers stay one array."""
    out: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, (list, tuple)) and obj and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj):
            out[path] = np.asarray(obj, dtype=float)
        elif isinstance(obj, (list, tuple)):
            if not obj:
                out[path] = []
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")
        else:
            out[path] = obj

    walk(scalars, "")
    return out


@dataclass(frozen=True)
class Difference:
    """How one value of a rerun differs from the stored one."""

    key: str
    max_abs: float  # largest absolute difference (0 for equal non-numbers, inf for a mismatch)
    max_rel: float  # largest difference relative to the stored magnitude
    ok: bool  # within the tolerance
    note: str = ""  # why not comparable, or ignored


@dataclass
class Comparison:
    """Every value of a stored result against a rerun's.

    ``differences`` are sorted worst first (out of tolerance first, then by relative size)."""

    differences: list[Difference]
    ignored: dict[str, str] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return all(d.ok for d in self.differences)

    @property
    def failures(self) -> list[Difference]:
        return [d for d in self.differences if not d.ok]

    @property
    def worst(self) -> Difference | None:
        return self.differences[0] if self.differences else None

    def summary(self, n: int = 3) -> str:
        """"largest difference 2.2e-16 (relative 1.1e-15) at `table.kappa`", or the failures."""
        if not self.differences:
            return "nothing to compare"
        if self.agree:
            w = max(self.differences, key=lambda d: (d.max_rel, d.max_abs))
            if w.max_abs == 0:
                return f"all {len(self.differences)} values identical"
            return (f"largest difference {w.max_abs:.2g} (relative {w.max_rel:.2g}) at "
                    f"`{w.key}`, over {len(self.differences)} values")
        bad = self.failures
        shown = "; ".join(f"`{d.key}`: " + (d.note or f"differs by {d.max_abs:.3g} (relative "
                                                    f"{d.max_rel:.3g})") for d in bad[:n])
        more = f"; and {len(bad) - n} more" if len(bad) > n else ""
        return f"{len(bad)} of {len(self.differences)} values out of tolerance: {shown}{more}"


def _match(key: str, patterns: Mapping[str, Any]) -> Any:
    for pattern, value in patterns.items():
        if fnmatch.fnmatchcase(key, pattern):
            return value
    return None


def _align_signs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x`` (``(..., n, k)``: ``k`` columns) with each column ``x[..., :, j]`` multiplied by the
    sign that best matches the same column of ``y``: eigenvectors are defined only up to sign."""
    if x.ndim < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return x
    dots = np.sum(x * y, axis=-2, keepdims=True)
    return x * np.where(dots < 0, -1.0, 1.0)


def _compare_value(key: str, a: Any, b: Any, rtol: float, atol: float,
                   up_to_sign: bool = False) -> Difference:
    """``a``: the rerun's value, ``b``: the stored one; ``up_to_sign``: the columns of an array
    are compared up to sign (:func:`_align_signs`)."""
    numeric = (int, float, np.ndarray, np.generic)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return Difference(key, math.inf, math.inf, False, f"shape {x.shape}, stored {y.shape}")
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            same = bool(np.array_equal(x, y))
            return Difference(key, 0.0 if same else math.inf, 0.0 if same else math.inf, same,
                              "" if same else "values differ")
        x, y = x.astype(float), y.astype(float)
        if up_to_sign:
            x = _align_signs(x, y)
        if x.size == 0:
            return Difference(key, 0.0, 0.0, True)
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        if not np.array_equal(nan_x, nan_y):
            return Difference(key, math.inf, math.inf, False, "NaN in one and not the other")
        inf_mismatch = (np.isinf(x) | np.isinf(y)) & ~(x == y) & ~nan_x
        if inf_mismatch.any():
            return Difference(key, math.inf, math.inf, False, "an infinity differs")
        fin = np.isfinite(x) & np.isfinite(y)
        if not fin.any():
            return Difference(key, 0.0, 0.0, True)
        d = np.abs(x[fin] - y[fin])
        mag = np.abs(y[fin])
        scale = float(mag.max()) if y.ndim else float(mag[0])
        bound = rtol * mag + atol * scale
        rel = d / np.maximum(mag, np.finfo(float).tiny)
        return Difference(key, float(d.max()), float(rel.max()) if d.max() > 0 else 0.0,
                          bool(np.all(d <= bound)))
    same = a == b
    return Difference(key, 0.0 if same else math.inf, 0.0 if same else math.inf, bool(same),
                      "" if same else f"{a!r}, stored {b!r}")


def compare(stored: Mapping[str, Any], fresh: Mapping[str, Any],
            tolerance: Mapping[str, Any] | None = None) -> Comparison:
    """Compare two :func:`flatten`-ed results value by value (``tolerance``: see the module
    docstring). A key in one and not the other is a failure."""
    tol = {**DEFAULT_TOLERANCE, **(tolerance or {})}
    ignore, loose = {**WALL_TIMES, **tol.get("ignore", {})}, dict(tol.get("loose", {}))
    signless = dict(tol.get("up_to_sign", {}))
    diffs, ignored = [], {}
    for key in sorted(set(stored) | set(fresh)):
        why = _match(key, ignore)
        if why is not None:
            ignored[key] = why
            continue
        if key not in fresh or key not in stored:
            where = "the rerun" if key not in fresh else "the stored result"
            diffs.append(Difference(key, math.inf, math.inf, False, f"missing in {where}"))
            continue
        t = {**tol, **(_match(key, loose) or {})}
        diffs.append(_compare_value(key, fresh[key], stored[key], t["rtol"], t["atol"],
                                    up_to_sign=_match(key, signless) is not None))
    diffs.sort(key=lambda d: (d.ok, -d.max_rel, -d.max_abs, d.key))
    return Comparison(diffs, ignored)


# -- reproduction --------------------------------------------------------------------------------
@dataclass
class Reproduction:
    """One stored entry recomputed by today's code.

    Attributes:
      name, entry: the experiment and the entry's folder.
      sample: what was recomputed when not the whole entry (``None``: all of it).
      comparison: the stored values against the rerun's.
      recorded: the entry's JSON, when the agreement was recorded there.
      wall_s: the rerun's wall time.
    """

    name: str
    entry: Path
    sample: str | None
    comparison: Comparison
    recorded: Path | None
    wall_s: float

    @property
    def agree(self) -> bool:
        return self.comparison.agree

    def line(self) -> str:
        what = f" (sample: {self.sample})" if self.sample else ""
        head = "reproduces" if self.agree else "DOES NOT reproduce"
        tail = f"; recorded in {self.recorded}" if self.recorded else ""
        return (f"{self.name} {self.entry.name}{what}: today's code {head} it in "
                f"{self.wall_s:.1f}s: {self.comparison.summary()}{tail}")


class ReproduceError(NtkbookError):
    """A stored entry cannot be reproduced as asked (no such entry, no sample defined, ...)."""


def entk_routes(result: Result) -> tuple[list[str] | None, list[str] | None]:
    """``(computed, today)``: the eNTK route lines (:func:`ntkbook.ntk.entk.describe_routes`) of
    the run that computed ``result`` and of its latest agreeing re-verification; None where that
    run recorded none (a run from before the engine recorded routes formed every per-example
    Jacobian)."""
    rerun = [r for r in result.reverified or [] if r.get("agree", True) and r.get("entk_routes")]
    return result.provenance.get("entk_routes"), (rerun[-1]["entk_routes"] if rerun else None)


def latest_whole_rerun(result: Result) -> dict | None:
    """The latest agreeing re-verification record of ``result`` that reran the whole entry (no
    sample) and timed it (``wall_time_s``), or None: what the entry costs with later code."""
    whole = [r for r in result.reverified or [] if r.get("agree", True) and not r.get("sample")
             and r.get("wall_time_s") is not None]
    return whole[-1] if whole else None


def reproduce(name: str, store: Store, *, entries: Sequence[str] | None = None,
              sample: bool = False, record: bool = True,
              report: Callable[[str], None] = print) -> list[Reproduction]:
    """Recompute the stored entries of experiment ``name`` in ``store`` with today's code.

    Args:
      entries: entry folder names (``"1-c5359c2c499b"``) to reproduce; default all of the
        experiment's current ``VERSION``.
      sample: recompute only the part the experiment's ``reproduce_sample`` defines.
      record: on agreement, record the re-verification in the stored entry.
      report: where progress lines go.

    Returns one :class:`Reproduction` per entry. The rerun runs in a temporary store with the
    x64 flag the entry was computed with, and never touches the stored entry's checkpoints.
    """
    module = experiments.get(name)
    rows = [r for r in store.list() if r["name"] == name]
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        raise ReproduceError(f"{name}: entry {bad[0]['entry']} is {bad[0]['status']}: "
                             f"{bad[0].get('error', '')}")
    rows = [r for r in rows if r.get("version") == str(module.VERSION)]
    if entries:
        missing = sorted(set(entries) - {r["entry"] for r in rows})
        if missing:
            raise ReproduceError(f"{name} has no stored entry {', '.join(missing)} of version "
                                 f"{module.VERSION} in {store.root}; stored: "
                                 f"{', '.join(r['entry'] for r in rows) or 'none'}")
        rows = [r for r in rows if r["entry"] in entries]
    if not rows:
        raise ReproduceError(f"no stored entry of {name} (version {module.VERSION}) in {store.root}")
    if sample and not hasattr(module, "reproduce_sample"):
        raise ReproduceError(f"{name} defines no sample (reproduce_sample): reproduce it whole "
                             f"(without --sample)")
    tolerance = getattr(module, "REPRODUCE_TOLERANCE", None)
    out = []
    for row in rows:
        config = experiments.config_from_dict(name, row["config"])
        stored = store.load(name, module.VERSION, config)
        run_config, what = config, None
        if sample:
            run_config, what = module.reproduce_sample(config)
        report(f"reproducing {name} {row['entry']}" + (f" (sample: {what})" if what else "")
               + " with today's code ...")
        fresh, wall = _rerun(name, run_config, stored.provenance.get("x64"))
        if sample:
            a, s = module.sample_view(stored, run_config)
            b, t = module.sample_view(fresh, run_config)
            comparison = compare(flatten(a, s), flatten(b, t), tolerance)
        else:
            comparison = compare(flatten(stored.arrays, stored.scalars),
                                 flatten(fresh.arrays, fresh.scalars), tolerance)
        recorded = None
        if comparison.agree and record:
            worst = max(comparison.differences, key=lambda d: (d.max_rel, d.max_abs),
                        default=None)
            prov = provenance()
            rec = {
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "agree": True,
                "code_sha256": fresh.provenance.get("code_sha256"),
                "code_hash_scheme": fresh.provenance.get("code_hash_scheme"),
                "sample": what,
                "values_compared": len(comparison.differences),
                "max_abs_diff": worst.max_abs if worst else 0.0,
                "max_rel_diff": worst.max_rel if worst else 0.0,
                "worst_key": worst.key if worst else None,
                "tolerance": {**DEFAULT_TOLERANCE, **(tolerance or {})},
                "wall_time_s": wall,
                "provenance": {k: prov.get(k) for k in (
                    "git_commit", "git_commit_source", "git_dirty", "WARNING", "device", "host")
                    if prov.get(k) is not None},
                "environment": environment() | {"x64": fresh.provenance.get("x64")},
            }
            if fresh.provenance.get("entk_routes"):  # how today's engine formed the kernels
                rec["entk_routes"] = fresh.provenance["entk_routes"]
            recorded = store.add_reverification(name, module.VERSION, config, rec)
        rep = Reproduction(name, store.entry_dir(name, module.VERSION, config), what, comparison,
                           recorded, wall)
        report(rep.line())
        out.append(rep)
    return out


def _rerun(name: str, config: Any, x64: bool | None) -> tuple[Result, float]:
    """``config`` of experiment ``name`` computed by today's code in a throwaway store, with the
    global x64 flag set as recorded (restored after)."""
    import jax

    before = bool(jax.config.jax_enable_x64)
    t0 = time.perf_counter()
    try:
        if x64 is not None:
            jax.config.update("jax_enable_x64", bool(x64))
        with tempfile.TemporaryDirectory(prefix="ntkbook-reproduce-") as tmp:
            scratch = Path(tmp) / "scratch"
            tmp_store = Store(Path(tmp) / "results", scratch=scratch)
            result = experiments.run_and_save(name, config, tmp_store, recompute=True)
    finally:
        jax.config.update("jax_enable_x64", before)
    return result, time.perf_counter() - t0

