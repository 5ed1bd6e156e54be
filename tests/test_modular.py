"""The modular-addition MLP, its eNTK, and the analysis pipeline of the modular_mlp experiment."""

import dataclasses

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.ntk import entk  # noqa: E402
from ntkbook.ntk import features  # noqa: E402
from ntkbook.experiments import make_config  # noqa: E402
from ntkbook.experiments import modular_mlp  # noqa: E402
from ntkbook.models import modular  # noqa: E402
from ntkbook.store import PointStore  # noqa: E402


def test_dataset_and_split():
    p = 7
    x, y, a, b = modular.dataset(p)
    assert x.shape == (49, 14)
    np.testing.assert_array_equal(x.sum(axis=1), 2.0)
    np.testing.assert_array_equal(y, (a + b) % p)
    n = 5 * 7 + 3
    assert x[n, 5] == 1 and x[n, 7 + 3] == 1 and (a[n], b[n]) == (5, 3)
    tr, te = modular.split(p, 0.7, seed=0)
    assert len(tr) == round(0.7 * 49) and len(set(tr) | set(te)) == 49 and not set(tr) & set(te)
    tr2, _ = modular.split(p, 0.7, seed=0)
    np.testing.assert_array_equal(tr, tr2)
    with pytest.raises(ValueError):
        modular.split(p, 1.5, 0)
    with pytest.raises(ValueError):
        modular.apply(modular.init(jax.random.PRNGKey(0), p, 4), x[0], activation="tanh")


@pytest.mark.parametrize("activation", ["square", "relu"])
def test_closed_form_kernel_matches_engine(activation):
    p, width = 5, 16
    x, _, _, _ = modular.dataset(p)
    params = modular.init(jax.random.PRNGKey(1), p, width, dtype=jnp.float64)
    f = modular.make_apply(activation)
    K_engine = np.asarray(entk.entk(f, params, jnp.asarray(x), reduction="class_mean", batch_size=7))
    K_closed = modular.class_mean_entk_closed_form(params, x, activation)
    np.testing.assert_allclose(K_engine, K_closed, rtol=1e-12, atol=1e-14 * np.abs(K_closed).max())
    # the mean-field scaling: out = W2 act(W1 x / sqrt(2p)) / width
    h = params["W1"] @ x[3] / np.sqrt(2 * p)
    act = h**2 if activation == "square" else np.maximum(h, 0)
    np.testing.assert_allclose(f(params, jnp.asarray(x[3])), params["W2"] @ act / width, rtol=1e-12)


def test_initial_kernel_first_cliff_is_structural():
    """At init (wide) the kernel depends on [a = a'] and [b = b'] only: constant + a + b features."""
    p = 7
    x, _, _, _ = modular.dataset(p)
    params = modular.init(jax.random.PRNGKey(0), p, 4096, dtype=jnp.float64)
    K = modular.class_mean_entk_closed_form(params, x)
    lam, vec, info = modular_mlp.analyse_kernel(K, p)
    assert info["constant_index"] == 0 and info["constant_weight"] > 0.99
    assert info["cliff_sizes"][0] == 4 * (p // 2)
    assert info["overlaps"]["cliff1:a+b axes"] > 0.98
    assert info["overlaps"]["window2:sum"] < 0.5


def _synthetic_kernel(p, levels=(1e3, 30.0, 5.0, 0.2), noise=1e-3, seed=0):
    N = p * p
    P_ab = features.fourier_basis(p, ("a", "b"))
    P_sd = features.fourier_basis(p, ("sum", "diff"))
    one = np.ones((N, 1)) / np.sqrt(N)
    rng = np.random.default_rng(seed)
    K = levels[0] * one @ one.T + levels[1] * P_ab @ P_ab.T + levels[2] * P_sd @ P_sd.T
    rest = np.eye(N) - one @ one.T - P_ab @ P_ab.T - P_sd @ P_sd.T
    K += levels[3] * rest
    E = rng.standard_normal((N, N))
    return K + noise * (E + E.T) / np.sqrt(N)


@pytest.mark.parametrize("p", [11, 13])
def test_pipeline_on_synthetic_fourier_kernel(p):
    K = _synthetic_kernel(p)
    lam, vec, info = modular_mlp.analyse_kernel(K, p)
    d = 4 * (p // 2)
    assert info["constant_index"] == 0
    assert info["cliff_sizes"] == [d, d]
    assert info["cliff_ratios"][0] == pytest.approx(6.0, rel=0.05)
    for name in ("a", "b", "a+b axes"):
        assert info["overlaps"][f"cliff1:{name}"] == pytest.approx(1.0, abs=1e-4)
    for name in ("sum", "diff", "sum+diff"):
        assert info["overlaps"][f"cliff2:{name}"] == pytest.approx(1.0, abs=1e-4)
    assert info["overlaps"]["cliff2:a+b axes"] == pytest.approx(0.0, abs=1e-4)


def test_pipeline_reports_a_missing_cliff():
    p = 11
    K = _synthetic_kernel(p, levels=(1e3, 30.0, 0.2, 0.2))  # no second cliff
    _, _, info = modular_mlp.analyse_kernel(K, p)
    assert info["cliff_sizes"] == [4 * (p // 2), 0]
    assert np.isnan(info["overlaps"]["cliff2:sum"])


def _tiny(**kw):
    base = dict(p=5, width=16, epochs=20, snapshot_every=10, seeds=(0, 1), n_eigvecs=8,
                kernel="engine", crosscheck=True, crosscheck_k=6)
    base.update(kw)
    return dataclasses.replace(modular_mlp.Config.smoke(), **base)


def test_tiny_run_shapes_and_resume(tmp_path):
    config = _tiny()
    points = PointStore(tmp_path)
    res = modular_mlp.run(config, points)
    S, T, N = 2, 3, 25
    assert res["eigenvalues"].shape == (S, T, N)
    assert res["train_acc"].shape == (S, 21) and res["epochs"][-1] == 20
    assert res["overlaps"].shape == (S, T, len(res["overlap_names"]))
    assert res["eigvecs_final"].shape == (N, 8) and res["eigvecs_init"].shape == (N, 8)
    assert np.all(np.diff(res["eigenvalues"], axis=-1) <= 1e-15)  # descending
    cc = res["crosscheck"]
    assert cc["engine_vs_closed_form_max_rel"] < 1e-12
    assert cc["eigenvalue_max_rel_error"] < 1e-6
    assert all(v == pytest.approx(1.0, abs=1e-6) for v in cc["subspace_overlap_fraction"].values())
    # rerun with the same points: everything comes from the checkpoints, same numbers
    points2 = PointStore(tmp_path)
    res2 = modular_mlp.run(config, points2)
    assert points2.computed == [] and len(points2.reused) == S * (T + 1)
    np.testing.assert_array_equal(res["eigenvalues"], res2["eigenvalues"])
    np.testing.assert_array_equal(res["overlaps"], res2["overlaps"])


def test_engine_and_closed_form_runs_agree():
    a = modular_mlp.run(_tiny(seeds=(0,), crosscheck=False, kernel="engine"))
    b = modular_mlp.run(_tiny(seeds=(0,), crosscheck=False, kernel="closed_form"))
    np.testing.assert_allclose(a["eigenvalues"], b["eigenvalues"], rtol=1e-9,
                               atol=1e-12 * a["eigenvalues"].max())


def test_presets_and_variants_are_valid():
    for scale in ("smoke", "paper"):
        c = make_config("modular_mlp", scale)
        assert c.activation in modular.ACTIVATIONS and modular_mlp.estimate_seconds(c) > 0
        for over in modular_mlp.variants(scale).values():
            v = make_config("modular_mlp", scale, **over)
            assert modular_mlp.estimate_seconds(v) > 0
    paper = modular_mlp.Config.paper()
    assert (paper.p, paper.width, paper.activation, paper.lr, paper.weight_decay, paper.epochs) == \
        (29, 512, "square", 0.05, 0.01, 500)
    assert len(paper.seeds) >= 3 and paper.train_fraction == 0.7
    with pytest.raises(ValueError):
        modular_mlp.run(_tiny(activation="tanh"))


def test_untrained_model_is_recorded_and_refused():
    from ntkbook.train import NotTrained

    res = modular_mlp.run(_tiny(seeds=(0,), crosscheck=False, epochs=4, snapshot_every=4, lr=1e-9))
    assert res.scalars["training"]["all_trained"] is False
    with pytest.raises(NotTrained, match=r"modular_mlp \(p=5.*seed 0 \(final training accuracy"):
        modular_mlp.require_trained(res)
    # a result stored before the record existed gets it from its training curves
    del res.scalars["training"]
    assert modular_mlp.training(res)["models"][0]["trained"] is False
