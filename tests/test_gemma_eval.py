"""One-vs-rest evaluation of per-example scores (ntkbook.gemma.probe) and the data-set helpers."""

from __future__ import annotations

import numpy as np
import pytest

from ntkbook.gemma import pos_data
from ntkbook.gemma import probe


def test_stratified_split():
    labels = [0] * 10 + [1] * 7 + [2] * 4
    tr, te = probe.stratified_split(labels, 0.5, seed=0)
    assert len(set(tr) & set(te)) == 0 and len(tr) + len(te) == len(labels)
    lab = np.array(labels)
    assert [int(np.sum(lab[tr] == c)) for c in range(3)] == [5, 4, 2]  # round(3.5) = 4
    tr2, _ = probe.stratified_split(labels, 0.5, seed=0)
    assert np.array_equal(tr, tr2)
    with pytest.raises(ValueError, match="train_fraction"):
        probe.stratified_split(labels, 1.0)


def _ap_brute(y, s):
    order = np.argsort(-s)
    y = y[order]
    hits = np.cumsum(y)
    return float(np.sum((hits / np.arange(1, len(y) + 1))[y]) / y.sum())


def _auroc_brute(y, s):
    pos, neg = s[y], s[~y]
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg]))


def test_evaluate_task_picks_mode_and_sign():
    rng = np.random.default_rng(0)
    N = 60
    y = np.zeros(N, bool)
    y[::4] = True
    scores = rng.standard_normal((4, N))
    scores[2] = -3.0 * y + 0.5 * rng.standard_normal(N)  # mode 2, negative sign separates the class
    tr, te = probe.stratified_split(y.astype(int), 0.5, 0)
    r = probe.evaluate_task(scores, y, tr, te)
    assert (r["mode"], r["sign"]) == (2, -1)
    s = -scores[2, te]
    assert r["ap"] == pytest.approx(_ap_brute(y[te], s))
    assert r["auroc"] == pytest.approx(_auroc_brute(y[te], s))
    k = int(y[te].sum())
    assert r["precision"] == pytest.approx(np.mean(y[te][np.argsort(-s)[:k]]))
    with pytest.raises(ValueError, match="only one class"):
        probe.evaluate_task(scores, np.zeros(N, bool), tr, te)


def test_pca_scores_match_covariance_eigenvectors():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 6)) @ np.diag([5, 3, 2, 1, 0.5, 0.1])
    sc, var = probe.pca_scores(X, 3)
    Xc = X - X.mean(0)
    w, V = np.linalg.eigh(Xc.T @ Xc)
    ref = Xc @ V[:, ::-1][:, :3]
    for i in range(3):
        assert np.allclose(sc[i], ref[:, i]) or np.allclose(sc[i], -ref[:, i])
    assert np.allclose(var, w[::-1][:3] / w.sum())


def test_morph_tasks_filters():
    morph = ["Number=Sing"] * 40 + ["Number=Plur|Tense=Past"] * 40 + ["Tense=Pres"] * 5
    words = [f"w{i % 20}" for i in range(40)] + ["the"] * 25 + [f"v{i}" for i in range(15)] + ["x"] * 5
    kept, report = probe.morph_tasks(morph, words, case_sensitive=False, min_support=30, min_words=12,
                                     max_top_share=0.5)
    assert sorted(kept) == ["Number=Sing"]
    reasons = {r["feature"]: r["reason"] for r in report}
    assert "62%" in reasons["Number=Plur"] and "support 5" in reasons["Tense=Pres"]
    assert kept["Number=Sing"].sum() == 40


def test_word_token_alignment():
    text = 'He said "hi" and ran.'
    # tokens: 'He', ' said', ' "', 'hi', '"', ' and', ' ran', '.'
    offs = np.array([[0, 2], [2, 7], [7, 9], [9, 11], [11, 12], [12, 16], [16, 20], [20, 21]])
    assert pos_data.word_token_index(offs, text, 3) == 1       # 'said' begins token ' said'
    assert pos_data.word_token_index(offs, text, 9) == 3       # 'hi' begins token 'hi'
    assert pos_data.word_token_index(offs, text, 13) == 5      # 'and'
    offs2 = np.array([[0, 2], [2, 9], [9, 11], [11, 12], [12, 21]])
    assert pos_data.word_token_index(offs2, text, 8) is None   # '"' glued inside ' said "'


# -- contexts in disjoint windows, splits by story ----------------------------------------------
def _windows_table(seed=0, n_stories=60, context_len=64):
    """A synthetic data set: per story 1-4 contexts whose windows overlap (word tokens 10-40
    apart), labels spread over 8 classes."""
    rng = np.random.default_rng(seed)
    story, token = [], []
    for s in range(n_stories):
        t = context_len + int(rng.integers(0, 20))
        for _ in range(int(rng.integers(1, 5))):
            story.append(s)
            token.append(t)
            t += int(rng.integers(10, 40))
    story, token = np.array(story), np.array(token)
    labels = rng.integers(0, 8, len(story))
    return story, token, labels


def _shared_brute(story, token, context_len, a, b):
    worst = 0
    for i in a:
        for j in b:
            if i != j and story[i] == story[j]:
                wi = set(range(token[i] - context_len, token[i] + 1))
                wj = set(range(token[j] - context_len, token[j] + 1))
                worst = max(worst, len(wi & wj))
    return worst


def test_max_shared_tokens_counts_window_overlap():
    story, token, _ = _windows_table(n_stories=12)
    idx = np.arange(len(story))
    a, b = idx[::2], idx[1::2]
    assert pos_data.max_shared_tokens(story, token, 64, a, b) == _shared_brute(story, token, 64, a, b) > 0
    assert pos_data.max_shared_tokens(story, token, 64, idx) == _shared_brute(story, token, 64, idx, idx)
    # two windows whose word tokens are 65 apart share nothing; 64 apart, one position
    assert pos_data.max_shared_tokens(np.array([0, 0]), np.array([100, 165]), 64, np.array([0]), np.array([1])) == 0
    assert pos_data.max_shared_tokens(np.array([0, 0]), np.array([100, 164]), 64, np.array([0]), np.array([1])) == 1
    assert pos_data.max_shared_tokens(np.array([0, 1]), np.array([100, 100]), 64, np.array([0]), np.array([1])) == 0


def test_story_splits_keep_stories_whole_and_share_no_token():
    story, token, labels = _windows_table()
    splits = probe.story_splits(labels, story, 20, seed=0)
    assert len({tuple(te) for _, te in splits}) == 20                 # 20 different splits
    for tr, te in splits:
        assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == len(labels)
        assert not set(story[tr]) & set(story[te])                    # every story on one side
        assert pos_data.max_shared_tokens(story, token, 64, te, tr) == 0
        for c in range(8):                                            # the classes split about evenly
            n_c = int(np.sum(labels == c))
            assert abs(int(np.sum(labels[te] == c)) - n_c / 2) <= max(3, 0.25 * n_c)
    # the first data set's split, stratified by class only, puts one story's tokens on both sides
    tr, te = probe.stratified_split(labels, 0.5, seed=0)
    assert pos_data.max_shared_tokens(story, token, 64, te, tr) > 0
    with pytest.raises(ValueError, match="one length"):
        probe.story_splits(labels, story[:-1], 2)


def test_draw_disjoint_windows():
    C = pos_data.Candidate
    cands = [C(3, t, 0, "w", pos, "") for t, pos in
             [(64, "NOUN"), (70, "PROPN"), (100, "NOUN"), (130, "PROPN"), (140, "DET"), (200, "PROPN"),
              (210, "NOUN"), (280, "NOUN"), (300, "DET")]]
    need = {c: 10 for c in pos_data.CLASSES}
    drawn = pos_data.draw_disjoint(cands, need, 2, 64, seed=0, priority={**need, "PROPN": 50})
    tok = [x.token for x in drawn]
    assert tok == sorted(tok) and np.all(np.diff(tok) >= 65)          # pairwise disjoint windows
    assert sum(x.pos == "PROPN" for x in drawn) == 2                  # the first class, up to per_story
    assert drawn == pos_data.draw_disjoint(cands, need, 2, 64, seed=0, priority={**need, "PROPN": 50})
    one = pos_data.draw_disjoint(cands, {**need, "PROPN": 1}, 2, 64, seed=0)
    assert sum(x.pos == "PROPN" for x in one) <= 1                    # never more than a class needs
    assert not pos_data.draw_disjoint(cands, {c: 0 for c in pos_data.CLASSES}, 2, 64, seed=0)


# -- the author's morphology filter ----------------------------------------------------------------
def test_morph_filter_counts_words_as_written():
    # Person=3 on 12 words as written, 8 once lower-cased ("He"/"he", ...): the author's filter
    # (case-sensitive) admits it, the lower-casing one drops it
    words = ["he", "He", "she", "She", "it", "It", "they", "They", "him", "her", "his", "its"] * 3
    morph = ["Person=3"] * len(words) + ["Number=Sing"] * 36
    words += [f"w{i}" for i in range(36)]
    kw = dict(min_support=30, min_words=12, max_top_share=0.5)
    kept, _ = probe.morph_tasks(morph, words, case_sensitive=True, **kw)
    assert sorted(kept) == ["Number=Sing", "Person=3"]
    kept_lower, report = probe.morph_tasks(morph, words, case_sensitive=False, **kw)
    assert sorted(kept_lower) == ["Number=Sing"]
    assert {r["feature"]: r["reason"] for r in report}["Person=3"] == "8 distinct words < 12"
    assert probe.admitted_features(morph, words, case_sensitive=True, **kw) == [
        {"feature": "Number=Sing", "support": 36, "words": 36, "top_word": "w0", "top_share": 1 / 36},
        {"feature": "Person=3", "support": 36, "words": 12, "top_word": "he", "top_share": 1 / 12}]


# -- verdicts over many splits, from stored scores -----------------------------------------------------
def test_split_robustness_separating_feature_wins_every_split_noise_about_half():
    story, _, labels = _windows_table(seed=1, n_stories=120)
    rng = np.random.default_rng(2)
    N = len(labels)
    tasks = {f"c{c}": labels == c for c in range(8)}
    noise_a, noise_b = rng.standard_normal((3, N)), rng.standard_normal((3, N))
    good = noise_a.copy()
    good[1] = -2.0 * (labels == 0) + 0.5 * rng.standard_normal(N)   # mode 1 (negated) separates c0
    splits = probe.story_splits(labels, story, 20, seed=0)
    rows = probe.split_robustness({"entk": good, "pca": noise_b}, tasks, splits)
    r0 = rows[0]
    assert r0["task"] == "c0" and r0["n_splits"] == 20 and len(r0["ap_diff"]) == 20
    assert r0["ap_win_share"] == 1.0 and r0["auroc_win_share"] == 1.0 and r0["robust_win_ap"]
    assert r0["ap_diff_mean"] == pytest.approx(np.mean(r0["ap_diff"]))
    assert r0["ap_diff_std"] == pytest.approx(np.std(r0["ap_diff"], ddof=1))
    assert r0["entk_ap_mean"] - r0["pca_ap_mean"] == pytest.approx(r0["ap_diff_mean"])
    # noise against noise: ahead in about half the splits, and no robust win
    shares = [r["ap_win_share"] for r in rows[1:]]
    assert 0.3 <= np.mean(shares) <= 0.7
    assert sum(r["robust_win_ap"] for r in rows[1:]) <= 1
    # the per-split numbers are those of evaluate_task on each split
    tr, te = splits[3]
    d = probe.evaluate_task(good, tasks["c2"], tr, te)["ap"] - probe.evaluate_task(noise_b, tasks["c2"], tr, te)["ap"]
    assert rows[2]["ap_diff"][3] == pytest.approx(d)
