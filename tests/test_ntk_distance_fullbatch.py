"""The full-batch Adam line of the NTK distance (ntk_distance_fullbatch)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ntkbook.verdicts import VERDICTS
from ntkbook.experiments import ntk_distance as D
from ntkbook.experiments import ntk_distance_fullbatch as FB


def test_distance_config_is_ntk_distance_with_full_batches():
    cfg = FB.Config.paper()
    d = FB.distance_config(cfg)
    assert d.adam_batch == 2 * D.Config.paper().n_train_per_class  # every training point in each step
    assert (d.adam_epochs, d.adam_lr, d.adam_l2) == (cfg.steps, cfg.lr, cfg.l2)
    base = dataclasses.replace(D.Config.paper(), models=d.models, adam_batch=d.adam_batch,
                               adam_epochs=d.adam_epochs, adam_lr=d.adam_lr, adam_l2=d.adam_l2)
    assert d == base  # nothing else changed: same data, models and initialisation
    with pytest.raises(ValueError, match="not one of ntk_distance's tasks"):
        FB.distance_config(dataclasses.replace(cfg, task="mnist10"))
    with pytest.raises(ValueError, match="unknown models"):
        FB.distance_config(dataclasses.replace(cfg, models=("relu", "mlp")))


def test_smoke_run_rows_and_trend(data_dir):
    res = FB.run(FB.Config.smoke())
    cfg = FB.Config.smoke()
    assert len(res["rows"]) == len(cfg.models) * len(cfg.widths) * len(cfg.seeds)
    for r in res["rows"]:
        assert np.isfinite(r["dist_net_lin"]) and r["dist_net_lin"] >= 0
        assert 0.0 <= r["acc_train_net"] <= 1.0
    t = FB.table(res)
    assert set(t) == {(m, w) for m in cfg.models for w in cfg.widths}
    slope, tr = FB.trend(res, "relu")
    assert tr in ("increasing", "decreasing", "flat")
    # the network at initialisation is its linearisation: training moved it (the distance is not 0
    # for the ReLU network, whose hyperplanes cut the data)
    assert t[("relu", cfg.widths[0])].mean() > 0


def test_scorecard_rows_follow_the_rule(data_dir):
    from ntkbook.book import scorecard as SC

    res = FB.run(FB.Config.smoke())
    rows = FB.scorecard(res)
    assert [r["claim"] for r in rows] == ["A.distance.relu", "A.distance.attn"]
    for r, want in zip(rows, ("decreasing", "increasing")):
        assert r["verdict"] in VERDICTS
        _, tr = FB.trend(res, "relu" if want == "decreasing" else "attn")
        assert (r["verdict"] == "does not") == (tr != want)
