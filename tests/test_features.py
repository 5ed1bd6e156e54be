"""Fourier bases, subspace overlaps, chance levels and the cliff detector (ntkbook.ntk.features)."""

import numpy as np
import pytest

from ntkbook.ntk import features


@pytest.mark.parametrize("p", [5, 13, 29])
@pytest.mark.parametrize("kind", ["a", "b", "sum", "diff", "2a", "2b"])
def test_fourier_basis_orthonormal_with_right_dimension(p, kind):
    Q = features.fourier_basis(p, kind)
    assert Q.shape == (p * p, 2 * (p // 2))
    np.testing.assert_allclose(Q.T @ Q, np.eye(Q.shape[1]), atol=1e-12)
    np.testing.assert_allclose(Q.sum(axis=0), 0.0, atol=1e-10)  # centred: orthogonal to constants


def test_fourier_basis_unions_and_even_p():
    p = 29
    assert features.fourier_basis(p, ("a", "b")).shape[1] == 4 * (p // 2)
    assert features.fourier_basis(p, ("sum", "diff")).shape[1] == 4 * (p // 2)
    # even p: sin(pi a) vanishes on the grid, so the a-features span p - 1 dimensions
    assert features.fourier_basis(10, "a").shape[1] == 9
    # the raw features are cos/sin pairs in order of frequency
    raw = features.fourier_features(7, "sum", frequencies=[2])
    a, b = features.grid(7)
    np.testing.assert_allclose(raw[:, 0], np.cos(2 * np.pi * 2 * (a + b) / 7), atol=1e-12)
    np.testing.assert_allclose(raw[:, 1], np.sin(2 * np.pi * 2 * (a + b) / 7), atol=1e-12)


def test_feature_spaces_are_mutually_orthogonal_and_2a_equals_a_for_prime_p():
    p = 13
    B = {k: features.fourier_basis(p, k) for k in ("a", "b", "sum", "diff", "2a")}
    for x in ("a", "b", "sum", "diff"):
        for y in ("a", "b", "sum", "diff"):
            expected = B[x].shape[1] if x == y else 0.0
            assert features.subspace_overlap(B[x], B[y]) == pytest.approx(expected, abs=1e-9)
    # for odd p, k -> 2k mod p permutes the nonzero frequencies up to sign: same span
    assert features.subspace_overlap(B["a"], B["2a"]) == pytest.approx(B["a"].shape[1], abs=1e-9)


def test_subspace_overlap_self_orthogonal_and_basis_invariant():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((40, 6)))
    assert features.subspace_overlap(Q, Q) == pytest.approx(6.0, abs=1e-10)
    # an orthogonal subspace
    P = np.eye(40) - Q @ Q.T
    W = features.orthonormal_basis(P @ rng.standard_normal((40, 5)), center=False)
    assert W.shape[1] == 5
    assert features.subspace_overlap(Q, W) == pytest.approx(0.0, abs=1e-10)
    # invariant to the basis: any invertible recombination of the columns, on either side
    G = rng.standard_normal((40, 4))
    ref = features.subspace_overlap(Q, G)
    assert 0.0 < ref < 4.0
    assert features.subspace_overlap(Q @ rng.standard_normal((6, 6)), G) == pytest.approx(ref, abs=1e-9)
    assert features.subspace_overlap(Q, G @ rng.standard_normal((4, 4))) == pytest.approx(ref, abs=1e-9)
    assert features.subspace_overlap(G, Q) == pytest.approx(ref, abs=1e-9)  # symmetric
    # redundant columns do not count twice
    assert features.subspace_overlap(np.hstack([Q, Q[:, :2]]), Q) == pytest.approx(6.0, abs=1e-9)
    assert features.overlap_fraction(Q, Q[:, :3]) == pytest.approx(1.0, abs=1e-12)


def test_subspace_overlap_rejects_mismatched_spaces():
    with pytest.raises(ValueError, match="different spaces"):
        features.subspace_overlap(np.ones((5, 2)), np.ones((6, 2)))


def test_orthonormal_basis_centres_and_drops_dependent_columns():
    x = np.arange(10.0)
    Fm = np.stack([np.ones(10), x, 2 * x], axis=1)
    Qc = features.orthonormal_basis(Fm, center=True)  # the constant vanishes, x and 2x are one direction
    assert Qc.shape == (10, 1)
    Qn = features.orthonormal_basis(Fm, center=False)
    assert Qn.shape == (10, 2)


def test_random_subspace_overlap_moments_match_sampling():
    r = features.random_subspace_overlap(60, 8, 12, samples=3000, seed=1)
    assert r.mean == pytest.approx(8 * 12 / 60)
    assert r.fraction == pytest.approx(8 / 60)
    assert r.sampled_mean == pytest.approx(r.mean, rel=0.02)
    assert r.sampled_std == pytest.approx(r.std, rel=0.1)


def _spectrum(blocks, seed=0, jitter=0.02):
    """Eigenvalues made of blocks (size, level) with small multiplicative jitter."""
    rng = np.random.default_rng(seed)
    lam = np.concatenate([lvl * np.exp(jitter * rng.standard_normal(n)) for n, lvl in blocks])
    return rng.permutation(lam)


def test_find_cliffs_known_gaps():
    lam = _spectrum([(10, 100.0), (20, 10.0), (300, 1.0)])
    c = features.find_cliffs(lam, n=2)
    assert c.edges == (10, 30)
    assert c.sizes == (10, 20)
    assert c.ratios[0] == pytest.approx(10.0, rel=0.2)
    assert [len(r) for r in c.ranges()] == [10, 20]


def test_find_cliffs_larger_second_drop_and_single_cliff():
    # the second drop is the larger one: edges still come out in order
    c = features.find_cliffs(_spectrum([(6, 20.0), (6, 5.0), (200, 0.1)]), n=2)
    assert c.edges == (6, 12)
    # a spectrum with one real cliff does not get a second one from fluctuations
    c1 = features.find_cliffs(_spectrum([(8, 50.0), (300, 1.0)], seed=3), n=2)
    assert c1.edges == (8,)


def test_find_cliffs_constant_outlier_and_zero_tail():
    # one huge isolated mode on top: with min_size=2 it is not a cliff of its own
    lam = np.concatenate([[1e4], _spectrum([(12, 100.0), (12, 10.0), (200, 1.0)])])
    c = features.find_cliffs(lam, n=2)
    assert c.edges == (13, 25)
    c1 = features.find_cliffs(lam, n=2, min_size=1)
    assert c1.edges[0] == 1
    # a rank-deficient tail (numerical zeros) is ignored
    lam = np.concatenate([_spectrum([(5, 10.0), (50, 1.0)]), 1e-18 * np.ones(20)])
    assert features.find_cliffs(lam, n=1).edges == (5,)
    # max_index restricts the search
    lam = _spectrum([(5, 10.0), (50, 1.0), (50, 1e-3)])
    assert features.find_cliffs(lam, n=1, max_index=30).edges == (5,)


def test_find_cliffs_bad_input():
    with pytest.raises(ValueError):
        features.find_cliffs([1.0])
    with pytest.raises(ValueError):
        features.find_cliffs([-1.0, -2.0])


@pytest.mark.parametrize("n,d", [(2, 1), (3, 1), (7, 3), (30, 12)])
def test_chance_level_variance_is_exact(n, d):
    """For k = 1 the overlap of a uniform random direction with a d-dim space is
    Beta(d/2, (n-d)/2): mean d/n, variance 2 d (n-d) / (n^2 (n+2)); the formula for general k is
    symmetric in k and d."""
    from ntkbook.ntk.features import random_subspace_overlap

    r = random_subspace_overlap(n, 1, d)
    a, b = d / 2, (n - d) / 2
    assert r.mean == pytest.approx(a / (a + b), rel=1e-14)
    assert r.std ** 2 == pytest.approx(a * b / ((a + b) ** 2 * (a + b + 1)), rel=1e-12)
    if n > 2:
        s = random_subspace_overlap(n, d, 2)
        t = random_subspace_overlap(n, 2, d)
        assert s.mean == pytest.approx(t.mean) and s.std == pytest.approx(t.std, rel=1e-12)


def test_orthonormal_basis_keeps_small_but_real_directions():
    from ntkbook.ntk.features import orthonormal_basis

    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((50, 2)))
    F = u * np.array([1.0, 1e-6])  # two independent columns, one 1e-6 as large
    assert orthonormal_basis(F, center=False).shape == (50, 2)
    G = np.c_[u[:, 0], u[:, 0] * (1 + 1e-15)]  # dependent to round-off
    assert orthonormal_basis(G, center=False).shape == (50, 1)


def _ladder(drops_at: dict[int, float], n: int = 40, base: float = 0.1) -> np.ndarray:
    """Eigenvalues with log-drop ``base`` between neighbours, except ``drops_at[e]`` before e."""
    d = np.full(n - 1, base)
    for e, v in drops_at.items():
        d[e - 1] = v
    return np.exp(-np.r_[0.0, np.cumsum(d)])


def test_find_cliffs_significance_thresholds():
    from ntkbook.ntk.features import find_cliffs

    # a drop 5x the typical one (and >= 0.2 of the largest) is not a cliff: rel_drop is 10
    lam = _ladder({10: 2.0, 20: 0.5})
    assert find_cliffs(lam, n=2).edges == (10,)
    assert find_cliffs(lam, n=2, rel_drop=3.0).edges == (10, 20)
    # a drop 50x the typical one but below 0.2 of the largest is not a cliff either
    lam = _ladder({10: 10.0, 20: 0.5}, base=0.01)
    assert find_cliffs(lam, n=2).edges == (10,)
    assert find_cliffs(lam, n=2, frac_of_max=0.02).edges == (10, 20)
    # beyond max_index, a huge drop is ignored
    lam = _ladder({10: 2.0, 30: 12.0})
    assert find_cliffs(lam, n=1, max_index=25).edges == (10,)
    assert find_cliffs(lam, n=1).edges == (30,)
    # a single eigenvalue above a cliff is not a block of its own (min_size 2)
    lam = _ladder({1: 5.0, 10: 2.0})
    assert find_cliffs(lam, n=2).edges == (10,)
    assert find_cliffs(lam, n=2, min_size=1).edges == (1, 10)
