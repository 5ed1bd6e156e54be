"""Reading the influence map (:mod:`ntkbook.experiments.influence_map`): flip rates across the
radius and the ridge, between the random-sign null and the independence ceiling.

Every function reads the stored result's per-seed table (``result["table"]["<task>/<model>"]``,
one value per seed) and returns numbers in percent with an interval over seeds
(:func:`ntkbook.claims.intervals.seed_interval`). Keys read, for a ridge label such as
``"lam=0.001"`` (``A = K + lam I``) or ``"nlam=0.001"`` (``A = K + n lam I``):

- ``"<attack>/<eps>/<ridge>/flip"``: the flip rate of the top set under ``attack`` (``fgsm``,
  ``pgd``, ``mim``, ``null``: the random-sign null, the mean of its draws) at radius ``eps``;
- ``"flipobj/<eps>/<ridge>/flip"``: the flip-objective attack, on the tasks and ridges it ran;
- ``"clean/<ridge>/ceiling"``: the independence ceiling of that ridge's top set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ntkbook.claims.intervals import Interval, ratio_interval, seed_interval
from ntkbook.influence.readout import trained
from ntkbook.store import Result

__all__ = ["MAIN_RIDGE", "per_seed", "has", "flip", "ceiling", "above_null", "headroom",
           "MatchedPoint", "matched_point", "saturated", "both_trained"]

#: the ridge of the paper's operating point and of the main experiment: A = K + 1e-3 I
MAIN_RIDGE = "lam=0.001"

#: a flip rate is "saturated" when its mean reaches this fraction of the ceiling's mean: near the
#: rate of signs that carry no information about the clean ones
SATURATION = 0.8


def _key(attack: str, eps: float, ridge: str) -> str:
    return f"{attack}/{eps:g}/{ridge}/flip"


def per_seed(result: Result, task: str, model: str, key: str) -> np.ndarray:
    """The per-seed values of ``key`` for (task, model), ``(n_seeds,)``, in percent for rates."""
    return np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64) * 100.0


def has(result: Result, task: str, model: str, attack: str, eps: float, ridge: str) -> bool:
    """Whether the map measured ``attack`` at (eps, ridge) for (task, model)."""
    return _key(attack, eps, ridge) in result["table"].get(f"{task}/{model}", {})


def flip(result: Result, task: str, model: str, attack: str, eps: float, ridge: str = MAIN_RIDGE) -> Interval:
    """Flip rate (%) under ``attack`` at (eps, ridge), mean over seeds with its interval (clipped
    to [0, 100]: a rate's t interval can reach past its bounds)."""
    iv = seed_interval(per_seed(result, task, model, _key(attack, eps, ridge)))
    return Interval(iv.mean, max(iv.lo, 0.0), min(iv.hi, 100.0), iv.n) if iv.known else iv


def ceiling(result: Result, task: str, model: str, ridge: str = MAIN_RIDGE) -> Interval:
    """The independence ceiling (%) of the ridge's top set over seeds."""
    return seed_interval(per_seed(result, task, model, f"clean/{ridge}/ceiling"))


def above_null(result: Result, task: str, model: str, attack: str, eps: float,
               ridge: str = MAIN_RIDGE) -> Interval:
    """The attack's flip rate minus the random-sign null's at the same (eps, ridge), in points of
    percent, paired by seed: how much of the flipping the attack adds to signs of its size."""
    return seed_interval(per_seed(result, task, model, _key(attack, eps, ridge))
                         - per_seed(result, task, model, _key("null", eps, ridge)))


def headroom(result: Result, task: str, model: str, attack: str, eps: float,
             ridge: str = MAIN_RIDGE) -> Interval:
    """The flip rate as a fraction (%) of the ceiling, paired by seed (100 %: as many flips as
    independent signs would give)."""
    return seed_interval(per_seed(result, task, model, _key(attack, eps, ridge))
                         / per_seed(result, task, model, f"clean/{ridge}/ceiling") * 100.0)


def saturated(result: Result, task: str, model: str, attack: str, eps: float,
              ridge: str = MAIN_RIDGE) -> bool:
    """True when the mean flip rate reaches :data:`SATURATION` of the mean ceiling: a ratio between
    two models cannot show there."""
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
    ReLU (paired by seed, :func:`ntkbook.claims.intervals.ratio_interval`); ``attn_above_null``:
    attention's flip rate minus the null's; ``relu_saturated``, ``attn_saturated``:
    :func:`saturated`."""

    level: float
    read_at: float
    crossing: float | None
    relu: Interval
    attn: Interval
    ratio: Interval
    attn_above_null: Interval
    relu_saturated: bool
    attn_saturated: bool


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
                        relu=seed_interval(relu), attn=seed_interval(attn),
                        ratio=ratio_interval(attn, relu),
                        attn_above_null=above_null(result, task, "attn", attack, at, ridge),
                        relu_saturated=saturated(result, task, "relu", attack, at, ridge),
                        attn_saturated=saturated(result, task, "attn", attack, at, ridge))


def both_trained(result: Result, task: str) -> bool:
    """Both models of ``task`` trained (:func:`ntkbook.influence.readout.trained`)."""
    return trained(result, task, "relu") and trained(result, task, "attn")
