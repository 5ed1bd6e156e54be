"""Readings of the stored ``modular_transformer`` result that its chapter shows: each tensor's
verdict with the reason it falls short, the seed record behind the scorecard's "holds in n of m
fresh seeds that grok", and the chance levels of the top window.

The verdict rules are the experiment's own and are not changed here
(:func:`ntkbook.experiments.modular_transformer.claim_verdict` per tensor, its ``scorecard`` per
claim). A tensor reproduces the paper's claim for it when the claimed family's overlap with the top
``4K + 1`` eigenvectors is at least 0.9 **and** the family *leads*. "Leads" is what
:func:`ntkbook.experiments.modular_transformer.leading_family` computes: skip the top eigenvectors
whose largest share is the constant, take the first ``2K`` of the rest, and sum their shares in
the axis-sum, axis-difference, sum and difference families; the family with the largest sum leads
(the "other" share is not counted). The docstring of that module's ``analyse_group`` still
describes the leading family as "the family holding most of the window's weight"; the stored
results were computed by the rule above, and this module reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ntkbook.errors import InputError
from ntkbook.ntk import features
from ntkbook.verdicts import REPRODUCES

__all__ = ["EXPERIMENTS", "SUPERSEDES", "NOTE_ADDITIONS", "ALIGNMENT_CLAIMS", "FAMILY_LABELS", "SeedRecord",
           "alignment_cell", "member_info", "seed_records", "shortfall", "window_chance", "scorecard"]

#: the experiment whose stored result :func:`scorecard` reads
EXPERIMENTS = ("modular_transformer",)
#: its rows are the experiment's own (its module cannot change while its stored result keeps its
#: code hash), with their notes completed here
SUPERSEDES = ("modular_transformer",)
#: what the experiment's rows leave unsaid (the rest of each rule, and which rows read one run),
#: appended to their notes; the verdicts are the experiment's
NOTE_ADDITIONS = {
    "B.tf.attn_axis_sum": ("partly when a tensor of the analysed run reproduces or partly holds, or the alignment "
                           "holds in a fresh seed; does not otherwise"),
    "B.tf.out_sum": ("partly when a tensor of the analysed run reproduces or partly holds, or the alignment holds "
                     "in a fresh seed; does not otherwise"),
    "B.tf.replay": "one run: the replay of the author's training run, compared with his two numbers",
    "B.tf.dynamics": ("partly when the overlap rises by more than 0.5 but its derivative peaks outside the window; "
                      "one run (the analysed run), no fresh-seed record"),
}

#: the scorecard's two alignment claims: the tensors (or block of tensors) each is judged on, and
#: the claimed family, as in :func:`ntkbook.experiments.modular_transformer.scorecard`
ALIGNMENT_CLAIMS: dict[str, tuple[tuple[str, ...], str]] = {
    "B.tf.attn_axis_sum": (("attention", "W_in"), "axis_sum"),
    "B.tf.out_sum": (("W_out", "W_U"), "sum"),
}

#: reader labels of the feature families
FAMILY_LABELS = {"const": "constant", "axis_sum": "axis sum", "axis_diff": "axis diff.", "sum": "sum",
                 "diff": "diff.", None: "–"}


def member_info(result: Any, run: str, name: str) -> dict[str, Any]:
    """The stored analysis of one tensor (``"W_in"``, ...) or block of tensors (``"attention"``) in
    ``run``; raises :class:`ntkbook.errors.InputError` when the run has no per-tensor analysis
    (runs that are not analysed in full)."""
    s = result["per_run"][run]
    if "groups" not in s:
        raise InputError(f"run {run!r} has no per-tensor analysis")
    info = (s.get("blocks") or {}).get(name) or s["groups"].get(name)
    if info is None:
        raise InputError(f"run {run!r} has no tensor or block {name!r}")
    return info


def alignment_cell(result: Any, run: str, name: str, family: str) -> str:
    """A table cell for one tensor's claim in one run: its window overlap with ``family``, its
    verdict, and, when another family leads, which one, e.g. ``"0.95 partly (axis sum leads)"``.
    A verdict short of "reproduces" without a leading family named is an overlap below 0.9."""
    info = member_info(result, run, name)
    cell = f"{info['overlaps'][family]:.2f} {info['verdict']}"
    if info["leading"] != family:
        cell += f" ({FAMILY_LABELS.get(info['leading'], info['leading'])} leads)"
    return cell


def shortfall(result: Any, run: str, name: str, family: str, level: float = 0.9) -> str:
    """Why one tensor's claim falls short of "reproduces" in ``run``, as a phrase that follows the
    tensor's name: "holds only 0.80 of them" (overlap below ``level``), "holds 0.95 of them but
    axis-sum modes lead" (another family leads), or both; "" when it reproduces."""
    info = member_info(result, run, name)
    ov, lead = info["overlaps"][family], info["leading"]
    if info["verdict"] == REPRODUCES:
        return ""
    held = f"holds {'only ' if ov < level else ''}{ov:.2f} of them"
    if lead == family:
        return held
    other = FAMILY_LABELS.get(lead, lead).replace(" ", "-")
    return f"{held} {'and' if ov < level else 'but'} {other} modes lead"


@dataclass(frozen=True)
class SeedRecord:
    """One alignment claim over the fresh seeds that grok (the seeds other than the analysed run):
    ``held`` are those in which every member reproduces, ``failing[run]`` the members that do not."""

    claim: str
    members: tuple[str, ...]
    family: str
    runs: tuple[str, ...]
    held: tuple[str, ...]
    failing: dict[str, tuple[str, ...]]


def seed_records(result: Any) -> dict[str, SeedRecord]:
    """:class:`SeedRecord` of each claim of :data:`ALIGNMENT_CLAIMS`: the count the scorecard's
    row reports as "holds in n of m fresh seeds that grok"."""
    pr = result["per_run"]
    main = result["main"]
    fresh = [r for r in result["runs"] if r not in ("replay", main) and pr[r]["grokking"]["grokked"]]
    out = {}
    for claim, (members, family) in ALIGNMENT_CLAIMS.items():
        failing = {r: tuple(m for m in members if member_info(result, r, m)["verdict"] != REPRODUCES)
                   for r in fresh}
        out[claim] = SeedRecord(claim, members, family, tuple(fresh),
                                tuple(r for r in fresh if not failing[r]),
                                {r: f for r, f in failing.items() if f})
    return out


def window_chance(result: Any, run: str, family: str) -> tuple[float, float]:
    """Chance overlaps (fractions of the family's dimension ``2K``) of the run's top window of
    ``4K + 1`` eigenvectors with ``family`` at its key frequencies: ``(uniform, additive)`` for a
    window drawn at random in all of :math:`\\mathbb R^{p^2}` and among the ``2p - 1`` additive
    functions. A random k-dimensional subspace of an n-dimensional space S overlaps a fixed
    d-dimensional F by :math:`k \\lVert P_S F \\rVert_F^2 / n` on average, so the additive level is
    ``k/(2p-1)`` for the axis-sum family (inside the additive functions) and 0 for the sum family
    (orthogonal to them)."""
    p = int(result.config["p"])
    kf = result["per_run"][run]["key_frequencies"]
    F = features.key_frequency_bases(p, kf)[family]
    d = F.shape[1]
    k = int(member_info(result, run, "W_U")["window"])  # 4K + 1
    inside = float(np.sum((features.additive_basis(p).T @ F) ** 2))  # ||P_additive F||_F^2
    return k / (p * p), k * inside / features.additive_dimension(p) / d


def scorecard(results) -> list[dict]:
    """The ``B.tf.*`` rows of the stored paper-preset ``modular_transformer`` result
    (``results["modular_transformer"]``; none when it is absent): the experiment's own rows and
    verdicts (:func:`ntkbook.experiments.modular_transformer.scorecard`), each note completed by
    :data:`NOTE_ADDITIONS`."""
    from ntkbook.experiments import modular_transformer as experiment  # noqa: PLC0415

    result = results.get("modular_transformer")
    if result is None:
        return []
    rows = []
    for row in experiment.scorecard(result):
        extra = NOTE_ADDITIONS.get(row["claim"])
        rows.append({**row, "note": f"{row['note']}; {extra}" if extra else row["note"]})
    return rows
