"""Figures of the one-layer-transformer chapter (results of ``modular_transformer``)."""

from __future__ import annotations

import numpy as np

from ntkbook.plotting import PALETTE, legend_in, new_figure, panels
from ntkbook.store import Result

__all__ = [
    "FAMILY_COLORS",
    "plot_training",
    "plot_key_power",
    "plot_spectra",
    "plot_content",
    "plot_eigenvectors",
    "plot_dynamics",
    "plot_lanczos",
    "relative_gap",
]

#: colour of each Fourier family (content columns) in every figure
FAMILY_COLORS = {"const": "0.35", "axis_sum": PALETTE[0], "axis_diff": PALETTE[5], "sum": PALETTE[1],
                 "diff": PALETTE[4], "other": "0.85"}
FAMILY_LABELS = {"const": "constant", "axis_sum": "axis sum", "axis_diff": "axis difference",
                 "sum": "sum", "diff": "difference", "other": "other"}
_SHORT_LABELS = {**FAMILY_LABELS, "const": "const.", "axis_diff": "axis diff.", "diff": "diff."}


def _window(result: Result, run: str):
    g = result["per_run"][run]["grokking"]
    return float(g["test10"]), float(g["test_grok"])


def _shade(ax, result: Result, run: str, label: bool = True):
    lo, hi = _window(result, run)
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axvspan(lo, hi, color="0.88", zorder=0, label="grokking window" if label else None)


def plot_training(result: Result):
    """Accuracy and loss of every run: the main run bold, the others thin; the author's log as
    crosses (his epoch e drawn at e + 1) when the main run is the replay."""
    fig, (ax1, ax2) = new_figure(2, height=3.4)
    main = result["main"]
    runs = [r for r in result["runs"] if r != "replay" or r == main]
    for r in runs:
        ep = result[f"{r}/hist_epoch"]
        bold = r == main
        lw, alpha = (1.8, 1.0) if bold else (0.8, 0.5)
        ax1.plot(ep, result[f"{r}/hist_train_acc"], color=PALETTE[0], lw=lw, alpha=alpha,
                 label="train" if bold else None)
        ax1.plot(ep, result[f"{r}/hist_test_acc"], color=PALETTE[1], lw=lw, alpha=alpha,
                 label="test" if bold else None)
        ax2.plot(ep[1:], result[f"{r}/hist_train_loss"][1:], color=PALETTE[0], lw=lw, alpha=alpha,
                 label="train" if bold else None)
        ax2.plot(ep, result[f"{r}/hist_test_loss"], color=PALETTE[1], lw=lw, alpha=alpha,
                 label="test" if bold else None)
    if main == "replay":
        log = result["author_log"]
        e = np.array([int(k) + 1 for k in log])
        ax1.plot(e, [v[1] / 100 for v in log.values()], "x", color="k", ms=6, label="author's log")
        ax2.plot(e, [max(v[0], 1e-4) for v in log.values()], "x", color="k", ms=6, label="author's log")
    for ax in (ax1, ax2):
        _shade(ax, result, main, label=ax is ax1)
        ax.set_xlabel("epochs completed")
    ax1.set_ylabel("accuracy")
    ax2.set_ylabel("cross-entropy")
    ax2.set_yscale("log")
    ax1.set_title("accuracy")
    ax2.set_title("loss")
    # one legend for both panels, below them, where it hides none of the thin curves
    h, lab = ax1.get_legend_handles_labels()
    lab = [f"{x} ({main} run bold, others thin)" if x == "train" else x for x in lab]
    fig.legend(h, lab, loc="outside lower center", ncol=1)
    return fig


def plot_key_power(result: Result, runs=None):
    """Bar charts of the embedding's Fourier power per frequency at the end of each run, key
    frequencies coloured, the threshold dashed."""
    runs = runs or [r for r in result["runs"] if r != "replay" or r == result["main"]]
    n = len(runs)
    fig, axes, _ = panels(n, row_height=2.5, sharey=True)
    thr = result.config["key_threshold"]
    for i, (ax, r) in enumerate(zip(axes, runs)):
        s = result["per_run"][r]
        power = np.asarray(s["key_power"], dtype=float)
        ks = np.arange(1, power.size + 1)
        colors = [PALETTE[1] if k in s["key_frequencies"] else "0.6" for k in ks]
        ax.bar(ks, power, color=colors)
        ax.axhline(thr * power.max(), color="k", ls="--", lw=1)
        ax.set_xticks(ks[4::5])
        ax.set_title(f"{r}: key {', '.join(str(k) for k in s['key_frequencies'])}")
        ax.set_xlabel("frequency $k$")
        if i % 2 == 0:
            ax.set_ylabel("share of power")
    return fig


def plot_spectra(result: Result, top: int = 40):
    """Normalised top-``top`` spectra (λ_i / λ_1) of the nine groups of the main run, mean-logit
    (dots, coloured by each eigenvector's leading family where known) and trace (grey line)."""
    main = result["main"]
    names = result["group_names"]
    fig, axes = new_figure(3, 3, height=7.0, sharex=True, sharey=True)
    kinds = result["content_names"]
    for ax, name in zip(axes.ravel(), names):
        lam = np.asarray(result[f"{main}/ml_eigenvalues/{name}"])[:top]
        lam = lam / lam[0]
        content = np.asarray(result[f"{main}/ml_content/{name}"])
        cols = ["0.6"] * lam.size
        for i in range(min(content.shape[0], lam.size)):
            cols[i] = FAMILY_COLORS[kinds[int(np.argmax(content[i]))]]
        key = f"main/tr_eigenvalues/{name}"
        if key in result.arrays:
            lt = np.asarray(result[key])[:top]
            ax.plot(np.arange(1, lt.size + 1), lt / lt[0], color="0.5", lw=1, label="trace")
        ax.scatter(np.arange(1, lam.size + 1), np.clip(lam, 1e-8, None), c=cols, s=14, zorder=3)
        ax.set_yscale("log")
        ax.set_ylim(1e-6, 1.5)
        ax.set_yticks([1e-6, 1e-3, 1])
        ax.yaxis.set_minor_locator(__import__("matplotlib").ticker.NullLocator())
        ax.set_title(name)
    for ax in axes[-1]:
        ax.set_xlabel("rank")
    for ax in axes[:, 0]:
        ax.set_ylabel("λ / λ₁")
    handles = [axes[0, 0].scatter([], [], color=c, s=20, label=FAMILY_LABELS[k])
               for k, c in FAMILY_COLORS.items()]
    if any(f"main/tr_eigenvalues/{n}" in result.arrays for n in names):
        handles.append(axes[0, 0].plot([], [], color="0.5", lw=1, label="trace kernel")[0])
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    return fig


def plot_content(result: Result, reduction: str = "ml", n: int | None = None):
    """Stacked bars: the share of each top eigenvector's norm in each Fourier family at the key
    frequencies, for the nine groups (``reduction`` ``"ml"`` mean-logit or ``"tr"`` trace)."""
    main = result["main"]
    names = result["group_names"]
    kinds = result["content_names"]
    prefix = f"{main}/ml_content" if reduction == "ml" else "main/tr_content"
    fig, axes = new_figure(3, 3, height=6.6, sharex=True, sharey=True)
    for ax, name in zip(axes.ravel(), names):
        c = np.asarray(result[f"{prefix}/{name}"])
        if n is not None:
            c = c[:n]
        x = np.arange(1, c.shape[0] + 1)
        bottom = np.zeros(c.shape[0])
        for j, kind in enumerate(kinds):
            ax.bar(x, c[:, j], bottom=bottom, color=FAMILY_COLORS[kind], width=0.85,
                   label=FAMILY_LABELS[kind])
            bottom += c[:, j]
        ax.set_ylim(0, 1)
        ax.set_yticks([0, 0.5, 1])
        ax.set_title(name)
        ax.set_xticks(x[::4] if x.size > 8 else x[::2])
    for ax in axes[-1]:
        ax.set_xlabel("rank")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of norm²")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncol=2)
    return fig


def plot_eigenvectors(result: Result, groups=("W_in", "W_out", "W_U"), n: int = 6):
    """Top ``n`` mean-logit eigenvectors of some groups of the main run as ``p × p`` images
    (a down, b across), titled with their leading family and its share."""
    main = result["main"]
    p = result.config["p"]
    kinds = result["content_names"]
    ncols = 3
    rows_per_group = -(-n // ncols)
    fig, axes = new_figure(ncols, rows_per_group * len(groups), height=2.05 * rows_per_group * len(groups),
                           squeeze=False)
    for ax in axes[:, :].ravel():
        ax.set_axis_off()
    for gi, name in enumerate(groups):
        V = np.asarray(result[f"{main}/ml_eigenvectors/{name}"], dtype=float)
        c = np.asarray(result[f"{main}/ml_content/{name}"])
        for i in range(n):
            ax = axes[gi * rows_per_group + i // ncols, i % ncols]
            ax.set_axis_on()
            img = V[:, i].reshape(p, p)
            m = np.abs(img).max()
            ax.imshow(img, cmap="RdBu_r", vmin=-m, vmax=m)
            j = int(np.argmax(c[i]))
            ax.set_title(f"{name} #{i + 1}\n{_SHORT_LABELS[kinds[j]]} {c[i, j]:.2f}")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
    return fig


def plot_dynamics(result: Result, run: str | None = None):
    """Overlaps of the W_U and W_out top eigenvectors with the Fourier features at the key
    frequencies over training (left), their derivatives (middle), and the test accuracy (right),
    grokking window shaded; the author's W_U curve (read off his figure) as crosses."""
    run = run or result["main"]
    ep = np.asarray(result[f"{run}/snapshot_epochs"], dtype=float)
    dyn = np.asarray(result[f"{run}/dynamics"])
    metrics = [tuple(m) for m in result["dyn_metrics"]]
    fig, (a1, a2, a3), spare = panels(3, row_height=2.9, spare=True)
    show = [("W_U", "2K+1", "sum", PALETTE[1], "-"), ("W_U", "4K+1", "axis_sum", PALETTE[0], "-"),
            ("W_out", "4K+1", "sum", PALETTE[1], "--"), ("W_out", "4K+1", "axis_sum", PALETTE[0], "--")]
    for kernel, window, feat, color, ls in show:
        y = dyn[:, metrics.index((kernel, window, feat))]
        lab = f"{kernel} top {window}\nvs {feat.replace('_', ' ')}"
        a1.plot(ep, y, color=color, ls=ls, lw=1.5, label=lab)
        # the derivative from the first logged epoch on (epoch 0 -> 1 is a one-epoch step)
        a2.plot(ep[1:], np.gradient(y[1:], ep[1:]), color=color, ls=ls, lw=1.2, label=lab)
    if run == "replay":
        d = result["author"]["W_U_dynamics"]
        a1.plot([int(k) for k in d], list(d.values()), "x", color="k", ms=7, label="author, W_U top 5\nvs sum")
    a3.plot(result[f"{run}/hist_epoch"], result[f"{run}/hist_test_acc"], color=PALETTE[1], label="test accuracy")
    a3.plot(result[f"{run}/hist_epoch"], result[f"{run}/hist_train_acc"], color=PALETTE[0], ls=":",
            label="train accuracy")
    for ax in (a1, a2, a3):
        _shade(ax, result, run, label=ax is a3)
        ax.set_xlabel("epochs completed")
    a1.set_ylabel("overlap / $2K$")
    a2.set_ylabel("d(overlap)/d(epoch)")
    a3.set_ylabel("accuracy")
    a1.set_title("alignment")
    a2.set_title("its derivative")
    a3.set_title("accuracy")
    # one legend for the three panels, in the free cell, where it hides no curve
    h, lab = a1.get_legend_handles_labels()
    h3, lab3 = a3.get_legend_handles_labels()
    legend_in(spare, fig, h + h3, lab + lab3, ncol=1)
    return fig


def relative_gap(eigenvalues, k: int) -> float:
    """``(λ_k - λ_{k+1}) / (λ_{k+1} - λ_N)`` of a spectrum (any order): the gap after the k-th
    eigenvalue relative to the spread of the rest, which sets how fast Lanczos finds the top k."""
    lam = np.sort(np.asarray(eigenvalues, dtype=float))[::-1]
    return float((lam[k - 1] - lam[k]) / (lam[k] - lam[-1]))


def plot_lanczos(result: Result):
    """Largest relative eigenvalue error of Lanczos (top k) per group with 2k + 10 and 6k
    products, against dense ``eigh``, beside the relative gap after the k-th eigenvalue."""
    lz = result["main_analysis"]["lanczos"]
    names = list(lz)
    fig, (a1, a2) = new_figure(2, height=3.6)
    x = np.arange(len(names))
    for off, key, color in ((-0.2, "default", PALETTE[1]), (0.2, "long", PALETTE[0])):
        err = [max(lz[n][key]["max_rel_error"], 1e-17) for n in names]
        a1.bar(x + off, err, width=0.4, color=color,
               label=f"{lz[names[0]][key]['num_matvecs']} products")
    a1.set_yscale("log")
    a1.set_xticks(x, names, rotation=90)
    a1.set_ylabel("max |Δλ| / λ₁ (top k)")
    a1.set_title("Lanczos vs dense")
    fig.legend(*a1.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    main, k = result["main"], result.config["lanczos_k"]
    gaps = []
    for n in names:
        lam = np.asarray(result[f"{main}/ml_eigenvalues/{n}"])
        gaps.append(relative_gap(lam, k))
    a2.bar(x, gaps, color="0.5")
    a2.set_yscale("log")
    a2.set_xticks(x, names, rotation=90)
    a2.set_ylabel(r"$(\lambda_k - \lambda_{k+1}) / (\lambda_{k+1} - \lambda_N)$")
    a2.set_title(f"gap after the top $k = {k}$")
    return fig
