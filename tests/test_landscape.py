"""Filter-normalised directions and slices; the top Hessian eigenvalue by Lanczos against dense."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.influence import landscape
from ntkbook.models import two_layer


def _model(C=2):
    rng = np.random.default_rng(0)
    z = jnp.asarray(rng.normal(size=(20, 4)))
    y = jnp.asarray(np.eye(C)[rng.integers(0, C, 20)])
    p = two_layer.init_heads(jax.random.PRNGKey(1), 4, 6, C, dtype=jnp.float64)
    p = {"W": p["W"] + 0.5 * jax.random.normal(jax.random.PRNGKey(2), p["W"].shape, jnp.float64), "a": p["a"]}

    def loss(q):
        return jnp.mean((two_layer.apply_batch(q, z) - y) ** 2)

    return p, loss


def test_top_hessian_eigenvalue_matches_dense():
    with jax.enable_x64(True):
        p, loss = _model()
        H = jax.hessian(lambda W: loss({"W": W, "a": p["a"]}))(p["W"])
        H = np.asarray(H).reshape(p["W"].size, p["W"].size)
        dense = np.linalg.eigvalsh(H)[::-1]
        res = landscape.top_hessian_eigenvalue(loss, p, trainable=["W"], k=2, num_steps=p["W"].size)
        np.testing.assert_allclose(np.asarray(res.eigenvalues), dense[:2], rtol=1e-9)
        # the default short Krylov space already finds the top one
        res1 = landscape.top_hessian_eigenvalue(loss, p, trainable=["W"], k=1, num_steps=20)
        assert float(res1.eigenvalues[0]) == pytest.approx(dense[0], rel=1e-6)


def test_filter_normalised_direction():
    with jax.enable_x64(True):
        p, _ = _model()
        d = landscape.filter_normalized_direction(p, jax.random.PRNGKey(0), frozen=("a",))
        np.testing.assert_allclose(np.linalg.norm(np.asarray(d["W"]), axis=1),
                                   np.linalg.norm(np.asarray(p["W"]), axis=1), rtol=1e-12)
        assert not np.any(np.asarray(d["a"]))


def test_slices_centre_is_the_loss():
    with jax.enable_x64(True):
        p, loss = _model()
        d1 = landscape.filter_normalized_direction(p, jax.random.PRNGKey(0), frozen=("a",))
        d2 = landscape.filter_normalized_direction(p, jax.random.PRNGKey(1), frozen=("a",))
        s1 = landscape.slice_1d(loss, p, d1, np.linspace(-1, 1, 5))
        s2 = landscape.slice_2d(loss, p, d1, d2, np.linspace(-1, 1, 3), np.linspace(-1, 1, 3))
        assert s1.shape == (5,) and s2.shape == (3, 3)
        assert s1[2] == pytest.approx(float(loss(p)))
        assert s2[1, 1] == pytest.approx(float(loss(p)))
        assert s2[1, 0] == pytest.approx(float(loss({"W": p["W"] - d2["W"], "a": p["a"]})))


def test_bad_input():
    with jax.enable_x64(True):
        p, loss = _model()
        with pytest.raises(ValueError, match="not in params"):
            landscape.top_hessian_eigenvalue(loss, p, trainable=["V"])
        with pytest.raises(TypeError):
            landscape.filter_normalized_direction([p["W"]], jax.random.PRNGKey(0))
