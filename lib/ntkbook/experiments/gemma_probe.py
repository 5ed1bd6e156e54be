"""Paper B, Gemma: eNTK modes vs PCA on contexts in disjoint windows, split by story, over many splits.

The measurement of the retired ``gemma_features`` experiment (its results archived in
``results/archive``; per point, layer ``L`` and parameter
set: the top ``k`` modes of the reduced operator ``S^{1/2} K_r S^{1/2}`` by Lanczos and the top
``pca_k`` principal components of the output of block ``L``; :func:`ntkbook.gemma.modes.layer_point`),
with three changes that a careful reader of the first version asked for:

- the contexts come from :mod:`ntkbook.experiments.gemma_pos_windows`: no two windows share a token,
  and each context carries its story;
- the halves that choose a mode (and its sign) and test it are split **by story**
  (:func:`ntkbook.gemma.probe.story_splits`, ``StratifiedGroupKFold``): no test context shares a
  token with a training context (measured: ``split_max_shared_tokens``, 0), and the verdicts are
  read over ``n_splits`` such splits (:func:`ntkbook.gemma.probe.split_robustness`): per task, the
  eNTK - PCA difference in test AP and AUROC with its spread, and a win counts only where the eNTK is
  ahead in at least :data:`ntkbook.gemma.probe.ROBUST_WIN_SHARE` of the splits.  Verdicts count
  wins by AP; AUROC is reported beside it;
- the morphological tasks pass the author's filter (distinct words counted case-sensitively,
  :func:`ntkbook.gemma.probe.morph_tasks`); the admitted features are listed (``morph_admitted``).

The per-split evaluation runs on the stored per-context scores, so it costs seconds.  A layer sweep
is one stored entry per layer (:func:`sweep_overrides`; ``tools/gemma_sweep.py`` runs it), and each
point is checkpointed.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook.errors import ConfigError
from ntkbook import validate as v
from ntkbook.progress import Progress, format_seconds
from ntkbook.store import PointStore, Result

NAME = "gemma_probe"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_load": "a wall time", "t_gram": "a wall time",
                                  "points*.t_*": "a wall time"}}

#: the arrays stored for each point, under :func:`point_key` ``"L<layer>_<param_set>/<name>"``
POINT_ARRAYS = ("eigenvalues", "ritz_residuals", "entk_scores", "pca_scores", "pca_variance")
#: the per-task columns of the first split averaged over a family (``probe.evaluate_tasks`` rows)
MACRO_COLUMNS = ("entk_ap", "entk_auroc", "entk_precision", "pca_ap", "pca_auroc", "pca_precision")
#: the task families evaluated at each point
FAMILIES = ("pos", "morph")
#: the layers of the sweep (all of Gemma-3-270M's) and where it also takes the whole layer's kernel
SWEEP_LAYERS = tuple(range(18))
SWEEP_WHOLE_LAYER_AT = (17,)


@dataclasses.dataclass(frozen=True)
class Config:
    """eNTK modes against PCA as detectors of parts of speech and morphology in Gemma-3-270M, on
    contexts in disjoint windows, evaluated over splits by story.

    Presets: ``paper()`` all 1024 contexts of the paper-scale data set at layer 16 (the author's
    choice), the top 25 modes from 50 Lanczos products, 20 splits; ``smoke()`` a data set of 4
    contexts per class built on the spot, 6 modes from 10 products, 5 splits, looser task filters.
    The layer sweep: :func:`sweep_overrides`.
    """

    n_per_class: int = 128                # the first n_per_class contexts of each class are used
    data_scale: str = "paper"             # scale of the gemma_pos_windows result they come from,
    data_n_per_class: int = 128           # and its n_per_class
    layers: tuple[int, ...] = (16,)       # layers with the author's parameter choice (down_proj)
    whole_layer_at: tuple[int, ...] = ()  # layers where every parameter of the layer is used too
    k: int = 25                           # eNTK modes (top eigenvectors) computed per point
    lanczos_steps: int = 50               # Lanczos products (Krylov depth) per point
    seed: int = 0                         # seed of Lanczos' starting vector
    chunk: int = 16                       # contexts per VJP/JVP call of the operator
    pca_k: int = 25                       # principal components of the baseline
    folds: int = 2                        # the test side of a split is one of this many folds of the stories
    split_seed: int = 0                   # seed of the first split by story (split i: split_seed + i)
    n_splits: int = 20                    # splits by story the verdicts are read over
    min_support: int = 30                 # a morphological task needs this many positive contexts,
    min_words: int = 12                   # this many distinct words (as written) among them,
    max_top_share: float = 0.5            # and no word holding more than this share of them
    identity_contexts: int = 2            # 0: skip the spectrum-identity check
    identity_layer: int = 16              # layer of the spectrum-identity check

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4, data_scale="smoke", data_n_per_class=4, k=6, lanczos_steps=10, pca_k=6, chunk=8,
                   n_splits=5, min_support=4, min_words=2, max_top_share=0.75)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.positive_int(NAME, "data_n_per_class", self.data_n_per_class)
        v.int_in(NAME, "n_per_class", self.n_per_class, 1, self.data_n_per_class, "contexts the data set holds")
        v.one_of(NAME, "data_scale", self.data_scale, ("smoke", "paper"))
        v.require(NAME, "layers", self.layers, bool(self.layers + self.whole_layer_at),
                  "non-empty (or whole_layer_at non-empty)", "at least one point")
        for field in ("layers", "whole_layer_at"):
            v.each(v.int_at_least, NAME, field, getattr(self, field), 0, "a layer index")
            v.unique(NAME, field, getattr(self, field))
        v.positive_int(NAME, "k", self.k)
        v.int_at_least(NAME, "lanczos_steps", self.lanczos_steps, self.k, "Lanczos needs k <= steps")
        v.int_at_least(NAME, "seed", self.seed, 0, "a JAX seed")
        v.positive_int(NAME, "chunk", self.chunk)
        v.positive_int(NAME, "pca_k", self.pca_k)
        v.int_at_least(NAME, "folds", self.folds, 2, "a split needs two sides")
        v.int_at_least(NAME, "split_seed", self.split_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "n_splits", self.n_splits)
        v.positive_int(NAME, "min_support", self.min_support)
        v.positive_int(NAME, "min_words", self.min_words)
        v.fraction(NAME, "max_top_share", self.max_top_share, high_closed=True)
        v.int_at_least(NAME, "identity_contexts", self.identity_contexts, 0)
        v.int_at_least(NAME, "identity_layer", self.identity_layer, 0, "a layer index")


def sweep_overrides(layer: int, n_per_class: int, whole_layer_at: tuple[int, ...] = SWEEP_WHOLE_LAYER_AT) -> dict:
    """The config overrides (of the paper preset) of the sweep's entry at ``layer``: the first
    ``n_per_class`` contexts per class of the paper data set, the down-projection (and the whole
    layer where ``layer`` is in ``whole_layer_at``), no spectrum-identity check (the main result
    holds it).  One stored entry per layer, so a sweep grows and resumes a layer at a time."""
    return dict(n_per_class=n_per_class, layers=(layer,), whole_layer_at=tuple(x for x in whole_layer_at if x == layer),
                identity_contexts=0)


def points_of(config: Config) -> list[tuple[int, str]]:
    """The (layer, parameter set) points of a config: every layer with ``down_proj``, then the
    ``whole_layer_at`` layers with ``layer``."""
    return [(L, "down_proj") for L in config.layers] + [(L, "layer") for L in config.whole_layer_at]


def estimate_seconds(config: Config) -> float:
    """Per Lanczos product about ``N (0.04 + 0.01 (17 - L))`` s for down_proj at layer ``L`` (the
    whole layer about twice that), fitted to the first data set's sweep at N = 256 on 2 busy CPU
    cores (5 s per product at layer 17, 18-26 s at 14-16, 38 s at 8 and 11), plus ~1 s per split
    for the evaluation and ~60 s for loading."""
    N = 8 * config.n_per_class
    total = 60.0 + config.n_splits * len(points_of(config))
    for L, ps in points_of(config):
        per = N * (0.04 + 0.01 * (17 - L)) * (2.0 if ps == "layer" else 1.0)
        total += (config.lanczos_steps + 2) * per
    return total


def evaluate_point(score_sets: dict, tasks: dict, splits: list, family: str) -> dict:
    """The rows of one family of tasks at one point (pure: from stored scores): the first split's
    per-task rows (``<family>``), the rows over all splits (``<family>_splits``,
    :func:`ntkbook.gemma.probe.split_robustness`) and the summary (:func:`summary`)."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    first = probe.evaluate_tasks(score_sets, tasks, *splits[0])
    over = probe.split_robustness(score_sets, tasks, splits)
    return {family: first, f"{family}_splits": over, **summary(first, over, family)}


def summary(first: list[dict], over: list[dict], family: str) -> dict:
    """A family's summary at one point: ``<family>_n`` tasks; the macro averages of the first split
    (``<family>_<column>`` for :data:`MACRO_COLUMNS`); on the first split, the tasks where the eNTK
    is ahead (``<family>_entk_wins_ap``/``_auroc``); over all splits, the mean macro difference
    (``<family>_ap_diff_mean``/``_auroc_diff_mean``) and the tasks where the eNTK is ahead in at
    least ``ROBUST_WIN_SHARE`` of them (``<family>_robust_wins_ap``/``_auroc``: the verdicts')."""
    out = {f"{family}_n": len(first)}
    if not first:
        return out
    for column in MACRO_COLUMNS:
        out[f"{family}_{column}"] = float(np.mean([r[column] for r in first]))
    for metric in ("ap", "auroc"):
        out[f"{family}_entk_wins_{metric}"] = int(sum(r[f"entk_{metric}"] > r[f"pca_{metric}"] for r in first))
        out[f"{family}_{metric}_diff_mean"] = float(np.mean([r[f"{metric}_diff_mean"] for r in over]))
        out[f"{family}_robust_wins_{metric}"] = int(sum(r[f"robust_win_{metric}"] for r in over))
    return out


def run(config: Config, points: PointStore | None = None) -> Result:
    """For each (layer, parameter set) point: the top ``k`` modes of the reduced eNTK operator by
    Lanczos and the top ``pca_k`` principal components of the block output
    (:func:`ntkbook.gemma.modes.layer_point`, checkpointed), both scored one-vs-rest on the parts
    of speech and the morphological tasks over ``n_splits`` splits by story; plus the
    spectrum-identity check."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import modes  # noqa: PLC0415
    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415
    from ntkbook.gemma import pos_data, probe  # noqa: PLC0415
    from ntkbook.gemma import weights as gemma_weights  # noqa: PLC0415
    from ntkbook.gemma.model import GemmaConfig  # noqa: PLC0415

    points = points or PointStore(None)
    n_layers = GemmaConfig().n_layers  # Gemma-3-270M; checked again against the loaded weights
    for L, _ps in points_of(config):
        if not 0 <= L < n_layers:
            raise ConfigError(f"{NAME}.layers: layer {L} out of range; Gemma-3-270M has layers "
                              f"0..{n_layers - 1}")
    data = experiments.load_or_run("gemma_pos_windows", config.data_scale, n_per_class=config.data_n_per_class)
    sel = probe.subset(np.asarray(data["label"]), config.n_per_class)
    contexts = np.asarray(data["contexts"])[sel]
    labels, story, token = (np.asarray(data[k])[sel] for k in ("label", "story", "token"))
    pick = lambda key: [data[key][i] for i in sel]  # noqa: E731
    N = len(contexts)
    classes = list(data["classes"])
    ev = probe.tasks_and_splits(labels, story, pick("morph"), pick("model_word"), classes, config)
    shared = max(pos_data.max_shared_tokens(story, token, data.config["context_len"], te, tr) for tr, te in ev["splits"])

    t0 = time.perf_counter()
    cfg, params, _ = gemma_weights.load()
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    Gh = gemma_weights.unembedding_gram_sqrt(params)
    t_gram = time.perf_counter() - t0

    def ident():
        res = gemma_operator.compute_residuals(params, cfg, contexts[:config.identity_contexts], config.identity_layer)
        t = time.perf_counter()
        out = modes.identity_check(params, cfg, res, config.identity_layer, gram_half=Gh)
        out["seconds"] = time.perf_counter() - t
        arrays = {k: out.pop(k) for k in ("ev_reduced", "ev_logit")}
        return arrays, out

    id_arrays, id_scalars = points.cached("identity", ident) if config.identity_contexts > 0 else ({}, {})

    out_arrays = {f"identity_{k}": a for k, a in id_arrays.items()}
    out_arrays["split_test"] = np.array([np.isin(np.arange(N), te) for _, te in ev["splits"]])
    point_rows = []
    bar = Progress(len(points_of(config)), desc=f"{NAME} N={N}", quiet_seconds=0)
    for L, ps in points_of(config):
        def compute(L=L, ps=ps):
            return modes.layer_point(params, cfg, contexts, L, ps, Gh, k=config.k,
                                     lanczos_steps=config.lanczos_steps, seed=config.seed, chunk=config.chunk,
                                     pca_k=config.pca_k)

        arrays, scalars = points.cached(f"L={L}-{ps}", compute)
        t = time.perf_counter()
        score_sets = {"entk": arrays["entk_scores"], "pca": arrays["pca_scores"]}
        row = {**scalars, "tag": point_tag(L, ps)}
        row.update(evaluate_point(score_sets, ev["pos"], ev["splits"], "pos"))
        row.update(evaluate_point(score_sets, ev["morph"], ev["splits"], "morph"))
        row["t_evaluation"] = time.perf_counter() - t
        point_rows.append(row)
        for key in POINT_ARRAYS:
            out_arrays[point_key(L, ps, key)] = arrays[key]
        bar.update(1)
        bar.set_postfix(layer=L, lanczos=format_seconds(scalars["t_lanczos"]))
    bar.close()
    stats = data["stats"]
    return Result(
        name=NAME, config=dataclasses.asdict(config), arrays=out_arrays,
        scalars={"points": point_rows, "identity": id_scalars, "morph_report": ev["morph_report"],
                 "morph_admitted": ev["morph_admitted"], "dropped_tasks": ev["dropped"],
                 "classes": classes, "morph_tasks": sorted(ev["morph"]), "N": N,
                 "stories": len(np.unique(story)), "split_max_shared_tokens": shared,
                 # few stories leave StratifiedGroupKFold few ways to balance the classes: splits repeat
                 "distinct_splits": len({te.tobytes() for _, te in ev["splits"]}),
                 "t_load": t_load, "t_gram": t_gram,
                 "data_stats": stats, "data_config": data.config,
                 "data_commit": data.provenance.get("git_commit"),
                 "labels": labels.tolist(), "story": story.tolist(), "token": token.tolist(),
                 "model_word": pick("model_word"), "true_word": pick("true_word"), "morph": pick("morph"),
                 "context_text": [t[-400:] for t in pick("context_text")], "continuation": pick("continuation")},
    )


def point_tag(layer: int, param_set: str) -> str:
    """The tag of a point in the result's keys and rows, ``"L<layer>_<param_set>"``."""
    return f"L{layer}_{param_set}"


def point_key(layer: int, param_set: str, name: str) -> str:
    """The result key of the array ``name`` (one of :data:`POINT_ARRAYS`) of a point."""
    if name not in POINT_ARRAYS:
        raise KeyError(f"no point array {name!r}; have {POINT_ARRAYS}")
    return f"{point_tag(layer, param_set)}/{name}"


def point(result: Result, layer: int = 16, param_set: str = "down_proj") -> dict:
    """The summary row of one (layer, parameter set) point."""
    for p in result["points"]:
        if p["layer"] == layer and p["param_set"] == param_set:
            return p
    raise KeyError(f"no point at layer {layer} with {param_set}; have "
                   f"{[(p['layer'], p['param_set']) for p in result['points']]}")
