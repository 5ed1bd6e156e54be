"""The Gemma probe on contexts in disjoint windows (ntkbook.experiments.gemma_probe), without the model:
its tasks and splits by story on a synthetic table of windows, the evaluation over splits from
stored scores, the verdicts, and the layer sweep's entries."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.claims import gemma as gemma_claims
from ntkbook.experiments import gemma_probe
from ntkbook.gemma import pos_data, probe
from ntkbook.gemma.pos_data import CLASSES
from ntkbook.store import Result, config_hash

ROOT = Path(__file__).resolve().parents[1]


def _table(seed=0, n_stories=200, context_len=64):
    """Synthetic contexts: per story 1-3 windows (word tokens 10-40 apart: they overlap), 8 classes,
    and morphology Person=3 on 'He'/'he'-style words."""
    rng = np.random.default_rng(seed)
    story, token = [], []
    for s in range(n_stories):
        t = context_len + int(rng.integers(0, 30))
        for _ in range(int(rng.integers(1, 4))):
            story.append(s)
            token.append(t)
            t += int(rng.integers(10, 40))
    story, token = np.array(story), np.array(token)
    labels = rng.integers(0, len(CLASSES), len(story))
    words = [f"{'W' if i % 2 else 'w'}{i % 9}" for i in range(len(story))]  # 18 as written, 9 lower-cased
    morph = ["Person=3" if labels[i] == 1 else "" for i in range(len(story))]
    return labels, story, token, morph, words


def test_tasks_and_splits_keep_stories_whole_and_share_no_token():
    labels, story, token, morph, words = _table()
    config = dataclasses.replace(gemma_probe.Config.paper(), min_support=10, min_words=12)
    ev = probe.tasks_and_splits(labels, story, morph, words, list(CLASSES), config)
    assert len(ev["splits"]) == config.n_splits == 20
    assert list(ev["pos"]) == list(CLASSES) and not ev["dropped"]
    for tr, te in ev["splits"]:
        assert not set(story[tr]) & set(story[te])
        assert pos_data.max_shared_tokens(story, token, 64, te, tr) == 0
    # the author's filter counts 'W1' and 'w1' as two words: Person=3 has 12 or more of them, 9 lower-cased
    pos3 = [w for w, m in zip(words, morph) if m == "Person=3"]
    assert len(set(pos3)) >= 12 and len({w.lower() for w in pos3}) == 9
    assert list(ev["morph"]) == ["Person=3"]
    assert ev["morph_admitted"] == [{"feature": "Person=3", "support": len(pos3), "words": len(set(pos3)),
                                     "top_word": ev["morph_admitted"][0]["top_word"],
                                     "top_share": ev["morph_admitted"][0]["top_share"]}]
    # a task with its positives in one story cannot be split: dropped, with the reason
    few = np.array(morph, dtype=object)
    few[:] = ""
    few[story == 0] = "Case=Acc"
    ev2 = probe.tasks_and_splits(labels, story, list(few), words, list(CLASSES),
                                       dataclasses.replace(config, min_support=1, min_words=1, max_top_share=1.0))
    assert "Case=Acc" not in ev2["morph"] and ev2["dropped"][0]["task"] == "Case=Acc"


def _fake_result(separates: bool) -> Result:
    """A gemma_probe result built from synthetic scores: the eNTK's mode 0 separates every class
    (``separates``) or is noise."""
    labels, story, token, morph, words = _table(seed=3)
    config = gemma_probe.Config.paper()
    ev = probe.tasks_and_splits(labels, story, morph, words, list(CLASSES),
                                      dataclasses.replace(config, min_support=10))
    rng = np.random.default_rng(4)
    N = len(labels)
    pca = rng.standard_normal((4, N))
    entk = rng.standard_normal((len(CLASSES), N))
    if separates:
        entk += 3.0 * (labels[None, :] == np.arange(len(CLASSES))[:, None])
    row = {"layer": 16, "param_set": "down_proj"}
    for family in ("pos", "morph"):
        row.update(gemma_probe.evaluate_point({"entk": entk, "pca": pca}, ev[family], ev["splits"], family))
    key = lambda name: gemma_probe.point_key(16, "down_proj", name)  # noqa: E731
    split_test = np.array([np.isin(np.arange(N), te) for _, te in ev["splits"]])  # as run() stores it
    return Result(gemma_probe.NAME, dataclasses.asdict(config),
                  arrays={key("entk_scores"): entk, key("pca_scores"): pca, "split_test": split_test},
                  scalars={"points": [row], "identity": {"rel_err": 1e-9, "N": 2, "P": 10, "param_set": ["k_norm"]},
                           "classes": list(CLASSES), "labels": labels.tolist(), "N": N,
                           "stories": len(np.unique(story)), "story": story.tolist(), "morph": list(morph),
                           "morph_tasks": sorted(ev["morph"])})


def test_verdicts_count_only_wins_that_hold_over_the_splits():
    good, noise = _fake_result(True), _fake_result(False)
    p = gemma_probe.point(good)
    assert p["pos_n"] == 8 and p["pos_robust_wins_ap"] == 8 and p["pos_ap_diff_mean"] > 0.2
    assert len(p["pos_splits"][0]["ap_diff"]) == 20
    # the verdicts are claims.gemma's (the scorecard moved out of the experiment module)
    rows = {r["claim"]: r for r in gemma_claims.scorecard({"gemma_probe": good})}
    assert rows["B.gemma.pos_vs_pca"]["verdict"] == "reproduces"
    assert "8/8" in rows["B.gemma.pos_vs_pca"]["ours"] and "20 splits by story" in rows["B.gemma.pos_vs_pca"]["note"]
    assert rows["B.gemma.top_contexts"]["verdict"] == "reproduces"
    q = gemma_probe.point(noise)
    assert q["pos_robust_wins_ap"] <= 1   # noise against noise: no robust win (at most a fluke)
    assert {r["claim"]: r for r in gemma_claims.scorecard({"gemma_probe": noise})}["B.gemma.pos_vs_pca"]["verdict"] \
        == "does not"
    # the first split's rows are evaluate_task's on that split
    labels = np.asarray(good["labels"])
    assert p["pos_entk_wins_ap"] == sum(r["entk_ap"] > r["pca_ap"] for r in p["pos"])
    assert p["pos_entk_ap"] == pytest.approx(np.mean([r["entk_ap"] for r in p["pos"]]))
    assert p["pos"][0]["support"] == int(np.sum(labels == 0))
    assert probe.ROBUST_WIN_SHARE == 0.8


def _sweep_tool():
    spec = importlib.util.spec_from_file_location("gemma_sweep", ROOT / "tools" / "gemma_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sweep_is_one_entry_per_layer():
    tool = _sweep_tool()
    configs = tool.layer_configs(gemma_probe.SWEEP_LAYERS, 32, gemma_probe.SWEEP_WHOLE_LAYER_AT, {})
    assert [c.layers for c in configs] == [(L,) for L in range(18)]
    assert len({config_hash(c) for c in configs}) == 18
    assert [c.whole_layer_at for c in configs if c.whole_layer_at] == [(17,)]
    assert all(c.n_per_class == 32 and c.data_n_per_class == 128 and c.identity_contexts == 0 for c in configs)
    # the same entries as the overrides the chapter will load them by
    assert configs[5] == experiments.make_config("gemma_probe", "paper", **gemma_probe.sweep_overrides(5, 32))
    tiny = tool.layer_configs([17], 2, (), {"k": 2, "lanczos_steps": 4})[0]
    assert (tiny.k, tiny.lanczos_steps, tiny.whole_layer_at) == (2, 4, ())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(12))
def test_batched_average_precision_is_one_call_per_row_bit_for_bit(dtype, seed):
    """``probe.average_precisions`` (its own arithmetic) equals scikit-learn called once per row,
    to the bit, ties, constant rows, a lone positive and flipped signs included; and the direction
    it picks is the one the loop over rows and signs picks (first best wins)."""
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(40, 400)), int(rng.integers(2, 30))
    y = rng.random(n) < rng.uniform(0.05, 0.5)
    y[:2] = True, False
    scores = rng.normal(size=(k, n)).astype(dtype)
    scores[: k // 2] = np.round(scores[: k // 2], 1)  # ties inside rows
    scores[-1] = scores[0]  # a tie between rows
    if k > 3:
        scores[1] = 0.5  # one run of equal scores
        scores[2] = np.round(scores[2] * 4) / 4  # long runs of ties
    if seed % 3 == 2:
        y[:] = False
        y[int(rng.integers(n))] = True  # a lone positive
    batched = probe.average_precisions(y, np.concatenate([scores, -scores]))
    one_by_one = np.array([average_precision_score(y, s) for s in np.concatenate([scores, -scores])])
    assert batched.dtype == one_by_one.dtype and batched.tobytes() == one_by_one.tobytes()
    best = (-1.0, 0, 1)
    for i, s in enumerate(scores):
        for sign in (1, -1):
            ap = average_precision_score(y, sign * s)
            if ap > best[0]:
                best = (ap, i, sign)
    assert probe.best_direction(scores, y) == best
    (single,) = probe.average_precisions(y, scores[:1])
    assert single == average_precision_score(y, scores[0])
    with pytest.raises(probe.InputError, match=r"scores must be \(m, "):
        probe.average_precisions(y, scores[:, :-1])
    with pytest.raises(probe.InputError, match="no positive"):
        probe.average_precisions(np.zeros(n, bool), scores)
    bad = scores.copy()
    bad[0, 0] = np.nan
    with pytest.raises(probe.InputError, match="NaN or infinity"):
        probe.average_precisions(y, bad)
