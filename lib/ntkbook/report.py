"""Small helpers chapters use to show results: figures, Markdown tables, number formats."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

__all__ = ["show", "markdown_table", "sci", "fmt"]

_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def show(fig):
    """Close ``fig`` (so the inline backend does not draw it a second time) and return it, so
    that it is displayed once as the cell's output."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fig


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]):
    """A Markdown table (rendered as MyST by the book) from a header and rows of cells."""
    from IPython.display import Markdown

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return Markdown("\n".join(lines))


def sci(x: Any, digits: int = 2) -> str:
    """A number in scientific notation with Unicode exponents, e.g. ``3.10×10¹⁸``; plain for
    magnitudes between 10⁻² and 10², ``∞`` for infinity, ``n/a`` for None or NaN. Strings (the
    store writes inf/nan as strings) are parsed first."""
    if isinstance(x, str):
        x = float(x)
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "∞" if x == math.inf else "n/a"
    if x == 0:
        return "0"
    e = int(math.floor(math.log10(abs(x))))
    if -2 <= e <= 2:
        return f"{x:.{digits + 1}g}"
    return f"{x / 10**e:.{digits}f}×10{str(e).translate(_SUPERSCRIPTS)}"


def fmt(x: Any, spec: str = ".2f") -> str:
    """``format(x, spec)``, or ``n/a`` for None and non-finite numbers."""
    return "n/a" if x is None or not math.isfinite(float(x)) else format(x, spec)
