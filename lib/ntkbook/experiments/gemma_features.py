"""Paper B, Gemma: eNTK eigenvectors vs PCA as detectors of parts of speech and morphology, per layer.

For each point (layer ``L``, parameter set; :func:`ntkbook.gemma.modes.layer_point`): the residual
streams entering layer ``L`` of the N contexts of :mod:`ntkbook.experiments.gemma_pos_data` are
computed once; the reduced operator
``S^{1/2} K_r S^{1/2}`` (:mod:`ntkbook.gemma.operator`) is diagonalised matrix-free by Lanczos
(:func:`ntkbook.ntk.eig.lanczos_topk`, full re-orthogonalisation, seeded, float64 vectors; the model runs
in float32 at the highest matmul precision); each of the top ``k`` modes gives a score per context
(:func:`ntkbook.gemma.operator.mode_scores`).  The baseline is PCA (top ``pca_k``) of the output of
block ``L`` (the un-normalised residual entering layer ``L+1``) at the last position.  Both are
evaluated one-vs-rest on a stratified 50 % split (:mod:`ntkbook.gemma.probe`) for the eight parts of
speech and the morphological "Feature=Value" tasks.  Each point is checkpointed, so a layer sweep
resumes layer by layer.

Also: a numerical check of the spectrum identity on the real model (a few contexts, a small
parameter set, the logit-space Gram computed block by block over the whole vocabulary).

Retired with its data set, whose windows overlap between the halves of its one split: the claims
are judged on :mod:`ntkbook.experiments.gemma_probe` (:mod:`ntkbook.claims.gemma`), and the book
reads only this experiment's stored N = 256 layer sweep (:func:`ntkbook.claims.gemma.first_sweep`),
beside the new sweep until that has all 18 layers.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook.errors import ConfigError, InputError
from ntkbook import validate as v
from ntkbook.progress import Progress, format_seconds
from ntkbook.store import PointStore, Result

NAME = "gemma_features"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_load": "a wall time", "t_gram": "a wall time",
                                  "points*.t_*": "a wall time"}}

#: the task families evaluated at each point: the parts of speech and the morphological features
FAMILIES = ("pos", "morph")
#: the per-task columns averaged over a family (``probe.evaluate_tasks`` rows, ``<method>_<metric>``)
MACRO_COLUMNS = ("entk_ap", "entk_auroc", "entk_precision", "pca_ap", "pca_auroc", "pca_precision")
#: the summary entries of a point's row, spelled out: family -> {entry: key in the row}; ``n`` is the
#: number of tasks, the ``MACRO_COLUMNS`` their macro averages, ``entk_wins_*`` the number of tasks
#: on which the eNTK beats PCA
SUMMARY_KEYS: dict[str, dict[str, str]] = {
    "pos": {"n": "pos_n",
            "entk_ap": "pos_entk_ap", "entk_auroc": "pos_entk_auroc", "entk_precision": "pos_entk_precision",
            "pca_ap": "pos_pca_ap", "pca_auroc": "pos_pca_auroc", "pca_precision": "pos_pca_precision",
            "entk_wins_ap": "pos_entk_wins_ap", "entk_wins_auroc": "pos_entk_wins_auroc"},
    "morph": {"n": "morph_n",
              "entk_ap": "morph_entk_ap", "entk_auroc": "morph_entk_auroc",
              "entk_precision": "morph_entk_precision",
              "pca_ap": "morph_pca_ap", "pca_auroc": "morph_pca_auroc", "pca_precision": "morph_pca_precision",
              "entk_wins_ap": "morph_entk_wins_ap", "entk_wins_auroc": "morph_entk_wins_auroc"},
}
#: the arrays stored for each point, under :func:`point_key` ``"L<layer>_<param_set>/<name>"``
POINT_ARRAYS = ("eigenvalues", "ritz_residuals", "entk_scores", "pca_scores", "pca_variance")
#: the spectrum-identity check's arrays: its name -> key in the result
IDENTITY_ARRAYS = {"ev_reduced": "identity_ev_reduced", "ev_logit": "identity_ev_logit"}


@dataclasses.dataclass(frozen=True)
class Config:
    """eNTK modes against PCA as detectors of parts of speech and morphology in Gemma-3-270M.

    Presets: ``paper()`` all 1024 contexts of the paper-scale data set at layer 16 (the author's
    choice), the top 25 modes from 50 Lanczos products; ``smoke()`` 4 contexts per class of the same
    stored data set, 6 modes from 10 products, looser task filters.  The chapter's layer sweep
    overrides ``layers`` and ``whole_layer_at``.
    """

    n_per_class: int = 128                # the first n_per_class contexts of each class are used
    data_scale: str = "paper"             # scale of the gemma_pos_data result they come from,
    data_n_per_class: int = 128           # and its n_per_class
    layers: tuple[int, ...] = (16,)       # layers with the author's parameter choice (down_proj)
    whole_layer_at: tuple[int, ...] = ()  # layers where every parameter of the layer is used too
    k: int = 25                           # eNTK modes (top eigenvectors) computed per point
    lanczos_steps: int = 50               # Lanczos products (Krylov depth) per point
    seed: int = 0                         # seed of Lanczos' starting vector
    chunk: int = 16                       # contexts per VJP/JVP call of the operator
    pca_k: int = 25                       # principal components of the baseline
    train_fraction: float = 0.5           # share of each class in the half that chooses mode and sign
    split_seed: int = 0                   # seed of that stratified split
    min_support: int = 30                 # a morphological task needs this many positive contexts,
    min_words: int = 12                   # this many distinct words among them,
    max_top_share: float = 0.5            # and no word holding more than this share of them
    identity_contexts: int = 2            # 0: skip the spectrum-identity check
    identity_layer: int = 16              # layer of the spectrum-identity check
    top_n: int = 8                        # top contexts kept per mode and sign

    @classmethod
    def smoke(cls) -> "Config":
        # a subset of the stored data set (building it takes most of an hour on 2 CPU cores)
        return cls(n_per_class=4, data_scale="paper", data_n_per_class=32, k=6, lanczos_steps=10, pca_k=6, chunk=8,
                   min_support=4, min_words=2, max_top_share=0.75, top_n=4)

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
        v.fraction(NAME, "train_fraction", self.train_fraction)
        v.int_at_least(NAME, "split_seed", self.split_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "min_support", self.min_support)
        v.positive_int(NAME, "min_words", self.min_words)
        v.fraction(NAME, "max_top_share", self.max_top_share, high_closed=True)
        v.int_at_least(NAME, "identity_contexts", self.identity_contexts, 0)
        v.int_at_least(NAME, "identity_layer", self.identity_layer, 0, "a layer index")
        v.positive_int(NAME, "top_n", self.top_n)


def points_of(config: Config) -> list[tuple[int, str]]:
    """The (layer, parameter set) points of a config: every layer with ``down_proj``, then the
    ``whole_layer_at`` layers with ``layer``."""
    return [(L, "down_proj") for L in config.layers] + [(L, "layer") for L in config.whole_layer_at]


def estimate_seconds(config: Config) -> float:
    """Per operator product ~0.06 s per context for down_proj at layer 16 on 2 busy CPU cores,
    times (1 + layers above L)/3; the whole layer about twice that."""
    N = 8 * config.n_per_class
    total = 60.0
    for L, ps in points_of(config):
        per = 0.06 * N * (18 - L + 1) / 3 * (2.0 if ps == "layer" else 1.0)
        total += (config.lanczos_steps + 2) * per
    return total


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


def _take(data, sel):
    """The data-set fields needed here, restricted to the contexts ``sel``."""
    pick = lambda xs: [xs[i] for i in sel]  # noqa: E731
    return {"contexts": np.asarray(data["contexts"])[sel], "label": np.asarray(data["label"])[sel],
            "classes": data["classes"], "morph": pick(data["morph"]), "model_word": pick(data["model_word"]),
            "true_word": pick(data["true_word"]), "context_text": pick(data["context_text"]),
            "continuation": pick(data["continuation"]), "stats": data["stats"], "config": data.config,
            "provenance": data.provenance}


def _tasks(data, config: Config):
    from ntkbook.gemma import probe  # noqa: PLC0415

    classes = data["classes"]
    labels = np.asarray(data["label"])
    pos_tasks = {c: labels == i for i, c in enumerate(classes)}
    # this experiment's filter lower-cases words (gemma_probe uses the author's, case-sensitive)
    morph, morph_report = probe.morph_tasks(data["morph"], data["model_word"], case_sensitive=False,
                                            min_support=config.min_support, min_words=config.min_words,
                                            max_top_share=config.max_top_share)
    train, test = probe.stratified_split(labels, config.train_fraction, config.split_seed)
    # a morphological task needs positives and negatives in both halves
    morph = {k: v for k, v in morph.items() if 0 < v[train].sum() < len(train) and 0 < v[test].sum() < len(test)}
    return pos_tasks, morph, morph_report, train, test


def run(config: Config, points: PointStore | None = None) -> Result:
    """For each (layer, parameter set) point: the top ``k`` modes of the reduced eNTK operator by
    Lanczos, the top ``pca_k`` principal components of the block output, and both scored one-vs-rest
    on the parts of speech and the morphological tasks; plus the spectrum-identity check.  Each
    point is checkpointed (see the module docstring)."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import modes  # noqa: PLC0415
    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415
    from ntkbook.gemma import weights as gemma_weights  # noqa: PLC0415
    from ntkbook.gemma import probe  # noqa: PLC0415

    points = points or PointStore(None)
    from ntkbook.gemma.model import GemmaConfig  # noqa: PLC0415

    n_layers = GemmaConfig().n_layers  # Gemma-3-270M; checked again against the loaded weights
    for L, _ps in points_of(config):
        if not 0 <= L < n_layers:
            raise ConfigError(f"{NAME}.layers: layer {L} out of range; Gemma-3-270M has layers "
                              f"0..{n_layers - 1}")
    data = experiments.load_or_run("gemma_pos_data", config.data_scale, n_per_class=config.data_n_per_class)
    sel = subset(np.asarray(data["label"]), config.n_per_class)
    data = _take(data, sel)
    contexts = np.asarray(data["contexts"])
    N = len(contexts)
    t0 = time.perf_counter()
    cfg, params, _ = gemma_weights.load()
    for L, _ps in points_of(config):
        if not 0 <= L < cfg.n_layers:
            raise ConfigError(f"{NAME}.layers: layer {L} out of range; the loaded model has layers "
                              f"0..{cfg.n_layers - 1}")
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    Gh = gemma_weights.unembedding_gram_sqrt(params)
    t_gram = time.perf_counter() - t0
    pos_tasks, morph, morph_report, train, test = _tasks(data, config)

    def ident():
        res = gemma_operator.compute_residuals(params, cfg, contexts[:config.identity_contexts], config.identity_layer)
        t = time.perf_counter()
        out = modes.identity_check(params, cfg, res, config.identity_layer, gram_half=Gh)
        out["seconds"] = time.perf_counter() - t
        arrays = {k: out.pop(k) for k in ("ev_reduced", "ev_logit")}
        return arrays, out

    id_arrays, id_scalars = points.cached("identity", ident) if config.identity_contexts > 0 else ({}, {})

    per_point = {}
    bar = Progress(len(points_of(config)), desc=f"{NAME} N={N}", quiet_seconds=0)
    for L, ps in points_of(config):
        def compute(L=L, ps=ps):
            return modes.layer_point(params, cfg, contexts, L, ps, Gh, k=config.k,
                                     lanczos_steps=config.lanczos_steps, seed=config.seed, chunk=config.chunk,
                                     pca_k=config.pca_k)

        arrays, scalars = points.cached(f"L={L}-{ps}", compute)
        score_sets = {"entk": arrays["entk_scores"], "pca": arrays["pca_scores"]}
        pos_rows = probe.evaluate_tasks(score_sets, pos_tasks, train, test)
        morph_rows = probe.evaluate_tasks(score_sets, morph, train, test)
        per_point[(L, ps)] = (arrays, scalars, pos_rows, morph_rows)
        bar.update(1)
        bar.set_postfix(layer=L, lanczos=format_seconds(scalars["t_lanczos"]))
    bar.close()

    out_arrays = {IDENTITY_ARRAYS[k]: v for k, v in id_arrays.items()}
    out_arrays["train_idx"], out_arrays["test_idx"] = train, test
    point_rows = []
    for (L, ps), (arrays, scalars, pos_rows, morph_rows) in per_point.items():
        for key in POINT_ARRAYS:
            out_arrays[point_key(L, ps, key)] = arrays[key]
        point_rows.append({**scalars, "tag": point_tag(L, ps), "pos": pos_rows, "morph": morph_rows,
                           **_macro(pos_rows, "pos"), **_macro(morph_rows, "morph")})
    return Result(
        name=NAME, config=dataclasses.asdict(config), arrays=out_arrays,
        scalars={"points": point_rows, "identity": id_scalars, "morph_report": morph_report,
                 "classes": list(data["classes"]), "morph_tasks": sorted(morph), "N": N,
                 "t_load": t_load, "t_gram": t_gram,
                 "data_stats": data["stats"], "data_config": data["config"],
                 "data_commit": data["provenance"].get("git_commit"),
                 "labels": np.asarray(data["label"]).tolist(), "model_word": data["model_word"],
                 "true_word": data["true_word"], "morph": data["morph"],
                 "context_text": [t[-400:] for t in data["context_text"]],
                 "continuation": data["continuation"]},
    )


def _macro(rows: list[dict], family: str) -> dict:
    """The :data:`SUMMARY_KEYS` entries of one family of task rows."""
    keys = SUMMARY_KEYS[family]
    if not rows:
        return {keys["n"]: 0}
    out = {keys["n"]: len(rows)}
    for column in MACRO_COLUMNS:
        out[keys[column]] = float(np.mean([r[column] for r in rows]))
    out[keys["entk_wins_ap"]] = int(sum(r["entk_ap"] > r["pca_ap"] for r in rows))
    out[keys["entk_wins_auroc"]] = int(sum(r["entk_auroc"] > r["pca_auroc"] for r in rows))
    return out


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
