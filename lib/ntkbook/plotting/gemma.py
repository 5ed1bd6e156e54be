"""Figures of the Gemma chapter: spectra, eNTK vs PCA per task over the splits, mode scores by class, depth."""

from __future__ import annotations

import numpy as np

from ntkbook.experiments.gemma_probe import point_key
from ntkbook.plotting import new_figure

__all__ = ["plot_spectrum", "plot_split_differences", "plot_mode_scatter", "plot_depth", "plot_budget", "CLASS_COLORS"]

CLASS_COLORS = {"PUNCT": "#4c72b0", "PRON": "#dd8452", "PROPN": "#55a868", "DET": "#c44e52",
                "ADV": "#8172b3", "CCONJ": "#937860", "NOUN": "#da8bc3", "VERB": "#8c8c8c"}


def plot_spectrum(result, convergence: list[dict], layer: int = 16, param_set: str = "down_proj",
                  pinned_ratio: float = 0.1):
    """(a) top eNTK eigenvalues / lambda_1, filled where the Ritz vector is pinned down, with its
    residual over the gap to the nearest other Ritz value beside it (``convergence``: the rows of
    :func:`ntkbook.claims.gemma.ritz_convergence`, whose threshold is ``pinned_ratio``); (b) PCA
    variance shares."""
    lam = np.asarray([r["eigenvalue"] for r in convergence])
    ratio = np.array([np.nan if r["ratio"] is None else r["ratio"] for r in convergence])
    pinned = np.array([r["pinned"] for r in convergence])
    var = np.asarray(result[point_key(layer, param_set, "pca_variance")])
    fig, axes = new_figure(2, height=3.3)
    i = np.arange(1, len(lam) + 1)
    axes[0].semilogy(i, lam / lam[0], "-", color="C0", lw=1)
    axes[0].semilogy(i[pinned], lam[pinned] / lam[0], "o", ms=4, color="C0", label=r"$\lambda_i/\lambda_1$, pinned down")
    axes[0].semilogy(i[~pinned], lam[~pinned] / lam[0], "o", ms=4, mfc="white", color="C0",
                     label=r"$\lambda_i/\lambda_1$, not pinned down")
    axes[0].semilogy(i, np.maximum(ratio, 1e-17), "x", ms=5, color="C3", label="Ritz residual / gap")
    axes[0].axhline(pinned_ratio, color="C3", lw=0.8, ls="--")
    axes[0].set_xlabel("mode $i$")
    axes[0].set_title(f"(a) eNTK, layer {layer}")
    axes[1].bar(np.arange(1, len(var) + 1), var, color="C2")
    axes[1].set_xlabel("component")
    axes[1].set_ylabel("share of variance")
    axes[1].set_title(f"(b) PCA, block {layer}")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig



def plot_mode_scatter(result, layer: int = 16, param_set: str = "down_proj", modes=(0, 1), pcs=(0, 1)):
    """Contexts in the plane of two eNTK modes (left) and two principal components (right), by class
    (``modes`` and ``pcs``: zero-based indices)."""
    labels = np.asarray(result["labels"])
    classes = result["classes"]
    fig, axes = new_figure(2, height=3.3)
    for ax, key, name, ij in ((axes[0], "entk_scores", "eNTK mode", modes), (axes[1], "pca_scores", "PC", pcs)):
        sc = np.asarray(result[point_key(layer, param_set, key)])
        for c, cname in enumerate(classes):
            m = labels == c
            ax.scatter(sc[ij[0], m], sc[ij[1], m], s=14, alpha=0.75, color=CLASS_COLORS.get(cname),
                       label=cname)
        ax.set_xlabel(f"{name} {ij[0] + 1}")
        ax.set_ylabel(f"{name} {ij[1] + 1}")
    axes[0].set_title("(a) eNTK mode scores")
    axes[1].set_title("(b) PCA scores")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4, markerscale=1.5,
               columnspacing=1.0, handletextpad=0.2)
    return fig


def plot_split_differences(rows: list[dict], title: str, win_share: float):
    """Per task, the eNTK - PCA difference of test AP (a, the verdicts' metric) and of test AUROC
    (b, beside it) over the splits by story: one dot per split, the mean with one standard
    deviation, filled where the eNTK is ahead in at least ``win_share`` of the splits.  ``rows``:
    :func:`ntkbook.claims.gemma.split_table` rows."""
    fig, axes = new_figure(2, height=3.6, sharey=True)
    x = np.arange(len(rows))
    rng = np.random.default_rng(0)  # horizontal jitter of the per-split dots, for legibility only
    for ax, metric, name in ((axes[0], "ap", "(a) test AP (verdicts)"), (axes[1], "auroc", "(b) test AUROC")):
        for i, r in enumerate(rows):
            d = np.asarray(r[f"{metric}_diffs"])
            ax.plot(i + rng.uniform(-0.18, 0.18, len(d)), d, ".", ms=3, color="0.6", zorder=1,
                    label="one split" if i == 0 else None)
        mean = np.array([r[f"{metric}_diff"] for r in rows])
        std = np.array([r[f"{metric}_std"] for r in rows])
        won = np.array([r[f"{metric}_share"] >= win_share for r in rows], dtype=bool)
        ax.errorbar(x, mean, yerr=std, fmt="none", ecolor="C0", elinewidth=1.2, zorder=2)
        ax.plot(x[won], mean[won], "o", color="C0", ms=6, zorder=3,
                label=f"mean ± sd, eNTK ahead in ≥ {win_share:.0%} of splits")
        ax.plot(x[~won], mean[~won], "o", mfc="white", mec="C0", ms=6, zorder=3, label="mean ± sd, otherwise")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(x, [r["task"] for r in rows], rotation=90)
        ax.set_title(name)
    axes[0].set_ylabel("eNTK − PCA")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=1)
    return fig


def plot_depth(rows: list[dict], hollow: tuple[str, ...] = (), floor: dict | None = None):
    """The parts of speech by layer: (a) macro test AP of the best eNTK mode (down-projection,
    circles; the whole layer, stars) and of the best principal component (squares); (b) their
    difference, with one standard deviation over the splits by story.  ``rows``:
    :func:`ntkbook.claims.gemma.depth_rows` of one or more data sets, told apart by their ``data``
    labels in the legend: those in ``hollow`` drawn hollow and dotted, the others filled and solid.
    ``floor``: optionally :func:`ntkbook.claims.gemma.depth_floor` (layer -> controls), drawn in (a):
    the random directions' mean (grey dotted) with the range of their draws shaded, and the
    supervised probe (green dash-dot)."""
    from matplotlib.lines import Line2D  # noqa: PLC0415
    from matplotlib.patches import Patch  # noqa: PLC0415

    fig, axes = new_figure(2, height=3.6)
    if floor:
        Lf = sorted(floor)
        axes[0].fill_between(Lf, [floor[L]["random"]["ap"]["draw_lo"] for L in Lf],
                             [floor[L]["random"]["ap"]["draw_hi"] for L in Lf], color="0.6", alpha=0.3, lw=0)
        axes[0].plot(Lf, [floor[L]["random"]["ap"]["mean"] for L in Lf], color="0.4", ls=":", lw=1.2,
                     marker="_", ms=6)
        axes[0].plot(Lf, [floor[L]["probe"]["ap"]["mean"] for L in Lf], color="C2", ls="-.", lw=1.2, marker="_", ms=6)
    datasets = list(dict.fromkeys(r["data"] for r in rows))
    looks = [dict(ls=":", mfc="white") if d in hollow else dict(ls="-", mfc=None) for d in datasets]
    for data, look in zip(datasets, looks):
        sel = [r for r in rows if r["data"] == data]
        down = sorted((r for r in sel if r["param_set"] == "down_proj"), key=lambda r: r["layer"])
        whole = [r for r in sel if r["param_set"] == "layer"]
        L = [r["layer"] for r in down]
        axes[0].plot(L, [r["entk_ap"] for r in down], "o", color="C0", ls=look["ls"], ms=5, mfc=look["mfc"])
        axes[0].plot(L, [r["pca_ap"] for r in down], "s", color="C1", ls=look["ls"], ms=5, mfc=look["mfc"])
        if whole:
            axes[0].plot([r["layer"] for r in whole], [r["entk_ap"] for r in whole], "*", color="C2", ms=11,
                         ls="none", mfc=look["mfc"])
        std = [r["ap_std"] if r["ap_std"] is not None else 0.0 for r in down]
        axes[1].errorbar(L, [r["ap_diff"] for r in down], yerr=std, fmt="o", color="C0", capsize=2,
                         ls=look["ls"], ms=5, mfc=look["mfc"])
    axes[1].axhline(0, color="k", lw=0.8)
    for ax in axes:
        ax.set_xlabel("layer")
        ax.set_xlim(-0.7, 17.7)
        ax.set_xticks(range(0, 18, 3))
    axes[0].set_ylabel("macro test AP")
    axes[0].set_title("(a) eNTK and PCA")
    axes[1].set_ylabel("eNTK − PCA")
    axes[1].set_title("(b) difference, ± sd")
    handles = [Line2D([], [], color="C0", marker="o", ls="none", label="eNTK"),
               Line2D([], [], color="C1", marker="s", ls="none", label="PCA")]
    if any(r["param_set"] == "layer" for r in rows):
        handles.append(Line2D([], [], color="C2", marker="*", ms=11, ls="none", label="eNTK, whole layer"))
    handles += [Line2D([], [], color="0.3", marker="o", ls=look["ls"], mfc=look["mfc"], label=data)
                for data, look in zip(datasets, looks)]
    if floor:
        handles += [Patch(facecolor="0.6", alpha=0.5, edgecolor="0.4", ls=":", label="random directions"),
                    Line2D([], [], color="C2", ls="-.", label="supervised probe")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    return fig


def plot_budget(curve: dict, leads: dict, floor: dict | None = None, ceiling: dict | None = None):
    """Macro test AP (a) and AUROC (b) against the budget k: the best of the first k eNTK modes and of
    the first k principal components per task (:func:`ntkbook.claims.gemma.budget_curve`), the mean
    over the splits by story with the lowest-to-highest split shaded; a dashed line at the k from
    which the eNTK's mean leads at every larger k (``leads``: :func:`ntkbook.claims.gemma.budget_leads`).
    ``floor`` and ``ceiling``: optional metric -> macro value at the full budget (random directions,
    a supervised probe), drawn as horizontal lines."""
    fig, axes = new_figure(2, height=3.4)
    k = np.asarray(curve["k"])
    for ax, metric, name in ((axes[0], "ap", "(a) macro test AP"), (axes[1], "auroc", "(b) macro test AUROC")):
        for m, label, color, marker in (("entk", "eNTK modes", "C0", "o"), ("pca", "principal components", "C1", "s")):
            v = np.asarray(curve[m][metric])
            ax.fill_between(k, v.min(axis=1), v.max(axis=1), color=color, alpha=0.2, lw=0)
            ax.plot(k, v.mean(axis=1), marker=marker, ms=3.5, color=color, label=label)
        if floor is not None:
            ax.axhline(floor[metric], color="0.4", ls=":", lw=1.2, label="random directions")
        if ceiling is not None:
            ax.axhline(ceiling[metric], color="C2", ls="-.", lw=1.2, label="supervised probe")
        lead = leads[metric]["mean"]
        if lead is not None:
            ax.axvline(lead, color="k", ls="--", lw=0.9, label="eNTK leads from here")
        ax.set_xlabel("budget k (first k candidates)")
        ax.set_title(name)
        ax.set_xticks([1, 5, 10, 15, 20, 25])
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig
