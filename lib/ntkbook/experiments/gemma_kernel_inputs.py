r"""Paper B, Gemma: PCA of the eNTK's own inputs, on the same contexts and splits as ``gemma_probe``.

The eNTK that ``gemma_probe`` diagonalises differentiates the output ``f(x)`` (the final-normed
hidden state at the last position) with respect to the down-projection ``W`` of layer ``L``
(640 x 2048).  At each position ``t`` of the window that matrix reads the MLP activation
``a_t(x) = gelu(gate x_t) * up x_t`` (2048 wide, the input of the down-projection), so
``df/dW = sum_t delta_t(x) a_t(x)^T`` with ``delta_t = df/d(W a_t)``, and the kernel factorises as

    Theta(x, x') = sum_{t, t'} (delta_t(x)^T delta_t'(x')) (a_t(x) . a_t'(x')).

The second factor is what the kernel takes from its inputs.  Dropping the first (setting
``delta_t^T delta_t' = [t = t']``, every position weighted alike and positions not mixed) leaves
the Gram ``sum_t a_t(x) . a_t(x')``, i.e. the linear kernel of the activations of every position
concatenated (64 x 2048 = 131,072 numbers per context).  Its top eigenvectors, after centring, are
the principal components of that concatenation: **PCA of the kernel's own inputs**, the same width
and the same positions the eNTK sees, without the Jacobian of the layers above.  Their scores are
put through the very selection the eNTK modes and the principal components of the residual go
through (:func:`ntkbook.gemma.probe.evaluate_task`) on every split by story.

For comparison the variant that keeps only the sum over positions (``delta_t`` the same at every
position: the Gram of ``sum_t a_t``) is computed from the same activations (``summed``).

From forward passes only; the activations are not stored (537 MB at N = 1024), their centred Gram
matrix over every position is stored (N x N, float32).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook import validate as v
from ntkbook.errors import ConfigError
from ntkbook.store import PointStore, Result

NAME = "gemma_kernel_inputs"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_load": "a wall time", "t_activations": "a wall time",
                                  "t_eval": "a wall time"}}

#: the task families, as in gemma_probe
FAMILIES = ("pos", "morph")

#: the two Gram matrices of the activations: every position concatenated, and their sum over positions
VARIANTS = ("concat", "summed")


@dataclasses.dataclass(frozen=True)
class Config:
    """PCA of the MLP activations (the down-projection's input) of layer ``layer`` over the whole
    window, on the contexts, tasks and splits by story of the ``gemma_probe`` entry with the same
    data fields.

    Presets: ``paper()`` the paper data set's 1024 contexts at layer 16, 25 components (the eNTK's
    and PCA's budget), 20 splits; ``smoke()`` 4 contexts per class from the smoke data set, 6
    components, 5 splits, the smoke preset's looser task filters."""

    n_per_class: int = 128                 # as gemma_probe: the first n_per_class contexts of each class,
    data_scale: str = "paper"              # of the gemma_pos_windows result at this scale
    data_n_per_class: int = 128            # and n_per_class
    layer: int = 16                        # the layer whose down-projection's inputs are read
    k: int = 25                            # components (the eNTK's and PCA's budget)
    folds: int = 2                         # as gemma_probe: the splits by story
    split_seed: int = 0                   # as gemma_probe: NumPy seed of the splits by story
    n_splits: int = 20                    # as gemma_probe: splits by story the components are read over
    min_support: int = 30                  # as gemma_probe: the morphological tasks' filter
    min_words: int = 12                   # as gemma_probe: distinct words a morphological task needs
    max_top_share: float = 0.5            # as gemma_probe: largest share of one word in a task's positives
    batch: int = 16                        # contexts per forward call

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4, data_scale="smoke", data_n_per_class=4, k=6, n_splits=5,
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
        v.int_at_least(NAME, "folds", self.folds, 2, "a split needs two sides")
        v.int_at_least(NAME, "split_seed", self.split_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "n_splits", self.n_splits)
        v.positive_int(NAME, "min_support", self.min_support)
        v.positive_int(NAME, "min_words", self.min_words)
        v.fraction(NAME, "max_top_share", self.max_top_share, high_closed=True)
        v.positive_int(NAME, "batch", self.batch)


def mlp_inputs(lp, h, cfg, is_global):
    """The input of the down-projection of one decoder layer at every position, ``(T, F)``:
    ``gelu(gate x) * up x`` with ``x`` the MLP's normed input, for parameters ``lp`` of that layer
    and the residual ``h`` (T, d) entering it (the first half of
    :func:`ntkbook.gemma.model.run_layer`, whose output ``down`` then reads)."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    from ntkbook.gemma import model as gm  # noqa: PLC0415

    T, eps, hp = h.shape[0], cfg.rms_eps, jax.lax.Precision.HIGHEST
    cos, sin = gm._rope_for(T, cfg, is_global, h.dtype)
    q, k, val = gm._qkv(lp, gm.rms_norm(h, lp["attn_norm"], eps), cfg, cos, sin)
    causal, local = gm._masks(T, cfg.sliding_window)
    mask = jnp.where(is_global, causal, local)
    rep = cfg.n_heads // cfg.n_kv_heads
    k, val = jnp.repeat(k, rep, axis=1), jnp.repeat(val, rep, axis=1)
    scores = jnp.einsum("thd,shd->hts", q, k, precision=hp) * (cfg.query_pre_attn_scalar ** -0.5)
    scores = jnp.where(mask[None], scores, jnp.finfo(scores.dtype).min)
    a = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=-1), val, precision=hp).reshape(T, -1)
    h = h + gm.rms_norm(jnp.matmul(a, lp["o"].T, precision=hp), lp["post_attn_norm"], eps)
    x = gm.rms_norm(h, lp["ffn_norm"], eps)
    g = jax.nn.gelu(jnp.matmul(x, lp["gate"].T, precision=hp), approximate=True)
    return g * jnp.matmul(x, lp["up"].T, precision=hp)


def activation_grams(params, cfg, contexts, L: int, batch: int) -> dict:
    """Uncentred Gram matrices (N, N), float64, of the down-projection inputs of layer ``L``:
    ``concat`` = sum_t a_t(x) . a_t(x') and ``summed`` = (sum_t a_t(x)) . (sum_t a_t(x'))."""
    import jax  # noqa: PLC0415

    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415

    lp = {key: val[L] for key, val in params["layers"].items()}
    fn = jax.jit(jax.vmap(lambda p, h: mlp_inputs(p, h, cfg, L in cfg.global_layers), in_axes=(None, 0)))
    flat, summed = [], []
    for s in range(0, len(contexts), batch):
        res = gemma_operator.compute_residuals(params, cfg, contexts[s:s + batch], L, batch=batch)
        a = np.asarray(fn(lp, res), np.float32)  # (B, T, F)
        flat.append(a.reshape(len(a), -1))
        summed.append(a.astype(np.float64).sum(axis=1))
    A = np.concatenate(flat).astype(np.float64)
    S = np.concatenate(summed)
    return {"concat": A @ A.T, "summed": S @ S.T}


def gram_pca_scores(K: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Principal-component scores ``(k, N)`` from an uncentred linear Gram matrix ``K`` (N, N) of
    the rows of some X: the top eigenvectors of the double-centred Gram times the square roots of
    their eigenvalues (what :func:`ntkbook.gemma.probe.pca_scores` gives from X itself, up to the
    sign of each component), and each component's share of the variance."""
    K = np.asarray(K, np.float64)
    N = len(K)
    if k > N:
        raise ConfigError(f"{NAME}.k: {k} components need at least {k} contexts, got {N}")
    C = np.eye(N) - 1.0 / N
    Kc = C @ K @ C
    Kc = (Kc + Kc.T) / 2
    lam, U = np.linalg.eigh(Kc)
    lam, U = lam[::-1], U[:, ::-1]
    pos = np.clip(lam, 0, None)
    return (U[:, :k] * np.sqrt(pos[:k])).T, pos[:k] / pos.sum()


def split_rows(scores: np.ndarray, tasks: dict, splits: list) -> list[dict]:
    """Per task: test ``ap``, ``auroc`` and the chosen ``mode`` on each split
    (:func:`ntkbook.gemma.probe.evaluate_task`)."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    rows = []
    for task, y in tasks.items():
        per = [probe.evaluate_task(scores, y, tr, te) for tr, te in splits]
        rows.append({"task": task, "support": int(np.sum(y)),
                     **{key: [p[key] for p in per] for key in ("ap", "auroc", "mode")}})
    return rows


def run(config: Config, points: PointStore | None = None) -> Result:
    """The activations' Gram matrices (checkpointed), their top ``k`` components, and every task on
    every split."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import probe  # noqa: PLC0415
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
    ev = probe.tasks_and_splits(labels, story, pick("morph"), pick("model_word"), list(data["classes"]), config)

    t0 = time.perf_counter()
    cfg, params, _ = gemma_weights.load()
    t_load = time.perf_counter() - t0

    def grams():
        t = time.perf_counter()
        out = activation_grams(params, cfg, contexts, config.layer, config.batch)
        return {f"gram_{key}": val for key, val in out.items()}, {"t_activations": time.perf_counter() - t}

    arrays, scalars = points.cached(f"L={config.layer}", grams)
    out = {"t_load": t_load, "t_activations": scalars["t_activations"]}
    t = time.perf_counter()
    stored = {"gram_concat": np.asarray(arrays["gram_concat"], np.float32),
              "split_test": np.array([np.isin(np.arange(len(sel)), te) for _, te in ev["splits"]])}
    for var in VARIANTS:
        sc, share = gram_pca_scores(arrays[f"gram_{var}"], config.k)
        stored[f"{var}_scores"], stored[f"{var}_variance"] = sc, share
        out[var] = {fam: split_rows(sc, ev[fam], ev["splits"]) for fam in FAMILIES}
    out["t_eval"] = time.perf_counter() - t
    return Result(
        name=NAME, config=dataclasses.asdict(config), arrays=stored,
        scalars={**out, "N": len(sel), "classes": list(data["classes"]), "labels": labels.tolist(),
                 "story": story.tolist(), "tasks": {fam: sorted(ev[fam]) for fam in FAMILIES},
                 "data_config": data.config, "data_commit": data.provenance.get("git_commit")},
    )
