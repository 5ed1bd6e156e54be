"""Plotting: functions that take results and return matplotlib figures.

One submodule per topic (``plotting.modular``, ``plotting.attention``, ...); this module holds
the shared style. Every function returns the :class:`matplotlib.figure.Figure` it drew, so a
chapter shows it as the cell's output and a script can save it.
"""

from __future__ import annotations

import matplotlib

import matplotlib.pyplot as plt

__all__ = ["style", "new_figure"]

#: a small colour-blind-safe palette (Okabe & Ito)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


def style() -> None:
    """The book's matplotlib style: readable fonts, light grid, the palette above."""
    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
            "legend.frameon": False,
        }
    )


def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = 6.4, height: float = 3.6, **kw):
    """``(fig, axes)`` in the book's style, sized for the page."""
    style()
    return plt.subplots(nrows, ncols, figsize=(width, height), constrained_layout=True, **kw)
