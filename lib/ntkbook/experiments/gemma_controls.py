"""Paper B, Gemma: the floor and the ceiling of the eNTK-vs-PCA comparison on the same contexts and splits.

:mod:`ntkbook.experiments.gemma_probe` chooses, per task, the best of 25 eNTK modes or of 25
principal components on the training side of a split by story and scores it on the test side.  It
says how the two compare, not how good either is.  This experiment adds two controls on **the same
contexts, tasks and splits** (:func:`ntkbook.gemma.probe.tasks_and_splits` with the
same fields), from forward passes only:

- **random directions** (the floor): ``k`` random orthonormal directions of the residual that PCA
  reads (the output of block ``L`` at the last position, centred), put through the very selection
  the eNTK modes and the principal components go through (:func:`ntkbook.gemma.probe.evaluate_task`),
  for ``random_draws`` independent draws.  What choosing the best of ``k`` directions gives when
  the directions know nothing of the data;
- **a supervised linear probe** (the ceiling): scikit-learn's ``LogisticRegression`` on the same
  residual (standardised on the training side), its inverse regularisation ``C`` chosen among
  ``probe_cs`` by AP in ``inner_folds`` folds of the training side's stories, refitted on the whole
  training side and scored on the test side.  What any single direction of this residual could
  reach at most (a probe is one direction, chosen with the labels).

The residual is stored (``block_output``, (N, d) float32): its principal components are those of
the ``gemma_probe`` entry at the same layer and data (the chapter checks it), and other controls
can be read from it without a model.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook import validate as v
from ntkbook.errors import ConfigError
from ntkbook.store import PointStore, Result

NAME = "gemma_controls"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_load": "a wall time", "t_residual": "a wall time",
                                  "t_random": "a wall time", "t_probe": "a wall time"}}

#: the task families, as in gemma_probe
FAMILIES = ("pos", "morph")


@dataclasses.dataclass(frozen=True)
class Config:
    """Random directions and a supervised linear probe on the block output of layer ``layer``, on
    the contexts, tasks and splits by story of the ``gemma_probe`` entry with the same data fields.

    Presets: ``paper()`` the paper data set's 1024 contexts at layer 16, 25 directions per draw (the
    eNTK's and PCA's budget) in 20 draws, 20 splits; ``smoke()`` 4 contexts per class from the smoke
    data set, 3 draws, 5 splits, the smoke preset's looser task filters."""

    n_per_class: int = 128                 # as gemma_probe: the first n_per_class contexts of each class,
    data_scale: str = "paper"              # of the gemma_pos_windows result at this scale
    data_n_per_class: int = 128            # and n_per_class
    layer: int = 16                        # the block whose output (last position) is read
    k: int = 25                            # random directions per draw (the eNTK's and PCA's budget)
    random_draws: int = 20                 # independent draws of k directions
    random_seed: int = 0                   # NumPy seed of the first draw (draw i: random_seed + i)
    probe_cs: tuple[float, ...] = (0.001, 0.01, 0.1, 1.0)  # the probe's candidate inverse regularisations
    inner_folds: int = 2                   # folds of the training side's stories that choose C
    folds: int = 2                         # as gemma_probe: the splits by story
    split_seed: int = 0                   # as gemma_probe: NumPy seed of the splits by story
    n_splits: int = 20                    # as gemma_probe: splits by story the controls are read over
    min_support: int = 30                  # as gemma_probe: the morphological tasks' filter
    min_words: int = 12                   # as gemma_probe: distinct words a morphological task needs
    max_top_share: float = 0.5            # as gemma_probe: largest share of one word in a task's positives
    batch: int = 16                        # contexts per forward call

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4, data_scale="smoke", data_n_per_class=4, k=6, random_draws=3, n_splits=5,
                   min_support=4, min_words=2, max_top_share=0.75, batch=8)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.positive_int(NAME, "data_n_per_class", self.data_n_per_class)
        v.int_in(NAME, "n_per_class", self.n_per_class, 1, self.data_n_per_class, "contexts the data set holds")
        v.one_of(NAME, "data_scale", self.data_scale, ("smoke", "paper"))
        v.int_at_least(NAME, "layer", self.layer, 0, "a layer index")
        v.positive_int(NAME, "k", self.k)
        v.positive_int(NAME, "random_draws", self.random_draws)
        v.int_at_least(NAME, "random_seed", self.random_seed, 0, "a NumPy seed")
        v.require(NAME, "probe_cs", self.probe_cs, bool(self.probe_cs) and all(
            isinstance(c, (int, float)) and 0 < c < float("inf") for c in self.probe_cs),
            "a non-empty tuple of positive finite numbers", "candidate inverse regularisations")
        v.unique(NAME, "probe_cs", self.probe_cs)
        v.int_at_least(NAME, "inner_folds", self.inner_folds, 2, "choosing C needs two folds")
        v.int_at_least(NAME, "folds", self.folds, 2, "a split needs two sides")
        v.int_at_least(NAME, "split_seed", self.split_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "n_splits", self.n_splits)
        v.positive_int(NAME, "min_support", self.min_support)
        v.positive_int(NAME, "min_words", self.min_words)
        v.fraction(NAME, "max_top_share", self.max_top_share, high_closed=True)
        v.positive_int(NAME, "batch", self.batch)


def random_directions(X: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Scores ``(k, N)`` of the rows of ``X`` (N, D), centred, on ``k`` orthonormal directions drawn
    uniformly (QR of a Gaussian D x k matrix, ``default_rng(seed)``)."""
    X = np.asarray(X, np.float64)
    if k > X.shape[1]:
        raise ConfigError(f"{NAME}.k: {k} random directions need a residual of width >= k, got {X.shape[1]}")
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((X.shape[1], k)))
    return ((X - X.mean(0)) @ Q).T


def random_rows(X: np.ndarray, tasks: dict, splits: list, k: int, draws: int, seed: int) -> list[dict]:
    """Per task: test AP and AUROC of the best of ``k`` random directions (chosen on the training side
    as :func:`ntkbook.gemma.probe.evaluate_task` chooses), ``ap``/``auroc`` (draws x splits) lists."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    scores = [random_directions(X, k, seed + i) for i in range(draws)]
    rows = []
    for task, y in tasks.items():
        ap = [[0.0] * len(splits) for _ in range(draws)]
        auroc = [[0.0] * len(splits) for _ in range(draws)]
        for i, sc in enumerate(scores):
            for j, (train, test) in enumerate(splits):
                r = probe.evaluate_task(sc, y, train, test)
                ap[i][j], auroc[i][j] = r["ap"], r["auroc"]
        rows.append({"task": task, "support": int(np.sum(y)), "ap": ap, "auroc": auroc})
    return rows


def probe_split(X: np.ndarray, y: np.ndarray, groups: np.ndarray, train: np.ndarray, test: np.ndarray,
                cs, inner_folds: int) -> dict:
    """One split of the supervised probe: ``C`` chosen among ``cs`` by mean AP over ``inner_folds``
    folds of the training side's stories (``StratifiedGroupKFold``, seed 0; the first C wins a tie),
    then a logistic regression on the whole training side (features standardised with its mean and
    deviation), scored on the test side: ``ap``, ``auroc``, ``C``."""
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415
    from sklearn.metrics import roc_auc_score  # noqa: PLC0415
    from sklearn.model_selection import StratifiedGroupKFold  # noqa: PLC0415

    from ntkbook.gemma import probe  # noqa: PLC0415

    def fit_score(tr, te, C):
        mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-12
        model = LogisticRegression(C=C, max_iter=2000)
        model.fit((X[tr] - mu) / sd, y[tr])
        return model.decision_function((X[te] - mu) / sd)

    y = np.asarray(y, bool)
    inner = list(StratifiedGroupKFold(inner_folds, shuffle=True, random_state=0).split(
        np.zeros(len(train)), y[train], groups[train]))
    best = (-1.0, cs[0])
    for C in cs:
        aps = []
        for itr, ite in inner:
            tr, te = train[itr], train[ite]
            if y[tr].all() or not y[tr].any() or not y[te].any():
                continue
            aps.append(probe.average_precisions(y[te], fit_score(tr, te, C)[None])[0])
        if aps and np.mean(aps) > best[0]:
            best = (float(np.mean(aps)), C)
    s = fit_score(train, test, best[1])
    return {"ap": float(probe.average_precisions(y[test], s[None])[0]),
            "auroc": float(roc_auc_score(y[test], s)), "C": float(best[1])}


def probe_rows(X: np.ndarray, tasks: dict, splits: list, groups: np.ndarray, cs, inner_folds: int) -> list[dict]:
    """Per task: the supervised probe's test ``ap``, ``auroc`` and chosen ``C`` on each split
    (:func:`probe_split`)."""
    X = np.asarray(X, np.float64)
    rows = []
    for task, y in tasks.items():
        per = [probe_split(X, y, groups, train, test, cs, inner_folds) for train, test in splits]
        rows.append({"task": task, "support": int(np.sum(y)), **{key: [p[key] for p in per]
                                                               for key in ("ap", "auroc", "C")}})
    return rows


def run(config: Config, points: PointStore | None = None) -> Result:
    """The block output of layer ``layer`` at the last position for the contexts (checkpointed),
    then both controls on every task and split."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import modes  # noqa: PLC0415
    from ntkbook.gemma import probe  # noqa: PLC0415
    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415
    from ntkbook.gemma import weights as gemma_weights  # noqa: PLC0415
    from ntkbook.gemma.model import GemmaConfig  # noqa: PLC0415

    points = points or PointStore(None)
    n_layers = GemmaConfig().n_layers
    if not config.layer < n_layers:
        raise ConfigError(f"{NAME}.layer: layer {config.layer} out of range; Gemma-3-270M has layers "
                          f"0..{n_layers - 1}")
    data = experiments.load_or_run("gemma_pos_windows", config.data_scale, n_per_class=config.data_n_per_class)
    sel = probe.subset(np.asarray(data["label"]), config.n_per_class)
    contexts = np.asarray(data["contexts"])[sel]
    labels, story = (np.asarray(data[key])[sel] for key in ("label", "story"))
    pick = lambda key: [data[key][i] for i in sel]  # noqa: E731
    # the same fields as gemma_probe's Config (n_splits, folds, split_seed and the morphological filter)
    ev = probe.tasks_and_splits(labels, story, pick("morph"), pick("model_word"), list(data["classes"]), config)

    t0 = time.perf_counter()
    cfg, params, _ = gemma_weights.load()
    t_load = time.perf_counter() - t0

    def residual():
        t = time.perf_counter()
        res = gemma_operator.compute_residuals(params, cfg, contexts, config.layer, batch=config.batch)
        out = np.concatenate([np.asarray(modes.layer_output_fn(cfg, config.layer)(params["layers"], res[s:s + 32]))
                              for s in range(0, len(res), 32)])
        return {"block_output": out.astype(np.float32)}, {"t_residual": time.perf_counter() - t}

    arrays, scalars = points.cached(f"L={config.layer}", residual)
    X = np.asarray(arrays["block_output"], np.float64)
    out = {"t_load": t_load, "t_residual": scalars["t_residual"]}
    t = time.perf_counter()
    out["random"] = {fam: random_rows(X, ev[fam], ev["splits"], config.k, config.random_draws, config.random_seed)
                     for fam in FAMILIES}
    out["t_random"] = time.perf_counter() - t
    t = time.perf_counter()
    out["probe"] = {fam: probe_rows(X, ev[fam], ev["splits"], story, config.probe_cs, config.inner_folds)
                    for fam in FAMILIES}
    out["t_probe"] = time.perf_counter() - t
    return Result(
        name=NAME, config=dataclasses.asdict(config),
        arrays={"block_output": arrays["block_output"],
                "split_test": np.array([np.isin(np.arange(len(sel)), te) for _, te in ev["splits"]])},
        scalars={**out, "N": len(sel), "classes": list(data["classes"]), "labels": labels.tolist(),
                 "story": story.tolist(), "tasks": {fam: sorted(ev[fam]) for fam in FAMILIES},
                 "data_config": data.config, "data_commit": data.provenance.get("git_commit")},
    )
