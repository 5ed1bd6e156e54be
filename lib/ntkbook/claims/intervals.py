"""Intervals over seeds, the one way every verdict in :mod:`ntkbook.claims` reads a spread.

A verdict is never taken from a point estimate against a fixed band: it asks whether an interval
over seeds (or splits) lies above a level, below it, or straddles it. The interval is Student's t
interval of the mean (:func:`scipy.stats.t`), at :data:`LEVEL` two-sided, over independent runs
(seeds). With three seeds it is wide (t = 2.92 at 90 %): a verdict that needs it to exclude a level
then asks a lot of three runs, which is the point.

Ratios (attention over ReLU) are read on the log scale: the t interval of the mean of the per-seed
log ratios, mapped back (a geometric mean with its interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ntkbook.errors import InputError

__all__ = ["LEVEL", "Interval", "seed_interval", "ratio_interval"]

#: two-sided coverage of every interval a verdict reads
LEVEL = 0.90


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` runs with its two-sided :data:`LEVEL` interval ``[lo, hi]`` (both NaN for
    one run: one seed has no interval, and a verdict that needs one says so)."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def known(self) -> bool:
        return self.n > 1 and math.isfinite(self.lo) and math.isfinite(self.hi)

    def above(self, level: float) -> bool:
        """The whole interval lies above ``level`` (False when there is no interval)."""
        return self.known and self.lo > level

    def below(self, level: float) -> bool:
        """The whole interval lies below ``level`` (False when there is no interval)."""
        return self.known and self.hi < level

    def overlaps(self, low: float, high: float) -> bool:
        """The interval meets ``[low, high]`` (for one run: the mean lies in it)."""
        if not self.known:
            return low <= self.mean <= high
        return self.lo <= high and self.hi >= low

    def within(self, low: float, high: float) -> bool:
        """The whole interval lies in ``[low, high]`` (False when there is no interval)."""
        return self.known and low <= self.lo and self.hi <= high

    def text(self, fmt: str = ".1f", unit: str = "") -> str:
        """``"12.3 [10.1, 14.5]%"``, or ``"12.3%"`` for one run."""
        if not self.known:
            return f"{self.mean:{fmt}}{unit}"
        return f"{self.mean:{fmt}} [{self.lo:{fmt}}, {self.hi:{fmt}}]{unit}"


def seed_interval(values, level: float = LEVEL) -> Interval:
    """The mean of ``values`` (one per seed, ``(n,)``) and its two-sided t interval at ``level``."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise InputError(f"seed_interval needs finite values, one per seed; got {v.tolist()}")
    if not 0 < level < 1:
        raise InputError(f"level must lie in (0, 1); got {level}")
    mean = float(v.mean())
    if v.size == 1:
        return Interval(mean, math.nan, math.nan, 1)
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return Interval(mean, mean - half, mean + half, int(v.size))


def ratio_interval(numerator, denominator, level: float = LEVEL) -> Interval:
    """The geometric mean of the per-seed ratios ``numerator / denominator`` (paired by seed,
    ``(n,)`` each, non-negative rates) with the t interval of their logs mapped back. Where a seed's
    rate is 0 the log is undefined: the result is then the ratio of the means (``inf`` when the
    denominator's mean is 0, NaN when both are) with no interval."""
    a = np.asarray(numerator, dtype=np.float64).ravel()
    b = np.asarray(denominator, dtype=np.float64).ravel()
    if a.shape != b.shape or a.size == 0:
        raise InputError(f"ratio_interval needs paired values, one per seed; got {a.size} and {b.size}")
    if np.any(a < 0) or np.any(b < 0) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise InputError("ratio_interval reads rates (finite, non-negative values)")
    if np.any(a == 0) or np.any(b == 0):
        ma, mb = float(a.mean()), float(b.mean())
        value = ma / mb if mb > 0 else (math.inf if ma > 0 else math.nan)
        return Interval(value, math.nan, math.nan, int(a.size))
    logs = seed_interval(np.log(a / b), level)
    if not logs.known:
        return Interval(math.exp(logs.mean), math.nan, math.nan, logs.n)
    return Interval(math.exp(logs.mean), math.exp(logs.lo), math.exp(logs.hi), logs.n)
