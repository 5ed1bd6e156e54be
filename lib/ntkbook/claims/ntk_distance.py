"""Paper A's distance claims judged on stored results: the distance to the NTK against width
(ntk_distance, ntk_distance_fullbatch).

``A.distance.relu`` (2L-ReLU's :math:`\\lVert f_m - f_{\\mathrm{NTK}}\\rVert` decreases with width)
and ``A.distance.attn`` (MLP-Attn's increases or oscillates). A measurement is a **line** (how the
networks are trained) read against a **comparator** (what the network is compared with), one stored
distance per (task, model, width, seed), :data:`LINES`:

- the network's **own linearisation** (``dist_net_lin``; its first-order Taylor model around the
  initial weights, trained by the same recipe from the same weights): the Adam line (the paper's
  recipe) of ``ntk_distance`` and the full-batch line of ``ntk_distance_fullbatch``;
- the **infinite-width NTK predictor** trained the same way (``dist_test_T``; the analytic NTK's
  linear model after the same gradient-descent steps, exact): the GD line of ``ntk_distance``;
- shown, not judged: the **converged kernel regression** :math:`f_{\\mathrm{NTK},\\infty}`
  (``dist_net_ntk``) of the two Adam lines. Adam at a fixed learning rate has no kernel limit (its
  step in function space grows like :math:`\\sqrt m`), so no width brings an Adam-trained network
  to it: its trend measures training, not width.

The paper's comparator (:data:`PAPER_COMPARATOR`) is the infinite-width NTK predictor: the paper
measures :math:`\\lVert f_m - f_{\\mathrm{NTK}}\\rVert`, and its theory asks for the width at which
MLP-Attn "stays near its infinite-width NTK" (project notes on Paper A); it never mentions the
network's own linearisation. The GD line is where we know that predictor exactly.

Per line, task and model, the log-log slope of the distance against width is computed **per seed**
(:func:`ntkbook.stats.loglog_slope`; a width where a seed's distance is exactly 0 is left out, a
seed positive at fewer than two widths has no slope) and read through its :data:`LEVEL
<ntkbook.claims.intervals.LEVEL>` t interval over seeds (:func:`seed_interval`): "decreasing" when
the interval lies below 0, "increasing" above 0, "flat/unresolved" otherwise (and with fewer than
two seeds). A (line, task, model) is **tested** when every network of it trained
(:func:`ntkbook.lazy.distance.trained`: training accuracy at least ``TRAINED_ACC``, MSE at most
``TRAINED_MSE``; the GD line stores no training accuracy, so its MSE part) and it has at least two
seeds with a slope.

Rule: "reproduces" when the paper's direction (2L-ReLU decreasing, MLP-Attn increasing) holds on
every tested task against the paper's comparator (at least one); "partly" when it holds on some
tested line and task against either judged comparator; "does not" when on none; "not tested" when
nothing is tested. 2L-ReLU's rows read the 5-seed runs of :data:`RELU_SEEDS` in place of the paper
presets where those are stored (:func:`results_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ntkbook import verdicts
from ntkbook.claims import NOT_TESTED
from ntkbook.claims.intervals import LEVEL, Interval, seed_interval
from ntkbook.experiments import make_config, ntk_distance, ntk_distance_fullbatch, store_for
from ntkbook.lazy import distance
from ntkbook.stats import loglog_slope
from ntkbook.store import Result, canonical_json

__all__ = ["EXPERIMENTS", "COMPARATORS", "PAPER_COMPARATOR", "Line", "LINES", "RELU_SEEDS",
           "Slope", "results_for", "seed_slopes", "direction", "slope", "slopes", "distance_table",
           "distance_row", "ntk_distance_scorecard", "ntk_distance_fullbatch_scorecard", "scorecard"]

EXPERIMENTS = ("ntk_distance", "ntk_distance_fullbatch")

#: comparator -> what the network is compared with, in text
COMPARATORS = {
    "linearisation": "its own linearisation",
    "infinite": "the infinite-width NTK predictor",
    "converged": "the converged kernel regression",
}
#: the comparator the paper's distance uses (module docstring)
PAPER_COMPARATOR = "infinite"


@dataclass(frozen=True)
class Line:
    """One stored distance: ``key`` of ``experiment``'s ``line`` ("adam", "gd" or "fullbatch"),
    against ``comparator`` (a key of :data:`COMPARATORS`); ``judged``: whether verdicts read it."""

    experiment: str
    line: str
    key: str
    comparator: str
    label: str
    judged: bool = True

    @property
    def text(self) -> str:
        """"full-batch Adam, against its own linearisation"."""
        return f"{self.label}, against {COMPARATORS[self.comparator]}"


#: every distance the rows and tables read: the paper's comparator first, the ones not judged last
LINES = (
    Line("ntk_distance", "gd", "dist_test_T", "infinite", "exact GD"),
    Line("ntk_distance", "adam", "dist_net_lin", "linearisation", "Adam (paper's recipe)"),
    Line("ntk_distance_fullbatch", "fullbatch", "dist_net_lin", "linearisation", "full-batch Adam"),
    Line("ntk_distance", "adam", "dist_net_ntk", "converged", "Adam (paper's recipe)", judged=False),
    Line("ntk_distance_fullbatch", "fullbatch", "dist_net_ntk", "converged", "full-batch Adam", judged=False),
)

#: 2L-ReLU with five seeds (config overrides on the paper preset, per experiment), computed after
#: the paper presets: the verdict on 2L-ReLU must not hinge on one seed of three. Each point depends
#: only on its task, model, width and seed, so seeds 0-2 are the paper presets' own points; the Adam
#: line keeps its tasks and widths, the GD line its tasks and widths up to 4096.
RELU_SEEDS = {
    "ntk_distance": {"models": ("relu",), "seeds": (0, 1, 2, 3, 4), "wide_models": (), "budget_models": ()},
    "ntk_distance_fullbatch": {"models": ("relu",), "seeds": (0, 1, 2, 3, 4)},
}

_MODULES = {"ntk_distance": ntk_distance, "ntk_distance_fullbatch": ntk_distance_fullbatch}
_PAPER_DIRECTION = {"relu": "decreasing", "attn": "increasing"}
_CLAIMS = {"relu": "A.distance.relu", "attn": "A.distance.attn"}


def _is_paper_preset(result: Result) -> bool:
    return canonical_json(result.config) == canonical_json(make_config(result.name, "paper"))


def results_for(results: Mapping[str, Result], model: str) -> dict[str, Result]:
    """The results the rows of ``model`` read: ``results``, except that for 2L-ReLU the stored
    :data:`RELU_SEEDS` entry of an experiment replaces its paper preset (only the paper preset: a
    result of another scale or config is read as given)."""
    out = dict(results)
    if model != "relu":
        return out
    store = None
    for name, overrides in RELU_SEEDS.items():
        if name in out and _is_paper_preset(out[name]):
            store = store or store_for("paper")
            config, version = make_config(name, "paper", **overrides), _MODULES[name].VERSION
            if store.has(name, version, config):
                out[name] = store.load(name, version, config)
    return out


@dataclass(frozen=True)
class Slope:
    """The log-log slope of one line's distance against width for one task and model:
    ``per_seed`` ``(seeds,)`` (NaN for a seed positive at fewer than two widths), their interval
    (None with fewer than two finite slopes), and whether every network trained."""

    line: Line
    task: str
    model: str
    widths: tuple[int, ...]
    per_seed: np.ndarray
    interval: Interval | None
    trained: bool

    @property
    def direction(self) -> str:
        """:func:`direction` of the interval."""
        return direction(self.interval)

    @property
    def tested(self) -> bool:
        """Every network trained and there is an interval."""
        return self.trained and self.interval is not None and self.interval.known

    def text(self) -> str:
        """"−0.340 [−0.391, −0.286]" (or the one seed's slope, or that there is none)."""
        if self.interval is None:
            finite = self.per_seed[np.isfinite(self.per_seed)]
            return f"{finite[0]:+.3f} (one seed)" if finite.size else "none (positive at fewer than two widths)"
        return self.interval.text("+.3f")


def _distances(result: Result, line: Line, task: str, model: str):
    """``(widths (W,), distances (W, seeds), trained)`` of ``line`` for ``task`` and ``model``."""
    if line.line == "fullbatch":
        d = ntk_distance_fullbatch.table(result, line.key)
        mse = ntk_distance_fullbatch.table(result, "train_mse_net")
        acc = ntk_distance_fullbatch.table(result, "acc_train_net")
        ws = sorted(w for (m, w) in d if m == model)
        ok = distance.trained(np.concatenate([acc[(model, w)] for w in ws]),
                              np.concatenate([mse[(model, w)] for w in ws]))
        return np.asarray(ws), np.stack([d[(model, w)] for w in ws]), ok
    ws, d = ntk_distance.point_values(result, task, model, line.key, line=line.line)
    if line.line == "adam":
        return ws, d, ntk_distance.is_trained(result, task, model)
    _, mse = ntk_distance.point_values(result, task, model, "train_mse_T")
    return ws, d, bool(np.all(mse <= distance.TRAINED_MSE))


def seed_slopes(widths, values) -> tuple[np.ndarray, Interval | None]:
    """The log-log slope of ``values`` ``(W, seeds)`` against ``widths`` ``(W,)`` for each seed
    (:func:`ntkbook.stats.loglog_slope`: widths where the seed's value is 0 are left out, NaN when
    fewer than two are left) and the interval over the finite ones (None when fewer than two)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[:, None] if v.ndim == 1 else v
    per_seed = np.array([loglog_slope(widths, v[:, j]) for j in range(v.shape[1])])
    finite = per_seed[np.isfinite(per_seed)]
    return per_seed, (seed_interval(finite) if finite.size >= 2 else None)


def direction(interval: Interval | None) -> str:
    """"decreasing" when the interval of a slope lies below 0, "increasing" above 0, else (also
    with no interval) "flat/unresolved"."""
    if interval is not None and interval.below(0.0):
        return "decreasing"
    if interval is not None and interval.above(0.0):
        return "increasing"
    return "flat/unresolved"


def slope(result: Result, line: Line, task: str, model: str) -> Slope:
    """The per-seed slopes of ``line`` for ``task`` and ``model`` with their interval."""
    ws, d, ok = _distances(result, line, task, model)
    per_seed, iv = seed_slopes(ws, d)
    return Slope(line, task, model, tuple(int(w) for w in ws), per_seed, iv, ok)


def _tasks(result: Result, line: Line, model: str) -> list[str]:
    cfg = result.config
    if model not in cfg["models"]:
        return []
    if line.line == "fullbatch":
        return [result["task"]]
    table = result["table"]
    if line.line == "gd":
        return [t for t in cfg["tasks"] if f"{t}/{model}" in table]
    return [t for t in cfg["adam_tasks"] if "constant" in table.get(f"{t}/{model}", {}).get("adam", {})]


def slopes(results: Mapping[str, Result], model: str, lines=LINES) -> list[Slope]:
    """Every :class:`Slope` of ``model`` over ``lines`` (default :data:`LINES`) whose experiment is
    in ``results`` (for the rows' reading, pass :func:`results_for`)."""
    return [slope(results[ln.experiment], ln, task, model)
            for ln in lines if ln.experiment in results for task in _tasks(results[ln.experiment], ln, model)]


def distance_table(found: list[Slope]) -> tuple[list[str], list[list]]:
    """``(header, rows)`` of a table of slopes: per task, model and line with its comparator, the
    mean per-seed slope with its interval, the direction, the seeds and whether every network
    trained."""
    header = ["task", "model", "line, against", f"slope [{LEVEL:.0%} interval]", "direction", "seeds",
              "trained"]
    rows = [[distance.TASK_LABELS[s.task], distance.MODELS[s.model], s.line.text
             + ("" if s.line.judged else " (not judged)"), s.text(), s.direction,
             int(np.isfinite(s.per_seed).sum()), "yes" if s.trained else "no"] for s in found]
    return header, rows


def distance_row(results: Mapping[str, Result], model: str) -> dict | None:
    """The scorecard row of ``model``'s distance claim (module docstring's rule) from
    :func:`results_for` ``(results, model)``; None when no line of it is stored."""
    used = results_for(results, model)
    found = [s for s in slopes(used, model) if s.line.judged]
    if not found:
        return None
    want = _PAPER_DIRECTION[model]
    tested = [s for s in found if s.tested]
    paper = [s for s in tested if s.line.comparator == PAPER_COMPARATOR]
    held = [s for s in tested if s.direction == want]
    verdict = (NOT_TESTED if not tested else
               verdicts.ladder(bool(paper) and all(s.direction == want for s in paper), bool(held)))
    parts = []
    for s in found:
        n = int(np.isfinite(s.per_seed).sum())
        parts.append(f"{distance.TASK_LABELS[s.task]}, {s.line.text}: slope {s.text()} ({s.direction}, "
                     f"{n} {'seed' if n == 1 else 'seeds'}" + ("" if s.trained else ", not trained") + ")")
    swapped = [name for name in RELU_SEEDS if name in used and used[name] is not results[name]]
    note = (f"reproduces when the paper's direction ({want}) holds on every tested task against "
            f"{COMPARATORS[PAPER_COMPARATOR]} (the exact GD line; the paper measures the distance to "
            f"f_NTK, its theory the width to stay near the infinite-width NTK), the {LEVEL:.0%} interval over "
            f"seeds of the per-seed log-log slope excluding 0 with the paper's sign; partly when it "
            f"holds on some tested line and task against either comparator (also {COMPARATORS['linearisation']}); "
            f"tested: every network trained (training accuracy at least {distance.TRAINED_ACC:.0%} and "
            f"MSE at most {distance.TRAINED_MSE:g}; on the GD line the MSE) and two seeds or more")
    if swapped:
        note += "; 2L-ReLU read from the stored 5-seed runs (RELU_SEEDS) of " + " and ".join(swapped)
    if not tested:
        note += "; nothing tested: no line whose networks all trained, with two seeds or more"
    if verdict == verdicts.PARTLY and not any(s.direction == want for s in paper):
        # the partly rests on the substitute comparator alone: say so, and on which lines
        against = ("not tested (no line of it whose networks all trained)" if not paper else
                   "not borne out (" + ", ".join(f"{distance.TASK_LABELS[s.task]}: {s.direction}"
                                                        for s in paper) + ")")
        note += (f"; against the paper's comparator, {COMPARATORS[PAPER_COMPARATOR]}, the claim is {against}: "
                 f"the partly rests only on a comparator the paper does not use, "
                 f"{COMPARATORS['linearisation']}, on "
                 + "; ".join(f"{s.line.label}, {distance.TASK_LABELS[s.task]}" for s in held))
    # the source line credits the entries read (the 5-seed runs where they replaced a paper preset)
    return {"claim": _CLAIMS[model], "ours": "; ".join(parts), "verdict": verdict, "note": note,
            "from": tuple(used[name] for name in EXPERIMENTS if name in used)}


def ntk_distance_scorecard(result: Result) -> list[dict]:
    """Rows for ``A.distance.relu`` and ``A.distance.attn`` from one ``ntk_distance`` result by that
    experiment's own rule (formerly ``ntkbook.experiments.ntk_distance.scorecard``), on its Adam
    line only. The scorecard shows :func:`scorecard` instead (the rule of the module docstring,
    over every line and comparator).

    Rule: on each task of the Adam line, the distance between the network and its own linearisation
    (the paper's recipe, constant lr) has a log-log slope against width; the paper's direction
    (2L-ReLU decreasing, MLP-Attn increasing) holds on a task when the slope is beyond
    ``SLOPE_FLAT`` with the paper's sign (or the distance rises from exactly 0). Reproduces: the
    direction holds on every task and every network there trained (training MSE at most
    ``TRAINED_MSE``); does not: the direction holds on no task; partly: anything in between (in
    particular the direction holding only for networks that did not train).
    """
    cfg = result.config
    tasks = [t for t in cfg["adam_tasks"] if f"{t}/relu" in result["table"] and f"{t}/attn" in result["table"]]
    if not tasks or "constant" not in cfg["lr_rules"]:
        return []
    rows = []
    for model, claim, want in (("relu", "A.distance.relu", "decreasing"), ("attn", "A.distance.attn", "increasing")):
        parts, held, full = [], 0, 0
        for task in tasks:
            w, d = ntk_distance.point_values(result, task, model, "dist_net_lin", line="adam")
            s, tr = distance.width_trend(w, d)
            trained = ntk_distance.is_trained(result, task, model)
            held += tr == want
            full += tr == want and trained
            mu = d.mean(axis=1)
            parts.append(f"{distance.TASK_LABELS[task]}: {mu[0]:.2g} → {mu[-1]:.2g} at m = {w[0]}–{w[-1]} ({tr}, slope {s:+.3f}"
                         + ("" if trained else f"; not trained: training accuracy below {distance.TRAINED_ACC:.0%} "
                                                   f"or MSE above {distance.TRAINED_MSE:g}") + ")")
        verdict = verdicts.ladder(full == len(tasks), held > 0)
        gd_parts = []
        for task in tasks:
            w, d = ntk_distance.point_values(result, task, model, "dist_test_T")
            gd_parts.append(distance.width_trend(w, d)[1])
        rows.append({
            "claim": claim,
            "ours": "; ".join(parts),
            "verdict": verdict,
            "note": (f"Network vs its own linearisation, paper's Adam recipe, "
                     f"{len(cfg['seeds'])} {'seed' if len(cfg['seeds']) == 1 else 'seeds'}, RMS over test points; "
                     f"paper's direction: {want}; against the exact "
                     f"GD-trained NTK predictor the distance is {' / '.join(gd_parts)}."),
        })
    return rows


def ntk_distance_fullbatch_scorecard(result: Result) -> list[dict]:
    """Rows for ``A.distance.relu`` and ``A.distance.attn`` from one ``ntk_distance_fullbatch``
    result (formerly ``ntkbook.experiments.ntk_distance_fullbatch.scorecard``), by
    :func:`ntk_distance_scorecard`'s rule: the paper's direction (2L-ReLU decreasing, MLP-Attn
    increasing) by the log-log slope of the mean distance to the network's own linearisation;
    reproduces when it holds and every network trained, partly when it holds for networks that did
    not all train, does not otherwise. (The scorecard shows :func:`scorecard` instead, which reads
    this line too.)"""
    table = ntk_distance_fullbatch.table
    rows = []
    cfg = result.config
    mse, acc = table(result, "train_mse_net"), table(result, "acc_train_net")
    d = table(result, "dist_net_lin")
    task = distance.TASK_LABELS[result["task"]]
    for model, claim, want in (("relu", "A.distance.relu", "decreasing"), ("attn", "A.distance.attn", "increasing")):
        if model not in cfg["models"]:
            continue
        log_slope, tr = ntk_distance_fullbatch.trend(result, model)
        ws = sorted(w for (m, w) in d if m == model)
        ok = all(distance.trained(acc[(model, w)].mean(), mse[(model, w)].mean()) for w in ws)
        verdict = verdicts.ladder(tr == want and ok, tr == want)
        rows.append({"claim": claim,
                     "ours": (f"{task}, full-batch Adam: {d[(model, ws[0])].mean():.2g} → {d[(model, ws[-1])].mean():.2g} "
                              f"at m = {ws[0]}–{ws[-1]} ({tr}, slope {log_slope:+.3f}"
                              + ("; every network trained)" if ok else "; not every network trained)")),
                     "verdict": verdict,
                     "note": (f"network vs its own linearisation, {cfg['steps']:,} full-batch Adam steps, lr {cfg['lr']:g}, "
                              f"no L2, {len(cfg['seeds'])} seeds; paper's direction: {want}")})
    return rows


def scorecard(results: Mapping[str, Result]) -> list[dict]:
    """``A.distance.relu`` and ``A.distance.attn`` from the stored distance results present in
    ``results``."""
    rows = []
    for model in _CLAIMS:
        row = distance_row(results, model)
        if row is not None:
            rows.append(row)
    return rows
