r"""Linear attention, MLP-Attn and 2L-ReLU (Paper A), as pure functions.

Parameter-free transductive linear attention
--------------------------------------------
Over a training set :math:`X \in \mathbb{R}^{n\times d}` (one example per row), scaled dot-product
attention with identity query/key/value projections and the softmax linearised
(:math:`e^s \approx 1 + s`, dropping the constant) maps the training set to

.. math:: \mathrm{att}(X) = X X^\top X ,

so training point :math:`x_j` becomes :math:`\tilde x_j = \sum_i (x_j\cdot x_i)\, x_i`, its row of
:math:`X X^\top X`. A *test* point :math:`x` is treated as one more query attending to the training
set (keys and values are the training points, never other test points):

.. math:: \tilde x = \sum_i (x\cdot x_i)\, x_i = X^\top X\, x ,

which reduces to the row of :math:`X X^\top X` when ``x`` is a training point. Afterwards the rows
are optionally l2-normalised (``normalize="row"``, Paper A's choice), divided by one global constant
(``"global"``: the root-mean-square norm of the transformed *training* rows, which changes no ratio
of eigenvalues) or left alone (``"none"``).

Two-layer ReLU network (NTK parameterisation)
---------------------------------------------
:math:`f(x) = \frac{1}{\sqrt m}\sum_{r=1}^m a_r\,\mathrm{relu}(w_r\cdot x)` with
:math:`w_r \sim \mathcal N(0, I_d)` trained and :math:`a_r \in \{\pm1\}` fixed. With
``symmetric=True`` (default) the second half of the neurons copies the first half's ``w`` with the
opposite ``a``, so :math:`f \equiv 0` at initialisation (the "doubling trick"); the empirical NTK at
initialisation is then an average over ``m/2`` independent neurons and the linearised predictor
starts at zero, exactly like the infinite-width one. **2L-ReLU** applies it to (normalised) raw
inputs, **MLP-Attn** to the attention-transformed ones.

Because only ``W`` is trained, the empirical NTK has the closed form

.. math:: \hat\Theta(x, x') = (x\cdot x')\;\frac1m\sum_r \mathbf 1[w_r\cdot x>0]\,\mathbf 1[w_r\cdot x'>0],

(:func:`entk_W`), and its infinite-width limit is the arc-cosine kernel of degree 0 times
:math:`x\cdot x'` (:func:`ntk`, which is ``ntkbook.ntk.kernels.relu_ntk(..., trainable="W")``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NORMALIZATIONS",
    "attention",
    "attention_gram",
    "normalize_rows",
    "transform",
    "init",
    "apply",
    "apply_batch",
    "entk_W",
    "ntk",
    "span_coordinates",
]

NORMALIZATIONS = ("row", "global", "none")


# --------------------------------------------------------------------------------------------------
# linear attention
# --------------------------------------------------------------------------------------------------
def attention(x_train, x=None):
    """Transductive linear attention: ``x @ X^T X`` (rows of ``X X^T X`` for ``x = X``).

    ``x_train`` is ``(n, d)``; ``x`` is ``(k, d)`` queries (default: the training set itself).
    Computed as ``(x X^T) X`` in float64 numpy.
    """
    X = np.asarray(x_train, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"x_train must be (n, d), got shape {X.shape}")
    q = X if x is None else np.asarray(x, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != X.shape[1]:
        raise ValueError(f"queries must be (k, {X.shape[1]}), got shape {q.shape}")
    return (q @ X.T) @ X


def normalize_rows(z, eps: float = 0.0):
    """Each row divided by its l2 norm (rows of norm 0 are left at 0)."""
    z = np.asarray(z, dtype=np.float64)
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    return np.divide(z, norms + eps, out=np.zeros_like(z), where=norms > 0)


def transform(x_train, x_test=None, *, attend: bool, normalize: str = "row"):
    """Inputs of 2L-ReLU (``attend=False``) or MLP-Attn (``attend=True``).

    Returns ``(z_train, z_test)`` (``z_test`` is None when ``x_test`` is). With
    ``normalize="global"`` both are divided by the RMS row norm of ``z_train``.
    """
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    X = np.asarray(x_train, dtype=np.float64)
    zt = attention(X) if attend else X
    zs = None
    if x_test is not None:
        zs = attention(X, x_test) if attend else np.asarray(x_test, dtype=np.float64)
    if normalize == "row":
        zt = normalize_rows(zt)
        zs = None if zs is None else normalize_rows(zs)
    elif normalize == "global":
        c = math.sqrt(float(np.mean(np.sum(zt**2, axis=1))))
        zt = zt / c
        zs = None if zs is None else zs / c
    return zt, zs


def attention_gram(x_train):
    """``G~ = (X X^T X)(X X^T X)^T`` formed explicitly in float64 (equals ``G^3`` exactly)."""
    A = attention(x_train)
    return A @ A.T


# --------------------------------------------------------------------------------------------------
# two-layer ReLU network
# --------------------------------------------------------------------------------------------------
def init(key, d: int, m: int, *, symmetric: bool = True, dtype=jnp.float32):
    """Parameters ``{"W": (m, d), "a": (m,)}``; only ``W`` is trained (``a`` is held fixed).

    ``symmetric=True`` needs an even ``m``: rows ``m/2..m-1`` of ``W`` copy rows ``0..m/2-1`` and
    ``a = (+1, ..., +1, -1, ..., -1)``, so the network outputs exactly 0 at initialisation.
    ``symmetric=False`` draws independent rows and random signs.
    """
    if symmetric:
        if m % 2:
            raise ValueError(f"symmetric initialisation needs an even width, got m={m}")
        W = jax.random.normal(key, (m // 2, d), dtype)
        W = jnp.concatenate([W, W], axis=0)
        a = jnp.concatenate([jnp.ones(m // 2, dtype), -jnp.ones(m // 2, dtype)])
    else:
        kw, ka = jax.random.split(key)
        W = jax.random.normal(kw, (m, d), dtype)
        a = jnp.where(jax.random.bernoulli(ka, 0.5, (m,)), 1.0, -1.0).astype(dtype)
    return {"W": W, "a": a}


def apply(params, x):
    """Output ``(1,)`` of the network for ONE input ``x`` of shape ``(d,)``."""
    W, a = params["W"], params["a"]
    h = jax.nn.relu(jnp.dot(W, x, precision=jax.lax.Precision.HIGHEST))
    return (jnp.dot(a, h, precision=jax.lax.Precision.HIGHEST) / jnp.sqrt(W.shape[0]))[None]


def apply_batch(params, x):
    """Outputs ``(N,)`` for a batch ``x`` of shape ``(N, d)`` (one matmul, no vmap)."""
    W, a = params["W"], params["a"]
    h = jax.nn.relu(jnp.matmul(x, W.T, precision=jax.lax.Precision.HIGHEST))
    return jnp.matmul(h, a, precision=jax.lax.Precision.HIGHEST) / jnp.sqrt(W.shape[0])


def entk_W(params, x1, x2=None):
    """Closed-form empirical NTK with respect to ``W`` (float64 numpy, ``(N1, N2)``)."""
    W = np.asarray(params["W"], dtype=np.float64)
    a = np.asarray(params["a"], dtype=np.float64)
    x1 = np.asarray(x1, dtype=np.float64)
    x2 = x1 if x2 is None else np.asarray(x2, dtype=np.float64)
    s1 = (x1 @ W.T > 0) * a  # a_r relu'(w_r . x)
    s2 = s1 if x2 is x1 else (x2 @ W.T > 0) * a
    return (x1 @ x2.T) * (s1 @ s2.T) / W.shape[0]


def ntk(x1, x2=None):
    """Analytic infinite-width NTK (W trained, a fixed) of the two-layer ReLU net, float64 numpy:
    ``ntkbook.ntk.kernels.relu_ntk(x1, x2, trainable="W")``.

    For MLP-Attn pass the attention-transformed inputs (see :func:`transform`): the NTK of the
    cascade is the ReLU NTK evaluated on them. ``x2=None`` gives the symmetric train-train kernel
    with an exact diagonal.
    """
    from ntkbook.ntk.kernels import relu_ntk

    with jax.enable_x64(True):
        a = jnp.asarray(np.asarray(x1, dtype=np.float64))
        b = None if x2 is None else jnp.asarray(np.asarray(x2, dtype=np.float64))
        return np.asarray(relu_ntk(a, b, trainable="W"), dtype=np.float64)


# --------------------------------------------------------------------------------------------------
# exact dimension reduction
# --------------------------------------------------------------------------------------------------
def span_coordinates(*arrays, rtol: float = 1e-12):
    """Coordinates of the rows of ``arrays`` in an orthonormal basis of their joint row span.

    A network whose first layer is ``w . x`` with ``w ~ N(0, I_d)`` trained by gradient descent on
    inputs spanning a ``p``-dimensional subspace ``Q`` (``d x p``, orthonormal columns) behaves
    exactly like one on the ``p``-dimensional coordinates ``Q^T x``: ``w . x = (Q^T w) . (Q^T x)``,
    ``Q^T w ~ N(0, I_p)``, and gradients never leave the span. Returns the list of coordinate arrays
    (float64, ``(N_k, p)``) and ``Q``.
    """
    stacked = np.concatenate([np.asarray(a, dtype=np.float64) for a in arrays], axis=0)
    _, s, vt = np.linalg.svd(stacked, full_matrices=False)
    keep = s > rtol * s[0]
    Q = vt[keep].T
    return [np.asarray(a, dtype=np.float64) @ Q for a in arrays], Q


# --------------------------------------------------------------------------------------------------
# multi-output heads and a differentiable input map (used by the influence chapter)
# --------------------------------------------------------------------------------------------------
def init_heads(key, d: int, m: int, C: int, *, dtype=jnp.float32):
    r"""Parameters ``{"W": (m, d), "a": (m, C)}`` of the ``C``-output network
    :math:`f_c(x) = m^{-1/2}\sum_r a_{rc}\,\mathrm{relu}(w_r\cdot x)` with fixed heads
    ``a_rc = +-1`` (only ``W`` trained), symmetric: rows ``m/2..m-1`` copy ``W``'s first half with
    the opposite heads, so ``f = 0`` at initialisation. ``C = 1`` is the binary network of
    :func:`init` (with random instead of constant head signs on the first half).
    """
    if m % 2:
        raise ValueError(f"symmetric initialisation needs an even width, got m={m}")
    if C < 1:
        raise ValueError(f"C must be >= 1, got {C}")
    kw, ka = jax.random.split(key)
    W = jax.random.normal(kw, (m // 2, d), dtype)
    A = jnp.where(jax.random.bernoulli(ka, 0.5, (m // 2, C)), 1.0, -1.0).astype(dtype)
    return {"W": jnp.concatenate([W, W], axis=0), "a": jnp.concatenate([A, -A], axis=0)}


def apply_heads(params, z):
    """Outputs ``(N, C)`` of the multi-head network for inputs ``z`` ``(N, d)``."""
    W, a = params["W"], params["a"]
    h = jax.nn.relu(jnp.matmul(z, W.T, precision=jax.lax.Precision.HIGHEST))
    return jnp.matmul(h, a, precision=jax.lax.Precision.HIGHEST) / jnp.sqrt(W.shape[0])


def inputs_jax(x_context, x, *, attend: bool):
    """Differentiable (JAX) version of :func:`transform` with ``normalize="row"``: the network
    inputs of the rows of ``x`` ``(N, d)``, attending over ``x_context`` ``(n, d)`` when ``attend``
    (``x X^T X``, keys and values the context), then each row divided by its l2 norm."""
    z = jnp.matmul(jnp.matmul(x, x_context.T, precision=jax.lax.Precision.HIGHEST), x_context,
                   precision=jax.lax.Precision.HIGHEST) if attend else x
    return z / jnp.sqrt(jnp.sum(z * z, axis=1, keepdims=True) + jnp.finfo(z.dtype).tiny)


def entk_W_heads(params, z1, z2=None):
    r"""Class-diagonal block of the empirical NTK (with respect to ``W``) of the multi-head network,
    float64 numpy ``(N1, N2)``: since ``a_rc^2 = 1`` every output has the same block

    .. math:: \Theta_{cc}(z, z') = (z\cdot z')\,\frac1m\sum_r \mathbf 1[w_r\cdot z>0]\,\mathbf 1[w_r\cdot z'>0].

    The off-diagonal blocks ``c != c'`` carry the factor ``a_rc a_rc'`` and are not returned.
    """
    W = np.asarray(params["W"], dtype=np.float64)
    z1 = np.asarray(z1, dtype=np.float64)
    z2 = z1 if z2 is None else np.asarray(z2, dtype=np.float64)
    s1 = (z1 @ W.T > 0).astype(np.float64)
    s2 = s1 if z2 is z1 else (z2 @ W.T > 0).astype(np.float64)
    return (z1 @ z2.T) * (s1 @ s2.T) / W.shape[0]


__all__ += ["init_heads", "apply_heads", "inputs_jax", "entk_W_heads"]
