"""Figures of the influence-malleability chapter (Paper A): flip rates against the paper's, the
eps ablation, influence before and after an attack, loss landscapes, flip rate against width and
under adversarial training. Each function takes results and returns the Figure."""

from __future__ import annotations

import numpy as np

from ntkbook.influence import scores
from ntkbook.plotting import PALETTE, new_figure
from ntkbook.stats import mean_spread
from ntkbook.store import Result

MODEL_COLOR = {"relu": PALETTE[0], "attn": PALETTE[1]}
ATTACK_MARKER = {"fgsm": "o", "pgd": "s", "mim": "^", "random": "x"}


def _vals(result: Result, key: str, name: str, scale: float = 100.0) -> np.ndarray:
    return np.asarray(result["table"][key][name], dtype=np.float64) * scale


def plot_flip_rates(result: Result, paper: dict, intervention: str = "adversarial"):
    """Per task: flip rate (%) of each model and attack (bars: mean over seeds, dots: seeds), the
    random-sign null (grey bar) and the paper's value (black diamond) where reported."""
    tasks = result.config["tasks"]
    attacks = list(result.config["attacks"])
    fig, axes = new_figure(len(tasks), 1, width=2.3 * len(tasks) + 1.0, height=3.6, sharey=True)
    axes = np.atleast_1d(axes)
    cols = attacks + ["random"]
    for ax, task in zip(axes, tasks):
        for j, model in enumerate(("relu", "attn")):
            key = f"{task}/{model}"
            for i, atk in enumerate(cols):
                name = (f"null_{intervention}/random/flip" if atk == "random"
                        else f"{intervention}/{atk}/flip")
                v = _vals(result, key, name)
                x = j * (len(cols) + 1) + i
                color = "0.6" if atk == "random" else MODEL_COLOR[model]
                ax.bar(x, v.mean(), color=color, alpha=0.75, width=0.8)
                ax.plot(np.full(v.size, x), v, "k.", ms=3)
                p = paper.get((task, model), {}).get(atk)
                if p is not None:
                    ax.plot(x, p, "D", color="k", ms=5, mfc="white", mew=1.3)
        ticks = [j * (len(cols) + 1) + i for j in range(2) for i in range(len(cols))]
        ax.set_xticks(ticks, [c.upper() if c != "random" else "rand" for c in cols] * 2,
                      rotation=90, fontsize=9)
        ax.set_title(result["tasks"][task], fontsize=10, pad=16)
        ax.text(0.25, 1.01, "2L-ReLU", color=MODEL_COLOR["relu"], transform=ax.transAxes,
                ha="center", va="bottom", fontsize=9)
        ax.text(0.75, 1.01, "MLP-Attn", color=MODEL_COLOR["attn"], transform=ax.transAxes,
                ha="center", va="bottom", fontsize=9)
    axes[0].set_ylabel("flip rate of the top 10 % (%)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=MODEL_COLOR["relu"], alpha=0.75, label="2L-ReLU (mean of seeds)"),
               Patch(color=MODEL_COLOR["attn"], alpha=0.75, label="MLP-Attn (mean of seeds)"),
               Patch(color="0.6", alpha=0.75, label="random signs (null)"),
               Line2D([], [], ls="", marker=".", color="k", label="seeds"),
               Line2D([], [], ls="", marker="D", color="k", mfc="white", label="paper")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=9)
    return fig


def plot_eps_ablation(result: Result, task: str):
    """Flip rate (%) against eps for each attack and model (mean ± sample standard deviation over
    seeds, :func:`ntkbook.stats.mean_spread`)."""
    eps = list(result.config["ablation_eps"])
    attacks = list(result.config["attacks"])
    fig, axes = new_figure(2, 1, width=8.0, height=3.4)
    for ax, what, label in zip(axes, ("flip", "rho"), ("flip rate (%)", "Spearman ρ")):
        for model in ("relu", "attn"):
            for atk in attacks:
                vals = np.stack([_vals(result, f"{task}/{model}", f"ablation/{atk}/{e:g}/{what}",
                                       100.0 if what == "flip" else 1.0) for e in eps])
                m, s = mean_spread(vals, axis=1)
                ax.errorbar(eps, m, yerr=s, color=MODEL_COLOR[model], marker=ATTACK_MARKER[atk],
                            capsize=2, label=f"{result['models'][model]} {atk.upper()}")
        ax.set_xlabel("ε (L∞, pixels in [0, 1])")
        ax.set_ylabel(label)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(-1.05, 1.05)
    fig.suptitle(result["tasks"][task], fontsize=11)
    axes[0].legend(fontsize=9, ncol=2)
    return fig


def plot_influence_scatter(result: Result, task: str, seed_index: int = 0):
    """Clean influence against influence after PGD on every training point, both models; the
    top-10 % set marked, flipped points in the off-diagonal quadrants."""
    fig, axes = new_figure(2, 1, width=8.0, height=3.6)
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
        ax.set_title(result["models"][model], fontsize=10)
    axes[0].set_ylabel("influence after PGD / max |·|")
    axes[0].legend(fontsize=9)
    return fig


def plot_landscape(result: Result, task_2d: str):
    """Left: 1-D filter-normalised slices of the training loss, every task and model (relative to
    the loss at the trained weights). Right: 2-D slices of ``task_2d`` for both models."""
    tasks = result.config["tasks"]
    r = result.config["landscape_radius"]
    fig, axes = new_figure(3, 1, width=10.0, height=3.4)
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1))]
    for ti, task in enumerate(tasks):
        for model in ("relu", "attn"):
            s = result[f"{task}/{model}/slice1d"]
            t = np.linspace(-r, r, s.size)
            axes[0].plot(t, s - s[s.size // 2], color=MODEL_COLOR[model], ls=styles[ti % len(styles)],
                         label=f"{result['models'][model]}, {result['tasks'][task]}")
    axes[0].set_xlabel("t (filter-normalised)")
    axes[0].set_ylabel("L(θ + t d) − L(θ)")
    axes[0].set_yscale("symlog", linthresh=1e-2)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=9)
    for ax, model in zip(axes[1:], ("relu", "attn")):
        s = result[f"{task_2d}/{model}/slice2d"]
        g = np.linspace(-r, r, s.shape[0])
        cs = ax.contour(g, g, s.T, levels=12, cmap="viridis")
        ax.clabel(cs, fontsize=9, fmt="%.2g")
        ax.plot(0, 0, "k+")
        ax.set_title(f"{result['models'][model]}, {result['tasks'][task_2d]}", fontsize=10)
        ax.set_xlabel("s (direction 1)")
        ax.set_ylabel("t (direction 2)")
    return fig


def plot_width(result: Result):
    """Flip rate (%) against width, every attack and the random-sign null, both models (mean ±
    sample standard deviation over seeds)."""
    widths = list(result.config["widths"])
    tasks = result.config["tasks"]
    attacks = list(result.config["attacks"])
    fig, axes = new_figure(len(tasks), 1, width=6.4 * len(tasks), height=3.6, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for model in ("relu", "attn"):
            for atk in attacks + ["random"]:
                name = "null_adversarial/random/flip" if atk == "random" else f"adversarial/{atk}/flip"
                vals = np.stack([_vals(result, f"{task}/{model}/{m}", name) for m in widths])
                mean, spread = mean_spread(vals, axis=1)
                ax.errorbar(widths, mean, yerr=spread, color=MODEL_COLOR[model],
                            marker=ATTACK_MARKER[atk], ls=":" if atk == "random" else "-", capsize=2,
                            label=f"{result['models'][model]} {'random' if atk == 'random' else atk.upper()}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("width m")
        ax.set_ylabel("flip rate (%)")
        ax.set_title(result["tasks"][task], fontsize=10)
        ax.legend(fontsize=9, ncol=1, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def plot_advtrain(result: Result, paper: dict):
    """PGD flip rate (%) after standard and after adversarial training, per task and model, seeds
    as dots; the paper's pair as open diamonds."""
    tasks = result.config["tasks"]
    fig, axes = new_figure(len(tasks), 1, width=4.0 * len(tasks), height=3.4, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, task in zip(axes, tasks):
        for j, model in enumerate(("relu", "attn")):
            for i, tag in enumerate(("standard", "adversarial")):
                v = _vals(result, f"{task}/{model}", f"{tag}/adversarial/pgd/flip")
                x = 3 * j + i
                ax.bar(x, v.mean(), color=MODEL_COLOR[model], alpha=0.45 if tag == "standard" else 0.9)
                ax.plot(np.full(v.size, x), v, "k.", ms=3)
                p = paper.get((task, model))
                if p is not None:
                    ax.plot(x, p[i], "D", color="k", mfc="white", ms=5)
        ax.set_xticks([0, 1, 3, 4], ["ReLU std", "ReLU adv", "Attn std", "Attn adv"], fontsize=9)
        ax.set_title(result["tasks"][task], fontsize=10)
    axes[0].set_ylabel("PGD flip rate (%)")
    axes[0].plot([], [], "D", color="k", mfc="white", label="paper")
    axes[0].legend(fontsize=9)
    return fig
