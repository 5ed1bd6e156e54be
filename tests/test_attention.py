"""Linear attention, the two-layer ReLU network, its closed-form eNTK and its analytic NTK (Paper A)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.models import attention, two_layer
from ntkbook.ntk import entk, kernels

jax.config.update("jax_enable_x64", True)


def _data(n=7, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_transductive_attention_of_training_point_is_its_row():
    X = _data()
    A = X @ X.T @ X
    np.testing.assert_allclose(attention.attention(X), A, rtol=1e-12)
    for j in range(X.shape[0]):
        np.testing.assert_allclose(attention.attention(X, X[j : j + 1])[0], A[j], rtol=1e-12)
    # a test point attends over the training set: sum_i (x . x_i) x_i
    x = np.random.default_rng(1).standard_normal((1, X.shape[1]))
    np.testing.assert_allclose(attention.attention(X, x)[0], sum((x[0] @ xi) * xi for xi in X), rtol=1e-12)


def test_transform_normalisations():
    X, T = _data(), _data(3, seed=2)
    zt, zs = attention.transform(X, T, attend=True, normalize="row")
    np.testing.assert_allclose(np.linalg.norm(zt, axis=1), 1.0)
    np.testing.assert_allclose(np.linalg.norm(zs, axis=1), 1.0)
    np.testing.assert_allclose(zs, attention.normalize_rows(attention.attention(X, T)))
    zt, zs = attention.transform(X, T, attend=False, normalize="global")
    np.testing.assert_allclose(np.mean(np.sum(zt**2, axis=1)), 1.0)
    np.testing.assert_allclose(zs / T, zt[0, 0] / X[0, 0])
    with pytest.raises(ValueError):
        attention.transform(X, attend=True, normalize="bogus")


def test_analytic_ntk_is_relu_ntk_on_transformed_inputs():
    X, T = _data(), _data(3, seed=3)
    zt, zs = attention.transform(X, T, attend=True)
    expected = np.asarray(kernels.relu_ntk(jnp.asarray(zs), jnp.asarray(zt), trainable="W"))
    np.testing.assert_allclose(two_layer.ntk(zs, zt), expected, rtol=1e-12)
    # diagonal of the W-only NTK on unit-norm inputs is 1/2
    np.testing.assert_allclose(np.diag(two_layer.ntk(zt)), 0.5, rtol=1e-12)


def test_closed_form_entk_matches_autodiff():
    X = _data(6, 4)
    params = two_layer.init(jax.random.PRNGKey(0), 4, 10, symmetric=False, dtype=jnp.float64)
    K = entk.entk(two_layer.apply, params, jnp.asarray(X), reduction="class", class_index=0, param_filter="W")
    np.testing.assert_allclose(two_layer.entk_W(params, X), np.asarray(K), rtol=1e-10, atol=1e-12)


def test_mlp_attn_ntk_matches_wide_monte_carlo():
    X = _data(6, 4, seed=4)
    z, _ = attention.transform(X, attend=True, normalize="row")
    K = two_layer.ntk(z)
    m = 400_000
    params = two_layer.init(jax.random.PRNGKey(1), 4, m, dtype=jnp.float64)
    Km = two_layer.entk_W(params, z)
    # each entry is a mean of m/2 i.i.d. terms in [0, 1]: error ~ 1/sqrt(m/2) ~ 2e-3
    assert np.max(np.abs(Km - K)) < 1e-2
    # and the error shrinks like 1/sqrt(m)
    small = two_layer.entk_W(two_layer.init(jax.random.PRNGKey(2), 4, 400, dtype=jnp.float64), z)
    assert np.max(np.abs(small - K)) > np.max(np.abs(Km - K))


def test_symmetric_init_outputs_zero():
    params = two_layer.init(jax.random.PRNGKey(0), 5, 8, dtype=jnp.float64)
    out = two_layer.apply_batch(params, jnp.asarray(_data()))
    np.testing.assert_allclose(out, 0.0, atol=1e-12)
    one_by_one = jax.vmap(lambda x: two_layer.apply(params, x))(jnp.asarray(_data()))
    np.testing.assert_allclose(one_by_one[:, 0], out, atol=1e-12)
    with pytest.raises(ValueError):
        two_layer.init(jax.random.PRNGKey(0), 5, 7)


def test_heads_network_is_the_network_with_C_outputs():
    """The influence chapter's C-output names are the two-layer network: outputs, and the eNTK block."""
    X = jnp.asarray(_data(6, 4))
    params = two_layer.init_heads(jax.random.PRNGKey(3), 4, 10, 3, dtype=jnp.float64)
    out = two_layer.apply_batch(params, X)
    assert out.shape == (6, 3)
    np.testing.assert_allclose(out, 0.0, atol=1e-12)  # symmetric start
    params = {"W": params["W"][:5], "a": params["a"][:5]}  # break the symmetry
    out = two_layer.apply_batch(params, X)
    for c in range(3):
        single = {"W": params["W"], "a": params["a"][:, c]}
        np.testing.assert_allclose(out[:, c], two_layer.apply_batch(single, X), atol=1e-12)
        K = entk.entk(two_layer.apply, single, X, reduction="class", class_index=0,
                      param_filter="W")
        np.testing.assert_allclose(two_layer.entk_W(params, X), np.asarray(K), rtol=1e-10, atol=1e-12)


def test_linearisation_and_offset():
    """``pattern`` gives the first-order Taylor model around W0; ``offset`` adds to the pre-activations."""
    rng = np.random.default_rng(2)
    z = jnp.asarray(rng.standard_normal((5, 4)))
    params = two_layer.init(jax.random.PRNGKey(0), 4, 8, symmetric=False, dtype=jnp.float64)
    dW = jnp.asarray(rng.standard_normal(params["W"].shape))
    f0, df = jax.jvp(lambda W: two_layer.apply_batch({"W": W, "a": params["a"]}, z), (params["W"],), (dW,))
    pattern = two_layer.activation_pattern(params["W"], z, jnp.float64)
    lin = two_layer.apply_batch({"W": params["W"] + dW, "a": params["a"]}, z, pattern=pattern)
    np.testing.assert_allclose(lin, f0 + df, atol=1e-12)
    # for a small step the network and its linearisation agree to second order
    eps = 1e-5
    step = {"W": params["W"] + eps * dW, "a": params["a"]}
    gap = two_layer.apply_batch(step, z) - two_layer.apply_batch(step, z, pattern=pattern)
    assert float(jnp.max(jnp.abs(gap))) < 1e-8
    h = jnp.asarray(rng.standard_normal((5, 8)))
    manual = jax.nn.relu(z @ params["W"].T + h) @ params["a"] / jnp.sqrt(8.0)
    np.testing.assert_allclose(two_layer.apply_batch(params, z, offset=h), manual, atol=1e-12)
