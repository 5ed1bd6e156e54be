"""The figure of the adversarial-training experiment (:mod:`ntkbook.experiments.influence_advtrain`):
PGD flip rate against the radius, standard against adversarial training, between the random-sign
null and the clean-share independence level.

A network that did not train (:data:`ntkbook.influence.readout.TRAINED_ACC`) is drawn with a hollow
marker, and "not trained" is in the legend."""

from __future__ import annotations

import numpy as np

from ntkbook.claims.influence_advtrain import summary
from ntkbook.plotting import PALETTE, legend_in, log_ticks, panels
from ntkbook.store import Result

TRAINING_COLOR = {"standard": PALETTE[0], "adversarial": PALETTE[1]}
TRAINING_LABEL = {"standard": "standard", "adversarial": "adversarial (PGD at ε)"}
#: the flip rates of the two trainings drawn this factor left and right of their radius, so that
#: their error bars do not hide each other
DODGE = {"standard": 1 / 1.06, "adversarial": 1.06}


def plot_flip_vs_eps(result: Result, ridge: str | None = None):
    """One panel per (task, model): the PGD flip rate (%) against eps (log axis) of the standard
    network and of the network adversarially trained at that eps (mean ± sample standard deviation
    over seeds, error bars; drawn a little left and right of their radius), each network's random-sign null (filled band, mean ± spread) and
    clean-share independence level (faint band, dotted at its mean), at ``ridge`` (default: the result's
    first, ``K + lam I``; :func:`ntkbook.claims.influence_advtrain.summary`). Two panels a row,
    the legend below."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = summary(result, ridge)
    cfg = result.config
    cells = [(task, model) for task in cfg["tasks"] for model in cfg["models"]]
    fig, axes, _ = panels(len(cells), row_height=3.2, sharey=True)
    eps = np.asarray(cfg["eps"], dtype=np.float64)
    any_untrained = False
    for ax, (task, model) in zip(axes, cells):
        mine = [r for r in rows if r["task"] == task and r["model"] == model]
        for training, color in TRAINING_COLOR.items():
            def series(measure):
                m = np.array([r[training][measure][0] for r in mine]) * 100
                s = np.array([r[training][measure][1] for r in mine]) * 100
                return m, s

            m, s = series("null")
            ax.fill_between(eps, m - s, m + s, color=color, alpha=0.2, lw=0)
            m, s = series("ceiling")
            ax.fill_between(eps, m - s, m + s, color=color, alpha=0.08, lw=0)
            ax.plot(eps, m, color=color, ls=":", lw=1.2)
            m, s = series("flip")
            x = eps * DODGE[training]
            ax.errorbar(x, m, yerr=s, color=color, lw=1.8, capsize=3, marker="none")
            for e, mean, r in zip(x, m, mine):
                trained = r[training]["trained"]
                any_untrained |= not trained
                ax.plot([e], [mean], marker="o", ms=6, color=color, mfc=color if trained else "white")
        ax.set_xscale("log")
        ax.set_xlim(eps[0] / 1.5, eps[-1] * 1.5)
        log_ticks(ax.xaxis, eps)
        ax.set_ylim(0, 100)
        ax.set_xlabel("ε (L∞)")
        title = result["models"][model]
        ax.set_title(title if len(cfg["tasks"]) == 1 else f"{title}, {result['tasks'][task]}")
        ax.tick_params(labelleft=True)
    axes[0].set_ylabel("PGD flip rate (%)")
    handles = [Line2D([], [], color=c, lw=2, marker="o", label=TRAINING_LABEL[t]) for t, c in TRAINING_COLOR.items()]
    handles += [Patch(color="0.3", alpha=0.3, lw=0, label="random-sign null"),
                Line2D([], [], color="0.3", ls=":", label="clean-share independence level")]
    if any_untrained:
        handles.append(Line2D([], [], color="0.3", ls="none", marker="o", mfc="white", label="not trained"))
    legend_in(None, fig, handles, [h.get_label() for h in handles], ncol=2)
    return fig
