"""Figures of the linear-attention chapter (Paper A): Gram spectra, ridges, NTK distance, kernel
movement. Each function takes a :class:`~ntkbook.store.Result` and returns the Figure."""

from __future__ import annotations

import numpy as np

from ntkbook.plotting import PALETTE, new_figure
from ntkbook.store import Result

MODEL_STYLE = {"relu": dict(color=PALETTE[0], marker="o"), "attn": dict(color=PALETTE[1], marker="s")}


def plot_gram_spectra(result: Result):
    """Normalised eigenvalues of G, of G~ = G^3 (measured from the attention output and as the cube
    of G's), of G~ by a naive eigh, and of the row-normalised attention Gram, per data set."""
    names = result["datasets"]
    fig, axes = new_figure(len(names), 1, width=3.3 * len(names), height=3.4, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names):
        s = result["per_dataset"][name]
        lam = result[f"{name}/lam_G"]
        lam_t = result[f"{name}/lam_Gt"]
        naive = result[f"{name}/lam_Gt_naive"]
        lam_h = result[f"{name}/lam_Ghat"]
        r, rt, rh = s["rank_G"], s["rank_Gt"], s["rank_Ghat"]
        k = np.arange(1, lam.size + 1)
        ax.semilogy(k[:r], lam[:r] / lam[0], color=PALETTE[0], lw=1.5, label=r"$G = XX^\top$")
        ax.semilogy(k[:r], (lam[:r] / lam[0]) ** 3, color="k", lw=2.5, alpha=0.35, label=r"$\lambda(G)^3$")
        ax.semilogy(k[:rt], lam_t[:rt] / lam_t[0], color=PALETTE[1], lw=1, ls="--",
                    label=r"$\tilde G$ (SVD of $XX^\top X$)")
        kn = np.arange(1, naive.size + 1)
        ax.semilogy(kn, np.abs(naive) / naive[0], color="0.5", lw=0.8, ls=":",
                    label=r"$|\lambda|$ of $\tilde G$ by eigh")
        ax.semilogy(k[:rh], lam_h[:rh] / lam_h[0], color=PALETTE[2], lw=1.2,
                    label=r"$\hat G$ (row-normalised)")
        ax.set_title(result["labels"][name], fontsize=9)
        ax.set_xlabel("eigenvalue index $k$")
    axes[0].set_ylabel(r"$\lambda_k / \lambda_1$")
    axes[0].legend(fontsize=7, loc="lower left")
    return fig


def plot_ridge(result: Result):
    """Condition number with a ridge ``r * lambda_max`` versus ``r``: G, G~, G^ and kappa_r(G)^3."""
    names = result["datasets"]
    ridges = result["rel_ridges"]
    fig, axes = new_figure(len(names), 1, width=3.3 * len(names), height=3.2, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names):
        g, gt, gh = (result[f"{name}/{k}"] for k in ("ridge_G", "ridge_Gt", "ridge_Ghat"))
        ax.loglog(ridges, g, "o-", ms=3, color=PALETTE[0], label=r"$\kappa(G + rλ_1 I)$")
        ax.loglog(ridges, g**3, "-", lw=2.5, alpha=0.35, color="k", label=r"$\kappa(G + rλ_1 I)^3$")
        ax.loglog(ridges, gt, "s--", ms=3, color=PALETTE[1], label=r"$\kappa(\tilde G + r\tilde λ_1 I)$")
        ax.loglog(ridges, gh, "^-", ms=3, color=PALETTE[2], label=r"$\kappa(\hat G + r\hat λ_1 I)$")
        ax.loglog(ridges, 1 + 1 / ridges, "k:", lw=0.8, label=r"$1 + 1/r$ (cap)")
        ax.set_title(result["labels"][name], fontsize=9)
        ax.set_xlabel("relative ridge $r$")
    axes[0].set_ylabel("condition number")
    axes[0].legend(fontsize=7)
    return fig


def _width_axis(ax, widths):
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(widths))
    ax.set_xticklabels([str(int(w)) for w in widths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("width $m$")


def _stat(result: Result, task: str, model: str, key: str, widths, relative: bool = False):
    entry = result["table"][f"{task}/{model}"]["points"]
    vals = np.array([entry[str(m)][key] for m in widths], dtype=float)  # (W, seeds)
    if relative:
        vals = vals / result[f"{task}/{model}/ntk_rms"][-2]
    return vals.mean(axis=1), vals.std(axis=1)


def plot_ntk_distance(result: Result, key: str = "dist_test_T", *, relative: bool = False, ylabel=None):
    """``||f_m - f_NTK||`` versus width, log-log, one panel per task, mean +- std over seeds,
    with a ``1/sqrt(m)`` reference line."""
    tasks = list(result.config["tasks"])
    widths = np.asarray(result["widths"])
    fig, axes = new_figure(len(tasks), 1, width=3.3 * len(tasks), height=3.3)
    axes = np.atleast_1d(axes)
    for ax, task in zip(axes, tasks):
        for model in result.config["models"]:
            mu, sd = _stat(result, task, model, key, widths, relative)
            ax.errorbar(widths, mu, yerr=sd, capsize=3, lw=1.3, ms=4, label=result["models"][model],
                        **MODEL_STYLE[model])
            ref = mu[0] * np.sqrt(widths[0] / widths)
            ax.loglog(widths, ref, ls=":", lw=0.8, color=MODEL_STYLE[model]["color"])
        _width_axis(ax, widths)
        ax.set_title(result["tasks"][task], fontsize=9)
    axes[0].set_ylabel(ylabel or (r"$\|f_m - f_{NTK}\|$ / RMS$(f_{NTK})$" if relative else r"$\|f_m - f_{NTK}\|$ (RMS over test)"))
    axes[0].plot([], [], "k:", lw=0.8, label=r"$\propto 1/\sqrt{m}$")
    axes[0].legend(fontsize=7)
    return fig


def plot_kernel_movement(result: Result):
    """``||K_T - K_0||_F / ||K_0||_F`` versus width for GD (solid) and Adam (dashed), and the
    deviation at initialisation ``||K_0 - K||_F / ||K||_F`` (dotted), with a ``1/sqrt(m)`` line."""
    tasks = list(result.config["tasks"])
    widths = np.asarray(result["widths"])
    fig, axes = new_figure(len(tasks), 1, width=3.3 * len(tasks), height=3.3, sharey=True)
    axes = np.atleast_1d(axes)
    has_adam = "adam_kernel_move" in result["table"][f"{tasks[0]}/{result.config['models'][0]}"]["points"][str(widths[0])]
    for ax, task in zip(axes, tasks):
        for model in result.config["models"]:
            st = MODEL_STYLE[model]
            mu, sd = _stat(result, task, model, "kernel_move_T", widths)
            ax.errorbar(widths, mu, yerr=sd, capsize=3, lw=1.3, ms=4, color=st["color"], marker=st["marker"],
                        label=f"{result['models'][model]}, GD")
            if has_adam:
                mu, sd = _stat(result, task, model, "adam_kernel_move", widths)
                ax.errorbar(widths, mu, yerr=sd, capsize=3, lw=1, ms=4, ls="--", mfc="none",
                            color=st["color"], marker=st["marker"], label=f"{result['models'][model]}, Adam")
        ref = 1.0 / np.sqrt(widths)
        ax.loglog(widths, ref, "k:", lw=0.9, label=r"$1/\sqrt{m}$")
        _width_axis(ax, widths)
        ax.set_title(result["tasks"][task], fontsize=9)
    axes[0].set_ylabel(r"$\|K_T - K_0\|_F / \|K_0\|_F$")
    axes[0].legend(fontsize=7)
    return fig


def plot_distance_vs_time(result: Result, task: str):
    """Relative distance to the NTK predictor along training, one line per width, both models."""
    widths = np.asarray(result["widths"])
    steps = np.asarray(result["snapshots"])
    models = list(result.config["models"])
    fig, axes = new_figure(len(models), 1, width=3.3 * len(models), height=3.1, sharey=True)
    axes = np.atleast_1d(axes)
    cmap = __import__("matplotlib").colormaps["viridis"]
    for ax, model in zip(axes, models):
        rms = result[f"{task}/{model}/ntk_rms"][:-1]
        for i, m in enumerate(widths):
            d = result[f"{task}/{model}/m={m}/dist_test"].mean(axis=0)
            ok = (steps > 0) & (rms > 0)
            ax.loglog(steps[ok], d[ok] / rms[ok], "o-", ms=3, color=cmap(i / max(len(widths) - 1, 1)), label=f"m = {m}")
        ax.set_title(f"{result['models'][model]}: {result['tasks'][task]}", fontsize=9)
        ax.set_xlabel("GD step $k$ (time $t = k\\,\\mathrm{lr}$)")
    axes[0].set_ylabel(r"$\|f_m - f_{NTK}\|$ / RMS$(f_{NTK})$")
    axes[0].legend(fontsize=7)
    return fig
