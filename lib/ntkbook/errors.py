"""The errors the library raises on purpose.

Every such error derives from :class:`NtkbookError`, and its message says what is wrong and what
to do. The command line (``python -m ntkbook``) prints these as one line and exits with status 2;
anything else is a bug and keeps its traceback. Each class also derives from the built-in exception
a caller would expect (``ValueError`` for a bad value, ``FileNotFoundError`` for a missing file),
so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = ["NtkbookError", "ConfigError", "InputError", "NumericalError"]


class NtkbookError(Exception):
    """Base of every error the library raises on purpose (a clear message, no bug)."""


class ConfigError(NtkbookError, TypeError, ValueError):
    """An experiment config that is not valid: an unknown field, a value of the wrong type, or a
    value outside the field's valid range."""


class InputError(NtkbookError, TypeError, ValueError):
    """An argument a library function cannot work with (non-finite values, a wrong shape or dtype,
    a negative eigenvalue where a spectrum must be non-negative, an argument of the wrong kind, ...)."""


class NumericalError(NtkbookError, FloatingPointError):
    """A computation that failed on valid input: non-finite values appeared, or an iteration
    stopped short; the message says which setting to change."""
