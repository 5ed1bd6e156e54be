"""Sharpness at equal training loss: the Gauss-Newton identity of the influence networks (float64,
explicit Hessians), the watched training run against ``train_model``, the ``influence_sharpness``
experiment at smoke scale (keys, resume), its claims on a made-up result, and its figures."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.influence import curvature
from ntkbook.influence.losses import data_loss
from ntkbook.models import two_layer


# -- the Gauss-Newton identity on a tiny network ---------------------------------------------------
def _tiny(C: int, n: int = 12, d: int = 5, m: int = 8, seed: int = 0):
    """A float64 tiny network of the influence experiments, moved off its symmetric start (so that
    f != 0), with unit-norm inputs and targets of ``C`` outputs."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    labels = rng.integers(0, max(C, 2), n)
    y = (1.0 - 2.0 * labels)[:, None] if C == 1 else np.eye(C)[labels]
    p = two_layer.init_heads(jax.random.PRNGKey(seed), d, m, C)
    W = np.asarray(p["W"], np.float64) + 0.3 * rng.normal(size=(m, d))
    return {"W": W, "a": np.asarray(p["a"], np.float64)}, z, y


@pytest.mark.parametrize("C", [1, 4])
def test_the_hessian_is_its_gauss_newton_term(C):
    """jax.hessian of the training loss in W equals J^T S J to round-off (the network is linear in
    W between kinks), and both Lanczos routes give the top eigenvalue of the explicit Hessian."""
    params, z, y = _tiny(C)
    m, d = params["W"].shape
    n = z.shape[0]
    with jax.enable_x64(True):
        a, zz, yy = jnp.asarray(params["a"]), jnp.asarray(z), jnp.asarray(y)
        W = jnp.asarray(params["W"])

        def outputs(W):
            return two_layer.apply_batch({"W": W, "a": a}, zz)

        H = jax.hessian(lambda W: data_loss(outputs(W), yy, C))(W).reshape(m * d, m * d)
        J = jax.jacobian(lambda W: outputs(W).reshape(-1))(W).reshape(n * C, m * d)
        S = jax.scipy.linalg.block_diag(*curvature.output_curvature(outputs(W), C))
        G = J.T @ S @ J
        H, G = np.asarray(H), np.asarray(G)
    assert np.abs(H).max() > 1e-3  # not trivially zero
    np.testing.assert_allclose(H, G, rtol=0, atol=1e-14 * np.abs(H).max())
    top = np.linalg.eigvalsh(H)[-1]
    h, h_res = curvature.hessian_top(params, z, y, C, num_steps=20, seed=0)
    g, g_res = curvature.gauss_newton_top(params, z, C, num_steps=min(20, n * C), seed=0)
    assert h == pytest.approx(top, rel=1e-12) and g == pytest.approx(top, rel=1e-12)
    assert h_res < 1e-10 * top and g_res < 1e-10 * top
    # the main experiment's measurement of the same network gives the same number, bit for bit
    from ntkbook.influence import landscape

    sizes = landscape.LandscapeSettings(hessian_steps=20, radius=1.0, points=3, grid=3)
    assert landscape.measure(params, z, y, C, sizes, 0, do_1d=False, do_2d=False)[1]["hessian_top"] == h
    if C == 1:  # squared error: lambda_max(H) = 2 lambda_max(K) / n, K the closed-form eNTK
        K = two_layer.entk_W(params, z)
        assert 2 * np.linalg.eigvalsh(K)[-1] / n == pytest.approx(top, rel=1e-12)


@pytest.mark.parametrize("C", [1, 3])
def test_output_curvature_is_the_hessian_of_the_loss_in_the_outputs(C):
    rng = np.random.default_rng(1)
    n = 7
    out = rng.normal(size=(n, C))
    y = (1.0 - 2.0 * rng.integers(0, 2, n))[:, None] if C == 1 else np.eye(C)[rng.integers(0, C, n)]
    with jax.enable_x64(True):
        full = jax.hessian(lambda o: data_loss(o, jnp.asarray(y), C))(jnp.asarray(out))  # (n, C, n, C)
        blocks = curvature.output_curvature(jnp.asarray(out), C)
        R = curvature.curvature_sqrt(blocks)
        full, blocks, R = np.asarray(full), np.asarray(blocks), np.asarray(R)
    for i in range(n):
        np.testing.assert_allclose(full[i, :, i, :], blocks[i], atol=1e-15)
        off = np.delete(full[i], i, axis=1)
        assert np.all(off == 0)  # the loss is a sum over examples
        np.testing.assert_allclose(R[i] @ R[i], blocks[i], atol=1e-15)
        np.testing.assert_allclose(R[i], R[i].T, atol=1e-15)


# -- the watched training run ----------------------------------------------------------------------
def test_train_tracked_follows_train_model_and_finds_the_crossing(data_dir):
    from ntkbook.influence import training, tracked
    from ntkbook.influence.tasks import task_data, targets
    from ntkbook.models import attention

    xtr, ltr, _, _, C = task_data("mnist_3v8", 40, 2)
    z, _ = attention.transform(xtr, attend=False, normalize="row")
    y = targets(ltr, C)
    recipe = training.TrainRecipe(width=16, epochs=12, batch=16, lr=1e-2, l2=0.0)
    params, _ = training.train_model(z, y, C, recipe, seed=3, model="relu")
    full = tracked.train_tracked(z, y, C, recipe, seed=3, model="relu", keep_epochs=(0, 5, 12))
    np.testing.assert_array_equal(np.asarray(full.params["W"]), np.asarray(params["W"]))
    np.testing.assert_array_equal(np.asarray(full.kept[12]), np.asarray(params["W"]))
    assert full.crossing is None and full.at_crossing is None and full.losses.shape == (13,)

    def loss32(W):
        return float(data_loss(two_layer.apply_batch({"W": jnp.asarray(W), "a": params["a"]},
                                                     jnp.asarray(z, jnp.float32)), jnp.asarray(y, jnp.float32), C))

    for e in (0, 5, 12):  # (not compiled here: equal up to float32 summation order)
        assert loss32(full.kept[e]) == pytest.approx(full.losses[e], rel=1e-6)
    assert full.losses[0] == pytest.approx(1.0)  # f = 0 at the symmetric start, targets +-1
    target = float(np.sqrt(full.losses[2] * full.losses[-1]))
    run = tracked.train_tracked(z, y, C, recipe, seed=3, model="relu", target_loss=target)
    e = run.crossing
    assert e is not None and run.losses[e] <= target and np.all(run.losses[:e] > target)
    assert loss32(run.at_crossing) == pytest.approx(run.losses[e], rel=1e-6)
    assert loss32(run.before_crossing) == pytest.approx(run.losses[e - 1], rel=1e-6)
    never = tracked.train_tracked(z, y, C, recipe, seed=3, model="relu", target_loss=0.0)
    assert never.crossing is None and never.before_crossing is None
    at_start = tracked.train_tracked(z, y, C, recipe, seed=3, model="relu", target_loss=2.0)
    assert at_start.crossing == 0 and at_start.before_crossing is None
    from ntkbook.errors import InputError

    with pytest.raises(InputError, match="outside"):
        tracked.train_tracked(z, y, C, recipe, seed=3, keep_epochs=(13,))


@pytest.mark.parametrize("model,attn_steps,l2", [("relu", None, 0.0), ("relu", 7, 1e-3), ("attn", None, 1e-3),
                                                 ("attn", 7, 0.0)])
def test_train_tracked_trains_as_train_model_for_both_models_and_recipes(model, attn_steps, l2):
    """Both share training._standard_run: the same weights bit for bit, whichever recipe applies
    (MLP-Attn full batch for attn_steps steps, else mini-batches; 2L-ReLU ignores attn_steps)."""
    from ntkbook.influence import training, tracked

    rng = np.random.default_rng(0)
    z = rng.standard_normal((20, 8)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[np.arange(20) % 3]
    recipe = training.TrainRecipe(width=4, epochs=5, batch=6, lr=1e-2, l2=l2, attn_steps=attn_steps)
    params, hist = training.train_model(z, y, 3, recipe, seed=2, model=model)
    last = attn_steps if model == "attn" and attn_steps is not None else recipe.epochs
    run = tracked.train_tracked(z, y, 3, recipe, seed=2, model=model, keep_epochs=(last,))
    assert run.losses.shape == (last + 1,) and hist["epoch"][-1] == last
    for W in (run.params["W"], run.kept[last]):
        np.testing.assert_array_equal(np.asarray(W), np.asarray(params["W"]))
    np.testing.assert_array_equal(np.asarray(run.params["a"]), np.asarray(params["a"]))
    from ntkbook.errors import InputError

    for train in (training.train_model, tracked.train_tracked):
        with pytest.raises(InputError, match="unknown model 'cnn'"):
            train(z, y, 3, recipe, 2, model="cnn")


# -- the experiment at smoke scale -----------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, data_dir):
    """The smoke preset run once, its points checkpointed in a folder of its own."""
    from ntkbook.experiments import influence_sharpness
    from ntkbook.store import PointStore

    folder = tmp_path_factory.mktemp("points")
    config = influence_sharpness.Config.smoke()
    return config, folder, influence_sharpness.run(config, PointStore(folder, code="test"))


def test_smoke_result_has_every_key_and_shape(smoke_run):
    from ntkbook.experiments import check_finite, influence_sharpness as exp

    config, _, res = smoke_run
    S = len(config.seeds)
    epochs = exp.curve_epochs(config)
    assert res["curve_epochs"] == epochs and epochs[0] == 0 and epochs[-1] == config.epochs
    check_finite(exp.NAME, res, exp.NONFINITE_ALLOWED)
    for task in config.tasks:
        a, r = res["table"][f"{task}/attn"], res["table"][f"{task}/relu"]
        for table, networks in ((a, ("final",)), (r, ("matched", "final"))):
            for net in networks:
                for k in exp.CURVATURE_KEYS:
                    assert len(table[f"{net}/{k}"]) == S
            assert table["train_loss"] == table["final/train_loss"]
        assert r["target_loss"] == a["target_loss"]
        for s in range(S):
            # the Gauss-Newton identity holds on every network measured, to Lanczos' convergence
            for table, net in ((a, "final"), (r, "matched"), (r, "final")):
                g = table[f"{net}/gn_top"][s]
                residuals = table[f"{net}/hessian_resid"][s] + table[f"{net}/gn_resid"][s]
                assert table[f"{net}/gn_gap"][s] * g <= 2 * residuals + 1e-12 * g
                assert table[f"{net}/gn_gap"][s] < 1e-6
                assert table[f"{net}/hessian_per_loss"][s] == pytest.approx(
                    table[f"{net}/hessian_top"][s] / table[f"{net}/train_loss"][s])
            assert r["reached"][s]  # the smoke 2L-ReLU reaches MLP-Attn's loss
            e = int(r["matched_epoch"][s])
            track = res[f"{task}/relu/loss_track"][s]
            assert track.shape == (config.epochs + 1,)
            assert track[e] == r["matched_loss32"][s] <= a["target_loss"][s] < track[e - 1]
            assert r["matched/train_loss"][s] == pytest.approx(r["matched_loss32"][s], rel=1e-5)
            assert r["before/train_loss"][s] == pytest.approx(track[e - 1], rel=1e-5)
            assert res[f"{task}/relu/curve_hessian"][s][-1] == r["final/hessian_top"][s]
            np.testing.assert_array_equal(res[f"{task}/relu/curve_epochs"][s], epochs)
        for model, names in (("attn", ("slice1d_final",)), ("relu", ("slice1d_matched", "slice1d_final"))):
            for name in names:
                sl = res[f"{task}/{model}/{name}"]
                assert sl.shape == (S, config.slice_points)
                table = res["table"][f"{task}/{model}"]
                centre = table["final/train_loss" if name.endswith("final") else "matched/train_loss"]
                np.testing.assert_allclose(sl[:, config.slice_points // 2], centre, rtol=1e-12)
        two_d = task in config.slice_2d_tasks
        for model, name in (("attn", "slice2d_final"), ("relu", "slice2d_matched")):
            key = f"{task}/{model}/{name}"
            assert (key in res.arrays) == two_d
            if two_d:
                assert res[key].shape == (config.slice_grid, config.slice_grid)
        assert f"{task}/relu/slice2d_final" not in res.arrays


def test_a_loss_never_reached_is_said_and_allowed(smoke_run):
    from ntkbook.experiments import check_finite, influence_sharpness as exp
    from ntkbook.influence.tasks import task_data
    from ntkbook.store import Result

    config, _, _ = smoke_run
    config = dataclasses.replace(config, tasks=("mnist_3v8",), slice_2d_tasks=())
    data = task_data("mnist_3v8", config.n_train, 2)
    arrays, sc = exp._relu_point(data, 0, 0.0, config, False)
    assert sc["reached"] is False and math.isnan(sc["matched_epoch"])
    assert all(math.isnan(sc[f"matched/{k}"]) for k in exp.CURVATURE_KEYS)
    assert math.isnan(sc["before/hessian_top"]) and np.all(np.isnan(arrays["slice1d_matched"]))
    assert np.isfinite(sc["final/hessian_top"])
    table = {"mnist_3v8/relu": {k: [v] for k, v in sc.items()}}
    check_finite(exp.NAME, Result(exp.NAME, {}, scalars={"table": table}), exp.NONFINITE_ALLOWED)


def test_smoke_run_resumes_from_its_points(smoke_run):
    """A run stopped before its last point recomputes that point alone and gives the same result."""
    from ntkbook.experiments import influence_sharpness as exp
    from ntkbook.store import PointStore

    config, folder, res = smoke_run
    last = sorted(folder.glob("task=mnist_3v8_seed=1_model=relu*.json"))
    assert len(last) == 1
    last[0].unlink()
    points = PointStore(folder, code="test")
    again = exp.run(config, points)
    assert points.computed == ["task=mnist_3v8/seed=1/model=relu"]
    assert len(points.reused) == 2 * len(config.tasks) * len(config.seeds) - 1
    for key, table in res["table"].items():
        for k, vals in table.items():
            if not k.endswith("seconds"):
                np.testing.assert_array_equal(again["table"][key][k], vals, err_msg=f"{key} {k}")
    for k, a in res.arrays.items():
        np.testing.assert_array_equal(again.arrays[k], a)


def test_sample_view_is_the_first_seed(smoke_run):
    from ntkbook.experiments import influence_sharpness as exp

    config, _, res = smoke_run
    sample, what = exp.reproduce_sample(config)
    assert sample.seeds == config.seeds[:1] and "seed 0" in what
    arrays, scalars = exp.sample_view(res, sample)
    assert arrays["mnist10/attn/slice2d_final"].shape == (config.slice_grid, config.slice_grid)
    assert arrays["mnist10/relu/slice1d_matched"].shape == (1, config.slice_points)
    assert all(len(v) == 1 for t in scalars["table"].values() for v in t.values())


def test_estimate_is_of_the_right_size():
    """The paper preset is the ~15 min the issue allows (2 cores), the smoke preset a minute or less."""
    from ntkbook.experiments import influence_sharpness as exp

    assert 5 * 60 < exp.estimate_seconds(exp.Config.paper()) < 25 * 60
    assert exp.estimate_seconds(exp.Config.smoke()) < 60


# -- the claims ------------------------------------------------------------------------------------
def _made_up(ratios_matched, ratios_before, attn_acc=1.0, reached=True):
    """A result of two tasks and four seeds whose MLP-Attn / 2L-ReLU top-eigenvalue ratios are
    given per task (at the matched epoch and the one before)."""
    from ntkbook.store import Result

    seeds = [0, 1, 2, 3]
    table = {}
    for task, rm, rb in zip(("mnist10", "mnist_3v8"), ratios_matched, ratios_before):
        relu_h = np.array([1.0, 2.0, 3.0, 4.0])
        relu = {"train_acc": [1.0] * 4, "reached": [reached] * 4}
        for net, h in (("matched", relu_h), ("before", relu_h * 1.1), ("final", relu_h / 10)):
            relu[f"{net}/hessian_top"] = list(h if reached or net == "final" else h * np.nan)
            relu[f"{net}/train_loss"] = [0.1] * 4
            relu[f"{net}/gn_gap"] = [1e-12] * 4
        attn = {"train_acc": [attn_acc] * 4, "final/hessian_top": list(relu_h * np.asarray(rm)),
                "final/train_loss": [0.1] * 4, "final/gn_gap": [1e-12, 3e-11, 1e-12, 1e-12]}
        # the ratio at 'before' is set through 2L-ReLU's value there
        relu["before/hessian_top"] = list(np.asarray(attn["final/hessian_top"]) / np.asarray(rb))
        table[f"{task}/relu"], table[f"{task}/attn"] = relu, attn
    return Result("influence_sharpness", {"tasks": ["mnist10", "mnist_3v8"], "seeds": seeds},
                  scalars={"table": table})


def test_seed_interval_is_the_student_t_interval():
    from ntkbook.claims import influence_sharpness as cl

    iv = cl.seed_interval([1.0, 2.0, 3.0, np.nan])
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.hi - iv.mean == pytest.approx(2.919985580355516 * 1.0 / np.sqrt(3))  # t_{0.95, 2}: 90 %
    assert math.isnan(cl.seed_interval([5.0]).lo) and cl.seed_interval([np.nan]).n == 0


def test_verdict_rule_on_a_made_up_result():
    from ntkbook.claims import influence_sharpness as cl

    flat = [0.5, 0.55, 0.45, 0.5]
    sharp = [2.0, 2.2, 1.9, 2.1]
    mixed = [0.5, 2.0, 0.7, 1.5]
    res = _made_up((flat, flat), (flat, flat))
    v = cl.verdict(res)
    assert v["verdict"] == "reproduces" and [t["reading"] for t in v["tasks"]] == ["flatter", "flatter"]
    np.testing.assert_allclose(cl.flatness_ratio(res, "mnist10")[0], flat)
    assert cl.verdict(_made_up((flat, sharp), (flat, sharp)))["verdict"] == "partly"
    v = cl.verdict(_made_up((sharp, mixed), (sharp, mixed)))
    assert v["verdict"] == "does not" and [t["reading"] for t in v["tasks"]] == ["sharper", "unresolved"]
    # flatter at the matched epoch but not at the one before: unresolved
    assert cl.task_verdict(_made_up((flat, flat), (mixed, flat)), "mnist10")["reading"] == "unresolved"
    # MLP-Attn did not train: not tested, on every task
    v = cl.verdict(_made_up((flat, flat), (flat, flat), attn_acc=0.5))
    assert v["verdict"] == cl.NOT_TESTED and "training accuracy" in v["tasks"][0]["why"]
    v = cl.verdict(_made_up((flat, flat), (flat, flat), reached=False))
    assert v["verdict"] == cl.NOT_TESTED and "0 seed(s)" in v["tasks"][0]["why"]
    gap = cl.largest_gn_gap(res)
    assert gap["gap"] == 3e-11 and (gap["model"], gap["seed"]) == ("attn", 1)
    rows = cl.sharpness(res)
    assert len(rows) == 6 and rows[1]["network"] == "matched" and rows[1]["interval"].mean == 2.5


def test_agreement_with_the_main_experiment():
    from ntkbook.claims import influence_sharpness as cl
    from ntkbook.errors import InputError
    from ntkbook.store import Result

    recipe = {"n_train": 500, "width": 512, "epochs": 500, "lr": 1e-2, "batch": 128, "l2": 0.0,
              "attn_steps": 10_000, "hessian_steps": 20}
    res = _made_up(([0.5] * 4, [0.5] * 4), ([0.5] * 4, [0.5] * 4))
    res.config.update(recipe)
    table = {f"{t}/{m}": {"hessian_top": list(res["table"][f"{t}/{m}"]["final/hessian_top"][:3])}
             for t in ("mnist10", "mnist_3v8") for m in ("relu", "attn")}
    table["mnist10/attn"]["hessian_top"][2] *= 1 + 1e-9
    main = Result("influence_malleability", {**recipe, "tasks": ["mnist10", "cifar10", "mnist_3v8"],
                                             "seeds": [0, 1, 2]}, scalars={"table": table})
    agree = cl.agreement_with_main(res, main)
    assert agree["compared"] == 12 and agree["max_rel_diff"] == pytest.approx(1e-9, rel=1e-6)
    main.config["lr"] = 1e-3
    with pytest.raises(InputError, match="lr"):
        cl.agreement_with_main(res, main)


# -- the figures -----------------------------------------------------------------------------------
def test_plots_on_the_smoke_result(smoke_run):
    import matplotlib.pyplot as plt

    from ntkbook.plotting import display_font_px
    from ntkbook.plotting.influence_sharpness import plot_matched_2d, plot_sharpness

    config, _, res = smoke_run
    fig = plot_sharpness(res)
    shown = [ax for ax in fig.axes if ax.axison]
    assert len(shown) == 2 * len(config.tasks)
    labels = [t.get_text() for leg in fig.findobj(plt.matplotlib.legend.Legend) for t in leg.get_texts()]
    assert {"2L-ReLU along training", "2L-ReLU, loss-matched", "MLP-Attn, final"} <= set(labels)
    assert display_font_px(fig) >= 9.0
    plt.close(fig)
    fig = plot_matched_2d(res, "mnist10")
    assert display_font_px(fig) >= 9.0
    plt.close(fig)
    with pytest.raises(KeyError, match="no 2-D slice"):
        plot_matched_2d(res, "mnist_3v8")
