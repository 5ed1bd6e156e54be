"""Paper B, Gemma: the same eNTK operator on a re-initialised Gemma-3-270M (random weights), on the
contexts and splits of a ``gemma_probe`` entry.

Control (a) of issue 36: what any kernel of this shape finds.  The architecture, the data, the
layer, the parameter set (the down-projection of layer ``layer``), the operator
``S^{1/2} K_r S^{1/2}`` (with ``S`` from the *random* unembedding), Lanczos and the selection are
those of :mod:`ntkbook.experiments.gemma_probe`; only the weights differ: every matrix is redrawn
i.i.d. normal with its trained standard deviation and every norm scale is reset to one
(:func:`ntkbook.gemma.weights.reinitialise`, seeded by ``init_seed``).  Whatever the modes of this
kernel detect comes from the architecture and the inputs (token identities, positions, the shape of
the window), not from training.  The principal components of the random model's block output are
the matching PCA baseline.

Both score sets go through the very selection the trained model's do
(:func:`ntkbook.gemma.probe.evaluate_task` on every split by story); the per-task rows over the
splits of each (``entk``, ``pca``: :func:`ntkbook.gemma.probe.per_split_rows`) are what the claims
read beside the trained eNTK of the ``gemma_probe`` entry with the same data fields
(:func:`ntkbook.claims.gemma.reinit_beside`).  The paper preset is that entry of the depth sweep
at layer 16 and N = 256.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook import validate as v
from ntkbook.errors import ConfigError
from ntkbook.store import PointStore, Result

NAME = "gemma_reinit"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_load": "a wall time", "t_reinit": "a wall time", "t_gram": "a wall time",
                                  "t_evaluation": "a wall time", "points*.t_*": "a wall time"}}

#: the task families, as in gemma_probe
FAMILIES = ("pos", "morph")
#: the arrays stored for the point, under ``"L<layer>_down_proj/<name>"`` (gemma_probe's keys)
POINT_ARRAYS = ("eigenvalues", "ritz_residuals", "entk_scores", "pca_scores", "pca_variance")
#: the parameter set whose eNTK is taken (the author's: the down-projection)
PARAM_SET = "down_proj"


@dataclasses.dataclass(frozen=True)
class Config:
    """The top eNTK modes of the down-projection of layer ``layer`` and the top principal components
    of its block output, on a re-initialised Gemma-3-270M, on the contexts, tasks and splits by story
    of the ``gemma_probe`` entry with the same data fields.

    Presets: ``paper()`` the first 32 contexts per class of the paper data set (N = 256) at layer
    16, the top 25 modes from 50 Lanczos products, 20 splits: the selection of the depth sweep's
    ``gemma_probe`` entry at layer 16 (:func:`ntkbook.experiments.gemma_probe.sweep_overrides`);
    ``smoke()`` 4 contexts per class from the smoke data set, 6 modes from 10 products, 5 splits,
    the smoke preset's looser task filters (as ``gemma_probe.Config.smoke()``)."""

    n_per_class: int = 32                 # as gemma_probe: the first n_per_class contexts of each class,
    data_scale: str = "paper"             # of the gemma_pos_windows result at this scale
    data_n_per_class: int = 128           # and n_per_class
    layer: int = 16                       # the layer whose down-projection's eNTK is taken
    k: int = 25                           # eNTK modes (top eigenvectors) computed
    lanczos_steps: int = 50               # Lanczos products (Krylov depth)
    seed: int = 0                         # seed of Lanczos' starting vector
    chunk: int = 16                       # contexts per VJP/JVP call of the operator
    pca_k: int = 25                       # principal components of the random model's block output
    init_seed: int = 0                    # NumPy seed of the re-initialised weights
    folds: int = 2                        # as gemma_probe: the splits by story
    split_seed: int = 0                   # as gemma_probe: NumPy seed of the splits by story
    n_splits: int = 20                    # as gemma_probe: splits by story the scores are read over
    min_support: int = 30                 # as gemma_probe: the morphological tasks' filter
    min_words: int = 12                   # as gemma_probe: distinct words a morphological task needs
    max_top_share: float = 0.5            # as gemma_probe: largest share of one word in a task's positives

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
        v.int_at_least(NAME, "layer", self.layer, 0, "a layer index")
        v.positive_int(NAME, "k", self.k)
        v.int_at_least(NAME, "lanczos_steps", self.lanczos_steps, self.k, "Lanczos needs k <= steps")
        v.int_at_least(NAME, "seed", self.seed, 0, "a JAX seed")
        v.positive_int(NAME, "chunk", self.chunk)
        v.positive_int(NAME, "pca_k", self.pca_k)
        v.int_at_least(NAME, "init_seed", self.init_seed, 0, "a NumPy seed")
        v.int_at_least(NAME, "folds", self.folds, 2, "a split needs two sides")
        v.int_at_least(NAME, "split_seed", self.split_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "n_splits", self.n_splits)
        v.positive_int(NAME, "min_support", self.min_support)
        v.positive_int(NAME, "min_words", self.min_words)
        v.fraction(NAME, "max_top_share", self.max_top_share, high_closed=True)


def estimate_seconds(config: Config) -> float:
    """gemma_probe's estimate for one down-projection point (about ``N (0.04 + 0.01 (17 - L))`` s per
    Lanczos product on 2 busy CPU cores, ~1 s per split for the evaluation, ~60 s for loading), plus
    ~60 s to draw the random weights and the random unembedding's Gram."""
    N = 8 * config.n_per_class
    per = N * (0.04 + 0.01 * (17 - config.layer))
    return 120.0 + config.n_splits + (config.lanczos_steps + 2) * per


def point_key(layer: int, name: str) -> str:
    """The result key of the array ``name`` (one of :data:`POINT_ARRAYS`): gemma_probe's
    ``"L<layer>_down_proj/<name>"``."""
    if name not in POINT_ARRAYS:
        raise KeyError(f"no point array {name!r}; have {POINT_ARRAYS}")
    return f"L{layer}_{PARAM_SET}/{name}"


def run(config: Config, points: PointStore | None = None) -> Result:
    """Re-initialise the weights, then the point of ``gemma_probe`` on the random model
    (:func:`ntkbook.gemma.modes.layer_point`, checkpointed; the unembedding Gram from the random
    embedding), and both score sets on every task and split."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import modes, probe  # noqa: PLC0415
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
    N = len(contexts)
    # the same fields as gemma_probe's Config (n_splits, folds, split_seed and the morphological filter)
    ev = probe.tasks_and_splits(labels, story, pick("morph"), pick("model_word"), list(data["classes"]), config)

    def compute():
        import jax  # noqa: PLC0415

        t = time.perf_counter()
        cfg, trained, _ = gemma_weights.load_numpy()
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        params = gemma_weights.reinitialise(trained, config.init_seed)
        del trained
        t_reinit = time.perf_counter() - t
        t = time.perf_counter()
        Gh = gemma_operator.gram_sqrt(params["embed"])  # of the random unembedding (tied to the embedding)
        t_gram = time.perf_counter() - t
        params = jax.tree_util.tree_map(jax.numpy.asarray, params)
        arrays, scalars = modes.layer_point(params, cfg, contexts, config.layer, PARAM_SET, Gh, k=config.k,
                                            lanczos_steps=config.lanczos_steps, seed=config.seed, chunk=config.chunk,
                                            pca_k=config.pca_k)
        return arrays, {**scalars, "t_load": t_load, "t_reinit": t_reinit, "t_gram": t_gram}

    arrays, scalars = points.cached(f"L={config.layer}-{PARAM_SET}-init={config.init_seed}", compute)
    t = time.perf_counter()
    score_sets = {"entk": np.asarray(arrays["entk_scores"]), "pca": np.asarray(arrays["pca_scores"])}
    row = {key: val for key, val in scalars.items() if key not in ("t_load", "t_reinit", "t_gram")}
    row["tag"] = f"L{config.layer}_{PARAM_SET}"
    per_method: dict = {method: {} for method in score_sets}
    for fam in FAMILIES:
        # gemma_probe's rows of a point: the first split's per-task rows and the random eNTK - random PCA over splits
        row[fam] = probe.evaluate_tasks(score_sets, ev[fam], *ev["splits"][0])
        row[f"{fam}_splits"] = probe.split_robustness(score_sets, ev[fam], ev["splits"])
        for method, sc in score_sets.items():
            per_method[method][fam] = probe.per_split_rows(sc, ev[fam], ev["splits"])
    t_evaluation = time.perf_counter() - t
    stored = {point_key(config.layer, key): arrays[key] for key in POINT_ARRAYS}
    stored["split_test"] = np.array([np.isin(np.arange(N), te) for _, te in ev["splits"]])
    return Result(
        name=NAME, config=dataclasses.asdict(config), arrays=stored,
        scalars={"points": [row], **per_method, "t_load": scalars["t_load"], "t_reinit": scalars["t_reinit"],
                 "t_gram": scalars["t_gram"], "t_evaluation": t_evaluation, "N": N,
                 "classes": list(data["classes"]), "labels": labels.tolist(), "story": story.tolist(),
                 "morph": pick("morph"), "tasks": {fam: sorted(ev[fam]) for fam in FAMILIES},
                 "dropped_tasks": ev["dropped"], "data_config": data.config,
                 "data_commit": data.provenance.get("git_commit")},
    )
