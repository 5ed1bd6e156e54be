"""Figures of the chapter on the empirical NTK and Lanczos (experiments ``entk_convergence`` and
``lanczos_ghosts``)."""

from __future__ import annotations

import matplotlib.ticker
import numpy as np

from ntkbook.experiments.lanczos_ghosts import KEYS
from ntkbook.plotting import PALETTE, new_figure
from ntkbook.store import Result


def plot_entk_convergence(result: Result):
    """Two panels: (a) relative Frobenius error of the eNTK against the width, log-log, per seed and
    averaged, with the closed-form expected error of ``K_W`` (a ``1/sqrt(m)`` line); (b) entries of
    ``K_W`` at the smallest and largest width against the analytic ``Θ_W``."""
    fig, (ax1, ax2) = new_figure(2, height=3.9)
    m = result["widths"]
    for key, label, color in (("err_W", r"$K_W$ (first layer)", PALETTE[0]),
                              ("err_all", r"$K_W + K_a$ (both layers)", PALETTE[1])):
        err = result[key]
        for s in range(err.shape[1]):
            ax1.loglog(m, err[:, s], ".", color=color, alpha=0.35, ms=4)
        slope = result["slope_W" if key == "err_W" else "slope_all"]
        ax1.loglog(m, err.mean(axis=1), "o-", color=color, ms=4,
                   label=f"{label}, slope {slope:.2f}".replace("-", "\u2212"))
    ax1.loglog(m, result["predicted_W"], "k--", lw=1,
               label=r"expected error of $K_W$, $\propto 1/\sqrt{m}$")
    ax1.set_xscale("log", base=2)
    shown = m[::3] if m.size > 6 else m[::2] if m.size > 3 else m
    ax1.set_xticks(shown)
    ax1.set_xticklabels([f"$2^{{{int(round(np.log2(w)))}}}$" for w in shown])
    ax1.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax1.set_xlabel("width $m$")
    ax1.set_ylabel(r"$\|K_m - \Theta_\infty\|_F \,/\, \|\Theta_\infty\|_F$")
    ax1.set_title("(a) distance to $\\Theta_\\infty$")

    theta = result["theta_W"]
    off = ~np.eye(theta.shape[0], dtype=bool)
    small, large = result["smallest_width"], result["largest_width"]
    for key, w, color in (("K_W_smallest", small, PALETTE[1]), ("K_W_largest", large, PALETTE[0])):
        ax2.plot(theta[off], result[key][off], ".", ms=2, alpha=0.5, color=color,
                 label=f"$m = {w}$")
    lo, hi = float(theta[off].min()), float(theta[off].max())
    ax2.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax2.set_xlabel(r"analytic $\Theta_W(x_i, x_j)$")
    ax2.set_ylabel(r"empirical $K_W(x_i, x_j)$")
    ax2.set_title(r"(b) entries $i \neq j$, one seed")
    ax2.legend(markerscale=4, loc="upper left", handletextpad=0.1, borderaxespad=0.2)
    fig.legend(*ax1.get_legend_handles_labels(), loc="outside lower center", ncol=1)
    return fig


def plot_lanczos_ghosts(result: Result, *, n_lines: int | None = None):
    """Four panels: the ``i``-th largest Ritz value of the synthetic operator after each step,
    (a) plain recurrence, (b) with full re-orthogonalisation, exact eigenvalues dashed; (c) loss of
    orthogonality ``max_i |q_s . q_i|``; (d) largest relative error of the top-``k`` Ritz values
    against the number of products, for the synthetic operator and the eNTK.

    Every curve is in a legend: one above panels (a) and (b) for the ``n_lines`` Ritz values, one
    below (c) and (d) for the four runs, both outside the axes so that they hide nothing."""
    fig, axes = new_figure(2, 2, height=7.2, sharex="row")
    (ax1, ax2), (ax3, ax4) = axes
    exact = result[KEYS["synthetic"]["exact"]]
    n_top = int(result.config["n_top"])
    n_lines = n_lines or n_top
    colors = [PALETTE[i % 6] for i in range(n_lines)]
    for ax, label, title in ((ax1, "plain", "(a) plain recurrence"),
                             (ax2, "reorth", "(b) re-orthogonalised")):
        hist = result[KEYS["synthetic"][f"{label}_ritz"]]
        steps = np.arange(1, hist.shape[0] + 1)
        for lam in exact[:n_top]:
            ax.axhline(lam, color="0.6", ls="--", lw=0.7)
        for i in range(n_lines):
            ax.plot(steps, hist[:, i], color=colors[i], lw=1.3, ls="-" if i < 6 else "--",
                    label=rf"$\theta_{{{i + 1}}}$" if ax is ax1 else None)
        ax.set_yscale("log")
        ax.set_ylim(0.5 * exact[n_top - 1], 1.5 * exact[0])
        ax.set_xlabel("Lanczos step $s$")
        ax.set_title(title)
    ax1.set_ylabel(rf"$i$-th largest Ritz value $\theta_i$")
    ax2.tick_params(labelleft=False)
    ax2.sharey(ax1)
    fig.legend(loc="outside upper center", ncol=min(n_lines, 5), columnspacing=1.0, handlelength=1.5,
               title="Ritz values $\\theta_i$ (exact eigenvalues: grey dashed)")

    styles = {"synthetic": "-", "entk": ":"}
    names = {"synthetic": "synthetic", "entk": "eNTK (MNIST)"}
    for op in ("synthetic", "entk"):
        for label, color in (("plain", PALETTE[1]), ("reorth", PALETTE[0])):
            orth = result[KEYS[op][f"{label}_orth"]]
            ax3.semilogy(np.arange(1, orth.size + 1), np.maximum(orth, 1e-17), styles[op], color=color,
                         lw=1.5, label=f"{names[op]}, {'plain' if label == 'plain' else 're-orthogonalised'}")
            err = result[KEYS[op][f"{label}_topk_error"]]
            ax4.semilogy(np.arange(1, err.size + 1), np.maximum(err, 1e-17), styles[op], color=color,
                         lw=1.5)
    ax3.set_xlabel("Lanczos step $s$")
    ax3.set_ylabel(r"$\max_{i < s}\, |q_s^\top q_i|$")
    ax3.set_title("(c) orthogonality lost")
    fig.legend(*ax3.get_legend_handles_labels(), loc="outside lower center", ncol=1)
    k = int(result.config["k"])
    ax4.set_xlabel("products")
    ax4.set_ylabel(rf"$\max_{{i \leq {k}}} |\theta_i - \lambda_i| / \lambda_1$")
    ax4.set_title(f"(d) error, top {k}")
    return fig
