r"""The reduced layer-wise eNTK of a Gemma decoder, matrix-free, from stored residual streams.

Setting (Paper B's Gemma experiment).  Contexts ``x_1..x_N`` (token ids, length T); the output of
the model on context ``n`` is the final-normed hidden state at the last position,
``f_n in R^d``; the parameters ``theta`` are a subset of one layer ``L`` (by default only its MLP
down-projection, as in the author's notebook).  With ``J_r`` the ``(N d) x P`` Jacobian of
``(f_1..f_N)`` with respect to ``theta``, the *reduced* kernel is ``K_r = J_r J_r^T`` and the
operator whose top eigenvectors the paper studies is

    K~ = S^{1/2} K_r S^{1/2},      S = I_N (x) G,   G = U^T U   (d x d),

with ``U`` (V x d) the unembedding.  Because the logits are ``z_n = U f_n``, the eNTK of all
``N V`` logits is ``(I (x) U) K_r (I (x) U^T)`` and has the same nonzero spectrum as ``K~`` (the
chapter derives it; :func:`logit_kernel_dense` lets the tests check it).

Products are matrix-free: ``K~ w = S^{1/2} J_r (J_r^T (S^{1/2} w))``, one vector-Jacobian product
(summed over chunks of contexts) and one Jacobian-vector product (per chunk), each running only
layers ``L..end`` from the stored residual stream entering layer ``L``
(:func:`ntkbook.gemma.model.forward_from`).  Memory is bounded by the chunk size.  The contexts of
a chunk are sharded over all local devices with :mod:`jax.sharding` (a 1-D mesh over the context
axis; XLA's SPMD partitioner inserts the all-reduce of the VJP's sum), so the same code runs on one
CPU, several forced host devices or a GPU.

Vector layout: a vector of the ``N d`` space is flat with index ``n d + c`` (context-major); the
author's notebook uses the transposed ``(d, N)`` layout, which changes no eigenvalue.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ntkbook.errors import InputError
from ntkbook.gemma import model as gemma_model
from ntkbook.ntk.operator import KernelOperator

__all__ = [
    "PARAM_SETS",
    "param_keys",
    "forward_from_params",
    "gram_sqrt",
    "compute_residuals",
    "LayerOperator",
    "layer_operator",
    "mode_scores",
    "jacobian_dense",
    "logit_kernel_dense",
]

#: named parameter choices at a layer: the author's (down-projection only) and the whole layer
PARAM_SETS: dict[str, tuple[str, ...]] = {"down_proj": ("down",), "layer": gemma_model.LAYER_KEYS}


def param_keys(param_set: str | Sequence[str]) -> tuple[str, ...]:
    """The layer keys of a parameter set: a name of :data:`PARAM_SETS` or a tuple of keys of
    :data:`ntkbook.gemma.model.LAYER_KEYS` (checked; ``InputError`` otherwise)."""
    if isinstance(param_set, str):
        if param_set not in PARAM_SETS:
            raise InputError(f"unknown parameter set {param_set!r}; use one of {sorted(PARAM_SETS)} "
                             f"or a tuple of layer keys from {gemma_model.LAYER_KEYS}")
        return PARAM_SETS[param_set]
    keys = tuple(param_set)
    bad = [k for k in keys if k not in gemma_model.LAYER_KEYS]
    if bad or not keys:
        raise InputError(f"unknown layer parameters {bad}; choose from {gemma_model.LAYER_KEYS}")
    return keys


def gram_sqrt(unembed, *, block: int = 16384) -> np.ndarray:
    """``G^{1/2}`` for ``G = U^T U`` (float64, d x d), ``U`` (V, d); negative round-off eigenvalues
    are clamped to zero.  Accumulated over blocks of rows (the full float64 ``U`` is not formed)."""
    U = np.asarray(unembed)
    if U.ndim != 2:
        raise InputError(f"unembedding must be (V, d), got shape {U.shape}")
    d = U.shape[1]
    Gm = np.zeros((d, d))
    for s in range(0, U.shape[0], block):
        b = U[s:s + block].astype(np.float64)
        Gm += b.T @ b
    w, V = np.linalg.eigh(Gm)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def forward_from_params(params):
    """The parameters :func:`ntkbook.gemma.model.forward_from` needs (not the embedding, which
    would only be copied around)."""
    return {"layers": params["layers"], "final_norm": params["final_norm"]}


def compute_residuals(params, cfg: gemma_model.GemmaConfig, contexts, L: int, *, batch: int = 16,
                      progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Residual streams entering layer ``L`` for each context: ``(N, T, d)`` float32 numpy.

    ``contexts``: ``(N, T)`` integer token ids.
    """
    contexts = np.asarray(contexts)
    if contexts.ndim != 2:
        raise InputError(f"contexts must be (N, T) token ids, got shape {contexts.shape}")
    gemma_model.check_layer(cfg, L)
    gemma_model.check_ids(cfg, contexts[0])
    fn = _residual_fn(cfg, L)
    sub = {"embed": params["embed"], "layers": params["layers"]}
    out = []
    for s in range(0, len(contexts), batch):
        out.append(np.asarray(fn(sub, jnp.asarray(contexts[s:s + batch]))))
        if progress is not None:
            progress(len(out[-1]))
    return np.concatenate(out)


@functools.lru_cache(maxsize=32)
def _residual_fn(cfg, L):
    return jax.jit(jax.vmap(lambda p, ids: gemma_model.residual(p, cfg, ids, L), in_axes=(None, 0)))


class LayerOperator(KernelOperator):
    """``w -> K~ w`` (or ``K_r w`` without the Gram factor) on flat vectors of length ``N d``: the
    engine's :class:`ntkbook.ntk.operator.KernelOperator` on host (numpy float64) vectors.

    Attributes besides the engine's (``dim`` = N d, ``dtype`` float64, ``shape``,
    ``num_products``): ``N``, ``d``, ``num_params`` (P, the parameters differentiated), ``layer``,
    ``param_keys``, ``chunk`` (contexts per chunk), ``devices`` (number of devices the chunk is
    sharded over).
    """

    def __init__(self, fn: Callable, *, N: int, d: int, num_params: int, layer: int,
                 param_keys: tuple[str, ...], chunk: int, devices: int):
        super().__init__(fn, N * d, np.float64)
        self.N = N
        self.d = d
        self.num_params = num_params
        self.layer = layer
        self.param_keys = param_keys
        self.chunk = chunk
        self.devices = devices

    def prepare(self, w):
        """``w`` as a numpy float64 vector (the product runs its Gram factor on the host)."""
        w = np.asarray(w, dtype=np.float64)
        self.check_shape(w)
        return w

    def __repr__(self):
        return (f"LayerOperator(layer={self.layer}, params={'+'.join(self.param_keys)}, N={self.N}, "
                f"d={self.d}, P={self.num_params})")


def layer_operator(params, cfg: gemma_model.GemmaConfig, residuals, L: int, *,
                   param_set: str | Sequence[str] = "down_proj", gram_half: np.ndarray | None = None,
                   chunk: int = 16, devices: Sequence[jax.Device] | None = None) -> LayerOperator:
    """The matrix-free operator ``S^{1/2} K_r S^{1/2}`` at layer ``L`` (``K_r`` if ``gram_half`` is None).

    Args:
      params, cfg: the model (:mod:`ntkbook.gemma.model`).
      residuals: ``(N, T, d)`` residual streams entering layer ``L`` (:func:`compute_residuals`).
      L: the layer (0 <= L < n_layers).
      param_set: ``"down_proj"`` (the author's choice), ``"layer"`` (every parameter of layer L) or a
        tuple of layer keys.
      gram_half: ``G^{1/2}`` (d x d) from :func:`gram_sqrt`, or None for the plain reduced kernel.
      chunk: contexts per VJP/JVP call (rounded up to a multiple of the number of devices).
      devices: devices to shard contexts over (default: all local devices).
    """
    L = gemma_model.check_layer(cfg, L, allow_end=False)
    keys = param_keys(param_set)
    h = np.asarray(residuals)
    if h.ndim != 3 or h.shape[2] != cfg.d_model:
        raise InputError(f"residuals must be (N, T, {cfg.d_model}), got {h.shape}")
    N, T, d = h.shape
    if T > cfg.max_context:
        raise InputError(f"contexts of {T} tokens exceed the model's window of {cfg.max_context}")
    devices = list(devices if devices is not None else jax.local_devices())
    ndev = len(devices)
    chunk = int(math.ceil(max(1, min(chunk, N)) / ndev) * ndev)
    n_chunks = int(math.ceil(N / chunk))
    pad = n_chunks * chunk - N
    cdtype = params["layers"]["down"].dtype
    mesh = Mesh(np.array(devices), ("ctx",))
    shard, repl = NamedSharding(mesh, P("ctx")), NamedSharding(mesh, P())
    hp = np.concatenate([h, np.zeros((pad, T, d), h.dtype)]).astype(cdtype)
    h_chunks = [jax.device_put(hp[i * chunk:(i + 1) * chunk], shard) for i in range(n_chunks)]
    rest = jax.device_put(forward_from_params(params), repl)
    theta = jax.device_put({k: params["layers"][k][L] for k in keys}, repl)
    P_count = int(sum(np.prod(v.shape) for v in theta.values()))
    Gh = None if gram_half is None else np.asarray(gram_half, np.float64)
    if Gh is not None and Gh.shape != (d, d):
        raise InputError(f"gram_half must be ({d}, {d}), got {Gh.shape}")

    def F(th, rest, hb):
        return jax.vmap(lambda x: gemma_model.forward_from(rest, cfg, x, L, layer_L=th)[-1])(hb)

    @jax.jit
    def vjp_chunk(th, rest, hb, zb):
        return jax.vjp(lambda t: F(t, rest, hb), th)[1](zb)[0]

    @jax.jit
    def jvp_chunk(th, rest, hb, u):
        return jax.jvp(lambda t: F(t, rest, hb), (th,), (u,))[1]

    def fn(w):
        z = w.reshape(N, d)
        if Gh is not None:
            z = z @ Gh
        z = np.concatenate([z, np.zeros((pad, d))]).astype(cdtype)
        u = None
        for i, hb in enumerate(h_chunks):
            g = vjp_chunk(theta, rest, hb, jax.device_put(z[i * chunk:(i + 1) * chunk], shard))
            u = g if u is None else jax.tree_util.tree_map(jnp.add, u, g)
        u = jax.device_put(u, repl)
        t = np.concatenate([np.asarray(jvp_chunk(theta, rest, hb, u), np.float64) for hb in h_chunks])[:N]
        if Gh is not None:
            t = t @ Gh
        return t.reshape(-1)

    return LayerOperator(fn, N=N, d=d, num_params=P_count, layer=L, param_keys=keys, chunk=chunk,
                         devices=ndev)


def mode_scores(eigenvectors: np.ndarray, N: int, d: int) -> np.ndarray:
    """Per-context score of each mode: ``(k, N)``.

    A mode ``v`` (length N d) is reshaped to ``(N, d)``; its score on context n is the n-th entry of
    the top left singular vector times the top singular value (the best rank-one summary
    ``v ~ s a b^T``; the sign is arbitrary and chosen later on training data).
    ``eigenvectors``: ``(N d, k)`` columns.
    """
    V = np.asarray(eigenvectors, np.float64)
    out = np.empty((V.shape[1], N))
    for i in range(V.shape[1]):
        M = V[:, i].reshape(N, d)
        Uu, s, _ = np.linalg.svd(M, full_matrices=False)
        out[i] = Uu[:, 0] * s[0]
    return out


# --------------------------------------------------------------------------------------------------
# dense references (small models only: tests and the chapter's numerical check)
# --------------------------------------------------------------------------------------------------
def jacobian_dense(params, cfg: gemma_model.GemmaConfig, residuals, L: int, param_set="down_proj") -> np.ndarray:
    """``J_r``: ``(N d, P)`` Jacobian of the last-position outputs w.r.t. the chosen parameters of
    layer ``L`` (reverse mode, every output row; for tiny models)."""
    keys = param_keys(param_set)
    theta = {k: params["layers"][k][L] for k in keys}
    flat0, unravel = jax.flatten_util.ravel_pytree(theta)
    rest = forward_from_params(params)
    h = jnp.asarray(residuals)

    @jax.jit  # one compiled program: op by op, the reverse pass over every output took 3x longer
    def jacobian(vec, rest, h):
        def F(vec):
            th = unravel(vec)
            return jax.vmap(lambda x: gemma_model.forward_from(rest, cfg, x, L, layer_L=th)[-1])(h).reshape(-1)
        return jax.jacrev(F)(vec)

    return np.asarray(jacobian(flat0, rest, h))


def logit_kernel_dense(J: np.ndarray, unembed: np.ndarray) -> np.ndarray:
    """The eNTK of all ``N V`` logits, ``(I_N (x) U) J J^T (I_N (x) U^T)``, dense ``(N V, N V)``."""
    U = np.asarray(unembed, np.float64)
    V_, d = U.shape
    N = J.shape[0] // d
    JL = np.einsum("vd,ndp->nvp", U, np.asarray(J, np.float64).reshape(N, d, -1)).reshape(N * V_, -1)
    return JL @ JL.T

