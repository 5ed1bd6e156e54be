r"""PCA whitening of the inputs, fitted once on a clean training set: a fixed affine map of pixels.

Fitting (:func:`fit`) on a training set :math:`X` (``n x d``, one image per row): centre it,
:math:`X_c = X - \mathbf 1\mu^\top`, take its thin SVD :math:`X_c = U S V^\top`, keep the
``k`` leading directions :math:`v_1..v_k` with covariance eigenvalues
:math:`\sigma_i = s_i^2 / n`, and set

.. math:: z(x) = (x - \mu)\,P, \qquad P = V_k\,\mathrm{diag}\bigl((\sigma_i + \varepsilon)^{-1/2}\bigr),
          \qquad \varepsilon = r\,\sigma_1 ,

a ``k``-vector per image (PCA whitening; ZCA would rotate it back by :math:`V_k^\top`, which
changes no inner product and so neither the Gram matrix nor the attention below). ``r`` is the
ridge relative to the largest covariance eigenvalue; ``k`` is by default the numerical rank of
:math:`X_c` (at most ``n - 1``: centring removes one direction).

What it does to the Gram matrix: :math:`Z = X_c P = U_k\,\mathrm{diag}\bigl(s_i (\sigma_i+\varepsilon)^{-1/2}\bigr)`,
so :math:`Z Z^\top = U_k\,\mathrm{diag}\bigl(n\sigma_i / (\sigma_i + \varepsilon)\bigr) U_k^\top`: ``k``
nonzero eigenvalues, all equal to ``n`` when ``r = 0`` and in general

.. math:: \kappa(Z Z^\top) = \frac{\sigma_1/(\sigma_1+\varepsilon)}{\sigma_k/(\sigma_k+\varepsilon)}
          = \frac{1 + r\,\kappa_k}{1 + r}, \qquad \kappa_k = \sigma_1 / \sigma_k
          \quad(:func:`whitened_condition`),

which runs from 1 (``r = 0``) to :math:`\kappa_k` (``r`` large: centring and a global scale only).
The attention output's Gram is the cube of the input Gram whatever the input, so it is
:math:`\kappa(Z Z^\top)^3`.

The map is fixed once fitted: a perturbed training set is whitened with the *clean* set's
:math:`\mu` and :math:`P`, so an attack or a random-sign step acts on pixels in [0, 1] and reaches
the network through :math:`\delta \mapsto \delta P` (:func:`apply_jax` is differentiable).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = ["Whitening", "fit", "apply", "apply_jax", "whitened_condition"]


@dataclasses.dataclass(frozen=True)
class Whitening:
    """A fitted whitening: ``z(x) = (x - mean) @ matrix``.

    ``mean`` ``(d,)``; ``basis`` ``(d, k)`` the leading right singular vectors of the centred set
    (each with its largest-magnitude entry positive, so the map does not depend on the SVD's
    sign choices); ``variances`` ``(k,)`` their covariance eigenvalues ``sigma_i = s_i^2 / n``
    (descending); ``rel_ridge`` ``r`` and ``ridge = r * sigma_1``; ``rank`` the numerical rank of
    the centred set (``k <= rank``)."""

    mean: np.ndarray
    basis: np.ndarray
    variances: np.ndarray
    rel_ridge: float
    ridge: float
    rank: int

    @property
    def components(self) -> int:
        """``k``, the number of directions kept."""
        return int(self.variances.size)

    @property
    def gains(self) -> np.ndarray:
        """``(sigma_i + ridge)^{-1/2}`` ``(k,)``: how much a pixel step along ``v_i`` is scaled."""
        return 1.0 / np.sqrt(self.variances + self.ridge)

    @property
    def matrix(self) -> np.ndarray:
        """``P = basis * gains`` ``(d, k)``."""
        return self.basis * self.gains[None, :]


def fit(x, *, components: int | None = None, rel_ridge: float = 0.0) -> Whitening:
    """The whitening of the training set ``x`` ``(n, d)`` (module docstring): ``components``
    leading directions of the centred set (None: all of its numerical rank, singular values above
    ``max(n, d) * eps * s_1``, the rule of :mod:`ntkbook.ntk.gram`), ridge ``rel_ridge * sigma_1``."""
    X = np.asarray(x, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise InputError(f"x must be a training set (n, d) with n >= 2, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise InputError("x contains NaN or infinite values")
    if not (np.isfinite(rel_ridge) and rel_ridge >= 0):
        raise InputError(f"rel_ridge must be a finite number >= 0, got {rel_ridge}")
    mean = X.mean(axis=0)
    _, s, vt = np.linalg.svd(X - mean, full_matrices=False)
    tol = max(X.shape) * np.finfo(np.float64).eps * (s[0] if s.size else 0.0)
    rank = int(np.sum(s > tol))
    if rank == 0:
        raise InputError("the centred training set is zero: every image is the same")
    k = rank if components is None else components
    if not (isinstance(k, int) and 1 <= k <= rank):
        raise InputError(f"components must be an integer in 1..{rank} (the rank of the centred "
                         f"training set), got {components}")
    basis = vt[:k].T.copy()
    flip = np.sign(basis[np.argmax(np.abs(basis), axis=0), np.arange(k)])
    basis *= flip[None, :]
    variances = s[:k] ** 2 / X.shape[0]
    return Whitening(mean=mean, basis=basis, variances=variances, rel_ridge=float(rel_ridge),
                     ridge=float(rel_ridge * variances[0]), rank=rank)


def apply(whitening: Whitening, x) -> np.ndarray:
    """``(x - mean) @ P`` ``(N, k)`` float64 for images ``x`` ``(N, d)``."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != whitening.mean.size:
        raise InputError(f"x must be (N, {whitening.mean.size}), got shape {x.shape}")
    return (x - whitening.mean) @ whitening.matrix


def apply_jax(mean, matrix, x):
    """Differentiable :func:`apply`: ``(x - mean) @ matrix`` for ``x`` ``(N, d)``, ``mean`` ``(d,)``,
    ``matrix`` ``(d, k)`` (JAX arrays, at full matmul precision)."""
    return jnp.matmul(x - mean, matrix, precision=jax.lax.Precision.HIGHEST)


def whitened_condition(variances, rel_ridge: float) -> float:
    """``kappa`` of the whitened Gram predicted from the kept covariance eigenvalues ``variances``
    (descending) and the relative ridge: ``(1 + r kappa_k) / (1 + r)``, ``kappa_k = sigma_1 / sigma_k``."""
    s = np.asarray(variances, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(s > 0):
        raise InputError("variances must be a non-empty vector of positive eigenvalues")
    kappa = float(s[0] / s[-1])
    return (1.0 + rel_ridge * kappa) / (1.0 + rel_ridge)
