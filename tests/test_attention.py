"""Linear attention, the two-layer ReLU models and their analytic NTK (Paper A)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.ntk import entk as entk_mod
from ntkbook.ntk import kernels
from ntkbook.models import attention as att

jax.config.update("jax_enable_x64", True)


def _data(n=7, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_transductive_attention_of_training_point_is_its_row():
    X = _data()
    A = X @ X.T @ X
    np.testing.assert_allclose(att.attention(X), A, rtol=1e-12)
    for j in range(X.shape[0]):
        np.testing.assert_allclose(att.attention(X, X[j : j + 1])[0], A[j], rtol=1e-12)
    # a test point attends over the training set: sum_i (x . x_i) x_i
    x = np.random.default_rng(1).standard_normal((1, X.shape[1]))
    np.testing.assert_allclose(att.attention(X, x)[0], sum((x[0] @ xi) * xi for xi in X), rtol=1e-12)


def test_transform_normalisations():
    X, T = _data(), _data(3, seed=2)
    zt, zs = att.transform(X, T, attend=True, normalize="row")
    np.testing.assert_allclose(np.linalg.norm(zt, axis=1), 1.0)
    np.testing.assert_allclose(np.linalg.norm(zs, axis=1), 1.0)
    np.testing.assert_allclose(zs, att.normalize_rows(att.attention(X, T)))
    zt, zs = att.transform(X, T, attend=False, normalize="global")
    np.testing.assert_allclose(np.mean(np.sum(zt**2, axis=1)), 1.0)
    np.testing.assert_allclose(zs / T, zt[0, 0] / X[0, 0])
    with pytest.raises(ValueError):
        att.transform(X, attend=True, normalize="bogus")


def test_analytic_ntk_is_relu_ntk_on_transformed_inputs():
    X, T = _data(), _data(3, seed=3)
    zt, zs = att.transform(X, T, attend=True)
    expected = np.asarray(kernels.relu_ntk(jnp.asarray(zs), jnp.asarray(zt), trainable="W"))
    np.testing.assert_allclose(att.ntk(zs, zt), expected, rtol=1e-12)
    # diagonal of the W-only NTK on unit-norm inputs is 1/2
    np.testing.assert_allclose(np.diag(att.ntk(zt)), 0.5, rtol=1e-12)


def test_closed_form_entk_matches_autodiff():
    X = _data(6, 4)
    params = att.init(jax.random.PRNGKey(0), 4, 10, symmetric=False, dtype=jnp.float64)
    K = entk_mod.entk(att.apply, params, jnp.asarray(X), reduction="class", class_index=0, param_filter="W")
    np.testing.assert_allclose(att.entk_W(params, X), np.asarray(K), rtol=1e-10, atol=1e-12)


def test_mlp_attn_ntk_matches_wide_monte_carlo():
    X = _data(6, 4, seed=4)
    z, _ = att.transform(X, attend=True, normalize="row")
    K = att.ntk(z)
    m = 400_000
    params = att.init(jax.random.PRNGKey(1), 4, m, dtype=jnp.float64)
    Km = att.entk_W(params, z)
    # each entry is a mean of m/2 i.i.d. terms in [0, 1]: error ~ 1/sqrt(m/2) ~ 2e-3
    assert np.max(np.abs(Km - K)) < 1e-2
    # and the error shrinks like 1/sqrt(m)
    small = att.entk_W(att.init(jax.random.PRNGKey(2), 4, 400, dtype=jnp.float64), z)
    assert np.max(np.abs(small - K)) > np.max(np.abs(Km - K))


def test_symmetric_init_outputs_zero():
    params = att.init(jax.random.PRNGKey(0), 5, 8, dtype=jnp.float64)
    out = att.apply_batch(params, jnp.asarray(_data()))
    np.testing.assert_allclose(out, 0.0, atol=1e-12)
    np.testing.assert_allclose(jax.vmap(lambda x: att.apply(params, x))(jnp.asarray(_data()))[:, 0], out, atol=1e-12)
    with pytest.raises(ValueError):
        att.init(jax.random.PRNGKey(0), 5, 7)


def test_span_coordinates_are_an_exact_reparametrisation():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((4, 9))  # 4 points in 9 dimensions: a 4-dim span
    (c,), Q = att.span_coordinates(X)
    assert Q.shape == (9, 4)
    np.testing.assert_allclose(c @ c.T, X @ X.T, atol=1e-12)
    W = rng.standard_normal((6, 9))
    a = np.sign(rng.standard_normal(6))
    full = att.apply_batch({"W": jnp.asarray(W), "a": jnp.asarray(a)}, jnp.asarray(X))
    red = att.apply_batch({"W": jnp.asarray(W @ Q), "a": jnp.asarray(a)}, jnp.asarray(c))
    np.testing.assert_allclose(full, red, atol=1e-12)
