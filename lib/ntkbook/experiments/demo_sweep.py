"""A tiny demo experiment that exercises the store end to end.

It measures the Monte Carlo error of estimating ``E[relu(z)] = 1/sqrt(2π)`` for ``z ~ N(0, 1)``
from ``n`` samples, for a sweep of ``n``: the error falls like ``1/sqrt(n)``, the same law that
governs how a finite-width NTK approaches its infinite-width limit. Each sample size is one
checkpointed point of the sweep.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ntkbook import validate as v
from ntkbook.progress import progress
from ntkbook.stats import loglog_slope
from ntkbook.store import PointStore, Result

NAME = "demo_sweep"
VERSION = "1"


@dataclasses.dataclass(frozen=True)
class Config:
    """The sweep of sample sizes.

    Presets: ``paper()`` (n = 16 to 16384, 400 repeats) and ``smoke()`` (n = 16 to 1024, 100 repeats).
    """

    sample_sizes: tuple[int, ...] = (16, 64, 256, 1024, 4096)  # the numbers of samples n
    repeats: int = 200  # independent estimates per n
    seed: int = 0  # seed of the draws (with n)

    @classmethod
    def smoke(cls) -> "Config":
        return cls(sample_sizes=(16, 64, 256, 1024), repeats=100)

    @classmethod
    def paper(cls) -> "Config":
        return cls(sample_sizes=(16, 64, 256, 1024, 4096, 16384), repeats=400)

    def __post_init__(self):
        v.each(v.positive_int, NAME, "sample_sizes", self.sample_sizes)
        v.require(NAME, "sample_sizes", self.sample_sizes, len(self.sample_sizes) >= 2, "at least two sizes",
                  "the log-log slope needs two points")
        v.increasing(NAME, "sample_sizes", self.sample_sizes)
        v.positive_int(NAME, "repeats", self.repeats, "an RMS error needs one estimate")
        v.int_at_least(NAME, "seed", self.seed, 0, "a NumPy seed")


def estimate_seconds(config: Config) -> float:
    return 1e-8 * config.repeats * sum(config.sample_sizes) + 0.1


def rms_error(n: int, repeats: int, seed: int) -> float:
    """Root-mean-square error of the ``n``-sample mean of ``relu(z)`` over ``repeats`` draws."""
    rng = np.random.default_rng([seed, n])
    z = rng.standard_normal((repeats, n))
    estimates = np.maximum(z, 0.0).mean(axis=1)
    return float(np.sqrt(np.mean((estimates - 1.0 / math.sqrt(2 * math.pi)) ** 2)))


def run(config: Config, points: PointStore | None = None) -> Result:
    """The RMS error at every sample size (each a checkpointed point) and its log-log slope."""
    points = points or PointStore(None)
    errors = []
    for n in progress(config.sample_sizes, desc="demo sweep"):
        _, scalars = points.cached(
            f"n={n}", lambda n=n: ({}, {"rms_error": rms_error(n, config.repeats, config.seed)})
        )
        errors.append(scalars["rms_error"])
    n = np.asarray(config.sample_sizes, dtype=float)
    slope = loglog_slope(n, errors)
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays={"sample_sizes": n, "rms_error": np.asarray(errors)},
        scalars={"loglog_slope": slope},
    )
