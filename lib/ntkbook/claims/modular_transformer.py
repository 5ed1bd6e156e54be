"""Readings of the stored ``modular_transformer`` result that its chapter shows: each tensor's
verdict with the reason it falls short, the seed record behind the scorecard's "holds in n of m
fresh seeds that grok", and the chance levels of the top window.

The verdict rules are the experiment's own and are not changed here
(:func:`ntkbook.experiments.modular_transformer.claim_verdict` per tensor,
:func:`modular_transformer_scorecard`, formerly that module's ``scorecard``, per claim). A tensor reproduces the paper's claim for it when the claimed family's overlap with the top
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
from ntkbook.verdicts import PARTLY, REPRODUCES, ladder

__all__ = ["EXPERIMENTS", "NOTE_ADDITIONS", "ALIGNMENT_CLAIMS", "FAMILY_LABELS", "SeedRecord",
           "alignment_cell", "member_info", "seed_records", "shortfall", "window_chance",
           "modular_transformer_scorecard", "scorecard"]

#: the experiment whose stored result :func:`scorecard` reads
EXPERIMENTS = ("modular_transformer",)
#: what the experiment's rows (:func:`modular_transformer_scorecard`) leave unsaid (the rest of each rule, and which rows read one run),
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
#: the claimed family, as in :func:`modular_transformer_scorecard`
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


def modular_transformer_scorecard(result: Any) -> list[dict]:
    """The ``B.tf.*`` rows of one ``modular_transformer`` result, verdicts from the numbers by the
    experiment's rules (formerly ``ntkbook.experiments.modular_transformer.scorecard``):
    ``B.tf.grokking``, ``B.tf.key_freqs``, ``B.tf.dynamics``, and, where the analysed run has its
    per-tensor analysis, ``B.tf.attn_axis_sum``, ``B.tf.out_sum`` and ``B.tf.replay``. The
    scorecard shows these rows with their notes completed (:func:`scorecard`)."""
    from ntkbook.experiments.modular_transformer import AUTHOR, BLOCKS  # noqa: PLC0415

    rows = []
    pr = result["per_run"]
    main = result["main"]
    g = pr[main]["grokking"]
    grok_ok = g["grokked"] and g["final_train_acc"] >= 0.99
    seeds = [n for n in result["runs"] if n != "replay"]
    fresh = [n for n in seeds if n != main]
    grokked_fresh = [n for n in fresh if pr[n]["grokking"]["grokked"]]
    epochs = result.config["epochs"]
    record = (f"fresh seeds: {len(grokked_fresh)} of {len(fresh)} grok within {epochs} epochs"
              + (" (" + ", ".join(f"{n} by epoch {_f(pr[n]['grokking']['test_grok'])}" for n in grokked_fresh) + ")"
                 if grokked_fresh else ""))
    rows.append({"claim": "B.tf.grokking",
                 "ours": f"test acc. 10% → 99% over epochs {_f(g['test10'])}–{_f(g['test_grok'])} ({main}); {record}",
                 "verdict": ladder(grok_ok and (not fresh or 2 * len(grokked_fresh) > len(fresh)), grok_ok),
                 "note": ("reproduces when the analysed run groks and most fresh seeds do, partly when only "
                          "the analysed run does; paper: grokking between about epochs 150 and 1900")})
    kf = tuple(pr[main]["key_frequencies"])
    # sparsity and seed dependence are claims about networks that learned the task: runs that did
    # not grok are listed but not counted
    grokked = [n for n in dict.fromkeys([main] + seeds) if pr[n]["grokking"]["grokked"]]
    distinct = len({tuple(sorted(pr[n]["key_frequencies"])) for n in grokked})
    sparse = bool(grokked) and all(len(pr[n]["key_frequencies"]) <= 4 for n in grokked)
    authors = main != "replay" or set(kf) == set(AUTHOR["key_frequencies"])
    verdict = ladder(authors and sparse and distinct > 1, sparse)
    rows.append({"claim": "B.tf.key_freqs", "ours": "; ".join(
        f"{n} {tuple(pr[n]['key_frequencies'])}" for n in grokked),
        "verdict": verdict,
        "note": (f"runs that grok ({len(grokked)} of {len(set([main] + seeds))}); at most 4 key "
                 f"frequencies each, {distinct} distinct sets; the author's run uses 1 and 12")})
    groups = pr[main].get("groups", {})
    if groups:
        for claim_id, members, fam in (("B.tf.attn_axis_sum", ["attention", "W_in"], "axis_sum"),
                                       ("B.tf.out_sum", ["W_out", "W_U"], "sum")):
            def info(run, n):
                return (pr[run].get("blocks") or {}).get(n) or pr[run]["groups"][n]
            v = [info(main, n)["verdict"] for n in members]
            n_ok = sum(x == REPRODUCES for x in v)
            n_part = sum(x == PARTLY for x in v)
            # the seed record: does the alignment hold in every fresh seed that groks?
            held = [n for n in grokked_fresh if all(info(n, m)["verdict"] == REPRODUCES for m in members)]
            main_ok = n_ok == len(members)
            label = lambda n: "attention block (Q, K, V, O)" if n == "attention" else n  # noqa: E731
            detail = ""
            if claim_id == "B.tf.attn_axis_sum":
                detail = "; per tensor: " + ", ".join(
                    f"{n} {groups[n]['overlaps'][fam]:.2f}" for n in BLOCKS["attention"])
            rows.append({
                "claim": claim_id,
                "ours": (", ".join(f"{label(n)} {info(main, n)['overlaps'][fam]:.2f}" for n in members)
                         + f" ({main}){detail}; holds in {len(held)} of {len(grokked_fresh)} fresh seeds that grok"),
                "verdict": ladder(main_ok and len(held) == len(grokked_fresh), n_ok + n_part > 0 or bool(held)),
                "note": (f"overlap of the top 4K+1 eigenvectors with the {fam.replace('_', '-')} features "
                         f"(at least 0.9 and leading: reproduces); {n_ok} of {len(members)} reproduce in "
                         f"{main}, {n_part} partly; reproduces only when it also holds in every fresh seed that groks")})
        w = pr[main]["W_U_author_windows"]
        s1, s2 = w["sum_top"], w["axis_sum_next"]
        ok = s1 >= 0.95 * w["dim"] and s2 >= 0.95 * w["dim"]
        rows.append({"claim": "B.tf.replay",
                     "ours": f"{s1:.4f}/{w['dim']} and {s2:.4f}/{w['dim']}",
                     "verdict": ladder(ok, max(s1, s2) >= 0.9 * w["dim"]),
                     "note": "author: 3.9647/4 and 3.9399/4 (float32 GPU run; ours the float64 replay)"
                     if main == "replay" else "smoke-scale stand-in: first seed, not the replay"})
    dyn = result[f"{main}/dynamics"]
    ep = result[f"{main}/snapshot_epochs"]
    i = [tuple(m) for m in result["dyn_metrics"]].index(("W_U", "2K+1", "sum"))
    ov = dyn[:, i]
    rise = ov[-1] - ov[0]
    peak = float(ep[int(np.argmax(np.gradient(ov, ep)))])
    lo, hi = g["test10"], g["test_grok"]
    inside = np.isfinite(lo) and np.isfinite(hi) and lo - 100 <= peak <= hi
    rows.append({"claim": "B.tf.dynamics",
                 "ours": f"W_U overlap {ov[0]:.2f} → {ov[-1]:.2f}; derivative peak at epoch {peak:.0f}",
                 "verdict": ladder(rise > 0.5 and inside, rise > 0.5),
                 "note": (f"reproduces: rise > 0.5 and peak inside the grokking window {_f(lo)}–{_f(hi)} "
                          f"(or up to 100 epochs before it); paper: peaks near 150 and 600")})
    return rows


def _f(x) -> str:
    """An epoch, or "n/a" where none was reached."""
    return "n/a" if x is None or not np.isfinite(float(x)) else f"{float(x):.0f}"


def scorecard(results) -> list[dict]:
    """The ``B.tf.*`` rows of the stored paper-preset ``modular_transformer`` result
    (``results["modular_transformer"]``; none when it is absent): the experiment's own rows and
    verdicts (:func:`modular_transformer_scorecard`), each note completed by
    :data:`NOTE_ADDITIONS`."""
    result = results.get("modular_transformer")
    if result is None:
        return []
    rows = []
    for row in modular_transformer_scorecard(result):
        extra = NOTE_ADDITIONS.get(row["claim"])
        rows.append({**row, "note": f"{row['note']}; {extra}" if extra else row["note"]})
    return rows
