r"""What the stored ``influence_sharpness`` result says: sharpness at equal training loss.

Readings of :mod:`ntkbook.experiments.influence_sharpness` (pure functions of its
:class:`ntkbook.store.Result`):

- :func:`seed_interval`: the mean over seeds and its Student-t interval (ntkbook.claims.intervals, 90 %);
- :func:`sharpness`: per task and model, the top Hessian eigenvalue (or any measured key) of
  2L-ReLU's loss-matched network and of each final network, with its interval;
- :func:`largest_gn_gap`: the largest relative gap between the two sides of the Gauss-Newton
  identity, over every network measured;
- :func:`flatness_ratio`: per task, MLP-Attn's top eigenvalue over 2L-ReLU's, paired by seed, at
  matched loss (either end of the crossing's bracket) or at the end of training;
- :func:`verdict`: the claim "attention's minimum is flatter", judged at matched loss;
- :func:`agreement_with_main`: the final networks' top Hessian eigenvalues against the main
  experiment's (``influence_malleability``) on the seeds both ran: the same recipe and seeds give
  the same networks, and the same Lanczos the same numbers.

**The rule** (:func:`verdict`). For each task and seed, the ratio
:math:`r_s = \lambda_{\max}(H)` of MLP-Attn's final network over that of 2L-ReLU's network at
MLP-Attn's final loss. The loss is matched to within one epoch: 2L-ReLU's network at the first epoch
at or below the target, and the one at the epoch before (above it) bracket the match, so the ratio
is taken at both ends. A task is **flatter** when the 90 % t-interval over seeds of the mean of
:math:`\log r_s` lies below 0 at both ends, **sharper** when it lies above 0 at both, and
**unresolved** otherwise. It is **not tested** when MLP-Attn did not train on it (a seed below
:data:`ntkbook.influence.readout.TRAINED_ACC` training accuracy), or when fewer than two seeds give
a matched network. The claim: "reproduces" when every tested task is flatter, "partly" when some
is, "does not" when none is, and "not tested" when no task is tested.
"""

from __future__ import annotations

import math

import numpy as np

from ntkbook import claims, verdicts
from ntkbook.claims import intervals
from ntkbook.claims.intervals import LEVEL, Interval
from ntkbook.errors import InputError
from ntkbook.influence.readout import TRAINED_ACC
from ntkbook.store import Result

__all__ = ["LEVEL", "NOT_TESTED", "FLATTER", "SHARPER", "UNRESOLVED", "Interval", "seed_interval",
           "values", "sharpness", "largest_gn_gap", "flatness_ratio", "task_verdict", "verdict", "RULE",
           "agreement_with_main"]

#: the verdict of a claim (or task) that the result cannot judge
NOT_TESTED = claims.NOT_TESTED
#: a task's reading (:func:`task_verdict`)
FLATTER, SHARPER, UNRESOLVED = "flatter", "sharper", "unresolved"
#: the rule of :func:`verdict`, in one sentence for a table
RULE = ("judged on the top Hessian eigenvalue only (the paper's measure, loss slices along random "
        "directions, is shown but not judged; the eigenvalue is not invariant to reparametrisation): "
        "per task, MLP-Attn's top Hessian eigenvalue over 2L-ReLU's at MLP-Attn's final training loss "
        "(paired by seed, at both ends of the one-epoch bracket of the match): flatter when the 90 % "
        "t-interval of the mean log ratio is below 0 at both ends; flatter on every task tested "
        "reproduces, on some partly; not tested where MLP-Attn did not train")


def seed_interval(vals, level: float = LEVEL) -> Interval:
    """:func:`ntkbook.claims.intervals.seed_interval` of the finite ``vals`` (one per seed; NaN, a
    seed without the value, left out); ``Interval(nan, nan, nan, 0)`` when none is finite."""
    v = np.asarray(vals, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    return intervals.seed_interval(v, level)


def values(result: Result, task: str, model: str, key: str) -> np.ndarray:
    """The per-seed values of ``table["<task>/<model>"][key]`` (e.g. ``"matched/hessian_top"``)."""
    return np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64)


def sharpness(result: Result, key: str = "hessian_top") -> list[dict]:
    """One row per task and network: ``{"task", "model", "network", "interval", "loss"}`` with the
    :func:`seed_interval` of ``<network>/<key>`` and of the network's training loss, for 2L-ReLU's
    loss-matched and final networks and MLP-Attn's final one (``key`` e.g. ``"hessian_top"``,
    ``"hessian_per_loss"``, ``"gn_top"``)."""
    rows = []
    for task in result.config["tasks"]:
        for model, network in (("attn", "final"), ("relu", "matched"), ("relu", "final")):
            rows.append({"task": task, "model": model, "network": network,
                         "interval": seed_interval(values(result, task, model, f"{network}/{key}")),
                         "loss": seed_interval(values(result, task, model, f"{network}/train_loss"))})
    return rows


def largest_gn_gap(result: Result) -> dict:
    """The largest relative gap ``|lambda_H - lambda_GN| / lambda_GN`` over every network measured
    (NaN entries, networks that do not exist, left out): ``{"gap", "task", "model", "network",
    "seed"}``."""
    best = {"gap": -math.inf}
    for task in result.config["tasks"]:
        for model, network in (("attn", "final"), ("relu", "matched"), ("relu", "final")):
            for seed, gap in zip(result.config["seeds"], values(result, task, model, f"{network}/gn_gap")):
                if np.isfinite(gap) and gap > best["gap"]:
                    best = {"gap": float(gap), "task": task, "model": model, "network": network, "seed": seed}
    return best


def flatness_ratio(result: Result, task: str, at: str = "matched") -> tuple[np.ndarray, Interval]:
    """Per seed, MLP-Attn's final top Hessian eigenvalue over 2L-ReLU's at ``at``: ``"matched"``
    (the first epoch at or below MLP-Attn's final loss), ``"before"`` (the epoch before it) or
    ``"final"``; and the :func:`seed_interval` of the log ratios (NaN where 2L-ReLU has no such
    network). Returns ``(ratios, interval of log ratios)``."""
    if at not in ("matched", "before", "final"):
        raise InputError(f"at must be 'matched', 'before' or 'final', got {at!r}")
    ratio = values(result, task, "attn", "final/hessian_top") / values(result, task, "relu", f"{at}/hessian_top")
    return ratio, seed_interval(np.log(ratio))


def _reading(interval: Interval) -> str:
    if not (np.isfinite(interval.lo) and np.isfinite(interval.hi)):
        return UNRESOLVED
    if interval.hi < 0:
        return FLATTER
    if interval.lo > 0:
        return SHARPER
    return UNRESOLVED


def task_verdict(result: Result, task: str) -> dict:
    """One task's reading by the rule (module docstring): ``{"task", "reading", "why",
    "matched", "before", "final"}``, the last three the :func:`flatness_ratio` intervals of the
    log ratio (``final``: at the end of training, for contrast, not judged). ``reading`` is one
    of :data:`FLATTER`, :data:`SHARPER`, :data:`UNRESOLVED`, :data:`NOT_TESTED`."""
    out = {"task": task, **{at: flatness_ratio(result, task, at)[1] for at in ("matched", "before", "final")}}
    acc = values(result, task, "attn", "train_acc")
    if not np.all(acc >= TRAINED_ACC):
        return {**out, "reading": NOT_TESTED,
                "why": f"MLP-Attn below {TRAINED_ACC:.0%} training accuracy (lowest {acc.min():.1%})"}
    usable = min(out["matched"].n, out["before"].n)
    if usable < 2:
        return {**out, "reading": NOT_TESTED,
                "why": f"{usable} seed(s) with a loss-matched 2L-ReLU network and the epoch before it"}
    readings = {_reading(out["matched"]), _reading(out["before"])}
    reading = readings.pop() if len(readings) == 1 else UNRESOLVED
    return {**out, "reading": reading, "why": f"{usable} seeds"}


def verdict(result: Result) -> dict:
    """The claim "attention's minimum is flatter" judged at matched loss (the rule of the module
    docstring, :data:`RULE`): ``{"verdict", "tasks": [task_verdict, ...], "rule"}``, ``verdict``
    one of :data:`ntkbook.verdicts.VERDICTS` or :data:`NOT_TESTED`."""
    tasks = [task_verdict(result, t) for t in result.config["tasks"]]
    tested = [t for t in tasks if t["reading"] != NOT_TESTED]
    if not tested:
        v = NOT_TESTED
    else:
        flatter = [t["reading"] == FLATTER for t in tested]
        v = verdicts.ladder(all(flatter), any(flatter))
    return {"verdict": v, "tasks": tasks, "rule": RULE}


def agreement_with_main(result: Result, main: Result) -> dict:
    """The largest relative difference between this result's final top Hessian eigenvalues and the
    main experiment's (``main``: the ``influence_malleability`` result, key ``hessian_top``), over
    the tasks, models and seeds both have: ``{"max_rel_diff", "compared"}`` (NaN and 0 when they
    share none). The networks are the same when both used the same recipe (checked here: the
    config fields of the recipe must agree, else :class:`ntkbook.errors.InputError`)."""
    recipe = ("n_train", "width", "epochs", "lr", "batch", "l2", "attn_steps", "hessian_steps")
    differ = [k for k in recipe if result.config[k] != main.config[k]]
    if differ:
        raise InputError(f"the two results trained or measured differently ({', '.join(differ)}): "
                         f"their networks are not the same")
    worst, compared = 0.0, 0
    for task in result.config["tasks"]:
        if task not in main.config["tasks"]:
            continue
        for model in ("relu", "attn"):
            ours = dict(zip(result.config["seeds"], values(result, task, model, "final/hessian_top")))
            theirs = dict(zip(main.config["seeds"], values(main, task, model, "hessian_top")))
            for seed in sorted(set(ours) & set(theirs)):
                worst = max(worst, abs(ours[seed] - theirs[seed]) / abs(theirs[seed]))
                compared += 1
    return {"max_rel_diff": worst if compared else math.nan, "compared": compared}
