r"""Gram matrices, their spectra and condition numbers, and the widths they imply (Paper A).

Conventions
-----------
* ``G = X X^T`` for data ``X`` (``n x d``, one example per row); the attention output
  ``A = X X^T X = G X`` has Gram matrix ``G~ = A A^T = G^3``.
* Everything is float64 numpy. Eigenvalues of a Gram matrix ``F F^T`` are computed as the squared
  singular values of its *factor* ``F`` (:func:`gram_spectrum`): a singular value carries an absolute
  error of about ``eps * sigma_max``, so eigenvalues down to ``eps^2 * lambda_max`` (not
  ``eps * lambda_max`` as with ``eigh(F F^T)``) are resolved. This is what makes condition numbers
  of 10^18 and more measurable in float64.
* Null space: a singular value below ``max(n, d) * eps * sigma_max`` (the rule of
  ``numpy.linalg.matrix_rank``) is treated as zero. The condition number :func:`condition_number`
  is the ratio of the largest to the smallest *nonzero* eigenvalue.
* ``kappa_d`` (:func:`effective_condition_number`) is ``lambda_1 / lambda_d``, the condition number
  over the ``d`` leading eigenvalues.
"""

from __future__ import annotations

import math

import numpy as np

from ntkbook.errors import InputError

__all__ = [
    "EPS",
    "psd_spectrum",
    "gram",
    "gram_spectrum",
    "eigvalsh_desc",
    "nonzero",
    "condition_number",
    "factor_spectrum",
    "effective_condition_number",
    "ridge_condition_number",
    "max_verifiable_d",
    "ostrowski_interval",
    "hoeffding_width",
    "implied_width",
]

EPS = float(np.finfo(np.float64).eps)


def gram(x) -> np.ndarray:
    """``X X^T`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    return x @ x.T


def gram_spectrum(factor, *, return_tol: bool = False):
    """Eigenvalues (descending, ``min(n, d)`` of them) of ``F F^T`` as squared singular values of ``F``.

    With ``return_tol=True`` also returns the zero threshold for these eigenvalues,
    ``(max(n, d) * eps * sigma_max)^2``.
    """
    F = np.asarray(factor, dtype=np.float64)
    s = np.linalg.svd(F, compute_uv=False)
    lam = s**2
    if return_tol:
        tol = (max(F.shape) * EPS * (s[0] if s.size else 0.0)) ** 2
        return lam, tol
    return lam


def factor_spectrum(factor) -> tuple[np.ndarray, int, float]:
    """``(eigenvalues of F F^T (descending), numerical rank, kappa over the nonzero ones)``, all
    from the singular values of ``F`` with the zero threshold of :func:`gram_spectrum`."""
    lam, tol = gram_spectrum(factor, return_tol=True)
    rank = int(np.sum(lam > tol))
    return lam, rank, float(lam[0] / lam[rank - 1]) if rank else math.nan


def eigvalsh_desc(matrix) -> np.ndarray:
    """Eigenvalues of a symmetric matrix in descending order (float64 ``eigh``)."""
    return np.linalg.eigvalsh(np.asarray(matrix, dtype=np.float64))[::-1]


def nonzero(eigs, tol: float | None = None, *, n: int | None = None) -> np.ndarray:
    """The eigenvalues above ``tol`` (default: ``n * eps * lambda_max``, ``n = len(eigs)``, the rule
    for eigenvalues from ``eigh`` of the matrix itself; eigenvalues obtained as squared singular
    values of a factor have the much smaller threshold of :func:`gram_spectrum`: pass it)."""
    eigs = np.sort(np.asarray(eigs, dtype=np.float64))[::-1]
    if tol is None:
        tol = (n or eigs.size) * EPS * max(eigs[0], 0.0)
    return eigs[eigs > tol]


def psd_spectrum(eigs, what: str = "eigs") -> np.ndarray:
    """The eigenvalues ``eigs`` of a positive semi-definite matrix, float64, in descending order,
    after checking that they can be one: an :class:`~ntkbook.errors.InputError` for NaN or inf,
    and for a negative eigenvalue beyond round-off, i.e. below ``-n * eps * max|lambda|`` (``n =
    len(eigs)``: the size of ``eigh``'s error on such a matrix).  Round-off negatives are returned
    as they are (the callers treat them as zero).  ``what`` names the argument in the message."""
    lam = np.sort(np.asarray(eigs, dtype=np.float64).ravel())[::-1]
    if not np.all(np.isfinite(lam)):
        bad = np.flatnonzero(~np.isfinite(np.asarray(eigs, dtype=np.float64).ravel()))
        raise InputError(f"{what} holds {bad.size} NaN or infinite value(s) (first at index {bad[0]}); "
                         "a spectrum must be finite: check the matrix it came from")
    if lam.size:
        tol = lam.size * EPS * float(np.max(np.abs(lam)))
        if lam[-1] < -tol:
            raise InputError(f"{what} has the negative eigenvalue {lam[-1]:.3e}, beyond round-off "
                             f"(-{tol:.1e} = -n eps max|lambda|): not the spectrum of a positive "
                             "semi-definite matrix")
    return lam


def condition_number(eigs, tol: float | None = None) -> float:
    """``lambda_max / lambda_min`` over the nonzero eigenvalues (see :func:`nonzero`) of a positive
    semi-definite matrix (checked by :func:`psd_spectrum`: NaN, inf and negatives beyond round-off
    are refused; round-off negatives count as zero)."""
    lam = nonzero(psd_spectrum(eigs), tol)
    if lam.size == 0:
        raise InputError("no nonzero eigenvalue")
    return float(lam[0] / lam[-1])


def effective_condition_number(eigs, d: int) -> float:
    """``kappa_d = lambda_1 / lambda_d`` (eigenvalues sorted in descending order; ``inf`` when
    ``lambda_d <= 0``) of a positive semi-definite matrix, checked by :func:`psd_spectrum`."""
    lam = psd_spectrum(eigs)
    if not 1 <= d <= lam.size:
        raise InputError(f"d must be in 1..{lam.size}, got {d}")
    if lam[d - 1] <= 0:
        return math.inf
    return float(lam[0] / lam[d - 1])


def ridge_condition_number(eigs, rel_ridge: float) -> float:
    """Condition number of ``M + eps I`` with ``eps = rel_ridge * lambda_max(M)``, over the FULL
    spectrum (zero eigenvalues included: the ridge lifts them to ``eps``); the spectrum is checked
    by :func:`psd_spectrum` and its round-off negatives count as zero."""
    lam = psd_spectrum(eigs)
    lam = np.maximum(lam, 0.0)
    eps = rel_ridge * lam[0]
    return float((lam[0] + eps) / (lam[-1] + eps))


def max_verifiable_d(eigs, *, power: int = 3, limit: float = 1e12) -> int:
    """Largest ``d`` with ``kappa_d(M)^power <= limit``: the leading block whose cubed spread a
    float64 eigensolver of the cubed matrix (absolute error ~ ``eps * lambda_max``) still resolves
    with several digits to spare."""
    lam = np.sort(np.asarray(eigs, dtype=np.float64))[::-1]
    pos = lam > 0
    log_kappa = np.where(pos, np.log(lam[0]) - np.log(np.where(pos, lam, 1.0)), np.inf)
    ok = pos & (power * log_kappa <= math.log(limit))
    return int(np.flatnonzero(ok)[-1] + 1) if ok.any() else 0


def ostrowski_interval(kappa_a: float, diag) -> tuple[float, float]:
    """Bounds on ``kappa(N A N)`` for positive-definite ``A`` and diagonal ``N = diag(diag)``.

    Ostrowski's theorem: ``lambda_k(N A N) = theta_k lambda_k(A)`` with
    ``theta_k in [min N^2, max N^2]``, hence ``kappa(A) / kappa(N^2) <= kappa(N A N) <=
    kappa(A) kappa(N^2)``.
    """
    d2 = np.asarray(diag, dtype=np.float64) ** 2
    k = float(d2.max() / d2.min())
    return float(kappa_a / k), float(kappa_a * k)


def hoeffding_width(lambda_min: float, n: int, *, delta: float = 0.01, entry_bound: float = 1.0) -> float:
    """Width ``m`` at which the finite-width W-only ReLU NTK is within ``lambda_min / 2`` of its limit
    in operator norm with probability ``1 - delta``.

    Each entry of the empirical NTK is a mean of ``m`` i.i.d. terms in ``[0, |x.x'|] subset
    [0, entry_bound]``; Hoeffding and a union bound over the ``n^2`` entries give
    ``max_ij |K_m - K|_ij <= entry_bound sqrt(log(2 n^2 / delta) / (2 m))``, and
    ``||K_m - K||_op <= n max_ij |.|``. Requiring this ``<= lambda_min / 2`` gives
    ``m >= 2 n^2 entry_bound^2 log(2 n^2 / delta) / lambda_min^2``.
    """
    return 2.0 * n**2 * entry_bound**2 * math.log(2.0 * n**2 / delta) / lambda_min**2


def implied_width(kappa: float, power: int = 6) -> float:
    """The scaling-law width ``kappa^power`` (Paper A: ``m = Omega(kappa(G)^6)``)."""
    return float(kappa) ** power
