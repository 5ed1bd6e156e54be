"""The experiments of the chapter on the eNTK and Lanczos: smoke presets give sane results, the
helpers are right on small cases, and the store round-trips the results."""

import dataclasses

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook import experiments  # noqa: E402
from ntkbook.experiments import entk_convergence, lanczos_ghosts  # noqa: E402
from ntkbook.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def convergence(data_dir):
    return experiments.load_or_run("entk_convergence", "smoke")  # the smoke book's, when today's code made it


@pytest.fixture(scope="module")
def ghosts(data_dir):
    return experiments.load_or_run("lanczos_ghosts", "smoke")


def test_convergence_smoke_is_sane(convergence):
    cfg = entk_convergence.Config.smoke()
    err_w, err_all = convergence["err_W"], convergence["err_all"]
    assert err_w.shape == err_all.shape == (len(cfg.widths), cfg.num_seeds)
    assert np.all(np.isfinite(err_w)) and np.all(err_w > 0)
    assert -0.8 < convergence["slope_W"] < -0.3
    assert -0.8 < convergence["slope_all"] < -0.3
    # the closed-form root-mean-square error is the right size (Jensen: slightly above the mean)
    assert 0.6 < convergence["ratio_to_prediction_W"] < 1.3
    assert err_w.mean(axis=1)[-1] < err_w.mean(axis=1)[0] / 3
    # unit-norm inputs: diagonal of Theta_W is 1/2; the stored kernels are symmetric and close to it
    np.testing.assert_allclose(np.diag(convergence["theta_W"]), 0.5, rtol=1e-12)
    k = convergence["K_W_largest"]
    np.testing.assert_allclose(k, k.T, atol=1e-12)


def test_blocked_entk_equals_unblocked():
    """Averaging the eNTKs of blocks of hidden units gives the eNTK of the whole network."""
    from ntkbook.models import two_layer
    from ntkbook.ntk import entk

    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7))
    with jax.enable_x64(True):
        kw, ka = entk_convergence.entk_two_layer(x, 48, seed=3, chunk=16)
        params = two_layer.init(jax.random.fold_in(jax.random.PRNGKey(3), 48), 7, 48, symmetric=False,
                                dtype=np.float64)
        ref = entk.entk_layerwise(two_layer.apply, params, x, layers={"W": "W", "a": "a"},
                                  reduction="class_mean")
    np.testing.assert_allclose(kw, np.asarray(ref["W"]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ka, np.asarray(ref["a"]), rtol=1e-12, atol=1e-14)


def test_predicted_error_matches_monte_carlo():
    """The closed-form expected error of K_W agrees with direct sampling of hidden units."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6))
    m, reps = 64, 400
    from ntkbook.ntk import kernels

    theta = np.asarray(kernels.relu_ntk(x, trainable="W"))
    sq = []
    for _ in range(reps):
        w = rng.standard_normal((m, 6))
        act = (x @ w.T > 0).astype(float)
        kw = (x @ x.T) * (act @ act.T) / m
        sq.append(np.sum((kw - theta) ** 2))
    rms = np.sqrt(np.mean(sq)) / np.linalg.norm(theta)
    assert rms == pytest.approx(float(entk_convergence.predicted_error_W(x, m)), rel=0.1)


def test_ghosts_smoke(ghosts):
    for keys in lanczos_ghosts.KEYS.values():
        assert ghosts[keys["reorth_ghosts"]] == 0
        assert ghosts[keys["plain_ghosts"]] >= 1
        assert ghosts[keys["reorth_library_ghosts"]] == 0
        assert ghosts[keys["plain_library_ghosts"]] >= 1
        assert ghosts[keys["reorth_max_orth"]] < 1e-12
        assert ghosts[keys["plain_max_orth"]] > 1e-3
        assert ghosts[keys["reorth_library_topk_error"]] < 1e-10
        assert 0 < ghosts[keys["reorth_steps_to_1e-10"]] <= ghosts[keys["plain_ritz"]].shape[0]
        assert ghosts[keys["first_ghost_step"]] > 0
        # re-orthogonalised Ritz values never exceed the top eigenvalue (interlacing)
        hist = ghosts[keys["reorth_ritz"]]
        assert np.nanmax(hist) <= ghosts[keys["exact"]][0] * (1 + 1e-12)


def test_ghost_counting():
    exact = np.array([5.0, 3.0, 3.0, 1.0, 0.5])
    assert lanczos_ghosts.count_ghosts(np.array([5.0, 3.0, 1.0]), exact, 3, 1e-8) == 0
    assert lanczos_ghosts.count_ghosts(np.array([5.0, 5.0 + 1e-12, 3.0, 3.0]), exact, 3, 1e-8) == 1
    # a double eigenvalue found twice is not a ghost, found three times is one
    assert lanczos_ghosts.count_ghosts(np.array([3.0, 3.0, 3.0, np.nan]), exact, 3, 1e-8) == 1


def test_lanczos_record_matches_dense():
    cfg = dataclasses.replace(lanczos_ghosts.Config.smoke(), dim=60, num_steps=30)
    matvec, lam = lanczos_ghosts.synthetic_operator(cfg)
    q0 = np.random.default_rng(0).standard_normal(cfg.dim)
    a, b, orth = lanczos_ghosts.lanczos_record(matvec, q0, 60, reorthogonalize=2)
    hist = lanczos_ghosts.ritz_history(a, b)
    np.testing.assert_allclose(np.sort(hist[-1])[::-1], lam, rtol=1e-9, atol=1e-10)
    assert np.max(orth) < 1e-13


def test_store_round_trip(tmp_path, convergence, ghosts):
    store = Store(tmp_path)
    for module, result, cfg in ((entk_convergence, convergence, entk_convergence.Config.smoke()),
                                (lanczos_ghosts, ghosts, lanczos_ghosts.Config.smoke())):
        store.save(result, module.VERSION)
        back = store.load(module.NAME, module.VERSION, cfg)
        assert set(back.arrays) == set(result.arrays)
        for key, value in result.arrays.items():
            np.testing.assert_array_equal(back[key], value)
        for key, value in result.scalars.items():
            assert back[key] == pytest.approx(value)
