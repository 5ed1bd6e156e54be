"""Plotting: functions that take results and return matplotlib figures.

One submodule per topic (``plotting.modular``, ``plotting.attention``, ...); this module holds
the shared style. Every function returns the :class:`matplotlib.figure.Figure` it drew, so a
chapter shows it as the cell's output and a script can save it.
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.text

__all__ = ["style", "new_figure", "font_size_for", "display_font_px", "COLUMN_PX", "MIN_FONT_PX"]

#: width of the book's text column in CSS px at a 1400 px window (sphinx-book-theme)
COLUMN_PX = 700
#: smallest text on a figure, in CSS px as displayed in that column: 12 px = 9 pt
MIN_FONT_PX = 12.0
DPI = 110

#: a small colour-blind-safe palette (Okabe & Ito)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


def font_size_for(width: float) -> float:
    """Font size (pt) for a figure ``width`` inches wide so that its text is at least 9 pt
    (:data:`MIN_FONT_PX`) when the page scales the figure down to the text column."""
    return max(10.0, math.ceil(MIN_FONT_PX * 72 * width / COLUMN_PX))


def display_font_px(fig) -> float:
    """Height in CSS px, as shown in the text column, of the smallest text on ``fig``."""
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]
    natural_px = fig.get_figwidth() * fig.dpi
    scale = min(1.0, COLUMN_PX / natural_px)
    return min(sizes) * fig.dpi / 72 * scale if sizes else float("inf")


def style(font_size: float = 10.0) -> None:
    """The book's matplotlib style: readable fonts (``font_size`` pt), light grid, the palette above."""
    plt.rcParams.update(
        {
            "figure.dpi": DPI,
            "savefig.dpi": DPI,
            "font.size": font_size,
            "axes.titlesize": font_size + 1,
            "axes.labelsize": font_size,
            "xtick.labelsize": font_size,
            "ytick.labelsize": font_size,
            "legend.fontsize": font_size,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
            "legend.frameon": False,
        }
    )


def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = 6.4, height: float = 3.6, **kw):
    """``(fig, axes)`` in the book's style, sized for the page, with fonts that stay at least 9 pt
    when the figure is scaled to the text column (:func:`font_size_for`)."""
    style(font_size_for(width))
    return plt.subplots(nrows, ncols, figsize=(width, height), constrained_layout=True, **kw)
