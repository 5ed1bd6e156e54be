"""Interleaved wall-clock timing shared by the benchmark scripts.

On shared, noisy machines a ratio of two times is only meaningful when both were measured under
the same load: :func:`timeit` runs the functions one after the other inside every repeat, and
:func:`ratio` reports the median and quartiles of the per-repeat ratios.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np


@dataclasses.dataclass
class Timing:
    """Wall times of one timed call over the repeats: min, median and the interquartile range."""

    times: np.ndarray

    @property
    def min(self):
        return float(np.min(self.times))

    @property
    def median(self):
        return float(np.median(self.times))

    @property
    def spread(self):
        """Interquartile range relative to the median (0.1 = the middle half within 10 %)."""
        q1, q3 = np.percentile(self.times, [25, 75])
        return float((q3 - q1) / np.median(self.times))

    def ms(self):
        return f"{self.min * 1e3:.3g} / {self.median * 1e3:.3g} (±{50 * self.spread:.0f}%)"

    def s(self):
        return f"{self.min:.3g} / {self.median:.3g} (±{50 * self.spread:.0f}%)"


def ratio(a: Timing, b: Timing) -> str:
    """Median and interquartile range of the per-repeat ratios a_i / b_i of interleaved timings
    (each pair was measured back to back, under the same load)."""
    r = a.times / b.times
    q1, q3 = np.percentile(r, [25, 75])
    return f"{np.median(r):.3g} [{q1:.3g}, {q3:.3g}]"


def block(x):
    """Wait for every array in x, including the fields of result dataclasses such as EigResult
    (not a pytree: ``jax.block_until_ready`` alone would return at once)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        jax.block_until_ready([getattr(x, f.name) for f in dataclasses.fields(x)])
        return x
    return jax.block_until_ready(x)


def timeit(fns, *, repeat, warmup=1):
    """Time each function of ``fns`` (each must return its result), interleaved: every repeat runs
    all of them once, one after the other, so that they all see the same load on the shared CPUs.
    Each call's result is waited for with :func:`block`. Warm-up calls (compilation, caches) are
    not timed. Returns one :class:`Timing` per function."""
    for fn in fns:
        for _ in range(warmup):
            block(fn())
    ts = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            block(fn())
            ts[i].append(time.perf_counter() - t)
    return [Timing(np.asarray(t)) for t in ts]
