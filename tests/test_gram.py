"""Gram cubing and condition numbers (Paper A)."""

import numpy as np
import pytest

from ntkbook.models import attention
from ntkbook.ntk import gram


def _with_singular_values(s, d, seed=0):
    rng = np.random.default_rng(seed)
    n = len(s)
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((d, n)))
    return (U * s) @ V.T


def test_cubing_identity_random():
    X = np.random.default_rng(0).standard_normal((12, 20))
    G = gram.gram(X)
    A = attention.attention(X)
    np.testing.assert_allclose(A @ A.T, G @ G @ G, rtol=1e-10)
    lam = gram.gram_spectrum(X)
    np.testing.assert_allclose(gram.gram_spectrum(attention.attention(X)), lam**3, rtol=1e-9)
    np.testing.assert_allclose(gram.eigvalsh_desc(G @ G @ G), lam**3, rtol=1e-8)
    _, _, k = gram.factor_spectrum(X)
    _, _, k3 = gram.factor_spectrum(attention.attention(X))
    np.testing.assert_allclose(k3, k**3, rtol=1e-8)


def test_ill_conditioned_cube_is_measurable_through_the_factor():
    s = np.logspace(0, -3, 10)  # kappa(G) = 1e6, kappa(G^3) = 1e18 > 1/eps
    X = _with_singular_values(s, 15)
    _, rank, k = gram.factor_spectrum(X)
    assert rank == 10
    np.testing.assert_allclose(k, 1e6, rtol=1e-8)
    _, rank3, k3 = gram.factor_spectrum(attention.attention(X))
    assert rank3 == 10
    np.testing.assert_allclose(k3, 1e18, rtol=1e-4)
    # eigh of the formed cube cannot resolve it: its smallest eigenvalue is rounding noise of
    # size ~eps * ||G^3||, off by more than the value itself (the absolute size of the noise
    # depends on the LAPACK build: 3.5e-18 with OpenBLAS's Haswell kernels, above 1e-17 elsewhere)
    A = attention.attention(X)
    naive = gram.eigvalsh_desc(A @ A.T)
    assert abs(naive[-1] - 1e-18) > 1e-18
    # the leading-d condition number is verifiable and cubes exactly
    for d in (2, 5):
        kd = gram.effective_condition_number(s**2, d)
        np.testing.assert_allclose(gram.effective_condition_number(naive, d), kd**3, rtol=1e-6)


def test_null_space_is_excluded():
    s = np.r_[np.logspace(0, -2, 5), np.zeros(3)]
    X = _with_singular_values(s, 12, seed=1)
    lam, rank, k = gram.factor_spectrum(X)
    assert rank == 5
    np.testing.assert_allclose(k, 1e4, rtol=1e-8)
    G = gram.gram(X)
    np.testing.assert_allclose(gram.condition_number(gram.eigvalsh_desc(G)), 1e4, rtol=1e-6)


def test_effective_and_ridge_condition_numbers():
    lam = np.array([100.0, 10.0, 1.0, 0.1])
    assert gram.effective_condition_number(lam, 1) == 1.0
    assert gram.effective_condition_number(lam, 3) == 100.0
    with pytest.raises(ValueError):
        gram.effective_condition_number(lam, 5)
    np.testing.assert_allclose(gram.ridge_condition_number(lam, 0.0), 1000.0)
    np.testing.assert_allclose(gram.ridge_condition_number(lam, 0.01), 101.0 / 1.1)
    # a ridge caps kappa at about 1/ridge, cubed or not
    assert gram.ridge_condition_number(lam**3, 1e-3) < 1001
    assert gram.max_verifiable_d(lam, power=3, limit=1.01e6) == 3
    assert gram.max_verifiable_d(lam, power=3, limit=1.01e3) == 2


def test_ostrowski_interval_contains_row_normalised_kappa():
    X = np.abs(np.random.default_rng(3).standard_normal((8, 10)))
    A = attention.attention(X)
    _, _, k3 = gram.factor_spectrum(A)
    _, _, kh = gram.factor_spectrum(attention.normalize_rows(A))
    lo, hi = gram.ostrowski_interval(k3, 1.0 / np.linalg.norm(A, axis=1))
    assert lo <= kh * (1 + 1e-9) and kh <= hi * (1 + 1e-9)


def test_widths():
    assert gram.implied_width(1e3) == pytest.approx(1e18)
    w1 = gram.hoeffding_width(0.1, 100)
    assert gram.hoeffding_width(0.01, 100) == pytest.approx(100 * w1)
    assert w1 == pytest.approx(2 * 100**2 * np.log(2 * 100**2 / 0.01) / 0.01)


def test_null_space_threshold_is_numpys_rank_rule():
    """A singular value 1e-11 of the largest is signal (the threshold is max(n, d) eps sigma_max,
    about 3e-15 here); one of 1e-16 is round-off."""
    X = _with_singular_values(np.array([1.0, 1e-11]), 10, seed=2)
    lam, rank, k = gram.factor_spectrum(X)
    assert rank == 2
    np.testing.assert_allclose(k, 1e22, rtol=1e-3)
    X0 = _with_singular_values(np.array([1.0, 1e-17]), 10, seed=2)
    assert gram.factor_spectrum(X0)[1] == 1
    _, tol = gram.gram_spectrum(X, return_tol=True)
    assert tol == pytest.approx((10 * gram.EPS) ** 2, rel=1e-6, abs=0)


def test_nonzero_default_threshold():
    # eigenvalues from eigh of the matrix itself: threshold n eps lambda_max (= 4.4e-16 here)
    np.testing.assert_array_equal(gram.nonzero([1.0, 1e-14]), [1.0, 1e-14])
    np.testing.assert_array_equal(gram.nonzero([1.0, 1e-16]), [1.0])
    np.testing.assert_array_equal(gram.nonzero([1.0, 1e-14], n=1000), [1.0])  # 2.2e-13
    assert gram.condition_number([2.0, 1e-14, -1e-17]) == pytest.approx(2e14)


def test_max_verifiable_d_is_inclusive_and_exact():
    """Largest d with kappa_d^power <= limit: the boundary itself counts, and one past it not."""
    assert gram.max_verifiable_d(np.array([1.0, 0.5, 0.25]), power=1, limit=2.0) == 2
    assert gram.max_verifiable_d(np.array([1.0, 0.5, 0.25]), power=1, limit=1.99) == 1
    assert gram.max_verifiable_d(np.array([1.0, 0.5, 0.25]), power=2, limit=16.0) == 3
    assert gram.max_verifiable_d(np.array([1.0, 0.0]), power=3) == 1  # zeros never count


def test_ostrowski_interval_exact_and_attained():
    assert gram.ostrowski_interval(100.0, [1.0, 2.0]) == (25.0, 400.0)
    # diagonal A: N A N is diagonal too and the upper bound is attained
    a = np.array([1.0, 1e-2])
    n = np.array([2.0, 1.0])
    lo, hi = gram.ostrowski_interval(a[0] / a[1], n)
    kappa_nan = (n[0] ** 2 * a[0]) / (n[1] ** 2 * a[1])
    assert kappa_nan == pytest.approx(hi) and lo <= kappa_nan
    # and the lower one, by swapping N
    lo2, _ = gram.ostrowski_interval(a[0] / a[1], n[::-1])
    assert (n[1] ** 2 * a[0]) / (n[0] ** 2 * a[1]) == pytest.approx(lo2)
