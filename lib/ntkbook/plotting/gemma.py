"""Figures of the Gemma chapter: spectra, per-task eNTK vs PCA, mode scores by class, layer sweep."""

from __future__ import annotations

import numpy as np

from ntkbook.experiments.gemma_features import SUMMARY_KEYS, point_key

__all__ = ["plot_spectrum", "plot_tasks", "plot_mode_scatter", "plot_layer_sweep", "CLASS_COLORS"]

CLASS_COLORS = {"PUNCT": "#4c72b0", "PRON": "#dd8452", "PROPN": "#55a868", "DET": "#c44e52",
                "ADV": "#8172b3", "CCONJ": "#937860", "NOUN": "#da8bc3", "VERB": "#8c8c8c"}


def _style(ax):
    ax.tick_params(labelsize=10)
    ax.grid(alpha=0.3)


def plot_spectrum(result, layer: int = 16, param_set: str = "down_proj"):
    """(a) top eNTK eigenvalues / lambda_1 with Ritz residual estimates; (b) PCA variance shares."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    lam = np.asarray(result[point_key(layer, param_set, "eigenvalues")])
    res = np.asarray(result[point_key(layer, param_set, "ritz_residuals")])
    var = np.asarray(result[point_key(layer, param_set, "pca_variance")])
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6))
    i = np.arange(1, len(lam) + 1)
    axes[0].semilogy(i, lam / lam[0], "o-", ms=4, label=r"$\lambda_i/\lambda_1$")
    axes[0].semilogy(i, np.maximum(res / lam[0], 1e-17), "x", ms=5, color="C3",
                     label=r"Ritz residual $/\lambda_1$")
    axes[0].set_xlabel("mode i", fontsize=11)
    axes[0].set_title(f"(a) eNTK spectrum, layer {layer} ({param_set})", fontsize=11)
    axes[0].legend(fontsize=10, loc="lower left")
    axes[1].bar(np.arange(1, len(var) + 1), var, color="C2")
    axes[1].set_xlabel("principal component", fontsize=11)
    axes[1].set_ylabel("share of variance", fontsize=11)
    axes[1].set_title(f"(b) PCA of block {layer}'s output", fontsize=11)
    for ax in axes:
        _style(ax)
    fig.tight_layout()
    return fig


def plot_tasks(rows: list[dict], title: str, metric: str = "auroc"):
    """Test ``metric`` of the chosen eNTK mode and PCA component for each task (grouped bars)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [r["task"] for r in rows]
    e = [r[f"entk_{metric}"] for r in rows]
    p = [r[f"pca_{metric}"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.5, 0.75 * len(rows) + 2), 3.8))
    ax.bar(x - 0.2, e, 0.4, label="eNTK mode", color="C0")
    ax.bar(x + 0.2, p, 0.4, label="PCA component", color="C1")
    if metric == "auroc":
        ax.axhline(0.5, color="k", lw=0.8, ls="--")
    else:
        base = [r["entk_base_rate"] for r in rows]
        ax.scatter(x, base, marker="_", s=300, color="k", zorder=3, label="chance (base rate)")
    ax.set_xticks(x, names, rotation=30 if len(rows) > 8 else 0, ha="right" if len(rows) > 8 else "center",
                  fontsize=10)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"test {metric.upper()}", fontsize=11)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _style(ax)
    fig.tight_layout()
    return fig


def plot_mode_scatter(result, layer: int = 16, param_set: str = "down_proj", modes=(0, 1), pcs=(0, 1)):
    """Contexts in the plane of two eNTK modes (left) and two principal components (right), by class
    (``modes`` and ``pcs``: zero-based indices)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels = np.asarray(result["labels"])
    classes = result["classes"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key, name, ij in ((axes[0], "entk_scores", "eNTK mode", modes), (axes[1], "pca_scores", "PC", pcs)):
        sc = np.asarray(result[point_key(layer, param_set, key)])
        for c, cname in enumerate(classes):
            m = labels == c
            ax.scatter(sc[ij[0], m], sc[ij[1], m], s=14, alpha=0.75, color=CLASS_COLORS.get(cname),
                       label=cname)
        ax.set_xlabel(f"{name} {ij[0] + 1}", fontsize=11)
        ax.set_ylabel(f"{name} {ij[1] + 1}", fontsize=11)
        _style(ax)
    axes[0].set_title("(a) eNTK mode scores", fontsize=11)
    axes[1].set_title("(b) PCA scores", fontsize=11)
    axes[1].legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_layer_sweep(points: list[dict], metric: str = "auroc"):
    """Macro ``metric`` over the parts of speech by layer, eNTK (down_proj) vs PCA, and the eNTK of
    the whole layer where computed.  ``points``: summary rows of ``gemma_features`` results
    (``result["points"]``, possibly of several results)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    pts = sorted((p for p in points if p["param_set"] == "down_proj"), key=lambda p: p["layer"])
    whole = sorted((p for p in points if p["param_set"] == "layer"), key=lambda p: p["layer"])
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    L = [p["layer"] for p in pts]
    entk_key, pca_key = SUMMARY_KEYS["pos"][f"entk_{metric}"], SUMMARY_KEYS["pos"][f"pca_{metric}"]
    ax.plot(L, [p[entk_key] for p in pts], "o-", label="eNTK (down_proj)")
    ax.plot(L, [p[pca_key] for p in pts], "s--", label="PCA")
    if whole:
        ax.plot([p["layer"] for p in whole], [p[entk_key] for p in whole], "*", ms=12,
                label="eNTK (whole layer)")
    ax.set_xlabel("layer", fontsize=11)
    ax.set_xticks(sorted({p["layer"] for p in points}))
    ax.set_ylabel(f"macro {metric.upper()} (parts of speech)", fontsize=11)
    ax.legend(fontsize=10)
    _style(ax)
    fig.tight_layout()
    return fig
