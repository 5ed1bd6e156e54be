r"""Does a single direction separate a class?  One-vs-rest evaluation of per-example scores.

Paper B's test of whether eNTK eigenvectors (or principal components) carry a grammatical
feature: each candidate direction ``i`` gives a score per example; for a binary task (one part of
speech against the rest, or one morphological "Feature=Value") the direction and its sign are
chosen on a training half by average precision, and the chosen score is evaluated on the test half
by average precision (AP), area under the ROC curve (AUROC) and precision at the number of test
positives.  Metrics from scikit-learn.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from ntkbook.errors import InputError

__all__ = ["stratified_split", "pca_scores", "evaluate_task", "evaluate_tasks", "morph_tasks",
           "precision_at_k"]


def stratified_split(labels: Sequence, train_fraction: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test): within each label value a ``random.Random(seed)`` shuffle, the first
    ``round(train_fraction * n)`` to train."""
    if not 0 < train_fraction < 1:
        raise InputError(f"train_fraction must be in (0, 1), got {train_fraction}")
    labels = list(labels)
    rng = random.Random(seed)
    train, test = [], []
    for c in sorted(set(labels), key=str):
        idx = [i for i, y in enumerate(labels) if y == c]
        rng.shuffle(idx)
        k = int(round(train_fraction * len(idx)))
        train += idx[:k]
        test += idx[k:]
    return np.array(sorted(train)), np.array(sorted(test))


def pca_scores(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores ``(k, N)`` of the rows of ``X`` (N, D) on its top-``k`` principal components (centred),
    and the fraction of variance each explains."""
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise InputError(f"X must be (N, D), got {X.shape}")
    Xc = X - X.mean(0)
    U, s, _ = np.linalg.svd(Xc, full_matrices=False)
    k = min(k, len(s))
    return (U[:, :k] * s[:k]).T, s[:k] ** 2 / np.sum(s ** 2)


def precision_at_k(y: np.ndarray, score: np.ndarray, k: int) -> float:
    """Fraction of positives among the ``k`` highest scores."""
    order = np.argsort(-score, kind="stable")[:k]
    return float(np.mean(y[order])) if k > 0 else float("nan")


def evaluate_task(scores: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict:
    """Best direction and sign by training AP; test AP, AUROC and precision at #positives.

    ``scores``: (k, N); ``y``: (N,) bool.  Needs positives and negatives in both halves.
    """
    from sklearn.metrics import average_precision_score, roc_auc_score  # noqa: PLC0415

    y = np.asarray(y, bool)
    ytr, yte = y[train], y[test]
    for name, part in (("training", ytr), ("test", yte)):
        if part.all() or not part.any():
            raise InputError(f"the {name} half has only one class ({int(part.sum())} positives of "
                             f"{len(part)}): the task is too small to evaluate")
    best = (-1.0, 0, 1)
    for i, s in enumerate(np.asarray(scores)):
        for sign in (1, -1):
            ap = average_precision_score(ytr, sign * s[train])
            if ap > best[0]:
                best = (ap, i, sign)
    ap_tr, i, sign = best
    s = sign * np.asarray(scores)[i, test]
    return {"mode": int(i), "sign": int(sign), "train_ap": float(ap_tr),
            "ap": float(average_precision_score(yte, s)), "auroc": float(roc_auc_score(yte, s)),
            "precision": precision_at_k(yte, s, int(yte.sum())), "base_rate": float(yte.mean()),
            "n_test_pos": int(yte.sum())}


def evaluate_tasks(score_sets: Mapping[str, np.ndarray], tasks: Mapping[str, np.ndarray],
                   train: np.ndarray, test: np.ndarray) -> list[dict]:
    """One row per task with ``<method>_<metric>`` entries for each score set (e.g. entk, pca)."""
    rows = []
    for task, y in tasks.items():
        row = {"task": task, "support": int(np.sum(y))}
        for method, sc in score_sets.items():
            for key, val in evaluate_task(sc, y, train, test).items():
                row[f"{method}_{key}"] = val
        rows.append(row)
    return rows


def morph_tasks(morph: Sequence[str], words: Sequence[str], *, min_support: int = 30, min_words: int = 12,
                max_top_share: float = 0.5) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Binary "Feature=Value" tasks from morphology strings ("Number=Sing|Person=3").

    A task is kept when it has at least ``min_support`` positives, spread over at least
    ``min_words`` distinct (lower-cased) words, the most frequent of which makes at most
    ``max_top_share`` of the positives (so that a task is not one word in disguise).  Returns the
    kept tasks (name -> bool mask) and a row per candidate feature with the reason it was dropped.
    """
    feats: dict[str, list[int]] = {}
    for i, m in enumerate(morph):
        for fv in (m or "").split("|"):
            if "=" in fv:
                feats.setdefault(fv, []).append(i)
    kept, report = {}, []
    for fv in sorted(feats):
        idx = feats[fv]
        counts = Counter(words[i].lower() for i in idx)
        top_word, top_n = counts.most_common(1)[0]
        reason = ""
        if len(idx) < min_support:
            reason = f"support {len(idx)} < {min_support}"
        elif len(counts) < min_words:
            reason = f"{len(counts)} distinct words < {min_words}"
        elif top_n / len(idx) > max_top_share:
            reason = f"'{top_word}' is {top_n / len(idx):.0%} of it"
        report.append({"feature": fv, "support": len(idx), "words": len(counts), "top_word": top_word,
                       "top_share": top_n / len(idx), "kept": not reason, "reason": reason})
        if not reason:
            mask = np.zeros(len(morph), bool)
            mask[idx] = True
            kept[fv] = mask
    return kept, report
