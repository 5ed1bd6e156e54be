"""The NTK-distance experiment: the exact NTK predictor and the distance (Paper A)."""

import dataclasses
import math

import jax
import numpy as np
import pytest

from ntkbook.experiments import ntk_distance as nd
from ntkbook.models import attention as att

jax.config.update("jax_enable_x64", True)


def _toy(n=10, n_test=6, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.abs(rng.standard_normal((n, d)))
    T = np.abs(rng.standard_normal((n_test, d)))
    y = np.tile([1.0, -1.0], n // 2)
    return X, y, T


def test_distance_is_zero_for_the_same_function():
    f = np.random.default_rng(0).standard_normal(11)
    assert nd.rms_distance(f, f) == 0.0
    assert nd.rms_distance(f, f + 2.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        nd.rms_distance(f, f[:3])


def test_ntk_predictor_is_gd_on_the_kernel_model():
    """The closed form equals explicit GD in function space, f <- f - lr/n K (f - y)."""
    X, y, T = _toy()
    zt, zs = att.transform(X, T, attend=True)
    config = nd.Config(lr=0.7)
    steps = (0, 1, 5, 40)
    f_tr, f_te, _ = nd.ntk_predictor(zt, y, zs, config, steps)
    K, Kx = att.ntk(zt), att.ntk(zs, zt)
    n = len(y)
    f, alpha = np.zeros(n), np.zeros(n)
    for k in range(steps[-1] + 1):
        if k in steps:
            i = steps.index(k)
            assert nd.rms_distance(f_tr[i], f) < 1e-12
            assert nd.rms_distance(f_te[i], Kx @ alpha) < 1e-12
        r = f - y
        f = f - config.lr / n * K @ r
        alpha = alpha - config.lr / n * r
    # the converged predictor is kernel regression
    _, f_inf, _ = nd.ntk_predictor(zt, y, zs, config, (math.inf,))
    np.testing.assert_allclose(f_inf[0], Kx @ np.linalg.solve(K, y), rtol=1e-6, atol=1e-8)


def test_gd_weights_limits():
    lam = np.array([0.0, 1e-320, 1e-3, 1.0])
    phi = nd.gd_weights(lam, 1.0, 4, [3, math.inf])
    np.testing.assert_allclose(phi[0, :2], 3 / 4)
    np.testing.assert_allclose(phi[0, 3], (1 - (1 - 1 / 4) ** 3) / 1.0)
    np.testing.assert_allclose(phi[1], [0.0, 0.0, 1e3, 1.0])


def test_train_point_starts_at_zero_distance_and_tracks_ntk():
    X, y, T = _toy(n=8, n_test=4)
    config = dataclasses.replace(nd.Config.smoke(), snapshots=(0, 5, 20), adam_epochs=2, adam_batch=4,
                                 train_dtype="float64")
    zt, zs = att.transform(X, T, attend=False)
    steps = tuple(config.snapshots) + (math.inf,)
    f_tr, f_te, _ = nd.ntk_predictor(zt, y, zs, config, steps)
    ctr, cte, h = nd.split_coordinates(zt, zs)
    K = att.ntk(zt)
    dist = {}
    for m in (16, 16384):
        arr, sc = nd.train_point(ctr, y, cte, h, (f_tr[:-1], f_te[:-1], f_te[-1]), K, config, m, 0)
        # both predictors start as the zero function: distance 0 at step 0
        assert arr["dist_test"][0] < 1e-12 and arr["dist_train"][0] < 1e-12
        assert np.all(np.isfinite(arr["dist_test"]))
        dist[m] = arr["dist_test"][-1]
    # a very wide 2L-ReLU follows its NTK predictor far more closely than a narrow one
    assert dist[16384] < 0.3 * dist[16]
