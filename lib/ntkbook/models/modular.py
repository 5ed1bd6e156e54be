r"""The one-hidden-layer MLP on modular addition (Paper B, after the author's notebook).

Data: all :math:`p^2` pairs :math:`(a, b)`, :math:`a, b \in \{0, \dots, p-1\}`, in *a-major* order
(row ``n = a * p + b``), label :math:`(a + b) \bmod p`, input ``one_hot(a) ⊕ one_hot(b)`` of length
``2p``.

Model (mean-field scaling, no biases, :math:`\mathcal N(0, 1)` initialisation)

.. math:: h = W_1 x / \sqrt{2p}, \qquad f(x) = W_2\, \sigma(h) / m,

with :math:`W_1 \in \mathbb R^{m \times 2p}`, :math:`W_2 \in \mathbb R^{p \times m}`, width ``m`` and
:math:`\sigma(z) = z^2` (the paper's choice) or ``relu``.  ``apply`` maps ONE example to its ``p``
outputs, the eNTK engine's convention.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "ACTIVATIONS",
    "dataset",
    "split",
    "init",
    "apply",
    "make_apply",
    "class_mean_entk_closed_form",
]

ACTIVATIONS = {
    "square": (lambda z: z * z, lambda z: 2.0 * z),
    "relu": (jax.nn.relu, lambda z: (z > 0).astype(z.dtype)),
}


def _check_activation(activation: str):
    if activation not in ACTIVATIONS:
        raise InputError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[activation]


def dataset(p: int, dtype=np.float64):
    """All ``p**2`` examples: ``(x (p², 2p), labels (p²,), a (p²,), b (p²,))``, a-major order."""
    if p < 2:
        raise InputError(f"p must be at least 2, got {p}")
    a, b = np.divmod(np.arange(p * p), p)
    x = np.zeros((p * p, 2 * p), dtype=dtype)
    x[np.arange(p * p), a] = 1.0
    x[np.arange(p * p), p + b] = 1.0
    return x, (a + b) % p, a, b


def split(p: int, train_fraction: float, seed: int):
    """Random train/test split of the ``p**2`` pairs: ``(train_idx, test_idx)``, each sorted.

    ``round(train_fraction * p**2)`` training pairs, drawn without replacement with numpy's
    ``default_rng(seed)``.
    """
    if not 0.0 < train_fraction < 1.0:
        raise InputError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n = p * p
    n_train = int(round(train_fraction * n))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def init(key, p: int, width: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """``{"W1": (width, 2p), "W2": (p, width)}``, entries i.i.d. N(0, 1)."""
    k1, k2 = jax.random.split(key)
    return {
        "W1": jax.random.normal(k1, (width, 2 * p), dtype=dtype),
        "W2": jax.random.normal(k2, (p, width), dtype=dtype),
    }


def apply(params, x, activation: str = "square"):
    """Outputs ``(p,)`` of the network for ONE input ``x`` of shape ``(2p,)``."""
    act, _ = _check_activation(activation)
    w1, w2 = params["W1"], params["W2"]
    hi = jax.lax.Precision.HIGHEST
    h = jnp.dot(w1, x, precision=hi) / math.sqrt(w1.shape[1])
    return jnp.dot(w2, act(h), precision=hi) / w1.shape[0]


def make_apply(activation: str = "square"):
    """``f(params, x) -> (p,)`` with the activation fixed (what :mod:`ntkbook.ntk.entk` expects)."""
    _check_activation(activation)

    def f(params, x):
        return apply(params, x, activation)

    return f


def class_mean_entk_closed_form(params, x, activation: str = "square") -> np.ndarray:
    r"""The class-mean eNTK of this model in closed form, ``(N, N)`` (an independent check).

    With :math:`H = X W_1^\top/\sqrt{2p}` (N x m) and :math:`s_j = \frac1C\sum_c W_{2,cj}^2`:

    .. math:: K = \frac{1}{m^2}\Big[\sigma(H)\sigma(H)^\top
              + \frac{1}{2p}\,(X X^\top) \odot \big(\sigma'(H)\,\mathrm{diag}(s)\,\sigma'(H)^\top\big)\Big].

    The first term is the second layer's kernel, the second the first layer's.
    """
    act, dact = _check_activation(activation)
    w1 = np.asarray(params["W1"], dtype=np.float64)
    w2 = np.asarray(params["W2"], dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    m, d = w1.shape
    h = x @ w1.T / math.sqrt(d)
    s = np.mean(w2**2, axis=0)
    sh = np.asarray(act(h))
    dh = np.asarray(dact(h))
    k2 = sh @ sh.T
    k1 = (x @ x.T) * ((dh * s) @ dh.T) / d
    return (k1 + k2) / m**2
