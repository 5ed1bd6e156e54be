"""The attention-width chapter's readings of the stored Gram spectra (ntkbook.claims.attention_width):
the paper's literal kappa_d, the leading-k sensitivity range and its verification cap, the data
set's n in the v2 threshold, and the Ostrowski interval over the resolved eigenvalues."""

from __future__ import annotations


import numpy as np
import pytest

from ntkbook.claims import attention_width as aw
from ntkbook.store import Result


def _gram(lam, *, n=100, d=50, k_star=None, blocks=(2, 3), rank_hat=None, lam_hat=None, kappa_n2=4.0):
    """A gram_conditioning result with one data set, CIFAR-10, spectrum ``lam`` (descending)."""
    lam = np.asarray(lam, dtype=float)
    rank = int(np.sum(lam > 0))
    k_star = k_star or max(blocks)
    kd = [{"d": k, "kappa_d_G": float(lam[0] / lam[k - 1])} for k in sorted(set(blocks) | {k_star})]
    s = {"n": n, "d": d, "rank_G": rank, "kappa_G": float(lam[0] / lam[rank - 1]), "d_star": k_star,
         "kappa_d": kd, "rank_Ghat": rank_hat or rank, "kappa_N2": kappa_n2}
    arrays = {"cifar10/lam_G": lam, "cifar10/lam_Ghat": lam if lam_hat is None else np.asarray(lam_hat)}
    return Result(name="gram_conditioning", config={"verify_limit": 1e12}, arrays=arrays,
                  scalars={"datasets": ["cifar10"], "labels": {"cifar10": "CIFAR-10"},
                           "per_dataset": {"cifar10": s}})


def test_literal_kappa_is_over_min_n_d_and_says_when_that_truncation_has_zeros():
    lam = np.r_[np.geomspace(1.0, 1e-4, 40), np.zeros(10)]
    lit = aw.literal(_gram(lam, n=100, d=50), "cifar10")
    assert lit["min_nd"] == 50 and lit["rank"] == 40 and not lit["complete"]
    assert lit["kappa"] == pytest.approx(1e4)
    full = aw.literal(_gram(np.geomspace(1.0, 1e-4, 30), n=30, d=784), "cifar10")
    assert full["min_nd"] == 30 and full["complete"]


def test_matching_k_is_the_first_k_whose_threshold_reaches_the_target():
    lam = 10.0 ** -np.arange(8)  # kappa_k = 10^(k-1)
    res = _gram(lam)
    n = 1000
    k, kappa = aw.matching_k(res, "cifar10", aw.threshold(1e3, n), n)
    assert (k, kappa) == (4, pytest.approx(1e3))
    assert aw.matching_k(res, "cifar10", aw.threshold(1e3, n) * 1.01, n)[0] == 5
    assert aw.matching_k(res, "cifar10", aw.threshold(1e8, n), n) is None


def test_thresholds_use_the_n_given_and_default_to_the_subset():
    res = _gram(10.0 ** -np.arange(8), n=100)
    assert aw.thresholds(res, "cifar10")["n"] == 100
    t = aw.thresholds(res, "cifar10", 50_000)
    assert t["full"] == pytest.approx(aw.threshold(1e7, 50_000))
    assert t["blocks"][3] == pytest.approx(aw.threshold(100.0, 50_000))


def test_kappa_rows_say_whether_the_paper_value_needs_the_verification_cap():
    # kappa_k = 10^(k-1): blocks k = 2, 3 give 10, 100; the cap k* = 5 gives 1e4
    lam = 10.0 ** -np.arange(8)
    rows = {r["claim"]: r for r in aw.kappa_rows(_gram(lam, blocks=(2, 3), k_star=5))}
    # 1e3 lies in [10, 1e4] only because of k* (without it: [10, 100])
    assert rows["A.kappa"]["verdict"] == "partly"
    assert "only because of it" in rows["A.kappa"]["note"] and "k* = 5" in rows["A.kappa"]["note"]
    rows = {r["claim"]: r for r in aw.kappa_rows(_gram(lam, blocks=(2, 5), k_star=6))}
    assert "lies within the range without it" in rows["A.kappa"]["note"]
    assert "leading k = 2–6" in rows["A.kappa"]["ours"]


def test_ostrowski_interval_over_the_resolved_eigenvalues_brackets_the_normalised_gram():
    """A real congruence: G^ = N G^3 N, with r < rank G resolved; the interval over the leading r
    eigenvalues of G^3 brackets kappa_r(G^)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 12)) * np.geomspace(1, 1e-2, 12)
    a = x @ x.T @ x
    na = a / np.linalg.norm(a, axis=1, keepdims=True)
    lam = np.linalg.svd(x, compute_uv=False) ** 2
    lam_h = np.linalg.svd(na, compute_uv=False) ** 2
    rows2 = np.sum(a ** 2, axis=1)
    res = _gram(lam, n=30, d=12, rank_hat=9, lam_hat=lam_h, kappa_n2=float(rows2.max() / rows2.min()))
    o = aw.ostrowski_resolved(res, "cifar10")
    assert o["r"] == 9 and not o["same_as_full"]
    assert o["kappa_hat"] == pytest.approx(lam_h[0] / lam_h[8])
    assert o["inside"] and o["interval"][0] <= o["kappa_hat"] <= o["interval"][1]


def test_stored_result_rows_and_resolved_intervals():
    """On the stored paper-scale spectra: every data set's kappa(G^) lies in its interval over the
    same resolved eigenvalues, the rows of gram_conditioning are all produced (it carries no
    scorecard() of its own), A.gram_cube by that experiment's own rule, and the v2 threshold is
    judged at the data set's n."""
    from ntkbook.experiments import gram_conditioning, load_stored

    res = load_stored("gram_conditioning", "paper")
    for name in res["datasets"]:
        o = aw.ostrowski_resolved(res, name)
        assert o["inside"], (name, o)
        assert o["kappa_hat"] == pytest.approx(res["per_dataset"][name]["kappa_Ghat"])
    rows = {r["claim"]: r for r in aw.scorecard({"gram_conditioning": res})}
    assert set(rows) == {"A.gram_cube", "A.kappa", "A.width_bound", "A.width_threshold"}
    assert not hasattr(gram_conditioning, "scorecard")
    (cube,) = [r for r in aw.gram_conditioning_scorecard(res) if r["claim"] == "A.gram_cube"]
    assert rows["A.gram_cube"] == cube
    text = rows["A.width_threshold"]["ours"]
    assert "n = 60,000" in text and "n = 50,000" in text and "subset's n = 1,000" in text
    assert "verification cap" in rows["A.width_threshold"]["note"]
    # whether the paper's values need the cap is read on the whole stored spectrum (matching_k), not
    # on the few measured blocks: on both data sets they are reached below k*
    for name in ("mnist", "cifar10"):
        hit = aw.matching_k(res, name, aw.PAPER_THRESHOLDS[name], aw.PAPER_N[name])
        assert hit is not None and hit[0] < res["per_dataset"][name]["d_star"]
    assert "reached below it on every data set" in rows["A.width_threshold"]["note"]


def test_distance_attn_note_names_the_substitute_comparator_its_partly_rests_on():
    """Where no line against the paper's comparator holds the paper's direction, a "partly" says that
    it rests on the network's own linearisation alone, and on which lines (stored paper results)."""
    from ntkbook.claims import ntk_distance as cd
    from ntkbook.experiments import load_stored

    results = {name: load_stored(name, "paper") for name in cd.EXPERIMENTS}
    rows = {r["claim"]: r for r in cd.scorecard(results)}
    attn, relu = rows["A.distance.attn"], rows["A.distance.relu"]
    found = [s for s in cd.slopes(cd.results_for(results, "attn"), "attn") if s.line.judged and s.tested]
    paper_held = [s for s in found if s.line.comparator == cd.PAPER_COMPARATOR and s.direction == "increasing"]
    held = [s for s in found if s.direction == "increasing"]
    if attn["verdict"] == "partly" and not paper_held:
        assert "rests only on a comparator the paper does not use" in attn["note"]
        for s in held:
            assert s.line.comparator == "linearisation" and s.line.label in attn["note"]
    else:
        assert "rests only on" not in attn["note"]
    assert "rests only on" not in relu["note"]
