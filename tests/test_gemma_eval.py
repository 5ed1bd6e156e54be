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
    kept, report = probe.morph_tasks(morph, words, min_support=30, min_words=12, max_top_share=0.5)
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
