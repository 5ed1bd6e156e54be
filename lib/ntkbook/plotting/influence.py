"""Figures of the influence-malleability chapter (Paper A) from the main sweep and the width sweep:
influence before and after an attack, and flip rate against width. (The flip-rate map, adversarial
training and sharpness have their own modules: ``influence_map``, ``influence_advtrain``,
``influence_sharpness``.) Each function takes results and returns the Figure.

A model that did not train (:func:`ntkbook.influence.readout.trained`) is marked wherever it is
drawn: hollow markers or faint lines, and "not trained" in the legend or title."""

from __future__ import annotations

import numpy as np

from ntkbook.influence import readout, scores
from ntkbook.plotting import PALETTE, new_figure, panels
from ntkbook.stats import mean_spread
from ntkbook.store import Result

MODEL_COLOR = {"relu": PALETTE[0], "attn": PALETTE[1]}
ATTACK_MARKER = {"fgsm": "o", "pgd": "s", "mim": "^", "random": "x"}


def _vals(result: Result, key: str, name: str, scale: float = 100.0) -> np.ndarray:
    return np.asarray(result["table"][key][name], dtype=np.float64) * scale


def plot_influence_scatter(result: Result, task: str, seed_index: int = 0):
    """Clean influence against influence after PGD on every training point, both models; the
    top-10 % set marked, flipped points in the off-diagonal quadrants."""
    fig, axes = new_figure(2, 1, height=3.2, sharey=True)
    for ax, model in zip(axes, ("relu", "attn")):
        a = result[f"{task}/{model}/influence_clean"][seed_index]
        b = result[f"{task}/{model}/influence_pgd"][seed_index]
        top = scores.top_indices(a, result.config["top_fraction"])
        sa = np.max(np.abs(a))
        sb = np.max(np.abs(b))
        ax.scatter(a / sa, b / sb, s=6, color="0.6", label="all points")
        ax.scatter(a[top] / sa, b[top] / sb, s=14, color=MODEL_COLOR[model], label="top 10 %")
        ax.axhline(0, color="k", lw=0.6)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_xlabel("clean influence / max |·|")
        ok = readout.trained(result, task, model)
        ax.set_title(result["models"][model] + ("" if ok else " (not trained)"))
        ax.tick_params(labelleft=True)
    axes[0].set_ylabel("after PGD / max |·|")
    from matplotlib.lines import Line2D

    marks = [Line2D([], [], ls="", marker="o", ms=4, color="0.6"),
             Line2D([], [], ls="", marker="o", ms=5, color=MODEL_COLOR["relu"]),
             Line2D([], [], ls="", marker="o", ms=5, color=MODEL_COLOR["attn"])]
    fig.legend(marks, ["all training points", "top 10 %, 2L-ReLU", "top 10 %, MLP-Attn"],
               loc="outside lower center", ncol=2)
    return fig


def plot_width(result: Result):
    """Flip rate (%) against width, every attack and the random-sign null, both models (mean ±
    sample standard deviation over seeds); hollow markers where the model did not train at that
    width."""
    widths = list(result.config["widths"])
    tasks = result.config["tasks"]
    attacks = list(result.config["attacks"])
    fig, axes, _ = panels(len(tasks), width=4.6 if len(tasks) == 1 else 5.5, row_height=3.0)
    any_untrained = False
    for ax, task in zip(axes, tasks):
        for model in ("relu", "attn"):
            ok = np.array([readout.trained(result, task, f"{model}/{m}") for m in widths])
            any_untrained |= not ok.all()
            for atk in attacks + ["random"]:
                name = "null_adversarial/random/flip" if atk == "random" else f"adversarial/{atk}/flip"
                vals = np.stack([_vals(result, f"{task}/{model}/{m}", name) for m in widths])
                mean, spread = mean_spread(vals, axis=1)
                ax.errorbar(widths, mean, yerr=spread, color=MODEL_COLOR[model],
                            marker=ATTACK_MARKER[atk], ls=":" if atk == "random" else "-", capsize=2,
                            label=f"{result['models'][model]} {'random' if atk == 'random' else atk.upper()}")
                w = np.asarray(widths)
                if not ok.all():
                    ax.plot(w[~ok], mean[~ok], ls="", marker=ATTACK_MARKER[atk], mfc="white", ms=7,
                            color=MODEL_COLOR[model])
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(m) for m in widths])
        ax.minorticks_off()
        ax.set_xlabel("width $m$")
        ax.set_ylabel("flip rate (%)")
        ax.set_title(result["tasks"][task])
    handles, labels = axes[0].get_legend_handles_labels()
    if any_untrained:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], ls="", marker="o", mfc="white", color="0.3"))
        labels.append("hollow: not trained")
    fig.legend(handles, labels, loc="outside lower center", ncol=2)
    return fig
