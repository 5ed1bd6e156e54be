"""NTK leave-one-out influence against brute-force refits; flip rate and Spearman on hand-made cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from ntkbook.influence import scores as I
from ntkbook.models import attention as att


def _kernel_problem(n=14, T=9, C=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + T, 6))
    K_all = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 6.0)
    return K_all[:n, :n], K_all[n:, :n], rng.normal(size=(n, C)), rng.normal(size=(T, C))


def _refit_without(K, Kx, Y, lam, i):
    keep = np.delete(np.arange(K.shape[0]), i)
    A = K[np.ix_(keep, keep)] + lam * np.eye(keep.size)
    return Kx[:, keep] @ np.linalg.solve(A, Y[keep])


@pytest.mark.parametrize("lam", [1e-3, 0.1, 2.0])
def test_loo_formula_matches_refits(lam):
    K, Kx, Y, _ = _kernel_problem()
    fit = I.krr_fit(K, Y, lam)
    loo = I.loo_predictions(fit, Kx)
    for i in range(K.shape[0]):
        np.testing.assert_allclose(loo[i], _refit_without(K, Kx, Y, lam, i), rtol=1e-9, atol=1e-10)


def test_influence_matches_brute_force_on_ntk_of_trained_shape():
    # the kernel the chapter uses: class-diagonal eNTK of the multi-head net on attention inputs
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(30, 12))
    ztr, zte = att.transform(x[:20], x[20:], attend=True, normalize="row")
    params = att.init_heads(jax.random.PRNGKey(0), 12, 64, 3)  # the kernel is formed in float64
    K, Kx = att.entk_W_heads(params, ztr), att.entk_W_heads(params, zte, ztr)
    Y, Yt = np.eye(3)[rng.integers(0, 3, 20)], np.eye(3)[rng.integers(0, 3, 10)]
    lam = 1e-3
    f = Kx @ np.linalg.solve(K + lam * np.eye(20), Y)
    brute = np.array([0.5 * np.sum((_refit_without(K, Kx, Y, lam, i) - Yt) ** 2) - 0.5 * np.sum((f - Yt) ** 2)
                      for i in range(20)])
    np.testing.assert_allclose(I.ntk_influence(K, Kx, Y, Yt, lam), brute, rtol=1e-7, atol=1e-9)


def test_binary_targets_as_vectors():
    K, Kx, Y, Yt = _kernel_problem(C=1)
    a = I.ntk_influence(K, Kx, Y[:, 0], Yt[:, 0], 0.1)
    b = I.ntk_influence(K, Kx, Y, Yt, 0.1)
    np.testing.assert_allclose(a, b)


def test_entk_heads_is_the_class_diagonal_block():
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        z = jnp.asarray(rng.normal(size=(5, 4)))
        p = att.init_heads(jax.random.PRNGKey(3), 4, 8, 3, dtype=jnp.float64)
        p = {"W": p["W"] + 0.3 * jax.random.normal(jax.random.PRNGKey(4), p["W"].shape, jnp.float64), "a": p["a"]}
        J = jax.jacrev(lambda W: att.apply_heads({"W": W, "a": p["a"]}, z))(p["W"])  # (N, C, m, d)
        J = np.asarray(J).reshape(5, 3, -1)
        closed = att.entk_W_heads(p, np.asarray(z))
        for c in range(3):
            np.testing.assert_allclose(J[:, c] @ J[:, c].T, closed, rtol=1e-10, atol=1e-12)


def test_top_indices_and_flip_rate_hand_made():
    before = np.array([5.0, -4.0, 3.0, 0.1, -0.2, 0.05, 2.0, -1.0, 0.3, 0.4])
    np.testing.assert_array_equal(I.top_indices(before, 0.3), [0, 1, 2])
    after = np.array([-1.0, -3.0, -0.5, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0])
    assert I.flip_rate(before, after, fraction=0.3) == pytest.approx(2 / 3)
    assert I.flip_rate(before, after, fraction=0.1) == 1.0
    assert I.flip_rate(before, before) == 0.0
    assert I.flip_rate(before, -before, fraction=0.5) == 1.0
    assert I.flip_rate(before, after, top=[1]) == 0.0
    # exactly zero afterwards counts as a sign change
    assert I.flip_rate(before, np.where(np.arange(10) == 0, 0.0, before), fraction=0.1) == 1.0


def test_spearman_hand_made():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert I.spearman(a, a**3) == pytest.approx(1.0)
    assert I.spearman(a, -a) == pytest.approx(-1.0)
    # 1 - 6 sum d^2 / (n (n^2 - 1)) with d = (1, 1, 1, 1, 0): 1 - 24/120
    assert I.spearman(a, np.array([2.0, 1.0, 4.0, 3.0, 5.0])) == pytest.approx(0.8)
    b = np.random.default_rng(0).normal(size=50)
    c = b + np.random.default_rng(1).normal(size=50)
    assert I.spearman(b, c) == pytest.approx(scipy.stats.spearmanr(b, c).statistic)


def test_bad_input():
    K, Kx, Y, Yt = _kernel_problem()
    with pytest.raises(ValueError, match="square"):
        I.krr_fit(K[:, :-1], Y, 0.1)
    with pytest.raises(ValueError, match="lam"):
        I.krr_fit(K, Y, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        I.krr_fit(np.where(np.eye(K.shape[0]) > 0, np.nan, K), Y, 0.1)
    with pytest.raises(ValueError, match="targets"):
        I.krr_fit(K, Y[:-1], 0.1)
    with pytest.raises(ValueError, match="positive definite"):
        I.krr_fit(-np.eye(4) * 10, np.ones(4), 0.1)
    with pytest.raises(ValueError, match="outputs"):
        I.ntk_influence(K, Kx, Y, Yt[:, :2], 0.1)
    with pytest.raises(ValueError, match="same length"):
        I.flip_rate(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        I.flip_rate(np.array([1.0, np.nan]), np.ones(2))
    with pytest.raises(ValueError, match="fraction"):
        I.top_indices(np.ones(3), 0.0)


def test_experiment_pipeline_fixed_points(data_dir):
    """Theory fixes two outcomes of the chapter's pipeline: an attack of radius 0 changes nothing
    (flip rate 0, Spearman 1, for both models), and removing nothing is the identity."""
    import dataclasses

    from ntkbook.experiments import influence_malleability as IM

    cfg = dataclasses.replace(IM.Config.smoke(), eps=0.0, n_train=40, n_test=40, epochs=5,
                              interventions=("adversarial", "transformed"), pgd_steps=2, mim_steps=2)
    data = IM.task_data("mnist_3v8", cfg.n_train, cfg.n_test)
    xtr, ltr, xte, lte, C = data
    for model in ("relu", "attn"):
        ztr, _ = att.transform(xtr, xte, attend=model == "attn", normalize="row")
        params, _ = IM.train_model(ztr, IM.targets(ltr, C), C, cfg, seed=0, model=model)
        _, sc = IM.evaluate(params, data, model, cfg, 0, do_ablation=False)
        for inter in ("adversarial", "transformed"):
            for a in cfg.attacks:
                assert sc[f"{inter}/{a}/flip"] == 0.0
                assert sc[f"{inter}/{a}/rho"] == pytest.approx(1.0)
                assert sc[f"{inter}/{a}/linf"] == 0.0


def test_train_model_recipes():
    """MLP-Attn is trained full-batch for ``attn_steps`` steps, 2L-ReLU (and MLP-Attn when
    ``attn_steps`` is None) for ``epochs`` epochs of mini-batches; an unknown model is refused."""
    import dataclasses

    from ntkbook.experiments import influence_malleability as IM

    cfg = dataclasses.replace(IM.Config.smoke(), n_train=40, n_test=40, epochs=3, batch=16, attn_steps=7)
    xtr, ltr, xte, lte, C = IM.task_data("mnist_3v8", cfg.n_train, cfg.n_test)
    y = IM.targets(ltr, C)
    z, _ = att.transform(xtr, xte, attend=True, normalize="row")
    _, h_attn = IM.train_model(z, y, C, cfg, seed=0, model="attn")
    _, h_relu = IM.train_model(z, y, C, cfg, seed=0, model="relu")
    _, h_same = IM.train_model(z, y, C, dataclasses.replace(cfg, attn_steps=None), seed=0, model="attn")
    assert h_attn["epoch"][-1] == 7
    assert h_relu["epoch"][-1] == 3
    np.testing.assert_allclose(h_same["loss"], h_relu["loss"])
    with pytest.raises(ValueError, match="unknown model"):
        IM.train_model(z, y, C, cfg, seed=0, model="mlp")
