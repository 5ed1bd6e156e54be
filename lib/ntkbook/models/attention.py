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

The networks
------------
**2L-ReLU** is the two-layer ReLU network of :mod:`ntkbook.models.two_layer` (its one definition,
with its closed-form empirical NTK and analytic NTK) applied to (normalised) raw inputs,
**MLP-Attn** the same network applied to the attention-transformed ones (:func:`transform`).
Its ``C``-output form (one head per class) is :func:`ntkbook.models.two_layer.init_heads`;
:func:`inputs_jax` is a differentiable :func:`transform`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "NORMALIZATIONS",
    "attention",
    "normalize_rows",
    "transform",
    "inputs_jax",
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
        raise InputError(f"x_train must be (n, d), got shape {X.shape}")
    q = X if x is None else np.asarray(x, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != X.shape[1]:
        raise InputError(f"queries must be (k, {X.shape[1]}), got shape {q.shape}")
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
        raise InputError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
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


# --------------------------------------------------------------------------------------------------
# a differentiable input map (used by the influence attacks)
# --------------------------------------------------------------------------------------------------

def inputs_jax(x_context, x, *, attend: bool):
    """Differentiable (JAX) version of :func:`transform` with ``normalize="row"``: the network
    inputs of the rows of ``x`` ``(N, d)``, attending over ``x_context`` ``(n, d)`` when ``attend``
    (``x X^T X``, keys and values the context), then each row divided by its l2 norm."""
    z = jnp.matmul(jnp.matmul(x, x_context.T, precision=jax.lax.Precision.HIGHEST), x_context,
                   precision=jax.lax.Precision.HIGHEST) if attend else x
    return z / jnp.sqrt(jnp.sum(z * z, axis=1, keepdims=True) + jnp.finfo(z.dtype).tiny)

