"""Adversarial training at matched radii (``influence_advtrain``): the training loop, the smoke run,
its resumption, the readings of a result (``ntkbook.claims.influence_advtrain``) and the figure."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.claims import influence_advtrain as claims
from ntkbook.errors import ConfigError
from ntkbook.experiments import influence_advtrain
from ntkbook.experiments.influence_advtrain import Config, eval_key, record_key
from ntkbook.influence import training
from ntkbook.influence.losses import context_loss
from ntkbook.influence.tasks import task_data, targets
from ntkbook.store import PointStore, Result


def test_adversarial_training_is_deterministic_and_its_loss_is_the_attacked_one(data_dir):
    recipe = training.TrainRecipe(width=16, epochs=4, batch=16, lr=1e-2, l2=0.0)
    pgd = {"eps": 0.3, "pgd_steps": 3, "pgd_step_size": 0.15}
    xtr, ltr, xte, lte, C = task_data("mnist_3v8", 40, 40)
    y = targets(ltr, C)
    p1, h1 = training.adversarial_train(xtr, y, C, False, recipe, seed=0, **pgd)
    p2, h2 = training.adversarial_train(xtr, y, C, False, recipe, seed=0, **pgd)
    np.testing.assert_array_equal(np.asarray(p1["W"]), np.asarray(p2["W"]))
    assert list(h1["epoch"]) == [1, 2, 3, 4] and np.all(np.isfinite(h1["adv_loss"]))
    # the loss it trains on is that of attacked points: above the clean loss at the final weights
    loss = context_loss(False, C)
    x = jnp.asarray(xtr, jnp.float32)
    clean = float(loss(x, p1, jnp.asarray(y, jnp.float32), x))
    assert h1["adv_loss"][-1] > clean


# -- the config ----------------------------------------------------------------------------------
def test_paper_preset_is_the_matched_design():
    paper = Config.paper()
    assert paper.eps == (0.03, 0.1, 0.3) and paper.seeds == (0, 1, 2, 3, 4) and paper.tasks == ("mnist10",)
    assert paper.models == ("relu",)  # MLP-Attn does not train with the mini-batch recipe
    # the estimate grows with what is run
    assert (influence_advtrain.estimate_seconds(paper)
            < influence_advtrain.estimate_seconds(dataclasses.replace(paper, models=("relu", "attn"))))
    assert (influence_advtrain.estimate_seconds(dataclasses.replace(paper, eps=(0.1,)))
            < influence_advtrain.estimate_seconds(paper))


@pytest.mark.parametrize("eps, rule", [
    (0.3, "a non-empty tuple"), ((), "a non-empty tuple"), ((0.1, 0.03), "strictly increasing"),
    ((0.03, 1.5), r"a finite number in \(0, 1\]"), ((0.03, 0.03001), "radii that differ in their first four decimals")])
def test_radii_are_checked_with_a_clear_message(eps, rule):
    with pytest.raises(ConfigError, match=rf"^influence_advtrain\.eps(\[\d\])? must be {rule}"):
        dataclasses.replace(Config.smoke(), eps=eps)


# -- the smoke run -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, data_dir):
    """The smoke preset run once, its points checkpointed in a folder of its own."""
    folder = tmp_path_factory.mktemp("points")
    config = Config.smoke()
    return config, folder, influence_advtrain.run(config, PointStore(folder, code="test"))


def test_smoke_result_has_every_key_and_shape(smoke_run):
    config, _, res = smoke_run
    ridges = list(influence_advtrain.ridge_labels(config))
    assert ridges == res["ridges"] == ["lam=0.001", "nlam=0.001"]
    S = len(config.seeds)
    for task in config.tasks:
        for model in config.models:
            t = res["table"][f"{task}/{model}"]
            assert res[f"{task}/{model}/std_loss_curve"].shape[0] == S
            for eps in config.eps:
                assert res[f"{task}/{model}/adv_loss_curve@{eps:g}"].shape == (S, config.epochs)
                for tr in influence_advtrain.TRAININGS:
                    for name in ("train_acc", "test_acc"):
                        assert 0.0 <= t[record_key(tr, eps, name)][0] <= 1.0
                    assert t[record_key(tr, eps, "train_loss")][0] > 0
                    assert 0.0 <= t[eval_key(tr, eps, "robust_train_acc")][0] <= 1.0
                    assert t[eval_key(tr, eps, "pgd/linf")][0] == pytest.approx(eps)
                    assert t[eval_key(tr, eps, "null/linf")][0] == pytest.approx(eps)
                    # PGD raises the frozen network's training loss
                    assert t[eval_key(tr, eps, "pgd/loss_after")][0] > t[eval_key(tr, eps, "pgd/loss_before")][0]
                    for ridge in ridges:
                        for name in ("pgd", "null"):
                            assert 0.0 <= t[eval_key(tr, eps, f"{name}/{ridge}/flip")][0] <= 1.0
                            assert -1.0 <= t[eval_key(tr, eps, f"{name}/{ridge}/rho")][0] <= 1.0
                        draws = t[eval_key(tr, eps, f"null/{ridge}/flip_draws")][0]
                        assert len(draws) == config.null_draws
                        assert t[eval_key(tr, eps, f"null/{ridge}/flip")][0] == pytest.approx(np.mean(draws))
                        assert 0.0 <= t[eval_key(tr, eps, f"{ridge}/ceiling")][0] <= 1.0
                assert len(t[record_key("adversarial", eps, "adv_loss")]) == S
            # one standard network for every radius: its clean influences (and ceiling) are shared
            for ridge in ridges:
                assert len({t[eval_key("standard", e, f"{ridge}/ceiling")][0] for e in config.eps}) == 1


def test_smoke_run_resumes_from_its_points(smoke_run):
    """A run stopped before its last adversarial point recomputes that point alone and gives the
    same result."""
    config, folder, res = smoke_run
    last = sorted(folder.glob("*adversarial*.json"))[-1]
    last.unlink()
    points = PointStore(folder, code="test")
    again = influence_advtrain.run(config, points)
    assert len(points.computed) == 1 and points.computed[0].endswith("/adversarial")
    assert len(points.reused) == len(config.tasks) * len(config.models) * len(config.seeds) * (1 + len(config.eps)) - 1
    for key, table in res["table"].items():
        for k, values in table.items():
            if not k.endswith("seconds"):
                assert again["table"][key][k] == values, (key, k)
    for k, a in res.arrays.items():
        np.testing.assert_array_equal(again.arrays[k], a)


def test_sample_is_the_first_seed(smoke_run):
    config, _, res = smoke_run
    sample, what = influence_advtrain.reproduce_sample(dataclasses.replace(config, seeds=(0, 1)))
    assert sample.seeds == (0,) and sample.eps == config.eps and "seed 0" in what
    arrays, scalars = influence_advtrain.sample_view(res, sample)
    assert set(arrays) == set(res.arrays) and set(scalars["table"]) == set(res["table"])


def test_claims_read_the_smoke_result(smoke_run):
    config, _, res = smoke_run
    rows = claims.verdict_rows(res)
    assert [(r["model"], r["eps"]) for r in rows] == [(m, e) for m in config.models for e in config.eps]
    # one seed: no interval, so nothing is judged
    assert all(r["outcome"] in (claims.NOT_TESTED, claims.TOO_FEW_SEEDS) for r in rows)
    assert claims.claim_verdict(rows)[0] is None


def test_plot_flip_vs_eps(smoke_run):
    import matplotlib.pyplot as plt

    from ntkbook import plotting
    from ntkbook.plotting.influence_advtrain import plot_flip_vs_eps

    config, _, res = smoke_run
    fig = plot_flip_vs_eps(res)
    shown = [ax for ax in fig.axes if ax.axison]
    assert len(shown) == len(config.tasks) * len(config.models)
    assert all(ax.get_xscale() == "log" for ax in shown)
    labels = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert {"standard", "adversarial (PGD at ε)", "random-sign null", "clean-share independence level"} <= labels
    assert plotting.display_font_px(fig) >= plotting.MIN_FONT_PX
    plt.close(fig)
    with pytest.raises(KeyError, match="no ridge"):
        plot_flip_vs_eps(res, "lam=0.5")


# -- the readings, on a made-up result ----------------------------------------------------------
SYNTHETIC_EPS = (0.03, 0.1, 0.3)
#: eps -> (standard flip rates, adversarial flip rates) over five seeds; ceilings are 0.5
SYNTHETIC_FLIPS = {
    0.03: ([0.04, 0.06, 0.02, 0.04, 0.06], [0.20, 0.24, 0.18, 0.22, 0.20]),  # a clear rise
    0.1: ([0.10, 0.14, 0.12, 0.08, 0.10], [0.16, 0.08, 0.14, 0.10, 0.12]),  # no clear change
    0.3: ([0.30, 0.34, 0.28, 0.32, 0.30], [0.50, 0.46, 0.52, 0.48, 0.50]),  # a rise to the ceiling
}


def _synthetic(train_acc: float = 1.0) -> Result:
    """A made-up 2L-ReLU result of five seeds at three radii (:data:`SYNTHETIC_FLIPS`); every
    adversarial network's training accuracy ``train_acc``."""
    S = 5
    ridges = ["lam=0.001", "nlam=0.001"]
    t = {"standard/train_loss": [0.1] * S, "standard/train_acc": [1.0] * S, "standard/test_acc": [0.9] * S}
    for eps, (std, adv) in SYNTHETIC_FLIPS.items():
        t[record_key("adversarial", eps, "train_loss")] = [0.3] * S
        t[record_key("adversarial", eps, "adv_loss")] = [0.5] * S
        t[record_key("adversarial", eps, "train_acc")] = [train_acc] * S
        t[record_key("adversarial", eps, "test_acc")] = [0.8] * S
        for tr, flips in (("standard", std), ("adversarial", adv)):
            t[eval_key(tr, eps, "robust_train_acc")] = [0.5] * S
            for ridge in ridges:
                t[eval_key(tr, eps, f"pgd/{ridge}/flip")] = list(flips)
                t[eval_key(tr, eps, f"pgd/{ridge}/rho")] = [0.9] * S
                t[eval_key(tr, eps, f"null/{ridge}/flip")] = [0.02] * S
                t[eval_key(tr, eps, f"{ridge}/ceiling")] = [0.49, 0.51, 0.5, 0.5, 0.5]
    config = dataclasses.asdict(dataclasses.replace(Config.paper(), models=("relu",), eps=SYNTHETIC_EPS))
    return Result(name="influence_advtrain", config=config,
                  scalars={"table": {"mnist10/relu": t}, "ridges": ridges})


def test_t_interval_by_hand():
    low, high = claims.t_interval([1.0, 2.0, 3.0])
    assert claims.LEVEL == 0.90  # the level of every interval in ntkbook.claims
    half = 2.919985580355516 / np.sqrt(3)  # t_{0.95, 2} times sd 1 over sqrt(3)
    assert (low, high) == pytest.approx((2.0 - half, 2.0 + half))
    assert np.isnan(claims.t_interval([1.0])).all()


def test_summary_of_a_made_up_result():
    rows = claims.summary(_synthetic())
    assert [r["eps"] for r in rows] == list(SYNTHETIC_EPS)
    first = rows[0]
    assert first["standard"]["flip"][0] == pytest.approx(0.044)
    assert first["adversarial"]["flip"][0] == pytest.approx(0.208)
    assert first["difference"] == pytest.approx(0.164)
    assert first["headroom"] == pytest.approx(0.5 - 0.044)
    assert first["headroom_fraction"] == pytest.approx(0.164 / 0.456)
    low, high = first["interval"]
    assert low < first["difference"] < high
    assert first["headroom_fraction_interval"] == pytest.approx((low / 0.456, high / 0.456))
    assert first["standard"]["null"] == pytest.approx((0.02, 0.0))


def test_verdict_rows_of_a_made_up_result():
    rows = {r["eps"]: r for r in claims.verdict_rows(_synthetic())}
    # the interval excludes zero, both far below the ceiling
    assert rows[0.03]["raises"] and rows[0.03]["unsaturated"] and rows[0.03]["outcome"] == claims.RISES
    # the interval holds zero
    assert not rows[0.1]["raises"] and rows[0.1]["unsaturated"]
    assert rows[0.1]["outcome"] == claims.NO_CLEAR_CHANGE
    # a rise, but the adversarial network is at its ceiling: flagged, not judged
    assert rows[0.3]["raises"] and not rows[0.3]["unsaturated"]
    assert rows[0.3]["outcome"] == claims.SATURATED and "adversarial" in rows[0.3]["note"]
    verdict, note = claims.claim_verdict(list(rows.values()))
    assert verdict == "partly" and "eps 0.3: saturated" in note


def test_a_network_that_did_not_train_is_not_tested():
    rows = claims.verdict_rows(_synthetic(train_acc=0.5))
    assert all(r["outcome"] == claims.NOT_TESTED and not r["tested"] for r in rows)
    assert "adversarial network" in rows[0]["note"]
    assert claims.claim_verdict(rows) == (None, "; ".join(f"MNIST, 10 classes eps {e:g}: not tested" for e in SYNTHETIC_EPS))


def test_headroom_rule():
    ceiling = [0.5] * 5
    assert claims.below_ceiling([0.30, 0.32, 0.28, 0.30, 0.30], ceiling)
    assert not claims.below_ceiling([0.46, 0.47, 0.45, 0.46, 0.46], ceiling)  # 4 points below: too close
    assert not claims.below_ceiling([0.30], [0.5])  # one seed: no interval
