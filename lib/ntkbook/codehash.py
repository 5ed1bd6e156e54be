"""The hash of the code an experiment runs: what its ``run`` and ``Config`` reach, as behaviour.

A stored result records :func:`code_hash` of its experiment; :mod:`ntkbook.freshness` compares it
with today's. The hash covers exactly the code that can move a stored number, and nothing else:

- **What is reached.** From the experiment module's ``run``, ``Config`` and ``PRECISION`` (the roots,
  :data:`ROOTS`), every name a definition uses is resolved, statically, to the ``ntkbook``
  definition it names: a function, a class (all of it: methods, class attributes, bases,
  decorators), or a module-level constant, through module-level and function-level imports,
  relative imports, package re-exports and attribute chains (``entk.entk_matvec``). What those
  reach is followed in turn. A module used as a value (not through one of its attributes) is
  taken whole. Importing a module runs its top-level statements, so the statements of every module
  that is imported (and of its packages) that are neither definitions nor imports, e.g.
  ``jax.config.update(...)``, are part of the hash too. Nothing is imported to find this.
- **As behaviour, not bytes.** Each reached definition enters the hash as its normalised syntax
  tree (:func:`normalise`): no docstrings or other bare constants, no comments or formatting (the
  tree has none), no type annotations (except ``ClassVar``/``InitVar``/``KW_ONLY`` in a class body,
  which decide what is a dataclass field), and local variables renamed in order of appearance
  (where that provably keeps the meaning, :func:`_renamable`). Definitions enter sorted by their
  qualified name, so moving one within its file changes nothing.
- **Left out** (:data:`NOT_CODE`): the store and its paths, progress reports, error classes, this
  module and the experiment registry (through which an experiment loads another experiment's
  stored result, keyed by that experiment's own hash). Text-only code (``scorecard()``, the
  ``claims`` readings, plotting, the book) is not reached by any ``run`` and so outside every hash.
- **Presets left out** (:data:`PRESETS`, since scheme ``ast-2``): the class methods ``smoke()`` and
  ``paper()`` of a class, and what only they reach. A preset only chooses a configuration; a stored
  result is stored under the configuration it was computed with, and that configuration's values
  are in the entry, so a preset cannot move a stored number. Editing the smoke preset (to make CI
  quicker) therefore leaves every paper result today's, and a changed paper preset makes the book
  look for another entry (missing until it is computed) rather than call an old one stale. Where
  the reached code itself reads a preset (``Config.smoke()`` or ``getattr(c, "paper")`` inside what
  a ``run`` reaches), the presets are hashed as before (:func:`reached` checks).

So a docstring, a comment, a reformat, a renamed local variable, a new or moved helper that no
``run`` reaches, or a changed scorecard sentence leaves every stored result today's; an edited
function body, constant, default argument, class attribute or decorator that a ``run`` reaches
changes its hash. :func:`legacy_code_hash` is the scheme before this one (the bytes of every module
reached through imports), kept to recognise the hashes stored by it.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SCHEME", "SCHEMES", "PRESETS", "NOT_CODE", "ROOTS", "module_file", "imported_modules", "reachable_modules",
    "Library", "hash_cache_file", "normalise", "reached", "code_hash", "legacy_code_hash",
]

_LIB = Path(__file__).resolve().parents[1]

#: the name of the hashing scheme of :func:`code_hash`, recorded beside each hash. ``ast-1`` (December
#: 2026) hashed the presets too; ``ast-2`` leaves them out (:data:`PRESETS`)
SCHEME = "ast-2"
#: the schemes :func:`code_hash` computes (an older one to check what a stored hash of it means)
SCHEMES = ("ast-1", "ast-2")

#: the class methods that only choose a configuration, left out of the hash (scheme ``ast-2``)
PRESETS = frozenset({"smoke", "paper"})

#: modules that do not change what an experiment computes, left out of the walk (and not followed):
#: the store and its paths, progress reports, the error classes, this module, and the experiment
#: registry (through which an experiment loads another experiment's stored result, keyed by that
#: experiment's own hash)
NOT_CODE = frozenset({"ntkbook.store", "ntkbook.paths", "ntkbook.progress", "ntkbook.codehash",
                      "ntkbook.errors",
                      "ntkbook.experiments"})

#: the names of an experiment module whose behaviour a stored result depends on: ``run`` computes
#: it from a ``Config``, and ``PRECISION`` is recorded in its provenance
ROOTS = ("run", "Config", "PRECISION")

_BUILTINS = frozenset(dir(builtins))
#: calls that read a scope's names by string: local variables are not renamed where they occur
_SCOPE_READERS = frozenset({"locals", "vars", "eval", "exec", "dir"})
#: annotations that decide what a dataclass field is, kept in class bodies
_FIELD_MARKERS = ("ClassVar", "InitVar", "KW_ONLY")


# -- modules and their imports (also the import graph of tests/test_layout.py) ------------------
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


def _import_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` statement in ``package`` imports from."""
    if not node.level:
        return node.module or ""
    anchor = package.split(".")
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


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
            base = _import_base(node, package)
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


def legacy_code_hash(name: str, lib: Path = _LIB) -> str:
    """The scheme before :data:`SCHEME`: sha256 (16 hex digits) over the names and bytes of the
    :func:`reachable_modules` of ``name``. Any edit of such a module, a docstring included,
    changed it. Kept to check what a stored hash of that scheme was computed from."""
    digest = hashlib.sha256()
    for mod in reachable_modules(name, lib):
        digest.update(mod.encode() + b"\0" + module_file(mod, lib).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


#: parsed libraries by folder, with the digest of the sources they were parsed from
_LIBRARIES: dict[Path, tuple[str, "Library"]] = {}


def hash_cache_file(lib: Path, stamp: str) -> Path:
    """The file that keeps the hashes of the sources below ``lib`` whose digest is ``stamp``:
    ``$NTKBOOK_SCRATCH/codehash/`` (default ``<lib>/../.cache/store/codehash/``), one JSON file per
    digest and Python version (the syntax tree, and so :func:`normalise`, can differ between
    Python versions). The digest covers every source file, this module included, so a file is
    only ever read for exactly the sources (and hashing code) that wrote it."""
    folder = Path(os.environ.get("NTKBOOK_SCRATCH") or Path(lib).parent / ".cache" / "store") / "codehash"
    return folder / f"{SCHEME}-py{sys.version_info[0]}.{sys.version_info[1]}-{stamp[:32]}.json"


def _read_hashes(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or unreadable: computed again
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and len(v) == 16}


def _write_hashes(path: Path, hashes: dict[str, str]) -> None:
    """Merge ``hashes`` into ``path`` atomically. A folder that cannot be written is left alone:
    the next process then computes the hashes again."""
    try:
        merged = {**_read_hashes(path), **hashes}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


# -- a module's top-level names -----------------------------------------------------------------
#: what a name resolves to: ("module", "ntkbook.ntk.entk") or ("def", "ntkbook.ntk.entk", "entk")
Target = tuple


@dataclass
class _Module:
    """One parsed module: its top-level definitions, its imports and its other statements."""

    name: str
    package: str
    defs: dict[str, list[ast.stmt]] = field(default_factory=dict)  # name -> statements binding it
    imports: dict[str, Target] = field(default_factory=dict)  # name -> what it is bound to
    external: set[str] = field(default_factory=set)  # names bound to other packages (numpy, jax)
    imported: set[str] = field(default_factory=set)  # ntkbook modules its top level imports
    executable: list[ast.stmt] = field(default_factory=list)  # run on import, always hashed
    other: set[str] = field(default_factory=set)  # names those statements bind
    star: bool = False  # has ``from x import *``: its names cannot be known
    star_from: list[str] = field(default_factory=list)  # the ntkbook modules it star-imports


def _bound_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` without an ``else``."""
    t = stmt.test if isinstance(stmt, ast.If) else None
    return (isinstance(t, ast.Compare) and not stmt.orelse and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)
            and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value == "__main__")


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _is_preset(stmt: ast.stmt) -> bool:
    """A class body's ``@classmethod``/``@staticmethod`` named in :data:`PRESETS`."""
    return (isinstance(stmt, ast.FunctionDef) and stmt.name in PRESETS
            and any(isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod")
                    for d in stmt.decorator_list))


def _reads_a_preset(stmts: list[ast.stmt]) -> bool:
    """Whether code reads a preset: an attribute ``.smoke``/``.paper``, or ``getattr(x, "paper")``."""
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute) and node.attr in PRESETS:
                return True
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in PRESETS):
                return True
    return False


class Library:
    """The ``ntkbook`` sources below ``lib``, parsed on demand (one instance per source tree)."""

    def __init__(self, lib: Path = _LIB):
        self.lib = Path(lib)
        self._modules: dict[str, _Module | None] = {}
        self._uses: dict[str, tuple] = {}
        self._normal: dict[str, str] = {}
        self._hashes: dict[str, str] = {}  # today's scheme only
        self._stripped: dict[str, list[ast.stmt]] = {}
        self._disk: Path | None = None  # where :meth:`of` keeps the hashes of these sources

    @classmethod
    def of(cls, lib: Path = _LIB) -> "Library":
        """The library below ``lib`` as its sources are now: parsed once, and again only when a
        source file changes (its bytes are compared, not its time stamp). Its hashes are kept on
        disk under the sources' digest (:func:`hash_cache_file`), so another process reading the
        same sources takes them from there instead of parsing the library again."""
        root = Path(lib).resolve()
        digest = hashlib.sha256()
        for path in sorted((root / "ntkbook").rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        stamp = digest.hexdigest()
        cached = _LIBRARIES.get(root)
        if cached is None or cached[0] != stamp:
            library = cls(root)
            library._disk = hash_cache_file(root, stamp)
            library._hashes.update(_read_hashes(library._disk))
            cached = _LIBRARIES[root] = (stamp, library)
        return cached[1]

    def uses(self, key: str, stmts: list[ast.stmt], module: str):
        """What the code of unit ``key`` uses: its function-level import bindings, the modules
        those imports run, and every (name, attributes) it loads. (``key`` names the unit and its
        variant: a class with its presets left out is another unit than the whole class.)"""
        if key not in self._uses:
            package = self.module(module).package
            local: dict[str, Target] = {}
            runs: set[str] = set()
            chains: list[tuple[str, tuple[str, ...]]] = []
            for stmt in stmts:
                for node in ast.walk(stmt):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:
                        for bound, target in self._import_bindings(node, package):
                            if target is not None:
                                local[bound] = target
                        runs |= self._imported_by(node, package)
                chains += [(n, tuple(a)) for n, a in _chains(stmt)]
            self._uses[key] = (local, sorted(runs), list(dict.fromkeys(chains)))
        return self._uses[key]

    def normalised(self, key: str, stmts: list[ast.stmt], module: str) -> str:
        """:func:`normalise` of unit ``key`` (memoised)."""
        if key not in self._normal:
            mod = self.module(module)
            names = set(mod.defs) | set(mod.imports) | mod.external | mod.other
            self._normal[key] = normalise(stmts, names)
        return self._normal[key]

    def without_presets(self, key: str, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """``stmts`` with the :data:`PRESETS` of each class among them left out (memoised): a
        method named ``smoke`` or ``paper`` decorated ``@classmethod`` or ``@staticmethod``."""
        if key not in self._stripped:
            out = []
            for stmt in stmts:
                if isinstance(stmt, ast.ClassDef) and any(_is_preset(s) for s in stmt.body):
                    stmt = ast.ClassDef(**{**{f: getattr(stmt, f) for f in stmt._fields},
                                           "body": [s for s in stmt.body if not _is_preset(s)]
                                           or [ast.Pass()]})
                out.append(stmt)
            self._stripped[key] = out
        return self._stripped[key]

    def exists(self, name: str) -> bool:
        return name.split(".")[0] == "ntkbook" and module_file(name, self.lib) is not None

    def module(self, name: str) -> _Module:
        if name not in self._modules:
            self._modules[name] = self._parse(name)
        mod = self._modules[name]
        if mod is None:
            raise ModuleNotFoundError(f"no module {name!r} below {self.lib}")
        return mod

    def _import_bindings(self, node: ast.stmt, package: str) -> list[tuple[str, Target | None]]:
        """The names an import statement binds and what each is bound to (None: not ntkbook)."""
        out: list[tuple[str, Target | None]] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out.append((alias.asname, ("module", alias.name) if self.exists(alias.name)
                                else None))
                else:  # ``import a.b.c`` binds ``a``
                    top = alias.name.split(".")[0]
                    out.append((top, ("module", top) if self.exists(top) else None))
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            for alias in node.names:
                if alias.name == "*":
                    continue
                bound = alias.asname or alias.name
                # an attribute of ``base`` or its submodule: decided when it is resolved
                out.append((bound, ("attr", base, alias.name) if self.exists(base) else None))
        return out

    def _parse(self, name: str) -> _Module | None:
        path = module_file(name, self.lib)
        if path is None:
            return None
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        mod = _Module(name, package)
        for i, stmt in enumerate(tree.body):
            if i == 0 and _is_docstring(stmt):
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mod.defs.setdefault(stmt.name, []).append(stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    mod.star = True
                    if self.exists(_import_base(stmt, package)):
                        mod.star_from.append(_import_base(stmt, package))
                for bound, target in self._import_bindings(stmt, package):
                    if target is None:
                        mod.external.add(bound)
                        mod.imports.pop(bound, None)
                    else:
                        mod.imports[bound] = target
                mod.imported |= self._imported_by(stmt, package)
            elif (isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                  and all(_bound_names(t) for t in _targets(stmt))):
                for t in _targets(stmt):
                    for n in _bound_names(t):
                        mod.defs.setdefault(n, []).append(stmt)
            elif _is_docstring(stmt) or _is_main_guard(stmt):
                continue  # a bare constant does nothing; a main block does not run on import
            else:  # if/try/with/for/expression statements: run on import
                mod.executable.append(stmt)
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        mod.other.add(node.id)
                    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        mod.other.add(node.name)
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        for bound, target in self._import_bindings(node, package):
                            if target is not None:
                                mod.imports.setdefault(bound, target)
                        mod.imported |= self._imported_by(node, package)
        return mod

    def _imported_by(self, node: ast.stmt, package: str) -> set[str]:
        """The ntkbook modules an import statement runs (with their packages)."""
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        out = set()
        for n in names:
            if self.exists(n):
                out.add(n)
                out.update(p for p in _parents(n))
        return out


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    return [stmt.target]


# -- resolving the names a definition uses -------------------------------------------------------
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *_COMPREHENSIONS)


def _function_locals(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names local to ``func``'s own scope: its parameters and what its body binds (nested
    scopes left out, their names kept), less what it declares global. Names bound by imports
    are left out: they are resolved through the import (:meth:`Library.uses`)."""
    a = func.args
    names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
             if x is not None}
    declared_global: set[str] = set()
    body = [func.body] if isinstance(func, ast.Lambda) else func.body
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            todo.extend(node.decorator_list)  # evaluated here
            continue
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue  # a scope of its own (a walrus inside binds here: missing it is safe)
        if isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        todo.extend(ast.iter_child_nodes(node))
    return names - declared_global


def _declared_globals(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names ``func``'s own body declares ``global`` (nested scopes left out)."""
    out: set[str] = set()
    todo = list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, ast.Global):
            out.update(node.names)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _chains(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """Every name the code below ``tree`` reads from its module (not a local variable of a
    function it is in), with the attributes read from it: ``entk.entk_matvec(...)`` gives
    ``("entk", ["entk_matvec"])``. Annotations are left out (they do not run). Where the scope
    of a name is in doubt it counts as the module's (a dependency too many, never one too few)."""
    out: list[tuple[str, list[str]]] = []

    def free(name: str, scopes: tuple[set[str], ...]) -> bool:
        return not any(name in scope for scope in scopes)

    def arguments(args: ast.arguments, scopes) -> None:  # defaults run in the enclosing scope
        for d in (*args.defaults, *[d for d in args.kw_defaults if d is not None]):
            visit(d, scopes)

    def visit(node: ast.AST, scopes: tuple[set[str], ...]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                visit(d, scopes)
            arguments(node.args, scopes)
            declared = _declared_globals(node)  # the module's here and below, whatever encloses
            inner = tuple(s - declared for s in scopes) + (_function_locals(node),)
            for stmt in node.body:
                visit(stmt, inner)
        elif isinstance(node, ast.Lambda):
            arguments(node.args, scopes)
            visit(node.body, scopes + (_function_locals(node),))
        elif isinstance(node, ast.ClassDef):  # its body's names are read as the module's
            for child in (*node.decorator_list, *node.bases, *node.keywords, *node.body):
                visit(child, scopes)
        elif isinstance(node, _COMPREHENSIONS):
            gens = node.generators
            visit(gens[0].iter, scopes)  # the first iterable runs in the enclosing scope
            targets = {n.id for g in gens for n in ast.walk(g.target) if isinstance(n, ast.Name)}
            inner = scopes + (targets,)
            for i, g in enumerate(gens):
                if i:
                    visit(g.iter, inner)
                for cond in g.ifs:
                    visit(cond, inner)
            for part in ("elt", "key", "value"):
                if getattr(node, part, None) is not None:
                    visit(getattr(node, part), inner)
        elif isinstance(node, ast.AnnAssign):
            visit(node.target, scopes)
            if node.value is not None:
                visit(node.value, scopes)
        elif isinstance(node, ast.arguments):
            arguments(node, scopes)
        elif isinstance(node, ast.Attribute):
            attrs, base = [], node
            while isinstance(base, ast.Attribute):
                attrs.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                if free(base.id, scopes):
                    out.append((base.id, attrs[::-1]))
            else:
                visit(base, scopes)
        elif isinstance(node, ast.Name):
            if free(node.id, scopes):
                out.append((node.id, []))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, scopes)

    visit(tree, ())
    return out


class _Walker:
    """The closure of what a set of roots reaches (see the module docstring)."""

    def __init__(self, library: Library, presets: bool = True):
        self.lib = library
        self.presets = presets  # False: classes enter without their presets (scheme ast-2)
        self.units: dict[str, list[ast.stmt]] = {}  # "module:name" or "module:<import>" -> code
        self.modules: set[str] = set()  # modules whose top level runs
        self._todo: list[tuple[str, list[ast.stmt]]] = []
        self._resolved: set[tuple[Target, tuple[str, ...]]] = set()

    def run_module(self, name: str) -> None:
        """Module ``name`` is imported: its packages' and its own top-level statements run."""
        for mod_name in (*_parents(name), name):
            if mod_name in self.modules or mod_name in NOT_CODE or not self.lib.exists(mod_name):
                continue
            self.modules.add(mod_name)
            mod = self.lib.module(mod_name)
            if mod.executable:
                self._add(f"{mod_name}:<import>", mod_name, mod.executable)
            for other in sorted(mod.imported):
                self.run_module(other)

    def whole(self, name: str) -> None:
        """Module ``name`` is used as a value: all of it."""
        if name in NOT_CODE:
            return
        self.run_module(name)
        mod = self.lib.module(name)
        for n in sorted(mod.defs):
            self.add_def(name, n)
        for n in sorted(mod.imports):
            self.resolve(name, mod.imports[n], [])
        for base in mod.star_from:  # what ``from base import *`` bound
            self.whole(base)

    def add_def(self, module: str, name: str) -> None:
        if module in NOT_CODE:
            return
        mod = self.lib.module(module)
        if name in mod.defs:
            self.run_module(module)
            self._add(f"{module}:{name}", module, mod.defs[name])
        elif name in mod.imports:  # a re-export: what it names
            self.run_module(module)
            self.resolve(module, mod.imports[name], [])
        elif self.lib.exists(f"{module}.{name}"):
            self.whole(f"{module}.{name}")
        elif mod.star or name not in mod.external:
            self.whole(module)  # not found statically: the whole module, to be safe

    def resolve(self, module: str, target: Target, attrs: list[str]) -> None:
        """Follow ``target`` (what a name in ``module`` is bound to) through ``attrs``."""
        if (target, tuple(attrs)) in self._resolved:
            return
        self._resolved.add((target, tuple(attrs)))
        kind = target[0]
        if kind == "attr":  # ``from base import name``
            _, base, name = target
            if base in NOT_CODE:
                return
            self.run_module(base)
            mod = self.lib.module(base)
            if name in mod.defs:
                self.add_def(base, name)
                return
            if name in mod.imports and mod.imports[name] != target:  # not ``from . import name``
                self.resolve(base, mod.imports[name], attrs)
                return
            if self.lib.exists(f"{base}.{name}"):
                self.resolve(base, ("module", f"{base}.{name}"), attrs)
                return
            if name not in mod.external:
                self.whole(base)
            return
        _, name = target  # a module
        if name in NOT_CODE:
            return
        self.run_module(name)
        if not attrs:
            self.whole(name)
            return
        first, rest = attrs[0], attrs[1:]
        mod = self.lib.module(name)
        if first in mod.defs:
            self.add_def(name, first)
        elif first in mod.imports:
            self.resolve(name, mod.imports[first], rest)
        elif self.lib.exists(f"{name}.{first}"):
            self.resolve(name, ("module", f"{name}.{first}"), rest)
        elif first not in mod.external:
            self.whole(name)

    def _add(self, key: str, module: str, stmts: list[ast.stmt]) -> None:
        if key in self.units:
            return
        self.units[key] = stmts if self.presets else self.lib.without_presets(key, stmts)
        self._todo.append((key, module))

    def memo_key(self, key: str) -> str:
        """The key under which :class:`Library` memoises unit ``key`` of this walk."""
        return key if self.presets else f"{key}#no-presets"

    def close(self) -> None:
        """Follow every name the collected code uses until nothing new is reached."""
        while self._todo:
            key, module = self._todo.pop()
            mod = self.lib.module(module)
            local, runs, chains = self.lib.uses(self.memo_key(key), self.units[key], module)
            for m in runs:
                self.run_module(m)
            for name, attrs in chains:
                if name == "globals":
                    self.whole(module)
                    continue
                # an import inside a function, or a module-level name (which may be bound
                # more than once): follow each that applies
                if name in local:
                    self.resolve(module, local[name], list(attrs))
                if name in mod.imports:
                    self.resolve(module, mod.imports[name], list(attrs))
                if name in mod.defs:
                    self.add_def(module, name)
                if not (name in local or name in mod.imports or name in mod.defs):
                    for base in mod.star_from:  # perhaps bound by ``from base import *``
                        self.resolve(module, ("attr", base, name), list(attrs))


def reached(name: str, lib: Path | Library = _LIB, *, presets: bool = False
            ) -> dict[str, list[ast.stmt]]:
    """The code experiment module ``name`` runs: ``{"module:definition": statements}``, with
    ``"module:<import>"`` for the top-level statements a module runs when imported. Classes enter
    without their :data:`PRESETS` unless ``presets``, or unless the code reached that way reads
    a preset itself (then the walk is done again with them)."""
    return _walk(name, lib, presets)[1]


def _walk(name: str, lib: Path | Library, presets: bool
          ) -> tuple["_Walker", dict[str, list[ast.stmt]]]:
    library = lib if isinstance(lib, Library) else Library.of(lib)
    walker = _Walker(library, presets)
    walker.run_module(name)
    mod = library.module(name)
    roots = [r for r in ROOTS if r in mod.defs or r in mod.imports]
    if "run" not in roots:
        raise ValueError(f"{name} defines no run(): not an experiment module")
    for root in roots:
        walker.add_def(name, root)
    walker.close()
    if not presets and any(_reads_a_preset(stmts) for stmts in walker.units.values()):
        return _walk(name, library, True)
    return walker, walker.units


# -- normalisation -------------------------------------------------------------------------------
def _drop_docstrings(body: list[ast.stmt]) -> list[ast.stmt]:
    kept = [s for s in body if not _is_docstring(s)]
    return kept or [ast.Pass()]


def _field_marker(ann: ast.AST) -> bool:
    return any(m in ast.unparse(ann) for m in _FIELD_MARKERS)


class _Normaliser(ast.NodeTransformer):
    """Docstrings and annotations out (see :func:`normalise`); local names renamed per function."""

    def __init__(self, module_names: set[str]):
        self.module_names = module_names
        self.class_depth = 0
        self.function_depth = 0

    def _body(self, node: ast.AST) -> None:
        for attr in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, attr, None), list) and getattr(node, attr):
                setattr(node, attr, _drop_docstrings(getattr(node, attr)))

    def generic_visit(self, node: ast.AST) -> ast.AST:
        self._body(node)
        return super().generic_visit(node)

    def _scope(self, node):
        """A function or lambda: its body normalised, then (if outermost) its locals renamed."""
        outermost = self.function_depth == 0
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1
        if outermost:
            _rename_locals(node, self.module_names)
        return node

    def _function(self, node):
        node.returns = None
        a = node.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
            if arg is not None:
                arg.annotation = None
        node.type_comment = None
        return self._scope(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function
    visit_Lambda = _scope

    def visit_ClassDef(self, node):
        self.class_depth += 1
        outer_function = self.function_depth
        self.function_depth = 0  # methods are functions of their own
        self.generic_visit(node)
        self.function_depth = outer_function
        self.class_depth -= 1
        return node

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        in_class_body = self.class_depth and not self.function_depth
        if in_class_body and _field_marker(node.annotation):
            return node
        node.annotation = ast.Constant("annotation")
        return node


def _renamable(func: ast.AST, module_names: set[str]) -> set[str]:
    """The local names of ``func`` (a function or lambda, with what is nested in it) that can be
    renamed without changing what it does: bound inside it, and never a parameter (a keyword
    could name it), a module-level name or a builtin (a use before binding would reach those),
    nor declared global or nonlocal. None where a scope is read by string (``locals()``), or where
    a nested class or a ``match`` binds names by other means."""
    bound: set[str] = set()
    excluded: set[str] = set(module_names) | _BUILTINS
    for node in ast.walk(func):
        if isinstance(node, (ast.ClassDef, ast.Match)):
            return set()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _SCOPE_READERS:
            return set()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            excluded.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            excluded.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg,
                                            a.kwarg) if x is not None)
            if node is not func and not isinstance(node, ast.Lambda):
                bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            excluded.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound - excluded


def _rename_locals(func: ast.AST, module_names: set[str]) -> None:
    names = _renamable(func, module_names)
    if not names:
        return
    mapping: dict[str, str] = {}

    def canon(name: str) -> str:
        if name not in mapping:
            mapping[name] = f"local#{len(mapping)}"  # not an identifier: no clash possible
        return mapping[name]

    def visit(node: ast.AST) -> None:  # depth first, in field order: the same for equal shapes
        if isinstance(node, ast.Name) and node.id in names:
            node.id = canon(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name in names:
            node.name = canon(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not func \
                and node.name in names:
            node.name = canon(node.name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(func)


def normalise(stmts: list[ast.stmt], module_names: set[str] = frozenset()) -> str:
    """The behaviour of ``stmts`` as text: :func:`ast.dump` of a copy with docstrings and other
    bare constants, type annotations (but ``ClassVar``/``InitVar``/``KW_ONLY`` in class bodies)
    and local variable names (``local#0``, ... in order of appearance, see :func:`_renamable`)
    taken out. ``module_names``: the module's top-level names, which are never renamed."""
    import copy

    tree = ast.Module(body=copy.deepcopy(stmts), type_ignores=[])
    tree = _Normaliser(set(module_names)).visit(tree)
    return ast.dump(tree)


def code_hash(name: str, lib: Path | Library = _LIB, *, scheme: str = SCHEME) -> str:
    """sha256 (16 hex digits) of what experiment module ``name`` runs (:func:`reached`), each
    definition normalised (:func:`normalise`) and entered under its qualified name, sorted.
    ``scheme``: one of :data:`SCHEMES`; ``"ast-1"`` hashes the presets too (to check what a hash
    stored under that scheme was computed from)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown code hash scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    library = lib if isinstance(lib, Library) else Library.of(lib)
    if scheme == SCHEME and name in library._hashes:
        return library._hashes[name]
    walker, units = _walk(name, library, presets=(scheme == "ast-1"))
    digest = hashlib.sha256(scheme.encode() + b"\0")
    for key, stmts in sorted(units.items()):
        text = library.normalised(walker.memo_key(key), stmts, key.partition(":")[0])
        digest.update(key.encode() + b"\0" + text.encode() + b"\0")
    value = digest.hexdigest()[:16]
    if scheme == SCHEME:
        library._hashes[name] = value
        if library._disk is not None:
            _write_hashes(library._disk, {name: value})
    return value
