"""Figures of the loss-matched sharpness comparison (:mod:`ntkbook.experiments.influence_sharpness`).

- :func:`plot_sharpness`: per task, (a) the top Hessian eigenvalue against the training loss along
  2L-ReLU's training, with MLP-Attn's final network and 2L-ReLU's loss-matched one marked, and
  (b) the 1-D loss slices of those two networks;
- :func:`plot_matched_2d`: the 2-D loss slices of the same two networks on one task (first seed).

A task on which MLP-Attn did not train (:func:`ntkbook.influence.readout.trained`) has hollow
markers and "not trained" in its title."""

from __future__ import annotations

import numpy as np

from ntkbook.influence import readout
from ntkbook.plotting import PALETTE, legend_in, panels
from ntkbook.store import Result

MODEL_COLOR = {"relu": PALETTE[0], "attn": PALETTE[1]}
LETTERS = "abcdefghijklmnop"


def _log_axis(axis, lo: float, hi: float) -> None:
    """Label a log ``axis`` at 1, 2, 5 per decade over less than two decades, else at (some) powers
    of 10, at most four, written compactly (0.5, 1e-04); no minor labels, which crowd a narrow
    panel."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    span = np.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    if span < 2:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=12))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0,), numticks=4))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if 1e-2 <= v < 1e4 else f"{v:.0e}"))
    axis.set_minor_formatter(NullFormatter())


def _finite_range(*arrays) -> tuple[float, float]:
    v = np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in arrays])
    v = v[np.isfinite(v) & (v > 0)]
    return (float(v.min()), float(v.max())) if v.size else (1.0, 10.0)


def _short(result: Result, task: str) -> str:
    return result["tasks"][task].replace("MNIST, 10 classes", "MNIST-10")


def plot_sharpness(result: Result):
    """Two panels a row, one row per task. Left: top Hessian eigenvalue against training loss (log
    axes; training runs from right to left): 2L-ReLU along its training (a line per seed, points
    at the measured epochs), its loss-matched network (open circles) and MLP-Attn's final network
    (diamonds), every seed. Right: the training loss along one filter-normalised direction through
    2L-ReLU's loss-matched network and MLP-Attn's final one (a line per seed; log axis). The legend
    below the panels."""
    from matplotlib.lines import Line2D

    tasks = result.config["tasks"]
    r = result.config["slice_radius"]
    fig, axes, spare = panels(2 * len(tasks), row_height=2.7)
    for row, task in enumerate(tasks):
        ax_h, ax_s = axes[2 * row], axes[2 * row + 1]
        ok = readout.trained(result, task, "attn")
        relu, attn = result["table"][f"{task}/relu"], result["table"][f"{task}/attn"]
        loss = result[f"{task}/relu/curve_loss"]
        hess = result[f"{task}/relu/curve_hessian"]
        for s in range(loss.shape[0]):
            ax_h.plot(loss[s], hess[s], color=MODEL_COLOR["relu"], lw=1.0, marker=".", ms=3, alpha=0.7)
        ax_h.plot(relu["matched/train_loss"], relu["matched/hessian_top"], ls="none", marker="o", ms=6,
                  mfc="white", mec=MODEL_COLOR["relu"], mew=1.3)
        ax_h.plot(attn["final/train_loss"], attn["final/hessian_top"], ls="none", marker="D", ms=5,
                  color=MODEL_COLOR["attn"], mfc=MODEL_COLOR["attn"] if ok else "white")
        ax_h.set_xscale("log")
        ax_h.set_yscale("log")
        _log_axis(ax_h.xaxis, *_finite_range(loss, relu["matched/train_loss"], attn["final/train_loss"]))
        _log_axis(ax_h.yaxis, *_finite_range(hess, relu["matched/hessian_top"], attn["final/hessian_top"]))
        ax_h.set_xlabel("training loss")
        ax_h.set_ylabel("λ_max(H)")
        ax_h.set_title(f"({LETTERS[2 * row]}) {_short(result, task)}" + ("" if ok else ", not trained"))
        t = np.linspace(-r, r, result.config["slice_points"])
        slices = {"relu": result[f"{task}/relu/slice1d_matched"], "attn": result[f"{task}/attn/slice1d_final"]}
        for model, sl in slices.items():
            for s in range(sl.shape[0]):
                if np.all(np.isfinite(sl[s])):
                    ax_s.plot(t, sl[s], color=MODEL_COLOR[model], lw=1.0, alpha=0.8)
        ax_s.set_yscale("log")
        _log_axis(ax_s.yaxis, *_finite_range(*slices.values()))
        ax_s.set_xlabel("t (filter-normalised)")
        ax_s.set_ylabel("L(θ + t d)")
        ax_s.set_title(f"({LETTERS[2 * row + 1]}) slices, matched loss")
    handles = [Line2D([], [], color=MODEL_COLOR["relu"], lw=1.0, marker=".", ms=3),
               Line2D([], [], ls="none", marker="o", ms=6, mfc="white", mec=MODEL_COLOR["relu"], mew=1.3),
               Line2D([], [], ls="none", marker="D", ms=5, color=MODEL_COLOR["attn"]),
               Line2D([], [], color=MODEL_COLOR["attn"], lw=1.0)]
    labels = ["2L-ReLU along training", "2L-ReLU, loss-matched", "MLP-Attn, final", "MLP-Attn slice"]
    legend_in(spare, fig, handles, labels, ncol=2, handlelength=1.8, columnspacing=1.0)
    return fig


def plot_matched_2d(result: Result, task: str):
    """The training loss on a plane of two filter-normalised directions through MLP-Attn's final
    network and through 2L-ReLU's loss-matched one (``task``, first seed; contours of the loss,
    the same levels in both panels; + the network itself)."""
    names = {"attn": "slice2d_final", "relu": "slice2d_matched"}
    missing = [f"{task}/{m}/{n}" for m, n in names.items() if f"{task}/{m}/{n}" not in result.arrays]
    if missing:
        raise KeyError(f"no 2-D slice {missing[0]} in the result (tasks with one: "
                       f"{result.config['slice_2d_tasks']})")
    r = result.config["slice_radius"]
    grids = {m: result[f"{task}/{m}/{n}"] for m, n in names.items()}
    finite = np.concatenate([g[np.isfinite(g)] for g in grids.values()])
    levels = np.geomspace(finite.min(), finite.max(), 8) if finite.size else 6
    fig, axes, _ = panels(2, row_height=2.9)
    for ax, model, letter in zip(axes, ("attn", "relu"), "ab"):
        g = np.linspace(-r, r, grids[model].shape[0])
        if np.all(np.isfinite(grids[model])):
            cs = ax.contour(g, g, grids[model].T, levels=levels, cmap="viridis")
            ax.clabel(cs, fmt="%.2g", inline_spacing=2)
        ax.plot(0, 0, "k+")
        what = "final" if model == "attn" else "loss-matched"
        ax.set_title(f"({letter}) {result['models'][model]}, {what}")
        ax.set_xlabel("s (direction 1)")
        ax.set_ylabel("t (direction 2)")
    return fig
