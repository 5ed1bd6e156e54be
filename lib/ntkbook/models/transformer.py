r"""The one-layer transformer of Paper B on modular addition, as pure functions over a params dict.

Task: the ``p²`` inputs are token triples ``(a, b, =)`` with ``a, b ∈ {0, …, p-1}`` and the
token ``=`` equal to ``p`` (vocabulary ``p + 1``), in a-major order (row ``n = a * p + b``, as
:func:`ntkbook.ntk.features.grid`); the label is ``(a + b) mod p``.

Model (the author's notebook ``modular_arithmetic_transformer_v4.ipynb``: no LayerNorm, no biases)

.. math::

   x_s &= W_E[t_s] + W_{pos}[s], \qquad s = 0, 1, 2, \\
   q_s^n = W_Q^n x_s,\quad k_s^n &= W_K^n x_s,\quad v_s^n = W_V^n x_s \quad\text{(head } n\text{)}, \\
   A^n_{st} &= \operatorname{softmax}_{t \le s}\big(q_s^n \cdot k_t^n / \sqrt{d_{head}}\big), \\
   x_s &\leftarrow x_s + W_O\, \big[\textstyle\sum_t A^n_{st} v_t^n\big]_{n}, \\
   x_s &\leftarrow x_s + W_{out}^\top\, \mathrm{relu}(W_{in}^\top x_s), \\
   f(t) &= W_U^\top x_2 \in \mathbb R^{p+1}.

Parameter shapes follow the author's torch parameters: ``W_E`` (V, d), ``W_pos`` (3, d),
``W_Q``/``W_K``/``W_V`` (H, d_head, d), ``W_O`` (d, H·d_head), ``W_in`` (d, d_mlp), ``W_out``
(d_mlp, d), ``W_U`` (d, V).  Training uses the cross-entropy of the first ``p`` logits (the ``=``
logit is computed but never a target); the eNTK uses all ``p + 1`` logits, as the author does.

Only position 2 is read out.  Its query attends to all three positions (the causal mask only
restricts positions 0 and 1, whose outputs are not used), and the MLP acts position-wise, so
:func:`apply` computes attention for query 2 and the MLP at position 2 only;
:func:`apply_all_positions` computes every position with the causal mask (the author's literal
forward pass) and is checked against it in the tests.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "PARAM_NAMES",
    "Shape",
    "init",
    "apply",
    "apply_all_positions",
    "hidden",
    "dataset",
    "split",
    "cross_entropy",
    "accuracy",
    "param_shapes",
]

#: the nine parameter tensors, in the author's order (also the eNTK's parameter groups)
PARAM_NAMES = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U")


@dataclasses.dataclass(frozen=True)
class Shape:
    """Sizes of the model. ``vocab = p + 1`` (the ``=`` token is ``p``)."""

    p: int = 29
    d_model: int = 64
    n_heads: int = 4
    d_head: int = 16
    d_mlp: int = 256

    @property
    def vocab(self) -> int:
        return self.p + 1


def param_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Shape of each parameter tensor (the author's torch layout)."""
    V, d, H, dh, m = shape.vocab, shape.d_model, shape.n_heads, shape.d_head, shape.d_mlp
    return {"W_E": (V, d), "W_pos": (3, d), "W_Q": (H, dh, d), "W_K": (H, dh, d),
            "W_V": (H, dh, d), "W_O": (d, H * dh), "W_in": (d, m), "W_out": (m, d), "W_U": (d, V)}


def init(key: jax.Array, shape: Shape = Shape(), dtype=jnp.float32) -> dict[str, jax.Array]:
    """The author's initialisation: N(0, 1) entries divided by √d_model for ``W_E``, ``W_pos``,
    ``W_Q``, ``W_K``, ``W_V``, ``W_O`` and ``W_out``, by √d_mlp for ``W_in`` and by √vocab for
    ``W_U``.  (Only the distribution matches the author's; his exact draws are in
    :func:`ntkbook.data.load_transformer_replay`.)"""
    shapes = param_shapes(shape)
    scale = {name: 1.0 / math.sqrt(shape.d_model) for name in PARAM_NAMES}
    scale["W_in"] = 1.0 / math.sqrt(shape.d_mlp)
    scale["W_U"] = 1.0 / math.sqrt(shape.vocab)
    keys = jax.random.split(key, len(PARAM_NAMES))
    return {name: scale[name] * jax.random.normal(k, shapes[name], dtype=dtype)
            for name, k in zip(PARAM_NAMES, keys)}


def _check_params(params) -> None:
    missing = [n for n in PARAM_NAMES if n not in params]
    if missing:
        raise InputError(f"params lacks {missing}; expected the keys {PARAM_NAMES}")


_HI = jax.lax.Precision.HIGHEST


def _embed(params, tokens):
    return params["W_E"][tokens] + params["W_pos"]  # (3, d)


def hidden(params, tokens) -> dict[str, jax.Array]:
    """Intermediate values of ONE example ``tokens`` (3,) at the read-out position 2.

    ``resid0`` (d,) the embedding, ``pattern`` (H, 3) the attention of query 2, ``resid1`` (d,)
    after attention, ``mlp`` (d_mlp,) the ReLU activations, ``resid2`` (d,) the final residual
    stream, ``logits`` (V,) = ``W_U^T resid2``.
    """
    x = _embed(params, tokens)
    dh = params["W_Q"].shape[1]
    q = jnp.einsum("nhm,m->nh", params["W_Q"], x[2], precision=_HI)
    k = jnp.einsum("nhm,sm->snh", params["W_K"], x, precision=_HI)
    v = jnp.einsum("nhm,sm->snh", params["W_V"], x, precision=_HI)
    scores = jnp.einsum("nh,snh->ns", q, k, precision=_HI) / math.sqrt(dh)
    pattern = jax.nn.softmax(scores, axis=-1)  # (H, 3): query 2 sees positions 0, 1, 2
    z = jnp.einsum("ns,snh->nh", pattern, v, precision=_HI).reshape(-1)
    resid1 = x[2] + jnp.matmul(params["W_O"], z, precision=_HI)
    act = jax.nn.relu(jnp.matmul(resid1, params["W_in"], precision=_HI))
    resid2 = resid1 + jnp.matmul(act, params["W_out"], precision=_HI)
    logits = jnp.matmul(resid2, params["W_U"], precision=_HI)
    return {"resid0": x[2], "pattern": pattern, "resid1": resid1, "mlp": act, "resid2": resid2,
            "logits": logits}


def apply(params, tokens) -> jax.Array:
    """Logits ``(V,)`` at position 2 of ONE example ``tokens`` (3,) (the eNTK engine's
    convention; ``jax.vmap`` it over a batch)."""
    return hidden(params, tokens)["logits"]


def apply_all_positions(params, tokens) -> jax.Array:
    """Logits ``(3, V)`` at every position, with the causal mask: the author's forward pass."""
    x = _embed(params, tokens)
    dh = params["W_Q"].shape[1]
    q = jnp.einsum("nhm,sm->snh", params["W_Q"], x, precision=_HI)
    k = jnp.einsum("nhm,sm->snh", params["W_K"], x, precision=_HI)
    v = jnp.einsum("nhm,sm->snh", params["W_V"], x, precision=_HI)
    scores = jnp.einsum("qnh,knh->nqk", q, k, precision=_HI) / math.sqrt(dh)
    causal = jnp.triu(jnp.ones((3, 3), dtype=bool), k=1)
    scores = jnp.where(causal[None], -jnp.inf, scores)
    pattern = jax.nn.softmax(scores, axis=-1)
    z = jnp.einsum("nqk,knh->qnh", pattern, v, precision=_HI).reshape(3, -1)
    x = x + jnp.einsum("mn,sn->sm", params["W_O"], z, precision=_HI)
    x = x + jnp.matmul(jax.nn.relu(jnp.matmul(x, params["W_in"], precision=_HI)), params["W_out"],
                       precision=_HI)
    return jnp.matmul(x, params["W_U"], precision=_HI)


def dataset(p: int) -> tuple[np.ndarray, np.ndarray]:
    """All ``p²`` token triples ``(a, b, p)`` (int64, a-major order) and their labels ``(a+b) mod p``."""
    if p < 2:
        raise InputError(f"p must be at least 2, got {p}")
    a, b = np.divmod(np.arange(p * p), p)
    x = np.stack([a, b, np.full_like(a, p)], axis=1).astype(np.int64)
    return x, (a + b) % p


def split(p: int, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random split of the ``p²`` pairs: ``(train_idx, test_idx)`` into :func:`dataset`'s rows.

    ``floor(train_fraction * p²)`` training pairs (the author's rounding: 420 of 841 at 0.5),
    drawn with numpy's ``default_rng(seed)``; both index arrays sorted.
    """
    if not 0.0 < train_fraction < 1.0:
        raise InputError(f"train_fraction must lie in (0, 1), got {train_fraction}")
    n = p * p
    n_train = int(train_fraction * n)
    if not 0 < n_train < n:
        raise InputError(f"train_fraction={train_fraction} leaves an empty train or test set at p={p}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def rows_of(tokens: np.ndarray, p: int) -> np.ndarray:
    """Row index ``a * p + b`` in :func:`dataset` of each triple ``(a, b, =)``."""
    tokens = np.asarray(tokens)
    return tokens[:, 0] * p + tokens[:, 1]


def cross_entropy(logits: jax.Array, labels: jax.Array, p: int) -> jax.Array:
    """Mean cross-entropy of the first ``p`` logits (the author's loss): logits (B, V), labels (B,)."""
    z = logits[:, :p]
    logp = z - jax.scipy.special.logsumexp(z, axis=-1, keepdims=True)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def accuracy(logits: jax.Array, labels: jax.Array, p: int) -> jax.Array:
    """Fraction of examples whose largest of the first ``p`` logits is the label."""
    return jnp.mean(jnp.argmax(logits[:, :p], axis=-1) == labels)


__all__.append("rows_of")
