"""Figures of the influence map (:mod:`ntkbook.experiments.influence_map`): flip rate against the
attack radius between the random-sign null and the clean-share independence level.

A model that did not train (:func:`ntkbook.influence.readout.trained`) is drawn with hollow markers
and dashed lines, and "not trained" in the legend."""

from __future__ import annotations

import textwrap

import numpy as np

from ntkbook.influence import readout
from ntkbook.plotting import PALETTE, legend_in, log_ticks, panels
from ntkbook.stats import mean_spread
from ntkbook.store import Result

#: a panel title longer than this many characters is wrapped (a panel is about 2 inches wide)
TITLE_CHARS = 26

MODEL_COLOR = {"relu": PALETTE[0], "attn": PALETTE[1]}
ATTACK_MARKER = {"fgsm": "o", "pgd": "s", "mim": "^", "flipobj": "D"}


def _spaced(values, decades: float = 0.4) -> list[float]:
    """The values (increasing) kept at least ``decades`` apart on a log axis, the first kept: the
    tick labels that do not overlap in a narrow panel."""
    kept: list[float] = []
    for value in values:
        if not kept or np.log10(value / kept[-1]) >= decades:
            kept.append(value)
    return kept


def _per_seed(result: Result, task: str, model: str, key: str) -> np.ndarray:
    return np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64) * 100.0


def plot_flip_vs_eps(result: Result, ridge: str, attack: str = "pgd", paper=None, paper_eps: float = 0.3):
    """Per task, flip rate (%) against eps (log axis) for both models under ``attack`` (mean ±
    standard deviation over seeds, :func:`ntkbook.stats.mean_spread`), at the ridge labelled
    ``ridge`` (``result["ridges"]``, e.g. ``"lam=0.001"`` or ``"nlam=0.001"``); the random-sign
    null (filled band: mean ± spread over seeds of the mean over draws) and the clean-share
    independence level (faint band: mean ± spread over seeds, dotted at its mean) of each model;
    where the task has it at this ridge, the
    flip-objective attack (dotted, diamonds). ``paper``: optional ``{(task, model): {attack:
    rate %}}`` (Paper A's table), drawn as open stars at ``paper_eps``, the paper's radius. Two
    panels a row, the legend in the free cell."""
    if ridge not in result["ridges"]:
        raise KeyError(f"no ridge {ridge!r} in the result; it has {result['ridges']}")
    cfg = result.config
    tasks, eps = cfg["tasks"], np.asarray(cfg["eps"], dtype=np.float64)
    fig, axes, spare = panels(len(tasks), row_height=2.9 if len(tasks) > 1 else 4.0, spare=True,
                              sharey=True)
    any_untrained = any_flip = any_paper = False
    for ax, task in zip(axes, tasks):
        for model in cfg["models"]:
            color = MODEL_COLOR[model]
            ok = readout.trained(result, task, model)
            any_untrained |= not ok
            ls, mfc = ("-", color) if ok else ("--", "white")
            null = np.stack([_per_seed(result, task, model, f"null/{e:g}/{ridge}/flip") for e in eps])
            m, s = mean_spread(null, axis=1)
            ax.fill_between(eps, m - s, m + s, color=color, alpha=0.18, lw=0)
            cm, cs = mean_spread(_per_seed(result, task, model, f"clean/{ridge}/ceiling"))
            ax.fill_between(eps, cm - cs, cm + cs, color=color, alpha=0.07, lw=0)
            ax.plot(eps, np.full_like(eps, cm), color=color, ls=":", lw=1.0)
            vals = np.stack([_per_seed(result, task, model, f"{attack}/{e:g}/{ridge}/flip") for e in eps])
            m, s = mean_spread(vals, axis=1)
            ax.errorbar(eps, m, yerr=s, color=color, marker=ATTACK_MARKER[attack], ls=ls, mfc=mfc,
                        capsize=2, ms=4)
            if task in cfg["flip_tasks"] and ridge in result["flip_ridges"]:
                feps = np.asarray(cfg["flip_eps"], dtype=np.float64)
                vals = np.stack([_per_seed(result, task, model, f"flipobj/{e:g}/{ridge}/flip") for e in feps])
                m, s = mean_spread(vals, axis=1)
                ax.errorbar(feps, m, yerr=s, color=color, marker=ATTACK_MARKER["flipobj"], ls=":",
                            mfc=mfc, capsize=2, ms=4)
                any_flip = True
            if paper is not None and attack in paper.get((task, model), {}):
                ax.plot([paper_eps], [paper[(task, model)][attack]], marker="*", ms=11, mfc="white",
                        mec=color, mew=1.4, ls="none", zorder=5)
                any_paper = True
        ax.set_xscale("log")
        log_ticks(ax.xaxis, _spaced(eps))
        # a long task name on two lines: one line runs into the next panel's tick labels
        ax.set_title(textwrap.fill(result["tasks"][task], TITLE_CHARS))
        ax.set_xlabel("ε (L∞)")
        ax.set_ylim(0, 100)
        ax.tick_params(labelleft=True)
    axes[0].set_ylabel("flip rate (%)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=MODEL_COLOR[m], lw=2, label=result["models"][m]) for m in cfg["models"]]
    handles += [Line2D([], [], color="0.3", marker=ATTACK_MARKER[attack], ms=4, label=result["attacks"][attack]),
                Patch(color="0.3", alpha=0.25, lw=0, label="random-sign null"),
                Line2D([], [], color="0.3", ls=":", label="clean-share\nindependence level")]
    if any_flip:
        handles.append(Line2D([], [], color="0.3", ls=":", marker=ATTACK_MARKER["flipobj"], ms=4,
                              label="flip objective"))
    if any_paper:
        handles.append(Line2D([], [], color="0.3", ls="none", marker="*", mfc="white", ms=11,
                              label=f"paper ({result['attacks'][attack]}, ε = {paper_eps:g})"))
    if any_untrained:
        handles.append(Line2D([], [], color="0.3", ls="--", marker="o", mfc="white", ms=4, label="not trained"))
    legend_in(spare, fig, handles, [h.get_label() for h in handles], ncol=1 if spare is not None else 2)
    fig.suptitle(f"ridge {ridge.replace('nlam=', 'n·λ, λ = ').replace('lam=', 'λ = ')}")
    return fig
