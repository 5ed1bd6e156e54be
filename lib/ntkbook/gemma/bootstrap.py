r"""Error bars over the data: a cluster bootstrap over the stories, with the scores held fixed.

A ``gemma_probe`` entry scores every context with the top eNTK modes and the top principal
components (``(k, N)`` each); its verdicts are read over splits of the **same** contexts.  How much
of the eNTK − PCA difference would survive other stories?  Re-running Lanczos per resample costs
15–40 min of CPU, so here the modes and the components stay fixed and only the evaluation is
resampled: each resample draws the ``S`` stories with replacement, takes every context of each
drawn story as often as the story is drawn, makes one fresh split by story of the resample
(:func:`ntkbook.gemma.probe.story_splits`) and evaluates every task on it as the experiment does
(:func:`ntkbook.gemma.probe.evaluate_task`: direction and sign chosen by training AP, then test AP
and AUROC).

The copies of a story drawn twice keep the story's id as their group, so they land on one side of
the split together; distinct ids would let a copy choose the mode on the training side and its
twin score it on the test side.

:func:`resample` returns the per-resample test values; :mod:`ntkbook.claims.gemma` turns them into
intervals and readings (``story_bootstrap``).
"""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import numpy as np

from ntkbook.errors import InputError
from ntkbook.gemma import probe

__all__ = ["METHODS", "METRICS", "task_masks", "resample", "draw_key"]

#: the score sets compared, and the test metrics recorded per resample and task
METHODS = ("entk", "pca")
METRICS = ("ap", "auroc")


def task_masks(family: str, names: Sequence[str], labels: np.ndarray, classes: Sequence[str],
               morph: Sequence[str | None]) -> dict[str, np.ndarray]:
    """Task name -> ``(N,)`` bool, for the named tasks of ``family``: a part of speech (``"pos"``)
    from the class index of each context (``labels`` (N,) into ``classes``), a "Feature=Value"
    (``"morph"``) from each context's morphology string (``"A=b|C=d"``, None for none)."""
    if family not in ("pos", "morph"):
        raise InputError(f"family must be 'pos' or 'morph', got {family!r}")
    if family == "pos":
        labels = np.asarray(labels)
        return {t: labels == list(classes).index(t) for t in names}
    return {t: np.array([t in (m or "").split("|") for m in morph]) for t in names}


def draw_key(family: str, method: str, metric: str) -> str:
    """The result key of one (resamples, tasks) array of draws: ``"<family>/<method>_<metric>"``."""
    return f"{family}/{method}_{metric}"


def resample(score_sets: Mapping[str, np.ndarray], masks: Mapping[str, np.ndarray], labels: np.ndarray,
             story: np.ndarray, *, folds: int, n_boot: int, seed: int) -> tuple[dict[str, np.ndarray], int]:
    """The test values of every task in each of ``n_boot`` resamples of the stories.

    Args:
      score_sets: method (``"entk"``, ``"pca"``) -> ``(k, N)`` scores, held fixed.
      masks: task -> ``(N,)`` bool (:func:`task_masks`), in the order of the output's columns.
      labels: ``(N,)`` class of each context (the splits are stratified by it, as the experiment's).
      story: ``(N,)`` story id of each context (the clusters).
      folds: the test side of a split is one of this many folds of the resample's stories.
      n_boot: resamples; seed: NumPy ``default_rng(seed)`` draws the stories and each split's seed.

    Returns ``(draws, unsplit)``: ``draws`` ``"<method>_<metric>"`` -> ``(n_boot, tasks)`` test values,
    NaN where a task has one class only on a side of that resample's split (it is skipped there);
    ``unsplit`` the resamples with fewer distinct stories than ``folds`` (every task skipped)."""
    if n_boot < 2:
        raise InputError(f"a bootstrap needs n_boot >= 2 resamples, got {n_boot}")
    labels, story = np.asarray(labels), np.asarray(story)
    names, of_story = np.unique(story, return_inverse=True)
    members = [np.flatnonzero(of_story == s) for s in range(len(names))]
    tasks = list(masks)
    rng = np.random.default_rng(seed)
    got = {f"{m}_{metric}": np.full((n_boot, len(tasks)), np.nan) for m in score_sets for metric in METRICS}
    unsplit = 0
    for b in range(n_boot):
        drawn = rng.integers(len(names), size=len(names))
        split_seed = int(rng.integers(2 ** 31 - 1))
        idx = np.concatenate([members[s] for s in drawn])
        try:
            with warnings.catch_warnings():  # few members of a class in a small resample: StratifiedGroupKFold warns
                warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
                (train, test), = probe.story_splits(labels[idx], story[idx], 1, folds=folds, seed=split_seed)
        except InputError:  # fewer distinct stories than folds: nothing to split
            unsplit += 1
            continue
        sub = {m: np.asarray(s)[:, idx] for m, s in score_sets.items()}
        for ti, t in enumerate(tasks):
            y = np.asarray(masks[t])[idx]
            try:
                per = {m: probe.evaluate_task(s, y, train, test) for m, s in sub.items()}
            except InputError:  # one class only on a side of this resample's split: skipped for this task
                continue
            for m, r in per.items():
                for metric in METRICS:
                    got[f"{m}_{metric}"][b, ti] = r[metric]
    return got, unsplit
