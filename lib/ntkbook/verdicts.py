"""The verdict ladder of the reproduction scorecard, defined once.

Every claim of the two papers gets one of three verdicts, computed from the stored results of
the experiments that measure it by a verdict rule of :mod:`ntkbook.claims` (its ``scorecard``):

- ``"reproduces"`` (:data:`REPRODUCES`): the claim holds in our measurement by the rule's
  stated threshold;
- ``"partly"`` (:data:`PARTLY`): part of it holds (some tasks, the direction but not the size, ...);
- ``"does not"`` (:data:`DOES_NOT`): it does not hold.
"""

from __future__ import annotations

from typing import Iterable

from ntkbook.errors import InputError

__all__ = ["REPRODUCES", "PARTLY", "DOES_NOT", "VERDICTS", "ladder", "by_threshold", "weakest"]

REPRODUCES = "reproduces"
PARTLY = "partly"
DOES_NOT = "does not"
#: the verdicts, best first
VERDICTS = (REPRODUCES, PARTLY, DOES_NOT)


def ladder(full: bool, some: bool = False) -> str:
    """``"reproduces"`` when the full claim holds, else ``"partly"`` when ``some`` of it does,
    else ``"does not"``."""
    return REPRODUCES if full else PARTLY if some else DOES_NOT


def by_threshold(value: float, reproduces: float, partly: float, *, higher_is_better: bool = True) -> str:
    """The verdict of a number against two thresholds: ``value >= reproduces`` (or ``<=`` when
    lower is better) reproduces, past ``partly`` is partly, anything else (NaN included) does not."""
    if higher_is_better:
        return ladder(value >= reproduces, value >= partly)
    return ladder(value <= reproduces, value <= partly)


def weakest(verdicts: Iterable[str]) -> str:
    """The weakest of several verdicts (``"reproduces"`` only if all reproduce)."""
    vs = list(verdicts)
    unknown = [v for v in vs if v not in VERDICTS]
    if unknown:
        raise InputError(f"unknown verdict(s) {unknown}; expected one of {VERDICTS}")
    return max(vs, key=VERDICTS.index) if vs else DOES_NOT
