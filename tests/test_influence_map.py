"""The references of the influence map (the independence ceiling, the random-sign null drawn in
NumPy), the worst-case flip attack (float64 tiny cases), and the ``influence_map`` experiment at
smoke scale."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.errors import InputError
from ntkbook.influence import flip_attack, interventions, references, scores
from ntkbook.models import attention, two_layer


# -- the independence ceiling ---------------------------------------------------------------------
def test_ceiling_hand_made():
    # signs of all ten: 7 positive, 3 negative; the top two (|I| = 9, 8) are one negative, one positive
    clean = np.array([-9.0, 8.0, 1, 1, 1, 1, 1, 1, -0.5, -0.5])
    # the negative flips with prob 0.7, the positive with 0.3
    assert references.independence_ceiling(clean, fraction=0.2) == pytest.approx(0.5)
    # top = the negative alone: 0.7; a top set given by hand
    assert references.independence_ceiling(clean, fraction=0.1) == pytest.approx(0.7)
    assert references.independence_ceiling(clean, top=[2, 3]) == pytest.approx(0.3)
    with pytest.raises(InputError, match="NaN"):
        references.independence_ceiling(np.array([1.0, np.nan]))
    with pytest.raises(InputError, match="empty"):
        references.independence_ceiling(clean, top=[])


def test_independent_signs_flip_at_the_ceiling():
    """Perturbed influences whose signs are independent draws from the clean sign distribution
    flip the top set at the ceiling's rate, within a binomial interval. The case is lopsided (70 %
    of all points helpful, the top set mostly harmful), so neither 1/2 nor the top set's own sign
    mix would pass."""
    rng = np.random.default_rng(0)
    n = 1000
    pos = rng.uniform(0.0, 1.4, 700)
    neg = -rng.uniform(0.6, 1.5, 300)  # the largest are harmful
    clean = rng.permutation(np.concatenate([pos, neg]))
    top = scores.top_indices(clean, 0.1)
    ceiling = references.independence_ceiling(clean, top=top)
    assert 0.52 < ceiling < 0.58  # ~60 % of T negative (flipping with probability 0.7), ~40 % positive (0.3)
    reps = 400
    rates = [scores.flip_rate(clean, rng.choice(np.sign(clean), n) * rng.uniform(0.1, 1.0, n), top=top)
             for _ in range(reps)]
    trials = reps * top.size
    sd = np.sqrt(ceiling * (1 - ceiling) / trials)  # an upper bound: the trials are not identical
    assert abs(np.mean(rates) - ceiling) < 4 * sd
    mix = np.mean(clean[top] > 0)
    for wrong in (0.5, 2 * mix * (1 - mix)):  # a coin; the top set's own sign mix
        assert abs(wrong - ceiling) > 8 * sd


# -- the random-sign null ------------------------------------------------------------------------
def test_random_sign_null_is_a_clipped_fgsm_sized_step():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.2, 0.8, (6, 50))
    mask = np.array([True, False, True, False, False, True])
    xa = references.random_sign_null(x, 0.1, np.random.default_rng(1), mask=mask)
    np.testing.assert_allclose(np.abs(xa - x)[mask], 0.1, atol=1e-15)
    np.testing.assert_array_equal(xa[~mask], x[~mask])
    # near the box's faces the step is clipped
    xb = references.random_sign_null(np.zeros((2, 40)), 0.3, np.random.default_rng(1))
    assert xb.min() == 0.0 and xb.max() == pytest.approx(0.3)
    with pytest.raises(InputError, match="box"):
        references.random_sign_null(x + 1.0, 0.1, rng)


def _tiny_problem(C: int = 1, n: int = 30, n_test: int = 20, D: int = 12, m: int = 16, seed: int = 0):
    """A float64 tiny influence problem: pixels in [0.1, 0.9], a random frozen network."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 0.9, (n, D))
    xt = rng.uniform(0.1, 0.9, (n_test, D))
    labels, labels_t = rng.integers(0, max(C, 2), n), rng.integers(0, max(C, 2), n_test)
    Y = (1.0 - 2.0 * labels)[:, None] if C == 1 else np.eye(C)[labels]
    Yt = (1.0 - 2.0 * labels_t)[:, None] if C == 1 else np.eye(C)[labels_t]
    params = {k: np.asarray(v, np.float64) for k, v in
              two_layer.init_heads(jax.random.PRNGKey(seed), D, m, C).items()}
    return params, x, Y, xt, Yt


@pytest.mark.parametrize("attend", [False, True])
def test_null_flip_rate_is_the_same_with_x64_on_and_off(attend):
    """The whole null measurement (draws, influences, flip rate) gives one number whatever
    ``jax_enable_x64`` is."""
    params, x, Y, xt, Yt = _tiny_problem(C=3)

    def null_flip():
        (I0,), _ = interventions.influences(params, x, Y, xt, Yt, attend, (1e-2,))
        xa = references.random_sign_null(x, 0.1, np.random.default_rng(7))
        (Ia,), _ = interventions.influences(params, xa, Y, xt, Yt, attend, (1e-2,))
        return scores.flip_rate(I0, Ia, fraction=0.2), xa

    with jax.enable_x64(True):
        on, xa_on = null_flip()
    with jax.enable_x64(False):
        off, xa_off = null_flip()
    np.testing.assert_array_equal(xa_on, xa_off)
    assert on == off


# -- the flip attack -----------------------------------------------------------------------------
@pytest.mark.parametrize("attend", [False, True])
def test_jax_influence_is_the_numpy_influence(attend):
    params, x, Y, xt, Yt = _tiny_problem(C=3)
    (I_np,), _ = interventions.influences(params, x, Y, xt, Yt, attend, (1e-2,))
    with jax.enable_x64(True):
        I_jax = flip_attack.perturbed_influence(
            jnp.asarray(x), jnp.asarray(xt), jnp.asarray(params["W"]),
            jnp.asarray(flip_attack.head_weights(params["a"])), jnp.asarray(Y), jnp.asarray(Yt), 1e-2,
            attend=attend)
    np.testing.assert_allclose(np.asarray(I_jax), I_np, rtol=1e-8, atol=1e-12 * np.abs(I_np).max())


@pytest.mark.parametrize("attend", [False, True])
def test_flip_objective_gradient_matches_finite_differences(attend):
    params, x, Y, xt, Yt = _tiny_problem(C=1)
    (I0,), _ = interventions.influences(params, x, Y, xt, Yt, attend, (1e-2,))
    top = scores.top_indices(I0, 0.2)
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        f = lambda xx: flip_attack.flip_objective(  # noqa: E731
            xx, jnp.asarray(xt), jnp.asarray(params["W"]),
            jnp.asarray(flip_attack.head_weights(params["a"])), jnp.asarray(Y), jnp.asarray(Yt), 1e-2,
            jnp.asarray(top), jnp.asarray(I0[top]), attend=attend)
        xj = jnp.asarray(x)
        assert float(f(xj)) == pytest.approx(np.tanh(1.0), rel=1e-10)
        g = np.asarray(jax.grad(f)(xj))
        assert np.abs(g).max() > 0
        for _ in range(3):
            v = rng.standard_normal(x.shape)
            h = 1e-5  # the attention Gram matrix of 30 points in 12 pixels is singular: rounding
            fd = (float(f(xj + h * v)) - float(f(xj - h * v))) / (2 * h)  # dominates smaller steps
            assert fd == pytest.approx(float(np.sum(g * v)), rel=1e-6)


@pytest.mark.parametrize("attend", [False, True])
def test_flip_attack_beats_random_signs_on_its_own_objective(attend):
    """After the attack its objective is below that of random signs of the same radius, and its
    flip rate at least the null's; the result stays in the ball and the box."""
    params, x, Y, xt, Yt = _tiny_problem(C=1, seed=1)
    lam, eps = 1e-2, 0.1
    (I0,), _ = interventions.influences(params, x, Y, xt, Yt, attend, (lam,))
    top = scores.top_indices(I0, 0.2)
    res = flip_attack.flip_attack(params, x, Y, xt, Yt, I0, lam, eps, attend=attend, top=top,
                                  steps=20, step_size=eps / 10, restarts=2,
                                  rng=np.random.default_rng(0))
    assert np.abs(res.x - x).max() <= eps + 1e-15 and res.x.min() >= 0 and res.x.max() <= 1
    assert res.objective_clean == pytest.approx(np.tanh(1.0))
    assert res.objective == min(res.restart_objectives) and len(res.restart_objectives) == 2
    (Ia,), _ = interventions.influences(params, res.x, Y, xt, Yt, attend, (lam,))
    flip = scores.flip_rate(I0, Ia, top=top)
    with jax.enable_x64(True):
        fixed = dict(x_test=jnp.asarray(xt), W=jnp.asarray(params["W"]),
                     w=jnp.asarray(flip_attack.head_weights(params["a"])), Y=jnp.asarray(Y),
                     Y_test=jnp.asarray(Yt), lam=lam, top=jnp.asarray(top), clean_top=jnp.asarray(I0[top]))
        assert float(flip_attack.flip_objective(jnp.asarray(res.x), **fixed, attend=attend)) == \
            pytest.approx(res.objective, abs=1e-9)
        null_obj, null_flip = [], []
        for s in range(5):
            xn = references.random_sign_null(x, eps, np.random.default_rng(100 + s))
            null_obj.append(float(flip_attack.flip_objective(jnp.asarray(xn), **fixed, attend=attend)))
            (In,), _ = interventions.influences(params, xn, Y, xt, Yt, attend, (lam,))
            null_flip.append(scores.flip_rate(I0, In, top=top))
    assert res.objective < min(null_obj)
    assert flip >= max(null_flip)
    assert flip > 0


# -- the experiment at smoke scale ---------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, data_dir):
    """The smoke preset run once, its points checkpointed in a folder of its own."""
    from ntkbook.experiments import influence_map
    from ntkbook.store import PointStore

    folder = tmp_path_factory.mktemp("points")
    config = influence_map.Config.smoke()
    return config, folder, influence_map.run(config, PointStore(folder, code="test"))


def test_smoke_result_has_every_key_and_shape(smoke_run):
    from ntkbook.experiments import influence_map

    config, _, res = smoke_run
    labels = list(influence_map.ridge_labels(config))
    assert labels == ["lam=0.001", "nlam=0.001"] == res["ridges"]
    S = len(config.seeds)
    for task in config.tasks:
        for model in config.models:
            t = res["table"][f"{task}/{model}"]
            for k in ("train_loss", "train_acc", "test_acc", "train_seconds"):
                assert len(t[k]) == S
            for label in labels:
                assert res[f"{task}/{model}/influence_clean@{label}"].shape == (S, config.n_train)
                for k in ("krr_test_acc", "frac_helpful", "frac_helpful_top", "ceiling"):
                    assert 0.0 <= t[f"clean/{label}/{k}"][0] <= 1.0
            assert res[f"{task}/{model}/loss_curve"].shape == res[f"{task}/{model}/loss_epochs"].shape
            for eps in config.eps:
                for attack in (*config.attacks, "null"):
                    head = f"{attack}/{eps:g}"
                    assert t[f"{head}/linf"][0] == pytest.approx(eps)  # every attack reaches the faces
                    assert t[f"{head}/loss_after"][0] >= 0
                    for label in labels:
                        assert 0.0 <= t[f"{head}/{label}/flip"][0] <= 1.0
                        assert -1.0 <= t[f"{head}/{label}/rho"][0] <= 1.0
                assert len(t[f"pgd/{eps:g}/restart_losses"][0]) == config.pgd_restarts
                assert t[f"pgd/{eps:g}/loss_after"][0] == max(t[f"pgd/{eps:g}/restart_losses"][0])
                for label in labels:
                    draws = t[f"null/{eps:g}/{label}/flip_draws"][0]
                    assert len(draws) == config.null_draws
                    assert t[f"null/{eps:g}/{label}/flip"][0] == pytest.approx(np.mean(draws))
            flip_keys = [k for k in t if k.startswith("flipobj/")]
            if task not in config.flip_tasks:
                assert not flip_keys
                continue
            for eps in config.flip_eps:
                for label in influence_map.flip_ridge_labels(config):
                    head = f"flipobj/{eps:g}/{label}"
                    assert t[f"{head}/objective"][0] < t[f"{head}/objective_clean"][0]
                    assert t[f"{head}/objective_clean"][0] == pytest.approx(np.tanh(1.0))
                    assert t[f"{head}/linf"][0] <= eps + 1e-12


def test_smoke_references_bracket_the_flip_rates(smoke_run):
    """On average over models, radii and ridges the ceiling is at least the null, the null at least
    0; the flip-objective attack flips at least as many as the null where it runs."""
    from ntkbook.experiments import influence_map

    config, _, res = smoke_run
    ceil, null = [], []
    for task in config.tasks:
        for model in config.models:
            t = res["table"][f"{task}/{model}"]
            for label in influence_map.ridge_labels(config):
                ceil.append(t[f"clean/{label}/ceiling"][0])
                null.append(np.mean([t[f"null/{e:g}/{label}/flip"][0] for e in config.eps]))
            if task in config.flip_tasks:
                for e in config.flip_eps:
                    for label in influence_map.flip_ridge_labels(config):
                        assert t[f"flipobj/{e:g}/{label}/flip"][0] >= t[f"null/{e:g}/{label}/flip"][0]
    assert np.mean(ceil) >= np.mean(null) >= 0.0


def test_smoke_run_resumes_from_its_points(smoke_run):
    """A run stopped before its last attack point recomputes that point alone and gives the same
    result."""
    from ntkbook.experiments import influence_map
    from ntkbook.store import PointStore

    config, folder, res = smoke_run
    last = sorted(folder.glob("*flipobj*.json"))[-1]
    last.unlink()
    points = PointStore(folder, code="test")
    again = influence_map.run(config, points)
    assert len(points.computed) == 1 and "flipobj" in points.computed[0]
    assert len(points.reused) == (influence_map._units(config, config.tasks[0]) * len(config.models)
                                  * len(config.seeds) - 1)
    for key, table in res["table"].items():
        for k, values in table.items():
            if not k.endswith("seconds"):
                assert again["table"][key][k] == values, (key, k)
    for k, a in res.arrays.items():
        np.testing.assert_array_equal(again.arrays[k], a)


def test_plot_flip_vs_eps(smoke_run):
    import matplotlib.pyplot as plt

    from ntkbook.plotting.influence_map import plot_flip_vs_eps

    config, _, res = smoke_run
    fig = plot_flip_vs_eps(res, "nlam=0.001")
    shown = [ax for ax in fig.axes if ax.axison]
    assert len(shown) == len(config.tasks)
    labels = [" ".join(t.get_text().split()) for leg in fig.findobj(plt.matplotlib.legend.Legend) for t in leg.get_texts()]
    assert {"2L-ReLU", "MLP-Attn", "random-sign null", "clean-share independence level", "flip objective"} <= set(labels)
    plt.close(fig)
    with pytest.raises(KeyError, match="no ridge"):
        plot_flip_vs_eps(res, "lam=0.5")


def test_map_agrees_with_the_main_experiment_where_they_overlap(data_dir):
    """The same seed gives the same network as the main experiment's pipeline
    (:func:`ntkbook.influence.interventions.evaluate`), and FGSM and MIM (deterministic) at its
    radius give its flip rates and rhos, with lam and with n lam."""
    import dataclasses

    from ntkbook.experiments import influence_map
    from ntkbook.influence import training
    from ntkbook.influence.tasks import task_data, targets

    config = dataclasses.replace(
        influence_map.Config.smoke(), models=("attn",), eps=(0.1,), attacks=("fgsm", "mim"),
        ridges=(1e-3,), ridges_per_point=(1e-3,), flip_tasks=(), flip_eps=())
    res = influence_map.run(config)
    t = res["table"]["mnist_3v8/attn"]
    data = task_data("mnist_3v8", config.n_train, config.n_test)
    xtr, ltr, xte, _, C = data
    ztr, _ = attention.transform(xtr, xte, attend=True, normalize="row")
    params, hist = training.train_model(ztr, targets(ltr, C), C, influence_map.train_recipe(config), 0, model="attn")
    assert t["train_loss"][0] == float(hist["loss"][-1])
    settings = interventions.EvalSettings(
        lam=1e-3, top_fraction=config.top_fraction, eps=0.1, attacks=("fgsm", "mim"),
        interventions=("adversarial",), pgd_steps=1, pgd_step_size=0.01, mim_steps=config.mim_steps,
        mim_decay=config.mim_decay)
    _, sc = interventions.evaluate(params, data, "attn", settings, 0, do_ablation=False)
    for a in ("fgsm", "mim"):
        assert t[f"{a}/0.1/lam=0.001/flip"][0] == sc[f"adversarial/{a}/flip"]
        assert t[f"{a}/0.1/nlam=0.001/flip"][0] == sc[f"adversarial/{a}/flip_nlam"]
        assert t[f"{a}/0.1/lam=0.001/rho"][0] == pytest.approx(sc[f"adversarial/{a}/rho"], abs=1e-12)
        assert t[f"{a}/0.1/loss_after"][0] == sc[f"adversarial/{a}/loss_after"]
