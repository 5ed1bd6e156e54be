"""Plotting: functions that take results and return matplotlib figures.

One submodule per topic (``plotting.modular``, ``plotting.attention``, ...); this module holds
the shared style. Every function returns the :class:`matplotlib.figure.Figure` it drew, so a
chapter shows it as the cell's output (``ntkbook.book.report.show``) and a script can save it.

Figures are laid out for a phone as well as a desktop: :data:`WIDTH` inches wide, shown at 100 CSS
px per inch or scaled down to the text column (about 350 px on a phone), with fonts
(:func:`font_size_for`) that keep every text at least :data:`MIN_FONT_PX` CSS px at either width
(:func:`displayed_font_px`). A figure is then only about 38 font sizes wide, room for
at most two panels side by side (:func:`panels`), legends below or in a free cell
(:func:`legend_in`), short titles, and tick labels far enough apart not to overlap
(:func:`log_ticks`).
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.text

__all__ = ["style", "new_figure", "panels", "legend_in", "log_ticks", "compact_number", "font_size_for",
           "display_font_px", "displayed_font_px", "min_font_pt", "png_text", "DPI", "COLUMN_PX", "MIN_FONT_PX",
           "WIDTH", "TIGHT_MARGIN", "PALETTE"]

#: resolution of the book's figure images: 2x the 100 CSS px per inch at which a page shows them
#: (``ntkbook.book.report.show`` renders at this dpi; the two numbers are the same by test)
DPI = 200
#: width (CSS px) of the figure area of the text column at a 1400 px and at a 400 px window
#: (sphinx-book-theme, measured in headless Chromium: 768 and 352; a little less here)
COLUMN_PX = {"desktop": 760, "phone": 340}
#: smallest text on a figure, in CSS px as displayed at either width
MIN_FONT_PX = 9.0
#: the book's figure width (in): 550 CSS px on a desktop, scaled to the column on a phone
WIDTH = 5.5
#: how much wider than its ``figsize`` a figure may come out of the tight bounding box the book
#: renders with (labels reaching past the edge), allowed for in :func:`font_size_for`
TIGHT_MARGIN = 1.05

#: a small colour-blind-safe palette (Okabe & Ito)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


def font_size_for(width: float) -> float:
    """Font size (pt, a multiple of 0.5, at least 10) for a figure ``width`` inches wide whose
    text stays at least :data:`MIN_FONT_PX` when a phone scales the figure to its column
    (:data:`COLUMN_PX` ``["phone"]``), with :data:`TIGHT_MARGIN` to spare."""
    pt = MIN_FONT_PX * 72 * width * TIGHT_MARGIN / COLUMN_PX["phone"]
    return max(10.0, math.ceil(2 * pt) / 2)


def min_font_pt(fig) -> float:
    """Smallest font size (pt) of the text a reader sees on ``fig``: every visible, non-empty text
    artist on a visible axes (or on the figure itself); ``inf`` if there is none. The same rule as
    ``ntkbook.book.report.min_font_pt``, which writes it into the book's PNGs (checked by test).
    Draws the figure first: tick labels get their text when drawn."""
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())]
    return min(sizes, default=float("inf"))


def png_text(png: bytes) -> dict[str, str]:
    """The ``tEXt`` entries of a PNG (``ntkbook.book.report.show`` writes the smallest font size
    and the dpi there)."""
    import struct

    out, i = {}, 8
    while i + 8 <= len(png):
        (n,) = struct.unpack(">I", png[i:i + 4])
        kind, body = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        i += 12 + n
    return out


def displayed_font_px(png: bytes) -> dict[str, float]:
    """Size in CSS px of the smallest text of a figure PNG rendered by ``show`` as a page shows it
    at each width of :data:`COLUMN_PX`: the image is displayed at half its pixel width, or at the
    column's width if that is less, so the text is
    ``min_font_pt * dpi / 72 * displayed width / pixel width``."""
    import struct

    meta = png_text(png)
    font_pt, dpi = float(meta["ntkbook:min_font_pt"]), float(meta["ntkbook:dpi"])
    (pixels,) = struct.unpack(">I", png[16:20])  # IHDR width
    return {name: font_pt * dpi / 72 * min(pixels / 2, column) / pixels for name, column in COLUMN_PX.items()}


def display_font_px(fig) -> float:
    """Height in CSS px of the smallest text on ``fig`` as the book shows it, at the narrower of
    the two widths of :data:`COLUMN_PX` (rendered as ``ntkbook.book.report.show`` renders it, with
    its tight bounding box). Does not close ``fig``."""
    import io

    font_pt = min_font_pt(fig)
    if not math.isfinite(font_pt):
        return float("inf")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight",
                metadata={"ntkbook:min_font_pt": f"{font_pt:g}", "ntkbook:dpi": str(DPI)})
    return min(displayed_font_px(buf.getvalue()).values())


def style(font_size: float = 10.0) -> None:
    """The book's matplotlib style: readable fonts (``font_size`` pt), light grid, the palette above."""
    plt.rcParams.update(
        {
            "figure.dpi": 100,
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


def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = WIDTH, height: float = 3.6, **kw):
    """``(fig, axes)`` in the book's style, ``width`` x ``height`` inches, with fonts that stay at
    least :data:`MIN_FONT_PX` when the figure is scaled to a phone's column (:func:`font_size_for`).
    At most two columns of panels read on a phone: stack the others in rows."""
    style(font_size_for(width))
    return plt.subplots(nrows, ncols, figsize=(width, height), constrained_layout=True, **kw)


def panels(n: int, *, ncols: int = 2, width: float = WIDTH, row_height: float = 2.6, spare: bool = False,
           **kw):
    """``(fig, axes, spare_ax)``: ``n`` panels in rows of ``ncols`` (at most two read on a phone),
    ``axes`` a flat list in reading order. Cells left over in the last row are hidden, except the
    first when ``spare`` is true: it is returned, blank, for a legend (else ``spare_ax`` is None)."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, grid = new_figure(ncols, nrows, width=width, height=row_height * nrows, squeeze=False, **kw)
    cells = list(grid.ravel())
    extra = cells[n:]
    for ax in extra:
        ax.set_axis_off()
    return fig, cells[:n], (extra[0] if spare and extra else None)


def legend_in(spare_ax, fig, handles, labels, **kw):
    """A legend of the figure placed in ``spare_ax`` (a blank cell of :func:`panels`), or below the
    panels when there is no spare cell."""
    if spare_ax is not None:
        return spare_ax.legend(handles, labels, loc="center", **kw)
    return fig.legend(handles, labels, loc="outside lower center", **kw)


def log_ticks(axis, values) -> None:
    """Label a log ``axis`` (``ax.xaxis`` or ``ax.yaxis``) at ``values`` only (no minor labels),
    written compactly (1024 as 1k, 16384 as 16k) so that neighbours overlap less."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    shown = list(values)
    axis.set_major_locator(FixedLocator(shown))
    axis.set_ticklabels([compact_number(v) for v in shown])
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def compact_number(v: float) -> str:
    """A tick label: 16, 256, 1k, 16k, 1M (powers of 1024 as k, M); others as ``%g``."""
    v = float(v)
    for unit, size in (("M", 1024 ** 2), ("k", 1024)):
        if v >= size and v % size == 0:
            return f"{int(v // size)}{unit}"
    return f"{v:g}"
