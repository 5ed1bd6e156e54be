"""The full-batch Adam line of the NTK distance (ntk_distance_fullbatch)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ntkbook.claims.ntk_distance import ntk_distance_fullbatch_scorecard
from ntkbook.errors import ConfigError
from ntkbook.experiments import ntk_distance_fullbatch
from ntkbook.verdicts import VERDICTS


def test_config_validation():
    cfg = ntk_distance_fullbatch.Config.paper()
    with pytest.raises(ConfigError, match=r"ntk_distance_fullbatch\.task must be one of .*ntk_distance's tasks.*'mnist10'"):
        dataclasses.replace(cfg, task="mnist10")
    with pytest.raises(ConfigError, match=r"\.models must be made of .*'mlp' unknown"):
        dataclasses.replace(cfg, models=("relu", "mlp"))
    with pytest.raises(ConfigError, match=r"\.base must be one of .*'huge'"):
        dataclasses.replace(cfg, base="huge")


def test_smoke_run_rows_and_trend(data_dir):
    res = ntk_distance_fullbatch.run(ntk_distance_fullbatch.Config.smoke())
    cfg = ntk_distance_fullbatch.Config.smoke()
    assert len(res["rows"]) == len(cfg.models) * len(cfg.widths) * len(cfg.seeds)
    for r in res["rows"]:
        assert np.isfinite(r["dist_net_lin"]) and r["dist_net_lin"] >= 0
        assert 0.0 <= r["acc_train_net"] <= 1.0
    t = ntk_distance_fullbatch.table(res)
    assert set(t) == {(m, w) for m in cfg.models for w in cfg.widths}
    slope, tr = ntk_distance_fullbatch.trend(res, "relu")
    assert tr in ("increasing", "decreasing", "flat")
    # the network at initialisation is its linearisation: training moved it (the distance is not 0
    # for the ReLU network, whose hyperplanes cut the data)
    assert t[("relu", cfg.widths[0])].mean() > 0


def test_scorecard_rows_follow_the_rule(data_dir):
    res = ntk_distance_fullbatch.run(ntk_distance_fullbatch.Config.smoke())
    rows = ntk_distance_fullbatch_scorecard(res)
    assert [r["claim"] for r in rows] == ["A.distance.relu", "A.distance.attn"]
    for r, want in zip(rows, ("decreasing", "increasing")):
        assert r["verdict"] in VERDICTS
        _, tr = ntk_distance_fullbatch.trend(res, "relu" if want == "decreasing" else "attn")
        assert (r["verdict"] == "does not") == (tr != want)
