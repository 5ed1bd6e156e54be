"""Paper A's influence claims judged on the stored results: the flip rates (from the influence
map, :mod:`ntkbook.claims.influence_map`), each against the paper's own number for its task.

The paper's per-task table is at eps = 0.3 (pixels in [0, 1]) with a small ridge; it also ablates
eps over {0.1, 0.2, 0.3, 0.5} (on which task and with which numbers is not in the paper text
available to us). At eps = 0.3 both models' flip rates reach or pass the clean-share independence
level (the rate of signs drawn from the clean sign shares without regard to the clean signs), where
a ratio between the models no longer measures how easily either flips. Each per-task verdict is
therefore read where 2L-ReLU matches the paper: at the radius of the map at which 2L-ReLU's PGD flip
rate is nearest the paper's 2L-ReLU number for that task
(:func:`ntkbook.claims.influence_map.matched_point`, ridge ``A = K + 1e-3 I``). There:

- **direction**: attention's flip rate exceeds ReLU's, i.e. the :data:`LEVEL
  <ntkbook.claims.intervals.LEVEL>` interval over seeds of the paired difference lies above 0;
- **size**: the interval of attention's rate over ReLU's (paired by seed, geometric mean,
  :func:`ntkbook.claims.intervals.ratio_interval`) lies within a factor :data:`FACTOR` of the
  paper's ratio (PGD). Where it is wider than that band, or a seed's 2L-ReLU flips no point (no
  interval), the size is *not resolved* and does not count as matching;
- **adversarial**: attention's PGD flip rate exceeds its random-sign null of the same norm (the
  interval of the paired difference above 0): the paper's claim is about adversarial
  perturbation, and flips that random signs give as well do not show it.

"reproduces": all three; "partly": the direction; "does not": not the direction. Where the
paper's own ratio is below 2 (CIFAR-10 automobile vs airplane: 0.9x), it claims no gap, and the
size alone stands for the direction;
"not tested": a model of the task did not train (:func:`ntkbook.influence.readout.trained`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ntkbook import verdicts
from ntkbook.claims import NOT_TESTED
from ntkbook.claims import influence_advtrain as adv_claims
from ntkbook.claims import influence_map as imap
from ntkbook.claims import influence_sharpness as sharp_claims
from ntkbook.claims.intervals import LEVEL, seed_interval
from ntkbook.influence.readout import TRAINED_ACC, trained
from ntkbook.influence.tasks import TASK_LABELS, TASKS
from ntkbook.numbers import sci
from ntkbook.store import Result

__all__ = ["EXPERIMENTS", "PAPER", "PAPER_SOURCE", "paper_source", "outside_abstract", "CLAIM_IDS", "paper_ratio", "flip_row", "kappa_of", "kappa_reading", "ratio_row",
           "advtrain_row", "landscape_row", "scorecard"]

#: the experiments whose stored paper-scale results these rules read
EXPERIMENTS = ("influence_map", "influence_advtrain", "influence_malleability", "influence_sharpness",
               "gram_conditioning")

#: Paper A's flip rates (%) of the top-10 % influence scores at eps = 0.3: (task, model) -> {attack: rate}.
#: Source: the paper's per-task flip-rate table as summarised in secondary notes of the paper. The
#: paper text available to us (arXiv HTML 2603.13085, front matter and introduction) does not
#: reach its tables, so no table number can be given; the project's reference
#: (shared/docs/papers.md, "Influence malleability / flip rate") lists only the MNIST MLP-Attn
#: rates and the MNIST 2L-ReLU PGD rate. :data:`PAPER_SOURCE` says which is which.
PAPER = {
    ("mnist10", "relu"): {"fgsm": 4.1, "pgd": 3.3, "mim": 3.4},  # pgd: papers.md; fgsm, mim: notes only
    ("mnist10", "attn"): {"fgsm": 34.6, "pgd": 28.9, "mim": 21.9},  # papers.md
    ("cifar10", "relu"): {"fgsm": 3.3, "pgd": 3.1, "mim": 3.2},  # notes only
    ("cifar10", "attn"): {"fgsm": 26.4, "pgd": 19.1, "mim": 20.5},  # notes only
    ("mnist_3v8", "relu"): {"fgsm": 8.4, "pgd": 8.4, "mim": 8.6},  # notes only
    ("mnist_3v8", "attn"): {"fgsm": 25.9, "pgd": 41.0, "mim": 40.5},  # notes only
    ("cifar_auto_air", "relu"): {"fgsm": 15.2, "pgd": 15.5, "mim": 15.3},  # notes only
    ("cifar_auto_air", "attn"): {"fgsm": 14.3, "pgd": 14.0, "mim": 14.8},  # notes only
}

#: where each of :data:`PAPER`'s numbers is also stated in the project's reference notes on the paper
#: (shared/docs/papers.md); every other number is from the secondary notes alone
_IN_REFERENCE = {("mnist10", "attn", "fgsm"), ("mnist10", "attn", "pgd"), ("mnist10", "attn", "mim"),
                 ("mnist10", "relu", "pgd")}
PAPER_SOURCE = {(t, m, a): ("secondary notes; also papers.md (MNIST MLP-Attn rates, 2L-ReLU PGD)"
                            if (t, m, a) in _IN_REFERENCE else "secondary notes only")
                for (t, m), rates in PAPER.items() for a in rates}


def paper_source(task: str, model: str, attack: str) -> str:
    """Where :data:`PAPER`'s number for (task, model, attack) comes from (:data:`PAPER_SOURCE`)."""
    return PAPER_SOURCE[(task, model, attack)]


#: the scorecard claim of each task's flip rates
CLAIM_IDS = {"mnist10": "A.flip.mnist10", "cifar10": "A.flip.cifar10", "mnist_3v8": "A.flip.mnist38",
             "cifar_auto_air": "A.flip.cifar_auto_air"}

#: the attack the per-task verdicts read (the strongest of the paper's loss attacks)
ATTACK = "pgd"

#: a ratio "matches the paper's" within this factor
FACTOR = 2.0

#: the paper's range for the ratio across data sets (v2 abstract: "2-9x")
PAPER_RANGE = (2.0, 9.0)

#: the radii of the paper's eps ablation (shared/docs/papers.md, "Influence malleability / flip
#: rate": "ablation eps in {0.1, 0.2, 0.3, 0.5}"); its per-task table is at 0.3
PAPER_ABLATION_EPS = (0.1, 0.2, 0.3, 0.5)

#: the paper's first version's range (v1 abstract: "6-9x higher malleability")
PAPER_RANGE_V1 = (6.0, 9.0)


def outside_abstract(attack: str = ATTACK) -> list[tuple[str, float]]:
    """The tasks whose per-task ratio in :data:`PAPER` lies outside the v1 abstract's 6-9x, with
    the ratio: the secondary per-task table and the abstract's range disagree there."""
    lo, hi = PAPER_RANGE_V1
    tasks = sorted({t for t, _ in PAPER}, key=list(CLAIM_IDS).index)
    return [(t, paper_ratio(t, attack)) for t in tasks if not lo <= paper_ratio(t, attack) <= hi]


def paper_ratio(task: str, attack: str = ATTACK) -> float:
    """The paper's attention / ReLU flip-rate ratio for ``task`` under ``attack``."""
    return PAPER[(task, "attn")][attack] / PAPER[(task, "relu")][attack]


def _difference(result: Result, task: str, eps: float):
    return seed_interval(imap.per_seed(result, task, "attn", f"{ATTACK}/{eps:g}/{imap.MAIN_RIDGE}/flip")
                         - imap.per_seed(result, task, "relu", f"{ATTACK}/{eps:g}/{imap.MAIN_RIDGE}/flip"))


def _untrained(result: Result, task: str) -> str:
    bad = [m for m in ("relu", "attn") if not trained(result, task, m)]
    names = {"relu": "2L-ReLU", "attn": "MLP-Attn"}
    acc = ", ".join(f"{names[m]} {np.mean(result['table'][f'{task}/{m}']['train_acc']):.0%}" for m in bad)
    return f"{' and '.join(names[m] for m in bad)} did not train (training accuracy {acc} < {TRAINED_ACC:.0%})"


#: data set -> its name in prose (the keys of :data:`ntkbook.influence.tasks.TASKS`' data sets)
DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10", "fashion-mnist": "Fashion-MNIST"}


def _names(task: str) -> str:
    """The reader's name of a task key (:data:`ntkbook.influence.tasks.TASK_LABELS`)."""
    return TASK_LABELS.get(task, task)


def _dataset(name: str) -> str:
    return DATASET_LABELS.get(name, name)


def size_reading(mp: imap.MatchedPoint, task: str) -> tuple[bool, str]:
    """Whether the ratio at the matched point matches the paper's within :data:`FACTOR` (its
    whole interval lies in the band, as every band rule of the book reads an interval), and how to
    say it: ``"matches"``, ``"off"`` (the interval misses the band) or ``"not resolved"`` (the
    interval is wider than the band, or a seed's 2L-ReLU flips no point, so there is none)."""
    rp = paper_ratio(task)
    if not mp.ratio.known:
        return False, "not resolved"
    if mp.ratio.within(rp / FACTOR, rp * FACTOR):
        return True, "matches"
    return False, "not resolved" if mp.ratio.overlaps(rp / FACTOR, rp * FACTOR) else "off"


def counts_text(counts) -> str:
    """``"2, 2, 0"``: per-seed numbers of flipped top points."""
    return ", ".join(str(c) for c in counts)


def matched_reading(result: Result, task: str) -> dict:
    """Everything the flip-rate rule reads at ``task``'s matched point: ``mp``
    (:class:`~ntkbook.claims.influence_map.MatchedPoint`), ``difference`` (attention minus ReLU,
    paired), ``direction``, ``size_ok`` and ``size`` (:func:`size_reading`), ``adversarial``
    (attention above its null), ``paper_ratio`` and the ``verdict``."""
    level = PAPER[(task, "relu")][ATTACK]
    mp = imap.matched_point(result, task, level, attack=ATTACK)
    diff = _difference(result, task, mp.read_at)
    rp = paper_ratio(task)
    size_ok, size = size_reading(mp, task)
    # where the paper's own table shows no gap (ratio below FACTOR), the claim is that size, and
    # attention's excess is not asked for
    direction = diff.above(0.0) if rp >= FACTOR else size_ok
    adversarial = mp.attn_above_null.above(0.0)
    return {"mp": mp, "difference": diff, "direction": direction, "size_ok": size_ok, "size": size,
            "adversarial": adversarial, "paper_ratio": rp,
            "verdict": verdicts.ladder(direction and size_ok and adversarial, direction)}


def ratio_text(mp: imap.MatchedPoint) -> str:
    """The matched point's ratio for a reader: geometric mean with its interval, or the ratio of
    the means marked "no interval" where a seed's 2L-ReLU flips nothing."""
    if mp.ratio.known:
        return f"{mp.ratio.mean:.1f}x [{mp.ratio.lo:.1f}, {mp.ratio.hi:.1f}]"
    return f"{mp.ratio.mean:.1f}x (ratio of means; no interval: a seed's 2L-ReLU flips no point)"


def flip_row(result: Result, task: str) -> dict:
    """The scorecard row of ``task``'s flip-rate claim (module docstring's rule)."""
    claim = CLAIM_IDS[task]
    if not imap.both_trained(result, task):
        return {"claim": claim, "ours": _untrained(result, task), "verdict": NOT_TESTED,
                "note": "nothing tested: a flip rate of a network that did not train says nothing "
                        "about the claim", "from": (result.name,)}
    r = matched_reading(result, task)
    mp, level, rp = r["mp"], PAPER[(task, "relu")][ATTACK], r["paper_ratio"]
    T = imap.top_size(result)
    where = f"at eps = {mp.read_at:g}, the radius where 2L-ReLU is nearest the paper's {level:g} %"
    ours = (f"{where}: PGD 2L-ReLU {imap.interval_text(mp.relu, unit=' %')}, MLP-Attn "
            f"{imap.interval_text(mp.attn, unit=' %')}")
    if mp.relu_counts and T:
        ours += (f" (flipped points per seed of |T| = {T}: 2L-ReLU {counts_text(mp.relu_counts)}, "
                 f"MLP-Attn {counts_text(mp.attn_counts)})")
    ours += (f"; ratio {ratio_text(mp)}, paper {rp:.1f}x: size {r['size']}; MLP-Attn above its "
             f"random-sign null by {imap.interval_text(mp.attn_above_null, unit=' points')}"
             + ("" if r["adversarial"] else " (not shown to be adversarial)"))
    if mp.attn_saturated:
        ours += f"; MLP-Attn at {imap.SATURATION:.0%} or more of its {imap.LEVEL_NAME} there"
    note = (f"reproduces when MLP-Attn's PGD flip rate exceeds 2L-ReLU's ({LEVEL:.0%} interval over "
            f"seeds of the paired difference above 0), the interval of the paired ratio lies within a "
            f"factor {FACTOR:g} of the paper's ratio (not resolved, so not met, where it is wider than "
            f"that band or a seed's 2L-ReLU flips no point) and MLP-Attn's rate exceeds its random-sign null (interval above 0); "
            f"partly when only the first holds; read where 2L-ReLU is nearest the paper, not at the "
            f"paper's eps = 0.3, where MLP-Attn is at or past its clean-share independence level")
    return {"claim": claim, "ours": ours, "verdict": r["verdict"], "note": note, "from": ("influence_map",)}


def kappa_of(gram: Result, task: str) -> float:
    """kappa(G) of the data Gram of ``task``'s data set (nonzero spectrum; ``gram_conditioning``,
    the attention-width chapter's measurement on 100 images per class)."""
    return float(gram.scalars["per_dataset"][TASKS[task][0]]["kappa_G"])


def _tested(result: Result) -> list[str]:
    """The map's tasks with a claim of their own on which both models trained."""
    return [t for t in result.config["tasks"] if t in CLAIM_IDS and imap.both_trained(result, t)]


def kappa_reading(result: Result, gram: Result) -> str:
    """What the map can say about v2's "the gap depending on dataset condition number": the
    matched-point ratio of each task with both models trained beside its data set's κ(G); the
    dependence is testable only with tested tasks on at least two data sets (reported, not judged:
    a handful of data sets cannot separate kappa from everything else that differs between them)."""
    tested = _tested(result)
    if not tested:
        return "the gap's dependence on the condition number is not tested: no task trained"
    first = {}  # data set -> its first tested task
    for task in tested:
        first.setdefault(TASKS[task][0], task)
    if len(first) >= 2:
        kappas = ", ".join(f"{_dataset(d)} {sci(kappa_of(gram, t), 1)}" for d, t in first.items())
        return f"κ(G) per data set with a tested task: {kappas} (reported beside the ratios, not judged)"
    (only, task), = first.items()
    untested = sorted({TASKS[t][0] for t in result.config["tasks"]} - {only})
    return (f"the gap's dependence on the data set's condition number is not tested: the tasks with "
            f"both models trained are all on {_dataset(only)} (κ(G) {sci(kappa_of(gram, task), 1)})"
            + (f"; MLP-Attn does not train on {', '.join(_dataset(d) for d in untested)}" if untested else ""))


def ratio_row(result: Result, gram: Result | None = None) -> dict:
    """A.flip.ratio: across the tasks where both models trained, the ratio at the matched point
    against the paper's range (v2: "2-9x"): reproduces when on every tested task attention's
    excess is significant and the ratio of means lies in the range; partly when the excess is
    significant on every tested task but some ratio lies outside the range, or when it holds on
    most tasks; not tested with no task tested. With ``gram`` (``gram_conditioning``) the row
    also says what the map can tell of the gap's dependence on kappa(G) (:func:`kappa_reading`)."""
    tested = _tested(result)
    sources = ("influence_map",) + (("gram_conditioning",) if gram is not None else ())
    if not tested:
        return {"claim": "A.flip.ratio", "ours": "no task with both models trained",
                "verdict": NOT_TESTED, "note": "nothing tested", "from": ("influence_map",)}
    parts, in_range, direction = [], [], []
    lo, hi = PAPER_RANGE
    for task in tested:
        r = matched_reading(result, task)
        mp = r["mp"]
        direction.append(r["direction"])
        in_range.append(mp.ratio.within(lo, hi))
        parts.append(f"{_names(task)} {ratio_text(mp)} at eps {mp.read_at:g}")
    untested = [t for t in result.config["tasks"] if t in CLAIM_IDS and t not in tested]
    ours = ", ".join(parts) + (f"; not tested: {', '.join(_names(t) for t in untested)}" if untested else "")
    if gram is not None:
        ours += "; " + kappa_reading(result, gram)
    both = [d and r for d, r in zip(direction, in_range)]
    return {"claim": "A.flip.ratio", "ours": ours,
            "verdict": verdicts.ladder(all(both), all(direction) or sum(both) > len(both) / 2),
            "note": f"reproduces when on every task with both models trained attention's PGD flip "
                    f"rate exceeds ReLU's ({LEVEL:.0%} interval of the paired difference above 0) and "
                    f"the interval of the paired ratio at the matched point lies within {lo:g}-{hi:g}x "
                    f"(a ratio without an interval, where a seed's 2L-ReLU flips no point, does not); "
                    f"partly when the excess holds on every such task, or both hold on most; the "
                    f"dependence on κ(G) is reported, not judged", "from": sources}


def advtrain_row(adv: Result, imp: Result | None = None) -> dict:
    """A.advtrain from the matched-radius adversarial training
    (:func:`ntkbook.claims.influence_advtrain.verdict_rows`, 2L-ReLU): reproduces when the flip
    rate rises at every radius judged (both networks trained and clearly below their clean-share
    independence levels, and the standard network not already robust), partly at some, does not at none; not tested when no radius could be judged. Attention's flip
    rate from the map at the same radius is quoted beside it where the map has it."""
    rows = adv_claims.verdict_rows(adv)
    verdict, note = adv_claims.claim_verdict(rows, "relu")
    parts = []
    for r in (r for r in rows if r["model"] == "relu"):
        text = (f"eps {r['eps']:g}: {100 * r['standard']:.1f} -> {100 * r['adversarial']:.1f} % "
                f"({r['outcome']})")
        if imp is not None and imap.has(imp, "mnist10", "attn", "pgd", r["eps"], imap.MAIN_RIDGE) \
                and r["task"] == "mnist10":
            text += f", MLP-Attn {imap.flip(imp, 'mnist10', 'attn', 'pgd', r['eps']).mean:.1f} %"
        parts.append(text)
    return {"claim": "A.advtrain", "ours": "2L-ReLU, standard -> adversarial PGD flip rate, "
            + "; ".join(parts), "verdict": NOT_TESTED if verdict is None else verdict,
            "note": f"reproduces when the paired difference's {LEVEL:.0%} interval over seeds lies "
                    f"above 0 at every radius judged (both networks trained, both clearly below "
                    f"their clean-share independence levels, the standard network not already "
                    f"robust there), partly at some; MLP-Attn not trained with this recipe "
                    f"(not tested); {note}", "from": ("influence_advtrain", "influence_map")}


def landscape_row(shp: Result) -> dict:
    """A.landscape at equal training loss (:func:`ntkbook.claims.influence_sharpness.verdict`):
    MLP-Attn flatter than 2L-ReLU at MLP-Attn's final loss on every task tested reproduces, on
    some partly; not tested where MLP-Attn did not train."""
    v = sharp_claims.verdict(shp)
    parts = []
    for t in v["tasks"]:
        m = t["matched"]
        ratio = f"{np.exp(m.mean):.3g}" + (f" [{np.exp(m.lo):.3g}, {np.exp(m.hi):.3g}]" if m.known else "")
        parts.append(f"{_names(t['task'])}: MLP-Attn / 2L-ReLU top Hessian eigenvalue at equal loss {ratio} "
                     f"({t['reading']})")
    return {"claim": "A.landscape", "ours": "; ".join(parts), "verdict": v["verdict"], "note": v["rule"],
            "from": ("influence_sharpness",)}


def scorecard(results: Mapping[str, Result]) -> list[dict]:
    """The rows these rules give from the stored results present in ``results``."""
    rows: list[dict] = []
    if "influence_map" in results:
        res = results["influence_map"]
        rows += [flip_row(res, t) for t in res.config["tasks"] if t in CLAIM_IDS]
        rows.append(ratio_row(res, results.get("gram_conditioning")))
    # tasks the map does not hold (yet): the main sweep trained the same networks (same recipe and
    # seeds), so its training record says whether there is anything to test
    main = results.get("influence_malleability")
    held = set(results["influence_map"].config["tasks"]) if "influence_map" in results else set()
    if main is not None:
        for task in main.config["tasks"]:
            if task in CLAIM_IDS and task not in held and not imap.both_trained(main, task):
                rows.append({"claim": CLAIM_IDS[task], "ours": _untrained(main, task) + " (training "
                             "record of the main sweep: the map's recipe and seeds)", "verdict": NOT_TESTED,
                             "note": "nothing tested: a flip rate of a network that did not train says "
                                     "nothing about the claim", "from": ("influence_malleability",)})
    if "influence_advtrain" in results:
        rows.append(advtrain_row(results["influence_advtrain"], results.get("influence_map")))
    if "influence_sharpness" in results:
        rows.append(landscape_row(results["influence_sharpness"]))
    return rows
