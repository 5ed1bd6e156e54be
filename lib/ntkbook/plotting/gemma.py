"""Figures of the Gemma chapter: spectra, per-task eNTK vs PCA, mode scores by class, layer sweep."""

from __future__ import annotations

import numpy as np

from ntkbook.experiments.gemma_features import SUMMARY_KEYS, point_key
from ntkbook.plotting import new_figure

__all__ = ["plot_spectrum", "plot_tasks", "plot_mode_scatter", "plot_layer_sweep", "CLASS_COLORS"]

CLASS_COLORS = {"PUNCT": "#4c72b0", "PRON": "#dd8452", "PROPN": "#55a868", "DET": "#c44e52",
                "ADV": "#8172b3", "CCONJ": "#937860", "NOUN": "#da8bc3", "VERB": "#8c8c8c"}


def plot_spectrum(result, layer: int = 16, param_set: str = "down_proj"):
    """(a) top eNTK eigenvalues / lambda_1 with Ritz residual estimates; (b) PCA variance shares."""
    lam = np.asarray(result[point_key(layer, param_set, "eigenvalues")])
    res = np.asarray(result[point_key(layer, param_set, "ritz_residuals")])
    var = np.asarray(result[point_key(layer, param_set, "pca_variance")])
    fig, axes = new_figure(2, height=3.3)
    i = np.arange(1, len(lam) + 1)
    axes[0].semilogy(i, lam / lam[0], "o-", ms=4, label=r"$\lambda_i/\lambda_1$")
    axes[0].semilogy(i, np.maximum(res / lam[0], 1e-17), "x", ms=5, color="C3",
                     label=r"Ritz residual $/\lambda_1$")
    axes[0].set_xlabel("mode $i$")
    axes[0].set_title(f"(a) eNTK, layer {layer}")
    axes[1].bar(np.arange(1, len(var) + 1), var, color="C2")
    axes[1].set_xlabel("component")
    axes[1].set_ylabel("share of variance")
    axes[1].set_title(f"(b) PCA, block {layer}")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig


def plot_tasks(rows: list[dict], title: str, metric: str = "auroc"):
    """Test ``metric`` of the chosen eNTK mode and PCA component for each task (grouped bars)."""
    names = [r["task"] for r in rows]
    e = [r[f"entk_{metric}"] for r in rows]
    p = [r[f"pca_{metric}"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = new_figure(1, height=3.4)
    ax.bar(x - 0.2, e, 0.4, label="eNTK mode", color="C0")
    ax.bar(x + 0.2, p, 0.4, label="PCA component", color="C1")
    if metric == "auroc":
        ax.axhline(0.5, color="k", lw=0.8, ls="--")
    else:
        base = [r["entk_base_rate"] for r in rows]
        ax.scatter(x, base, marker="_", s=300, color="k", zorder=3, label="chance (base rate)")
    ax.set_xticks(x, names, rotation=90)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"test {metric.upper()}")
    ax.set_title(title)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=3 if metric == "auroc" else 2)
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


def plot_layer_sweep(points: list[dict], metric: str = "auroc"):
    """Macro ``metric`` over the parts of speech by layer, eNTK (down_proj) vs PCA, and the eNTK of
    the whole layer where computed.  ``points``: summary rows of ``gemma_features`` results
    (``result["points"]``, possibly of several results)."""
    pts = sorted((p for p in points if p["param_set"] == "down_proj"), key=lambda p: p["layer"])
    whole = sorted((p for p in points if p["param_set"] == "layer"), key=lambda p: p["layer"])
    fig, ax = new_figure(1, width=4.6, height=3.2)
    L = [p["layer"] for p in pts]
    entk_key, pca_key = SUMMARY_KEYS["pos"][f"entk_{metric}"], SUMMARY_KEYS["pos"][f"pca_{metric}"]
    ax.plot(L, [p[entk_key] for p in pts], "o-", label="eNTK (down_proj)")
    ax.plot(L, [p[pca_key] for p in pts], "s--", label="PCA")
    if whole:
        ax.plot([p["layer"] for p in whole], [p[entk_key] for p in whole], "*", ms=12,
                label="eNTK (whole layer)")
    ax.set_xlabel("layer")
    ax.set_xticks(sorted({p["layer"] for p in points}))
    ax.set_ylabel(f"macro {metric.upper()}")
    ax.set_title("parts of speech, by layer")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig
