"""The readings of the Gemma probe (ntkbook.claims.gemma) on synthetic gemma_probe results: a win
counts only where it holds in WIN_SHARE of the splits, the scorecard's verdicts and notes, the
morphology filter beside the author's, the depth sweep's rows and reading, and the figures."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.claims import gemma as claims  # noqa: E402
from ntkbook.experiments import gemma_probe  # noqa: E402
from ntkbook.gemma.pos_data import CLASSES  # noqa: E402
from ntkbook.errors import InputError  # noqa: E402
from ntkbook.store import Result  # noqa: E402

N_SPLITS = 20
#: the splits stored as arrays in a synthetic result (split_test)
STORED_SPLITS = 4


def _split_row(task: str, share: float, support: int = 40, gap: float = 0.05) -> dict:
    """A ``<family>_splits`` row whose eNTK is ahead (by ``gap``) in ``share`` of the splits, behind
    (by ``gap`` / 2) in the others; AUROC moves the same way at half the size."""
    wins = round(share * N_SPLITS)
    ap = np.array([gap] * wins + [-gap / 2] * (N_SPLITS - wins))
    row = {"task": task, "support": support, "n_splits": N_SPLITS}
    for metric, d in (("ap", ap), ("auroc", ap / 2)):
        row.update({f"{metric}_diff": d.tolist(), f"{metric}_diff_mean": float(d.mean()),
                    f"{metric}_diff_std": float(d.std(ddof=1)), f"{metric}_win_share": float(np.mean(d > 0)),
                    f"robust_win_{metric}": bool(np.mean(d > 0) >= 0.8),
                    f"entk_{metric}_mean": 0.5 + float(d.mean()), f"pca_{metric}_mean": 0.5})
    return row


def _result(pos_shares, morph_shares, layer: int = 16, n_per_class: int = 12) -> Result:
    """A gemma_probe result at one layer: per class / feature the given share of splits won; the
    first split's chosen mode of class ``c`` is mode ``c``, whose score is 1 on that class (purity 1)."""
    labels = np.repeat(np.arange(len(CLASSES)), n_per_class)
    N = len(labels)
    scores = (labels[None, :] == np.arange(len(CLASSES))[:, None]).astype(float)
    first = [{"task": c, "support": n_per_class, "entk_mode": i, "entk_sign": 1, "entk_base_rate": 1 / 8,
              "entk_ap": 0.6, "pca_ap": 0.5} for i, c in enumerate(CLASSES)]
    morph = [f"Feat{i}=X" for i in range(len(morph_shares))]
    point = {"layer": layer, "param_set": "down_proj", "num_params": 640 * 2048, "t_lanczos": 1.0,
             "t_per_product": 0.1, "pos": first, "pos_n": len(CLASSES),
             "pos_splits": [_split_row(c, s) for c, s in zip(CLASSES, pos_shares)],
             "morph": [{"task": f, "entk_base_rate": 0.1} for f in morph], "morph_n": len(morph),
             "morph_splits": [_split_row(f, s) for f, s in zip(morph, morph_shares)]}
    config = dataclasses.replace(gemma_probe.Config.paper(), layers=(layer,))
    # splits by "story" (here by context): half of each class on the test side, reshuffled per split
    # (a few: the readings that re-choose modes on every split need no more)
    rng = np.random.default_rng(0)
    split_test = np.zeros((STORED_SPLITS, N), bool)
    for s in range(STORED_SPLITS):
        for c in range(len(CLASSES)):
            split_test[s, rng.permutation(np.flatnonzero(labels == c))[: n_per_class // 2]] = True
    k = len(CLASSES)
    key = lambda name: gemma_probe.point_key(layer, "down_proj", name)  # noqa: E731
    return Result(gemma_probe.NAME, dataclasses.asdict(config),
                  arrays={key("entk_scores"): scores, key("pca_scores"): rng.normal(size=(k, N)),
                          key("eigenvalues"): np.linspace(10.0, 1.0, k), key("ritz_residuals"): np.zeros(k),
                          "split_test": split_test},
                  scalars={"points": [point], "N": N, "stories": N, "labels": labels.tolist(),
                           "classes": list(CLASSES),
                           "identity": {"rel_err": 2e-9, "N": 2, "P": 10, "param_set": ["k_norm"]},
                           "morph_report": [{"feature": f, "support": 40, "words": 15, "top_word": "w",
                                             "top_share": 0.1, "kept": True, "reason": ""} for f in morph]
                           + [{"feature": "Person=3", "support": 40, "words": 9, "top_word": "he", "top_share": 0.3,
                               "kept": False, "reason": "9 distinct words < 12"}],
                           "morph_admitted": [{"feature": f, "support": 40, "words": 15, "top_word": "w",
                                               "top_share": 0.1} for f in morph]})


def test_a_family_without_tasks_says_so_in_words():
    rows = {r["claim"]: r for r in claims.scorecard({"gemma_probe": _result([0.8] * 8, [])})}
    assert rows["B.gemma.morph_vs_pca"]["ours"] == "no morphological task"
    assert rows["B.gemma.morph_vs_pca"]["verdict"] == "does not"


def test_a_win_counts_at_80_percent_of_the_splits_not_at_60():
    assert claims.WIN_SHARE == 0.8
    at80, at60 = _split_row("DET", 0.8), _split_row("NOUN", 0.6)
    assert at80["ap_win_share"] == 0.8 and at60["ap_win_share"] == 0.6
    assert claims.robust(at80) and not claims.robust(at60)
    assert claims.robust_wins([at80, at60]) == ["DET"]
    # the rule is the reading's, not the stored flag's: a stricter share drops the 80 % win
    assert claims.robust_wins([at80, at60], share=0.9) == []


def test_scorecard_verdicts_by_robust_ap_wins():
    every = {r["claim"]: r for r in claims.scorecard({"gemma_probe": _result([0.8] * 8, [1.0, 0.8, 0.6])})}
    assert set(every) == {"B.gemma.spectrum_identity", "B.gemma.pos_vs_pca", "B.gemma.morph_vs_pca",
                          "B.gemma.top_contexts"}
    assert all(r["verdict"] in ("reproduces", "partly", "does not") for r in every.values())
    pos = every["B.gemma.pos_vs_pca"]
    assert pos["verdict"] == "reproduces" and pos["ours"].startswith("eNTK wins on 8/8 by AP")
    assert "80%" in pos["note"] and "20 splits by story" in pos["note"]
    assert "reproduces if the eNTK wins on every class, partly if on at least half" in pos["note"]
    # morphology: 2 of 3 features won is "all but one"
    assert every["B.gemma.morph_vs_pca"]["verdict"] == "reproduces"
    assert "2/3" in every["B.gemma.morph_vs_pca"]["ours"]
    assert every["B.gemma.spectrum_identity"]["verdict"] == "reproduces"
    # purity 1 by construction: the chosen mode scores 1 on its class, and the test side holds 6 per class
    top = every["B.gemma.top_contexts"]
    assert top["verdict"] == "reproduces" and "top-6 purity on held-out stories 1.00" in top["ours"]
    assert "chance 0.12" in top["ours"] and "in at least 80% of the splits" in top["note"]
    # one class won in 60 % of the splits only: not a win, so 7/8 (partly); 4 classes: still half
    one_short = {r["claim"]: r for r in claims.scorecard({"gemma_probe": _result([0.8] * 7 + [0.6], [0.8, 0.6, 0.6])})}
    assert one_short["B.gemma.pos_vs_pca"]["verdict"] == "partly"
    assert "7/8" in one_short["B.gemma.pos_vs_pca"]["ours"] and "VERB" not in one_short["B.gemma.pos_vs_pca"]["ours"]
    assert one_short["B.gemma.morph_vs_pca"]["verdict"] == "does not"   # 1 of 3 < half
    half = {r["claim"]: r for r in claims.scorecard({"gemma_probe": _result([0.8] * 4 + [0.6] * 4, [])})}
    assert half["B.gemma.pos_vs_pca"]["verdict"] == "partly"
    no_task = half["B.gemma.morph_vs_pca"]
    assert no_task["verdict"] == "does not" and no_task["ours"].startswith("no")
    assert claims.scorecard({}) == []


def test_macro_difference_and_split_table():
    rows = [_split_row("a", 1.0), _split_row("b", 0.5)]
    mean, std, share = claims.macro_difference(rows)
    per_split = (np.array(rows[0]["ap_diff"]) + np.array(rows[1]["ap_diff"])) / 2
    assert mean == pytest.approx(per_split.mean()) and std == pytest.approx(per_split.std(ddof=1))
    assert share == pytest.approx(np.mean(per_split > 0))
    res = _result([0.8] * 7 + [0.6], [])
    table = claims.split_table(gemma_probe.point(res, 16), "pos")
    assert [r["task"] for r in table] == list(CLASSES) and [r["win"] for r in table] == [True] * 7 + [False]
    assert table[0]["chance_ap"] == 1 / 8 and len(table[0]["ap_diffs"]) == N_SPLITS


def test_morph_filter_beside_the_authors_and_the_authors_metric():
    rows = claims.morph_admitted_beside_author(_result([0.8] * 8, [0.8]))
    by = {r["feature"]: r for r in rows}
    assert rows[0]["feature"] == "Feat0=X" and by["Feat0=X"]["ours"] and not by["Feat0=X"]["author"]
    assert by["Person=3"] == {"feature": "Person=3", "ours": False, "author": True, "support": 40, "words": 9,
                              "reason": "9 distinct words < 12"}
    assert by["VerbForm=Inf"]["reason"] == "no context has it"
    assert set(claims.AUTHOR_MORPH_ADMITTED) <= set(by)
    # the author's own layer-16 table supports "8 of 8" and "all but one" by AP only
    assert claims.author_wins("pos", "ap") == (8, 8) and claims.author_wins("pos", "auroc") == (7, 8)
    assert claims.author_wins("morph", "ap") == (7, 8) and claims.author_wins("morph", "auroc") == (5, 8)


def _first_data_set_result(layer: int, entk_ap: float, pca_ap: float) -> Result:
    p = {"layer": layer, "param_set": "down_proj", "num_params": 1, "t_lanczos": 1.0, "t_per_product": 0.1,
         "pos_n": 8, "pos_entk_ap": entk_ap, "pos_pca_ap": pca_ap, "pos_entk_auroc": 0.8, "pos_pca_auroc": 0.7,
         "pos_entk_wins_ap": 5}
    return Result("gemma_features", {}, scalars={"points": [p], "N": 256})


def test_depth_rows_and_reading_say_which_data_and_how_many_layers():
    new = claims.depth_rows({16: _result([0.8] * 8, []), 17: _result([0.6] * 8, [], layer=17)}, "the new data")
    assert [(r["layer"], r["splits"], r["wins"]) for r in new] == [(16, 20, 8), (17, 20, 0)]
    assert new[0]["ap_std"] > 0 and new[0]["ap_share"] == 0.8   # every class wins on the same 16 splits
    reading = claims.depth_reading(new)
    assert reading.startswith("On the new data (2 of 18 layers: 16, 17;")
    assert "at layer 16" in reading and "This reading rests on 2 of the 18 layers." in reading
    old = claims.depth_rows({8: _first_data_set_result(8, 0.40, 0.45), 16: _first_data_set_result(16, 0.5, 0.4)},
                            "the first data set")
    assert [(r["splits"], r["ap_std"], r["wins"]) for r in old] == [(1, None, 5), (1, None, 5)]
    assert old[0]["ap_diff"] == pytest.approx(-0.05)
    text = claims.depth_reading(old, "the first data set")
    assert text.startswith("On the first data set (2 of 18 layers: 8, 16; N = 256)")
    assert "on its one split at layer 16" in text and "behind it on average at layer 8" in text
    assert claims.depth_reading([]) == "No layer of this data set is stored yet."


def test_figures_draw_from_the_readings():
    from ntkbook.plotting import gemma as plots

    res = _result([0.8] * 7 + [0.6], [0.8, 0.6])
    table = claims.split_table(gemma_probe.point(res, 16), "pos")
    fig = plots.plot_split_differences(table, "parts of speech", claims.WIN_SHARE)
    (a, b) = fig.axes[:2]
    assert "AP" in a.get_title() and "AUROC" in b.get_title()
    rows = claims.depth_rows({16: res}, "new") + claims.depth_rows({16: _first_data_set_result(16, 0.5, 0.4)}, "first")
    fig = plots.plot_depth(rows, hollow=("first",))
    handles = fig.legends[0].legend_handles
    assert [h.get_label() for h in handles] == ["eNTK", "PCA", "new", "first"]   # no whole layer among these rows
    assert [(h.get_linestyle(), h.get_markerfacecolor()) for h in handles[2:]] == [("-", "0.3"), (":", "white")]
    # a data set alone is drawn as asked, whatever its place
    only_first = plots.plot_depth([r for r in rows if r["data"] == "first"], hollow=("first",))
    assert only_first.legends[0].legend_handles[-1].get_linestyle() == ":"
    # a family with no task (morphology at a small N) still draws, empty
    empty = plots.plot_split_differences([], "morphological features", claims.WIN_SHARE)
    assert len(empty.axes[0].get_xticks()) == 0


def test_stored_reads_without_computing(tmp_path, monkeypatch):
    """An entry that is not stored is None (nothing computed, no lock waited for); the first data
    set and its sweep, archived with the book (their experiments retired), are read by layer."""
    assert set(claims.first_sweep()) == set(claims.FIRST_SWEEP_LAYERS)
    assert claims.first_sweep()[17]["points"][-1]["param_set"] == "layer"
    assert claims.first_sweep(128).keys() == {16}   # the one layer at N = 1024
    first = claims.first_data(128)
    assert first.name == "gemma_pos_data" and first.config["n_per_class"] == 128 and first["stories_read"] > 0
    with pytest.raises(InputError, match="not in results/archive"):
        claims.first_data(64)
    monkeypatch.setenv("NTKBOOK_RESULTS", str(tmp_path))
    assert claims.stored("gemma_probe", "paper", **gemma_probe.sweep_overrides(3, 32)) is None
    assert claims.probe_sweep(32) == {}
    assert not any(tmp_path.iterdir())


def test_ritz_convergence_compares_the_residual_with_the_gap_not_the_eigenvalue():
    res = _result([0.8] * 8, [])
    key = lambda name: gemma_probe.point_key(16, "down_proj", name)  # noqa: E731
    res.arrays[key("eigenvalues")] = np.array([10.0, 9.0, 8.9, 5.0])
    res.arrays[key("ritz_residuals")] = np.array([0.0, 0.009, 0.5, 0.1])
    rows = claims.ritz_convergence(res)
    assert [r["gap"] for r in rows[:3]] == pytest.approx([1.0, 0.1, 0.1]) and rows[3]["gap"] is None
    assert [r["ratio"] for r in rows[:3]] == pytest.approx([0.0, 0.09, 5.0])
    # mode 3's residual is 5 % of its eigenvalue (an accurate eigenvalue) but 5 times its gap
    assert [r["pinned"] for r in rows] == [True, True, False, False]
    assert claims.pinned_modes(res) == [0, 1]


def test_depth_rows_count_pinned_modes_and_the_reading_checks_wins_on_them():
    """Every stored layer's row says how many Ritz pairs are pinned down; the reading says whether the
    wins restricted to those modes are the classes won with all of them, and names a layer where not."""
    top = _result([0.8] * 8, [], layer=17)
    top.arrays[gemma_probe.point_key(17, "down_proj", "ritz_residuals")] = np.array([0.0] + [1.0] * 7)
    # layer 16: a ninth, empty mode below the eight class modes, and zero residuals: the eight are
    # pinned down (the last mode never is: its gap below is unknown)
    mid = _result([0.8] * 8, [])
    key = lambda name: gemma_probe.point_key(16, "down_proj", name)  # noqa: E731
    mid.arrays[key("entk_scores")] = np.vstack([mid.arrays[key("entk_scores")], np.zeros(mid["N"])])
    mid.arrays[key("eigenvalues")], mid.arrays[key("ritz_residuals")] = np.linspace(10.0, 1.0, 9), np.zeros(9)
    sweep = {16: mid, 17: top}
    rows = claims.depth_rows(sweep, "new")
    assert [(r["layer"], r["pinned"], r["modes"]) for r in rows] == [(16, 8, 9), (17, 1, 8)]
    assert len(claims.pos_wins_pinned(mid, 16)["wins"]) == 8
    text = claims.depth_pinned_reading(sweep, rows)
    assert "pins down 1 (layer 17) to 8 (layer 16) of the 9 modes" in text
    n17 = len(claims.pos_wins_pinned(top, 17)["wins"])
    assert n17 < 8 and f"the same classes at layer 16 and differ at layer 17 ({n17} of 8 won, against 8 with every mode)." in text
    assert claims.depth_pinned_reading({16: mid}, rows[:1]).endswith("the same classes at every stored layer.")
    assert "different classes at every stored layer: layer 17" in claims.depth_pinned_reading({17: top}, rows[1:])
    first = claims.depth_rows({16: _first_data_set_result(16, 0.5, 0.4)}, "first")
    assert first[0]["pinned"] is None and claims.depth_pinned_reading({}, first) == ""


def test_purity_is_read_on_the_test_side_of_every_split():
    res = _result([0.8] * 8, [])
    tp = claims.test_side_purity(res, 6)
    assert len(tp["entk_macro"]) == STORED_SPLITS and np.allclose(tp["entk_macro"], 1.0)
    assert np.allclose(tp["chance_macro"], 1 / 8)
    assert all(r["modes"] == [i] * STORED_SPLITS for i, r in enumerate(tp["rows"]))
    # top_contexts lists only the first split's test side
    _, top = claims.top_contexts(res, CLASSES[0], 6)
    assert np.asarray(res["split_test"])[0, top].all()


@pytest.mark.parametrize("macro, verdict", [
    ([0.85] * 16 + [0.7] * 4, "reproduces"),     # >= 0.8 in 80 % of the splits
    ([0.85] * 15 + [0.7] * 5, "partly"),         # >= 0.8 in 75 % only, >= 0.5 in all
    ([0.6] * 16 + [0.4] * 4, "partly"),
    ([0.6] * 15 + [0.4] * 5, "does not"),        # >= 0.5 in 75 % only
])
def test_purity_verdict_holds_in_most_splits(monkeypatch, macro, verdict):
    res = _result([0.8] * 8, [])
    fake = {"n": 6, "rows": [], "entk_macro": np.array(macro), "pca_macro": np.full(20, 0.5),
            "chance_macro": np.full(20, 0.125)}
    monkeypatch.setattr(claims, "test_side_purity", lambda *a, **k: fake)
    row = {r["claim"]: r for r in claims.scorecard({"gemma_probe": res})}["B.gemma.top_contexts"]
    assert row["verdict"] == verdict, row
    assert f"split range {min(macro):.2f}–{max(macro):.2f}" in row["ours"] and "PCA 0.50" in row["ours"]


def test_stored_split_evaluation_is_rebuilt_from_the_stored_arrays():
    """The readings that re-choose modes on the stored splits (pinned modes only, purity on the test
    side) rebuild the splits and tasks as the experiment did: with every mode allowed they give the
    stored per-split differences exactly."""
    from ntkbook import experiments
    from ntkbook.gemma import probe

    res = experiments.load_stored("gemma_probe", "paper")
    layer = claims.main_layer(res)
    stored_rows = gemma_probe.point(res, layer)["pos_splits"]
    key = lambda name: gemma_probe.point_key(layer, "down_proj", name)  # noqa: E731
    tasks = {c: y for c, y in claims._pos_tasks(res).items() if c in {r["task"] for r in stored_rows}}
    rows = probe.split_robustness({"entk": np.asarray(res[key("entk_scores")]), "pca": np.asarray(res[key("pca_scores")])},
                                  tasks, claims._splits(res))
    for mine, theirs in zip(rows, stored_rows):
        assert mine["task"] == theirs["task"]
        np.testing.assert_allclose(mine["ap_diff"], theirs["ap_diff"], atol=1e-12)


def test_the_lanczos_row_shows_gemmas_pinned_vectors_without_judging_them():
    from ntkbook.claims import lanczos

    res = _result([0.8] * 8, [])
    row = lanczos.gemma_row(res)
    assert row["claim"] == "B.lanczos" and row["verdict"] == "not tested"
    assert "7 of 8 Ritz vectors pinned down" in row["ours"]   # the last one's gap below is unknown
    judged = {"claim": "B.lanczos", "ours": "x", "verdict": "reproduces", "note": lanczos.RULE, "from": ("a",)}
    # a line shown but not judged leaves the others' verdict alone
    import unittest.mock as mock

    with mock.patch.object(lanczos, "ghosts_rows", lambda r: [judged]):
        (merged,) = lanczos.scorecard({"lanczos_ghosts": object(), "gemma_probe": res})
    assert merged["verdict"] == "reproduces" and "7 of 8" in merged["ours"]


@pytest.fixture(scope="module")
def stored_beside():
    """The stored paper-scale result beside the author's (one evaluation per split and task)."""
    from ntkbook import experiments

    res = experiments.load_stored("gemma_probe", "paper")
    return res, claims.beside_author(res)


def test_beside_author_rows_are_the_stored_readings_and_the_macro_their_mean(stored_beside):
    res, bes = stored_beside
    assert bes["layer"] == claims.main_layer(res) and bes["n_splits"] == res.config["n_splits"]
    for family, author in claims.AUTHOR_LAYER16.items():
        fam = bes[family]
        assert [r["task"] for r in fam["rows"]] == list(author)
        table = {r["task"]: r for r in claims.split_table(gemma_probe.point(res, bes["layer"]), family)}
        both = [r for r in fam["rows"] if r["ours"] is not None]
        assert [r["task"] for r in both] == fam["macro"]["tasks"] and fam["missing"] == [
            r["task"] for r in fam["rows"] if r["ours"] is None]
        for r in fam["rows"]:
            assert r["author"] == dict(zip(claims.AUTHOR_COLUMNS, author[r["task"]]))
            if r["ours"] is None:
                assert r["task"] not in table
                continue
            # the re-evaluation on the stored splits gives the stored means and differences
            assert r["ours"]["entk_ap"]["mean"] == pytest.approx(table[r["task"]]["entk_ap"], abs=1e-12)
            assert r["ours"]["pca_ap"]["mean"] == pytest.approx(table[r["task"]]["pca_ap"], abs=1e-12)
            np.testing.assert_allclose(np.subtract(r["ours"]["entk_ap"]["splits"], r["ours"]["pca_ap"]["splits"]),
                                       table[r["task"]]["ap_diffs"], atol=1e-12)
            for c in claims.AUTHOR_COLUMNS:
                o = r["ours"][c]
                assert len(o["splits"]) == bes["n_splits"] and o["lo"] <= o["median"] <= o["hi"]
                assert o["lo"] == min(o["splits"]) and o["hi"] == max(o["splits"])
        macro = fam["macro"]
        for c in claims.AUTHOR_COLUMNS:
            # ours: the per-split mean over the shared tasks, so its mean is the mean of the rows' means
            np.testing.assert_allclose(macro["ours"][c]["splits"],
                                       np.mean([r["ours"][c]["splits"] for r in both], axis=0))
            assert macro["ours"][c]["mean"] == pytest.approx(np.mean([r["ours"][c]["mean"] for r in both]))
            # his: the mean of his per-task numbers over the same tasks
            i = claims.AUTHOR_COLUMNS.index(c)
            assert macro["author"][c] == pytest.approx(np.mean([author[t][i] for t in macro["tasks"]]))
    # every part of speech is a task here; Mood=Ind cannot be one with spaCy's labels (Table 7.4)
    assert bes["pos"]["missing"] == [] and "Mood=Ind" in bes["morph"]["missing"]
    assert bes["pos"]["macro"]["author"]["entk_ap"] == pytest.approx(
        np.mean([v[0] for v in claims.AUTHOR_LAYER16["pos"].values()]))


def _moved(bes, family, column, value):
    """``bes`` with the author's macro ``column`` of ``family`` set to ``value``."""
    import copy

    out = copy.deepcopy(bes)
    out[family]["macro"]["author"][column] = value
    return out


def test_the_gap_sentence_says_where_the_authors_macro_lies(stored_beside):
    _, bes = stored_beside
    o = bes["pos"]["macro"]["ours"]["entk_ap"]
    assert claims.author_place(o["hi"] + 0.01, o) == "above" and claims.author_place(o["lo"] - 0.01, o) == "below"
    assert claims.author_place(o["mean"], o) == "inside"
    texts = {}
    for where, value in (("above", o["hi"] + 0.01), ("inside", o["mean"]), ("below", o["lo"] - 0.01)):
        text = claims.author_gap_reading(_moved(bes, "pos", "entk_ap", value), "pos")
        assert text.startswith(f"Over the 8 parts of speech both report, the author's macro AP is {value:.3f} "
                               f"for the eNTK, {where} the range of ours ({o['lo']:.3f}–{o['hi']:.3f};"), text
        texts[where] = text
    assert len(set(texts.values())) == 3
    # with all four of his values inside our ranges the sentence says so; one outside is named
    inside = bes
    for c in claims.AUTHOR_COLUMNS:
        inside = _moved(inside, "pos", c, bes["pos"]["macro"]["ours"][c]["mean"])
    assert "All four of his macro values lie within the spread of ours" in claims.author_gap_reading(inside, "pos")
    one = _moved(inside, "pos", "pca_auroc", bes["pos"]["macro"]["ours"]["pca_auroc"]["hi"] + 0.01)
    assert "Outside our ranges: PCA AUROC: the gap is PCA's" in claims.author_gap_reading(one, "pos")
    # the scorecard line carries the same places
    line = claims.author_macro_line(_moved(bes, "pos", "entk_ap", o["lo"] - 0.01), "pos")
    assert f"eNTK AP {o['lo'] - 0.01:.3f} against {o['mean']:.3f} ({o['lo']:.3f}–{o['hi']:.3f}, below)" in line
    assert ";" not in line


def test_the_scorecard_rows_show_the_authors_macro_beside_ours(stored_beside):
    res, bes = stored_beside
    rows = {r["claim"]: r for r in claims.scorecard({"gemma_probe": res})}
    for claim, family in (("B.gemma.pos_vs_pca", "pos"), ("B.gemma.morph_vs_pca", "morph")):
        assert claims.author_macro_line(bes, family) in rows[claim]["ours"]
    # a synthetic result whose features the author never reported: no line beside his
    synthetic = {r["claim"]: r for r in claims.scorecard({"gemma_probe": _result([0.8] * 8, [0.8])})}
    assert "the author's macro" in synthetic["B.gemma.pos_vs_pca"]["ours"]
    assert "the author's macro" not in synthetic["B.gemma.morph_vs_pca"]["ours"]


def test_beside_author_without_shared_tasks_compares_nothing():
    bes = claims.beside_author(_result([0.8] * 8, [0.8]))
    assert bes["morph"]["macro"] == {"task": "macro", "tasks": [], "ours": None, "author": None}
    assert bes["morph"]["missing"] == list(claims.AUTHOR_LAYER16["morph"])
    assert claims.author_gap_reading(bes, "morph") == ("None of the morphological features the author reports is "
                                                       "a task here, so there is no macro to compare.")
    assert claims.author_macro_line(bes, "morph") == "" and claims.author_first_data_reading(bes, None) == ""


def test_the_first_data_set_is_placed_against_our_range_and_the_authors(stored_beside):
    _, bes = stored_beside
    (first,) = [r for r in claims.depth_rows(claims.first_sweep(128), "first") if r["param_set"] == "down_proj"]
    o, a = bes["pos"]["macro"]["ours"]["entk_ap"], bes["pos"]["macro"]["author"]["entk_ap"]
    text = claims.author_first_data_reading(bes, first)
    assert (f"{first['entk_ap']:.3f} for the eNTK ({claims.author_place(first['entk_ap'], o)} our range, "
            f"{first['entk_ap'] - a:+.3f} from the author's {a:.3f})") in text
    moved = dict(first, entk_ap=o["lo"] - 0.01)
    assert "for the eNTK (below our range" in claims.author_first_data_reading(bes, moved)


# ---- issue 36: the budget curve, morphology within its class, the poles of a mode -----------------

def test_the_budget_curve_is_the_probes_choice_among_the_first_k():
    from ntkbook.gemma import probe

    res = _result([0.8] * 8, [])
    curve = claims.budget_curve(res)
    K = len(CLASSES)
    assert curve["k"] == list(range(1, K + 1)) and curve["entk"]["ap"].shape == (K, STORED_SPLITS)
    entk = res[gemma_probe.point_key(16, "down_proj", "entk_scores")]
    pca = res[gemma_probe.point_key(16, "down_proj", "pca_scores")]
    labels = np.asarray(res["labels"])
    for k in (1, 3, K):
        for s, (train, test) in enumerate(claims._splits(res)[:2]):
            for m, sc in (("entk", entk), ("pca", pca)):
                rows = [probe.evaluate_task(sc[:k], labels == c, train, test) for c in range(K)]
                assert curve[m]["ap"][k - 1, s] == pytest.approx(np.mean([r["ap"] for r in rows]), abs=1e-15)
                assert curve[m]["auroc"][k - 1, s] == pytest.approx(np.mean([r["auroc"] for r in rows]), abs=1e-15)
    # mode c detects class c: with k modes, k classes are found perfectly
    assert curve["entk"]["ap"][0].mean() < curve["entk"]["ap"][-1].mean() == pytest.approx(1.0)


def test_the_eNTK_leads_from_the_k_after_its_last_deficit():
    assert claims.lead_from([-0.1, -0.1, 0.2, 0.1]) == 3
    assert claims.lead_from([0.1, -0.1, 0.2]) == 3
    assert claims.lead_from([0.1, 0.2]) == 1
    assert claims.lead_from([0.1, 0.0]) is None
    res = _result([0.8] * 8, [])
    curve = claims.budget_curve(res)
    leads = claims.budget_leads(curve)
    d = curve["entk"]["ap"].mean(axis=1) - curve["pca"]["ap"].mean(axis=1)
    k = leads["ap"]["mean"]
    assert k is not None and (d[k - 1:] > 0).all() and (k == 1 or d[k - 2] <= 0)
    assert f"by macro AP the eNTK leads from k = {k} on" in claims.budget_reading(curve)


def _morph_result():
    """A synthetic result whose VERB contexts carry Feat=A on half of them (found by eNTK mode 0 within
    VERB), whose PROPN contexts all carry Feat=B, and whose feature Feat=C lies in NOUN and PRON."""
    res = _result([0.8] * 8, [1.0, 1.0, 1.0], n_per_class=24)
    labels = np.asarray(res["labels"])
    verb, noun, pron, propn = (CLASSES.index(c) for c in ("VERB", "NOUN", "PRON", "PROPN"))
    morph = [""] * len(labels)
    idx = {c: np.flatnonzero(labels == c) for c in (verb, noun, pron, propn)}
    test0 = np.asarray(res["split_test"])[0]
    for j, i in enumerate(idx[verb]):
        morph[i] = "Feat=A" if j % 2 == 0 else ""
    for i in idx[propn]:
        morph[i] = "Feat=B"
    for j, i in enumerate(np.concatenate([idx[noun], idx[pron]])):
        morph[i] = "Feat=C" if j % 2 == 0 else ""
    key = gemma_probe.point_key(16, "down_proj", "entk_scores")
    entk = np.asarray(res[key], float).copy()
    entk[0] += np.array(["Feat=A" in m for m in morph], float) * 2.0
    res.arrays[key] = entk
    res.scalars["morph"] = morph
    p = res["points"][0]
    p["morph_splits"] = [_split_row(f, 1.0) for f in ("Feat=A", "Feat=B", "Feat=C")]
    assert test0.any()
    return res


def test_morphology_is_tested_within_each_class_that_carries_it():
    cond = claims.morph_conditioned(_morph_result())
    got = {(r["feature"], r["class"]): r for r in cond["rows"]}
    assert set(got) == {("Feat=A", "VERB"), ("Feat=C", "NOUN"), ("Feat=C", "PRON")}
    assert got[("Feat=A", "VERB")]["positives"] == 12 and got[("Feat=A", "VERB")]["negatives"] == 12
    assert got[("Feat=A", "VERB")]["win"] and got[("Feat=A", "VERB")]["entk_ap_mean"] == pytest.approx(1.0)
    assert [(s["feature"], s["class"]) for s in cond["skipped"]] == [("Feat=B", "PROPN")]
    assert "24 positive and 0 negative" in cond["skipped"][0]["reason"]
    text = claims.morph_conditioned_reading(cond, [{"task": "Feat=A", "win": True}, {"task": "Feat=C", "win": True}])
    assert text.startswith("Within the part of speech that carries it, the eNTK wins")
    assert "Feat=A within VERB" in text


def test_the_poles_of_a_mode_are_its_highest_and_lowest_contexts():
    usage = claims.mode_usage(_result([0.8] * 8, []))
    # class c chooses mode c with + on every split
    assert usage["picks"]["VERB"] == {(CLASSES.index("VERB"), 1): STORED_SPLITS}
    assert "VERB (+, 4 splits)" in claims.mode_users(usage, CLASSES.index("VERB"))
    res = _result([0.8] * 8, [])
    N = res["N"]
    res.scalars.update(context_text=[f"story text number {i}" for i in range(N)], model_word=["w"] * N)
    key = gemma_probe.point_key(16, "down_proj", "entk_scores")
    sc = np.asarray(res[key], float).copy()
    sc[2] = np.arange(N, dtype=float)
    res.arrays[key] = sc
    poles = claims.mode_poles(res, 2, n=3, width=10)
    assert [r["index"] for r in poles["top"]] == [N - 1, N - 2, N - 3]
    assert [r["index"] for r in poles["bottom"]] == [0, 1, 2]
    assert poles["top"][0]["text"] == "…" + f"story text number {N - 1}"[-10:]


def test_the_controls_reading_places_each_method_between_floor_and_ceiling():
    def spread(m, lo=None):
        return {"mean": m, "lo": m - 0.01 if lo is None else lo, "hi": m + 0.01}
    beside = {"pos": {"macro": {"ours": {"entk_ap": spread(0.45), "pca_ap": spread(0.15), "entk_auroc": spread(0.8),
                                         "pca_auroc": spread(0.7)}, "tasks": ["A", "B"]}}}
    ctl = {"pos": {"tasks": ["A", "B"], "macro": {"random": {"ap": spread(0.25), "auroc": spread(0.6)},
                                                  "probe": {"ap": spread(0.85), "auroc": spread(1.0)}}}}
    text = claims.controls_reading(beside, ctl, "pos")
    assert "the eNTK (0.450) lies 33% of the way" in text and "PCA (0.150) below the random directions" in text
    assert "the eNTK (0.800) lies 50% of the way" in text and "PCA (0.700) 25% of the way" in text
    assert "By AP the eNTK is the closer" in text and "neither method's mean comes up to the probe's lowest split" in text


def _spl(values):
    v = np.asarray(values, float)
    return {"mean": float(v.mean()), "lo": float(v.min()), "hi": float(v.max()), "splits": v.tolist()}


def test_the_kernel_inputs_verdict_follows_the_paired_splits():
    """PCA of the eNTK's own inputs beside the eNTK: the verdict reads the per-split paired lead,
    and turns when the inputs' components are the better ones."""
    e = {"A": [0.6] * 10, "B": [0.5] * 10}
    beside = {"pos": {"rows": [{"task": t, "ours": {"entk_ap": _spl(v), "entk_auroc": _spl(np.add(v, 0.3))}}
                               for t, v in e.items()],
                      "macro": {"tasks": ["A", "B"], "ours": {"entk_ap": _spl([0.55] * 10),
                                                              "entk_auroc": _spl([0.85] * 10)}}}}

    class KI(dict):
        config: dict = {}

    def ki(a, b):
        rows = [{"task": t, "ap": v, "auroc": list(np.add(v, 0.3))} for t, v in (("A", a), ("B", b))]
        return KI(concat={"pos": rows, "morph": []})

    lower = claims.kernel_inputs_beside(ki([0.4] * 10, [0.5] * 9 + [0.6]), {**beside, "morph": beside["pos"]})
    assert lower["pos"]["macro"]["ap"]["mean"] == pytest.approx(0.455)
    text = claims.kernel_inputs_reading(beside, lower, "pos")
    assert "ahead on 10 of 10 splits" in text and "ahead on A and behind on no task" in text
    assert "So the eNTK adds to its inputs what the selection uses" in text and "close to chance" not in text
    higher = claims.kernel_inputs_beside(ki([0.7] * 10, [0.6] * 10), {**beside, "morph": beside["pos"]})
    text = claims.kernel_inputs_reading(beside, higher, "pos")
    assert "ahead on 0 of 10 splits" in text and "behind on A, B" in text
    assert "So the eNTK adds nothing the selection can use" in text


def _reinit_beside():
    """A trained eNTK's beside_author-shaped rows over 10 splits: task A at AP 0.6, B at 0.5 (AUROC + 0.3)."""
    e = {"A": [0.6] * 10, "B": [0.5] * 10}
    fam = {"rows": [{"task": t, "ours": {"entk_ap": _spl(v), "entk_auroc": _spl(np.add(v, 0.3))}}
                    for t, v in e.items()],
           "macro": {"tasks": ["A", "B"], "ours": {"entk_ap": _spl([0.55] * 10), "entk_auroc": _spl([0.85] * 10)}}}
    return {"pos": fam, "morph": {"rows": [], "macro": {"tasks": [], "ours": None}}}


def _reinit(a, b, pca=(0.3, 0.3), split_test=None) -> Result:
    """A gemma_reinit result whose random-weight eNTK has test AP a (task A) and b (task B) per split."""
    def rows(x, y):
        return [{"task": t, "support": 10, "ap": list(v), "auroc": list(np.add(v, 0.3)), "mode": [0] * len(v)}
                for t, v in (("A", x), ("B", y))]
    scalars = {"entk": {"pos": rows(a, b), "morph": []},
               "pca": {"pos": rows([pca[0]] * 10, [pca[1]] * 10), "morph": []}, "labels": [0, 1, 0, 1]}
    arrays = {"split_test": np.array([[True, False, True, False]]) if split_test is None else split_test}
    return Result("gemma_reinit", {"layer": 16}, arrays=arrays, scalars=scalars)


def test_the_reinit_verdict_follows_the_paired_splits():
    """The eNTK of the re-initialised model beside the trained one: the macro over the trained
    entry's macro tasks, the verdict from the per-split paired lead, turning when the random kernel
    is the better one, and undecided when the lead flips between splits."""
    beside = _reinit_beside()
    low = claims.reinit_beside(_reinit([0.4] * 10, [0.5] * 9 + [0.6]), beside)
    assert low["pos"]["tasks"] == ["A", "B"] and low["morph"]["macro"]["entk"]["ap"] is None
    assert low["pos"]["macro"]["entk"]["ap"]["mean"] == pytest.approx(0.455)
    assert low["pos"]["macro"]["pca"]["ap"]["mean"] == pytest.approx(0.3)
    assert low["pos"]["rows"]["B"]["entk"]["ap"]["hi"] == pytest.approx(0.6)
    text = claims.reinit_reading(beside, low, "pos")
    assert "ahead on 10 of 10 splits" in text and "ahead on A and behind on no task" in text
    assert "its PCA 0.300" in text
    assert "So what the trained eNTK's modes detect comes from training" in text and "close to chance" not in text
    high = claims.reinit_beside(_reinit([0.7] * 10, [0.6] * 10), beside)
    text = claims.reinit_reading(beside, high, "pos")
    assert "ahead on 0 of 10 splits" in text and "behind on A, B" in text
    assert "So the trained eNTK adds nothing the selection can use over any kernel of this shape" in text
    even = claims.reinit_beside(_reinit([0.5, 0.7] * 5, [0.5, 0.6] * 5), beside)
    text = claims.reinit_reading(beside, even, "pos")
    assert "cannot be told apart consistently" in text
    assert claims.reinit_reading(beside, low, "morph") == ""


def test_the_reinit_table_rows_are_per_task_then_the_macro():
    beside = _reinit_beside()
    rb = claims.reinit_beside(_reinit([0.4] * 10, [0.5] * 9 + [0.6]), beside)
    rows = claims.reinit_rows(beside, rb, "ap")
    assert [r[0] for r in rows] == ["A", "B", "**macro, 2 parts of speech**"]
    assert rows[0] == ["A", "0.600 (0.600–0.600)", "0.400 (0.400–0.400)", "0.300 (0.300–0.300)"]
    assert rows[1][2] == "0.510 (0.500–0.600)" and rows[2][1] == "0.550 (0.550–0.550)"
    assert claims.reinit_rows(beside, rb, "auroc")[0][1:] == ["0.900 (0.900–0.900)", "0.700 (0.700–0.700)",
                                                              "0.600 (0.600–0.600)"]


def test_the_reinit_spectrum_says_flat_and_counts_pinned_modes():
    def entry(lam, res):
        key = lambda n: gemma_probe.point_key(16, "down_proj", n)  # noqa: E731
        return Result("gemma_reinit", {"layer": 16}, arrays={key("eigenvalues"): np.asarray(lam, float),
                                                              key("ritz_residuals"): np.asarray(res, float)},
                      scalars={"points": [{"layer": 16, "param_set": "down_proj"}]})

    flat = entry([10.0, 9.9, 9.8, 5.0], [0.5, 0.5, 0.001, 0.2])
    steep = entry([100.0, 10.0, 5.0, 1.0], [1e-6, 1e-6, 1e-6, 0.01])
    spec = claims.reinit_spectrum(flat, steep)
    assert spec["reinit"]["top_gap"] == pytest.approx(10 / 9.9) and spec["reinit"]["spread"] == pytest.approx(2.0)
    assert spec["reinit"]["worst_residual"] == pytest.approx(0.5 / 9.9) and spec["reinit"]["k"] == 4
    # pinned: residual / distance to the nearest other Ritz value below 0.1; the last mode never
    assert spec["reinit"]["pinned"] == 1 and spec["trained"]["pinned"] == 3
    text = claims.reinit_spectrum_reading(spec)
    assert "λ₁/λ₂ = 1.01 and λ₁/λ₄ = 2.00 (trained: 10.0 and 100)" in text
    assert "1 of its 4 Ritz vectors are pinned down (trained: 3)" in text and "mixtures" in text


def test_reinit_main_is_none_without_a_stored_entry(monkeypatch):
    res = _result([0.8] * 8, [], layer=16)
    monkeypatch.setattr(claims, "stored", lambda name, scale="paper", **kw: None)
    assert claims.reinit_main(res, "paper") is None
    mine = _reinit([0.4] * 10, [0.5] * 10, split_test=np.asarray(res["split_test"]))
    mine.scalars["labels"] = list(res["labels"])
    asked = {}

    def fake_stored(name, scale="paper", **kw):
        asked.update(kw, name=name)
        return mine
    monkeypatch.setattr(claims, "stored", fake_stored)
    assert claims.reinit_main(res, "paper") is mine
    assert asked["name"] == "gemma_reinit" and asked["layer"] == 16
    assert asked["n_per_class"] == res.config["n_per_class"] and asked["n_splits"] == res.config["n_splits"]
    other = _reinit([0.4] * 10, [0.5] * 10, split_test=~np.asarray(res["split_test"]))
    monkeypatch.setattr(claims, "stored", lambda name, scale="paper", **kw: other)
    assert claims.reinit_main(res, "paper") is None  # other splits: not the same comparison


def test_the_reinit_check_reads_the_splits_labels_and_layer():
    res = _result([0.8] * 8, [], layer=16)
    mine = _reinit([0.4] * 10, [0.5] * 10, split_test=np.asarray(res["split_test"]))
    mine.scalars["labels"] = list(res["labels"])
    assert claims.reinit_check(mine, res) == {"same_splits": True, "same_labels": True, "same_layer": True}
    other = _reinit([0.4] * 10, [0.5] * 10, split_test=~np.asarray(res["split_test"]))
    check = claims.reinit_check(other, _result([0.8] * 8, [], layer=14))
    assert check["same_splits"] is False and check["same_labels"] is False and check["same_layer"] is False


def _controls(layer: int, rand_ap: float, spread: float = 0.02, draws: int = 3, splits: int = 4) -> Result:
    """A gemma_controls result whose random directions' macro AP per draw is rand_ap + (i - 1) spread."""
    rows = [{"task": c, "ap": [[rand_ap + (i - 1) * spread] * splits for i in range(draws)],
             "auroc": [[0.5] * splits for _ in range(draws)]} for c in CLASSES]
    probe = [{"task": c, "ap": [0.9] * splits, "auroc": [0.95] * splits} for c in CLASSES]
    return Result("gemma_controls", {"random_draws": draws, "layer": layer},
                  scalars={"random": {"pos": rows, "morph": []}, "probe": {"pos": probe, "morph": []}, "N": 96})


def test_the_depth_sweep_is_read_against_its_floor():
    floor = claims.depth_floor({0: _controls(0, 0.30), 16: _controls(16, 0.30)})
    assert floor[0]["random"]["ap"] == pytest.approx({"mean": 0.30, "draw_lo": 0.28, "draw_hi": 0.32})
    assert floor[16]["probe"]["ap"]["mean"] == pytest.approx(0.9) and floor[0]["draws"] == 3
    # the eNTK's macro AP is 0.5 + mean(diff) of _split_row: share 0.2 gives 0.5 - 0.01 = 0.49
    rows = claims.depth_rows({0: _result([0.8] * 8, [], layer=0), 16: _result([0.8] * 8, [], layer=16)}, "new")
    assert rows[0]["entk_auroc"] == pytest.approx(0.5 + 0.5 * (0.8 * 0.05 - 0.2 * 0.025))
    text = claims.depth_floor_reading(rows, floor)
    assert "At every such layer the eNTK's macro AP is above the best draw" in text
    high = claims.depth_floor({0: _controls(0, 0.60), 16: _controls(16, 0.30)})
    text = claims.depth_floor_reading(rows, high)
    assert "At layer 0 the eNTK's macro AP is no higher than the best of those draws" in text
    assert "From layer 16 up it stays above its floor." in text and "chance is 0.50" in text
    assert "PCA is at or below its floor at layer 0." in text
    assert claims.depth_floor_reading(rows, {}) == "No layer has both the sweep and its floor stored yet."
    from ntkbook.plotting import gemma as plots

    fig = plots.plot_depth(rows, floor=high)
    labels = [h.get_label() for h in fig.legends[0].legend_handles]
    assert labels[-2:] == ["random directions", "supervised probe"]
    assert len(fig.axes[0].collections) >= 1   # the draws' range, shaded


# ---- error bars over the data: the bootstrap over stories ----------------------------------------------

def _story_result(signal: float | None = 3.0, same: bool = False, per_story: int = 3, n_per_class: int = 24) -> Result:
    """A synthetic result whose contexts come in stories of ``per_story`` (mixed classes); eNTK mode c is
    the indicator of class c times ``signal`` plus unit noise (pure noise when ``signal`` is None),
    PCA is unit noise (the eNTK's scores themselves when ``same``); one morphological feature, Feat=R,
    has its positives in two stories only (so a resample often lacks them on a side)."""
    res = _result([0.8] * 8, [1.0], n_per_class=n_per_class)
    labels = np.asarray(res["labels"])
    N = len(labels)
    rng = np.random.default_rng(1)
    story = rng.permutation(N) // per_story  # stories of per_story contexts, classes mixed
    k = len(CLASSES)
    entk = rng.normal(size=(k, N))
    if signal is not None:
        entk += signal * (labels[None, :] == np.arange(k)[:, None])
    pca = entk.copy() if same else rng.normal(size=(k, N))
    for name, s in (("entk_scores", entk), ("pca_scores", pca)):
        res.arrays[gemma_probe.point_key(16, "down_proj", name)] = s
    rare = np.isin(story, [0, 1])
    res.scalars.update(story=[f"s{i}" for i in story], stories=int(story.max() + 1),
                       morph=["Feat=R" if r else "" for r in rare])
    res["points"][0]["morph_splits"] = [_split_row("Feat=R", 1.0)]
    return res


def test_the_bootstrap_over_stories_finds_a_real_lead_and_reads_it():
    boot = claims.story_bootstrap(_story_result(3.0), "pos", n_boot=30)
    ap = boot["macro"]["ap"]
    assert boot["n_boot"] == 30 and boot["macro_tasks"] == list(CLASSES) and not any(boot["skipped"].values())
    assert ap["diff"].lo > 0.3 and ap["share_ahead"] == 1.0 and boot["macro"]["auroc"]["diff"].lo > 0.2
    assert ap["diff"].mean == pytest.approx(np.mean(ap["entk"].mean - ap["pca"].mean))
    assert all(boot["per_task"][t]["ap"]["diff"].lo > 0 for t in CLASSES)
    assert boot["draws"]["entk_ap"].shape == (30, len(CLASSES))
    text = claims.story_bootstrap_reading(boot)
    assert "held fixed" in text and "the eNTK leads PCA by macro AP: the interval lies above 0" in text
    assert "above 0 for 8 of 8" in text and "95% interval" in text
    # the split-based wins stored with the entry (all 8 by construction) are quoted beside
    assert "the split-based robust wins (ahead in at least 80% of the 20 stored splits) are 8" in text
    # PCA with the signal and the eNTK without: it trails
    res = _story_result(3.0)
    key = lambda name: gemma_probe.point_key(16, "down_proj", name)  # noqa: E731
    res.arrays[key("entk_scores")], res.arrays[key("pca_scores")] = res.arrays[key("pca_scores")], res.arrays[key("entk_scores")]
    behind = claims.story_bootstrap(res, "pos", n_boot=20)
    assert behind["macro"]["ap"]["diff"].hi < 0
    assert "the eNTK trails PCA by macro AP: the interval lies below 0" in claims.story_bootstrap_reading(behind)


def test_identical_score_sets_differ_by_exactly_zero_in_every_resample():
    boot = claims.story_bootstrap(_story_result(3.0, same=True), "pos", n_boot=20)
    d = boot["draws"]
    assert np.array_equal(d["entk_ap"], d["pca_ap"]) and np.array_equal(d["entk_auroc"], d["pca_auroc"])
    for m in ("ap", "auroc"):
        diff = boot["macro"][m]["diff"]
        assert (diff.mean, diff.lo, diff.hi) == (0.0, 0.0, 0.0) and boot["macro"][m]["share_ahead"] == 0.0
    text = claims.story_bootstrap_reading(boot)
    assert "cannot be told apart by macro AP: the interval includes 0" in text
    assert "the interval of the AP difference lies above 0 for none of the 8 and below 0 for none" in text
    assert "Won over the splits but not over the data: " + ", ".join(CLASSES) + "." in text


def test_the_bootstrap_is_deterministic_in_its_seed():
    res = _story_result(0.5)
    a, b = (claims.story_bootstrap(res, "pos", n_boot=10, seed=3) for _ in range(2))
    c = claims.story_bootstrap(res, "pos", n_boot=10, seed=4)
    assert all(np.array_equal(a["draws"][k], b["draws"][k], equal_nan=True) for k in a["draws"])
    assert a["macro"]["ap"]["diff"] == b["macro"]["ap"]["diff"]
    assert not np.array_equal(a["draws"]["entk_ap"], c["draws"]["entk_ap"])


def test_each_resample_draws_whole_stories_and_keeps_each_on_one_side(monkeypatch):
    from ntkbook.gemma import probe

    res = _story_result(1.0, per_story=4)
    sizes = {s: n for s, n in zip(*np.unique(np.asarray(res["story"]), return_counts=True))}
    seen = []
    original = probe.story_splits

    def recording(labels, stories, n_splits, **kw):
        out = original(labels, stories, n_splits, **kw)
        seen.append((np.asarray(stories), out))
        return out

    monkeypatch.setattr(probe, "story_splits", recording)
    claims.story_bootstrap(res, "pos", n_boot=8)
    assert len(seen) == 8
    for stories, [(train, test)] in seen:
        assert len(stories) > 0 and np.array_equal(np.sort(np.concatenate([train, test])), np.arange(len(stories)))
        names, counts = np.unique(stories, return_counts=True)
        # a drawn story brings all its contexts, once per draw; the draws number the result's stories
        assert all(c % sizes[s] == 0 for s, c in zip(names, counts))
        assert sum(c // sizes[s] for s, c in zip(names, counts)) == len(sizes)
        assert any(c > sizes[s] for s, c in zip(names, counts))  # some story drawn more than once
        # every copy of a story on one side
        assert not set(stories[train]) & set(stories[test])


def test_a_task_with_one_class_on_a_side_is_skipped_in_that_resample_only():
    boot = claims.story_bootstrap(_story_result(3.0), "morph", n_boot=40)
    skipped = boot["skipped"]["Feat=R"]
    assert 0 < skipped < 40  # the two stories holding its positives are absent, or on one side, in some resamples
    assert boot["macro_tasks"] == [] and boot["macro"]["ap"] is None
    per = boot["per_task"]["Feat=R"]["ap"]
    assert per["n"] == 40 - skipped == int(np.sum(~np.isnan(boot["draws"]["entk_ap"][:, 0])))
    assert "no morphological task could be evaluated in every resample" in claims.story_bootstrap_reading(boot)
    # beside a task evaluated everywhere, the macro is over that one, and the reading names the skipped one
    res = _story_result(3.0)
    res["points"][0]["morph_splits"].append(_split_row("Feat=S", 1.0))
    res.scalars["morph"] = [m + ("|" if m else "") + ("Feat=S" if i % 2 else "") for i, m in enumerate(res["morph"])]
    both = claims.story_bootstrap(res, "morph", n_boot=40)
    assert both["macro_tasks"] == ["Feat=S"] and both["skipped"]["Feat=R"] == skipped
    assert f"left out of the macro: Feat=R ({skipped} of 40)" in claims.story_bootstrap_reading(both)
    rows = claims.story_bootstrap_table({"synthetic": res}, n_boot=10)
    assert [(r["entry"], r["family"]) for r in rows] == [("synthetic", "pos"), ("synthetic", "morph")]
    assert rows[0]["ap"].lo > 0 and rows[0]["tasks"] == 8
    assert rows[0]["split_ap"] == claims.macro_difference(res["points"][0]["pos_splits"])  # the stored splits' reading


def test_the_bootstrap_runs_at_smoke_size_and_says_what_it_cannot_give():
    """The smoke build's size (4 contexts per class, a few stories): whatever a resample lacks is
    skipped and counted, and the readings are sentences, never an error."""
    res = _story_result(3.0, per_story=4, n_per_class=4)
    assert res["N"] == 32 and res["stories"] == 8
    rows = claims.story_bootstrap_table({"smoke": res}, n_boot=20)
    for r in rows:
        boot = r["boot"]
        assert boot["n_boot"] == 20 and set(boot["skipped"]) == set(boot["tasks"])
        assert (r["ap"] is None) == (not boot["macro_tasks"])
        text = claims.story_bootstrap_reading(boot)
        assert text.startswith("Over 20 resamples of the 8 stories (N = 32")
    res["points"][0]["morph_splits"] = []  # no task passed the filters
    assert "there is no morphological task to evaluate" in claims.story_bootstrap_reading(
        claims.story_bootstrap(res, "morph", n_boot=5))
    # two stories: every resample that draws one story twice has nothing to split, and says so
    two = _story_result(3.0, per_story=16, n_per_class=4)
    boot = claims.story_bootstrap(two, "pos", n_boot=20)
    assert 0 < boot["unsplit"] < 20 and boot["macro"]["ap"] is None
    assert (f"could be evaluated in every resample ({boot['unsplit']} of the resamples drew fewer distinct stories "
            "than a split needs)") in claims.story_bootstrap_reading(boot)
