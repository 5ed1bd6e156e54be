r"""Leave-one-out influence of training points under kernel ridge regression, and its stability.

Kernel ridge regression with a kernel matrix :math:`K` (``n x n``, the training points), ridge
:math:`\lambda` and targets :math:`Y` (``n x C``) predicts

.. math:: f(x) = k(x)^\top \alpha, \qquad \alpha = A^{-1} Y, \qquad A = K + \lambda I .

Refitting without training point ``i`` (same kernel, same :math:`\lambda`) gives exactly

.. math:: f_{-i}(x) = f(x) - \frac{\alpha_i}{(A^{-1})_{ii}}\; k(x)^\top A^{-1} e_i

(a Schur-complement identity; derived in the book's influence chapter), so all ``n`` leave-one-out
predictors cost one inverse.  With the network's empirical NTK as :math:`K` this is the NTK
influence of Zhang & Zhang (2022).  The influence of point ``i`` on a test set is the change of the
summed test loss when ``i`` is left out,

.. math:: I(i) = \sum_t \ell(f_{-i}(x_t), y_t) - \ell(f(x_t), y_t),

positive for a *helpful* point (the test loss rises without it), negative for a harmful one.  The
loss here is the squared error :math:`\ell(f, y) = \tfrac12\|f - y\|^2`, the loss kernel ridge
regression minimises, for which the sum over test points has a closed form.

Stability of influence under an intervention: :func:`flip_rate` (the fraction of the top-|I| points
whose sign changes) and :func:`spearman` (rank correlation, :func:`scipy.stats.spearmanr`).
All computations are float64 numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
import scipy.stats

from ntkbook.errors import InputError

__all__ = [
    "ridge_labels",
    "ridge_values",
    "flip_and_rho",
    "KRRFit",
    "krr_fit",
    "krr_predict",
    "loo_predictions",
    "ntk_influence",
    "top_indices",
    "flip_rate",
    "spearman",
]


def ridge_labels(ridges, ridges_per_point=()) -> dict[str, tuple[float, bool]]:
    """Every ridge of an experiment: label -> ``(lam, per_point)``; ``lam=<lam>`` for
    ``A = K + lam I`` (each of ``ridges``), ``nlam=<lam>`` for ``A = K + n lam I`` (each of
    ``ridges_per_point``). The labels key the influence experiments' results."""
    out = {f"lam={lam:g}": (lam, False) for lam in ridges}
    out.update({f"nlam={lam:g}": (lam, True) for lam in ridges_per_point})
    return out


def ridge_values(labels: dict[str, tuple[float, bool]], n: int) -> list[float]:
    """The ridge added to ``K`` (``n`` training points) for each of ``labels``
    (:func:`ridge_labels`), in order."""
    return [lam * n if per_point else lam for lam, per_point in labels.values()]


@dataclasses.dataclass(frozen=True)
class KRRFit:
    """``A_inv = (K + lam I)^{-1}`` ``(n, n)``, ``alpha = A_inv Y`` ``(n, C)``, and ``lam``."""

    A_inv: np.ndarray
    alpha: np.ndarray
    lam: float


def _as_targets(Y, n: int) -> np.ndarray:
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or Y.shape[0] != n:
        raise InputError(f"targets must be (n,) or (n, C) with n = {n}, got shape {Y.shape}")
    return Y


def krr_fit(K, Y, lam: float) -> KRRFit:
    """Kernel ridge regression on the training kernel ``K`` ``(n, n)`` and targets ``Y`` ``(n,)`` or
    ``(n, C)`` with ridge ``lam > 0`` (added as ``K + lam I``: pass ``n * lam`` for the other
    convention).  The inverse is formed by a Cholesky factorisation."""
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise InputError(f"K must be a square (n, n) matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise InputError("K contains NaN or infinite entries")
    if not lam > 0:
        raise InputError(f"the ridge lam must be > 0, got {lam}")
    n = K.shape[0]
    Y = _as_targets(Y, n)
    A = 0.5 * (K + K.T) + lam * np.eye(n)
    try:
        c = scipy.linalg.cho_factor(A, lower=True)
    except np.linalg.LinAlgError as exc:
        raise InputError(f"K + lam I is not positive definite (lam = {lam}); is K a kernel matrix?") from exc
    A_inv = scipy.linalg.cho_solve(c, np.eye(n))
    A_inv = 0.5 * (A_inv + A_inv.T)
    return KRRFit(A_inv=A_inv, alpha=A_inv @ Y, lam=float(lam))


def krr_predict(fit: KRRFit, Kx) -> np.ndarray:
    """Predictions ``(T, C)`` at test points with cross-kernel ``Kx`` ``(T, n)``."""
    Kx = np.asarray(Kx, dtype=np.float64)
    if Kx.ndim != 2 or Kx.shape[1] != fit.alpha.shape[0]:
        raise InputError(f"Kx must be (T, n) with n = {fit.alpha.shape[0]}, got shape {Kx.shape}")
    return Kx @ fit.alpha


def loo_predictions(fit: KRRFit, Kx) -> np.ndarray:
    """All leave-one-out predictions: ``(n, T, C)``, entry ``[i, t]`` is ``f_{-i}(x_t)``.

    ``f_{-i}(x) = f(x) - (alpha_i / (A^{-1})_ii) k(x)^T A^{-1} e_i``.  Memory ``n T C`` floats; for the
    influence alone use :func:`ntk_influence`, which never forms this array.
    """
    f = krr_predict(fit, Kx)  # (T, C)
    B = np.asarray(Kx, dtype=np.float64) @ fit.A_inv  # (T, n)
    c = fit.alpha / np.diag(fit.A_inv)[:, None]  # (n, C)
    return f[None, :, :] - B.T[:, :, None] * c[:, None, :]


def ntk_influence(K, Kx, Y, Y_test, lam: float) -> np.ndarray:
    """Influence ``I(i)`` ``(n,)`` of each training point on the summed squared test loss.

    ``K`` ``(n, n)`` train kernel, ``Kx`` ``(T, n)`` test-train kernel, ``Y`` ``(n,)``/``(n, C)`` and
    ``Y_test`` ``(T,)``/``(T, C)`` targets, ridge ``lam`` (``A = K + lam I``).  With residuals
    ``r_t = f(x_t) - y_t``, ``B = Kx A^{-1}`` and ``c_i = alpha_i / (A^{-1})_ii``:

    ``I(i) = sum_t [ -B_ti (r_t . c_i) + (1/2) B_ti^2 ||c_i||^2 ]``.
    """
    fit = krr_fit(K, Y, lam)
    Kx = np.asarray(Kx, dtype=np.float64)
    Yt = _as_targets(Y_test, Kx.shape[0])
    if Yt.shape[1] != fit.alpha.shape[1]:
        raise InputError(f"Y_test has {Yt.shape[1]} outputs but Y has {fit.alpha.shape[1]}")
    R = krr_predict(fit, Kx) - Yt  # (T, C)
    B = Kx @ fit.A_inv  # (T, n)
    c = fit.alpha / np.diag(fit.A_inv)[:, None]  # (n, C)
    cross = np.einsum("ti,tc,ic->i", B, R, c)
    return -cross + 0.5 * np.sum(c**2, axis=1) * np.sum(B**2, axis=0)


def top_indices(scores, fraction: float = 0.1) -> np.ndarray:
    """Indices of the ``max(1, round(fraction * n))`` entries of largest ``|scores|``, largest first
    (ties broken by index, so the result is deterministic)."""
    s = np.abs(np.asarray(scores, dtype=np.float64))
    if s.ndim != 1 or s.size == 0:
        raise InputError(f"scores must be a non-empty vector, got shape {s.shape}")
    if not 0 < fraction <= 1:
        raise InputError(f"fraction must be in (0, 1], got {fraction}")
    k = max(1, int(round(fraction * s.size)))
    return np.argsort(-s, kind="stable")[:k]


def flip_rate(before, after, *, fraction: float = 0.1, top=None) -> float:
    """Fraction of the top-|before| training points whose influence changes sign.

    ``top`` (indices) overrides the set; by default it is :func:`top_indices` of ``before`` with
    ``fraction``.  A sign change means ``sign(before_i) != sign(after_i)`` (a point whose influence
    becomes exactly 0 counts as flipped; one that was exactly 0 cannot be in a top set of nonzero
    scores).
    """
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if b.shape != a.shape or b.ndim != 1:
        raise InputError(f"before and after must be vectors of the same length, got {b.shape} and {a.shape}")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(a))):
        raise InputError("influence scores contain NaN or infinite values")
    idx = top_indices(b, fraction) if top is None else np.asarray(top, dtype=int)
    if idx.size == 0:
        raise InputError("the top set is empty")
    return float(np.mean(np.sign(b[idx]) != np.sign(a[idx])))


def spearman(before, after) -> float:
    """Spearman rank correlation of two influence vectors (:func:`scipy.stats.spearmanr`)."""
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if b.shape != a.shape or b.ndim != 1 or b.size < 2:
        raise InputError(f"need two vectors of the same length >= 2, got {b.shape} and {a.shape}")
    return float(scipy.stats.spearmanr(b, a).statistic)


def flip_and_rho(clean: dict, after: dict, labels, *, fraction: float) -> dict[str, float]:
    """Per ridge label of ``labels``: ``<label>/flip``, the flip rate over the top ``fraction`` of
    ``clean[label]`` by ``|I|`` (:func:`flip_rate`), and ``<label>/rho``, Spearman's rho of all
    influences (:func:`spearman`); ``clean`` and ``after`` map each label to ``(n,)`` influences."""
    out = {}
    for label in labels:
        out[f"{label}/flip"] = flip_rate(clean[label], after[label], fraction=fraction)
        out[f"{label}/rho"] = spearman(clean[label], after[label])
    return out
