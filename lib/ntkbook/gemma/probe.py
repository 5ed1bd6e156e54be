r"""Does a single direction separate a class?  One-vs-rest evaluation of per-example scores.

Paper B's test of whether eNTK eigenvectors (or principal components) carry a grammatical
feature: each candidate direction ``i`` gives a score per example; for a binary task (one part of
speech against the rest, or one morphological "Feature=Value") the direction and its sign are
chosen on a training half by average precision, and the chosen score is evaluated on the test half
by average precision (AP), area under the ROC curve (AUROC) and precision at the number of test
positives.  Metrics from scikit-learn.

Contexts drawn from the same story share its words, so the halves are also split *by story*
(:func:`story_splits`: every context of a story on one side), and a verdict is read over many such
splits (:func:`split_robustness`): a method wins a task only where it wins in at least
:data:`ROBUST_WIN_SHARE` of the splits.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from ntkbook.errors import InputError

__all__ = ["subset", "tasks_and_splits",
           "stratified_split", "story_splits", "pca_scores", "evaluate_task", "evaluate_tasks",
           "split_robustness", "per_split_rows", "ROBUST_WIN_SHARE", "morph_tasks", "admitted_features",
           "precision_at_k"]

#: a method wins a task only when it is ahead in at least this share of the splits by story: one
#: split decides little (per-class AUROC moves by up to ~0.06 between splits at N = 1024, more than
#: many of the margins); 80 % keeps a win that holds in most splits, while a task on which the
#: two are even (a 50 % chance per split) would pass it with probability below 1 % over 20
#: independent splits (splits of one data set are not independent, so this is a guide, not a test)
ROBUST_WIN_SHARE = 0.8


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


def story_splits(labels: Sequence, stories: Sequence, n_splits: int, *, folds: int = 2,
                 seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` splits (train, test) of the contexts *by story*: every context of a story on one
    side, the classes balanced between the sides as far as whole stories allow.

    Split ``i`` is the first fold of scikit-learn's ``StratifiedGroupKFold(folds, shuffle=True,
    random_state=seed + i)`` as the test side (``folds = 2``: half the stories), the rest as
    training side.  ``StratifiedGroupKFold`` rather than ``GroupShuffleSplit``: both keep stories
    whole, but the latter ignores the classes, so with a few contexts per story a class could fall
    mostly on one side.  ``labels``, ``stories``: (N,); returns sorted index arrays."""
    from sklearn.model_selection import StratifiedGroupKFold  # noqa: PLC0415

    labels, stories = np.asarray(labels), np.asarray(stories)
    if labels.shape != stories.shape or labels.ndim != 1:
        raise InputError(f"labels and stories must be (N,) arrays of one length, got {labels.shape} and "
                         f"{stories.shape}")
    if folds < 2 or n_splits < 1:
        raise InputError(f"need folds >= 2 and n_splits >= 1, got folds = {folds}, n_splits = {n_splits}")
    if len(np.unique(stories)) < folds:
        raise InputError(f"{len(np.unique(stories))} stories cannot be split into {folds} folds")
    out = []
    for i in range(n_splits):
        cv = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed + i)
        train, test = next(iter(cv.split(np.zeros(len(labels)), labels, stories)))
        out.append((np.sort(train), np.sort(test)))
    return out


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


def average_precisions(y: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Average precision of each row of ``scores`` (m, n) against the labels ``y`` (n,) bool: (m,).

    The same arithmetic as scikit-learn's ``average_precision_score`` (``y`` against one row at a
    time), operation for operation, so bit for bit (``tests/test_gemma_probe.py`` checks it against
    scikit-learn, ties and float32 included): rows sorted by descending score; at the last index
    ``t`` of each run of equal scores, ``tp`` = positives so far and ``fp = 1 + t - tp``; precision
    ``tp / (tp + fp)`` and recall ``tp / P``, reversed with the end point (recall 0, precision 1);
    AP = ``-sum(diff(recall) * precision[:-1])``, clipped at 0.  The sort and the cumulative counts
    run on all rows at once, and nothing is validated per row, which was most of scikit-learn's
    cost per row (the Gemma probe scores ~50 rows per task and split)."""
    y, scores = np.asarray(y, bool), np.asarray(scores)
    if scores.ndim != 2 or scores.shape[1] != y.shape[0]:
        raise InputError(f"scores must be (m, {y.shape[0]}) for {y.shape[0]} labels, got {scores.shape}")
    if not y.any():
        raise InputError("the labels hold no positive: average precision is undefined (it needs at least one)")
    if not np.all(np.isfinite(scores)):
        raise InputError("scores hold NaN or infinity: average precision needs finite scores")
    n = y.shape[0]
    order = np.argsort(-scores, axis=1, kind="stable")  # descending; the order within ties leaves AP unchanged
    ranked = np.take_along_axis(scores, order, axis=1)
    positives = np.cumsum(y[order].astype(np.float64), axis=1)  # counts, exact in float64
    change = ranked[:, 1:] != ranked[:, :-1]
    out = np.empty(len(scores))
    for r in range(len(scores)):
        ends = np.concatenate([np.nonzero(change[r])[0], [n - 1]])
        tps = positives[r, ends]
        fps = 1 + ends.astype(np.float64) - tps
        ps = tps + fps
        precision = np.where(ps != 0, np.divide(tps, ps), 0.0)
        recall = tps / tps[-1]
        precision = np.concatenate([np.flip(precision), [1.0]])
        recall = np.concatenate([np.flip(recall), [0.0]])
        out[r] = float(max(0.0, -np.sum(np.diff(recall) * precision[:-1])))
    return out


def best_direction(scores: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
    """``(ap, i, sign)``: the row ``i`` of ``scores`` (k, n) and the sign (1 or -1) whose
    ``sign * scores[i]`` has the highest average precision against ``y`` (n,) bool; the first in
    the order (row 0, +1), (row 0, -1), (row 1, +1), ... wins a tie."""
    scores = np.asarray(scores)
    both = np.empty((2 * len(scores), scores.shape[1]), dtype=scores.dtype)
    both[0::2], both[1::2] = scores, -scores
    aps = average_precisions(y, both)
    best = (-1.0, 0, 1)
    for j, ap in enumerate(aps):
        if ap > best[0]:
            best = (ap, j // 2, 1 if j % 2 == 0 else -1)
    return best


def evaluate_task(scores: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict:
    """Best direction and sign by training AP (:func:`best_direction`); test AP, AUROC and
    precision at #positives.

    ``scores``: (k, N); ``y``: (N,) bool.  Needs positives and negatives in both halves.
    """
    from sklearn.metrics import roc_auc_score  # noqa: PLC0415

    y = np.asarray(y, bool)
    ytr, yte = y[train], y[test]
    for name, part in (("training", ytr), ("test", yte)):
        if part.all() or not part.any():
            raise InputError(f"the {name} half has only one class ({int(part.sum())} positives of "
                             f"{len(part)}): the task is too small to evaluate")
    ap_tr, i, sign = best_direction(np.asarray(scores)[:, train], ytr)
    s = sign * np.asarray(scores)[i, test]
    return {"mode": int(i), "sign": int(sign), "train_ap": float(ap_tr),
            "ap": float(average_precisions(yte, s[None])[0]), "auroc": float(roc_auc_score(yte, s)),
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


def split_robustness(score_sets: Mapping[str, np.ndarray], tasks: Mapping[str, np.ndarray],
                     splits: Sequence[tuple[np.ndarray, np.ndarray]], *,
                     methods: tuple[str, str] = ("entk", "pca")) -> list[dict]:
    """How a comparison of two methods moves over splits, from stored per-example scores.

    For each task (name -> (N,) bool) and split (train, test), :func:`evaluate_task` chooses each
    method's direction and sign on the training side and scores the test side; per task the row
    holds, for the first method minus the second (``a`` - ``b``), the per-split differences of test
    AP and AUROC (``ap_diff``, ``auroc_diff``: lists, one per split), their mean and standard
    deviation, the share of splits where ``a`` is strictly ahead (``ap_win_share``,
    ``auroc_win_share``), whether that share reaches :data:`ROBUST_WIN_SHARE` (``robust_win_ap``,
    ``robust_win_auroc``), and each method's mean test AP and AUROC.  ``score_sets``: method ->
    (k, N).  Every task needs positives and negatives on both sides of every split."""
    a, b = methods
    rows = []
    for task, y in tasks.items():
        per = {f"{m}_{metric}": [] for m in methods for metric in ("ap", "auroc")}
        for train, test in splits:
            for m in methods:
                r = evaluate_task(score_sets[m], y, train, test)
                per[f"{m}_ap"].append(r["ap"])
                per[f"{m}_auroc"].append(r["auroc"])
        row = {"task": task, "support": int(np.sum(y)), "n_splits": len(splits)}
        for metric in ("ap", "auroc"):
            diff = np.subtract(per[f"{a}_{metric}"], per[f"{b}_{metric}"])
            share = float(np.mean(diff > 0))
            row.update({f"{metric}_diff": diff.tolist(), f"{metric}_diff_mean": float(diff.mean()),
                        f"{metric}_diff_std": float(diff.std(ddof=1)) if len(diff) > 1 else 0.0,
                        f"{metric}_win_share": share, f"robust_win_{metric}": share >= ROBUST_WIN_SHARE})
            for m in methods:
                row[f"{m}_{metric}_mean"] = float(np.mean(per[f"{m}_{metric}"]))
        rows.append(row)
    return rows


def per_split_rows(scores: np.ndarray, tasks: Mapping[str, np.ndarray],
                   splits: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[dict]:
    """One method's test numbers on every split, per task: ``task``, ``support`` and the lists (one
    entry per split) ``ap``, ``auroc`` and the chosen ``mode`` (:func:`evaluate_task`: the best row
    of ``scores`` (k, N) and its sign chosen on the training side).  ``tasks``: name -> (N,) bool."""
    rows = []
    for task, y in tasks.items():
        per = [evaluate_task(scores, y, train, test) for train, test in splits]
        rows.append({"task": task, "support": int(np.sum(y)),
                     **{key: [p[key] for p in per] for key in ("ap", "auroc", "mode")}})
    return rows


def morph_tasks(morph: Sequence[str], words: Sequence[str], *, case_sensitive: bool, min_support: int = 30,
                min_words: int = 12, max_top_share: float = 0.5) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Binary "Feature=Value" tasks from morphology strings ("Number=Sing|Person=3").

    A task is kept when it has at least ``min_support`` positives, spread over at least
    ``min_words`` distinct words, the most frequent of which makes at most ``max_top_share`` of the
    positives (so that a task is not one word in disguise).  Words are told apart as written with
    ``case_sensitive`` (the author's filter: "He" and "he" are two words), else lower-cased first
    (the filter of this book's first data set; on that data set it drops ``Person=3``, whose
    101 contexts hold 10 distinct words lower-cased but 14 as written, against the 12 needed).  Returns the kept tasks (name -> bool mask) and a row per candidate
    feature with the reason it was dropped.
    """
    feats: dict[str, list[int]] = {}
    for i, m in enumerate(morph):
        for fv in (m or "").split("|"):
            if "=" in fv:
                feats.setdefault(fv, []).append(i)
    kept, report = {}, []
    for fv in sorted(feats):
        idx = feats[fv]
        counts = Counter(words[i] if case_sensitive else words[i].lower() for i in idx)
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


def admitted_features(morph: Sequence[str], words: Sequence[str], *, case_sensitive: bool, min_support: int = 30,
                      min_words: int = 12, max_top_share: float = 0.5) -> list[dict]:
    """The features :func:`morph_tasks` admits, one row each (sorted by feature): ``feature``,
    ``support`` (positive contexts), ``words`` (distinct words among them, as the filter counts
    them), ``top_word`` and ``top_share``."""
    _, report = morph_tasks(morph, words, case_sensitive=case_sensitive, min_support=min_support,
                            min_words=min_words, max_top_share=max_top_share)
    return [{k: r[k] for k in ("feature", "support", "words", "top_word", "top_share")} for r in report if r["kept"]]


def subset(labels: np.ndarray, n_per_class: int) -> np.ndarray:
    """Indices of the first ``n_per_class`` contexts of each class (the data set's order)."""
    out = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if len(idx) < n_per_class:
            raise InputError(f"the data set has {len(idx)} contexts of class {c}, fewer than n_per_class = "
                             f"{n_per_class}")
        out.extend(idx[:n_per_class])
    return np.array(out)


def tasks_and_splits(labels: np.ndarray, stories: np.ndarray, morph: list, words: list, classes: list,
                     config) -> dict:
    """The tasks and the splits by story of a data set (pure: no model): ``labels`` (N,) indices into
    ``classes``, ``stories`` (N,) story of each context, ``morph`` and ``words`` the morphology and
    the word of each context; ``config`` has the fields of the splits (``n_splits``, ``folds``,
    ``split_seed``) and of the morphological filter (``min_support``, ``min_words``,
    ``max_top_share``), e.g. :class:`ntkbook.experiments.gemma_probe.Config`.

    Returns ``pos`` (class name -> (N,) bool) and ``morph`` (feature -> (N,) bool; a task is kept
    only when both sides of every split hold positives and negatives, the others are listed in
    ``dropped`` with the reason), ``morph_report`` (every candidate feature, :func:`morph_tasks`),
    ``morph_admitted`` (the features the author's filter admits, with support and word counts) and
    ``splits`` (``n_splits`` (train, test) pairs; the first is the one whose per-task rows are
    reported in full)."""
    splits = story_splits(labels, stories, config.n_splits, folds=config.folds, seed=config.split_seed)
    pos = {classes[c]: labels == c for c in np.unique(labels)}
    filt = dict(case_sensitive=True, min_support=config.min_support, min_words=config.min_words,
                max_top_share=config.max_top_share)
    by_feature, morph_report = morph_tasks(morph, words, **filt)
    dropped = []

    def splittable(name, y):
        for i, (tr, te) in enumerate(splits):
            for side, idx in (("training", tr), ("test", te)):
                if y[idx].all() or not y[idx].any():
                    dropped.append({"task": name, "reason": f"the {side} side of split {i} has one class only"})
                    return False
        return True

    return {"pos": {c: y for c, y in pos.items() if splittable(c, y)},
            "morph": {k: y for k, y in by_feature.items() if splittable(k, y)},
            "morph_report": morph_report, "morph_admitted": admitted_features(morph, words, **filt),
            "splits": splits, "dropped": dropped}
