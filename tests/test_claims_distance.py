"""Paper A's distance claims (ntkbook.claims.ntk_distance): per-seed log-log slopes of the
distance against width, their interval over seeds, the comparator each row names, "not tested"
for networks that did not train, and the rows on the stored paper-scale results."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ntkbook.book import scorecard
from ntkbook.claims import NOT_TESTED, ROW_VERDICTS
from ntkbook.claims import ntk_distance as cd
from ntkbook.claims.intervals import seed_interval
from ntkbook.experiments import load_stored, make_config, ntk_distance, ntk_distance_fullbatch
from ntkbook.store import Result

WIDTHS = (16, 256, 4096)
TASK = "mnist_3v8"


def _curve(exponents):
    """Distances ``(W, seeds)``: seed s is ``(1 + s / 10) * m ** exponents[s]``."""
    return np.array([[(1 + s / 10) * m ** e for s, e in enumerate(exponents)] for m in WIDTHS])


def _dist(gd, adam, *, adam_mse=0.1, gd_mse=0.1, config=None):
    """A synthetic ntk_distance result: ``gd`` / ``adam`` map a model to the per-seed exponents of
    its GD-line distance (to the infinite-width predictor) and Adam-line distance (to its own
    linearisation)."""
    seeds = len(next(iter(gd.values())))
    acc = 1.0 if adam_mse <= 0.5 else 0.6
    table = {}
    for model in gd:
        g, a = _curve(gd[model]), _curve(adam[model])
        table[f"{TASK}/{model}"] = {
            "points": {str(m): {"dist_test_T": g[i].tolist(), "train_mse_T": [gd_mse] * seeds}
                       for i, m in enumerate(WIDTHS)},
            "adam": {"constant": {str(m): {"dist_net_lin": a[i].tolist(), "dist_net_ntk": [0.5] * seeds,
                                           "train_mse_net": [adam_mse] * seeds, "acc_train_net": [acc] * seeds}
                                  for i, m in enumerate(WIDTHS)}}}
    cfg = config or {"tasks": [TASK], "adam_tasks": [TASK], "models": list(gd), "seeds": list(range(seeds))}
    return Result(name="ntk_distance", config=cfg, scalars={"table": table})


def _fullbatch(exponents, *, mse=0.0):
    """A synthetic ntk_distance_fullbatch result, ``exponents``: model -> per-seed exponents."""
    rows = []
    for model, ex in exponents.items():
        d = _curve(ex)
        for i, m in enumerate(WIDTHS):
            for s in range(len(ex)):
                rows.append({"model": model, "width": m, "seed": s, "dist_net_lin": d[i, s], "dist_net_ntk": 0.2,
                             "train_mse_net": mse, "acc_train_net": 1.0 if mse <= 0.5 else 0.5})
    return Result(name="ntk_distance_fullbatch", config={"models": list(exponents), "seeds": [0, 1, 2]},
                  scalars={"rows": rows, "task": TASK})


def test_slopes_are_per_seed_with_their_t_interval():
    res = _dist({"relu": [-0.3, -0.5, -0.4]}, {"relu": [-0.2, -0.2, -0.3]})
    (gd,) = [s for s in cd.slopes({"ntk_distance": res}, "relu") if s.line.line == "gd"]
    assert gd.per_seed == pytest.approx([-0.3, -0.5, -0.4])  # each seed's own fit, not the mean's
    iv = seed_interval([-0.3, -0.5, -0.4])
    assert (gd.interval.mean, gd.interval.lo, gd.interval.hi) == pytest.approx((iv.mean, iv.lo, iv.hi))
    assert gd.direction == "decreasing" and gd.tested and gd.line.comparator == cd.PAPER_COMPARATOR
    # seeds that disagree in sign leave the interval across 0: no direction, whatever the mean
    (gd,) = [s for s in cd.slopes({"ntk_distance": _dist({"relu": [-0.6, 0.1, 0.2]}, {"relu": [0, 0, 0]})}, "relu")
             if s.line.line == "gd"]
    assert gd.interval.lo < 0 < gd.interval.hi and gd.direction == "flat/unresolved"


def test_a_seed_zero_at_every_width_but_one_has_no_slope():
    res = _dist({"relu": [-0.3, -0.5, -0.4]}, {"relu": [-0.2, -0.2, -0.3]})
    entry = res["table"][f"{TASK}/relu"]["points"]
    for m in WIDTHS[:2]:
        entry[str(m)]["dist_test_T"][0] = 0.0
    (gd,) = [s for s in cd.slopes({"ntk_distance": res}, "relu") if s.line.line == "gd"]
    assert np.isnan(gd.per_seed[0]) and gd.interval.n == 2


def test_rows_name_the_comparator_and_judge_against_the_papers():
    # 2L-ReLU: falls against the infinite-width predictor (GD), flat against its linearisation
    # (Adam): the paper's comparator decides. MLP-Attn: rises against its linearisation only.
    res = _dist({"relu": [-0.3, -0.35, -0.4], "attn": [0.0, 0.01, -0.01]},
                {"relu": [0.05, -0.05, 0.0], "attn": [0.3, 0.25, 0.35]})
    rows = {r["claim"]: r for r in cd.scorecard({"ntk_distance": res})}
    relu, attn = rows["A.distance.relu"], rows["A.distance.attn"]
    assert relu["verdict"] == "reproduces" and attn["verdict"] == "partly"
    for r in (relu, attn):
        assert "exact GD, against the infinite-width NTK predictor" in r["ours"]
        assert "Adam (paper's recipe), against its own linearisation" in r["ours"]
        assert "against the infinite-width NTK predictor" in r["note"]
        assert "converged" not in r["ours"]  # shown in the chapter's tables, not judged
    # the opposite directions everywhere: does not
    res = _dist({"relu": [0.3, 0.35, 0.4], "attn": [-0.3, -0.2, -0.25]},
                {"relu": [0.3, 0.35, 0.4], "attn": [-0.3, -0.2, -0.25]})
    assert {r["verdict"] for r in cd.scorecard({"ntk_distance": res})} == {"does not"}


def test_untrained_networks_test_nothing():
    res = _dist({"relu": [-0.3, -0.35, -0.4], "attn": [0.3, 0.2, 0.25]},
                {"relu": [-0.3, -0.35, -0.4], "attn": [0.3, 0.2, 0.25]}, adam_mse=0.9, gd_mse=0.9)
    rows = cd.scorecard({"ntk_distance": res})
    assert [r["verdict"] for r in rows] == [NOT_TESTED, NOT_TESTED]
    assert all("not trained" in r["ours"] and "nothing tested" in r["note"] for r in rows)
    # a trained line elsewhere is tested: MLP-Attn trains under full-batch Adam and rises there
    rows = {r["claim"]: r for r in cd.scorecard({"ntk_distance": res,
                                                  "ntk_distance_fullbatch": _fullbatch({"attn": [0.3, 0.2, 0.25]})})}
    assert rows["A.distance.attn"]["verdict"] == "partly"  # not against the paper's comparator
    assert "full-batch Adam, against its own linearisation" in rows["A.distance.attn"]["ours"]


def test_one_seed_gives_no_interval_and_tests_nothing():
    res = _dist({"relu": [-0.3]}, {"relu": [-0.3]})
    (row,) = cd.scorecard({"ntk_distance": res})
    assert row["verdict"] == NOT_TESTED and "(one seed)" in row["ours"]


def test_relu_seeds_config_validates_and_keeps_the_adam_line():
    paper = make_config("ntk_distance", "paper")
    cfg = make_config("ntk_distance", "paper", **cd.RELU_SEEDS["ntk_distance"])
    assert cfg.models == ("relu",) and cfg.seeds == (0, 1, 2, 3, 4)
    assert (cfg.adam_tasks, cfg.adam_widths, cfg.adam_width_caps) == (paper.adam_tasks, paper.adam_widths,
                                                                      paper.adam_width_caps)
    fb = make_config("ntk_distance_fullbatch", "paper", **cd.RELU_SEEDS["ntk_distance_fullbatch"])
    assert fb.widths == make_config("ntk_distance_fullbatch", "paper").widths and len(fb.seeds) == 5


def test_relu_rows_read_the_five_seed_run_where_stored(monkeypatch):
    paper_cfg = dataclasses.asdict(make_config("ntk_distance", "paper"))
    three = _dist({"relu": [-0.3, 0.1, -0.4], "attn": [0, 0, 0]}, {"relu": [0, 0, 0], "attn": [0, 0, 0]},
                  config=paper_cfg)
    five = _dist({"relu": [-0.3, -0.2, -0.4, -0.3, -0.35]}, {"relu": [0, 0, 0, 0, 0]},
                 config={"tasks": [TASK], "adam_tasks": [TASK], "models": ["relu"], "seeds": [0, 1, 2, 3, 4]})

    class Store:
        def __init__(self, held):
            self.held = held

        def has(self, name, version, config):
            return self.held and name == "ntk_distance" and config.seeds == (0, 1, 2, 3, 4)

        def load(self, name, version, config):
            return five

    monkeypatch.setattr(cd, "store_for", lambda scale: Store(False))
    assert cd.results_for({"ntk_distance": three}, "relu")["ntk_distance"] is three
    monkeypatch.setattr(cd, "store_for", lambda scale: Store(True))
    assert cd.results_for({"ntk_distance": three}, "relu")["ntk_distance"] is five
    assert cd.results_for({"ntk_distance": three}, "attn")["ntk_distance"] is three
    smoke = _dist({"relu": [-0.3, -0.2]}, {"relu": [0, 0]})  # not the paper preset: read as given
    assert cd.results_for({"ntk_distance": smoke}, "relu")["ntk_distance"] is smoke
    rows = {r["claim"]: r for r in cd.scorecard({"ntk_distance": three})}
    assert "5 seeds" in rows["A.distance.relu"]["ours"] and "5-seed" in rows["A.distance.relu"]["note"]
    assert "3 seeds" in rows["A.distance.attn"]["ours"]
    # each row credits the entries it read: 2L-ReLU's the 5-seed run, MLP-Attn's the paper preset
    assert rows["A.distance.relu"]["from"] == (five,) and rows["A.distance.attn"]["from"] == (three,)


def test_rows_on_the_stored_paper_results():
    dist, fb = load_stored("ntk_distance"), load_stored("ntk_distance_fullbatch")
    rows = {r["claim"]: r for r in cd.scorecard({"ntk_distance": dist, "ntk_distance_fullbatch": fb})}
    assert set(rows) == {"A.distance.relu", "A.distance.attn"}
    for r in rows.values():
        assert r["verdict"] in ROW_VERDICTS
        assert "against the infinite-width NTK predictor" in r["ours"]
        assert "against its own linearisation" in r["ours"]
    # the experiments carry no scorecard() of their own (their rules are in ntkbook.claims): the
    # chapter's rows are these
    assert not any(hasattr(m, "scorecard") for m in (ntk_distance, ntk_distance_fullbatch))
    chapter = {r.claim.id: r for r in scorecard.chapter_rows("attention_width", [dist, fb])}
    assert chapter["A.distance.relu"].verdict == rows["A.distance.relu"]["verdict"]
    assert chapter["A.distance.attn"].verdict == rows["A.distance.attn"]["verdict"]
    # the source lines credit the entries each row read (2L-ReLU: its stored 5-seed runs)
    assert [list(r.config["seeds"]) for r in rows["A.distance.relu"]["from"]] == [[0, 1, 2, 3, 4]] * 2
    assert chapter["A.distance.relu"].source.count("seeds=[0, 1, 2, 3, 4]") == 2
    assert "changed" not in chapter["A.distance.attn"].source


def test_seed_slopes_of_a_bare_series():
    per_seed, iv = cd.seed_slopes(WIDTHS, _curve([0.5, 0.4, 0.6]))
    assert per_seed == pytest.approx([0.5, 0.4, 0.6]) and cd.direction(iv) == "increasing"
    per_seed, iv = cd.seed_slopes(WIDTHS, [1.0, 0.5, 0.25])  # one seed: a slope, no interval
    assert per_seed == pytest.approx([np.log(0.25) / np.log(256)]) and iv is None
    assert cd.direction(iv) == "flat/unresolved"
