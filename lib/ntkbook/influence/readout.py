"""Reading the influence experiments' results: per-seed scalars, trained or not, flip rates.

Every influence experiment stores its per-seed scalars in ``result["table"]``, a mapping from
``"<task>/<model>"`` (with ``"/<width>"`` for the width sweep) to ``{key: [one value per seed]}``.
"""

from __future__ import annotations

import math

import numpy as np

from ntkbook.stats import mean_spread
from ntkbook.store import Result

__all__ = ["TRAINED_ACC", "stat", "trained", "flip_means", "flip_ratio", "separation", "sweep_part"]

#: a model counts as trained when its final training accuracy reaches this
TRAINED_ACC = 0.8


def stat(result: Result, task: str, model: str, key: str, scale: float = 1.0):
    """``(mean, spread, values)`` of a per-seed scalar across seeds, times ``scale``
    (:func:`ntkbook.stats.mean_spread`: the sample standard deviation, 0 for one seed)."""
    v = np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64) * scale
    mean, spread = mean_spread(v)
    return mean, spread, v


def trained(result: Result, task: str, model: str, key: str = "train_acc") -> bool:
    """True when every seed of (task, model) reached :data:`TRAINED_ACC` in ``key`` (the training
    accuracy; ``"standard/train_acc"`` etc. in the adversarial-training result)."""
    return bool(np.all(np.asarray(result["table"][f"{task}/{model}"][key]) >= TRAINED_ACC))


def flip_means(result: Result, task: str, model: str, intervention: str = "adversarial"):
    """Mean flip rate (%) over seeds per attack of the result's config."""
    atk = result.config["attacks"]
    return {a: stat(result, task, model, f"{intervention}/{a}/flip", 100.0)[0] for a in atk}


def flip_ratio(result: Result, task: str):
    """``(ratio, relu, attn)``: the mean over attacks of each model's mean flip rate (%), and
    MLP-Attn's over 2L-ReLU's (infinite when 2L-ReLU's is 0)."""
    r = np.mean(list(flip_means(result, task, "relu").values()))
    a = np.mean(list(flip_means(result, task, "attn").values()))
    return a / r if r > 0 else math.inf, r, a


def separation(a, b, spreads: float = 2.0) -> int:
    """Whether two sets of per-seed values are apart: +1 when the mean of ``a`` exceeds that of
    ``b`` by more than ``spreads`` times the larger of their seed spreads
    (:func:`ntkbook.stats.mean_spread`), -1 when ``b``'s exceeds ``a``'s so, 0 otherwise."""
    mean_a, spread_a = mean_spread(a)
    mean_b, spread_b = mean_spread(b)
    spread = max(spread_a, spread_b)
    if mean_a - mean_b > spreads * spread:
        return 1
    if mean_b - mean_a > spreads * spread:
        return -1
    return 0


def sweep_part(result: Result, tasks, models, seeds, first_seed_only=()) -> tuple[dict, dict]:
    """The part of a task x model x seed sweep's result that belongs to ``tasks x models x seeds``
    (``seeds`` a subset of ``result.config["seeds"]``, beginning with its first seed), as
    ``(arrays, {"table": ...})``: the arrays ``<task>/<model>/<name>`` (per-seed stacks of shape
    ``(n_seeds, ...)`` cut to those seeds; the names in ``first_seed_only``, which hold the first
    seed's array alone, kept whole) and the per-seed lists of ``table["<task>/<model>"]`` cut to
    those seeds. It is what a rerun of the smaller sweep must reproduce exactly
    (:mod:`ntkbook.freshness`)."""
    all_seeds = list(result.config["seeds"])
    if not seeds or seeds[0] != all_seeds[0] or not set(seeds) <= set(all_seeds):
        raise ValueError(f"seeds {list(seeds)} must be a subset of {all_seeds} beginning with its "
                         f"first seed")
    idx = [all_seeds.index(s) for s in seeds]
    arrays, table = {}, {}
    for task in tasks:
        for model in models:
            prefix = f"{task}/{model}"
            for key, value in result.arrays.items():
                head, _, name = key.rpartition("/")
                if head == prefix:
                    arrays[key] = value if name in first_seed_only else np.asarray(value)[idx]
            table[prefix] = {k: [v[i] for i in idx] for k, v in result["table"][prefix].items()}
    return arrays, {"table": table}
