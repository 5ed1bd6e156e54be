"""The NTK-distance experiment: the exact NTK predictor and the distance (Paper A)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.experiments import ntk_distance as nd
from ntkbook.models import attention as att

jax.config.update("jax_enable_x64", True)


def _toy(n=10, n_test=6, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.abs(rng.standard_normal((n, d)))
    T = np.abs(rng.standard_normal((n_test, d)))
    y = np.tile([1.0, -1.0], n // 2)
    return X, y, T


def test_distance_is_zero_for_the_same_function():
    f = np.random.default_rng(0).standard_normal(11)
    assert nd.rms_distance(f, f) == 0.0
    assert nd.rms_distance(f, f + 2.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        nd.rms_distance(f, f[:3])


def test_ntk_predictor_is_gd_on_the_kernel_model():
    """The closed form equals explicit GD in function space, f <- f - lr/n K (f - y)."""
    X, y, T = _toy()
    zt, zs = att.transform(X, T, attend=True)
    config = nd.Config(lr=0.7)
    steps = (0, 1, 5, 40)
    f_tr, f_te, _ = nd.ntk_predictor(zt, y, zs, config, steps)
    K, Kx = att.ntk(zt), att.ntk(zs, zt)
    n = len(y)
    f, alpha = np.zeros(n), np.zeros(n)
    for k in range(steps[-1] + 1):
        if k in steps:
            i = steps.index(k)
            assert nd.rms_distance(f_tr[i], f) < 1e-12
            assert nd.rms_distance(f_te[i], Kx @ alpha) < 1e-12
        r = f - y
        f = f - config.lr / n * K @ r
        alpha = alpha - config.lr / n * r
    # the converged predictor is kernel regression
    _, f_inf, _ = nd.ntk_predictor(zt, y, zs, config, (math.inf,))
    np.testing.assert_allclose(f_inf[0], Kx @ np.linalg.solve(K, y), rtol=1e-6, atol=1e-8)


def test_gd_weights_limits():
    lam = np.array([0.0, 1e-320, 1e-3, 1.0])
    phi = nd.gd_weights(lam, 1.0, 4, [3, math.inf])
    np.testing.assert_allclose(phi[0, :2], 3 / 4)
    np.testing.assert_allclose(phi[0, 3], (1 - (1 - 1 / 4) ** 3) / 1.0)
    np.testing.assert_allclose(phi[1], [0.0, 0.0, 1e3, 1.0])


def test_train_point_starts_at_zero_distance_and_tracks_ntk():
    X, y, T = _toy(n=8, n_test=4)
    config = dataclasses.replace(nd.Config.smoke(), snapshots=(0, 5, 20), adam_epochs=2, adam_batch=4,
                                 train_dtype="float64")
    zt, zs = att.transform(X, T, attend=False)
    steps = tuple(config.snapshots) + (math.inf,)
    f_tr, f_te, _ = nd.ntk_predictor(zt, y, zs, config, steps)
    ctr, cte, h = nd.split_coordinates(zt, zs)
    K = att.ntk(zt)
    dist = {}
    for m in (16, 16384):
        arr, sc = nd.train_point(ctr, y, cte, h, (f_tr[:-1], f_te[:-1], f_te[-1]), K, config, m, 0)
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
    ang = nd.pairwise_angles(z)
    brute = [math.acos(np.clip(z[i] @ z[j] / np.linalg.norm(z[i]) / np.linalg.norm(z[j]), -1, 1))
             for i in range(6) for j in range(i + 1, 6)]
    np.testing.assert_allclose(np.sort(ang), np.sort(brute), atol=1e-12)
    with pytest.raises(ValueError):
        nd.pairwise_angles(np.zeros((3, 2)))


def test_hyperplane_cut_fraction_is_the_cone_angle_over_pi():
    # points on an arc of angle theta in the plane: a random line through 0 cuts it w.p. theta / pi
    theta = 0.6
    phi = np.linspace(0.0, theta, 7)
    z = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    frac = nd.hyperplane_cut_fraction(z, 200_000, seed=3)
    assert abs(frac - theta / math.pi) < 5e-3
    # a single direction is never cut; antipodal points always are
    assert nd.hyperplane_cut_fraction(np.ones((3, 5)), 1000) == 0.0
    assert nd.hyperplane_cut_fraction(np.array([[1.0, 0.0], [-1.0, 0.0]]), 1000) == 1.0
    with pytest.raises(ValueError):
        nd.hyperplane_cut_fraction(z, 0)


def test_lin_apply_is_the_first_order_taylor_model():
    rng = np.random.default_rng(2)
    z = jnp.asarray(rng.standard_normal((5, 4)))
    params = att.init(jax.random.PRNGKey(0), 4, 8, symmetric=False, dtype=jnp.float64)
    W0, a = params["W"], params["a"]
    dW = jnp.asarray(rng.standard_normal(W0.shape))
    f0, df = jax.jvp(lambda W: nd.net_apply(W, a, z), (W0,), (dW,))
    lin = nd.lin_apply(W0 + dW, a, z, nd.activation_pattern(W0, z, jnp.float64))
    np.testing.assert_allclose(lin, f0 + df, atol=1e-12)
    # for a small step the network and its linearisation agree to second order
    eps = 1e-5
    net = nd.net_apply(W0 + eps * dW, a, z)
    lin = nd.lin_apply(W0 + eps * dW, a, z, nd.activation_pattern(W0, z, jnp.float64))
    assert float(jnp.max(jnp.abs(net - lin))) < 1e-8


def test_adam_train_matches_a_hand_written_adam_with_weight_decay():
    """Full batch, two steps: grad += l2 W, then Adam (PyTorch's Adam with weight_decay)."""
    rng = np.random.default_rng(3)
    z = jnp.asarray(rng.standard_normal((4, 3)))
    y = jnp.asarray([1.0, -1.0, 1.0, -1.0])
    params = att.init(jax.random.PRNGKey(1), 3, 6, dtype=jnp.float64)
    W0, a = params["W"], params["a"]
    lr, l2, b1, b2, eps = 0.01, 0.1, 0.9, 0.999, 1e-8
    W = np.asarray(W0)
    m1, v = np.zeros_like(W), np.zeros_like(W)
    for t in (1, 2):
        g = np.asarray(jax.grad(lambda W: jnp.mean((nd.net_apply(W, a, z) - y) ** 2))(jnp.asarray(W))) + l2 * W
        m1, v = b1 * m1 + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        W = W - lr * (m1 / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    res = nd.adam_train(z, y, W0, a, lr=lr, l2=l2, epochs=2, batch=4, seed=0)
    np.testing.assert_allclose(res.params["W"], W, rtol=1e-10, atol=1e-12)


def test_adam_lr_rules_and_config_validation():
    c = nd.Config.paper()
    assert nd.adam_lr_for(c, "constant", 4096) == c.adam_lr
    assert nd.adam_lr_for(c, "inv_sqrt_m", c.lr_ref_width) == c.adam_lr
    assert nd.adam_lr_for(c, "inv_sqrt_m", 4 * c.lr_ref_width) == pytest.approx(c.adam_lr / 2)
    with pytest.raises(ValueError):
        nd.adam_lr_for(c, "bogus", 16)
    with pytest.raises(ValueError):
        nd.Config(tasks=("nope",))
    with pytest.raises(ValueError):
        nd.Config(widths=(15,))
    with pytest.raises(ValueError):
        nd.Config(lr_rules=("sqrt",))


def test_width_trend_rules():
    w = np.array([16, 64, 256, 1024])
    assert nd.width_trend(w, 1.0 / np.sqrt(w))[1] == "decreasing"
    assert nd.width_trend(w, np.sqrt(w))[1] == "increasing"
    assert nd.width_trend(w, np.ones(4))[1] == "flat"
    # exactly linear at the narrow end, not at the wide end
    assert nd.width_trend(w, np.array([0.0, 0.0, 0.1, 0.2]))[1] == "increasing"
    assert nd.width_trend(w, np.array([0.0, 0.0, 0.0, 0.2]))[1] == "increasing"
    # zero at the narrow end, then falling: the positive part decides
    assert nd.width_trend(w, np.array([0.0, 0.4, 0.2, 0.1]))[1] == "decreasing"


def _fake_result(relu_d, attn_d, mse=0.1):
    widths = (16, 256, 4096)
    acc = 1.0 if mse < 0.5 else 0.6
    adam = lambda d: {"constant": {str(m): {"dist_net_lin": [v, v], "train_mse_net": [mse, mse],
                                            "acc_train_net": [acc, acc]} for m, v in zip(widths, d)}}
    gd = {str(m): {"dist_test_T": [1.0 / m, 1.0 / m]} for m in widths}
    table = {f"t/{model}": {"adam": adam(d), "points": gd} for model, d in (("relu", relu_d), ("attn", attn_d))}
    from ntkbook.store import Result

    return Result(name=nd.NAME, config={"adam_tasks": ["t"], "lr_rules": ["constant"], "adam_widths": list(widths),
                                        "seeds": [0, 1]}, arrays={}, scalars={"table": table})


def test_scorecard_verdicts_follow_the_numbers(monkeypatch):
    monkeypatch.setitem(nd.TASK_LABELS, "t", "toy task")
    rows = {r["claim"]: r for r in nd.scorecard(_fake_result([1.0, 0.5, 0.1], [0.1, 0.5, 1.0]))}
    assert rows["A.distance.relu"]["verdict"] == "reproduces"
    assert rows["A.distance.attn"]["verdict"] == "reproduces"
    rows = {r["claim"]: r for r in nd.scorecard(_fake_result([0.1, 0.5, 1.0], [1.0, 0.5, 0.1]))}
    assert rows["A.distance.relu"]["verdict"] == "does not"
    assert rows["A.distance.attn"]["verdict"] == "does not"
    # the direction seen only in networks that did not train is at most "partly"
    rows = {r["claim"]: r for r in nd.scorecard(_fake_result([1.0, 0.5, 0.1], [0.1, 0.5, 1.0], mse=0.9))}
    assert rows["A.distance.attn"]["verdict"] == "partly"
    assert "not trained" in rows["A.distance.attn"]["ours"]
    rows = {r["claim"]: r for r in nd.scorecard(_fake_result([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], mse=0.9))}
    assert rows["A.distance.attn"]["verdict"] == "does not"


def test_schur_bound_holds_and_is_reported():
    """kappa(Theta) <= kappa(G_in) for the W-only ReLU NTK on unit-norm inputs (Schur product)."""
    rng = np.random.default_rng(4)
    X = np.abs(rng.standard_normal((12, 20)))
    for attend in (False, True):
        zt, _ = att.transform(X, attend=attend)
        K = att.ntk(zt)
        lam = np.linalg.eigvalsh(K)
        sc = nd.schur_check(zt, X, float(lam[-1] / lam[0]), attend=attend)
        assert sc["schur_ratio"] >= 1.0
        assert sc["kappa_G_in"] == pytest.approx(np.linalg.cond(zt @ zt.T), rel=1e-6)
        if attend:
            assert sc["kappa_G_raw_cubed"] == pytest.approx(sc["kappa_G_raw"] ** 3)
            # the row-normalised attention Gram is within the Ostrowski factor of the cube
            assert sc["kappa_G_in"] > 1.0


def test_adam_point_before_training_is_the_zero_function():
    X, y, T = _toy(n=8, n_test=4)
    zt, zs = att.transform(X, T, attend=True)
    config = dataclasses.replace(nd.Config.smoke(), adam_epochs=0, train_dtype="float64")
    yte = np.array([1.0, -1.0, 1.0, -1.0])
    arr, sc = nd.adam_point(zt, y, zs, yte, np.zeros(4), config, 16, 0, "constant")
    # symmetric initialisation: network and linearisation are both exactly 0, so is their distance
    assert sc["dist_net_lin"] == 0.0 and sc["dist_net_ntk"] == 0.0
    assert sc["train_mse_net"] == pytest.approx(1.0)
    assert sc["kernel_move"] == 0.0 and sc["pattern_flips"] == 0.0


def test_budget_point_reads_the_requested_epochs():
    X, y, T = _toy(n=8, n_test=4)
    zt, zs = att.transform(X, T, attend=False)
    config = dataclasses.replace(nd.Config.smoke(), budget_width=8, budget_epochs=(2, 6), adam_batch=4,
                                 adam_lr=1e-2, train_dtype="float64")
    arr, sc = nd.budget_point(zt, y, zs, np.array([1.0, -1.0, 1.0, -1.0]), config, 0.0)
    assert list(arr["epochs"]) == [2, 6]
    assert sc["train_mse"][1] < sc["train_mse"][0] < 1.0
