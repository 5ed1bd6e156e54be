"""The background claim ``F.entk_convergence`` judged on the stored ``entk_convergence`` result: the
empirical NTK of a width-``m`` two-layer ReLU network approaches the analytic NTK, its error
shrinking like :math:`m^{-1/2}`.

Rule (:func:`entk_convergence_scorecard`): the log-log slope of the relative Frobenius error of the
first-layer eNTK against width (``slope_W`` of the result) reproduces when it is within 0.05 of
:math:`-1/2`, partly within 0.15, does not otherwise.
"""

from __future__ import annotations

from typing import Mapping

from ntkbook.numbers import fmt
from ntkbook.store import Result
from ntkbook.verdicts import by_threshold

__all__ = ["EXPERIMENTS", "entk_convergence_scorecard", "scorecard"]

#: the experiment whose stored paper-preset result :func:`scorecard` reads
EXPERIMENTS = ("entk_convergence",)


def entk_convergence_scorecard(result: Result) -> list[dict]:
    """The ``F.entk_convergence`` row of the reproduction scorecard (:mod:`ntkbook.book.scorecard`)
    from one ``entk_convergence`` result (of any scale; the chapter reads its own): the log-log
    slope of the relative error of the first-layer eNTK against width, the error at the widest
    network and its ratio to the closed-form prediction. Verdict: reproduces when the slope is
    within 0.05 of -1/2, partly within 0.15, does not otherwise. (Formerly
    ``ntkbook.experiments.entk_convergence.scorecard``.)"""
    slope = float(result["slope_W"])
    v = by_threshold(abs(slope + 0.5), 0.05, 0.15, higher_is_better=False)
    return [{"claim": "F.entk_convergence",
             "ours": f"slope {fmt(slope, '.3f')} (widths {result['smallest_width']}–{result['largest_width']}); "
                     f"error {fmt(result['err_W_largest'], '.3f')} at the widest, "
                     f"{fmt(result['ratio_to_prediction_W'], '.2f')}× the closed-form prediction",
             "verdict": v, "note": "reproduces when the slope is within 0.05 of −1/2"}]


def scorecard(results: Mapping[str, Result]) -> list[dict]:
    """The ``F.entk_convergence`` row (:func:`entk_convergence_scorecard`) from the stored
    ``entk_convergence`` result (``results["entk_convergence"]``; no rows when it is absent)."""
    result = results.get("entk_convergence")
    return [] if result is None else entk_convergence_scorecard(result)
