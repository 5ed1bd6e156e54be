"""The whitening route for CIFAR's MLP-Attn: the whitening (a fixed affine map, its flat Gram
spectrum), attacks through it, the ``influence_cifar_route`` experiment at smoke scale (keys,
resume) and its claims module on a hand-made result."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.errors import ConfigError, InputError
from ntkbook.influence import interventions, whitened
from ntkbook.influence import whitening as wh
from ntkbook.models import attention, two_layer
from ntkbook.ntk import gram
from ntkbook.store import Result


def _anisotropic(n: int, d: int, seed: int = 0) -> np.ndarray:
    """``n`` points in ``d`` dimensions in [0, 1] with variances spread over four decades (a
    badly conditioned Gram, like images')."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(0, -2, d)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    x = 0.5 + 0.05 * (rng.standard_normal((n, d)) * scales) @ q.T
    assert 0 < x.min() and x.max() < 1
    return x


def _network(d: int, C: int, seed: int) -> dict:
    """A float64 two-layer network of width 16 with independent rows (not the symmetric start, whose
    output is 0 for every input, so that the loss depends on the inputs)."""
    rng = np.random.default_rng(seed)
    return {"W": rng.standard_normal((16, d)), "a": np.asarray(two_layer.init_heads(jax.random.PRNGKey(seed), d, 16, C)["a"], np.float64)}


# -- the whitening --------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", [(30, 50), (60, 20)])
def test_whitened_gram_is_flat_with_full_rank(n, d):
    """Without a ridge the whitened Gram's nonzero spectrum is flat to round-off (all ``n``), with
    the centred set's full rank (``n - 1`` or ``d``); the raw one is far from flat."""
    x = _anisotropic(n, d)
    w = wh.fit(x)
    assert w.rank == w.components == min(n - 1, d)
    lam, rank, kappa = gram.factor_spectrum(wh.apply(w, x))
    assert rank == w.rank
    assert kappa - 1.0 < 1e-10
    np.testing.assert_allclose(lam[:rank], n, rtol=1e-10)
    assert gram.factor_spectrum(x)[2] > 1e3
    # the attention over the whitened set is then n times the identity on it
    z = wh.apply(w, x)
    np.testing.assert_allclose(attention.attention(z), n * z, rtol=1e-9, atol=1e-9 * n * np.abs(z).max())


def test_ridge_and_truncation_give_the_predicted_kappa():
    """With ``k`` directions and a ridge ``r`` the whitened Gram's kappa is ``(1 + r kappa_k) / (1 + r)``,
    and the attention output's is its cube."""
    x = _anisotropic(40, 30, seed=1)
    for k, r in ((None, 1e-3), (12, 1e-2), (25, 0.3), (5, 0.0)):
        w = wh.fit(x, components=k, rel_ridge=r)
        predicted = wh.whitened_condition(w.variances, r)
        assert w.components == (k or w.rank) and w.ridge == pytest.approx(r * w.variances[0])
        z = wh.apply(w, x)
        lam, rank, kappa = gram.factor_spectrum(z)
        assert rank == w.components
        assert kappa == pytest.approx(predicted, rel=1e-9)
        assert gram.factor_spectrum(attention.attention(z))[2] == pytest.approx(predicted**3, rel=1e-8)
    # kappa_k of the centred set is what a very large ridge leaves
    w = wh.fit(x)
    assert wh.whitened_condition(w.variances, 1e12) == pytest.approx(
        gram.factor_spectrum(x - x.mean(axis=0))[2], rel=1e-6)


def test_fit_does_not_depend_on_the_order_or_the_svd_signs():
    x = _anisotropic(30, 20, seed=2)
    w, w2 = wh.fit(x, rel_ridge=1e-3), wh.fit(x[::-1], rel_ridge=1e-3)
    np.testing.assert_allclose(w2.matrix, w.matrix, rtol=1e-8, atol=1e-10 * np.abs(w.matrix).max())
    assert np.all(w.basis[np.argmax(np.abs(w.basis), axis=0), np.arange(w.components)] > 0)


def test_fit_refuses_bad_input():
    x = _anisotropic(10, 30)
    with pytest.raises(InputError, match="1..9"):
        wh.fit(x, components=10)
    with pytest.raises(InputError, match="rel_ridge"):
        wh.fit(x, rel_ridge=-1.0)
    with pytest.raises(InputError, match="same"):
        wh.fit(np.ones((5, 4)))
    with pytest.raises(InputError, match=r"\(N, 30\)"):
        wh.apply(wh.fit(x), x[:, :4])


def test_whitening_is_a_fixed_affine_map_the_pixel_gradient_passes_through():
    """A pixel step ``delta`` moves every whitened row by ``delta P`` whatever the row, and the
    gradient of the whitened model's loss with respect to the pixels is the gradient with respect
    to the whitened inputs times ``P^T`` (checked against finite differences, float64)."""
    x = _anisotropic(30, 12, seed=3)
    w = wh.fit(x, rel_ridge=1e-3)
    rng = np.random.default_rng(0)
    delta = 0.01 * rng.choice([-1.0, 1.0], x.shape)
    np.testing.assert_allclose(wh.apply(w, x + delta) - wh.apply(w, x), delta @ w.matrix, atol=1e-12)
    params = _network(w.components, 3, seed=0)
    y = np.eye(3)[rng.integers(0, 3, x.shape[0])]
    with jax.enable_x64(True):
        mean, P = jnp.asarray(w.mean), jnp.asarray(w.matrix)
        for attend in (False, True):
            fn = whitened.attack_loss(attend, 3)
            xj = jnp.asarray(x)
            g_x = np.asarray(jax.grad(fn)(xj, params, jnp.asarray(y), mean, P))

            k = w.components  # the same loss on whitened inputs: mean 0, P = I
            g_z = np.asarray(jax.grad(fn)(jnp.asarray(wh.apply(w, x)), params, jnp.asarray(y), jnp.zeros(k),
                                          jnp.eye(k)))
            assert np.abs(g_x).max() > 0
            np.testing.assert_allclose(g_x, g_z @ w.matrix.T, rtol=1e-9, atol=1e-12 * np.abs(g_x).max())
            for _ in range(2):
                v = rng.standard_normal(x.shape)
                h = 1e-6
                fd = (float(fn(xj + h * v, params, jnp.asarray(y), mean, P))
                      - float(fn(xj - h * v, params, jnp.asarray(y), mean, P))) / (2 * h)
                assert fd == pytest.approx(float(np.sum(g_x * v)), rel=1e-5)


@pytest.mark.parametrize("attend", [False, True])
def test_attack_through_the_whitening_stays_in_the_pixel_ball_and_raises_the_loss(attend):
    x = _anisotropic(30, 12, seed=4)
    w = wh.fit(x, rel_ridge=1e-3)
    rng = np.random.default_rng(1)
    y = (1.0 - 2.0 * rng.integers(0, 2, x.shape[0]))[:, None]
    params = _network(w.components, 1, seed=1)
    eps = 0.05
    settings = interventions.EvalSettings(lam=1.0, top_fraction=0.1, eps=eps, attacks=("pgd",),
                                          interventions=("adversarial",), pgd_steps=10, pgd_step_size=eps / 4)
    xa, m = whitened.run_attack("pgd", params, x, y, attend, 1, eps, w, settings, jax.random.PRNGKey(0))
    assert np.abs(xa - x).max() <= eps + 1e-15 and xa.min() >= 0 and xa.max() <= 1
    assert m["linf"] == pytest.approx(eps) and m["loss_after"] > m["loss_before"]
    assert m["loss_before"] == pytest.approx(whitened.loss(params, w, x, y, attend=attend, C=1))
    with pytest.raises(InputError, match="unknown attack"):
        whitened.run_attack("cw", params, x, y, attend, 1, eps, w, settings, jax.random.PRNGKey(0))
    # the influence of the whitened model is the raw pipeline's on whitened inputs
    xt = _anisotropic(10, 12, seed=5)
    yt = np.ones((10, 1))
    (I,), _ = whitened.influences(params, w, x, y, xt, yt, attend, (1e-2,))
    (I_raw,), _ = interventions.influences(params, wh.apply(w, x), y, wh.apply(w, xt), yt, attend, (1e-2,))
    np.testing.assert_array_equal(I, I_raw)


# -- the experiment's config ----------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [
    ("tasks", ("svhn",)), ("models", ("mlp",)), ("attack_models", ("relu", "relu")), ("seeds", ()),
    ("n_train", 45), ("width", 31), ("attn_steps", 0), ("components", 0), ("components", 40),
    ("rel_ridge", -1e-3), ("rel_ridge", np.inf), ("kappa_rel_ridges", (1e-3, 0.0)),
    ("kappa_rel_ridges", (-1.0,)), ("top_fraction", 0.0), ("eps", ()), ("eps", (0.3, 0.03)),
    ("eps", (1.5,)), ("ridges", (0.0,)), ("ridges_per_point", (1e-3, 1e-3)), ("pgd_steps", 0),
    ("pgd_step_fraction", 0.0), ("pgd_restarts", 0), ("null_draws", 0),
])
def test_config_refuses_bad_values_naming_the_field(field, value):
    from ntkbook.experiments import influence_cifar_route as route

    with pytest.raises(ConfigError, match=rf"^influence_cifar_route\.{field}\b"):
        dataclasses.replace(route.Config.smoke(), **{field: value})


def test_config_relations_and_presets():
    from ntkbook.experiments import influence_cifar_route as route

    smoke = route.Config.smoke()
    with pytest.raises(ConfigError, match=r"^influence_cifar_route\.attack_models\b"):
        dataclasses.replace(smoke, models=("relu",))
    with pytest.raises(ConfigError, match=r"^influence_cifar_route\.ridges\b"):
        dataclasses.replace(smoke, ridges=(), ridges_per_point=())
    dataclasses.replace(smoke, components=39, attack_models=(), attn_steps=None)
    paper = route.Config.paper()
    assert paper.tasks == ("cifar10", "cifar_auto_air") and paper.eps == (0.01, 0.03, 0.1, 0.3)
    assert paper.seeds == (0, 1, 2) and (paper.n_train, paper.width) == (500, 512)
    sub, what = route.reproduce_sample(paper)
    assert sub.seeds == (0,) and sub.tasks == paper.tasks and what
    assert route.estimate_seconds(sub) < route.estimate_seconds(paper)


# -- the experiment at smoke scale ----------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, data_dir):
    """The smoke preset run once, its points checkpointed in a folder of its own."""
    from ntkbook.experiments import influence_cifar_route as route
    from ntkbook.store import PointStore

    folder = tmp_path_factory.mktemp("points")
    config = route.Config.smoke()
    return config, folder, route.run(config, PointStore(folder, code="test"))


def test_smoke_result_has_every_key_and_shape(smoke_run):
    from ntkbook.experiments import influence_cifar_route as route

    config, _, res = smoke_run
    labels = list(route.ridge_labels(config))
    assert res["ridges"] == labels == ["lam=0.001", "nlam=0.001"]
    S, R = len(config.seeds), len(config.kappa_rel_ridges)
    for task in config.tasks:
        sp = res["spectra"][task]
        for name in route.INPUTS:
            for k in ("rank_G", "kappa_G", "rank_Gt", "kappa_Gt_measured", "kappa_G_cubed", "kappa_Ghat",
                      "kappa_rownorm", "null_step_ratio"):
                assert np.isfinite(sp[name][k]), (task, name, k)
            assert sp[name]["kappa_Gt_measured"] == pytest.approx(sp[name]["kappa_G_cubed"], rel=1e-6)
            assert res[f"{task}/spectra/{name}/lam_G"].shape == (sp[name]["rank_G"],)
        assert sp["raw"]["rank_G"] == config.n_train and sp["whitened"]["rank_G"] == config.n_train - 1
        assert sp["whitened"]["kappa_G"] == pytest.approx(sp["whitening"]["kappa_predicted"], rel=1e-9)
        assert sp["whitened"]["kappa_G"] < sp["centred"]["kappa_G"] < sp["raw"]["kappa_G"]
        for k in ("kappa_measured", "kappa_predicted", "kappa_attention_measured"):
            assert res[f"{task}/spectra/sweep/{k}"].shape == (R,)
        np.testing.assert_allclose(res[f"{task}/spectra/sweep/kappa_measured"],
                                   res[f"{task}/spectra/sweep/kappa_predicted"], rtol=1e-8)
        for model in config.models:
            t = res["table"][f"{task}/{model}"]
            for k in ("train_loss", "train_acc", "test_acc", "train_seconds"):
                assert len(t[k]) == S
            assert res[f"{task}/{model}/loss_curve"].shape == res[f"{task}/{model}/loss_epochs"].shape
            attacked = [k for k in t if k.startswith(("clean/", "pgd/", "null/"))]
            if model not in config.attack_models:
                assert not attacked
                continue
            for label in labels:
                assert res[f"{task}/{model}/influence_clean@{label}"].shape == (S, config.n_train)
                assert 0.0 <= t[f"clean/{label}/ceiling"][0] <= 1.0
            for eps in config.eps:
                for attack in route.ATTACKS:
                    head = f"{attack}/{eps:g}"
                    assert t[f"{head}/linf"][0] == pytest.approx(eps)
                    for label in labels:
                        assert 0.0 <= t[f"{head}/{label}/flip"][0] <= 1.0
                        assert -1.0 <= t[f"{head}/{label}/rho"][0] <= 1.0
                assert t[f"pgd/{eps:g}/loss_after"][0] == max(t[f"pgd/{eps:g}/restart_losses"][0])
                assert t[f"pgd/{eps:g}/loss_after"][0] > t[f"pgd/{eps:g}/loss_before"][0]
                for label in labels:
                    draws = t[f"null/{eps:g}/{label}/flip_draws"][0]
                    assert len(draws) == config.null_draws
                    assert t[f"null/{eps:g}/{label}/flip"][0] == pytest.approx(np.mean(draws))


def test_smoke_run_resumes_from_its_points(smoke_run):
    """A run stopped before its last attack point recomputes that point alone and gives the same
    result."""
    from ntkbook.experiments import influence_cifar_route as route
    from ntkbook.store import PointStore

    config, folder, res = smoke_run
    last = sorted(folder.glob("*cifar_auto_air_model=attn*attack=null*.json"))[-1]
    last.unlink()
    points = PointStore(folder, code="test")
    again = route.run(config, points)
    assert len(points.computed) == 1 and "attack=null" in points.computed[0]
    units = len(config.tasks) * (1 + len(config.seeds) * sum(route._units(config, m) for m in config.models))
    assert len(points.reused) == units - 1
    for key, table in res["table"].items():
        for k, values in table.items():
            if not k.endswith("seconds"):
                assert again["table"][key][k] == values, (key, k)
    assert again["spectra"] == res["spectra"]
    for k, a in res.arrays.items():
        np.testing.assert_array_equal(again.arrays[k], a)


def test_sample_view_is_the_first_seed_and_the_spectra(smoke_run):
    from ntkbook.experiments import influence_cifar_route as route

    config, _, res = smoke_run
    arrays, scalars = route.sample_view(res, route.reproduce_sample(config)[0])
    assert scalars["spectra"] == res["spectra"] and set(arrays) == set(res.arrays)


def test_claims_read_the_smoke_result(smoke_run):
    from ntkbook.claims import influence_cifar_route as claims

    config, _, res = smoke_run
    rows = claims.kappa_table(res)
    assert [(r["task"], r["input"]) for r in rows] == [(t, i) for t in config.tasks
                                                      for i in ("raw", "centred", "whitened")]
    assert len(claims.training_table(res)) == len(config.tasks) * len(config.models)
    for row in claims.flip_table(res, "nlam=0.001"):
        assert 0.0 <= row["null"][0] <= 100.0 and 0.0 <= row["pgd"][0] <= 100.0
    assert set(claims.cifar_rows(res)) == set(config.tasks)


# -- the claims on a hand-made result -------------------------------------------------------------
def _synthetic_result() -> Result:
    """Two seeds; cifar10's MLP-Attn does not train (one seed at 0.5), cifar_auto_air's does."""
    config = {"tasks": ["cifar10", "cifar_auto_air"], "models": ["relu", "attn"], "attack_models": ["attn"],
              "seeds": [0, 1], "eps": [0.1, 0.3], "kappa_rel_ridges": [0.0, 1e-3]}
    table, arrays, spectra = {}, {}, {}
    for task in config["tasks"]:
        spectra[task] = {
            name: {"rank_G": 500 - (name != "raw"), "kappa_G": kappa, "kappa_G_cubed": kappa**3,
                   "kappa_Gt_measured": kappa**3, "kappa_Ghat": kappa**2, "kappa_rownorm": kappa / 2,
                   "null_step_ratio": 2.0, "rank_Gt": 500 - (name != "raw")}
            for name, kappa in (("raw", 1e6), ("centred", 1e5), ("whitened", 101.0))}
        spectra[task]["whitening"] = {"components": 499, "rel_ridge": 1e-3, "kappa_k": 1e5, "kappa_predicted": 101.0}
        arrays[f"{task}/spectra/sweep/kappa_measured"] = np.array([1.0, 101.0])
        arrays[f"{task}/spectra/sweep/kappa_predicted"] = np.array([1.0, 101.0])
        arrays[f"{task}/spectra/sweep/kappa_attention_measured"] = np.array([1.0, 101.0**3])
        table[f"{task}/relu"] = {"train_loss": [0.01, 0.03], "train_acc": [1.0, 1.0], "test_acc": [0.7, 0.8]}
        attn_acc = [0.9, 0.5] if task == "cifar10" else [0.9, 1.0]
        table[f"{task}/attn"] = {"train_loss": [0.1, 0.2], "train_acc": attn_acc, "test_acc": [0.6, 0.7],
                                 "clean/nlam=0.001/ceiling": [0.5, 0.4]}
        for eps in config["eps"]:
            table[f"{task}/attn"].update({
                f"pgd/{eps:g}/nlam=0.001/flip": [eps, 3 * eps], f"null/{eps:g}/nlam=0.001/flip": [0.0, 0.1],
                f"pgd/{eps:g}/nlam=0.001/rho": [0.5, 0.7], f"pgd/{eps:g}/loss_after": [10.0, 20.0],
                f"pgd/{eps:g}/loss_before": [0.0, 0.2]})
    return Result(name="influence_cifar_route", config=config, arrays=arrays,
                  scalars={"table": table, "spectra": spectra, "ridges": ["nlam=0.001"],
                           "inputs": {"raw": "", "centred": "", "whitened": ""}})


def test_claims_on_a_synthetic_result():
    from ntkbook.claims import influence_cifar_route as claims

    res = _synthetic_result()
    rows = claims.kappa_table(res)
    assert len(rows) == 6 and rows[0]["kappa_G"] == 1e6 and "kappa_predicted" not in rows[0]
    assert rows[2]["input"] == "whitened" and rows[2]["kappa_predicted"] == 101.0 and rows[2]["components"] == 499
    sweep = claims.ridge_sweep(res, "cifar10")
    np.testing.assert_array_equal(sweep["rel_ridge"], [0.0, 1e-3])
    assert sweep["attention"][1] == pytest.approx(101.0**3)
    assert not claims.attn_trains(res, "cifar10") and claims.attn_trains(res, "cifar_auto_air")
    train = claims.training_table(res)
    attn10 = next(r for r in train if r["task"] == "cifar10" and r["model"] == "attn")
    assert attn10["train_acc"]["mean"] == pytest.approx(0.7)
    assert attn10["train_acc"]["spread"] == pytest.approx(np.std([0.9, 0.5], ddof=1))
    assert not attn10["trained"] and attn10["inputs"] == "whitened"
    raw = Result(name="influence_map", config={"seeds": [0, 1, 2]},
                 scalars={"table": {"cifar10/attn": {"train_loss": [2.0] * 3, "train_acc": [0.28] * 3,
                                                     "test_acc": [0.22] * 3}}})
    both = claims.training_table(res, raw=raw)
    assert len(both) == len(train) + 1
    first = [r for r in both if r["task"] == "cifar10" and r["model"] == "attn"]
    assert [r["inputs"] for r in first] == ["raw", "whitened"] and first[0]["seeds"] == [0, 1, 2]
    flips = claims.flip_table(res, "nlam=0.001")
    assert [(r["task"], r["eps"]) for r in flips] == [("cifar_auto_air", 0.1), ("cifar_auto_air", 0.3)]
    assert flips[1]["pgd"][0] == pytest.approx(60.0) and flips[1]["null"][0] == pytest.approx(5.0)
    assert flips[0]["ceiling"][0] == pytest.approx(45.0) and flips[0]["pgd_loss"] == 15.0
    with pytest.raises(KeyError, match="no ridge"):
        claims.flip_table(res, "lam=0.5")
    rows = claims.cifar_rows(res)
    assert rows["cifar10"].startswith("untested") and rows["cifar_auto_air"].startswith("tested")
