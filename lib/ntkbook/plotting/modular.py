"""Figures of the modular-addition MLP chapter (results of ``modular_mlp``)."""

from __future__ import annotations

import numpy as np

from ntkbook.experiments.modular_mlp import EIGVEC_KEYS
from ntkbook.plotting import PALETTE, legend_in, new_figure, panels
from ntkbook.store import Result

__all__ = [
    "grokking_window",
    "plot_grokking",
    "plot_spectra",
    "plot_eigenvectors",
    "plot_dynamics",
    "plot_crosscheck",
    "spectrum_without_constant",
]


def grokking_window(result: Result) -> tuple[float, float]:
    """Mean over seeds of the epochs at which test accuracy first reaches 10% and 90%."""
    g = result["grokking"]
    t10 = np.array([float(s["test10"]) for s in g])
    t90 = np.array([float(s["test90"]) for s in g])
    lo = float(np.mean(t10)) if np.all(np.isfinite(t10)) else float("nan")
    hi = float(np.mean(t90)) if np.all(np.isfinite(t90)) else float("nan")
    return lo, hi


def _shade_window(ax, result: Result, label: bool = True):
    lo, hi = grokking_window(result)
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axvspan(lo, hi, color="0.85", zorder=0, label="grokking window" if label else None)


def plot_grokking(result: Result):
    """Train/test accuracy and loss versus epoch (each seed thin, mean bold), window shaded."""
    fig, (ax1, ax2) = new_figure(2, height=3.4)
    ep = result["epochs"]
    for ax, keys, ylabel in ((ax1, ("train_acc", "test_acc"), "accuracy"),
                             (ax2, ("train_loss", "test_loss"), "MSE loss")):
        _shade_window(ax, result, label=ax is ax1)
        for key, color in zip(keys, PALETTE):
            v = result[key]
            for row in v:
                ax.plot(ep, row, color=color, lw=0.6, alpha=0.35)
            ax.plot(ep, v.mean(axis=0), color=color, lw=1.8, label=key.split("_")[0])
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
    mem = np.mean([float(s["memorisation"]) for s in result["grokking"]])
    if np.isfinite(mem):
        ax1.axvline(mem, color="k", ls=":", lw=1, label="train acc. 99%")
    ax2.set_yscale("log")
    fig.legend(*ax1.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    ax1.set_title("accuracy (chance $1/p$)")
    ax2.set_title("loss")
    return fig


def spectrum_without_constant(result: Result, seed: int, t: int):
    """``(constant eigenvalue or None, the other eigenvalues)`` of snapshot ``t`` of ``seed``."""
    lam = np.asarray(result["eigenvalues"][seed, t], dtype=float)
    ci = int(result["constant_index"][seed, t])
    if ci < 0:
        return None, lam
    return lam[ci], np.delete(lam, ci)


def plot_spectra(result: Result, seed: int = 0, labels=("init", "memorisation", "final")):
    """Log spectra at init, memorisation and the end, constant mode apart, cliffs marked."""
    snaps = list(result["snapshot_epochs"])
    epochs = result["eigvec_epochs"]
    labels = [l for l in labels if l in epochs]
    fig, axes, spare = panels(len(labels), row_height=3.0, spare=True)
    d1 = int(result["first_cliff_theory"])
    n_all = len(result["eigenvalues"][seed, 0]) - 1
    for ax, label in zip(axes, labels):
        t = snaps.index(epochs[label])
        n_show = min(n_all, max(3 * d1, int(np.sum(result["cliff_sizes"][seed, t])) + d1 // 2))
        const, lam = spectrum_without_constant(result, seed, t)
        idx = np.arange(1, n_show + 1)
        ax.semilogy(idx, lam[:n_show], ".", ms=3, color=PALETTE[0], label="eigenvalues")
        if const is not None:
            ax.semilogy([0], [const], "*", ms=9, color=PALETTE[1], label="constant mode")
        for k, e in enumerate(np.cumsum(result["cliff_sizes"][seed, t])):
            if result["cliff_sizes"][seed, t][k] > 0:
                ax.axvline(e + 0.5, color=PALETTE[2], lw=1.2,
                           label="detected cliff edge" if k == 0 else None)
        for k in (1, 2):
            ax.axvline(k * d1 + 0.5, color="k", ls=":", lw=1,
                       label=r"$4\lfloor p/2\rfloor$, $8\lfloor p/2\rfloor$" if k == 1 else None)
        test = result["test_acc"][seed][list(result["epochs"]).index(epochs[label])]
        ax.set_title(f"{label}, epoch {epochs[label]}\ntest accuracy {test:.0%}")
        ax.set_xlabel("rank")
    for ax in axes[::2]:
        ax.set_ylabel("eigenvalue")
    handles, names = axes[0].get_legend_handles_labels()
    names = [n.replace("constant mode", "constant mode (rank 0)") for n in names]
    legend_in(spare, fig, handles, names, ncol=1)
    return fig


def plot_eigenvectors(result: Result, label: str = "final", seed: int = 0, n_per_cliff: int = 4):
    """Top eigenvectors of each cliff as p x p images over (a, b) (rows a, columns b)."""
    p = int(result.config["p"])
    snaps = list(result["snapshot_epochs"])
    epoch = result["eigvec_epochs"][label]
    t = snaps.index(epoch)
    V = np.asarray(result[EIGVEC_KEYS[label]], dtype=float)
    ci = int(result["constant_index"][seed, t])
    order = [i for i in range(V.shape[1]) if i != ci]
    sizes = [int(s) for s in result["cliff_sizes"][seed, t]]
    d1 = int(result["first_cliff_theory"])
    starts = [0, sizes[0] if sizes[0] > 0 else d1]  # fall back to the theory window
    rows = [("cliff 1", starts[0]), ("cliff 2" if sizes[1] > 0 else "window 2", starts[1])]
    fig, axes = new_figure(n_per_cliff, len(rows), height=1.8 * len(rows), squeeze=False)
    for r, (name, start) in enumerate(rows):
        for c in range(n_per_cliff):
            ax = axes[r, c]
            ax.grid(False)
            j = start + c
            if j >= len(order):
                ax.axis("off")
                continue
            img = V[:, order[j]].reshape(p, p)
            m = np.abs(img).max()
            ax.imshow(img, cmap="RdBu_r", vmin=-m, vmax=m, origin="lower", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"#{j + 1}")
            if c == 0:
                ax.set_ylabel(f"{name}\n$a$")
            if r == len(rows) - 1:
                ax.set_xlabel("$b$")
    return fig


def plot_dynamics(result: Result, window: str = "window2"):
    """Second-window overlaps with sum/diff features vs epoch, their derivative, and cliff sizes."""
    fig, (ax1, ax2, ax3), spare = panels(3, row_height=2.9, spare=True)
    names = result["overlap_names"]
    ep = np.asarray(result["snapshot_epochs"], dtype=float)
    ov = result["overlaps"]
    series = ((f"{window}:sum", "sum features", PALETTE[0]),
              (f"{window}:diff", "difference features", PALETTE[1]),
              ("window1:a+b axes", "window 1 vs a, b features", PALETTE[2]))
    for ax in (ax1, ax2, ax3):
        _shade_window(ax, result, label=ax is ax1)
    for key, lab, color in series:
        v = ov[:, :, names.index(key)]
        for row in v:
            ax1.plot(ep, row, color=color, lw=0.6, alpha=0.35)
        ax1.plot(ep, v.mean(axis=0), "o-", ms=2.5, color=color, lw=1.6, label=lab)
    ax1.set_ylim(-0.02, 1.02)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("overlap / dimension")
    ax1.set_title("(a) alignment")
    v = ov[:, :, names.index(f"{window}:sum")]
    d = np.gradient(v, ep, axis=1) if len(ep) > 2 else np.diff(v, axis=1, prepend=v[:, :1])
    for s, row in enumerate(d):
        ax2.plot(ep, row, color=PALETTE[0], lw=0.8, alpha=0.6)
        k = int(np.argmax(row))
        ax2.plot(ep[k], row[k], "v", color=PALETTE[1], ms=6, label="peak" if s == 0 else None)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("d(overlap)/d(epoch)")
    ax2.set_title("(b) its rate (sum)")
    sizes = result["cliff_sizes"]
    d1 = int(result["first_cliff_theory"])
    for k, color in ((0, PALETTE[2]), (1, PALETTE[0])):
        for s, row in enumerate(sizes[:, :, k]):
            ax3.plot(ep, row, "o-", ms=2.5, lw=0.8, color=color, alpha=0.7,
                     label=f"cliff {k + 1}" if s == 0 else None)
    ax3.axhline(d1, color="k", ls=":", lw=1, label=r"$4\lfloor p/2\rfloor$")
    ax3.set_xlabel("epoch")
    ax3.set_ylabel("size (0: none)")
    ax3.set_title("(c) cliff sizes")
    handles, labels = [], []
    for ax in (ax1, ax2, ax3):
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    legend_in(spare, fig, handles, labels, ncol=1)
    return fig


def plot_crosscheck(result: Result):
    """Lanczos (matrix-free) against dense eigenvalues on the final model, and their errors."""
    cc = result["crosscheck"]
    lz, de = np.asarray(cc["lanczos_eigenvalues"]), np.asarray(cc["dense_eigenvalues"])
    fig, (ax1, ax2) = new_figure(2, height=3.0)
    idx = np.arange(1, len(de) + 1)
    ax1.semilogy(idx, de, "-", color=PALETTE[0], lw=1.5, label="dense eigh")
    ax1.semilogy(idx, lz, "o", mfc="none", ms=4, color=PALETTE[1], label="Lanczos")
    ax1.set_xlabel("rank")
    ax1.set_ylabel("eigenvalue")
    ax1.legend(loc="upper right")
    rel = np.abs(lz - de) / np.abs(de)
    ax2.semilogy(idx, np.maximum(rel, 1e-17), ".", color=PALETTE[0])
    ax2.set_xlabel("rank")
    ax2.set_ylabel("relative error")
    ax2.set_title("Lanczos vs dense")
    return fig
