r"""Gemma-3 decoder in pure JAX: the architecture of Gemma-3-270M, layers stacked and run with ``lax.scan``.

Parameters are a dict of arrays (weights in PyTorch's ``(out, in)`` layout, so a linear map is
``x @ W.T``)::

    embed        (V, d)             token embedding; also the unembedding (tied weights)
    final_norm   (d,)               RMSNorm scale of the output norm
    layers/      every leaf stacked over the L layers (leading axis L):
      attn_norm (L, d)   q (L, H*hd, d)   k (L, Hkv*hd, d)   v (L, Hkv*hd, d)   o (L, d, H*hd)
      q_norm (L, hd)     k_norm (L, hd)   post_attn_norm (L, d)
      ffn_norm (L, d)    gate (L, F, d)   up (L, F, d)       down (L, d, F)    post_ffn_norm (L, d)

RMSNorm scales are *multiplied* as stored: the GGUF file already stores Gemma's ``1 + w`` (see
:mod:`ntkbook.gemma.weights`), and the random test model draws scales near 1.

One layer (pre- and post-norms on both sub-blocks, as in Gemma-3)::

    a = o(attn(rope(qnorm(q(n1(h)))), rope(knorm(k(n1(h)))), v(n1(h))));  h = h + n2(a)
    m = down(gelu_tanh(gate(n3(h))) * up(n3(h)));                        h = h + n4(m)

Every ``global_every``-th layer (5, 11, 17 of 18) attends globally with RoPE base
``rope_global_base``; the others are local: sliding window ``sliding_window`` and RoPE base
``rope_local_base``.  The output of the model at a position is ``final_norm(h)`` (the "hidden
state" ``f`` in the chapter); logits are ``f @ embed.T`` (no soft-capping in Gemma-3).

Residual streams: ``residual(params, cfg, ids, L)`` is the input to layer ``L`` (``L = 0``: the
scaled embedding; ``L = n_layers``: the output of the last layer before the final norm), and
``forward_from(params, cfg, h, L)`` runs layers ``L..n_layers-1`` from it, so an operator at layer
``L`` never reruns the layers below.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "GemmaConfig",
    "LAYER_KEYS",
    "init_params",
    "residual",
    "forward_from",
    "run_layer",
    "hidden",
    "logits",
    "last_hidden",
    "greedy_generate",
    "num_params",
    "check_layer",
    "check_ids",
]

#: the per-layer parameter names, in file order
LAYER_KEYS = ("attn_norm", "q", "k", "v", "o", "q_norm", "k_norm", "post_attn_norm",
              "ffn_norm", "gate", "up", "down", "post_ffn_norm")


@dataclasses.dataclass(frozen=True)
class GemmaConfig:
    """Hyper-parameters of a Gemma-3 decoder.

    The first block is read from the GGUF metadata (``gemma3.*`` keys).  The second block are
    Gemma-3 constants that the GGUF metadata does not carry (from the Gemma-3 technical report and
    reference implementation): local RoPE base 10^4, one global layer every 6, attention scale
    ``head_dim^-1/2`` (``query_pre_attn_scalar = head_dim`` for the 270M model), the embedding
    multiplied by ``sqrt(d_model)``, and no final-logit soft-capping.
    """

    vocab_size: int = 262144
    d_model: int = 640
    n_layers: int = 18
    d_ff: int = 2048
    n_heads: int = 4
    n_kv_heads: int = 1
    head_dim: int = 256
    rms_eps: float = 1e-6
    rope_global_base: float = 1e6
    sliding_window: int = 512
    max_context: int = 32768
    # --- not in the GGUF metadata: Gemma-3 constants ---
    rope_local_base: float = 1e4
    global_every: int = 6
    query_pre_attn_scalar: float = 256.0

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise InputError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.d_model)

    @property
    def global_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n_layers) if (i + 1) % self.global_every == 0)

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> "GemmaConfig":
        """Config from the ``gemma3.*`` metadata of a GGUF file (a dict key -> value)."""
        def get(key):
            full = f"gemma3.{key}"
            if full not in meta:
                raise KeyError(f"GGUF metadata lacks {full!r}: is this a Gemma-3 file?")
            return meta[full]
        if meta.get("general.architecture") != "gemma3":
            raise InputError(f"expected a gemma3 GGUF, got architecture {meta.get('general.architecture')!r}")
        if int(get("attention.key_length")) != int(get("attention.value_length")):
            raise InputError("key and value head sizes differ; not supported")
        head_dim = int(get("attention.key_length"))
        return cls(
            vocab_size=int(meta["vocab_size"]),
            d_model=int(get("embedding_length")),
            n_layers=int(get("block_count")),
            d_ff=int(get("feed_forward_length")),
            n_heads=int(get("attention.head_count")),
            n_kv_heads=int(get("attention.head_count_kv")),
            head_dim=head_dim,
            rms_eps=float(f"{float(get('attention.layer_norm_rms_epsilon')):.6g}"),  # stored as float32
            rope_global_base=float(get("rope.freq_base")),
            sliding_window=int(get("attention.sliding_window")),
            max_context=int(get("context_length")),
            query_pre_attn_scalar=float(head_dim),
        )

    @classmethod
    def tiny(cls) -> "GemmaConfig":
        """A small random-weight model of the same code for tests (3 layers, one global)."""
        return cls(vocab_size=97, d_model=16, n_layers=3, d_ff=24, n_heads=2, n_kv_heads=1,
                   head_dim=8, sliding_window=4, max_context=64, global_every=3,
                   query_pre_attn_scalar=8.0)


def layer_shapes(cfg: GemmaConfig) -> dict[str, tuple[int, ...]]:
    d, hd, F = cfg.d_model, cfg.head_dim, cfg.d_ff
    return {
        "attn_norm": (d,), "q": (cfg.n_heads * hd, d), "k": (cfg.n_kv_heads * hd, d),
        "v": (cfg.n_kv_heads * hd, d), "o": (d, cfg.n_heads * hd), "q_norm": (hd,),
        "k_norm": (hd,), "post_attn_norm": (d,), "ffn_norm": (d,), "gate": (F, d), "up": (F, d),
        "down": (d, F), "post_ffn_norm": (d,),
    }


def num_params(params) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


def init_params(cfg: GemmaConfig, key: jax.Array, dtype=jnp.float32) -> dict:
    """Random weights (for tests): linear maps ~ N(0, 1/fan_in), norm scales ~ 1 + N(0, 0.1^2)."""
    shapes = layer_shapes(cfg)
    keys = jax.random.split(key, len(shapes) + 2)
    layers = {}
    for kk, (name, shape) in zip(keys[2:], shapes.items()):
        full = (cfg.n_layers, *shape)
        if len(shape) == 1:
            layers[name] = 1.0 + 0.1 * jax.random.normal(kk, full, dtype)
        else:
            layers[name] = jax.random.normal(kk, full, dtype) / math.sqrt(shape[1])
    return {
        "embed": jax.random.normal(keys[0], (cfg.vocab_size, cfg.d_model), dtype) / math.sqrt(cfg.d_model),
        "final_norm": 1.0 + 0.1 * jax.random.normal(keys[1], (cfg.d_model,), dtype),
        "layers": layers,
    }


# --------------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------------
def rms_norm(x, scale, eps):
    """``x / rms(x) * scale`` over the last axis (the scale is Gemma's ``1 + w``, as stored)."""
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(var + eps) * scale


def _rope_tables(T: int, head_dim: int, base: float):
    inv = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, hd/2)
    return np.cos(ang), np.sin(ang)  # float64; cast to the activations' dtype where used


def _apply_rope(x, cos, sin):
    """Rotate-half RoPE. x (..., T, heads, hd); cos/sin (T, hd/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :].astype(x.dtype), sin[:, None, :].astype(x.dtype)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _masks(T: int, window: int):
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    causal = j <= i
    return causal, causal & (j > i - window)


def _qkv(lp, x, cfg: GemmaConfig, cos, sin):
    """Normed, rotated queries (T, H, hd) and keys (T, Hkv, hd), and values (T, Hkv, hd)."""
    T = x.shape[0]
    hd, H, Hkv, eps = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.rms_eps
    hp = jax.lax.Precision.HIGHEST
    q = jnp.matmul(x, lp["q"].T, precision=hp).reshape(T, H, hd)
    k = jnp.matmul(x, lp["k"].T, precision=hp).reshape(T, Hkv, hd)
    v = jnp.matmul(x, lp["v"].T, precision=hp).reshape(T, Hkv, hd)
    q = rms_norm(q, lp["q_norm"], eps)
    k = rms_norm(k, lp["k_norm"], eps)
    return _apply_rope(q, cos, sin), _apply_rope(k, cos, sin), v


def _attend(lp, h, q, k, v, mask, cfg: GemmaConfig):
    """Attention of queries q (T, H, hd) over keys/values (S, Hkv, hd) with mask (T, S), then the
    output projection, post-norm and residual add, then the MLP block.  Returns h (T, d)."""
    T, H, hd, eps = q.shape[0], cfg.n_heads, cfg.head_dim, cfg.rms_eps
    hp = jax.lax.Precision.HIGHEST
    rep = H // cfg.n_kv_heads
    k = jnp.repeat(k, rep, axis=1)
    v = jnp.repeat(v, rep, axis=1)
    scores = jnp.einsum("thd,shd->hts", q, k, precision=hp) * (cfg.query_pre_attn_scalar ** -0.5)
    scores = jnp.where(mask[None], scores, jnp.finfo(scores.dtype).min)
    w = jax.nn.softmax(scores, axis=-1)
    a = jnp.einsum("hts,shd->thd", w, v, precision=hp).reshape(T, H * hd)
    a = jnp.matmul(a, lp["o"].T, precision=hp)
    h = h + rms_norm(a, lp["post_attn_norm"], eps)
    x = rms_norm(h, lp["ffn_norm"], eps)
    g = jax.nn.gelu(jnp.matmul(x, lp["gate"].T, precision=hp), approximate=True)
    u = jnp.matmul(x, lp["up"].T, precision=hp)
    m = jnp.matmul(g * u, lp["down"].T, precision=hp)
    return h + rms_norm(m, lp["post_ffn_norm"], eps)


def _rope_for(T: int, cfg: GemmaConfig, is_global, dtype):
    cg, sg = _rope_tables(T, cfg.head_dim, cfg.rope_global_base)
    cl, sl = _rope_tables(T, cfg.head_dim, cfg.rope_local_base)
    cos = jnp.where(is_global, jnp.asarray(cg, dtype), jnp.asarray(cl, dtype))
    sin = jnp.where(is_global, jnp.asarray(sg, dtype), jnp.asarray(sl, dtype))
    return cos, sin


def run_layer(lp: Mapping[str, jax.Array], h: jax.Array, cfg: GemmaConfig, is_global,
              *, return_kv: bool = False):
    """One decoder layer. ``lp``: that layer's parameters (no leading layer axis); ``h`` (T, d).
    With ``return_kv`` also the layer's rotated keys and values (T, Hkv, hd) (a decoding cache)."""
    T = h.shape[0]
    cos, sin = _rope_for(T, cfg, is_global, h.dtype)
    q, k, v = _qkv(lp, rms_norm(h, lp["attn_norm"], cfg.rms_eps), cfg, cos, sin)
    causal, local = _masks(T, cfg.sliding_window)
    out = _attend(lp, h, q, k, v, jnp.where(is_global, causal, local), cfg)
    return (out, (k, v)) if return_kv else out


def _is_global(cfg: GemmaConfig) -> np.ndarray:
    return np.array([(i + 1) % cfg.global_every == 0 for i in range(cfg.n_layers)])


def check_layer(cfg: GemmaConfig, L: int, *, allow_end: bool = True) -> int:
    """``L`` as an int, checked to be a layer index of ``cfg`` (``L = n_layers``, the output of the
    last layer, allowed with ``allow_end``); ``InputError`` otherwise."""
    top = cfg.n_layers if allow_end else cfg.n_layers - 1
    if not isinstance(L, (int, np.integer)) or not (0 <= int(L) <= top):
        raise InputError(f"layer index must be an integer in [0, {top}] for this {cfg.n_layers}-layer "
                         f"model, got {L!r}")
    return int(L)


def check_ids(cfg: GemmaConfig, ids) -> jax.Array:
    """``ids`` as a JAX array, checked to be one non-empty sequence of token ids in the window."""
    ids = jnp.asarray(ids)
    if ids.ndim != 1:
        raise InputError(f"token ids must be one sequence of shape (T,), got shape {ids.shape}; "
                         f"vmap over a batch")
    if ids.shape[0] == 0:
        raise InputError("empty token sequence")
    if ids.shape[0] > cfg.max_context:
        raise InputError(f"context of {ids.shape[0]} tokens is longer than the model's window of "
                         f"{cfg.max_context}; truncate it (keep the last {cfg.max_context} tokens)")
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise InputError(f"token ids must be integers, got {ids.dtype}")
    return ids


def _run_range(layers, h, cfg: GemmaConfig, start: int, stop: int):
    if stop <= start:
        return h
    sub = jax.tree_util.tree_map(lambda x: x[start:stop], layers)
    flags = jnp.asarray(_is_global(cfg)[start:stop])

    def body(h, xs):
        lp, g = xs
        return run_layer(lp, h, cfg, g), None

    h, _ = jax.lax.scan(body, h, (sub, flags))
    return h


def residual(params, cfg: GemmaConfig, ids, L: int) -> jax.Array:
    """The residual stream entering layer ``L`` (0 <= L <= n_layers), shape (T, d)."""
    L = check_layer(cfg, L)
    ids = check_ids(cfg, ids)
    h = params["embed"][ids] * jnp.asarray(cfg.embed_scale, params["embed"].dtype)
    return _run_range(params["layers"], h, cfg, 0, L)


def forward_from(params, cfg: GemmaConfig, h, L: int, *, layer_L: Mapping[str, jax.Array] | None = None):
    """Run layers ``L..n_layers-1`` from the residual ``h`` (T, d) entering layer ``L``; returns the
    final-normed hidden states (T, d).  ``layer_L`` replaces layer ``L``'s parameters (a dict with
    some or all of :data:`LAYER_KEYS`): the function an operator at layer ``L`` differentiates."""
    L = check_layer(cfg, L)
    if h.ndim != 2 or h.shape[-1] != cfg.d_model:
        raise InputError(f"residual must have shape (T, {cfg.d_model}), got {h.shape}")
    if h.shape[0] > cfg.max_context:
        raise InputError(f"context of {h.shape[0]} tokens is longer than the model's window of {cfg.max_context}")
    layers = params["layers"]
    if layer_L is not None:
        if L == cfg.n_layers:
            raise InputError("layer_L given but L = n_layers (no layer to replace)")
        lp = {k: v[L] for k, v in layers.items()}
        unknown = set(layer_L) - set(lp)
        if unknown:
            raise KeyError(f"unknown layer parameters {sorted(unknown)}; known: {LAYER_KEYS}")
        lp.update(layer_L)
        h = run_layer(lp, h, cfg, bool(_is_global(cfg)[L]))
        h = _run_range(layers, h, cfg, L + 1, cfg.n_layers)
    else:
        h = _run_range(layers, h, cfg, L, cfg.n_layers)
    return rms_norm(h, params["final_norm"], cfg.rms_eps)


def hidden(params, cfg: GemmaConfig, ids) -> jax.Array:
    """Final-normed hidden states (T, d) of the token ids (T,)."""
    return forward_from(params, cfg, residual(params, cfg, ids, 0), 0)


def last_hidden(params, cfg: GemmaConfig, ids) -> jax.Array:
    """Final-normed hidden state at the last position, (d,)."""
    return hidden(params, cfg, ids)[-1]


def logits(params, cfg: GemmaConfig, ids) -> jax.Array:
    """Next-token logits (T, V) (tied unembedding)."""
    return jnp.matmul(hidden(params, cfg, ids), params["embed"].T, precision=jax.lax.Precision.HIGHEST)


def prefill(params, cfg: GemmaConfig, ids, total: int):
    """Forward over ``ids`` (T,) keeping every layer's keys and values in caches of length ``total``.

    Returns (final-normed hidden state at the last position (d,), keys, values), the caches of
    shape (n_layers, total, Hkv, hd) with positions >= T zero."""
    h = params["embed"][ids] * jnp.asarray(cfg.embed_scale, params["embed"].dtype)
    flags = jnp.asarray(_is_global(cfg))

    def body(h, xs):
        lp, g = xs
        return run_layer(lp, h, cfg, g, return_kv=True)

    h, (K, V) = jax.lax.scan(body, h, (params["layers"], flags))
    pad = ((0, 0), (0, total - ids.shape[0]), (0, 0), (0, 0))
    return rms_norm(h[-1], params["final_norm"], cfg.rms_eps), jnp.pad(K, pad), jnp.pad(V, pad)


def decode_step(params, cfg: GemmaConfig, token, pos, K, V):
    """One token at position ``pos`` given the caches (filled below ``pos``): returns the
    final-normed hidden state (d,) and the caches with position ``pos`` written."""
    total = K.shape[1]
    h = (params["embed"][token] * jnp.asarray(cfg.embed_scale, params["embed"].dtype))[None]
    flags = jnp.asarray(_is_global(cfg))
    j = jnp.arange(total)

    def body(h, xs):
        lp, g, kc, vc = xs
        cos, sin = _rope_for(total, cfg, g, h.dtype)
        cos = jax.lax.dynamic_slice_in_dim(cos, pos, 1)
        sin = jax.lax.dynamic_slice_in_dim(sin, pos, 1)
        q, k, v = _qkv(lp, rms_norm(h, lp["attn_norm"], cfg.rms_eps), cfg, cos, sin)
        kc = jax.lax.dynamic_update_slice_in_dim(kc, k, pos, 0)
        vc = jax.lax.dynamic_update_slice_in_dim(vc, v, pos, 0)
        mask = (j <= pos) & (g | (j > pos - cfg.sliding_window))
        return _attend(lp, h, q, kc, vc, mask[None], cfg), (kc, vc)

    h, (K, V) = jax.lax.scan(body, h, (params["layers"], flags, K, V))
    return rms_norm(h[0], params["final_norm"], cfg.rms_eps), K, V


def greedy_generate(params, cfg: GemmaConfig, ids, n_new: int) -> np.ndarray:
    """Greedy continuation by ``n_new`` tokens of ``ids`` (T,) or of a batch of equal-length
    sequences (B, T); returns the new ids, (n_new,) or (B, n_new).  One forward over the prompt
    keeps the keys and values of every layer; each new token then costs one position."""
    ids = np.asarray(ids)
    single = ids.ndim == 1
    ids = ids[None] if single else ids
    if ids.ndim != 2:
        raise InputError(f"ids must be (T,) or (B, T), got shape {ids.shape}")
    B, T0 = ids.shape
    total = T0 + n_new
    check_ids(cfg, np.zeros(total, np.int32))
    first, step = _greedy_fns(cfg, total)
    tok, K, V = first(params, jnp.asarray(ids))
    out = [np.asarray(tok)]
    for s in range(1, n_new):
        tok, K, V = step(params, tok, T0 + s - 1, K, V)
        out.append(np.asarray(tok))
    out = np.stack(out, 1)
    return out[0] if single else out


@functools.lru_cache(maxsize=8)
def _greedy_fns(cfg: GemmaConfig, total: int):
    hp = jax.lax.Precision.HIGHEST

    def first(params, ids):
        f, K, V = prefill(params, cfg, ids, total)
        return jnp.argmax(jnp.matmul(params["embed"], f, precision=hp)), K, V

    def step(params, tok, pos, K, V):
        f, K, V = decode_step(params, cfg, tok, pos, K, V)
        return jnp.argmax(jnp.matmul(params["embed"], f, precision=hp)), K, V

    return (jax.jit(jax.vmap(first, in_axes=(None, 0))),
            jax.jit(jax.vmap(step, in_axes=(None, 0, None, 0, 0))))


def greedy_generate_uncached(params, cfg: GemmaConfig, ids, n_new: int) -> np.ndarray:
    """Reference for tests: greedy continuation rerunning the whole sequence at every step."""
    ids = [int(i) for i in np.asarray(ids)]
    last = _last_argmax(cfg)
    for _ in range(n_new):
        ids.append(int(last(params, jnp.asarray(ids))))
    return np.asarray(ids[-n_new:])


@functools.lru_cache(maxsize=8)
def _last_argmax(cfg: GemmaConfig):
    """The jitted greedy token after a whole sequence, one per model (a sequence length compiled
    once for every call of :func:`greedy_generate_uncached`)."""
    return jax.jit(lambda p, x: jnp.argmax(logits(p, cfg, x)[-1]))
