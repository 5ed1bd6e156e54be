"""The summary statistics every experiment and chapter shares, defined once.

- :func:`mean_spread`: mean and spread over seeds (or splits). The spread is the **sample**
  standard deviation (``ddof = 1``, :data:`SPREAD_DDOF`) everywhere in the book, and 0 for a
  single value; chapters say "± sample standard deviation over seeds".
- :func:`loglog_slope`: the least-squares slope of ``log y`` against ``log x``.
- :func:`first_crossing`: the first step at which a curve reaches a level.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SPREAD_DDOF", "mean_spread", "loglog_slope", "first_crossing"]

#: degrees of freedom removed in every "± spread" the book shows: the sample standard deviation
SPREAD_DDOF = 1


def mean_spread(values, axis: int | None = None):
    """``(mean, spread)`` of ``values`` along ``axis`` (all of them when ``None``).

    The spread is the sample standard deviation (``ddof = 1``); along an axis of length 1 it is 0
    (one seed has no spread to show, which is not the same as NaN). Returns floats for
    ``axis=None``, arrays otherwise.
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size if axis is None else v.shape[axis]
    mean = v.mean(axis=axis)
    spread = v.std(axis=axis, ddof=SPREAD_DDOF) if n > 1 else np.zeros_like(mean)
    if axis is None:
        return float(mean), float(spread)
    return mean, spread


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``.

    ``y`` of shape ``(len(x),)``, or ``(len(x), seeds)`` (then the mean over seeds is fitted).
    Points with ``y <= 0`` are left out; NaN with fewer than two points left.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    y = y.mean(axis=1) if y.ndim == 2 else y
    ok = y > 0
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def first_crossing(steps, values, level: float) -> float:
    """The first entry of ``steps`` at which ``values >= level`` (NaN if never); both ``(T,)``."""
    hit = np.flatnonzero(np.asarray(values) >= level)
    return float(np.asarray(steps)[hit[0]]) if hit.size else math.nan
