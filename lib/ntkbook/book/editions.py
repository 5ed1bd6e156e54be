"""Editions of the book: the teacher's (everything) and the student's (no solutions).

The chapters end with exercises (sphinx-exercise's ``{exercise}``) and their solutions, either a
``{solution}`` directive or, for a solution with executed code, the gated form: a
``{solution-start}`` directive, prose and code cells, then ``{solution-end}``. The student
edition removes every solution from the executed notebooks and from the MyST sources offered
for download; the exercises stay. (sphinx-exercise's own ``hide_solutions`` cannot be used: it
crashes the HTML writer on the gated form, which leaves ``solution_end_node`` nodes behind.)

The chapters are executed with their solutions in both editions, so a later cell that uses a
solution's variables still runs and both editions show the same numbers; the solutions are
removed from the executed notebook, before rendering.
"""

from __future__ import annotations

import re

from ntkbook.errors import InputError

__all__ = ["EDITIONS", "strip_solutions_text", "strip_solutions_notebook"]

#: the editions of the book: the default shows the solutions
EDITIONS = ("teacher", "student")

#: the opening fence of a solution directive: the fence (3 or more backticks or colons) and which one
_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<kind>solution|solution-start|solution-end)\}")


class _Stripper:
    """Line-by-line state machine that drops the lines of solutions. The state carries over from
    one call to the next, so a gated solution may span several notebook cells."""

    def __init__(self) -> None:
        self.close: str | None = None  # fence that closes the directive being dropped
        self.gated = False             # inside solution-start .. solution-end

    @property
    def inside(self) -> bool:
        return self.close is not None or self.gated

    def keep(self, line: str) -> bool:
        """Whether ``line`` (without its newline) is kept."""
        if self.close is not None:  # inside a directive: drop up to its closing fence
            stripped = line.strip()
            if stripped and set(stripped) == {self.close[0]} and len(stripped) >= len(self.close):
                self.close = None
            return False
        m = _OPEN.match(line)
        if m is None:
            return not self.gated
        kind = m.group("kind")
        if kind == "solution-end" and not self.gated:
            raise InputError(f"{{solution-end}} without a {{solution-start}} before it: {line!r}")
        if kind == "solution-start" and self.gated:
            raise InputError(f"{{solution-start}} inside another gated solution: {line!r}")
        self.gated = kind == "solution-start"
        self.close = m.group("fence")
        return False

    def finish(self, where: str) -> None:
        if self.inside:
            raise InputError(f"{where}: a solution is not closed (missing closing fence or {{solution-end}})")


def strip_solutions_text(text: str, where: str = "text") -> str:
    """``text`` (MyST markdown) without its solutions; ``where`` names it in errors."""
    stripper = _Stripper()
    kept = [line for line in text.splitlines(keepends=True) if stripper.keep(line.rstrip("\r\n"))]
    stripper.finish(where)
    return "".join(kept)


def strip_solutions_notebook(nb, where: str = "notebook"):
    """The notebook ``nb`` (nbformat v4) without its solutions: the solution lines of markdown
    cells, and every cell that lies inside a gated solution, are removed; a markdown cell left
    empty is dropped. Returns a new notebook; ``nb`` is not changed."""
    import copy

    out = copy.deepcopy(nb)
    stripper = _Stripper()
    cells = []
    for cell in out.cells:
        if cell.cell_type == "markdown":
            lines = cell.source.splitlines(keepends=True)
            cell.source = "".join(ln for ln in lines if stripper.keep(ln.rstrip("\r\n"))).strip("\n")
            if cell.source.strip():
                cells.append(cell)
        elif not stripper.inside:
            cells.append(cell)
    stripper.finish(where)
    out.cells = cells
    return out
