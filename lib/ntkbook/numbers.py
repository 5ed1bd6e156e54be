"""Number formats for text the book shows: scientific notation with Unicode exponents, fixed
decimals without a negative zero. Experiments use them for scorecard text, chapters for prose."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["sci", "fmt"]

_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


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
    """``format(x, spec)``, or ``n/a`` for None and non-finite numbers. A value that rounds to
    zero prints without a sign (``0.00``, never ``-0.00``)."""
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    out = format(x, spec)
    if out.startswith("-") and not any(c in "123456789" for c in out.split("e")[0]):
        out = out[1:]
    return out
