"""The influence flip-rate rules read intervals: the paired ratio's interval for the size, the
random-sign null for "adversarial", rate intervals clipped at 0, flipped-point counts, the
perturbed-share independence level, and the adversarial-training radii that are already robust."""

from __future__ import annotations

import numpy as np
import pytest

from ntkbook.claims import influence as ci
from ntkbook.claims import influence_advtrain as adv_claims
from ntkbook.claims import influence_map as imap
from ntkbook.claims.intervals import Interval
from ntkbook.store import Result

EPS = (0.01, 0.03, 0.1, 0.3)


def _map(relu, attn, *, null_attn=None, ceiling=40.0):
    table = {}
    for model, rates in (("relu", relu), ("attn", attn)):
        row = {"train_acc": [1.0] * 3, "clean/lam=0.001/ceiling": [ceiling / 100] * 3}
        for e in EPS:
            row[f"pgd/{e:g}/lam=0.001/flip"] = [x / 100 for x in rates[e]]
            null = null_attn[e] if (model == "attn" and null_attn) else [0.0] * 3
            row[f"null/{e:g}/lam=0.001/flip"] = [x / 100 for x in null]
        table[f"mnist10/{model}"] = row
    return Result(name="influence_map", config={"tasks": ["mnist10"], "eps": list(EPS), "n_train": 500,
                                                "top_fraction": 0.1}, scalars={"table": table})


# 2L-ReLU's rate nearest the paper's 3.3 % at eps 0.1
RELU = {0.01: [0.0, 0.0, 0.0], 0.03: [0.0, 2.0, 0.0], 0.1: [4.0, 3.8, 4.0], 0.3: [20.0, 22.0, 20.0]}
ATTN = {e: [30.0, 30.0, 28.0] for e in EPS}


def test_size_is_read_from_the_paired_ratio_interval():
    r = ci.matched_reading(_map(RELU, ATTN), "mnist10")
    assert r["mp"].read_at == 0.1 and r["mp"].ratio.known
    assert r["size"] == "matches" and r["verdict"] == "reproduces"
    assert r["mp"].relu_counts == (2, 2, 2) and r["mp"].attn_counts == (15, 15, 14)


def test_a_ratio_interval_wider_than_the_band_leaves_the_size_not_resolved():
    relu = {**RELU, 0.1: [4.0, 2.0, 4.0]}   # geometric mean 9.4x, interval about [4.5, 19]: paper 8.8x, band [4.4, 17.6]
    r = ci.matched_reading(_map(relu, ATTN), "mnist10")
    iv = r["mp"].ratio
    assert iv.overlaps(4.4, 17.6) and not iv.within(4.4, 17.6)
    assert r["size"] == "not resolved" and not r["size_ok"] and r["verdict"] == "partly"


def test_a_seed_with_no_relu_flip_leaves_the_size_not_resolved():
    relu = {**RELU, 0.1: [4.0, 0.0, 4.0]}  # one seed flips nothing: no log ratio
    r = ci.matched_reading(_map(relu, ATTN), "mnist10")
    assert not r["mp"].ratio.known and r["size"] == "not resolved"
    assert r["direction"] and r["verdict"] == "partly"
    row = ci.flip_row(_map(relu, ATTN), "mnist10")
    assert row["verdict"] == "partly" and "2, 0, 2" in row["ours"] and "not resolved" in row["ours"]


def test_reproduces_needs_attention_above_its_random_sign_null():
    null = {e: [29.0, 31.0, 26.0] for e in EPS}  # as many flips as random signs of the same norm
    r = ci.matched_reading(_map(RELU, ATTN, null_attn=null), "mnist10")
    assert r["direction"] and r["size_ok"] and not r["adversarial"]
    assert r["verdict"] == "partly"
    assert "not shown to be adversarial" in ci.flip_row(_map(RELU, ATTN, null_attn=null), "mnist10")["ours"]


def test_size_off_when_the_whole_ratio_interval_is_outside_the_band():
    attn = {e: [90.0, 92.0, 91.0] for e in EPS}  # ~30x ReLU, paper 8.8x: above 2 x 8.8
    relu = {**RELU, 0.1: [3.0, 3.2, 3.1]}
    r = ci.matched_reading(_map(relu, attn), "mnist10")
    assert r["mp"].ratio.lo > 2 * ci.paper_ratio("mnist10") and r["size"] == "off"
    assert r["verdict"] == "partly"


def test_rate_intervals_are_clipped_at_zero_and_no_minus_zero_is_written():
    iv = imap.rate_interval([0.0, 4.0, 4.0])
    assert iv.lo == 0.0 and iv.hi > 4.0
    assert imap.interval_text(Interval(0.2, -0.4, 0.8, 3), ".0f") == "0 [0, 1]"
    assert imap.interval_text(Interval(-3.0, -5.0, -1.0, 3), ".0f") == "-3 [-5, -1]"


def test_perturbed_share_level_uses_the_perturbed_shares():
    clean = np.array([10.0, -9.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0])  # top 20 %: +10, -9
    same = imap.perturbed_share_level(clean, clean, fraction=0.2)
    # clean shares q+ = 0.8, q- = 0.2: top {+, -} flips with 0.2 and 0.8
    assert same == pytest.approx(50.0)
    allneg = imap.perturbed_share_level(clean, -np.abs(clean), fraction=0.2)
    assert allneg == pytest.approx(50.0)  # + flips surely, - never
    allpos = imap.perturbed_share_level(clean[:1].repeat(10) * np.r_[1, -1, [1] * 8], np.abs(clean), 0.1)
    assert allpos == pytest.approx(0.0)  # the top point is +, every perturbed sign is +


def test_paper_numbers_name_their_source_and_the_ratios_outside_the_abstract():
    assert "papers.md" in ci.paper_source("mnist10", "attn", "pgd")
    assert ci.paper_source("mnist_3v8", "attn", "pgd") == "secondary notes only"
    outside = dict(ci.outside_abstract())
    assert set(outside) == {"mnist_3v8", "cifar_auto_air"}
    assert outside["cifar_auto_air"] == pytest.approx(14.0 / 15.5)


def _adv(robust_std):
    S, table = 3, {}
    from ntkbook.experiments.influence_advtrain import eval_key, record_key
    for model in ("relu",):
        t = {}
        for tr in ("standard", "adversarial"):
            for eps in (0.03, 0.1):
                t[eval_key(tr, eps, "pgd/lam=0.001/flip")] = [0.10, 0.12, 0.11] if tr == "standard" else [0.20, 0.22, 0.21]
                t[eval_key(tr, eps, "pgd/lam=0.001/rho")] = [0.5] * S
                t[eval_key(tr, eps, "null/lam=0.001/flip")] = [0.05] * S
                t[eval_key(tr, eps, "lam=0.001/ceiling")] = [0.45] * S
                t[eval_key(tr, eps, "robust_train_acc")] = [robust_std if tr == "standard" and eps == 0.03 else 0.6] * S
                for name in ("train_loss", "train_acc", "test_acc"):
                    t[record_key(tr, eps, name)] = [1.0 if name != "train_loss" else 0.01] * S
                if tr == "adversarial":
                    t[record_key(tr, eps, "adv_loss")] = [0.1] * S
        table[f"mnist10/{model}"] = t
    return Result(name="influence_advtrain", config={"tasks": ["mnist10"], "models": ["relu"], "eps": [0.03, 0.1]},
                  scalars={"table": table, "ridges": ["lam=0.001"]})


def test_a_radius_where_the_standard_network_is_already_robust_is_not_judged():
    rows = {r["eps"]: r for r in adv_claims.verdict_rows(_adv(1.0))}
    assert rows[0.03]["outcome"] == adv_claims.ALREADY_ROBUST and rows[0.1]["outcome"] == adv_claims.RISES
    verdict, note = adv_claims.claim_verdict(list(rows.values()))
    assert verdict == "reproduces" and "rests on 1 radius (eps 0.1)" in note
    rows = {r["eps"]: r for r in adv_claims.verdict_rows(_adv(0.6))}
    assert rows[0.03]["outcome"] == adv_claims.RISES


def test_ablation_rows_and_the_ratio_trend():
    from ntkbook.claims import influence_map as imap
    from ntkbook.store import Result

    table = {f"mnist10/{m}": {f"ablation/pgd/{e:g}/flip": vals for e, vals in zip((0.1, 0.3, 0.5), rates)}
             for m, rates in (("relu", ([0.02, 0.04], [0.2, 0.2], [0.4, 0.4])),
                              ("attn", ([0.3, 0.3], [0.5, 0.5], [0.6, 0.6])))}
    res = Result("influence_malleability", {"ablation_tasks": ["mnist10"], "ablation_eps": [0.1, 0.3, 0.5]},
                 scalars={"table": table})
    rows = imap.ablation_rows(res)
    assert [r["eps"] for r in rows] == [0.1, 0.3, 0.5]
    assert [round(r["ratio"], 6) for r in rows] == [10.0, 2.5, 1.5] and imap.ratio_trend(rows) == "falls"
    table["mnist10/relu"]["ablation/pgd/0.5/flip"] = [0.1, 0.1]   # ratio 6: it rises again
    assert imap.ratio_trend(imap.ablation_rows(res)) == "other"
    table["mnist10/relu"]["ablation/pgd/0.1/flip"] = [0.0, 0.0]
    rows = imap.ablation_rows(res)
    assert rows[0]["ratio"] is None and imap.ratio_trend(rows) == ""


def test_main_sweep_levels_read_the_stored_influences():
    from ntkbook import experiments
    from ntkbook.claims import influence_map as imap
    from ntkbook.influence.scores import flip_rate

    res = experiments.load_stored("influence_malleability", "paper")
    rows = imap.main_sweep_levels(res)
    assert rows and all(len(r["flip"]) == len(r["pert_level"]) == len(res.config["seeds"]) for r in rows)
    r = rows[0]
    clean, pert = res[f"{r['task']}/{r['model']}/influence_clean"], res[f"{r['task']}/{r['model']}/influence_pgd"]
    assert r["flip"][0] == pytest.approx(100 * flip_rate(clean[0], pert[0], fraction=res.config["top_fraction"]))
    assert all(r["above"] == (np.mean(r["flip"]) > np.mean(r["pert_level"])) for r in rows)
