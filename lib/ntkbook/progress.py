"""Progress reporting that reads well in a terminal and in the built HTML.

In a terminal (stderr is a TTY) this is a :mod:`tqdm` bar. In a notebook executed by papermill,
whose output is frozen into the HTML, a redrawn bar would leave hundreds of carriage-return
fragments; there we print one plain line at every ``every`` fraction of the work (10% by
default) with the elapsed time and an estimate of the time left, then a closing line. Work that
finishes within ``quiet_seconds`` (2 s by default) prints nothing at all.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TypeVar

T = TypeVar("T")

__all__ = ["Progress", "progress", "format_seconds"]


def format_seconds(s: float) -> str:
    """``75.3 -> '1m15s'``, ``3.2 -> '3.2s'``."""
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress reporter over ``total`` steps; use :func:`progress` to wrap an iterable."""

    def __init__(self, total: int, desc: str = "", *, every: float = 0.1, terminal: bool | None = None,
                 quiet_seconds: float = 2.0):
        self.total = int(total)
        self.desc = desc
        self.every = every
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self.start = time.perf_counter()
        self._next_report = every
        self.quiet_seconds = quiet_seconds
        self._printed = False
        self.terminal = _is_terminal() if terminal is None else terminal
        self._bar = None
        if self.terminal:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, leave=True, dynamic_ncols=True)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = values
        if self._bar is not None:
            self._bar.set_postfix({k: _fmt(v) for k, v in values.items()}, refresh=False)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        frac = self.n / max(self.total, 1)
        if frac + 1e-12 >= self._next_report and self.n < self.total:
            while self._next_report <= frac + 1e-12:
                self._next_report += self.every
            elapsed = time.perf_counter() - self.start
            if elapsed < self.quiet_seconds:
                return
            self._printed = True
            left = elapsed * (self.total - self.n) / max(self.n, 1)
            print(
                f"{self.desc}: {self.n}/{self.total} ({frac:4.0%}) "
                f"elapsed {format_seconds(elapsed)}, ~{format_seconds(left)} left{self._post()}",
                flush=True,
            )

    def _post(self) -> str:
        if not self.postfix:
            return ""
        return " | " + ", ".join(f"{k} {_fmt(v)}" for k, v in self.postfix.items())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            return
        elapsed = time.perf_counter() - self.start
        if not self._printed and elapsed < self.quiet_seconds:
            return
        print(f"{self.desc}: done, {self.n}/{self.total} in {format_seconds(elapsed)}{self._post()}", flush=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", **kw: Any) -> Iterator[T]:
    """Iterate over ``iterable`` while reporting progress (see module docstring)."""
    if total is None:
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, **kw) as bar:
        for item in iterable:
            yield item
            bar.update()
