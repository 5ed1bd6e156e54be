r"""The two-layer ReLU network of the book and its closed-form empirical NTK, defined once.

The network, in NTK parameterisation, with ``C`` outputs (``C = 1``: one output):

.. math:: f_c(x) = \frac{1}{\sqrt m}\sum_{r=1}^m a_{rc}\,\mathrm{relu}(w_r\cdot x), \qquad
          w_r \sim \mathcal N(0, I_d), \quad a_{rc} = \pm 1 .

Parameters are ``{"W": (m, d), "a": (m,)}`` (one output) or ``{"W": (m, d), "a": (m, C)}``
(:func:`init_heads`). Where only ``W`` is trained (Paper A, the width and influence chapters) ``a``
stays fixed; the eNTK chapter trains both.

Three initialisations:

* :func:`init` with ``symmetric=True``: the second half of the neurons copies the first half's ``w``
  with the opposite ``a``, so :math:`f \equiv 0` at initialisation (the "doubling trick"), and the
  empirical NTK is an average over ``m/2`` independent neurons;
* :func:`init` with ``symmetric=False``: independent rows of ``W`` and independent signs ``a``;
* :func:`init_heads`: symmetric, with ``C`` independent random head signs per neuron.

Forward passes: :func:`apply` for ONE input (shape ``(1,)``, the per-example convention of
:mod:`ntkbook.ntk.entk`), :func:`apply_batch` for a batch (``(N,)`` or ``(N, C)``), which also gives
the network's own linearisation around ``W0`` (``pattern``, see :func:`activation_pattern`) and
the network on inputs split into a trained span and a frozen complement (``offset``).

Because ``W`` enters only through ``w_r . x``, the empirical NTK with respect to ``W`` has the closed
form (:func:`entk_W`)

.. math:: \hat\Theta(x, x') = (x\cdot x')\;\frac1m\sum_r a_r^2\,\mathbf 1[w_r\cdot x>0]\,\mathbf 1[w_r\cdot x'>0],

whose infinite-width limit is :func:`ntk` (``ntkbook.ntk.kernels.relu_ntk(..., trainable="W")``).

Every JAX matmul runs at ``jax.lax.Precision.HIGHEST`` (:data:`PRECISION`); the closed-form kernels
are float64 NumPy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "PRECISION",
    "init",
    "init_heads",
    "apply",
    "apply_batch",
    "activation_pattern",
    "entk_W",
    "ntk",
]

#: matmul precision of every forward pass (full float32 on accelerators that would otherwise round)
PRECISION = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------------------------------
# initialisation
# --------------------------------------------------------------------------------------------------
def init(key, d: int, m: int, *, symmetric: bool = True, dtype=jnp.float32):
    """Parameters ``{"W": (m, d), "a": (m,)}``, ``W ~ N(0, 1)`` and ``a = +-1``.

    ``symmetric=True`` needs an even ``m``: rows ``m/2..m-1`` of ``W`` copy rows ``0..m/2-1`` and
    ``a = (+1, ..., +1, -1, ..., -1)``, so the network outputs exactly 0 at initialisation.
    ``symmetric=False`` draws independent rows and independent random signs (Rademacher).
    """
    if symmetric:
        if m % 2:
            raise InputError(f"symmetric initialisation needs an even width, got m={m}")
        W = jax.random.normal(key, (m // 2, d), dtype)
        W = jnp.concatenate([W, W], axis=0)
        a = jnp.concatenate([jnp.ones(m // 2, dtype), -jnp.ones(m // 2, dtype)])
    else:
        kw, ka = jax.random.split(key)
        W = jax.random.normal(kw, (m, d), dtype)
        a = jax.random.rademacher(ka, (m,), dtype)
    return {"W": W, "a": a}


def init_heads(key, d: int, m: int, C: int, *, dtype=jnp.float32):
    r"""Parameters ``{"W": (m, d), "a": (m, C)}`` of the ``C``-output network with fixed heads
    ``a_rc = +-1`` (random signs), symmetric: rows ``m/2..m-1`` copy ``W``'s first half with the
    opposite heads, so ``f = 0`` at initialisation. ``C = 1`` is the network of :func:`init` with
    random instead of constant head signs on the first half.
    """
    if m % 2:
        raise InputError(f"symmetric initialisation needs an even width, got m={m}")
    if C < 1:
        raise InputError(f"C must be >= 1, got {C}")
    kw, ka = jax.random.split(key)
    W = jax.random.normal(kw, (m // 2, d), dtype)
    A = jnp.where(jax.random.bernoulli(ka, 0.5, (m // 2, C)), 1.0, -1.0).astype(dtype)
    return {"W": jnp.concatenate([W, W], axis=0), "a": jnp.concatenate([A, -A], axis=0)}


# --------------------------------------------------------------------------------------------------
# forward passes
# --------------------------------------------------------------------------------------------------
def apply(params, x):
    r""":math:`f(x) = m^{-1/2} \sum_r a_r \mathrm{relu}(w_r \cdot x)` for ONE input ``x`` ``(d,)``;
    returns shape ``(1,)`` (the per-example convention of :mod:`ntkbook.ntk.entk`)."""
    W, a = params["W"], params["a"]
    h = jax.nn.relu(jnp.matmul(W, x, precision=PRECISION))
    return (jnp.dot(a, h, precision=PRECISION) / jnp.sqrt(W.shape[0]))[None]


def apply_batch(params, x, *, pattern=None, offset=None):
    """Outputs ``(N,)`` (``a`` of shape ``(m,)``) or ``(N, C)`` (``a`` of shape ``(m, C)``) for a
    batch ``x`` ``(N, d)``, one matmul per layer.

    ``pattern`` ``(N, m)``: the activation pattern ``1[x W0^T > 0]`` of :func:`activation_pattern`
    frozen at ``W0``; the hidden layer is then ``(x W^T) * pattern`` instead of ``relu(x W^T)``, the
    network's own linearisation around ``W0`` (since ``relu`` is positively homogeneous,
    ``f(W0) + <grad f(W0), W - W0>`` equals it exactly). ``offset`` ``(N, m)`` or scalar: added to the
    pre-activations ``x W^T`` (the part of them from input directions whose weights are frozen).
    """
    W, a = params["W"], params["a"]
    pre = jnp.matmul(x, W.T, precision=PRECISION)
    if offset is not None:
        pre = pre + offset
    h = jax.nn.relu(pre) if pattern is None else pre * pattern
    return jnp.matmul(h, a, precision=PRECISION) / jnp.sqrt(W.shape[0])


def activation_pattern(W, x, dtype=jnp.float32):
    """``1[x W^T > 0]`` as ``(N, m)`` floats of ``dtype``."""
    return (jnp.matmul(x, W.T, precision=PRECISION) > 0).astype(dtype)


# --------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------
def entk_W(params, x1, x2=None):
    r"""Closed-form empirical NTK with respect to ``W``, float64 NumPy ``(N1, N2)``:
    :math:`(x\cdot x')\,\frac1m\sum_r a_r^2\,\mathbf 1[w_r\cdot x>0]\,\mathbf 1[w_r\cdot x'>0]`.

    With ``C`` heads (``a`` of shape ``(m, C)``, all ``a_rc = +-1``, :func:`init_heads`) every output
    has this same class-diagonal block, which is returned; the off-diagonal blocks ``c != c'`` carry
    the factor ``a_rc a_rc'`` and are not.
    """
    W = np.asarray(params["W"], dtype=np.float64)
    a = np.asarray(params["a"], dtype=np.float64)
    if a.ndim == 2:
        if not np.all(np.abs(a) == 1.0):
            raise InputError("entk_W with several heads needs head weights of +-1")
        a = np.ones(a.shape[0])
    x1 = np.asarray(x1, dtype=np.float64)
    x2 = x1 if x2 is None else np.asarray(x2, dtype=np.float64)
    s1 = (x1 @ W.T > 0) * a  # a_r relu'(w_r . x)
    s2 = s1 if x2 is x1 else (x2 @ W.T > 0) * a
    return (x1 @ x2.T) * (s1 @ s2.T) / W.shape[0]


def ntk(x1, x2=None):
    """Analytic infinite-width NTK (``W`` trained, ``a`` fixed), float64 NumPy ``(N1, N2)``:
    ``ntkbook.ntk.kernels.relu_ntk(x1, x2, trainable="W")``.

    For MLP-Attn pass the attention-transformed inputs (:func:`ntkbook.models.attention.transform`):
    the NTK of the cascade is the ReLU NTK evaluated on them. ``x2=None`` gives the symmetric
    train-train kernel with an exact diagonal.
    """
    from ntkbook.ntk.kernels import relu_ntk

    with jax.enable_x64(True):
        a = jnp.asarray(np.asarray(x1, dtype=np.float64))
        b = None if x2 is None else jnp.asarray(np.asarray(x2, dtype=np.float64))
        return np.asarray(relu_ntk(a, b, trainable="W"), dtype=np.float64)
