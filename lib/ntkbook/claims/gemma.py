"""Paper B's Gemma claims, read from the stored ``gemma_probe`` results: the tables of the chapter
and the scorecard's verdict rules.

The measurement is :mod:`ntkbook.experiments.gemma_probe`: contexts in disjoint 64-token windows
(:mod:`ntkbook.experiments.gemma_pos_windows`), each part of speech and morphological feature
scored one-vs-rest by the best eNTK mode and the best principal component, chosen on one side of a
split **by story** and tested on the other, over ``n_splits`` such splits.  Per task it stores the
eNTK - PCA differences of test AP and AUROC on every split (``<family>_splits`` rows of
:func:`ntkbook.gemma.probe.split_robustness`).  Here those differences are read:

- **the verdict metric is AP.**  A class is a few percent to an eighth of the contexts, and a
  detector of it is useful where the class fills the top of its ranking, which AP weighs and AUROC
  (all positive-negative pairs alike) does not; and the paper's own claims ("8 of 8", "all but
  one") hold in the author's table (:data:`AUTHOR_LAYER16`) by AP, not by AUROC.  AUROC is shown
  beside it;
- **a task is an eNTK win** when the eNTK's test AP is above PCA's in at least :data:`WIN_SHARE`
  of the splits (:func:`robust`); one split decides little.

:func:`scorecard` judges the ``B.gemma.*`` claims of :data:`ntkbook.book.scorecard.CATALOGUE`
from the stored paper-preset result; every other function here is a pure reading of a
:class:`~ntkbook.store.Result` that the chapter shows.
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np

from ntkbook.claims.intervals import Interval
from ntkbook.experiments import gemma_probe
from ntkbook.gemma.probe import ROBUST_WIN_SHARE
from ntkbook.numbers import sci
from ntkbook.store import Result
from ntkbook.verdicts import DOES_NOT, by_threshold, ladder

__all__ = ["EXPERIMENTS", "MAIN_LAYER", "WIN_SHARE", "FAMILIES", "AUTHOR_MORPH_ADMITTED", "AUTHOR_LAYER16",
           "FIRST_SWEEP_LAYERS", "N_LAYERS", "stored", "data_set", "main_layer", "robust", "robust_wins",
           "macro_difference", "split_table", "morph_admitted_beside_author", "author_wins",
           "AUTHOR_COLUMNS", "beside_author", "author_place", "author_gap_reading", "author_macro_line",
           "author_first_data_reading",
           "archived", "first_data", "probe_sweep", "first_sweep", "depth_rows", "depth_reading", "PINNED_RATIO", "ritz_convergence",
           "pinned_modes", "pos_wins_pinned", "test_side_purity", "top_contexts", "scorecard",
           "KERNEL_INPUT_NAMES", "kernel_inputs_check", "kernel_inputs_beside", "kernel_inputs_reading",
           "REINIT_NAMES", "reinit_check", "reinit_trained", "reinit_beside", "reinit_reading", "reinit_rows",
           "reinit_spectrum", "reinit_spectrum_reading", "reinit_main",
           "controls_sweep", "depth_floor", "depth_floor_reading",
           "BOOT_LEVEL", "BOOT_N", "story_bootstrap", "story_bootstrap_reading", "story_bootstrap_table"]

#: the experiments whose stored paper-preset results :func:`scorecard` reads
EXPERIMENTS = ("gemma_probe",)
#: the author's layer (the down-projection of layer 16), where the claims are judged
MAIN_LAYER = 16
#: a task is an eNTK win only where the eNTK's test AP is above PCA's in at least this share of
#: the splits by story (the reason for 80 %: :data:`ntkbook.gemma.probe.ROBUST_WIN_SHARE`)
WIN_SHARE = ROBUST_WIN_SHARE
#: the task families: what the chapter and the scorecard call them
FAMILIES = {"pos": "parts of speech", "morph": "morphological features"}
#: a task of each family, as an adjective ("no part-of-speech task")
TASK_KIND = {"pos": "part-of-speech", "morph": "morphological"}
#: Gemma-3-270M's layers, all of which the depth sweep covers once stored
N_LAYERS = 18

#: the features the author's filter admits on the author's data (Stanza labels), as printed by his
#: notebook (``gemma_3_270m.ipynb``, jylin04/mi-ntk @ 696d01b, the cell after the filter's definition)
AUTHOR_MORPH_ADMITTED = ("Number=Sing", "Person=3", "PronType=Prs", "Mood=Ind", "VerbForm=Fin", "Tense=Past",
                         "Number=Plur", "VerbForm=Inf")

#: the author's layer-16 test numbers (one stratified 50 % split; his notebook's output tables, same
#: commit): family -> task -> (eNTK AP, PCA AP, eNTK AUROC, PCA AUROC); morphology: the admitted
#: features only.  Read to show which metric his claims rest on (:func:`author_wins`).
AUTHOR_LAYER16: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "pos": {"PUNCT": (0.352936, 0.258191, 0.789900, 0.741176),
            "PRON": (0.346307, 0.222273, 0.702916, 0.722935),
            "PROPN": (0.627905, 0.565565, 0.927909, 0.903634),
            "DET": (0.293674, 0.283822, 0.758057, 0.602190),
            "ADV": (0.569135, 0.374120, 0.803223, 0.596366),
            "CCONJ": (0.318152, 0.171329, 0.728027, 0.585868),
            "NOUN": (0.943178, 0.750528, 0.980992, 0.940499),
            "VERB": (0.735946, 0.645422, 0.924142, 0.865409)},
    "morph": {"Number=Sing": (0.722252, 0.647329, 0.805684, 0.715660),
              "Person=3": (0.620330, 0.618058, 0.813202, 0.831781),
              "PronType=Prs": (0.346307, 0.222273, 0.702916, 0.722935),
              "Mood=Ind": (0.877293, 0.807298, 0.986116, 0.977538),
              "VerbForm=Fin": (0.877293, 0.807298, 0.986116, 0.977538),
              "Tense=Past": (0.840006, 0.730394, 0.957330, 0.947491),
              "Number=Plur": (0.092431, 0.193510, 0.474481, 0.568119),
              "VerbForm=Inf": (0.987716, 0.271265, 0.999525, 0.905050)},
}

#: the layers of the first data set's sweep (``gemma_features``, N = 256, archived; its windows
#: overlap and one random split decided), the chapter's contrast with the data set in disjoint windows
FIRST_SWEEP_LAYERS = (8, 11, 14, 16, 17)


# ---- stored results ----------------------------------------------------------------------------

def stored(name: str, scale: str = "paper", **overrides) -> Result | None:
    """The stored entry of experiment ``name`` at the preset ``scale`` with ``overrides``, or None
    when it is not stored; never computes, and never waits for an entry being computed (its
    result file appears only when it is complete)."""
    from ntkbook import experiments  # noqa: PLC0415

    module = experiments.get(name)
    config = experiments.make_config(name, scale, **overrides)
    store = experiments.store_for(scale)
    if not (store.entry_dir(name, module.VERSION, config) / "result.json").exists():
        return None
    return store.load(name, module.VERSION, config)


def archived(name: str, **match) -> Result | None:
    """The archived paper-scale entry (``results/archive``, :meth:`ntkbook.store.Store.archive`) of
    retired experiment ``name`` whose config has the values ``match``, or None; never computes."""
    from ntkbook import experiments  # noqa: PLC0415

    return experiments.store_for("paper").archive().find(name, **match)


def first_data(n_per_class: int = 128) -> Result:
    """The first data set of the chapter (``gemma_pos_data``, archived: windows free to overlap),
    for the contrast with :func:`data_set`; an :class:`~ntkbook.errors.InputError` when absent."""
    from ntkbook.errors import InputError  # noqa: PLC0415

    found = archived("gemma_pos_data", n_per_class=n_per_class)
    if found is None:
        raise InputError(f"the archived gemma_pos_data entry at n_per_class={n_per_class} is not in "
                         "results/archive; restore it from git (`git checkout -- results/archive`)")
    return found


def data_set(result: Result) -> Result:
    """The ``gemma_pos_windows`` entry a ``gemma_probe`` result read its contexts from (stored by
    that run at its ``data_scale``; never computed here)."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.errors import InputError  # noqa: PLC0415

    name, scale = "gemma_pos_windows", result.config["data_scale"]
    module = experiments.get(name)
    config = experiments.config_from_dict(name, result["data_config"])
    store = experiments.store_for(scale)
    if not store.has(name, module.VERSION, config):
        raise InputError(f"the {scale}-scale data set of this gemma_probe result is not stored in {store.root}; "
                         f"run `python -m ntkbook run {name} --scale {scale}`")
    return store.load(name, module.VERSION, config)


def main_layer(result: Result) -> int:
    """The layer the claims are judged at: :data:`MAIN_LAYER` when the result has it, else its first."""
    layers = [p["layer"] for p in result["points"] if p["param_set"] == "down_proj"]
    return MAIN_LAYER if MAIN_LAYER in layers else layers[0]


# ---- the verdict rule and the per-task table -----------------------------------------------------

def robust(row: Mapping, metric: str = "ap", share: float = WIN_SHARE) -> bool:
    """Whether the eNTK is ahead of PCA on the task of ``row`` (a ``<family>_splits`` row) in test
    ``metric`` in at least ``share`` of the splits."""
    return row[f"{metric}_win_share"] >= share


def robust_wins(rows: list[Mapping], metric: str = "ap", share: float = WIN_SHARE) -> list[str]:
    """The tasks of ``rows`` that are eNTK wins by :func:`robust`."""
    return [r["task"] for r in rows if robust(r, metric, share)]


def macro_difference(rows: list[Mapping], metric: str = "ap") -> tuple[float, float, float]:
    """The eNTK - PCA difference of ``metric`` averaged over the tasks of ``rows`` (``<family>_splits``
    rows), split by split: its mean and standard deviation over the splits, and the share of splits
    where it is positive."""
    per_split = np.mean([r[f"{metric}_diff"] for r in rows], axis=0)  # (n_splits,)
    std = float(per_split.std(ddof=1)) if len(per_split) > 1 else 0.0
    return float(per_split.mean()), std, float(np.mean(per_split > 0))


def split_table(point: Mapping, family: str) -> list[dict]:
    """One row per task of ``family`` at a point: ``task``, ``support``, mean test AP of the eNTK
    and of PCA over the splits, ``ap_diff`` (eNTK - PCA, mean), ``ap_std`` (over splits),
    ``ap_share`` (splits with the eNTK ahead), the same for AUROC, ``chance_ap`` (the test base rate
    of the first split), ``win`` (:func:`robust` by AP), and the per-split differences
    ``ap_diffs`` and ``auroc_diffs``."""
    chance = {r["task"]: r["entk_base_rate"] for r in point.get(family, [])}
    return [{"task": r["task"], "support": r["support"], "entk_ap": r["entk_ap_mean"], "pca_ap": r["pca_ap_mean"],
             "ap_diff": r["ap_diff_mean"], "ap_std": r["ap_diff_std"], "ap_share": r["ap_win_share"],
             "auroc_diff": r["auroc_diff_mean"], "auroc_std": r["auroc_diff_std"], "auroc_share": r["auroc_win_share"],
             "chance_ap": chance.get(r["task"], float("nan")), "win": robust(r),
             "ap_diffs": r["ap_diff"], "auroc_diffs": r["auroc_diff"]}
            for r in point.get(f"{family}_splits", [])]


def morph_admitted_beside_author(result: Result) -> list[dict]:
    """The features the author's filter admits on our data (``morph_admitted``) beside those it
    admitted on his (:data:`AUTHOR_MORPH_ADMITTED`): one row per feature of either list (ours first,
    then his others), with ``ours`` and ``author`` (admitted or not) and, where our data has the
    feature, its ``support``, distinct ``words`` and the reason our filter dropped it."""
    report = {r["feature"]: r for r in result["morph_report"]}
    admitted = [r["feature"] for r in result["morph_admitted"]]
    order = admitted + [f for f in AUTHOR_MORPH_ADMITTED if f not in admitted]
    rows = []
    for f in order:
        r = report.get(f)
        rows.append({"feature": f, "ours": f in admitted, "author": f in AUTHOR_MORPH_ADMITTED,
                     "support": r["support"] if r else 0, "words": r["words"] if r else 0,
                     "reason": (r["reason"] if r else "no context has it") if f not in admitted else ""})
    return rows


def author_wins(family: str, metric: str) -> tuple[int, int]:
    """On how many tasks of ``family`` the eNTK is ahead of PCA by ``metric`` ("ap" or "auroc") in
    the author's layer-16 table (:data:`AUTHOR_LAYER16`), and of how many."""
    col = {"ap": (0, 1), "auroc": (2, 3)}[metric]
    rows = AUTHOR_LAYER16[family].values()
    return sum(r[col[0]] > r[col[1]] for r in rows), len(rows)


# ---- the depth sweep -----------------------------------------------------------------------------

def probe_sweep(n_per_class: int, scale: str = "paper", layers=gemma_probe.SWEEP_LAYERS) -> dict[int, Result]:
    """The stored ``gemma_probe`` entries of the depth sweep (:func:`gemma_probe.sweep_overrides`
    at ``n_per_class``), by layer; layers not stored yet are absent."""
    found = {L: stored("gemma_probe", scale, **gemma_probe.sweep_overrides(L, n_per_class)) for L in layers}
    return {L: r for L, r in found.items() if r is not None}


def first_sweep(n_per_class: int = 32) -> dict[int, Result]:
    """The archived entries of the first data set's sweep (``gemma_features`` at N = 8 ``n_per_class``,
    :data:`FIRST_SWEEP_LAYERS`; :func:`archived`), by layer; layers not archived are absent."""
    found = {L: archived("gemma_features", n_per_class=n_per_class, data_n_per_class=n_per_class, layers=(L,))
             for L in FIRST_SWEEP_LAYERS}
    return {L: r for L, r in found.items() if r is not None}


def depth_rows(sweep: Mapping[int, Result], data: str) -> list[dict]:
    """One row per (layer, parameter set) point of a sweep's results, for the parts of speech:
    ``data`` (the label of the data set, as given), ``layer``, ``param_set``, ``N``, ``splits``,
    the macro test AP of the eNTK and of PCA, ``ap_diff`` (eNTK - PCA) with ``ap_std`` and
    ``ap_share`` over splits, ``auroc_diff``, ``wins`` of ``n`` classes, ``num_params``,
    ``t_lanczos``, ``modes`` (Ritz pairs kept) and ``pinned`` (how many of them are pinned down,
    :func:`pinned_modes`).  A ``gemma_probe`` point gives means over its splits by story and robust
    wins (:func:`robust`); a ``gemma_features`` point (first data set) its one split, with ``ap_std``
    None, ``wins`` counted on that split and ``modes``/``pinned`` None (it kept no residuals)."""
    rows = []
    for L in sorted(sweep):
        res = sweep[L]
        for p in res["points"]:
            row = {"data": data, "layer": p["layer"], "param_set": p["param_set"], "N": res["N"],
                   "n": p.get("pos_n", 0), "num_params": p["num_params"], "t_lanczos": p["t_lanczos"],
                   "t_per_product": p["t_per_product"]}
            if "pos_splits" in p:
                over = p["pos_splits"]
                ap, ap_std, ap_share = macro_difference(over, "ap")
                row.update(splits=len(over[0]["ap_diff"]), entk_ap=float(np.mean([r["entk_ap_mean"] for r in over])),
                           pca_ap=float(np.mean([r["pca_ap_mean"] for r in over])), ap_diff=ap, ap_std=ap_std,
                           entk_auroc=float(np.mean([r["entk_auroc_mean"] for r in over])),
                           pca_auroc=float(np.mean([r["pca_auroc_mean"] for r in over])),
                           ap_share=ap_share, auroc_diff=macro_difference(over, "auroc")[0],
                           wins=len(robust_wins(over)))
                conv = ritz_convergence(res, p["layer"], p["param_set"])
                row.update(modes=len(conv), pinned=sum(r["pinned"] for r in conv))
            else:
                row.update(splits=1, entk_ap=p["pos_entk_ap"], pca_ap=p["pos_pca_ap"],
                           entk_auroc=p["pos_entk_auroc"], pca_auroc=p["pos_pca_auroc"],
                           ap_diff=p["pos_entk_ap"] - p["pos_pca_ap"], ap_std=None,
                           ap_share=float(p["pos_entk_ap"] > p["pos_pca_ap"]),
                           auroc_diff=p["pos_entk_auroc"] - p["pos_pca_auroc"], wins=p["pos_entk_wins_ap"],
                           modes=None, pinned=None)
            rows.append(row)
    return rows


def _plural(word: str, items) -> str:
    return word if len(items) == 1 else f"{word}s"


def _layers(layers: list[int]) -> str:
    return ", ".join(map(str, layers)) if layers else "none"


def depth_reading(rows: list[dict], name: str | None = None) -> str:
    """Where the parts of speech are best detected in depth, computed from the down-projection rows
    of one data set (:func:`depth_rows`; ``name``: what to call it, default its ``data`` label) and
    saying how many layers it rests on: the layer where the eNTK's macro AP is highest and where
    PCA's is, and the layers where the eNTK is ahead of PCA in macro AP in at least
    :data:`WIN_SHARE` of the splits (one split: ahead on it)."""
    down = sorted((r for r in rows if r["param_set"] == "down_proj"), key=lambda r: r["layer"])
    if not down:
        return "No layer of this data set is stored yet."
    k = len(down)
    best_e = max(down, key=lambda r: r["entk_ap"])
    best_p = max(down, key=lambda r: r["pca_ap"])
    splits = down[0]["splits"]
    ahead = [r["layer"] for r in down if r["ap_share"] >= (WIN_SHARE if splits > 1 else 1.0)]
    behind = [r["layer"] for r in down if r["ap_diff"] <= 0]
    where = (f"in at least {WIN_SHARE:.0%} of the {splits} splits by story" if splits > 1 else "on its one split")
    text = (f"On {name or down[0]['data']} ({k} of {N_LAYERS} layers: {_layers([r['layer'] for r in down])}; "
            f"N = {down[0]['N']}), the best eNTK mode per class reaches its highest macro AP at layer "
            f"{best_e['layer']} ({best_e['entk_ap']:.2f}), the best principal component at layer "
            f"{best_p['layer']} ({best_p['pca_ap']:.2f}). The eNTK is ahead of PCA in macro AP {where} at "
            f"{_plural('layer', ahead)} {_layers(ahead)}")
    text += f", and behind it on average at {_plural('layer', behind)} {_layers(behind)}." if behind else "."
    return text + (f" This reading rests on all {N_LAYERS} layers." if k == N_LAYERS
                   else f" This reading rests on {k} of the {N_LAYERS} layers.")


def depth_pinned_reading(sweep: Mapping[int, Result], rows: list[dict]) -> str:
    """How far the depth sweep's wins rest on converged modes: the range of pinned-down modes over
    the down-projection rows of ``sweep`` (:func:`depth_rows` of it) and, per layer, whether the
    parts-of-speech wins restricted to the pinned-down modes (:func:`pos_wins_pinned`) are the same
    classes as with all modes."""
    down = sorted((r for r in rows if r["param_set"] == "down_proj" and r["pinned"] is not None),
                  key=lambda r: r["layer"])
    if not down:
        return ""
    pinned_wins = {r["layer"]: pos_wins_pinned(sweep[r["layer"]], r["layer"])["wins"] for r in down}
    same = [r for r in down if sorted(pinned_wins[r["layer"]]) == sorted(
        robust_wins(gemma_probe.point(sweep[r["layer"]], r["layer"])["pos_splits"]))]
    other = [r for r in down if r not in same]
    lo, hi = min(down, key=lambda r: r["pinned"]), max(down, key=lambda r: r["pinned"])
    at = lambda r: f"{r['pinned']} (layer {r['layer']})"  # noqa: E731
    text = ("At every stored layer Lanczos pins down " + (f"{at(lo)} to {at(hi)}" if hi["pinned"] != lo["pinned"]
                                                           else str(lo["pinned"]))
            + f" of the {down[0]['modes']} modes (r/δ < {PINNED_RATIO}, as at the main layer); with the eNTK's choice "
            "restricted to those modes, the robust wins are ")
    if not other:
        return text + "the same classes at every stored layer."
    where = (f"the same classes at {_plural('layer', same)} {_layers([r['layer'] for r in same])} and differ at "
             if same else "different classes at every stored layer: ")
    return text + where + ", ".join(f"layer {r['layer']} ({len(pinned_wins[r['layer']])} of {r['n']} won, "
                                    f"against {r['wins']} with every mode)" for r in other) + "."


# ---- how far the Ritz vectors are eigenvectors -----------------------------------------------------

#: a Ritz vector counts as pinned down when its residual estimate is below this fraction of the gap
#: to the nearest other Ritz value (its angle to the eigenvector is then about that fraction or less)
PINNED_RATIO = 0.1


def ritz_convergence(result: Result, layer: int | None = None, param_set: str = "down_proj") -> list[dict]:
    """One row per mode of a point (``mode``: zero-based, by eigenvalue): ``eigenvalue`` θ, ``residual``
    (the Ritz residual estimate r = ‖K̃y − θy‖ that Lanczos reports), ``gap`` δ (the distance from θ
    to the nearest other Ritz value; ``None`` for the last mode, whose neighbour below was not
    computed), ``ratio`` r/δ and ``pinned`` (r/δ < :data:`PINNED_RATIO`).

    A small residual relative to the eigenvalue says the eigenvalue is accurate (to about r²/δ); the
    eigenvector is accurate only when r is small relative to the gap: by the Davis–Kahan theorem the
    angle between a Ritz vector and the eigenvector it approximates is at most about r/δ, with δ the
    distance to the rest of the spectrum, for which the other Ritz values stand in here. A mode with
    r/δ near 1 is a mixture of eigenvectors whose eigenvalues lie close together, and which mixture
    depends on the start vector."""
    layer = main_layer(result) if layer is None else layer
    lam = np.asarray(result[gemma_probe.point_key(layer, param_set, "eigenvalues")], float)
    res = np.asarray(result[gemma_probe.point_key(layer, param_set, "ritz_residuals")], float)
    rows = []
    for i, (theta, r) in enumerate(zip(lam, res)):
        if i == len(lam) - 1:
            gap = None
        else:
            gap = float(np.min(np.abs(np.delete(lam, i) - theta)))
        ratio = None if gap is None else (float("inf") if gap == 0 else float(r / gap))
        rows.append({"mode": i, "eigenvalue": float(theta), "residual": float(r), "gap": gap, "ratio": ratio,
                     "pinned": ratio is not None and ratio < PINNED_RATIO})
    return rows


def pinned_modes(result: Result, layer: int | None = None, param_set: str = "down_proj") -> list[int]:
    """The zero-based modes of :func:`ritz_convergence` that are pinned down."""
    return [r["mode"] for r in ritz_convergence(result, layer, param_set) if r["pinned"]]


_MEMO: dict = {}


def _memo(fn):
    """Remember ``fn(result, *args)`` per stored entry (its name, config, date and code hash; a
    result without a date and a code hash in its provenance is not remembered): the
    chapter, its verdict lines and the scorecard read the same result several times, and each
    reading re-chooses a direction on every split (seconds)."""
    import functools  # noqa: PLC0415
    import json  # noqa: PLC0415

    @functools.wraps(fn)
    def wrapper(result, *args):
        prov = result.provenance or {}
        if not (prov.get("date") and prov.get("code_sha256")):
            # not a stored entry (a result built in memory, e.g. by a test): nothing names it, so two
            # such results with one config would share a key; compute, remember nothing
            return fn(result, *args)
        key = (fn.__name__, result.name, json.dumps(result.config, sort_keys=True, default=str),
               prov.get("date"), prov.get("code_sha256"), args)
        if key not in _MEMO:
            _MEMO[key] = fn(result, *args)
        return _MEMO[key]
    return wrapper


def _splits(result: Result) -> list[tuple[np.ndarray, np.ndarray]]:
    """The stored splits by story as (train, test) index arrays (``split_test``: (n_splits, N) bool)."""
    test = np.asarray(result["split_test"], bool)
    return [(np.flatnonzero(~t), np.flatnonzero(t)) for t in test]


def _pos_tasks(result: Result) -> dict[str, np.ndarray]:
    """Part of speech -> (N,) bool, for the classes the stored point evaluated."""
    labels = np.asarray(result["labels"])
    return {c: labels == result["classes"].index(c) for c in result["classes"]}


@_memo
def pos_wins_pinned(result: Result, layer: int | None = None) -> dict:
    """The parts-of-speech comparison over the stored splits with the eNTK's candidates restricted to
    its pinned-down modes (:func:`pinned_modes`; PCA keeps its 25 components): ``modes`` (zero-based),
    ``rows`` (:func:`ntkbook.gemma.probe.split_robustness` rows) and ``wins`` (robust AP wins)."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = main_layer(result) if layer is None else layer
    modes = pinned_modes(result, layer)
    entk = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])
    pca = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "pca_scores")])
    evaluated = {r["task"] for r in gemma_probe.point(result, layer)["pos_splits"]}
    tasks = {c: y for c, y in _pos_tasks(result).items() if c in evaluated}
    rows = probe.split_robustness({"entk": entk[modes], "pca": pca}, tasks, _splits(result)) if modes else []
    return {"modes": modes, "rows": rows, "wins": robust_wins(rows)}


def _top_purity(scores: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, n: int) -> tuple[int, float]:
    """The direction and sign with the best training AP (as the probe chooses them), and the share of
    positives among the ``n`` test contexts with the highest score on it."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    _, i, sign = probe.best_direction(np.asarray(scores)[:, train], np.asarray(y)[train])
    top = test[np.argsort(-(sign * scores[i, test]), kind="stable")[:n]]
    return i, float(np.mean(y[top]))


@_memo
def test_side_purity(result: Result, n: int, layer: int | None = None) -> dict:
    """Purity of the top contexts on held-out stories: on every stored split, for each part of
    speech, the mode (and sign) chosen on the training side, and the share of the class among the
    ``n`` **test** contexts with the highest score on it; the same for the principal components.

    Returns ``rows`` (per class: ``class``, ``entk`` and ``pca`` (mean purity over the splits),
    ``entk_std``, ``chance`` (the class's mean share of the test side), ``modes`` (the eNTK mode
    chosen on each split, zero-based)) and the per-split macro purities ``entk_macro``, ``pca_macro``
    and ``chance_macro`` (arrays over the splits)."""
    layer = main_layer(result) if layer is None else layer
    entk = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])
    pca = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "pca_scores")])
    splits = _splits(result)
    evaluated = [r["task"] for r in gemma_probe.point(result, layer)["pos_splits"]]
    tasks = _pos_tasks(result)
    per = {c: {"entk": [], "pca": [], "chance": [], "modes": []} for c in evaluated}
    for train, test in splits:
        for c in evaluated:
            y = tasks[c]
            mode, pe = _top_purity(entk, y, train, test, n)
            _, pp = _top_purity(pca, y, train, test, n)
            per[c]["entk"].append(pe)
            per[c]["pca"].append(pp)
            per[c]["chance"].append(float(np.mean(y[test])))
            per[c]["modes"].append(mode)
    rows = [{"class": c, "entk": float(np.mean(v["entk"])),
             "entk_std": float(np.std(v["entk"], ddof=1)) if len(v["entk"]) > 1 else 0.0,
             "pca": float(np.mean(v["pca"])), "chance": float(np.mean(v["chance"])), "modes": v["modes"]}
            for c, v in per.items()]
    macro = {k: np.mean([per[c][k] for c in evaluated], axis=0) for k in ("entk", "pca", "chance")}
    return {"n": n, "rows": rows, "entk_macro": macro["entk"], "pca_macro": macro["pca"],
            "chance_macro": macro["chance"]}


# ---- top-activating contexts -----------------------------------------------------------------------

def top_contexts(result: Result, task: str, n: int, layer: int | None = None) -> tuple[dict, np.ndarray]:
    """The first split's row of part of speech ``task`` at ``layer`` (default :func:`main_layer`)
    and the indices of the ``n`` contexts of that split's **test** side (stories the mode and its
    sign were not chosen on) with the highest score on its chosen eNTK mode and sign."""
    layer = main_layer(result) if layer is None else layer
    p = gemma_probe.point(result, layer)
    row = next(r for r in p["pos"] if r["task"] == task)
    scores = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])
    _, test = _splits(result)[0]
    return row, test[np.argsort(-(row["entk_sign"] * scores[row["entk_mode"], test]), kind="stable")[:n]]


# ---- our numbers beside the author's ---------------------------------------------------------------

#: the four numbers of a task, in the order of :data:`AUTHOR_LAYER16`'s tuples
AUTHOR_COLUMNS = ("entk_ap", "pca_ap", "entk_auroc", "pca_auroc")
#: what the chapter and the scorecard call each of :data:`AUTHOR_COLUMNS`
COLUMN_NAMES = {"entk_ap": "eNTK AP", "pca_ap": "PCA AP", "entk_auroc": "eNTK AUROC", "pca_auroc": "PCA AUROC"}


def _spread(values) -> dict:
    """``mean``, ``median``, ``lo`` (min) and ``hi`` (max) of per-split values, and the values
    themselves (``splits``)."""
    v = np.asarray(values, float)
    return {"mean": float(v.mean()), "median": float(np.median(v)), "lo": float(v.min()), "hi": float(v.max()),
            "splits": v.tolist()}


def _task_masks(result: Result, family: str, names) -> dict[str, np.ndarray]:
    """Task name -> (N,) bool for the named tasks of ``family``: a part of speech from the stored
    labels, a "Feature=Value" from the stored morphology strings of the contexts (as
    :func:`ntkbook.gemma.probe.morph_tasks` reads them)."""
    from ntkbook.gemma import bootstrap  # noqa: PLC0415

    if not names:
        return {}
    morph = result["morph"] if family == "morph" else ()  # a part of speech reads the labels only
    return bootstrap.task_masks(family, names, np.asarray(result["labels"]), result["classes"], morph)


@_memo
def beside_author(result: Result, layer: int | None = None) -> dict:
    """Our test AP and AUROC beside the author's (:data:`AUTHOR_LAYER16`, his one stratified 50 %
    split), per task he reports at layer 16 (the eight parts of speech, the morphological features
    his filter admitted) and over them (macro).

    On every stored split by story, each task's eNTK mode and principal component are chosen on the
    training side and scored on the test side, as the experiment did
    (:func:`ntkbook.gemma.probe.evaluate_task`; their means are those of :func:`split_table`).
    Returns ``layer``, ``n_splits`` and, per family (``"pos"``, ``"morph"``), a dict with

    - ``rows``: one per task of the author's, in his order: ``task``, ``support`` (its contexts
      here, 0 where our data has no such task), ``ours`` (None where our data has no such task,
      else :data:`AUTHOR_COLUMNS` -> ``mean``, ``median``, ``lo``, ``hi`` over the splits and the
      per-split values ``splits``) and ``author`` (:data:`AUTHOR_COLUMNS` -> his number);
    - ``macro``: the same over the tasks both report (``tasks``): ``ours`` from the per-split mean
      over those tasks (so its ``mean`` is the mean of the rows' means), ``author`` the mean of his
      numbers on the same tasks; both None when no task is shared;
    - ``missing``: the author's tasks our data does not have."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = main_layer(result) if layer is None else layer
    p = gemma_probe.point(result, layer)
    entk = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])
    pca = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "pca_scores")])
    splits = _splits(result)
    out: dict = {"layer": layer, "n_splits": len(splits)}
    for family, author in AUTHOR_LAYER16.items():
        ours = {r["task"]: r for r in p.get(f"{family}_splits", [])}
        shared = [t for t in author if t in ours]
        masks = _task_masks(result, family, shared)
        rows = []
        for task, numbers in author.items():
            row = {"task": task, "support": ours[task]["support"] if task in ours else 0, "ours": None,
                   "author": dict(zip(AUTHOR_COLUMNS, numbers))}
            if task in ours:
                per = {"entk_ap": [], "pca_ap": [], "entk_auroc": [], "pca_auroc": []}
                for train, test in splits:
                    e = probe.evaluate_task(entk, masks[task], train, test)
                    c = probe.evaluate_task(pca, masks[task], train, test)
                    per["entk_ap"].append(e["ap"])
                    per["pca_ap"].append(c["ap"])
                    per["entk_auroc"].append(e["auroc"])
                    per["pca_auroc"].append(c["auroc"])
                row["ours"] = {k: _spread(v) for k, v in per.items()}
            rows.append(row)
        both = [r for r in rows if r["ours"] is not None]
        macro = {"task": "macro", "tasks": shared, "ours": None, "author": None}
        if both:
            macro["ours"] = {k: _spread(np.mean([r["ours"][k]["splits"] for r in both], axis=0))
                             for k in AUTHOR_COLUMNS}
            macro["author"] = {k: float(np.mean([r["author"][k] for r in both])) for k in AUTHOR_COLUMNS}
        out[family] = {"rows": rows, "macro": macro, "missing": [t for t in author if t not in ours]}
    return out


def author_place(value: float, ours: Mapping) -> str:
    """Where the author's ``value`` lies against our split range (``ours``: a ``lo``/``hi`` dict of
    :func:`beside_author`): ``"below"``, ``"inside"`` or ``"above"``."""
    return "below" if value < ours["lo"] else "above" if value > ours["hi"] else "inside"


def author_gap_reading(beside: Mapping, family: str = "pos") -> str:
    """The gap between the author's macro numbers and ours for ``family``, as a sentence computed
    from ``beside`` (:func:`beside_author`): for the eNTK and for PCA, by AP and by AUROC, his
    macro value, whether it lies below, inside or above the range of ours over the splits, and its
    distance from our mean; which of his four values lie outside our ranges; and where his eNTK − PCA
    difference in macro AP lies against the per-split range of ours."""
    fam = beside[family]
    macro = fam["macro"]
    if macro["ours"] is None:
        return f"None of the {FAMILIES[family]} the author reports is a task here, so there is no macro to compare."
    n, k = len(macro["tasks"]), beside["n_splits"]
    place = {c: author_place(macro["author"][c], macro["ours"][c]) for c in AUTHOR_COLUMNS}

    def one(c: str) -> str:
        o, a = macro["ours"][c], macro["author"][c]
        return (f"{a:.3f} for {'the eNTK' if c.startswith('entk') else 'PCA'}, {place[c]} the range of ours "
                f"({o['lo']:.3f}–{o['hi']:.3f}; {a - o['mean']:+.3f} from our mean {o['mean']:.3f})")

    text = (f"Over the {n} {FAMILIES[family]} both report, the author's macro AP is {one('entk_ap')} and "
            f"{one('pca_ap')}; his macro AUROC is {one('entk_auroc')} and {one('pca_auroc')}, our ranges "
            f"being those over the {k} splits by story.")
    out = [c for c in AUTHOR_COLUMNS if place[c] != "inside"]
    if not out:
        text += " All four of his macro values lie within the spread of ours over the splits."
    else:
        entk_only, pca_only = (all(c.startswith(m) for c in out) for m in ("entk", "pca"))
        ends = ("" if len(out) == len(AUTHOR_COLUMNS) else
                ": the gap is the eNTK's, our principal components do as well as his" if entk_only else
                ": the gap is PCA's, our eNTK modes do as well as his" if pca_only else "")
        text += f" Outside our ranges: {', '.join(COLUMN_NAMES[c] for c in out)}{ends}."
    ours_diff = _spread(np.subtract(macro["ours"]["entk_ap"]["splits"], macro["ours"]["pca_ap"]["splits"]))
    his_diff = macro["author"]["entk_ap"] - macro["author"]["pca_ap"]
    return text + (f" His eNTK − PCA difference in macro AP is {his_diff:+.3f}, {author_place(his_diff, ours_diff)} "
                   f"the range of ours ({ours_diff['lo']:+.3f} to {ours_diff['hi']:+.3f}, "
                   f"mean {ours_diff['mean']:+.3f}).")


def author_first_data_reading(beside: Mapping, first: Mapping | None) -> str:
    """The book's first data set beside the author's and our parts-of-speech macro AP: ``first`` is
    the :func:`depth_rows` row of that data set at the main layer (windows free to overlap, one
    random split, the same model, labels and agreement filter), or None; says where its eNTK and PCA macro AP
    lie against our split ranges and against the author's numbers ("" when there is no such row)."""
    macro = beside["pos"]["macro"]
    if first is None or macro["ours"] is None:
        return ""
    part = []
    for c, name, value in (("entk_ap", "the eNTK", first["entk_ap"]), ("pca_ap", "PCA", first["pca_ap"])):
        o, a = macro["ours"][c], macro["author"][c]
        part.append(f"{value:.3f} for {name} ({author_place(value, o)} our range, "
                    f"{value - a:+.3f} from the author's {a:.3f})")
    return (f"On the book's first data set, at the same layer and N = {first['N']}, with the same model, labels and "
            f"agreement filter but windows free to overlap and one random split, the macro AP over the parts of speech was "
            f"{part[0]} and {part[1]}.")


def author_macro_line(beside: Mapping, family: str) -> str:
    """One scorecard part (no semicolon): the author's macro numbers for ``family`` beside our mean
    and split range (:func:`beside_author`), each with :func:`author_place`; "" when no task is shared."""
    macro = beside[family]["macro"]
    if macro["ours"] is None:
        return ""
    parts = [f"{COLUMN_NAMES[c]} {macro['author'][c]:.3f} against {macro['ours'][c]['mean']:.3f} "
             f"({macro['ours'][c]['lo']:.3f}–{macro['ours'][c]['hi']:.3f}, "
             f"{author_place(macro['author'][c], macro['ours'][c])})" for c in AUTHOR_COLUMNS]
    return (f"the author's macro over the {len(macro['tasks'])} tasks both report (his one split), against "
            f"our mean and range over {beside['n_splits']} splits: " + ", ".join(parts))


# ---- the scorecard ---------------------------------------------------------------------------------

def _family_row(result: Result, family: str, claim: str, need: str) -> dict:
    """The row of ``claim`` for the tasks of ``family``: robust AP wins on every part of speech,
    on all morphological features but one; partly on at least half (``need`` says the first)."""
    layer = main_layer(result)
    p = gemma_probe.point(result, layer)
    n_splits = result.config["n_splits"]
    scale = (f"layer {layer} down_proj, N = {result['N']} contexts from {result['stories']} stories, "
             f"{n_splits} splits by story")
    rule = (f"a {'class' if family == 'pos' else 'feature'} is an eNTK win when its test AP is above PCA's in "
            f"at least {WIN_SHARE:.0%} of the splits")
    over = p.get(f"{family}_splits", [])
    if not over:
        return {"claim": claim, "ours": f"no {TASK_KIND[family]} task", "verdict": DOES_NOT,
                "note": f"no {family} task passed the filters and the splits ({scale})"}
    n = len(over)
    wins, wins_auroc = robust_wins(over), robust_wins(over, "auroc")
    # "all but one" is a weaker test than "all" only with at least 3 tasks
    full = n if family == "pos" or n < 3 else n - 1
    ap, ap_std, _ = macro_difference(over, "ap")
    ours = (f"eNTK wins on {len(wins)}/{n} by AP ({', '.join(wins) or 'none'}); macro AP difference "
            f"{ap:+.3f} ± {ap_std:.3f} over splits; by AUROC on {len(wins_auroc)}/{n}")
    author = author_macro_line(beside_author(result), family)  # at main_layer(result), as here
    if author:
        ours += f"; {author}"
    return {"claim": claim, "ours": ours, "verdict": by_threshold(len(wins), full, n / 2),
            "note": f"{scale}; {rule}; reproduces if the eNTK wins on {need}, partly if on at least half"}


def scorecard(results: Mapping[str, Result]) -> list[dict]:
    """Rows for the ``B.gemma.*`` claims from the stored paper-preset ``gemma_probe`` result
    (``results["gemma_probe"]``; no rows when it is absent): the spectrum identity (reproduces
    below 10⁻⁶ of λ₁, partly below 10⁻³), parts of speech (robust AP wins on every class) and
    morphology (on all but one feature), and the purity of the top contexts of each class's
    chosen mode (reproduces at a mean of 0.8, partly at 0.5)."""
    result = results.get("gemma_probe")
    if result is None:
        return []
    rows = []
    idt = result["identity"]
    if idt:
        err = idt["rel_err"]
        rows.append({"claim": "B.gemma.spectrum_identity", "ours": f"max eigenvalue difference {sci(err, 1)} × λ₁",
                     "verdict": ladder(err < 1e-6, err < 1e-3),
                     "note": f"N = {idt['N']}, P = {idt['P']} ({'+'.join(idt['param_set'])}); reproduces if the "
                             "difference is below 10⁻⁶ × λ₁, partly if below 10⁻³ × λ₁"})
    rows.append(_family_row(result, "pos", "B.gemma.pos_vs_pca", "every class"))
    rows.append(_family_row(result, "morph", "B.gemma.morph_vs_pca",
                            "all features but one (on all when there are fewer than 3)"))
    rows.append(_purity_row(result))
    return rows


def _purity_row(result: Result) -> dict:
    """B.gemma.top_contexts: the purity of the top held-out contexts of each class's chosen mode."""
    layer = main_layer(result)
    n_top = min(10, result["N"] // 16)
    tp = test_side_purity(result, n_top, layer)
    e, pc, ch = tp["entk_macro"], tp["pca_macro"], tp["chance_macro"]
    k = len(e)
    full, half = float(np.mean(e >= 0.8)), float(np.mean(e >= 0.5))
    ours = (f"mean top-{n_top} purity on held-out stories {e.mean():.2f} (split range {e.min():.2f}–{e.max():.2f}; "
            f"≥ 0.8 in {full:.0%} of the splits, ≥ 0.5 in {half:.0%}); PCA {pc.mean():.2f}; chance {ch.mean():.2f}")
    return {"claim": "B.gemma.top_contexts", "ours": ours,
            "verdict": ladder(full >= WIN_SHARE, half >= WIN_SHARE),
            "note": f"per split, each part of speech's mode and sign chosen on the training side, and the share "
                    f"of the class among the {n_top} test contexts with the highest score on it, averaged over "
                    f"the classes (layer {layer}, N = {result['N']}, {k} splits by story); reproduces if that "
                    f"purity is ≥ 0.8 in at least {WIN_SHARE:.0%} of the splits, partly if ≥ 0.5 in at least "
                    f"{WIN_SHARE:.0%} of them"}


# ---- the budget curve: the best of the first k candidates ------------------------------------------

def _prefix_choices(scores: np.ndarray, y: np.ndarray, train: np.ndarray) -> list[tuple[int, int]]:
    """For k = 1 .. len(scores): the (row, sign) that :func:`ntkbook.gemma.probe.best_direction`
    chooses among the first k rows of ``scores`` on the training side (the signed rows in its order,
    the first of equal training APs winning), computed from one pass over the rows."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    s = np.asarray(scores)[:, train]
    both = np.empty((2 * len(s), s.shape[1]), dtype=s.dtype)
    both[0::2], both[1::2] = s, -s
    aps = probe.average_precisions(np.asarray(y)[train], both)
    out, best, best_j = [], -1.0, 0
    for j, ap in enumerate(aps):
        if ap > best:
            best, best_j = ap, j
        if j % 2 == 1:
            out.append((best_j // 2, 1 if best_j % 2 == 0 else -1))
    return out


@_memo
def budget_curve(result: Result, family: str = "pos", layer: int | None = None) -> dict:
    """Macro test AP and AUROC of the eNTK and of PCA when each may choose its direction per task only
    among its first ``k`` candidates (modes by eigenvalue, components by variance), k = 1 .. 25.

    On every stored split by story, each task's direction and sign are chosen on the training side
    among the first k candidates as the experiment chooses among all of them
    (:func:`ntkbook.gemma.probe.best_direction`) and scored on the test side
    (:func:`ntkbook.gemma.probe.evaluate_task`'s AP and AUROC); at the full budget this is the
    stored evaluation.  Returns ``k`` (list), ``tasks``, ``n_splits`` and, for ``entk`` and ``pca``,
    ``ap`` and ``auroc`` (len(k), n_splits) arrays of the macro over the tasks on each split, and
    ``modes`` (per task, the zero-based candidate chosen at each k on each split, for the eNTK)."""
    from sklearn.metrics import roc_auc_score  # noqa: PLC0415

    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = main_layer(result) if layer is None else layer
    sets = {m: np.asarray(result[gemma_probe.point_key(layer, "down_proj", f"{m}_scores")]) for m in ("entk", "pca")}
    K = min(len(s) for s in sets.values())
    tasks = [r["task"] for r in gemma_probe.point(result, layer).get(f"{family}_splits", [])]
    masks = _task_masks(result, family, tasks)
    splits = _splits(result)
    out: dict = {"k": list(range(1, K + 1)), "tasks": tasks, "n_splits": len(splits), "family": family}
    for m, sc in sets.items():
        ap = np.zeros((K, len(splits), len(tasks)))
        auroc = np.zeros_like(ap)
        for si, (train, test) in enumerate(splits):
            for ti, t in enumerate(tasks):
                y = masks[t]
                seen: dict = {}
                for ki, (i, sign) in enumerate(_prefix_choices(sc[:K], y, train)):
                    if (i, sign) not in seen:
                        s = sign * sc[i, test]
                        seen[(i, sign)] = (float(probe.average_precisions(y[test], s[None])[0]),
                                           float(roc_auc_score(y[test], s)))
                    ap[ki, si, ti], auroc[ki, si, ti] = seen[(i, sign)]
        out[m] = {"ap": ap.mean(axis=2), "auroc": auroc.mean(axis=2)}
    return out


def lead_from(diff: np.ndarray) -> int | None:
    """The smallest k (1-based) from which ``diff`` (one value per k) is positive at every larger k,
    or None when it is not positive at the last k."""
    diff = np.asarray(diff)
    if not len(diff) or diff[-1] <= 0:
        return None
    k = len(diff)
    while k > 1 and diff[k - 2] > 0:
        k -= 1
    return k


def budget_leads(curve: Mapping) -> dict:
    """From :func:`budget_curve`: per metric (``ap``, ``auroc``), ``mean`` the k from which the eNTK's
    mean macro (over the splits) is above PCA's at every larger k (:func:`lead_from`; None: never
    at the full budget), ``robust`` the k from which it is ahead in at least :data:`WIN_SHARE` of
    the splits at every larger k, ``pca_upto`` the largest k up to which PCA's mean is ahead at every
    smaller k (0: not at k = 1), and ``diff`` the mean differences per k."""
    out = {}
    for metric in ("ap", "auroc"):
        d = curve["entk"][metric] - curve["pca"][metric]  # (K, splits)
        mean = d.mean(axis=1)
        share = (d > 0).mean(axis=1)
        upto = 0
        while upto < len(mean) and mean[upto] < 0:
            upto += 1
        out[metric] = {"mean": lead_from(mean), "robust": lead_from(share - WIN_SHARE + 1e-12),
                       "pca_upto": upto, "diff": mean}
    return out


def budget_reading(curve: Mapping) -> str:
    """The verdict of the budget curve, computed: from which k the eNTK leads PCA in macro AP and in
    macro AUROC (on the mean over the splits, and in at least :data:`WIN_SHARE` of them), and up to
    which k PCA leads."""
    leads = budget_leads(curve)
    K = curve["k"][-1]
    parts = []
    for metric, name in (("ap", "macro AP"), ("auroc", "macro AUROC")):
        ld = leads[metric]
        if ld["mean"] is None:
            parts.append(f"by {name} the eNTK does not lead PCA even with all {K} candidates")
            continue
        txt = (f"by {name} the eNTK leads from k = {ld['mean']} on (at every k from there to {K}, on the mean "
               f"over the {curve['n_splits']} splits")
        txt += (f"; in at least {WIN_SHARE:.0%} of the splits from k = {ld['robust']})" if ld["robust"] is not None
                else f"; never in at least {WIN_SHARE:.0%} of the splits at every k up to {K})")
        if ld["pca_upto"]:
            txt += f", and PCA leads at every k ≤ {ld['pca_upto']}"
        parts.append(txt)
    return "With the best of the first k candidates per task, " + "; ".join(parts) + "."


# ---- morphology within the part of speech that carries it ------------------------------------------

#: a part of speech carries a feature when it holds at least this share of the feature's contexts
CARRIER_SHARE = 0.1
#: a conditioned task needs at least this many positive and this many negative contexts in its class
CONDITIONED_MIN = 10


@_memo
def morph_conditioned(result: Result, layer: int | None = None) -> dict:
    """Each morphological feature of the stored evaluation tested **within** each part of speech that
    carries it (at least :data:`CARRIER_SHARE` of the feature's contexts): the contexts of that class
    only, the feature against its absence among them, both sides restricted to the class on every
    stored split, each method choosing its direction on the class's training contexts
    (:func:`ntkbook.gemma.probe.split_robustness`).  A part-of-speech class never separates such a
    task, so a win here is a feature the class does not explain.

    Returns ``rows`` (the split_robustness rows with ``feature``, ``class``, ``positives``,
    ``negatives``, ``chance`` (the mean share of positives on the test side) and ``win``) and
    ``skipped`` (feature, class, reason: fewer than :data:`CONDITIONED_MIN` positives or negatives,
    or a side of a split with one label only)."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = main_layer(result) if layer is None else layer
    p = gemma_probe.point(result, layer)
    feats = [r["task"] for r in p.get("morph_splits", [])]
    masks = _task_masks(result, "morph", feats)
    classes = _pos_tasks(result)
    sets = {m: np.asarray(result[gemma_probe.point_key(layer, "down_proj", f"{m}_scores")]) for m in ("entk", "pca")}
    splits = _splits(result)
    rows, skipped = [], []
    for f in feats:
        y = masks[f]
        for c, in_c in classes.items():
            if (y & in_c).sum() < CARRIER_SHARE * y.sum():
                continue
            idx = np.flatnonzero(in_c)
            yc = y[idx]
            pos, neg = int(yc.sum()), int((~yc).sum())
            if min(pos, neg) < CONDITIONED_MIN:
                skipped.append({"feature": f, "class": c, "reason": f"{pos} positive and {neg} negative {c} contexts"})
                continue
            sub = [(np.flatnonzero(np.isin(idx, tr)), np.flatnonzero(np.isin(idx, te))) for tr, te in splits]
            bad = next((i for i, (tr, te) in enumerate(sub) for part in (yc[tr], yc[te])
                        if part.all() or not part.any()), None)
            if bad is not None:
                skipped.append({"feature": f, "class": c, "reason": f"a side of split {bad} has one label only"})
                continue
            row = probe.split_robustness({m: s[:, idx] for m, s in sets.items()}, {f: yc}, sub)[0]
            row.update(feature=f, **{"class": c}, positives=pos, negatives=neg,
                       chance=float(np.mean([yc[te].mean() for _, te in sub])), win=robust(row))
            rows.append(row)
    return {"rows": rows, "skipped": skipped}


def morph_conditioned_reading(cond: Mapping, unconditioned: list[Mapping]) -> str:
    """The verdict from the conditioned rows (:func:`morph_conditioned`) beside the unconditioned ones
    (:func:`split_table` rows of the morphological features): how many (feature, class) tasks the
    eNTK wins by the rule, which, and which features it won unconditioned but loses within their class."""
    rows = cond["rows"]
    if not rows:
        return "No morphological feature can be tested within a part of speech on these data."
    won = [f"{r['feature']} within {r['class']}" for r in rows if r["win"]]
    lost = [f"{r['feature']} within {r['class']}" for r in rows if not r["win"]]
    before = {r["task"] for r in unconditioned if r["win"]}
    gone = sorted(f for f in before if not any(r["win"] for r in rows if r["feature"] == f)
                  and any(r["feature"] == f for r in rows))
    text = (f"Within the part of speech that carries it, the eNTK wins {len(won)} of the {len(rows)} tasks by the rule "
            f"({', '.join(won) or 'none'}) and does not win {', '.join(lost) or 'none'}.")
    if gone:
        text += (f" Won without the condition but not within any class that carries {'it' if len(gone) == 1 else 'them'}: "
                 f"{', '.join(gone)}: there the unconditioned win was the part of speech.")
    return text


# ---- what a winning mode is: the contexts at its poles ---------------------------------------------

def mode_usage(result: Result, layer: int | None = None) -> dict:
    """Which eNTK modes the parts of speech choose over the stored splits: ``picks`` (class ->
    {(mode, sign): splits}, each class's mode and sign chosen on each split's training side as the
    probe chooses them) and ``modes`` (the zero-based modes by how many (class, split) choices
    fell on them, most first, the lower mode first on a tie: (mode, count) pairs)."""
    from collections import Counter  # noqa: PLC0415

    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = main_layer(result) if layer is None else layer
    sc = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])
    masks = _pos_tasks(result)
    picks: dict = {}
    for t in [r["task"] for r in gemma_probe.point(result, layer)["pos_splits"]]:
        cnt: Counter = Counter()
        for train, _ in _splits(result):
            _, i, sign = probe.best_direction(sc[:, train], masks[t][train])
            cnt[(int(i), int(sign))] += 1
        picks[t] = dict(cnt)
    total: Counter = Counter()
    for cnt in picks.values():
        for (i, _), n in cnt.items():
            total[i] += n
    return {"picks": picks, "modes": sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))}


def mode_users(usage: Mapping, mode: int) -> str:
    """Which classes choose ``mode`` (zero-based) in :func:`mode_usage`, with which sign and on how many
    splits, as text: "VERB (−, 20 splits), NOUN (+, 5 splits)"."""
    users = sorted(((t, sign, n) for t, cnt in usage["picks"].items() for (i, sign), n in cnt.items() if i == mode),
                   key=lambda x: -x[2])
    return ", ".join(f"{t} ({'+' if sign > 0 else '−'}, {n} split{'' if n == 1 else 's'})" for t, sign, n in users)


def mode_poles(result: Result, mode: int, n: int = 10, layer: int | None = None, width: int = 70) -> dict:
    """The ``n`` contexts with the highest and the ``n`` with the lowest score on eNTK ``mode`` (all
    contexts): per context its index, score, part of speech of the model's next word, the word and
    the last ``width`` characters of the text before it."""
    layer = main_layer(result) if layer is None else layer
    s = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "entk_scores")])[mode]
    order = np.argsort(-s, kind="stable")
    labels, classes = result["labels"], result["classes"]

    def row(i):
        text = " ".join(result["context_text"][i].split())
        return {"index": int(i), "score": float(s[i]), "class": classes[labels[i]], "word": result["model_word"][i],
                "text": ("…" + text[-width:]) if len(text) > width else text}

    return {"mode": mode, "top": [row(i) for i in order[:n]], "bottom": [row(i) for i in order[::-1][:n]]}


# ---- the floor and the ceiling: random directions and a supervised probe ---------------------------

#: what the chapter calls the two controls of ``gemma_controls``
CONTROL_NAMES = {"random": "random directions", "probe": "supervised probe"}


def controls_check(controls: Result, result: Result) -> dict:
    """Whether a ``gemma_controls`` entry read the contexts and splits of the ``gemma_probe`` entry
    ``result``: ``same_splits`` (the stored test sides equal), ``same_labels``, and ``pca_rel_err``,
    the largest difference (relative to the largest score) between the principal-component scores
    recomputed from the stored residual and those the probe stored, each component up to its sign."""
    from ntkbook.gemma import probe  # noqa: PLC0415

    layer = controls.config["layer"]
    stored_pca = np.asarray(result[gemma_probe.point_key(layer, "down_proj", "pca_scores")])
    mine, _ = probe.pca_scores(np.asarray(controls["block_output"]), len(stored_pca))
    signs = np.sign(np.sum(mine * stored_pca, axis=1, keepdims=True))
    err = float(np.max(np.abs(signs * mine - stored_pca)) / np.max(np.abs(stored_pca)))
    return {"same_splits": bool(np.array_equal(np.asarray(controls["split_test"]), np.asarray(result["split_test"]))),
            "same_labels": list(controls["labels"]) == list(result["labels"]), "pca_rel_err": err}


def controls_beside(controls: Result, beside: Mapping) -> dict:
    """The two controls per task and macro, in the shape of :func:`beside_author`'s ``ours``: per
    family, ``rows`` (task -> control -> metric -> :func:`_spread` over the splits; the random
    directions' value on a split is the mean over the draws) and ``macro`` (control -> metric ->
    spread of the per-split mean over the tasks of ``beside``'s macro), and per control the macro's
    ``draws`` range for random directions (the lowest and highest draw's mean over the splits)."""
    out: dict = {}
    for fam in FAMILIES:
        rows: dict = {}
        for ctl in CONTROL_NAMES:
            for r in controls[ctl][fam]:
                per = {}
                for metric in ("ap", "auroc"):
                    v = np.asarray(r[metric], float)
                    per[metric] = v.mean(axis=0) if ctl == "random" else v  # (splits,)
                    if ctl == "random":
                        per[f"{metric}_draws"] = v.mean(axis=1)  # (draws,)
                rows.setdefault(r["task"], {})[ctl] = per
        tasks = [t for t in beside[fam]["macro"]["tasks"] if t in rows]
        macro = {}
        for ctl in CONTROL_NAMES:
            macro[ctl] = {m: _spread(np.mean([rows[t][ctl][m] for t in tasks], axis=0)) if tasks else None
                          for m in ("ap", "auroc")}
            if ctl == "random" and tasks:
                for m in ("ap", "auroc"):
                    d = np.mean([rows[t][ctl][f"{m}_draws"] for t in tasks], axis=0)
                    macro[ctl][m]["draw_lo"], macro[ctl][m]["draw_hi"] = float(d.min()), float(d.max())
        out[fam] = {"rows": {t: {c: {m: _spread(v) for m, v in per.items() if not m.endswith("_draws")}
                                 for c, per in by.items()} for t, by in rows.items()},
                    "macro": macro, "tasks": tasks}
    return out


def controls_reading(beside: Mapping, ctl: Mapping, family: str = "pos") -> str:
    """Where the eNTK and PCA lie between the floor (random directions) and the ceiling (the probe),
    by macro AP and AUROC for ``family``: each one's share of the distance from the floor's mean to the
    ceiling's mean (0: no better than random directions; 1: as good as the supervised probe)."""
    macro, cm = beside[family]["macro"], ctl[family]["macro"]
    if macro["ours"] is None or cm["random"]["ap"] is None:
        return ""
    parts = []
    for m, name in (("ap", "AP"), ("auroc", "AUROC")):
        lo, hi = cm["random"][m]["mean"], cm["probe"][m]["mean"]
        e, p = macro["ours"][f"entk_{m}"]["mean"], macro["ours"][f"pca_{m}"]["mean"]
        def where(x):
            share = (x - lo) / (hi - lo)
            return ("below the random directions" if share < 0 else "above the probe" if share > 1 else
                    f"{share:.0%} of the way from the one to the other")
        parts.append(f"by macro {name} the random directions reach {lo:.3f} and the probe {hi:.3f}; the eNTK "
                     f"({e:.3f}) lies {where(e)}, PCA ({p:.3f}) {where(p)}")
    n = len(ctl[family]["tasks"])
    best = max(macro["ours"]["entk_ap"]["mean"], macro["ours"]["pca_ap"]["mean"])
    closer = "the eNTK" if macro["ours"]["entk_ap"]["mean"] > macro["ours"]["pca_ap"]["mean"] else "PCA"
    return (f"Over the {n} {FAMILIES[family]} of the macro rows (those the author reports too), " + "; ".join(parts)
            + f". By AP {closer} is the closer to the supervised ceiling, and "
            + ("neither method's mean comes up to the probe's lowest split"
               if best < cm["probe"]["ap"]["lo"] else "its mean lies within the probe's range over the splits")
            + ".")


# ---- PCA of the kernel's own inputs (gemma_kernel_inputs) -------------------------------------------

#: what the chapter calls each Gram matrix of ``gemma_kernel_inputs``
KERNEL_INPUT_NAMES = {"concat": "PCA of the kernel's inputs (every position)",
                      "summed": "PCA of the kernel's inputs summed over positions"}


def kernel_inputs_check(ki: Result, result: Result) -> dict:
    """Whether a ``gemma_kernel_inputs`` entry read the contexts and splits of the ``gemma_probe``
    entry ``result``: ``same_splits`` (the stored test sides equal) and ``same_labels``."""
    return {"same_splits": bool(np.array_equal(np.asarray(ki["split_test"]), np.asarray(result["split_test"]))),
            "same_labels": list(ki["labels"]) == list(result["labels"])}


def kernel_inputs_beside(ki: Result, beside: Mapping, variant: str = "concat") -> dict:
    """The best of the top principal components of the eNTK's own inputs per task and macro, in the
    shape of :func:`controls_beside`: per family ``rows`` (task -> metric -> :func:`_spread` over the
    splits) and ``macro`` (metric -> spread of the per-split mean over the tasks of ``beside``'s
    macro, None without shared tasks), ``tasks``."""
    out: dict = {}
    for fam in FAMILIES:
        rows = {r["task"]: {m: _spread(r[m]) for m in ("ap", "auroc")} for r in ki[variant][fam]}
        tasks = [t for t in beside[fam]["macro"]["tasks"] if t in rows]
        out[fam] = {"rows": rows, "tasks": tasks,
                    "macro": {m: _spread(np.mean([rows[t][m]["splits"] for t in tasks], axis=0)) if tasks else None
                              for m in ("ap", "auroc")}}
    return out


def kernel_inputs_reading(beside: Mapping, kib: Mapping, family: str = "pos", other: Mapping | None = None) -> str:
    """The verdict on what the eNTK adds over PCA of its own inputs, for ``family``: the two macro AP
    and AUROC (means over the splits and their range), the eNTK's paired lead per split (mean ± sd,
    the share of splits it is ahead), the tasks where one side leads in at least :data:`WIN_SHARE` of
    the splits, and what that says.  ``other``: optionally the same for the summed variant, quoted
    in one clause."""
    macro, km = beside[family]["macro"], kib[family]["macro"]
    if macro["ours"] is None or km["ap"] is None:
        return ""
    n_tasks = len(kib[family]["tasks"])
    parts, lead = [], {}
    for m, name in (("ap", "AP"), ("auroc", "AUROC")):
        e, c = np.asarray(macro["ours"][f"entk_{m}"]["splits"]), np.asarray(km[m]["splits"])
        d = e - c
        lead[m] = float(np.mean(d > 0))
        parts.append(f"macro {name} {c.mean():.3f} ({c.min():.3f}–{c.max():.3f}) against the eNTK's {e.mean():.3f} "
                     f"({e.min():.3f}–{e.max():.3f}), a lead for the eNTK of {d.mean():+.3f} ± {d.std(ddof=1):.3f}, "
                     f"ahead on {int(np.sum(d > 0))} of {len(d)} splits")
    by_task = {r["task"]: r for r in beside[family]["rows"] if r["ours"] is not None}
    e_ahead, k_ahead = [], []
    for t in kib[family]["tasks"]:
        d = np.asarray(by_task[t]["ours"]["entk_ap"]["splits"]) - np.asarray(kib[family]["rows"][t]["ap"]["splits"])
        if np.mean(d > 0) >= WIN_SHARE:
            e_ahead.append(t)
        elif np.mean(d < 0) >= WIN_SHARE:
            k_ahead.append(t)
    text = (f"Over the {n_tasks} {FAMILIES[family]} of the macro rows, the best of the top principal components of "
            f"the kernel's inputs reaches " + "; ".join(parts) + ". ")
    text += (f"By test AP in at least {WIN_SHARE:.0%} of the splits the eNTK is ahead on "
             f"{', '.join(e_ahead) if e_ahead else 'no task'} and behind on {', '.join(k_ahead) if k_ahead else 'no task'}")
    if other is not None and other[family]["macro"]["ap"] is not None:
        text += (f"; the activations summed over positions, instead of concatenated, reach a macro AP of "
                 f"{other[family]['macro']['ap']['mean']:.3f}")
    text += ". "
    if lead["ap"] >= WIN_SHARE and lead["auroc"] >= WIN_SHARE:
        text += ("So the eNTK adds to its inputs what the selection uses: the same activations without the "
                 "backward factor (the sensitivities through every layer above) give candidates "
                 f"{'close to chance (macro AUROC 0.5)' if km['auroc']['mean'] < 0.6 else 'worse than the modes'}. "
                 "That factor weights both the positions of the window and the directions of the activations; "
                 "this control does not tell which of the two does the work.")
    elif 1 - lead["ap"] >= WIN_SHARE and 1 - lead["auroc"] >= WIN_SHARE:
        text += ("So the eNTK adds nothing the selection can use to its own inputs: plain PCA of the same "
                 "activations, without the Jacobian of the layers above, gives better candidates.")
    else:
        text += ("So, by this selection, the eNTK and PCA of its own inputs cannot be told apart consistently over "
                 "the splits: what the eNTK adds over its inputs does not show as better candidates on both metrics.")
    return text


# ---- the same operator on a re-initialised Gemma (gemma_reinit) ------------------------------------

#: what the chapter calls the two score sets of ``gemma_reinit``
REINIT_NAMES = {"entk": "eNTK of the re-initialised model", "pca": "PCA of the re-initialised model"}


def reinit_trained(reinit: Result, scale: str = "paper") -> Result | None:
    """The stored ``gemma_probe`` entry with the data fields and the point of a ``gemma_reinit``
    entry (at the paper preset: the depth sweep's entry at layer 16, N = 256,
    :func:`gemma_probe.sweep_overrides`), or None when it is not stored; never computes."""
    c = reinit.config
    fields = ("n_per_class", "data_scale", "data_n_per_class", "k", "lanczos_steps", "seed", "chunk", "pca_k",
              "folds", "split_seed", "n_splits", "min_support", "min_words", "max_top_share")
    return stored("gemma_probe", scale, **{f: c[f] for f in fields}, layers=(c["layer"],), whole_layer_at=(),
                  identity_contexts=0)


def reinit_main(result: Result, scale: str = "paper") -> Result | None:
    """The stored ``gemma_reinit`` entry on the contexts, splits and layer of the ``gemma_probe``
    entry ``result`` (at the paper scale the main result, N = 1024: the preset with its
    ``n_per_class``), or None when it is not stored or does not match (:func:`reinit_check`);
    never computes."""
    c = result.config
    reinit = stored("gemma_reinit", scale, n_per_class=c["n_per_class"], data_scale=c["data_scale"],
                    data_n_per_class=c["data_n_per_class"], layer=main_layer(result), n_splits=c["n_splits"])
    return reinit if reinit is not None and all(reinit_check(reinit, result).values()) else None


def reinit_check(reinit: Result, result: Result) -> dict:
    """Whether a ``gemma_reinit`` entry read the contexts and splits of the ``gemma_probe`` entry
    ``result``: ``same_splits`` (the stored test sides equal), ``same_labels``, and ``same_layer``
    (``result`` has a down-projection point at the layer of ``reinit``)."""
    layer = reinit.config["layer"]
    return {"same_splits": bool(np.array_equal(np.asarray(reinit["split_test"]), np.asarray(result["split_test"]))),
            "same_labels": list(reinit["labels"]) == list(result["labels"]),
            "same_layer": any(p["layer"] == layer and p["param_set"] == "down_proj" for p in result["points"])}


def reinit_beside(reinit: Result, beside: Mapping) -> dict:
    """The random-weight eNTK modes and principal components per task and macro, in the shape of
    :func:`kernel_inputs_beside` with one more level: per family ``rows`` (task -> method
    (``"entk"``, ``"pca"``) -> metric -> :func:`_spread` over the splits), ``macro`` (method ->
    metric -> spread of the per-split mean over the tasks of ``beside``'s macro, None without shared
    tasks) and ``tasks``.  ``beside``: :func:`beside_author` of the trained ``gemma_probe`` entry on
    the same contexts and splits (:func:`reinit_trained`, :func:`reinit_check`)."""
    out: dict = {}
    for fam in FAMILIES:
        rows: dict = {}
        for method in REINIT_NAMES:
            for r in reinit[method][fam]:
                rows.setdefault(r["task"], {})[method] = {m: _spread(r[m]) for m in ("ap", "auroc")}
        tasks = [t for t in beside[fam]["macro"]["tasks"] if t in rows]
        out[fam] = {"rows": rows, "tasks": tasks,
                    "macro": {method: {m: _spread(np.mean([rows[t][method][m]["splits"] for t in tasks], axis=0))
                                       if tasks else None for m in ("ap", "auroc")} for method in REINIT_NAMES}}
    return out


def reinit_rows(beside: Mapping, rb: Mapping, metric: str = "ap") -> list[list[str]]:
    """The rows of the chapter's table for ``metric`` (``"ap"`` or ``"auroc"``): per task of the
    macro rows, then the family's macro (bold), the trained eNTK, the random-weight eNTK and the
    random-weight PCA, each ``"mean (lowest–highest split)"`` (``"n/a"`` where missing).
    ``beside``: :func:`beside_author` of the trained entry; ``rb``: :func:`reinit_beside`."""
    def cell(o) -> str:
        return "n/a" if o is None else f"{o['mean']:.3f} ({o['lo']:.3f}–{o['hi']:.3f})"

    out = []
    for fam in FAMILIES:
        ours = {r["task"]: r["ours"] for r in beside[fam]["rows"] if r["ours"] is not None}
        for t in rb[fam]["tasks"]:
            out.append([t, cell(ours[t][f"entk_{metric}"])] +
                       [cell(rb[fam]["rows"][t][m][metric]) for m in REINIT_NAMES])
        if rb[fam]["tasks"]:
            out.append([f"**macro, {len(rb[fam]['tasks'])} {FAMILIES[fam]}**",
                        cell(beside[fam]["macro"]["ours"][f"entk_{metric}"])] +
                       [cell(rb[fam]["macro"][m][metric]) for m in REINIT_NAMES])
    return out


def reinit_spectrum(reinit: Result, trained: Result) -> dict:
    """The two kernels' spectra at the re-initialised entry's layer: per side (``"reinit"``,
    ``"trained"``) ``top_gap`` λ₁/λ₂, ``spread`` λ₁/λ_k over the k computed modes, ``worst_residual``
    the largest Ritz residual relative to its eigenvalue, and ``pinned`` the number of modes whose
    Ritz vector is pinned down (:func:`pinned_modes`), of ``k``."""
    layer = reinit.config["layer"]
    out = {}
    for side, res in (("reinit", reinit), ("trained", trained)):
        lam = np.asarray(res[gemma_probe.point_key(layer, "down_proj", "eigenvalues")], float)
        r = np.asarray(res[gemma_probe.point_key(layer, "down_proj", "ritz_residuals")], float)
        out[side] = {"top_gap": float(lam[0] / lam[1]), "spread": float(lam[0] / lam[-1]),
                     "worst_residual": float(np.max(r / lam)), "pinned": len(pinned_modes(res, layer)),
                     "k": len(lam)}
    return out


def reinit_spectrum_reading(spec: Mapping) -> str:
    """What the re-initialised kernel's spectrum is, beside the trained one's (:func:`reinit_spectrum`),
    and what that means for its modes."""
    r, t = spec["reinit"], spec["trained"]
    last = str(r["k"]).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
    text = (f"The re-initialised kernel's spectrum is flat where the trained one is not: λ₁/λ₂ = "
            f"{r['top_gap']:.2f} and λ₁/λ{last} = {r['spread']:.2f} (trained: {t['top_gap']:.1f} and "
            f"{t['spread']:.0f}); after the same {r['k']} modes from the same number of Lanczos products, "
            f"{r['pinned']} of its {r['k']} Ritz vectors are pinned down (trained: {t['pinned']}), and the largest "
            f"Ritz residual is {r['worst_residual']:.1%} of its eigenvalue (trained: {t['worst_residual']:.1%}). ")
    if r["pinned"] < r["k"]:
        text += ("Its modes are therefore mixtures of eigenvectors with nearly equal eigenvalues, the mixture set "
                 "by the start vector; each is still a direction of the kernel's top eigenspace, and the selection "
                 "chooses among them as it chooses among the trained modes.")
    return text


def _paired_lead(a, b) -> dict:
    """Per split ``a - b`` (two (n_splits,) lists on the same splits): ``mean``, ``std`` (ddof 1; 0 for
    one split), ``ahead`` (splits where ``a`` is strictly ahead), ``behind``, ``n`` and ``share``
    (ahead / n)."""
    d = np.subtract(np.asarray(a, float), np.asarray(b, float))
    return {"mean": float(d.mean()), "std": float(d.std(ddof=1)) if len(d) > 1 else 0.0,
            "ahead": int(np.sum(d > 0)), "behind": int(np.sum(d < 0)), "n": len(d), "share": float(np.mean(d > 0))}


def reinit_reading(beside: Mapping, rb: Mapping, family: str = "pos") -> str:
    """The verdict on what the trained eNTK adds over the same operator on random weights, for
    ``family``: the random-weight eNTK's and PCA's macro AP and AUROC (means over the splits and
    their range) beside the trained eNTK's, the trained eNTK's paired lead per split (mean ± sd, on
    how many splits it is ahead), the tasks where one side leads in at least :data:`WIN_SHARE` of
    the splits, and what that says: training adds what the selection uses when the trained eNTK is
    ahead in at least :data:`WIN_SHARE` of the splits by both macro AP and AUROC, nothing when the
    random-weight eNTK is, otherwise the two cannot be told apart.  "" without shared tasks."""
    macro, rm = beside[family]["macro"], rb[family]["macro"]
    if macro["ours"] is None or rm["entk"]["ap"] is None:
        return ""
    n_tasks = len(rb[family]["tasks"])
    parts, lead = [], {}
    for m, name in (("ap", "AP"), ("auroc", "AUROC")):
        e, r, p = (np.asarray(macro["ours"][f"entk_{m}"]["splits"]), np.asarray(rm["entk"][m]["splits"]),
                   np.asarray(rm["pca"][m]["splits"]))
        lead[m] = _paired_lead(e, r)
        parts.append(f"macro {name} {r.mean():.3f} ({r.min():.3f}–{r.max():.3f}; its PCA {p.mean():.3f}) against "
                     f"the trained eNTK's {e.mean():.3f} ({e.min():.3f}–{e.max():.3f}), a lead for the trained eNTK "
                     f"of {lead[m]['mean']:+.3f} ± {lead[m]['std']:.3f}, ahead on {lead[m]['ahead']} of "
                     f"{lead[m]['n']} splits")
    by_task = {r["task"]: r for r in beside[family]["rows"] if r["ours"] is not None}
    t_ahead, r_ahead = [], []
    for t in rb[family]["tasks"]:
        pl = _paired_lead(by_task[t]["ours"]["entk_ap"]["splits"], rb[family]["rows"][t]["entk"]["ap"]["splits"])
        if pl["ahead"] / pl["n"] >= WIN_SHARE:
            t_ahead.append(t)
        elif pl["behind"] / pl["n"] >= WIN_SHARE:
            r_ahead.append(t)
    text = (f"Over the {n_tasks} {FAMILIES[family]} of the macro rows, the eNTK of the re-initialised model reaches "
            + "; ".join(parts) + ". ")
    text += (f"By test AP in at least {WIN_SHARE:.0%} of the splits the trained eNTK is ahead on "
             f"{', '.join(t_ahead) if t_ahead else 'no task'} and behind on "
             f"{', '.join(r_ahead) if r_ahead else 'no task'}. ")
    trained_wins = all(lead[m]["share"] >= WIN_SHARE for m in lead)
    random_wins = all(lead[m]["behind"] / lead[m]["n"] >= WIN_SHARE for m in lead)
    if trained_wins:
        worse = ("close to chance (macro AUROC 0.5)" if rm["entk"]["auroc"]["mean"] < 0.6
                 else "worse than the trained modes")
        text += ("So what the trained eNTK's modes detect comes from training: the same operator, on the same "
                 f"architecture and contexts with random weights, gives candidates {worse}.")
    elif random_wins:
        text += ("So the trained eNTK adds nothing the selection can use over any kernel of this shape: the same "
                 "operator with random weights gives better candidates.")
    else:
        text += ("So, by this selection, the trained eNTK and the same operator on random weights cannot be told apart "
                 "consistently over the splits: what training adds does not show as better candidates on both metrics.")
    return text


# ---- the depth sweep against its floor (gemma_controls at each layer) --------------------------------

def controls_sweep(n_per_class: int, scale: str = "paper", layers=gemma_probe.SWEEP_LAYERS) -> dict[int, Result]:
    """The stored ``gemma_controls`` entries at ``n_per_class`` contexts per class, one per layer
    (the floor and the ceiling of the depth sweep), by layer; layers not stored are absent."""
    found = {L: stored("gemma_controls", scale, n_per_class=n_per_class, layer=L) for L in layers}
    return {L: r for L, r in found.items() if r is not None}


def depth_floor(controls: Mapping[int, Result]) -> dict[int, dict]:
    """Per layer, the parts of speech's macro over the tasks of a ``gemma_controls`` entry: the floor
    (``random``: metric -> ``mean`` over draws and splits, ``draw_lo``/``draw_hi`` the lowest and
    highest draw's mean over the splits) and the ceiling (``probe``: metric -> mean over the splits),
    with ``N`` and ``draws``."""
    out = {}
    for L, c in sorted(controls.items()):
        rand, prob = c["random"]["pos"], c["probe"]["pos"]
        row = {"N": c["N"], "draws": c.config["random_draws"], "random": {}, "probe": {}}
        for m in ("ap", "auroc"):
            per = np.mean([np.asarray(r[m], float) for r in rand], axis=0)  # (draws, splits), macro over tasks
            draws = per.mean(axis=1)
            row["random"][m] = {"mean": float(per.mean()), "draw_lo": float(draws.min()), "draw_hi": float(draws.max())}
            row["probe"][m] = {"mean": float(np.mean([np.mean(r[m]) for r in prob]))}
        out[L] = row
    return out


def depth_floor_reading(rows: list[dict], floor: Mapping[int, dict]) -> str:
    """The depth sweep read against its floor, from the down-projection rows (:func:`depth_rows`,
    with ``entk_auroc``) and :func:`depth_floor`: the layers where the eNTK's macro AP is no higher
    than the best draw of random directions at that layer (its AUROC there beside chance, 0.5),
    those where PCA is, and the layers from which the eNTK stays above its floor."""
    down = sorted((r for r in rows if r["param_set"] == "down_proj" and r["layer"] in floor), key=lambda r: r["layer"])
    if not down:
        return "No layer has both the sweep and its floor stored yet."
    at = [r for r in down if r["entk_ap"] <= floor[r["layer"]]["random"]["ap"]["draw_hi"]]
    pca_at = [r["layer"] for r in down if r["pca_ap"] <= floor[r["layer"]]["random"]["ap"]["draw_hi"]]
    lo_f = min(floor[r["layer"]]["random"]["ap"]["mean"] for r in down)
    hi_f = max(floor[r["layer"]]["random"]["ap"]["mean"] for r in down)
    draws = floor[down[0]["layer"]]["draws"]
    text = (f"The floor (the best of 25 random directions of the residual at the last position, the output of "
            f"block L, {draws} draws) lies between {lo_f:.2f} and {hi_f:.2f} in macro AP over the "
            f"{len(down)} layers where both are stored ({_layers([r['layer'] for r in down])}). ")
    if at:
        aucs = [r["entk_auroc"] for r in at if r.get("entk_auroc") is not None]
        text += (f"At {_plural('layer', at)} {_layers([r['layer'] for r in at])} the eNTK's macro AP is no higher "
                 f"than the best of those draws at the same layer: there its modes detect the parts of speech no "
                 f"better than directions chosen at random")
        span = f"{min(aucs):.2f}" if aucs and f"{min(aucs):.2f}" == f"{max(aucs):.2f}" else (
            f"{min(aucs):.2f}–{max(aucs):.2f}" if aucs else "")
        text += (f" (macro AUROC {span}; chance is 0.50)." if aucs else ".")
    else:
        text += "At every such layer the eNTK's macro AP is above the best draw of random directions."
    above = [r["layer"] for r in down if r not in at]
    first = next((L for L in above if all(x["layer"] in above for x in down if x["layer"] >= L)), None)
    if at and first is not None:
        text += f" From layer {first} up it stays above its floor."
    text += (f" PCA is at or below its floor at {_plural('layer', pca_at)} {_layers(pca_at)}." if pca_at
             else " PCA is above its floor at every such layer.")
    return text


# ---- error bars over the data: a bootstrap over stories ---------------------------------------------

#: two-sided coverage of the percentile interval of :func:`story_bootstrap` (2.5 and 97.5 percentiles)
BOOT_LEVEL = 0.95
#: resamples of :func:`story_bootstrap` by default (about 15 s per family at N = 1024 on one core)
BOOT_N = 200


def _boot_interval(values: np.ndarray, level: float) -> Interval:
    """The mean of ``values`` (one per resample, ``(n,)``) with its percentile interval at ``level``
    (:class:`~ntkbook.claims.intervals.Interval` as the container: ``above``/``below``/``text``)."""
    v = np.asarray(values, float)
    lo, hi = np.percentile(v, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(v.mean()), float(lo), float(hi), int(v.size))


def _story_bootstrap(result: Result, family: str, n_boot: int, seed: int, layer: int | None, level: float,
                     stored: Result | None = None) -> dict:
    from ntkbook.errors import InputError  # noqa: PLC0415
    from ntkbook.gemma import bootstrap  # noqa: PLC0415

    if family not in FAMILIES:
        raise InputError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    if n_boot < 2:
        raise InputError(f"a bootstrap needs n_boot >= 2 resamples, got {n_boot}")
    layer = main_layer(result) if layer is None else layer
    point = gemma_probe.point(result, layer)
    split_rows = point.get(f"{family}_splits", [])
    tasks = [r["task"] for r in split_rows]
    story = np.asarray(result["story"])
    if stored is not None:  # the draws of a stored gemma_bootstrap entry of this very result
        _check_stored_bootstrap(stored, result, family, tasks, n_boot, seed, layer)
        got = {f"{m}_{metric}": np.asarray(stored[bootstrap.draw_key(family, m, metric)], float)
               for m in bootstrap.METHODS for metric in bootstrap.METRICS}
        unsplit = int(stored["unsplit"][family])
    else:
        masks = _task_masks(result, family, tasks)
        sets = {m: np.asarray(result[gemma_probe.point_key(layer, "down_proj", f"{m}_scores")])
                for m in bootstrap.METHODS}
        got, unsplit = bootstrap.resample(sets, masks, np.asarray(result["labels"]), story,
                                          folds=result.config.get("folds", 2), n_boot=n_boot, seed=seed)
    evaluated = ~np.isnan(got["entk_ap"])  # (n_boot, tasks)
    skipped = {t: int(n_boot - evaluated[:, ti].sum()) for ti, t in enumerate(tasks)}
    common = [ti for ti, t in enumerate(tasks) if skipped[t] == 0]
    out: dict = {"family": family, "layer": layer, "N": int(result["N"]), "stories": len(np.unique(story)),
                 "n_boot": n_boot, "seed": seed, "level": level, "tasks": tasks,
                 "macro_tasks": [tasks[ti] for ti in common], "skipped": skipped, "unsplit": unsplit, "draws": got,
                 "split_wins": {m: robust_wins(split_rows, m) for m in ("ap", "auroc")},
                 "split_macro": {m: macro_difference(split_rows, m) if split_rows else None for m in ("ap", "auroc")},
                 "n_splits": len(split_rows[0]["ap_diff"]) if split_rows else 0, "macro": {}, "per_task": {}}
    for metric in ("ap", "auroc"):
        diff = got[f"entk_{metric}"] - got[f"pca_{metric}"]  # (n_boot, tasks), NaN where skipped
        if common:
            e, p = (got[f"{m}_{metric}"][:, common].mean(axis=1) for m in ("entk", "pca"))
            out["macro"][metric] = {"entk": _boot_interval(e, level), "pca": _boot_interval(p, level),
                                    "diff": _boot_interval(e - p, level), "share_ahead": float(np.mean(e > p))}
        else:
            out["macro"][metric] = None
        for ti, t in enumerate(tasks):
            d = diff[evaluated[:, ti], ti]
            out["per_task"].setdefault(t, {})[metric] = (
                {"diff": _boot_interval(d, level), "share_ahead": float(np.mean(d > 0)), "n": int(d.size)}
                if d.size >= 2 else None)
    return out


@_memo
def _story_bootstrap_memo(result: Result, family: str, n_boot: int, seed: int, layer: int | None,
                          level: float) -> dict:
    return _story_bootstrap(result, family, n_boot, seed, layer, level)


def _check_stored_bootstrap(stored: Result, result: Result, family: str, tasks: list, n_boot: int, seed: int,
                            layer: int) -> None:
    """Refuse a ``gemma_bootstrap`` entry that is not the resampling of ``result`` asked for."""
    from ntkbook.errors import InputError  # noqa: PLC0415

    want = {"n_boot": n_boot, "seed": seed, "layer": layer}
    have = {k: stored.config.get(k) for k in want}
    problems = [f"{k} {have[k]} (asked: {v})" for k, v in want.items() if have[k] != v]
    if json.dumps(stored["probe_config"], sort_keys=True) != json.dumps(dict(result.config), sort_keys=True):
        problems.append("another gemma_probe entry (its probe_config differs from this result's config)")
    if list(stored["tasks"][family]) != tasks:
        problems.append(f"other {family} tasks {list(stored['tasks'][family])} (this result's: {tasks})")
    if problems:
        raise InputError(f"the stored gemma_bootstrap entry does not resample this result: {'; '.join(problems)}. "
                         "Pass the entry whose config matches, or none to compute the bootstrap here.")


def story_bootstrap(result: Result, family: str = "pos", n_boot: int = BOOT_N, seed: int = 0,
                    layer: int | None = None, level: float = BOOT_LEVEL, stored: Result | None = None) -> dict:
    """Error bars over the data: a cluster bootstrap over the stories of a ``gemma_probe`` result,
    with the eNTK modes and the principal components **held fixed** (a Lanczos run per resample is
    15–40 min of CPU), so the interval is narrower than that of a full re-run on fresh stories.

    Each of ``n_boot`` resamples draws the result's S stories with replacement (S draws) and takes
    every context of each drawn story, as often as the story is drawn (the scores of a context are
    its columns of the stored ``entk_scores`` and ``pca_scores`` (k, N)); it makes one fresh split by
    story of the resample (:func:`ntkbook.gemma.probe.story_splits`, ``n_splits=1``, the result's
    ``folds``, stratified by part of speech as the experiment's splits are, a seed drawn from the
    resample's generator) and evaluates each task of ``family`` at ``layer`` (default
    :func:`main_layer`; the tasks of the stored ``<family>_splits`` rows) for both score sets as the
    main comparison does (:func:`ntkbook.gemma.probe.evaluate_task`: direction and sign chosen by
    training AP, test AP and AUROC).

    The copies of a story drawn twice keep the story's id as their group, so they land on one side
    of the split together.  Distinct ids would let one copy choose the mode on the training side and
    its twin, the same contexts, score it on the test side: the leak the split by story exists to
    prevent, and one that would flatter whichever method fits its training side more closely.  A
    resample holds about 63 % of the distinct stories, some several times, so its training side
    offers the selection fewer distinct contexts than the original's: that part of the interval may
    err wide, while holding the modes fixed makes it narrow; the percentile interval is centred on
    the resamples, whose mean need not equal the stored splits' mean difference.

    A task whose training or test side of a resample holds one class only
    (:class:`~ntkbook.errors.InputError` from ``evaluate_task``) is skipped in that resample only and
    counted (``skipped``); the macro is taken over the tasks evaluated in **every** resample
    (``macro_tasks``), so that each resample's macro averages the same tasks; a task skipped in some
    resample keeps its own interval over the resamples where it was evaluated.  A resample with fewer
    distinct stories than folds cannot be split and is counted in ``unsplit`` (every task skipped).

    Deterministic in ``seed`` (NumPy ``default_rng(seed)`` draws the stories and the split seeds).
    Returns ``family``, ``layer``, ``N``, ``stories`` (S), ``n_boot``, ``seed``, ``level``, ``tasks``,
    ``macro_tasks``, ``skipped`` (task -> resamples skipped), ``unsplit``, ``draws`` (``<method>_<metric>``
    -> (n_boot, tasks) test values, NaN where skipped), ``macro`` (metric -> ``entk``, ``pca`` and
    ``diff`` (eNTK − PCA) :class:`~ntkbook.claims.intervals.Interval` (mean over the resamples and the
    percentile interval at ``level``, by default the 2.5 and 97.5 percentiles), ``share_ahead`` (the
    share of resamples with the eNTK's macro strictly ahead); None without a task in every resample),
    ``per_task`` (task -> metric -> ``diff`` interval, ``share_ahead``, ``n`` resamples evaluated; None
    under two), and beside them the split-based reading of the stored entry: ``split_wins`` (metric ->
    :func:`robust_wins`), ``split_macro`` (metric -> :func:`macro_difference`) and ``n_splits``.

    ``stored``: the ``gemma_bootstrap`` entry of this result (same ``n_boot``, ``seed``, ``layer``),
    whose stored draws (:func:`ntkbook.gemma.bootstrap.resample`, the loop above) are read instead of
    resampled here; an entry of another result or other settings is refused."""
    if stored is not None:  # the draws were computed by the gemma_bootstrap experiment: no memo needed
        return _story_bootstrap(result, family, int(n_boot), int(seed), layer, float(level), stored)
    return _story_bootstrap_memo(result, family, int(n_boot), int(seed), layer, float(level))


def story_bootstrap_reading(boot: Mapping) -> str:
    """The verdict over the data, from :func:`story_bootstrap`: the eNTK **leads** PCA when the
    interval of the macro AP difference (eNTK − PCA) lies above 0, **trails** it when below, and the
    two cannot be told apart over the data when it includes 0 (AP is the verdict metric, AUROC is
    quoted beside it); then the tasks whose own interval of the AP difference lies above 0 (below 0)
    beside the split-based robust wins of the stored entry (:func:`robust_wins`)."""
    fam, macro_ap = FAMILIES[boot["family"]], boot["macro"]["ap"]
    pct = f"{boot['level']:.0%}"
    head = (f"Over {boot['n_boot']} resamples of the {boot['stories']} stories (N = {boot['N']}; a cluster bootstrap "
            f"with the eNTK modes and the principal components held fixed, one fresh split by story per resample)")
    unsplit = (f" ({boot['unsplit']} of the resamples drew fewer distinct stories than a split needs)"
               if boot["unsplit"] else "")
    kind = {"pos": "part-of-speech", "morph": "morphological"}[boot["family"]]
    if not boot["tasks"]:
        return head + f", there is no {kind} task to evaluate: none passed the filters and the stored splits."
    if macro_ap is None:
        return head + (f", no {kind} task could be evaluated in every resample{unsplit}, so there is no macro "
                       "interval.")
    n = len(boot["macro_tasks"])
    parts = []
    for m, name in (("ap", "AP"), ("auroc", "AUROC")):
        mm = boot["macro"][m]
        parts.append(f"in macro {name} {mm['diff'].mean:+.3f} ({pct} interval {mm['diff'].lo:+.3f} to "
                     f"{mm['diff'].hi:+.3f}; eNTK ahead in {mm['share_ahead']:.0%} of the resamples)")
    text = head + f", the eNTK − PCA difference over the {n} {fam} is " + " and ".join(parts) + ". "
    d = macro_ap["diff"]
    if d.above(0):
        text += "So over the data the eNTK leads PCA by macro AP: the interval lies above 0."
    elif d.below(0):
        text += "So over the data the eNTK trails PCA by macro AP: the interval lies below 0."
    else:
        text += "So over the data the eNTK and PCA cannot be told apart by macro AP: the interval includes 0."
    per = {t: v["ap"] for t, v in boot["per_task"].items() if v["ap"] is not None}
    above = [t for t, v in per.items() if v["diff"].above(0)]
    below = [t for t, v in per.items() if v["diff"].below(0)]
    wins = boot["split_wins"]["ap"]
    text += (" Per task, the interval of the AP difference lies above 0 for "
             + (f"{len(above)} of {len(per)} ({', '.join(above)})" if above else f"none of the {len(per)}")
             + f" and below 0 for {', '.join(below) or 'none'}; the split-based robust wins (ahead in at least "
             f"{WIN_SHARE:.0%} of the {boot['n_splits']} stored splits) are "
             + (f"{len(wins)} ({', '.join(wins)})." if wins else "none."))
    only_split = [t for t in wins if t not in above]
    only_boot = [t for t in above if t not in wins]
    if only_split:
        text += f" Won over the splits but not over the data: {', '.join(only_split)}."
    if only_boot:
        text += f" Ahead over the data but not a robust win over the splits: {', '.join(only_boot)}."
    skipped = {t: k for t, k in boot["skipped"].items() if k}
    if skipped:
        text += (" Skipped in some resamples (one class on a side), and so left out of the macro: "
                 + ", ".join(f"{t} ({k} of {boot['n_boot']})" for t, k in skipped.items()) + ".")
    return text


def story_bootstrap_table(entries: Mapping[str, Result], n_boot: int = BOOT_N, seed: int = 0,
                          stored: Mapping[str, Result] | None = None) -> list[dict]:
    """One row per (entry, family) for the chapter: ``entry`` (the label given), ``family``, ``N``,
    ``stories``, ``tasks`` (in the macro), ``ap``/``auroc`` (the macro difference's
    :class:`~ntkbook.claims.intervals.Interval`, None without a macro), ``ap_share``/``auroc_share``
    (resamples with the eNTK ahead), ``split_ap`` (the stored splits' macro AP difference: mean, sd,
    share ahead) and ``boot`` (:func:`story_bootstrap` at ``n_boot``, ``seed``; from the
    ``gemma_bootstrap`` entry ``stored[label]`` where one is given)."""
    rows = []
    stored = stored or {}
    for label, result in entries.items():
        for fam in FAMILIES:
            boot = story_bootstrap(result, fam, n_boot, seed, stored=stored.get(label))
            mac = boot["macro"]
            rows.append({"entry": label, "family": fam, "N": boot["N"], "stories": boot["stories"],
                         "tasks": len(boot["macro_tasks"]),
                         **{m: mac[m]["diff"] if mac[m] else None for m in ("ap", "auroc")},
                         **{f"{m}_share": mac[m]["share_ahead"] if mac[m] else None for m in ("ap", "auroc")},
                         "split_ap": boot["split_macro"]["ap"], "boot": boot})
    return rows
