"""NTK leave-one-out influence against brute-force refits; flip rate and Spearman on hand-made cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from ntkbook.influence import interventions, references, scores, training
from ntkbook.influence.tasks import task_data, targets
from ntkbook.models import attention, two_layer


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
    fit = scores.krr_fit(K, Y, lam)
    loo = scores.loo_predictions(fit, Kx)
    for i in range(K.shape[0]):
        np.testing.assert_allclose(loo[i], _refit_without(K, Kx, Y, lam, i), rtol=1e-9, atol=1e-10)


def test_influence_matches_brute_force_on_ntk_of_trained_shape():
    # the kernel the chapter uses: class-diagonal eNTK of the multi-head net on attention inputs
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(30, 12))
    ztr, zte = attention.transform(x[:20], x[20:], attend=True, normalize="row")
    params = two_layer.init_heads(jax.random.PRNGKey(0), 12, 64, 3)  # the kernel is formed in float64
    K, Kx = two_layer.entk_W(params, ztr), two_layer.entk_W(params, zte, ztr)
    Y, Yt = np.eye(3)[rng.integers(0, 3, 20)], np.eye(3)[rng.integers(0, 3, 10)]
    lam = 1e-3
    f = Kx @ np.linalg.solve(K + lam * np.eye(20), Y)
    brute = np.array([0.5 * np.sum((_refit_without(K, Kx, Y, lam, i) - Yt) ** 2) - 0.5 * np.sum((f - Yt) ** 2)
                      for i in range(20)])
    np.testing.assert_allclose(scores.ntk_influence(K, Kx, Y, Yt, lam), brute, rtol=1e-7, atol=1e-9)


def test_binary_targets_as_vectors():
    K, Kx, Y, Yt = _kernel_problem(C=1)
    a = scores.ntk_influence(K, Kx, Y[:, 0], Yt[:, 0], 0.1)
    b = scores.ntk_influence(K, Kx, Y, Yt, 0.1)
    np.testing.assert_allclose(a, b)


def test_entk_heads_is_the_class_diagonal_block():
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        z = jnp.asarray(rng.normal(size=(5, 4)))
        p = two_layer.init_heads(jax.random.PRNGKey(3), 4, 8, 3, dtype=jnp.float64)
        p = {"W": p["W"] + 0.3 * jax.random.normal(jax.random.PRNGKey(4), p["W"].shape, jnp.float64), "a": p["a"]}
        J = jax.jacrev(lambda W: two_layer.apply_batch({"W": W, "a": p["a"]}, z))(p["W"])  # (N, C, m, d)
        J = np.asarray(J).reshape(5, 3, -1)
        closed = two_layer.entk_W(p, np.asarray(z))
        for c in range(3):
            np.testing.assert_allclose(J[:, c] @ J[:, c].T, closed, rtol=1e-10, atol=1e-12)


def test_top_indices_and_flip_rate_hand_made():
    before = np.array([5.0, -4.0, 3.0, 0.1, -0.2, 0.05, 2.0, -1.0, 0.3, 0.4])
    np.testing.assert_array_equal(scores.top_indices(before, 0.3), [0, 1, 2])
    after = np.array([-1.0, -3.0, -0.5, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0])
    assert scores.flip_rate(before, after, fraction=0.3) == pytest.approx(2 / 3)
    assert scores.flip_rate(before, after, fraction=0.1) == 1.0
    assert scores.flip_rate(before, before) == 0.0
    assert scores.flip_rate(before, -before, fraction=0.5) == 1.0
    assert scores.flip_rate(before, after, top=[1]) == 0.0
    # exactly zero afterwards counts as a sign change
    assert scores.flip_rate(before, np.where(np.arange(10) == 0, 0.0, before), fraction=0.1) == 1.0


def test_spearman_hand_made():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert scores.spearman(a, a**3) == pytest.approx(1.0)
    assert scores.spearman(a, -a) == pytest.approx(-1.0)
    # 1 - 6 sum d^2 / (n (n^2 - 1)) with d = (1, 1, 1, 1, 0): 1 - 24/120
    assert scores.spearman(a, np.array([2.0, 1.0, 4.0, 3.0, 5.0])) == pytest.approx(0.8)
    b = np.random.default_rng(0).normal(size=50)
    c = b + np.random.default_rng(1).normal(size=50)
    assert scores.spearman(b, c) == pytest.approx(scipy.stats.spearmanr(b, c).statistic)


def test_bad_input():
    K, Kx, Y, Yt = _kernel_problem()
    with pytest.raises(ValueError, match="square"):
        scores.krr_fit(K[:, :-1], Y, 0.1)
    with pytest.raises(ValueError, match="lam"):
        scores.krr_fit(K, Y, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        scores.krr_fit(np.where(np.eye(K.shape[0]) > 0, np.nan, K), Y, 0.1)
    with pytest.raises(ValueError, match="targets"):
        scores.krr_fit(K, Y[:-1], 0.1)
    with pytest.raises(ValueError, match="positive definite"):
        scores.krr_fit(-np.eye(4) * 10, np.ones(4), 0.1)
    with pytest.raises(ValueError, match="outputs"):
        scores.ntk_influence(K, Kx, Y, Yt[:, :2], 0.1)
    with pytest.raises(ValueError, match="same length"):
        scores.flip_rate(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        scores.flip_rate(np.array([1.0, np.nan]), np.ones(2))
    with pytest.raises(ValueError, match="fraction"):
        scores.top_indices(np.ones(3), 0.0)


def test_experiment_pipeline_fixed_points(data_dir):
    """Theory fixes two outcomes of the chapter's pipeline: an attack of radius 0 changes nothing
    (flip rate 0, Spearman 1, for both models), and removing nothing is the identity."""
    recipe = training.TrainRecipe(width=64, epochs=5, batch=32, lr=1e-2, l2=0.0, attn_steps=200)
    settings = interventions.EvalSettings(
        lam=1e-3, top_fraction=0.1, eps=0.0, attacks=("fgsm", "pgd", "mim"),
        interventions=("adversarial", "transformed"), pgd_steps=2, pgd_step_size=0.04, mim_steps=2,
        mim_decay=1.0)
    data = task_data("mnist_3v8", 40, 40)
    xtr, ltr, xte, lte, C = data
    for model in ("relu", "attn"):
        ztr, _ = attention.transform(xtr, xte, attend=model == "attn", normalize="row")
        params, _ = training.train_model(ztr, targets(ltr, C), C, recipe, seed=0, model=model)
        _, sc = interventions.evaluate(params, data, model, settings, 0, do_ablation=False)
        for inter in ("adversarial", "transformed"):
            for a in settings.attacks:
                assert sc[f"{inter}/{a}/flip"] == 0.0
                assert sc[f"{inter}/{a}/rho"] == pytest.approx(1.0)
                assert sc[f"{inter}/{a}/linf"] == 0.0
        assert set(sc) <= interventions.SCORE_KEYS


def test_train_model_recipes():
    """MLP-Attn is trained full-batch for ``attn_steps`` steps, 2L-ReLU (and MLP-Attn when
    ``attn_steps`` is None) for ``epochs`` epochs of mini-batches; an unknown model is refused."""
    import dataclasses

    recipe = training.TrainRecipe(width=64, epochs=3, batch=16, lr=1e-2, l2=0.0, attn_steps=7)
    xtr, ltr, xte, lte, C = task_data("mnist_3v8", 40, 40)
    y = targets(ltr, C)
    z, _ = attention.transform(xtr, xte, attend=True, normalize="row")
    _, h_attn = training.train_model(z, y, C, recipe, seed=0, model="attn")
    _, h_relu = training.train_model(z, y, C, recipe, seed=0, model="relu")
    _, h_same = training.train_model(z, y, C, dataclasses.replace(recipe, attn_steps=None), seed=0,
                                     model="attn")
    assert h_attn["epoch"][-1] == 7
    assert h_relu["epoch"][-1] == 3
    np.testing.assert_allclose(h_same["loss"], h_relu["loss"])
    with pytest.raises(ValueError, match="unknown model"):
        training.train_model(z, y, C, recipe, seed=0, model="mlp")


def test_mim_needs_its_steps():
    """Settings without MIM's steps (the width sweep's) refuse to run MIM rather than guess them."""
    settings = interventions.EvalSettings(lam=1e-3, top_fraction=0.1, eps=0.1, attacks=("mim",),
                                          interventions=("adversarial",), pgd_steps=2, pgd_step_size=0.04)
    x = np.full((4, 3), 0.5)
    params = two_layer.init_heads(jax.random.PRNGKey(0), 3, 8, 1)
    with pytest.raises(ValueError, match="mim_steps"):
        interventions.run_attack("mim", params, x, np.ones((4, 1)), False, 1, 0.1, settings,
                                 np.ones(4, bool), jax.random.PRNGKey(0))


def test_ridge_labels_key_each_ridge_and_its_value_scales_with_n():
    labels = scores.ridge_labels((1e-3, 0.1), (1e-4,))
    assert labels == {"lam=0.001": (1e-3, False), "lam=0.1": (0.1, False), "nlam=0.0001": (1e-4, True)}
    assert scores.ridge_values(labels, 500) == [1e-3, 0.1, 1e-4 * 500]


def test_flip_and_rho_per_label_are_flip_rate_and_spearman():
    rng = np.random.default_rng(0)
    clean = {"a": rng.normal(size=50), "b": rng.normal(size=50)}
    after = {"a": -clean["a"], "b": clean["b"] + 0.01 * rng.normal(size=50)}
    out = scores.flip_and_rho(clean, after, ["a", "b"], fraction=0.2)
    assert out["a/flip"] == 1.0 and out["a/rho"] == pytest.approx(-1.0)
    assert out["b/flip"] == scores.flip_rate(clean["b"], after["b"], fraction=0.2) < 0.2
    assert out["b/rho"] == scores.spearman(clean["b"], after["b"])
    assert set(out) == {"a/flip", "a/rho", "b/flip", "b/rho"}


def test_perturbation_size_is_the_largest_entry_and_the_mean_row_norm():
    x = np.zeros((2, 3))
    xa = np.array([[0.1, -0.3, 0.0], [0.0, 0.0, 0.4]])
    l2_mean = ((0.1**2 + 0.3**2) ** 0.5 + 0.4) / 2
    assert interventions.perturbation_size(x, xa) == {"linf": 0.4, "l2_mean": pytest.approx(l2_mean)}


def test_clean_point_is_the_influence_and_krr_accuracy_at_each_ridge():
    rng = np.random.default_rng(1)
    n, T, C = 30, 12, 3
    F, Fx = rng.normal(size=(n, 8)), rng.normal(size=(T, 8))
    K, Kx = F @ F.T, Fx @ F.T
    ltr, lte = rng.integers(0, C, n), rng.integers(0, C, T)
    labels = scores.ridge_labels((0.5,), (0.1,))
    arrays, sc = interventions.clean_point(K, Kx, targets(ltr, C), lte, C, labels, 0.2)
    for label, lam in (("lam=0.5", 0.5), ("nlam=0.1", 0.1 * n)):
        I0 = scores.ntk_influence(K, Kx, targets(ltr, C), targets(lte, C), lam)
        np.testing.assert_array_equal(arrays[f"influence_clean@{label}"], I0)
        pred = scores.krr_predict(scores.krr_fit(K, targets(ltr, C), lam), Kx)
        assert sc[f"clean/{label}/krr_test_acc"] == float(np.mean(np.argmax(pred, 1) == lte))
        assert sc[f"clean/{label}/frac_helpful"] == float(np.mean(I0 > 0))
        top = scores.top_indices(I0, 0.2)
        assert sc[f"clean/{label}/frac_helpful_top"] == float(np.mean(I0[top] > 0))
        assert sc[f"clean/{label}/ceiling"] == references.independence_ceiling(I0, top=top)


def test_train_recipe_of_a_config_takes_its_fields_and_overrides():
    from ntkbook.experiments import influence_advtrain, influence_map

    cfg = influence_map.Config.paper()
    r = training.TrainRecipe.of(cfg)
    assert (r.width, r.epochs, r.batch, r.lr, r.l2, r.attn_steps) == (cfg.width, cfg.epochs, cfg.batch, cfg.lr,
                                                                      cfg.l2, cfg.attn_steps)
    assert training.TrainRecipe.of(cfg, attn_steps=None).attn_steps is None
    assert influence_advtrain.train_recipe(influence_advtrain.Config.paper()).attn_steps is None
