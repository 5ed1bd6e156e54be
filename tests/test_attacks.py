"""FGSM, PGD and MIM: inside the eps-ball and the [0, 1] box, the loss rises, PGD >= FGSM on average."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.influence import attacks
from ntkbook.influence.losses import attack_loss
from ntkbook.models import two_layer


def _problem(seed, attend=False, C=3, n=24, d=20):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, d)).astype(np.float32)
    x[:, :3] = np.round(x[:, :3])  # pixels on the box's faces
    p = two_layer.init_heads(jax.random.PRNGKey(seed), d, 32, C)
    p = {"W": p["W"] + jax.random.normal(jax.random.PRNGKey(seed + 100), p["W"].shape), "a": p["a"]}
    y = np.eye(C, dtype=np.float32)[rng.integers(0, C, n)] if C > 1 else np.sign(rng.normal(size=(n, 1))).astype(np.float32)
    return jnp.asarray(x), p, jnp.asarray(y), attack_loss(attend, C)


def _run(name, loss, x, eps, args, **kw):
    if name == "fgsm":
        return attacks.fgsm(loss, x, eps, args=args, **kw)
    if name == "pgd":
        return attacks.pgd(loss, x, eps, args=args, key=jax.random.PRNGKey(0), **kw)
    return attacks.mim(loss, x, eps, args=args, **kw)


@pytest.mark.parametrize("name", ["fgsm", "pgd", "mim"])
@pytest.mark.parametrize("attend", [False, True])
@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_in_ball_and_box_and_loss_rises(name, attend, eps):
    x, p, y, loss = _problem(0, attend)
    xa = np.asarray(_run(name, loss, x, eps, (p, y)))
    assert np.all(xa >= 0) and np.all(xa <= 1)
    assert np.abs(xa - np.asarray(x)).max() <= eps + 1e-6
    assert float(loss(jnp.asarray(xa), p, y)) > float(loss(x, p, y))


def test_pgd_at_least_fgsm_on_average():
    gains = []
    for seed in range(6):
        x, p, y, loss = _problem(seed, attend=False, C=3)
        lf = float(loss(attacks.fgsm(loss, x, 0.3, args=(p, y)), p, y))
        lp = float(loss(attacks.pgd(loss, x, 0.3, args=(p, y), key=jax.random.PRNGKey(seed)), p, y))
        gains.append(lp - lf)
    assert np.mean(gains) >= 0


def test_mask_leaves_other_rows_alone():
    x, p, y, loss = _problem(1)
    mask = np.zeros(x.shape[0], bool)
    mask[[2, 5, 7]] = True
    for name in ("fgsm", "pgd", "mim"):
        xa = np.asarray(_run(name, loss, x, 0.3, (p, y), mask=mask))
        np.testing.assert_array_equal(xa[~mask], np.asarray(x)[~mask])
        assert np.abs(xa[mask] - np.asarray(x)[mask]).max() > 0


def _linear_loss(x, w):
    return jnp.sum(x @ w)


def test_fgsm_is_exact_for_a_linear_loss():
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.uniform(size=(5, 8)), jnp.float32)
    w = jnp.asarray(rng.normal(size=8), jnp.float32)
    xa = attacks.fgsm(_linear_loss, x, 0.2, args=(w,))
    np.testing.assert_allclose(xa, np.clip(np.asarray(x) + 0.2 * np.sign(np.asarray(w)), 0, 1), atol=1e-7)
    # on a linear loss MIM and PGD end at the same corner of the (clipped) ball
    np.testing.assert_allclose(attacks.mim(_linear_loss, x, 0.2, args=(w,)), xa, atol=1e-6)
    np.testing.assert_allclose(attacks.pgd(_linear_loss, x, 0.2, args=(w,), steps=60, step_size=0.01), xa, atol=1e-6)


def test_random_sign_null():
    x = jnp.full((4, 10), 0.5, jnp.float32)
    xr = np.asarray(attacks.random_sign(x, 0.3, jax.random.PRNGKey(0)))
    np.testing.assert_allclose(np.abs(xr - 0.5), 0.3, atol=1e-6)


def test_bad_input():
    x, p, y, loss = _problem(0)
    with pytest.raises(ValueError, match="box"):
        attacks.fgsm(loss, x + 2.0, 0.1, args=(p, y))
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        attacks.fgsm(loss, x[0], 0.1, args=(p, y))
    with pytest.raises(ValueError, match="eps"):
        attacks.pgd(loss, x, -0.1, args=(p, y))
    with pytest.raises(ValueError, match="mask"):
        attacks.mim(loss, x, 0.1, args=(p, y), mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="steps"):
        attacks.pgd(loss, x, 0.1, args=(p, y), steps=0)
