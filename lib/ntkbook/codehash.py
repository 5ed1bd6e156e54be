"""The hash of the code an experiment runs: the source of its module and of every ``ntkbook``
module it reaches through imports, at any depth, including imports inside functions.

The import graph is read from the sources with :mod:`ast` (nothing is imported), so a module that
an experiment imports only inside a function, or only through another module, is part of its hash.
Checkpoints of a sweep are keyed by this hash: changed code never resumes from points computed by
older code.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

__all__ = ["NOT_CODE", "module_file", "imported_modules", "reachable_modules", "code_hash"]

_LIB = Path(__file__).resolve().parents[1]

#: modules that do not change what an experiment computes, left out of the walk (and not followed):
#: the store and its paths, progress reports, the error classes, this module, and the experiment
#: registry (through which an experiment loads another experiment's stored result, keyed by that
#: experiment's own hash)
NOT_CODE = frozenset({"ntkbook.store", "ntkbook.paths", "ntkbook.progress", "ntkbook.codehash",
                      "ntkbook.errors",
                      "ntkbook.experiments"})


def module_file(name: str, lib: Path = _LIB) -> Path | None:
    """The source file of module ``name`` (``"ntkbook.ntk.eig"``) below ``lib``, or None if no
    such module exists there (``ntkbook.ntk.eig.lanczos_topk`` is a function, not a module)."""
    base = lib.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imported_modules(name: str, lib: Path = _LIB) -> set[str]:
    """The ``ntkbook`` modules that module ``name`` imports anywhere in its source (module level,
    inside functions, relative imports), with the packages whose ``__init__`` those imports run."""
    path = module_file(name, lib)
    if path is None:
        raise ModuleNotFoundError(f"no module {name!r} below {lib}")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != "ntkbook" or module_file(target, lib) is None:
                continue
            found.add(target)
            found.update(_parents(target))
    found.discard(name)
    return found


def reachable_modules(name: str, lib: Path = _LIB) -> list[str]:
    """Module ``name`` and every ``ntkbook`` module reachable from it through imports (sorted),
    :data:`NOT_CODE` left out and not followed."""
    seen: set[str] = set()
    todo = [name, *_parents(name)]
    while todo:
        mod = todo.pop()
        if mod in seen or (mod in NOT_CODE and mod != name):
            continue
        seen.add(mod)
        todo.extend(imported_modules(mod, lib) - seen)
    return sorted(seen)


def code_hash(name: str, lib: Path = _LIB) -> str:
    """sha256 (16 hex digits) over the names and sources of :func:`reachable_modules` of ``name``."""
    digest = hashlib.sha256()
    for mod in reachable_modules(name, lib):
        digest.update(mod.encode() + b"\0" + module_file(mod, lib).read_bytes() + b"\0")
    return digest.hexdigest()[:16]
