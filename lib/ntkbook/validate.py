"""Rules for the fields of an experiment ``Config``, checked when the config is built.

Each experiment's ``Config.__post_init__`` calls these, so a preset, a chapter's overrides and the
command line's ``--set`` are all checked before any compute. Every rule takes the experiment's name
(``NAME``), the field's name and its value, and raises :class:`ntkbook.errors.ConfigError` with a
message naming all three and the rule, e.g. ``demo_sweep.repeats must be an integer >= 1 (an RMS
error needs one estimate); got 0``. ``why``, where given, says what the rule protects.

Integers are Python ``int`` (``bool`` is refused); numbers are ``int`` or ``float``, ``bool`` refused.
Rules on a tuple field (``each_*``, ``increasing``, ...) name the offending element.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from ntkbook.errors import ConfigError

__all__ = [
    "int_at_least", "int_in", "positive_int", "even_positive_int", "odd_at_least", "number_in", "fraction",
    "finite_positive", "finite_non_negative", "boolean", "one_of", "non_empty", "unique",
    "increasing", "all_in", "each", "require",
]


def _fail(name: str, field: str, rule: str, value: Any, why: str) -> ConfigError:
    because = f" ({why})" if why else ""
    return ConfigError(f"{name}.{field} must be {rule}{because}; got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def int_at_least(name: str, field: str, value: Any, low: int, why: str = "") -> None:
    """``value`` is an integer ``>= low``."""
    if not _is_int(value) or value < low:
        raise _fail(name, field, f"an integer >= {low}", value, why)


def int_in(name: str, field: str, value: Any, low: int, high: int, why: str = "") -> None:
    """``value`` is an integer with ``low <= value <= high``."""
    if not _is_int(value) or not low <= value <= high:
        raise _fail(name, field, f"an integer from {low} to {high}", value, why)


def positive_int(name: str, field: str, value: Any, why: str = "") -> None:
    """``value`` is an integer ``>= 1``."""
    int_at_least(name, field, value, 1, why)


def even_positive_int(name: str, field: str, value: Any, why: str = "") -> None:
    """``value`` is an even integer ``>= 2``."""
    if not _is_int(value) or value < 2 or value % 2:
        raise _fail(name, field, "an even integer >= 2", value, why)


def odd_at_least(name: str, field: str, value: Any, low: int, why: str = "") -> None:
    """``value`` is an odd integer ``>= low``."""
    if not _is_int(value) or value < low or value % 2 == 0:
        raise _fail(name, field, f"an odd integer >= {low}", value, why)


def number_in(name: str, field: str, value: Any, low: float, high: float, *, low_closed: bool = False,
              high_closed: bool = False, why: str = "") -> None:
    """``value`` is a finite number in the interval from ``low`` to ``high`` (open ends unless
    ``low_closed``/``high_closed``; ``math.inf`` as ``high`` for no upper bound)."""
    ok = _is_number(value) and math.isfinite(value)
    if ok:
        ok = (value >= low if low_closed else value > low) and (value <= high if high_closed else value < high)
    if not ok:
        left, right = "[" if low_closed else "(", "]" if high_closed else ")"
        hi = "inf" if high == math.inf else f"{high:g}"
        raise _fail(name, field, f"a finite number in {left}{low:g}, {hi}{right}", value, why)


def fraction(name: str, field: str, value: Any, why: str = "", *, high_closed: bool = False) -> None:
    """``value`` lies in ``(0, 1)`` (``(0, 1]`` with ``high_closed``)."""
    number_in(name, field, value, 0.0, 1.0, high_closed=high_closed, why=why)


def finite_positive(name: str, field: str, value: Any, why: str = "") -> None:
    """``value`` is a finite number ``> 0``."""
    number_in(name, field, value, 0.0, math.inf, why=why)


def finite_non_negative(name: str, field: str, value: Any, why: str = "") -> None:
    """``value`` is a finite number ``>= 0``."""
    number_in(name, field, value, 0.0, math.inf, low_closed=True, why=why)


def boolean(name: str, field: str, value: Any, why: str = "") -> None:
    """``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise _fail(name, field, "True or False", value, why)


def one_of(name: str, field: str, value: Any, choices: Iterable, why: str = "") -> None:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise _fail(name, field, f"one of {', '.join(map(repr, choices))}", value, why)


def non_empty(name: str, field: str, values: Any, why: str = "") -> None:
    """``values`` is a non-empty tuple."""
    if not isinstance(values, tuple) or not values:
        raise _fail(name, field, "a non-empty tuple", values, why)


def unique(name: str, field: str, values: tuple, why: str = "") -> None:
    """``values`` holds no element twice."""
    if len(set(values)) != len(values):
        raise _fail(name, field, "free of repeated entries", values, why)


def increasing(name: str, field: str, values: tuple, why: str = "") -> None:
    """``values`` is strictly increasing (sorted, no repeats)."""
    if any(b <= a for a, b in zip(values, values[1:])):
        raise _fail(name, field, "strictly increasing", values, why)


def all_in(name: str, field: str, values: tuple, choices: Iterable, why: str = "") -> None:
    """Every element of ``values`` is one of ``choices``."""
    choices = tuple(choices)
    bad = [v for v in values if v not in choices]
    if bad:
        unknown = f"{', '.join(map(repr, bad))} unknown"
        raise _fail(name, field, f"made of {', '.join(map(repr, choices))}", values,
                    f"{why}; {unknown}" if why else unknown)


def each(rule: Callable[..., None], name: str, field: str, values: Any, *args: Any, **kwargs: Any) -> None:
    """``rule(name, f"{field}[i]", v, *args, **kwargs)`` for every element ``v`` of the tuple
    ``values`` (a tuple itself is required)."""
    if not isinstance(values, tuple):
        raise _fail(name, field, "a tuple", values, "")
    for i, v in enumerate(values):
        rule(name, f"{field}[{i}]", v, *args, **kwargs)


def require(name: str, field: str, value: Any, ok: bool, rule: str, why: str = "") -> None:
    """A rule the helpers above do not express: ``ok`` says whether ``value`` of ``field`` satisfies
    ``rule`` (a phrase after "must be", e.g. ``"at most data_n_per_class (128)"``)."""
    if not ok:
        raise _fail(name, field, rule, value, why)
