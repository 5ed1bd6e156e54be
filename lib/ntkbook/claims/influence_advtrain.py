r"""Readings of :mod:`ntkbook.experiments.influence_advtrain`: does adversarial training raise the
PGD flip rate where the flip rate is not saturated?

Every number is a fraction (0 to 1), per (task, model, eps), over the result's seeds, at one ridge
(by default the first of ``result["ridges"]``, ``A = K + lam I``):

- :func:`summary`: the mean and spread (:func:`ntkbook.stats.mean_spread`, sample standard
  deviation) of the standard and the adversarial network's PGD flip rate, random-sign null,
  clean-share independence level ("ceiling"), Spearman rho and training record; the **difference** adversarial -
  standard with its **interval**: the Student-t interval (:data:`LEVEL`, ``n - 1`` degrees of
  freedom, :func:`t_interval`) of the mean of the per-seed paired differences (the two networks of
  a seed share their initialisation, batch order, attack key and null draws); and the difference
  as a fraction of the **headroom**, the standard network's mean ceiling minus its mean flip rate
  (the interval's ends divided by the same headroom, taken as fixed).
- :func:`verdict_rows`: per (task, model, eps) whether adversarial training raises the flip rate
  (the interval lies above zero) and whether the comparison is judged at all: by the
  **headroom rule** (:func:`below_ceiling`) both networks must be clearly below their own
  clean-share independence levels (stored as "ceiling"; a reference level, not a bound), both must
  have trained (:data:`ntkbook.influence.readout.TRAINED_ACC` reached in clean training accuracy
  by every seed; else the row is "not tested"), and the standard network must not already be
  robust at that radius (its robust training accuracy below :data:`ROBUST_ALREADY` on some seed;
  else adversarial training has no misclassified example to train on, and the row is "already
  robust", not judged).
- :func:`claim_verdict`: the scorecard ladder over those rows for one model.

:data:`PAPER` holds the paper's numbers.
"""

from __future__ import annotations

import math

import numpy as np

from ntkbook import claims, verdicts
from ntkbook.claims.intervals import LEVEL, seed_interval
from ntkbook.experiments.influence_advtrain import eval_key, record_key
from ntkbook.influence.readout import TRAINED_ACC
from ntkbook.stats import mean_spread
from ntkbook.store import Result

__all__ = ["PAPER", "LEVEL", "HEADROOM_MARGIN", "NOT_TESTED", "SATURATED", "TOO_FEW_SEEDS", "RISES",
           "FALLS", "NO_CLEAR_CHANGE", "ALREADY_ROBUST", "ROBUST_ALREADY", "t_interval", "below_ceiling", "summary", "verdict_rows",
           "claim_verdict"]

#: Paper A's PGD flip rate (%) under standard and under adversarial training, at eps = 0.3:
#: (task, model) -> (standard, adversarial). Source: the paper's adversarial-training results as
#: summarised in secondary notes of the paper; the paper text available to us (arXiv HTML
#: 2603.13085, front matter and introduction) does not reach its tables, so no table number can
#: be given. Only MNIST 2L-ReLU's 3.3 -> 43.4 is also in the project's reference
#: (shared/docs/papers.md, "Adversarial training"); the other three rows are from the notes alone.
PAPER = {
    ("mnist10", "relu"): (3.3, 43.4),  # notes; also papers.md
    ("mnist10", "attn"): (28.9, 42.2),  # notes only
    ("cifar10", "relu"): (3.1, 36.5),  # notes only
    ("cifar10", "attn"): (19.1, 38.6),  # notes only
}

#: confidence level of every interval over seeds: the one of ntkbook.claims.intervals
#: the headroom rule: a network's flip rate is clearly below its ceiling when the lower end of the
#: interval of the per-seed gap (ceiling - flip rate) is at least this (5 percentage points)
HEADROOM_MARGIN = 0.05

#: the standard network is "already robust" at a radius when its mean robust training accuracy
#: (training accuracy under the evaluation PGD) reaches this: adversarial training has then no
#: misclassified example to learn from, and the radius is not judged
ROBUST_ALREADY = 0.99

#: the outcomes of :func:`verdict_rows`
NOT_TESTED = claims.NOT_TESTED  # a network (standard, or adversarial at this eps) did not train
SATURATED = "saturated"  # a flip rate is not clearly below its ceiling: not judged
TOO_FEW_SEEDS = "too few seeds"  # one seed: no interval
RISES = "rises"  # judged, the interval of the difference lies above zero
FALLS = "falls"  # judged, the interval lies below zero
NO_CLEAR_CHANGE = "no clear change"  # judged, the interval holds zero
ALREADY_ROBUST = "already robust"  # the standard network is robust at this radius: not judged


def t_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """The Student-t interval of the mean of ``values`` (``(S,)``, one per seed) at ``level``:
    ``mean +- t_{(1 + level)/2, S - 1} * sd / sqrt(S)`` with the sample standard deviation; NaNs
    for fewer than two values."""
    iv = seed_interval(values, level)
    return iv.lo, iv.hi


def _values(result: Result, task: str, model: str, key: str) -> np.ndarray:
    """The per-seed values ``(S,)`` of ``key`` in ``table["<task>/<model>"]``."""
    return np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64)


def _ridge(result: Result, ridge: str | None) -> str:
    ridges = list(result["ridges"])
    if ridge is None:
        return ridges[0]
    if ridge not in ridges:
        raise KeyError(f"no ridge {ridge!r} in the result; it has {ridges}")
    return ridge


def below_ceiling(flip, ceiling, margin: float = HEADROOM_MARGIN) -> bool:
    """The headroom rule: the flip rates ``(S,)`` are clearly below the ceilings ``(S,)`` of the same
    networks when the lower end of the :func:`t_interval` of the per-seed gaps ``ceiling - flip``
    is at least ``margin``. False for fewer than two seeds (no interval)."""
    low, _ = t_interval(np.asarray(ceiling, np.float64) - np.asarray(flip, np.float64))
    return bool(low >= margin)


def _network(result: Result, task: str, model: str, training: str, eps: float, ridge: str) -> dict:
    """Per-seed values of one training's network at ``eps``."""
    out = {"flip": _values(result, task, model, eval_key(training, eps, f"pgd/{ridge}/flip")),
           "rho": _values(result, task, model, eval_key(training, eps, f"pgd/{ridge}/rho")),
           "null": _values(result, task, model, eval_key(training, eps, f"null/{ridge}/flip")),
           "ceiling": _values(result, task, model, eval_key(training, eps, f"{ridge}/ceiling")),
           "robust_train_acc": _values(result, task, model, eval_key(training, eps, "robust_train_acc"))}
    for name in ("train_loss", "train_acc", "test_acc"):
        out[name] = _values(result, task, model, record_key(training, eps, name))
    if training == "adversarial":
        out["adv_loss"] = _values(result, task, model, record_key(training, eps, "adv_loss"))
    return out


def summary(result: Result, ridge: str | None = None) -> list[dict]:
    """One dict per (task, model, eps) of the result, in its order: ``task``, ``model``, ``eps``,
    ``ridge``, ``seeds`` (their number); ``standard`` and ``adversarial``: ``{measure: (mean,
    spread)}`` for ``flip``, ``rho``, ``null``, ``ceiling``, ``robust_train_acc``, ``train_loss``,
    ``train_acc``, ``test_acc`` (and ``adv_loss`` for the adversarial network), with ``trained``
    (every seed at :data:`TRAINED_ACC` or above) and ``below_ceiling`` (:func:`below_ceiling`);
    ``difference`` (mean of adversarial - standard flip rate per seed) and its ``interval``
    (:func:`t_interval`); ``headroom`` (standard mean ceiling - mean flip rate),
    ``headroom_fraction`` (difference / headroom; NaN when the headroom is not positive) and
    ``headroom_fraction_interval``."""
    ridge = _ridge(result, ridge)
    cfg = result.config
    rows = []
    for task in cfg["tasks"]:
        for model in cfg["models"]:
            for eps in cfg["eps"]:
                nets = {t: _network(result, task, model, t, eps, ridge) for t in ("standard", "adversarial")}
                row = {"task": task, "model": model, "eps": float(eps), "ridge": ridge,
                       "seeds": int(nets["standard"]["flip"].size)}
                for training, values in nets.items():
                    block = {k: mean_spread(v) for k, v in values.items()}
                    block["trained"] = bool(np.all(values["train_acc"] >= TRAINED_ACC))
                    block["below_ceiling"] = below_ceiling(values["flip"], values["ceiling"])
                    row[training] = block
                diff = nets["adversarial"]["flip"] - nets["standard"]["flip"]
                row["difference"] = float(diff.mean())
                row["interval"] = t_interval(diff)
                headroom = row["standard"]["ceiling"][0] - row["standard"]["flip"][0]
                row["headroom"] = headroom
                scale = headroom if headroom > 0 else math.nan
                row["headroom_fraction"] = row["difference"] / scale
                row["headroom_fraction_interval"] = (row["interval"][0] / scale, row["interval"][1] / scale)
                rows.append(row)
    return rows


def verdict_rows(result: Result, ridge: str | None = None) -> list[dict]:
    """Per (task, model, eps), from :func:`summary`: ``task``, ``model``, ``eps``, ``difference``,
    ``interval``, ``headroom_fraction``; ``raises`` (the interval lies above zero), ``unsaturated``
    (the headroom rule holds for both networks: :func:`below_ceiling`), ``tested`` (both networks
    trained), and ``outcome``, the first that applies of :data:`NOT_TESTED`,
    :data:`TOO_FEW_SEEDS`, :data:`ALREADY_ROBUST`, :data:`SATURATED`, :data:`RISES`, :data:`FALLS`,
    :data:`NO_CLEAR_CHANGE`; ``note`` says which network did not train or which is at its
    ceiling."""
    out = []
    for row in summary(result, ridge):
        std, adv = row["standard"], row["adversarial"]
        low, high = row["interval"]
        untrained = [t for t in ("standard", "adversarial") if not row[t]["trained"]]
        at_ceiling = [t for t in ("standard", "adversarial") if not row[t]["below_ceiling"]]
        if untrained:
            outcome = NOT_TESTED
            note = (f"{' and '.join(untrained)} network{'s' if len(untrained) > 1 else ''} below "
                    f"{TRAINED_ACC:.0%} training accuracy on some seed")
        elif row["seeds"] < 2:
            outcome, note = TOO_FEW_SEEDS, "one seed: no interval"
        elif std["robust_train_acc"][0] >= ROBUST_ALREADY:
            outcome = ALREADY_ROBUST
            note = (f"the standard network already keeps {std['robust_train_acc'][0]:.0%} training "
                    f"accuracy under this PGD: adversarial training has nothing to correct")
        elif at_ceiling:
            outcome = SATURATED
            note = (f"{' and '.join(at_ceiling)} flip rate{'s' if len(at_ceiling) > 1 else ''} not clearly "
                    f"below the clean-share independence level (the gap's interval reaches below "
                    f"{HEADROOM_MARGIN:.0%})")
        else:
            outcome = RISES if low > 0 else FALLS if high < 0 else NO_CLEAR_CHANGE
            note = ""
        out.append({"task": row["task"], "model": row["model"], "eps": row["eps"],
                    "standard": std["flip"][0], "adversarial": adv["flip"][0],
                    "difference": row["difference"], "interval": row["interval"],
                    "headroom_fraction": row["headroom_fraction"],
                    "raises": bool(low > 0), "unsaturated": not at_ceiling,
                    "tested": not untrained, "outcome": outcome, "note": note})
    return out


def claim_verdict(rows: list[dict], model: str = "relu") -> tuple[str | None, str]:
    """The verdict on "adversarial training raises ``model``'s PGD flip rate" over the rows of
    :func:`verdict_rows` of that model that were judged (outcome :data:`RISES`, :data:`FALLS` or
    :data:`NO_CLEAR_CHANGE`): "reproduces" if it rises at every one of them, "partly" at some,
    "does not" at none; ``None`` when no row was judged (every one not tested, saturated or with
    one seed). Returns ``(verdict, note)``, the note listing every row's outcome and how many
    radii the verdict rests on."""
    from ntkbook.influence.tasks import TASK_LABELS

    mine = [r for r in rows if r["model"] == model]
    judged = [r for r in mine if r["outcome"] in (RISES, FALLS, NO_CLEAR_CHANGE)]
    note = "; ".join(f"{TASK_LABELS.get(r['task'], r['task'])} eps {r['eps']:g}: {r['outcome']}" for r in mine)
    if judged:
        note += (f"; the verdict rests on {len(judged)} radi{'us' if len(judged) == 1 else 'i'} "
                 f"(eps {', '.join(f'{r['eps']:g}' for r in judged)})")
    if not judged:
        return None, note
    rises = [r["outcome"] == RISES for r in judged]
    return verdicts.ladder(all(rises), any(rises)), note
