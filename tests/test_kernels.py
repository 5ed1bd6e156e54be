"""Analytic ReLU NTK / NNGP against Monte Carlo and the empirical NTK of wide networks."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.ntk.entk import entk_layerwise  # noqa: E402
from ntkbook.models import two_layer  # noqa: E402
from ntkbook.ntk.kernels import relu_nngp, relu_ntk  # noqa: E402


def inputs(n=6, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * rng.uniform(0.3, 3.0, (n, 1))  # various norms
    x[1] = -x[0] * 0.5  # antiparallel pair: theta = pi
    x[2] = 2.0 * x[3]  # parallel pair: theta = 0
    return jnp.asarray(x)


def test_closed_forms_special_cases():
    x = inputs()
    sq = np.sum(np.asarray(x) ** 2, axis=1)
    np.testing.assert_allclose(np.diag(relu_nngp(x)), sq / 2, rtol=1e-12)
    np.testing.assert_allclose(np.diag(relu_ntk(x)), sq / 2, rtol=1e-12)
    np.testing.assert_allclose(np.diag(relu_ntk(x, trainable="all")), sq, rtol=1e-12)
    # antiparallel: both kernels vanish; parallel: ||x|| ||x'|| / 2
    assert abs(relu_ntk(x)[0, 1]) < 1e-12 and abs(relu_nngp(x)[0, 1]) < 1e-12
    np.testing.assert_allclose(relu_ntk(x)[2, 3], np.sqrt(sq[2] * sq[3]) / 2, rtol=1e-7)
    # zero-norm input: zero row, no NaN
    xz = x.at[4].set(0.0)
    for k in (relu_nngp(xz), relu_ntk(xz), relu_ntk(xz, trainable="all")):
        assert np.all(np.isfinite(np.asarray(k)))
        np.testing.assert_allclose(k[4], 0.0, atol=0)
        K = np.asarray(k)
        np.testing.assert_allclose(K, K.T, atol=1e-12)
        assert np.linalg.eigvalsh(K).min() > -1e-10
    # x2 given equals the block of the joint kernel
    np.testing.assert_allclose(relu_ntk(x[:2], x[2:]), relu_ntk(x)[:2, 2:], rtol=1e-12)


def test_arccos_expectations_by_sampling():
    # independent check of kappa_0 and kappa_1 by plain Monte Carlo over w ~ N(0, I)
    x = np.asarray(inputs(n=4, d=3, seed=1))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((400_000, 3))
    z = w @ x.T
    k0 = (z > 0).astype(float).T @ (z > 0).astype(float) / len(w)
    k1 = np.maximum(z, 0).T @ np.maximum(z, 0) / len(w)
    np.testing.assert_allclose(relu_nngp(x), k1, atol=0.02 * np.abs(k1).max())
    np.testing.assert_allclose(relu_ntk(x), (x @ x.T) * k0, atol=0.02 * np.abs(k1).max())


def test_empirical_ntk_converges_like_inverse_sqrt_width():
    x = inputs()
    theta = {"W": relu_ntk(x), "all": relu_ntk(x, trainable="all")}
    widths = [2**6, 2**8, 2**10, 2**12, 2**14]
    seeds = range(6)
    err = {"W": np.zeros((len(widths), len(seeds))), "all": np.zeros((len(widths), len(seeds)))}
    for i, m in enumerate(widths):
        for s in seeds:
            params = two_layer.init(jax.random.PRNGKey(100 * s + i), x.shape[1], m, symmetric=False,
                                    dtype=jnp.float64)
            ks = entk_layerwise(two_layer.apply, params, x, layers={"W": "W", "a": "a"},
                                reduction="class", class_index=0)
            emp = {"W": ks["W"], "all": ks["W"] + ks["a"]}
            for t in err:
                err[t][i, s] = float(jnp.linalg.norm(emp[t] - theta[t]) / jnp.linalg.norm(theta[t]))
    for t in err:
        mean = err[t].mean(axis=1)
        slope = np.polyfit(np.log(widths), np.log(mean), 1)[0]
        assert -0.65 <= slope <= -0.35, (t, slope, mean)
        assert mean[-1] < 0.05, (t, mean)


def test_bad_input():
    with pytest.raises(ValueError, match="mismatched feature dimensions"):
        relu_ntk(jnp.ones((2, 3)), jnp.ones((2, 4)))
    with pytest.raises(ValueError, match="trainable"):
        relu_ntk(jnp.ones((2, 3)), trainable="a")
    with pytest.raises(ValueError, match="matrices"):
        relu_nngp(jnp.ones(3))
