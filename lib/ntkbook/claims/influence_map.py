"""Reading the influence map (:mod:`ntkbook.experiments.influence_map`): flip rates across the
radius and the ridge, between the random-sign null and the clean-share independence level.

Every function reads the stored result's per-seed table (``result["table"]["<task>/<model>"]``,
one value per seed) and returns numbers in percent with an interval over seeds
(:func:`ntkbook.claims.intervals.seed_interval`). Keys read, for a ridge label such as
``"lam=0.001"`` (``A = K + lam I``) or ``"nlam=0.001"`` (``A = K + n lam I``):

- ``"<attack>/<eps>/<ridge>/flip"``: the flip rate of the top set under ``attack`` (``fgsm``,
  ``pgd``, ``mim``, ``null``: the random-sign null, the mean of its draws) at radius ``eps``;
- ``"flipobj/<eps>/<ridge>/flip"``: the flip-objective attack, on the tasks and ridges it ran;
- ``"clean/<ridge>/ceiling"``: the clean-share independence level of that ridge's top set (stored
  under the name "ceiling"): the flip rate to expect if every perturbed sign were an independent
  draw from the *clean* sign shares (:func:`ntkbook.influence.references.independence_ceiling`).
  It is a reference, not a bound: an attack that shifts the overall sign balance, or that
  anti-correlates the perturbed signs with the clean ones (negative Spearman rho), flips more.
  :func:`perturbed_share_level` is the same expectation with the *perturbed* sign shares, where the
  perturbed influences are stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ntkbook.claims.intervals import Interval, ratio_interval, seed_interval
from ntkbook.influence.readout import trained
from ntkbook.store import Result

__all__ = ["MAIN_RIDGE", "per_seed", "has", "flip", "rate_interval", "ceiling", "above_null", "headroom",
           "MatchedPoint", "matched_point", "saturated", "both_trained", "top_size", "flip_counts",
           "perturbed_share_level", "interval_text", "LEVEL_NAME"]

#: the ridge of the paper's per-task table and of the main experiment: A = K + 1e-3 I
MAIN_RIDGE = "lam=0.001"

#: a flip rate is "saturated" when its mean reaches this fraction of the clean-share independence
#: level's mean: near the rate of signs drawn without regard to the clean ones
SATURATION = 0.8

#: the reader's name of the stored "ceiling": a reference level, not an upper bound
LEVEL_NAME = "clean-share independence level"


def _key(attack: str, eps: float, ridge: str) -> str:
    return f"{attack}/{eps:g}/{ridge}/flip"


def per_seed(result: Result, task: str, model: str, key: str) -> np.ndarray:
    """The per-seed values of ``key`` for (task, model), ``(n_seeds,)``, in percent for rates."""
    return np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64) * 100.0


def has(result: Result, task: str, model: str, attack: str, eps: float, ridge: str) -> bool:
    """Whether the map measured ``attack`` at (eps, ridge) for (task, model)."""
    return _key(attack, eps, ridge) in result["table"].get(f"{task}/{model}", {})


def rate_interval(values) -> Interval:
    """:func:`~ntkbook.claims.intervals.seed_interval` of per-seed rates in percent, clipped to
    [0, 100] (a rate's t interval can reach past its bounds)."""
    iv = seed_interval(values)
    return Interval(iv.mean, max(iv.lo, 0.0), min(iv.hi, 100.0), iv.n) if iv.known else iv


def flip(result: Result, task: str, model: str, attack: str, eps: float, ridge: str = MAIN_RIDGE) -> Interval:
    """Flip rate (%) under ``attack`` at (eps, ridge), mean over seeds with its interval (clipped
    to [0, 100], :func:`rate_interval`)."""
    return rate_interval(per_seed(result, task, model, _key(attack, eps, ridge)))


def ceiling(result: Result, task: str, model: str, ridge: str = MAIN_RIDGE) -> Interval:
    """The clean-share independence level (%) of the ridge's top set over seeds (module docstring;
    stored as "ceiling")."""
    return rate_interval(per_seed(result, task, model, f"clean/{ridge}/ceiling"))


def top_size(result: Result) -> int | None:
    """|T|: the number of training points in the top set (``top_fraction`` of ``n_train``); None
    when the result's configuration does not say."""
    cfg = result.config
    if "top_fraction" not in cfg or "n_train" not in cfg:
        return None
    return int(round(cfg["top_fraction"] * cfg["n_train"]))


def flip_counts(result: Result, task: str, model: str, attack: str, eps: float,
                ridge: str = MAIN_RIDGE) -> list[int]:
    """Per seed, how many of the |T| top points flipped under ``attack`` at (eps, ridge) (empty
    when |T| is not known, :func:`top_size`)."""
    if top_size(result) is None:
        return []
    rates = per_seed(result, task, model, _key(attack, eps, ridge))
    return [int(round(r / 100.0 * top_size(result))) for r in rates]


def perturbed_share_level(clean, perturbed, fraction: float = 0.1) -> float:
    """The flip rate (%) to expect over the top set of ``clean`` (``(n,)``, by ``|I|``) if each
    perturbed sign were an independent draw from the sign shares of ``perturbed`` (``(n,)``, every
    point's influence after the intervention): ``f+ q'- + f- q'+`` (plus the share of zeros),
    the clean-share level's formula with the perturbed shares ``q'`` in place of the clean ones."""
    from ntkbook.influence.scores import top_indices

    c, p = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
    if c.shape != p.shape or c.ndim != 1:
        raise ValueError(f"clean and perturbed influences must be vectors of one length; got {c.shape}, {p.shape}")
    idx = top_indices(c, fraction)
    share = {s: float(np.mean(np.sign(p) == s)) for s in (-1.0, 0.0, 1.0)}
    return 100.0 * float(np.mean([1.0 - share[s] for s in np.sign(c[idx])]))


def main_sweep_levels(result: Result) -> list[dict]:
    """Per trained (task, model) of the main sweep (``influence_malleability``, PGD at its radius):
    the per-seed PGD flip rates (%) ``flip``, clean-share levels ``clean_level`` and
    perturbed-share levels ``pert_level`` (:func:`perturbed_share_level`, from the stored clean and
    attacked influences), the Spearman ``rho``, and ``above`` (the mean flip rate above the mean
    perturbed-share level). Rows carry ``task`` and ``model`` keys."""
    from ntkbook.influence.readout import trained
    from ntkbook.influence.scores import flip_rate

    cfg, rows = result.config, []
    for task in cfg["tasks"]:
        for model in ("relu", "attn"):
            if not trained(result, task, model):
                continue
            clean, pert = result[f"{task}/{model}/influence_clean"], result[f"{task}/{model}/influence_pgd"]
            flip = [100.0 * flip_rate(a, b, fraction=cfg["top_fraction"]) for a, b in zip(clean, pert)]
            lv_c = [perturbed_share_level(a, a, cfg["top_fraction"]) for a in clean]
            lv_p = [perturbed_share_level(a, b, cfg["top_fraction"]) for a, b in zip(clean, pert)]
            rows.append({"task": task, "model": model, "flip": flip, "clean_level": lv_c, "pert_level": lv_p,
                         "rho": result["table"][f"{task}/{model}"]["adversarial/pgd/rho"],
                         "above": bool(np.mean(flip) > np.mean(lv_p))})
    return rows


def ablation_rows(result: Result) -> list[dict]:
    """The main sweep's ε ablation (its ``ablation_tasks`` × ``ablation_eps``, PGD): per (task, ε)
    the per-seed flip rates (%) of both models (``relu``, ``attn``) and the ratio of their means
    (``ratio``; ``None`` where 2L-ReLU flips nothing on average)."""
    cfg, rows = result.config, []
    for task in cfg.get("ablation_tasks", []):
        for eps in cfg.get("ablation_eps", []):
            r = 100.0 * np.asarray(result["table"][f"{task}/relu"][f"ablation/pgd/{eps:g}/flip"], np.float64)
            a = 100.0 * np.asarray(result["table"][f"{task}/attn"][f"ablation/pgd/{eps:g}/flip"], np.float64)
            rows.append({"task": task, "eps": float(eps), "relu": r, "attn": a,
                         "ratio": float(a.mean() / r.mean()) if r.mean() > 0 else None})
    return rows


def ratio_trend(rows: list[dict]) -> str:
    """How the ratio of the means moves over ε on the first task of :func:`ablation_rows`:
    ``"falls"`` (strictly, every step), ``"other"``, or ``""`` (fewer than two radii, or a
    ratio unbounded)."""
    first = [r for r in rows if rows and r["task"] == rows[0]["task"]]
    ratios = [r["ratio"] for r in first]
    if len(ratios) < 2 or any(x is None for x in ratios):
        return ""
    return "falls" if all(np.diff(ratios) < 0) else "other"


def interval_text(iv: Interval, fmt: str = ".1f", unit: str = "") -> str:
    """:meth:`Interval.text`, with a rounded negative zero written as 0 (no "-0")."""
    def num(x: float) -> str:
        out = f"{x:{fmt}}"
        return out[1:] if out.startswith("-") and float(out) == 0 else out
    if not iv.known:
        return f"{num(iv.mean)}{unit}"
    return f"{num(iv.mean)} [{num(iv.lo)}, {num(iv.hi)}]{unit}"


def above_null(result: Result, task: str, model: str, attack: str, eps: float,
               ridge: str = MAIN_RIDGE) -> Interval:
    """The attack's flip rate minus the random-sign null's at the same (eps, ridge), in points of
    percent, paired by seed: how much of the flipping the attack adds to signs of its size."""
    return seed_interval(per_seed(result, task, model, _key(attack, eps, ridge))
                         - per_seed(result, task, model, _key("null", eps, ridge)))


def headroom(result: Result, task: str, model: str, attack: str, eps: float,
             ridge: str = MAIN_RIDGE) -> Interval:
    """The flip rate as a fraction (%) of the clean-share independence level, paired by seed
    (100 %: as many flips as signs drawn independently from the clean shares would give; more is
    possible, the level is not a bound)."""
    return seed_interval(per_seed(result, task, model, _key(attack, eps, ridge))
                         / per_seed(result, task, model, f"clean/{ridge}/ceiling") * 100.0)


def saturated(result: Result, task: str, model: str, attack: str, eps: float,
              ridge: str = MAIN_RIDGE) -> bool:
    """True when the mean flip rate reaches :data:`SATURATION` of the mean clean-share independence
    level: there a model's flips are as many as signs unrelated to the clean ones would give, and a
    ratio between two models no longer measures how easily either flips."""
    return (flip(result, task, model, attack, eps, ridge).mean
            >= SATURATION * ceiling(result, task, model, ridge).mean)


@dataclass(frozen=True)
class MatchedPoint:
    """Where 2L-ReLU's flip rate matches a level (the paper's), and the two models there.

    ``read_at``: the radius of the grid at which 2L-ReLU's mean flip rate is closest to ``level``
    on a log scale (the map's radii are a factor 2-3 apart, so the first radius past the level
    can overshoot it several times); ``crossing``: the radius at which the mean crosses ``level``,
    interpolated linearly in (log eps, flip rate) between grid points (None when it never reaches
    it on the grid); ``relu``, ``attn``: the flip rates at ``read_at``; ``ratio``: attention over
    ReLU (paired by seed, :func:`ntkbook.claims.intervals.ratio_interval`: a geometric mean with
    the interval of the log ratios; no interval where a seed's rate is 0); ``relu_counts``,
    ``attn_counts``: per seed, how many of the |T| top points flipped; ``attn_above_null``:
    attention's flip rate minus the null's; ``relu_saturated``, ``attn_saturated``:
    :func:`saturated`."""

    level: float
    read_at: float
    crossing: float | None
    relu: Interval
    attn: Interval
    ratio: Interval
    attn_above_null: Interval
    relu_counts: tuple = ()
    attn_counts: tuple = ()
    relu_saturated: bool = False
    attn_saturated: bool = False


def matched_point(result: Result, task: str, level: float, *, attack: str = "pgd",
                  ridge: str = MAIN_RIDGE) -> MatchedPoint:
    """The radius at which 2L-ReLU's ``attack`` flip rate is closest to ``level`` (%) at
    ``ridge``, and the attention/ReLU comparison there (:class:`MatchedPoint`)."""
    if level <= 0:
        raise ValueError(f"level must be a positive flip rate in percent; got {level}")
    grid = sorted(float(e) for e in result.config["eps"])
    means = [flip(result, task, "relu", attack, e, ridge).mean for e in grid]
    dist = [abs(math.log(max(m, 1e-3) / level)) for m in means]
    at = grid[int(np.argmin(dist))]
    hit = next((i for i, m in enumerate(means) if m >= level), None)
    crossing = None
    if hit is not None:
        crossing = grid[hit]
        if hit > 0 and means[hit] > means[hit - 1]:
            lo, hi = math.log(grid[hit - 1]), math.log(grid[hit])
            frac = (level - means[hit - 1]) / (means[hit] - means[hit - 1])
            crossing = math.exp(lo + frac * (hi - lo))
    relu = per_seed(result, task, "relu", _key(attack, at, ridge))
    attn = per_seed(result, task, "attn", _key(attack, at, ridge))
    return MatchedPoint(level=level, read_at=at, crossing=crossing,
                        relu=rate_interval(relu), attn=rate_interval(attn),
                        ratio=ratio_interval(attn, relu),
                        attn_above_null=above_null(result, task, "attn", attack, at, ridge),
                        relu_counts=tuple(flip_counts(result, task, "relu", attack, at, ridge)),
                        attn_counts=tuple(flip_counts(result, task, "attn", attack, at, ridge)),
                        relu_saturated=saturated(result, task, "relu", attack, at, ridge),
                        attn_saturated=saturated(result, task, "attn", attack, at, ridge))


def both_trained(result: Result, task: str) -> bool:
    """Both models of ``task`` trained (:func:`ntkbook.influence.readout.trained`)."""
    return trained(result, task, "relu") and trained(result, task, "attn")
