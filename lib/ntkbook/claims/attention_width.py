"""Paper A's v2 width thresholds judged on the stored Gram spectra (gram_conditioning).

(The distance to the NTK against width is judged in :mod:`ntkbook.claims.ntk_distance`.)

The paper's second version states the width MLP-Attn needs as :math:`m = \\Omega(\\kappa_d(G)^6\\,
n\\log n)`, with :math:`\\kappa_d` "the effective condition number of the rank-min(n, d) truncation
of the input Gram matrix", and gives thresholds :math:`m \\gg 10^{24}` for MNIST and
:math:`10^{29}` for CIFAR-10. We evaluate the same expression on our Gram spectra (``n`` images per
data set, :mod:`ntkbook.experiments.gram_conditioning`): with :math:`\\kappa` over the whole nonzero
spectrum, and over the leading ``d`` eigenvalues for each measured ``d`` (the number depends on how
many eigenvalues one keeps, which the paper's "effective" leaves open).

Rule (as for ``A.width_bound``, whose sixth power multiplies any spread): "reproduces" when our
whole-spectrum value is within a factor :data:`TOLERANCE_DECADES` decades of the paper's on both
data sets; "partly" when on each data set the paper's value lies between our smallest and largest
leading-block values; "does not" otherwise.
"""

from __future__ import annotations

import math
from typing import Mapping

from ntkbook import verdicts
from ntkbook.numbers import sci
from ntkbook.store import Result

__all__ = ["EXPERIMENTS", "PAPER_THRESHOLDS", "threshold", "thresholds", "width_threshold_row", "scorecard"]

EXPERIMENTS = ("gram_conditioning",)

#: the v2 abstract's widths, per data set of gram_conditioning
PAPER_THRESHOLDS = {"mnist": 1e24, "cifar10": 1e29}

#: decades either way within which the whole-spectrum value "reproduces"
TOLERANCE_DECADES = 3.0


def threshold(kappa: float, n: int) -> float:
    """:math:`\\kappa^6\\, n \\ln n`, the v2 width expression (its constant taken as 1)."""
    return kappa ** 6 * n * math.log(n)


def thresholds(result: Result, dataset: str) -> dict:
    """Our v2 threshold on ``dataset``: ``full`` (kappa over the nonzero spectrum), ``blocks``
    (``{d: value}`` over the leading-``d`` kappas), and ``n``."""
    s = result["per_dataset"][dataset]
    return {"n": s["n"], "full": threshold(s["kappa_G"], s["n"]),
            "blocks": {r["d"]: threshold(r["kappa_d_G"], s["n"]) for r in s["kappa_d"]}}


def width_threshold_row(res: Result) -> list[dict]:
    """The ``A.width_threshold`` row from the stored gram_conditioning result (none when it holds
    neither of :data:`PAPER_THRESHOLDS`' data sets)."""
    names = [d for d in PAPER_THRESHOLDS if d in res["per_dataset"]]
    if not names:
        return []
    close, between, parts = [], [], []
    for d in names:
        t = thresholds(res, d)
        target = PAPER_THRESHOLDS[d]
        lo, hi = min(t["blocks"].values()), max(t["blocks"].values())
        close.append(abs(math.log10(t["full"]) - math.log10(target)) <= TOLERANCE_DECADES)
        between.append(lo <= target <= hi)
        parts.append(f"{res['labels'][d]}: {sci(t['full'])} over the nonzero spectrum, {sci(lo)} to "
                     f"{sci(hi)} over the leading d = {min(t['blocks'])}–{max(t['blocks'])} "
                     f"(paper {sci(target, 0)}; n = {t['n']})")
    return [{"claim": "A.width_threshold", "ours": "; ".join(parts),
             "verdict": verdicts.ladder(all(close) and len(close) == len(PAPER_THRESHOLDS), all(between)),
             "note": f"κ⁶ n ln n with our κ; reproduces within {TOLERANCE_DECADES:g} decades of the "
                     f"paper's on both data sets; partly when the paper's lies within our range of "
                     f"leading-block values; the value depends on how many eigenvalues are kept"}]


def scorecard(results: Mapping[str, Result]) -> list[dict]:
    """The ``A.width_threshold`` row from the stored gram_conditioning result."""
    return width_threshold_row(results["gram_conditioning"]) if "gram_conditioning" in results else []
