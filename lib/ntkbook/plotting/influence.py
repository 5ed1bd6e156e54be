"""Figures of the influence-malleability chapter (Paper A): flip rates against the paper's, the
eps ablation, influence before and after an attack, loss landscapes, flip rate against width and
under adversarial training. Each function takes results and returns the Figure.

A model that did not train (:func:`ntkbook.influence.readout.trained`) is marked wherever it is
drawn: hatched bars, hollow markers or faint lines, and "not trained" in the legend or title."""

from __future__ import annotations

import numpy as np

from ntkbook.influence import readout, scores
from ntkbook.plotting import PALETTE, legend_in, new_figure, panels
from ntkbook.stats import mean_spread
from ntkbook.store import Result

MODEL_COLOR = {"relu": PALETTE[0], "attn": PALETTE[1]}
ATTACK_MARKER = {"fgsm": "o", "pgd": "s", "mim": "^", "random": "x"}
#: the hatching of a bar that belongs to a model that did not train
NOT_TRAINED_HATCH = "////"


def _vals(result: Result, key: str, name: str, scale: float = 100.0) -> np.ndarray:
    return np.asarray(result["table"][key][name], dtype=np.float64) * scale


def _two_line_title(label: str) -> str:
    """A task's label on two lines (data set, then what is classified), to fit a narrow panel:
    "MNIST, 10 classes" -> "MNIST\\n10 classes", "CIFAR-10 automobile vs airplane" ->
    "CIFAR-10\\nautomobile vs airplane"."""
    head, sep, tail = label.partition(", ")
    if not sep:
        head, sep, tail = label.partition(" ")
    return f"{head}\n{tail}" if sep else label


def _bar(ax, x, value, color, *, trained: bool, alpha: float = 0.75, **kw):
    """A bar, hatched and pale when its model did not train."""
    if trained:
        ax.bar(x, value, color=color, alpha=alpha, **kw)
    else:
        ax.bar(x, value, facecolor="white", edgecolor=color, hatch=NOT_TRAINED_HATCH, lw=1.0, **kw)


def _not_trained_patch():
    from matplotlib.patches import Patch

    return Patch(facecolor="white", edgecolor="0.3", hatch=NOT_TRAINED_HATCH, label="model not trained")


def plot_flip_rates(result: Result, paper: dict, intervention: str = "adversarial"):
    """Per task: flip rate (%) of each model and attack (bars: mean over seeds, dots: seeds), the
    random-sign null (grey bar) and the paper's value (black diamond) where reported. Bars of a
    model that did not train are hatched. Two panels a row, the legend in the free cell."""
    tasks = result.config["tasks"]
    attacks = list(result.config["attacks"])
    fig, axes, spare = panels(len(tasks), row_height=2.9, spare=True, sharey=True)
    cols = attacks + ["random"]
    any_untrained = False
    for ax, task in zip(axes, tasks):
        for j, model in enumerate(("relu", "attn")):
            key = f"{task}/{model}"
            ok = readout.trained(result, task, model)
            any_untrained |= not ok
            for i, atk in enumerate(cols):
                name = (f"null_{intervention}/random/flip" if atk == "random"
                        else f"{intervention}/{atk}/flip")
                v = _vals(result, key, name)
                x = j * (len(cols) + 1) + i
                color = "0.6" if atk == "random" else MODEL_COLOR[model]
                _bar(ax, x, v.mean(), color, trained=ok, width=0.8)
                ax.plot(np.full(v.size, x), v, "k.", ms=3)
                p = paper.get((task, model), {}).get(atk)
                if p is not None:
                    ax.plot(x, p, "D", color="k", ms=5, mfc="white", mew=1.3)
        ticks = [j * (len(cols) + 1) + i for j in range(2) for i in range(len(cols))]
        ax.set_xticks(ticks, [c.upper() if c != "random" else "rand" for c in cols] * 2, rotation=90)
        ax.set_title(_two_line_title(result["tasks"][task]), pad=18)
        ax.tick_params(labelleft=True)
        for xpos, model in ((0.25, "relu"), (0.75, "attn")):
            ax.text(xpos, 1.01, result["models"][model], color=MODEL_COLOR[model], transform=ax.transAxes,
                    ha="center", va="bottom")
    for ax in axes[::2]:
        ax.set_ylabel("flip rate, top 10 % (%)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=MODEL_COLOR["relu"], alpha=0.75, label="2L-ReLU (mean of seeds)"),
               Patch(color=MODEL_COLOR["attn"], alpha=0.75, label="MLP-Attn (mean of seeds)"),
               Patch(color="0.6", alpha=0.75, label="random signs (null)")]
    if any_untrained:
        handles.append(_not_trained_patch())
    handles += [Line2D([], [], ls="", marker=".", color="k", label="seeds"),
                Line2D([], [], ls="", marker="D", color="k", mfc="white", label="paper")]
    legend_in(spare, fig, handles, [h.get_label() for h in handles], ncol=1)
    return fig


def plot_eps_ablation(result: Result, task: str):
    """Flip rate (%) and Spearman ρ against eps for each attack and model (mean ± sample standard
    deviation over seeds, :func:`ntkbook.stats.mean_spread`); a model that did not train dashed,
    with "not trained" in the legend."""
    eps = list(result.config["ablation_eps"])
    attacks = list(result.config["attacks"])
    fig, axes = new_figure(2, 1, height=3.2)
    for ax, what, label in zip(axes, ("flip", "rho"), ("flip rate (%)", "Spearman ρ")):
        for model in ("relu", "attn"):
            ok = readout.trained(result, task, model)
            for atk in attacks:
                vals = np.stack([_vals(result, f"{task}/{model}", f"ablation/{atk}/{e:g}/{what}",
                                       100.0 if what == "flip" else 1.0) for e in eps])
                m, s = mean_spread(vals, axis=1)
                ax.errorbar(eps, m, yerr=s, color=MODEL_COLOR[model], marker=ATTACK_MARKER[atk],
                            ls="-" if ok else "--", mfc=None if ok else "white", capsize=2,
                            label=f"{result['models'][model]} {atk.upper()}" + ("" if ok else " (not trained)"))
        ax.set_xlabel("ε (L∞, pixels in [0, 1])")
        ax.set_ylabel(label)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(-1.05, 1.05)
    fig.suptitle(result["tasks"][task])
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig


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


def plot_landscape(result: Result, task_2d: str):
    """(a) 1-D filter-normalised slices of the training loss, every task (line style) and model
    (colour), relative to the loss at the trained weights; faint: a model that did not train.
    (b), (c): 2-D slices of ``task_2d`` for both models. Two panels a row, the legend of (a) in the
    free cell."""
    from matplotlib.lines import Line2D

    tasks = result.config["tasks"]
    r = result.config["landscape_radius"]
    fig, axes, spare = panels(3, row_height=2.9, spare=True)
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1))]
    any_untrained = False
    for ti, task in enumerate(tasks):
        for model in ("relu", "attn"):
            s = result[f"{task}/{model}/slice1d"]
            t = np.linspace(-r, r, s.size)
            ok = readout.trained(result, task, model)
            any_untrained |= not ok
            axes[0].plot(t, s - s[s.size // 2], color=MODEL_COLOR[model], ls=styles[ti % len(styles)],
                         lw=1.5 if ok else 1.0, alpha=1.0 if ok else 0.4)
    axes[0].set_xlabel("t (filter-normalised)")
    axes[0].set_ylabel("L(θ + t d) − L(θ)")
    axes[0].set_yscale("symlog", linthresh=1e-2)
    axes[0].set_title("(a) 1-D slices")
    handles = [Line2D([], [], color=MODEL_COLOR[m], lw=1.5) for m in ("relu", "attn")]
    labels = [result["models"][m] for m in ("relu", "attn")]
    if any_untrained:
        handles.append(Line2D([], [], color=MODEL_COLOR["attn"], lw=1.0, alpha=0.4))
        labels.append("faint: not trained")
    for ti, task in enumerate(tasks):
        handles.append(Line2D([], [], color="k", lw=1.2, ls=styles[ti % len(styles)]))
        labels.append(result["tasks"][task].replace(" automobile vs airplane", " auto/plane"))
    legend_in(spare, fig, handles, labels, ncol=1, handlelength=2.2, labelspacing=0.3)
    for ax, model, letter in zip(axes[1:], ("relu", "attn"), "bc"):
        s = result[f"{task_2d}/{model}/slice2d"]
        g = np.linspace(-r, r, s.shape[0])
        cs = ax.contour(g, g, s.T, levels=6, cmap="viridis")
        ax.clabel(cs, fmt="%.2g", inline_spacing=2)
        ax.plot(0, 0, "k+")
        ok = readout.trained(result, task_2d, model)
        ax.set_title(f"({letter}) {result['models'][model]}" + ("" if ok else " (not trained)"))
        ax.set_xlabel("s (direction 1)")
        ax.set_ylabel("t (direction 2)")
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


def plot_advtrain(result: Result, paper: dict):
    """PGD flip rate (%) after standard and after adversarial training, per task and model, seeds
    as dots; the paper's pair as open diamonds; bars of a network that did not train hatched."""
    tasks = result.config["tasks"]
    fig, axes, _ = panels(len(tasks), row_height=3.2, sharey=True)
    any_untrained = False
    for ax, task in zip(axes, tasks):
        for j, model in enumerate(("relu", "attn")):
            for i, tag in enumerate(("standard", "adversarial")):
                v = _vals(result, f"{task}/{model}", f"{tag}/adversarial/pgd/flip")
                x = 3 * j + i
                ok = readout.trained(result, task, model, f"{tag}/train_acc")
                any_untrained |= not ok
                _bar(ax, x, v.mean(), MODEL_COLOR[model], trained=ok, alpha=0.45 if tag == "standard" else 0.9)
                ax.plot(np.full(v.size, x), v, "k.", ms=3)
                p = paper.get((task, model))
                if p is not None:
                    ax.plot(x, p[i], "D", color="k", mfc="white", ms=5)
        ax.set_xticks([0, 1, 3, 4], ["ReLU std", "ReLU adv", "Attn std", "Attn adv"], rotation=90)
        ax.set_title(_two_line_title(result["tasks"][task]))
        ax.tick_params(labelleft=True)
    axes[0].set_ylabel("PGD flip rate (%)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="D", color="k", mfc="white", label="paper"),
               Line2D([], [], ls="", marker=".", color="k", label="seeds")]
    if any_untrained:
        handles.append(_not_trained_patch())
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    return fig
