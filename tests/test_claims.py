"""The readings of stored results in ntkbook.claims: intervals over seeds, the influence map's
matched point, and Paper A's flip-rate verdicts (including "not tested"), on synthetic results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ntkbook.book import scorecard
from ntkbook.claims import NOT_TESTED, ROW_VERDICTS
from ntkbook.claims import influence as ci
from ntkbook.claims import influence_map as imap
from ntkbook.claims.intervals import LEVEL, ratio_interval, seed_interval
from ntkbook.errors import InputError
from ntkbook.store import Result
from ntkbook.verdicts import VERDICTS


def test_seed_interval_is_students_t():
    v = np.array([10.0, 11.0, 12.0])
    iv = seed_interval(v)
    half = stats.t.ppf(0.5 + LEVEL / 2, 2) * v.std(ddof=1) / math.sqrt(3)  # 1.69 at 90 %
    assert iv.mean == pytest.approx(11.0) and iv.lo == pytest.approx(11.0 - half)
    assert iv.hi == pytest.approx(11.0 + half) and iv.n == 3 and iv.known
    assert iv.above(9.0) and not iv.above(10.0) and iv.below(13.0) and not iv.below(12.0)
    assert iv.overlaps(12.5, 20.0) and not iv.overlaps(13.0, 20.0)


def test_one_seed_has_no_interval_and_no_verdict_reads_one():
    iv = seed_interval([5.0])
    assert not iv.known and math.isnan(iv.lo)
    assert not iv.above(0.0) and not iv.below(10.0)  # one run never excludes a level
    assert iv.text() == "5.0"


def test_seed_interval_refuses_bad_input():
    with pytest.raises(InputError, match="finite"):
        seed_interval([1.0, np.nan])
    with pytest.raises(InputError, match="finite"):
        seed_interval([])


def test_ratio_interval_is_the_geometric_mean_of_paired_ratios():
    iv = ratio_interval([4.0, 8.0, 16.0], [1.0, 2.0, 2.0])
    assert iv.mean == pytest.approx(math.exp(np.mean(np.log([4, 4, 8]))))
    assert iv.lo < iv.mean < iv.hi
    zero = ratio_interval([3.0, 6.0], [0.0, 1.0])  # a seed with no flips: no log, no interval
    assert zero.mean == pytest.approx(9.0) and not zero.known
    assert math.isinf(ratio_interval([1.0, 1.0], [0.0, 0.0]).mean)
    with pytest.raises(InputError, match="paired"):
        ratio_interval([1.0, 2.0], [1.0])


# --------------------------------------------------------------------------------------------------
# a synthetic influence map: 2L-ReLU's flip rate grows with eps, MLP-Attn's sits higher
EPS = (0.01, 0.03, 0.1, 0.3)


def _map(relu, attn, *, attn_acc=1.0, null_attn=None, ceiling=40.0, tasks=("mnist10",)):
    """``relu``/``attn``: {eps: per-seed flip rates in %}."""
    table = {}
    for task in tasks:
        for model, rates in (("relu", relu), ("attn", attn)):
            row = {"train_acc": [attn_acc if model == "attn" else 1.0] * 3,
                   "clean/lam=0.001/ceiling": [ceiling / 100] * 3}
            for e in EPS:
                row[f"pgd/{e:g}/lam=0.001/flip"] = [x / 100 for x in rates[e]]
                null = null_attn[e] if (model == "attn" and null_attn) else [0.0] * 3
                row[f"null/{e:g}/lam=0.001/flip"] = [x / 100 for x in null]
            table[f"{task}/{model}"] = row
    return Result(name="influence_map", config={"tasks": list(tasks), "eps": list(EPS)},
                  scalars={"table": table})


RELU = {0.01: [0.0, 0.5, 0.2], 0.03: [1.0, 1.5, 1.2], 0.1: [3.0, 3.5, 3.4], 0.3: [20.0, 22.0, 21.0]}


def test_matched_point_reads_where_relu_is_nearest_the_paper():
    attn = {e: [30.0, 31.0, 29.0] for e in EPS}
    res = _map(RELU, attn)
    mp = imap.matched_point(res, "mnist10", 3.3)
    assert mp.read_at == 0.1  # 3.3 % mean there: nearest 3.3 on a log scale
    assert mp.crossing is not None and 0.03 < mp.crossing <= 0.1
    assert mp.relu.mean == pytest.approx(3.3) and mp.attn.mean == pytest.approx(30.0)
    assert mp.attn_saturated is False  # 30 % < 0.8 x 40 %


def test_flip_row_reproduces_when_the_excess_is_significant_and_the_size_matches():
    attn = {e: [30.0, 31.0, 29.0] for e in EPS}  # ~9x ReLU at eps 0.1; the paper's MNIST is 8.8x
    row = ci.flip_row(_map(RELU, attn), "mnist10")
    assert row["verdict"] == "reproduces", row


def test_flip_row_partly_when_only_the_direction_holds():
    attn = {e: [9.0, 10.0, 11.0] for e in EPS}  # 3x: direction yes, size off by more than 2x
    assert ci.flip_row(_map(RELU, attn), "mnist10")["verdict"] == "partly"


def test_flip_row_does_not_when_seeds_straddle():
    attn = {e: [0.0, 10.0, 2.0] for e in EPS}  # the paired difference's interval contains 0
    assert ci.flip_row(_map(RELU, attn), "mnist10")["verdict"] == "does not"


def test_untrained_model_is_not_tested_not_does_not():
    attn = {e: [30.0, 31.0, 29.0] for e in EPS}
    row = ci.flip_row(_map(RELU, attn, attn_acc=0.3), "mnist10")
    assert row["verdict"] == NOT_TESTED and "did not train" in row["ours"]
    assert NOT_TESTED not in VERDICTS and NOT_TESTED in ROW_VERDICTS
    ratio = ci.ratio_row(_map(RELU, attn, attn_acc=0.3))
    assert ratio["verdict"] == NOT_TESTED


def test_above_null_is_paired_by_seed():
    attn = {e: [30.0, 31.0, 29.0] for e in EPS}
    null = {e: [29.0, 30.0, 28.0] for e in EPS}
    iv = imap.above_null(_map(RELU, attn, null_attn=null), "mnist10", "attn", "pgd", 0.1)
    assert iv.mean == pytest.approx(1.0) and iv.lo == pytest.approx(1.0) and iv.hi == pytest.approx(1.0)


def test_scorecard_counts_not_tested_apart():
    c = scorecard.Claim("A.flip.cifar10", "A", "claim", "number", "influence")
    rows = [scorecard.Row(c, verdict=NOT_TESTED), scorecard.Row(c, verdict="reproduces")]
    counts = scorecard.verdict_counts(rows)
    assert counts[NOT_TESTED] == 1 and counts["reproduces"] == 1
    assert "1 not tested" in scorecard.headline(rows)


def test_a_measured_row_outranks_one_that_tested_nothing():
    tested = {"claim": "A.flip.mnist10", "ours": "a", "verdict": "partly"}
    untested = {"claim": "A.flip.mnist10", "ours": "b", "verdict": NOT_TESTED}
    res = _map(RELU, {e: [30.0, 31.0, 29.0] for e in EPS})
    rows = {r.claim.id: r for r in scorecard.rows_from([(res, [untested]), (res, [tested])])}
    assert rows["A.flip.mnist10"].verdict == "partly"


def test_every_claims_module_that_judges_names_its_experiments():
    from ntkbook.experiments import EXPERIMENTS

    modules = scorecard.claim_modules()
    assert ci in modules
    for module in modules:
        assert set(module.EXPERIMENTS) <= set(EXPERIMENTS), module.__name__


def test_width_threshold_is_kappa6_n_log_n_and_judged_per_data_set():
    """Judged with n of the data set the paper's threshold is for (aw.PAPER_N), per data set."""
    from ntkbook.claims import attention_width as aw

    assert aw.threshold(10.0, 100) == pytest.approx(1e6 * 100 * math.log(100))
    nlogn = {d: aw.PAPER_N[d] * math.log(aw.PAPER_N[d]) for d in aw.PAPER_N}

    def judged(kappa_full, k_blocks=(10.0, 1e3)):
        per = {d: {"n": 100, "d": 50, "rank_G": 50, "d_star": 50, "kappa_G": kappa_full[d],
                   "kappa_d": [{"d": 10, "kappa_d_G": k_blocks[0]}, {"d": 50, "kappa_d_G": k_blocks[1]}]}
               for d in ("mnist", "cifar10")}
        res = Result(name="gram_conditioning", config={"verify_limit": 1e12}, scalars={
            "datasets": ["mnist", "cifar10"], "labels": {"mnist": "MNIST", "cifar10": "CIFAR-10"},
            "per_dataset": per}, arrays={f"{d}/lam_G": np.geomspace(1.0, 1e-6, 50) for d in per})
        (row,) = aw.width_threshold_row(res)
        assert row["claim"] == "A.width_threshold"
        return row["verdict"]

    # kappa^6 n ln n at the data set's n equal to the paper's on each data set: reproduces
    exact = {d: (aw.PAPER_THRESHOLDS[d] / nlogn[d]) ** (1 / 6) for d in aw.PAPER_N}
    assert judged(exact) == "reproduces"
    # ten times the kappa: 6 decades off, and the blocks (10 and 1e3) bracket neither: does not
    assert judged({d: 10 * k for d, k in exact.items()}) == "does not"
    # blocks that bracket both: partly
    assert judged({d: 10 * k for d, k in exact.items()}, (10.0, 1e5)) == "partly"
    assert aw.scorecard({}) == []


def test_a_superseded_experiment_scorecard_is_not_called(monkeypatch):
    """A claims module that names an experiment in SUPERSEDES replaces its own scorecard()
    (simulated: gram_conditioning given a scorecard() again, one that fails when called)."""
    import types

    from ntkbook.experiments import gram_conditioning

    def old_scorecard(result):
        raise AssertionError("a superseded scorecard() was called")

    monkeypatch.setattr(gram_conditioning, "scorecard", old_scorecard, raising=False)
    fake = types.ModuleType("ntkbook.claims.fake")
    fake.EXPERIMENTS = ("influence_map",)
    fake.scorecard = lambda results: []
    monkeypatch.setattr(scorecard, "claim_modules", lambda: [fake])
    gram = Result(name="gram_conditioning", config={}, scalars={})
    with pytest.raises(AssertionError, match="superseded scorecard"):  # not superseded: it is called
        scorecard.chapter_rows("attention_width", [gram])
    fake.SUPERSEDES = ("gram_conditioning",)
    assert scorecard.superseded() == {"gram_conditioning"}
    assert scorecard.chapter_rows("attention_width", [gram]) == []


def test_load_stored_reads_a_named_reduced_config_and_never_computes(tmp_path, monkeypatch):
    """A page reads the paper preset if stored, else the first stored alternative; with none
    stored it raises NotStored naming the command, instead of starting a paper-scale run.
    Simulated on the stored map: a paper preset with a fourth seed is not stored, and the stored
    three-seed map is named as the alternative."""
    import shutil

    from ntkbook import experiments
    from ntkbook.paths import results_dir

    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path))
    three = {"seeds": (0, 1, 2)}
    with pytest.raises(experiments.NotStored, match="python -m ntkbook run influence_map --scale paper"):
        experiments.load_stored("influence_map", "paper", (three,), seeds=(0, 1, 2, 3))
    monkeypatch.delenv("NTKBOOK_RESULTS")
    stored = results_dir() / "influence_map" / "1-060f37804806"
    assert stored.exists(), "the map the chapter reads is stored"
    shutil.copytree(stored, tmp_path / "influence_map" / stored.name)
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path))
    assert list(experiments.load_stored("influence_map", "paper").config["seeds"]) == [0, 1, 2]
    with pytest.raises(experiments.NotStored, match="--set seeds=0,1,2,3"):
        experiments.load_stored("influence_map", "paper", seeds=(0, 1, 2, 3))
    res = experiments.load_stored("influence_map", "paper", (three,), seeds=(0, 1, 2, 3))
    assert list(res.config["seeds"]) == [0, 1, 2]


def test_a_claims_modules_fallback_stands_in_and_is_named(monkeypatch):
    """Where the paper preset is not stored, a claims module's FALLBACKS stand in for it on the
    scorecard, and the row's source names the changed fields (simulated: the map's paper preset
    is moved to four seeds, which is not stored; the stored three-seed map is the fallback)."""
    import dataclasses

    from ntkbook.claims import influence as claims_influence
    from ntkbook.experiments import influence_map

    paper = influence_map.Config.paper()
    monkeypatch.setattr(influence_map.Config, "paper",
                        classmethod(lambda cls: dataclasses.replace(paper, seeds=(0, 1, 2, 3))))
    monkeypatch.setattr(scorecard, "claim_modules", lambda: [claims_influence])
    rows = {r.claim.id: r for r in scorecard.collect(["influence_map"])}
    assert rows["A.flip.mnist10"].verdict == scorecard.NOT_MEASURED
    monkeypatch.setattr(claims_influence, "FALLBACKS", {"influence_map": ({"seeds": (0, 1, 2)},)}, raising=False)
    rows = {r.claim.id: r for r in scorecard.collect(["influence_map"])}
    row = rows["A.flip.mnist10"]
    assert row.verdict != scorecard.NOT_MEASURED and "changed: seeds" in row.source, row.source


def test_a_row_credits_only_the_results_it_names(monkeypatch):
    res = _map(RELU, {e: [30.0, 31.0, 29.0] for e in EPS})
    other = Result(name="influence_malleability", config={}, scalars={})
    row = {"claim": "A.flip.mnist10", "ours": "a", "verdict": "partly", "from": ("influence_map",)}
    monkeypatch.setattr(scorecard, "_source", lambda r: f"`{r.name}`")
    (out,) = [r for r in scorecard.rows_from([([res, other], [row])]) if r.claim.id == "A.flip.mnist10"]
    assert out.source == "`influence_map`" and out.experiments == ["influence_map"]


def test_ratio_row_says_whether_the_kappa_dependence_could_be_tested():
    """v2: "the gap depending on dataset condition number". With every tested task on one data set
    the dependence is not tested (said so, with that set's kappa); with two data sets both kappas
    are reported beside the ratios. The verdict is the ratio rule's either way."""
    attn = {e: [30.0, 31.0, 29.0] for e in EPS}
    gram = Result(name="gram_conditioning", config={}, scalars={"per_dataset": {
        "mnist": {"kappa_G": 3.8e10}, "cifar10": {"kappa_G": 4.8e7}}})
    one = _map(RELU, attn, tasks=("mnist10", "mnist_3v8"))
    row = ci.ratio_row(one, gram)
    assert "not tested" in row["ours"] and "3.8×10¹⁰" in row["ours"] and row["from"] == ("influence_map", "gram_conditioning")
    assert row["verdict"] == ci.ratio_row(one)["verdict"]
    two = _map(RELU, attn, tasks=("mnist10", "cifar10"))
    text = ci.ratio_row(two, gram)["ours"]
    assert "MNIST 3.8×10¹⁰" in text and "CIFAR-10 4.8×10⁷" in text and "not judged" in text and "κ(G)" in text
    assert "κ(G)" not in ci.ratio_row(two)["ours"]


def test_a_row_may_credit_the_result_objects_it_read():
    """A claims module that loaded an entry itself (e.g. a run with more seeds in place of the
    paper preset) lists that result in "from": the source line credits it, not the one given."""
    given = Result(name="ntk_distance", config={}, scalars={})
    read = Result(name="ntk_distance", config={"seeds": [0, 1, 2, 3, 4]}, scalars={})
    other = Result(name="ntk_distance_fullbatch", config={}, scalars={})
    assert scorecard._credited([given, other], None) == [given, other]
    assert scorecard._credited([given, other], ("ntk_distance_fullbatch",)) == [other]
    assert scorecard._credited([given, other], (read, "ntk_distance_fullbatch")) == [read, other]
