"""The NTK-distance experiment: the exact NTK predictor and the distance (Paper A)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.claims.ntk_distance import ntk_distance_scorecard
from ntkbook.experiments import ntk_distance
from ntkbook.lazy import distance
from ntkbook.models import attention, two_layer

jax.config.update("jax_enable_x64", True)


def _toy(n=10, n_test=6, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.abs(rng.standard_normal((n, d)))
    T = np.abs(rng.standard_normal((n_test, d)))
    y = np.tile([1.0, -1.0], n // 2)
    return X, y, T


def test_distance_is_zero_for_the_same_function():
    f = np.random.default_rng(0).standard_normal(11)
    assert distance.rms_distance(f, f) == 0.0
    assert distance.rms_distance(f, f + 2.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        distance.rms_distance(f, f[:3])


def test_ntk_predictor_is_gd_on_the_kernel_model():
    """The closed form equals explicit GD in function space, f <- f - lr/n K (f - y)."""
    X, y, T = _toy()
    zt, zs = attention.transform(X, T, attend=True)
    config = ntk_distance.Config(lr=0.7)
    steps = (0, 1, 5, 40)
    f_tr, f_te, _ = distance.ntk_predictor(zt, y, zs, config.lr, steps)
    K, Kx = two_layer.ntk(zt), two_layer.ntk(zs, zt)
    n = len(y)
    f, alpha = np.zeros(n), np.zeros(n)
    for k in range(steps[-1] + 1):
        if k in steps:
            i = steps.index(k)
            assert distance.rms_distance(f_tr[i], f) < 1e-12
            assert distance.rms_distance(f_te[i], Kx @ alpha) < 1e-12
        r = f - y
        f = f - config.lr / n * K @ r
        alpha = alpha - config.lr / n * r
    # the converged predictor is kernel regression
    _, f_inf, _ = distance.ntk_predictor(zt, y, zs, config.lr, (math.inf,))
    np.testing.assert_allclose(f_inf[0], Kx @ np.linalg.solve(K, y), rtol=1e-6, atol=1e-8)


def test_gd_weights_limits():
    lam = np.array([0.0, 1e-320, 1e-3, 1.0])
    phi = distance.gd_weights(lam, 1.0, 4, [3, math.inf])
    np.testing.assert_allclose(phi[0, :2], 3 / 4)
    np.testing.assert_allclose(phi[0, 3], (1 - (1 - 1 / 4) ** 3) / 1.0)
    np.testing.assert_allclose(phi[1], [0.0, 0.0, 1e3, 1.0])


def test_gd_point_starts_at_zero_distance_and_tracks_ntk():
    X, y, T = _toy(n=8, n_test=4)
    config = dataclasses.replace(ntk_distance.Config.smoke(), snapshots=(0, 5, 20), adam_epochs=2, adam_batch=4,
                                 train_dtype="float64")
    zt, zs = attention.transform(X, T, attend=False)
    steps = tuple(config.snapshots) + (math.inf,)
    f_tr, f_te, _ = distance.ntk_predictor(zt, y, zs, config.lr, steps)
    ctr, cte, h = distance.split_coordinates(zt, zs)
    K = two_layer.ntk(zt)
    dist = {}
    for m in (16, 16384):
        arr, sc = ntk_distance.gd_point(ctr, y, cte, h, (f_tr[:-1], f_te[:-1], f_te[-1]), K, config, m, 0)
        # both predictors start as the zero function: distance 0 at step 0
        assert arr["dist_test"][0] < 1e-12 and arr["dist_train"][0] < 1e-12
        assert np.all(np.isfinite(arr["dist_test"]))
        dist[m] = arr["dist_test"][-1]
    # a very wide 2L-ReLU follows its NTK predictor far more closely than a narrow one
    assert dist[16384] < 0.3 * dist[16]


# --------------------------------------------------------------------------------------------------
# version 2: geometry, the linearisation, the Adam line, the summaries
# --------------------------------------------------------------------------------------------------
def test_pairwise_angles_brute_force():
    z = np.random.default_rng(1).standard_normal((6, 4))
    ang = distance.pairwise_angles(z)
    brute = [math.acos(np.clip(z[i] @ z[j] / np.linalg.norm(z[i]) / np.linalg.norm(z[j]), -1, 1))
             for i in range(6) for j in range(i + 1, 6)]
    np.testing.assert_allclose(np.sort(ang), np.sort(brute), atol=1e-12)
    with pytest.raises(ValueError):
        distance.pairwise_angles(np.zeros((3, 2)))


def test_hyperplane_cut_fraction_is_the_cone_angle_over_pi():
    # points on an arc of angle theta in the plane: a random line through 0 cuts it w.p. theta / pi
    theta = 0.6
    phi = np.linspace(0.0, theta, 7)
    z = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    frac = distance.hyperplane_cut_fraction(z, 200_000, seed=3)
    assert abs(frac - theta / math.pi) < 5e-3
    # a single direction is never cut; antipodal points always are
    assert distance.hyperplane_cut_fraction(np.ones((3, 5)), 1000) == 0.0
    assert distance.hyperplane_cut_fraction(np.array([[1.0, 0.0], [-1.0, 0.0]]), 1000) == 1.0
    with pytest.raises(ValueError):
        distance.hyperplane_cut_fraction(z, 0)


def test_adam_train_matches_a_hand_written_adam_with_weight_decay():
    """Full batch, two steps: grad += l2 W, then Adam (PyTorch's Adam with weight_decay)."""
    rng = np.random.default_rng(3)
    z = jnp.asarray(rng.standard_normal((4, 3)))
    y = jnp.asarray([1.0, -1.0, 1.0, -1.0])
    params = two_layer.init(jax.random.PRNGKey(1), 3, 6, dtype=jnp.float64)
    W0, a = params["W"], params["a"]
    lr, l2, b1, b2, eps = 0.01, 0.1, 0.9, 0.999, 1e-8
    W = np.asarray(W0)
    m1, v = np.zeros_like(W), np.zeros_like(W)
    loss = lambda W: jnp.mean((two_layer.apply_batch({"W": W, "a": a}, z) - y) ** 2)  # noqa: E731
    for t in (1, 2):
        g = np.asarray(jax.grad(loss)(jnp.asarray(W))) + l2 * W
        m1, v = b1 * m1 + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        W = W - lr * (m1 / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    res = distance.adam_train(z, y, W0, a, lr=lr, l2=l2, epochs=2, batch=4, seed=0)
    np.testing.assert_allclose(res.params["W"], W, rtol=1e-10, atol=1e-12)


def test_adam_lr_rules_and_config_validation():
    c = ntk_distance.Config.paper()
    assert ntk_distance.adam_lr_for(c, "constant", 4096) == c.adam_lr
    assert ntk_distance.adam_lr_for(c, "inv_sqrt_m", c.lr_ref_width) == c.adam_lr
    assert ntk_distance.adam_lr_for(c, "inv_sqrt_m", 4 * c.lr_ref_width) == pytest.approx(c.adam_lr / 2)
    with pytest.raises(ValueError):
        ntk_distance.adam_lr_for(c, "bogus", 16)
    with pytest.raises(ValueError):
        ntk_distance.Config(tasks=("nope",))
    with pytest.raises(ValueError):
        ntk_distance.Config(widths=(15,))
    with pytest.raises(ValueError):
        ntk_distance.Config(lr_rules=("sqrt",))


def test_width_trend_rules():
    w = np.array([16, 64, 256, 1024])
    assert distance.width_trend(w, 1.0 / np.sqrt(w))[1] == "decreasing"
    assert distance.width_trend(w, np.sqrt(w))[1] == "increasing"
    assert distance.width_trend(w, np.ones(4))[1] == "flat"
    # exactly linear at the narrow end, not at the wide end
    assert distance.width_trend(w, np.array([0.0, 0.0, 0.1, 0.2]))[1] == "increasing"
    assert distance.width_trend(w, np.array([0.0, 0.0, 0.0, 0.2]))[1] == "increasing"
    # zero at the narrow end, then falling: the positive part decides
    assert distance.width_trend(w, np.array([0.0, 0.4, 0.2, 0.1]))[1] == "decreasing"


def _fake_result(relu_d, attn_d, mse=0.1):
    widths = (16, 256, 4096)
    acc = 1.0 if mse < 0.5 else 0.6
    adam = lambda d: {"constant": {str(m): {"dist_net_lin": [v, v], "train_mse_net": [mse, mse],
                                            "acc_train_net": [acc, acc]} for m, v in zip(widths, d)}}
    gd = {str(m): {"dist_test_T": [1.0 / m, 1.0 / m]} for m in widths}
    table = {f"t/{model}": {"adam": adam(d), "points": gd} for model, d in (("relu", relu_d), ("attn", attn_d))}
    from ntkbook.store import Result

    return Result(name=ntk_distance.NAME, config={"adam_tasks": ["t"], "lr_rules": ["constant"], "adam_widths": list(widths),
                                        "seeds": [0, 1]}, arrays={}, scalars={"table": table})


def test_scorecard_verdicts_follow_the_numbers(monkeypatch):
    monkeypatch.setitem(distance.TASK_LABELS, "t", "toy task")
    rows = {r["claim"]: r for r in ntk_distance_scorecard(_fake_result([1.0, 0.5, 0.1], [0.1, 0.5, 1.0]))}
    assert rows["A.distance.relu"]["verdict"] == "reproduces"
    assert rows["A.distance.attn"]["verdict"] == "reproduces"
    rows = {r["claim"]: r for r in ntk_distance_scorecard(_fake_result([0.1, 0.5, 1.0], [1.0, 0.5, 0.1]))}
    assert rows["A.distance.relu"]["verdict"] == "does not"
    assert rows["A.distance.attn"]["verdict"] == "does not"
    # the direction seen only in networks that did not train is at most "partly"
    rows = {r["claim"]: r for r in ntk_distance_scorecard(_fake_result([1.0, 0.5, 0.1], [0.1, 0.5, 1.0], mse=0.9))}
    assert rows["A.distance.attn"]["verdict"] == "partly"
    assert "not trained" in rows["A.distance.attn"]["ours"]
    rows = {r["claim"]: r for r in ntk_distance_scorecard(_fake_result([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], mse=0.9))}
    assert rows["A.distance.attn"]["verdict"] == "does not"


def test_schur_bound_holds_and_is_reported():
    """kappa(Theta) <= kappa(G_in) for the W-only ReLU NTK on unit-norm inputs (Schur product)."""
    rng = np.random.default_rng(4)
    X = np.abs(rng.standard_normal((12, 20)))
    for attend in (False, True):
        zt, _ = attention.transform(X, attend=attend)
        K = two_layer.ntk(zt)
        lam = np.linalg.eigvalsh(K)
        sc = distance.schur_check(zt, X, float(lam[-1] / lam[0]), attend=attend)
        assert sc["schur_ratio"] >= 1.0
        assert sc["kappa_G_in"] == pytest.approx(np.linalg.cond(zt @ zt.T), rel=1e-6)
        if attend:
            assert sc["kappa_G_raw_cubed"] == pytest.approx(sc["kappa_G_raw"] ** 3)
            # the row-normalised attention Gram is within the Ostrowski factor of the cube
            assert sc["kappa_G_in"] > 1.0


def test_adam_point_before_training_is_the_zero_function():
    X, y, T = _toy(n=8, n_test=4)
    zt, zs = attention.transform(X, T, attend=True)
    config = dataclasses.replace(ntk_distance.Config.smoke(), adam_epochs=0, train_dtype="float64")
    yte = np.array([1.0, -1.0, 1.0, -1.0])
    arr, sc = distance.adam_point(zt, y, zs, yte, np.zeros(4), width=16, seed=0, lr=config.adam_lr,
                                  l2=config.adam_l2, epochs=config.adam_epochs, batch=config.adam_batch,
                                  train_dtype=config.train_dtype)
    # symmetric initialisation: network and linearisation are both exactly 0, so is their distance
    assert sc["dist_net_lin"] == 0.0 and sc["dist_net_ntk"] == 0.0
    assert sc["train_mse_net"] == pytest.approx(1.0)
    assert sc["kernel_move"] == 0.0 and sc["pattern_flips"] == 0.0


def test_budget_point_reads_the_requested_epochs():
    X, y, T = _toy(n=8, n_test=4)
    zt, zs = attention.transform(X, T, attend=False)
    config = dataclasses.replace(ntk_distance.Config.smoke(), budget_width=8, budget_epochs=(2, 6), adam_batch=4,
                                 adam_lr=1e-2, train_dtype="float64")
    arr, sc = ntk_distance.budget_point(zt, y, zs, np.array([1.0, -1.0, 1.0, -1.0]), config, 0.0)
    assert list(arr["epochs"]) == [2, 6]
    assert sc["train_mse"][1] < sc["train_mse"][0] < 1.0


def test_split_coordinates_are_an_exact_reparametrisation():
    """Train-span coordinates keep every inner product; a test input's residual is orthogonal to the
    span, so the network on (span coordinates, frozen residual) is the network on the inputs."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((4, 9))  # 4 training points in 9 dimensions: a 4-dim span
    T = rng.standard_normal((3, 9))
    ctr, cte, res = distance.split_coordinates(X, T)
    assert ctr.shape == (4, 4) and res.shape == (3, 3)
    np.testing.assert_allclose(ctr @ ctr.T, X @ X.T, atol=1e-12)
    np.testing.assert_allclose(cte @ cte.T + res @ res.T, T @ T.T, atol=1e-12)
    np.testing.assert_allclose(cte @ ctr.T, T @ X.T, atol=1e-12)
    _, _, none = distance.split_coordinates(X, X[:2])
    assert none.shape == (2, 0)


def test_setups_are_the_presets_of_ntk_distance():
    """ntk_distance_fullbatch reads the preset's set-up from SETUPS: it must be ntk_distance's."""
    assert ntk_distance.setup(ntk_distance.Config.paper()) == distance.SETUPS["paper"]
    assert ntk_distance.setup(ntk_distance.Config.smoke()) == distance.SETUPS["smoke"]
