"""The code hash follows behaviour: every edit that can move a stored number changes it, and
text-only edits (docstrings, comments, formatting, annotations, local names, unreached code) do not.

Both directions are proved twice: on a small synthetic package that has every form of reference
(module-level and function-level imports, relative imports, a package re-export, attribute
chains, constants, defaults, class attributes, decorators, base classes, module top-level
statements, shadowing locals, comprehensions), and on the real library. Each edit is a text
substitution that must apply exactly once, so no case can silently become vacuous.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from ntkbook import experiments
from ntkbook.codehash import (Library, code_hash, imported_modules, legacy_code_hash, reached,
                              reachable_modules)

LIB = Path(__file__).resolve().parents[1] / "lib"

#: a package with every form of reference an experiment's code can use
SYNTHETIC = {
    "__init__.py": '"""The package."""\n',
    "errors.py": "class ConfigError(ValueError):\n    pass\n",
    "store.py": "def save(x):\n    return x\n",
    "sub/__init__.py": "from .impl import scaled  # a re-export\n",
    "sub/impl.py": '''
        """Implementation."""
        FACTOR = 3.0
        OTHER = 7


        def shifted(x, by=1):
            x = x + by
            return x


        def scaled(x: float, k: float = 2.0) -> float:
            """x times the factor and k."""
            total = x * FACTOR * k
            return total


        def unreached(x):
            return x + 1
        ''',
    "deep.py": '''
        from ntkbook import helpers


        def deep(x):
            return helpers.twice(x)
        ''',
    "helpers.py": '''
        import functools

        LIMIT = 10
        SECOND = 2


        def with_default(x, n=SECOND):
            return x * n


        def twice(x):
            return 2 * x


        def decorate(fn):
            return fn


        class Base:
            offset = 1


        class Model(Base):
            """A model."""
            scale = 5
            width: int = 3

            def apply(self, x):
                return x * self.scale + self.offset

            def unused_method(self):
                return 0


        @decorate
        def decorated(x):
            return x - 1
        ''',
    "text.py": "def sentence(r):\n    return f'value {r}'\n",
    "experiments/__init__.py": "",
    "experiments/x.py": '''
        """An experiment."""
        import dataclasses
        from typing import ClassVar

        from ntkbook import helpers as v
        from ntkbook.sub import scaled
        from . import __name__ as _pkg  # noqa
        from ntkbook.store import save

        import ntkbook.sub.impl
        from ntkbook.sub.impl import shifted

        NAME = "x"
        X = 4
        ITEMS = (1, 2)


        @dataclasses.dataclass(frozen=True)
        class Config:
            n: int = 3
            marker: ClassVar[int] = 0

            @classmethod
            def smoke(cls):
                return cls()


        def _local(config):
            from ntkbook.deep import deep
            return deep(config.n)


        def run(config, points=None):
            """Run it."""
            values = [v.twice(i) for i in range(config.n)]
            model = v.Model()
            out = [x for x in range(X)]

            def inner(v):  # a parameter named like the module alias
                return v + 1

            same = [ITEMS for ITEMS in ITEMS]  # the first iterable is the global
            return save((sum(values), scaled(1.0), model.apply(2), _local(config),
                         v.decorated(1), inner(3), out, v.LIMIT, ntkbook.sub.impl.OTHER,
                         v.with_default(1), shifted(1), same))


        def scorecard(result):
            from ntkbook import text
            return text.sentence(result)


        if __name__ == "__main__":
            print(run(Config()))
        ''',
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "ntkbook" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def synthetic(tmp_path):
    return _write(tmp_path / "syn", SYNTHETIC)


def _edited(root: Path, module_path: str, old: str, new: str) -> Path:
    path = root / "ntkbook" / module_path
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {module_path}"
    path.write_text(text.replace(old, new))
    return root


X = "ntkbook.experiments.x"

# -- the synthetic package -----------------------------------------------------------------------
#: (id, file, old, new): edits that can change what run computes
FLAGGED = [
    ("re-exported function body", "sub/impl.py", "x * FACTOR * k", "x * FACTOR * k + 0"),
    ("constant it reads", "sub/impl.py", "FACTOR = 3.0", "FACTOR = 3.5"),
    ("default argument", "sub/impl.py", "k: float = 2.0", "k: float = 2.5"),
    ("parameter renamed (a keyword may name it)", "sub/impl.py", "def scaled(x: float, k",
     "def scaled(y: float, k"),
    ("function-level import, depth 2", "helpers.py", "return 2 * x", "return 3 * x"),
    ("class attribute", "helpers.py", "scale = 5", "scale = 6"),
    ("base class attribute", "helpers.py", "offset = 1", "offset = 2"),
    ("method never called by name", "helpers.py", "return 0", "return 1"),
    ("dataclass-like annotated attribute", "helpers.py", "width: int = 3", "width: int = 4"),
    ("decorator", "helpers.py", "def decorate(fn):\n    return fn",
     "def decorate(fn):\n    return lambda x: fn(x) * 2"),
    ("constant through an attribute chain", "helpers.py", "LIMIT = 10", "LIMIT = 11"),
    ("top-level statement of an imported module", "helpers.py", "import functools\n",
     "import functools\nprint('imported')\n"),
    ("a Config default", "experiments/x.py", "n: int = 3", "n: int = 4"),
    ("ClassVar made a field", "experiments/x.py", "marker: ClassVar[int] = 0", "marker: int = 0"),
    ("a global the comprehension's first iterable reads", "experiments/x.py", "X = 4", "X = 5"),
    ("constant through a chain past two modules", "sub/impl.py", "OTHER = 7", "OTHER = 8"),
    ("constant read only by a default argument", "helpers.py", "SECOND = 2", "SECOND = 3"),
    ("parameter replaced by an unbound local", "sub/impl.py", "    x = x + by\n    return x",
     "    y = y + by\n    return y"),
    ("global named like the comprehension's variable", "experiments/x.py", "ITEMS = (1, 2)",
     "ITEMS = (1, 3)"),
    ("which global a function reads", "experiments/x.py", "for x in range(X)]", "for x in range(NAME)]"),
]

#: edits that cannot: text, formatting, annotations, local names, code no run reaches
UNFLAGGED = [
    ("docstring", "sub/impl.py", '"""x times the factor and k."""', '"""x times FACTOR times k."""'),
    ("module docstring", "sub/impl.py", '"""Implementation."""', '"""The implementation."""'),
    ("comment and blank lines", "sub/impl.py", "    total = x * FACTOR * k\n",
     "    # the product\n\n    total = x * FACTOR * k  # here\n"),
    ("reformat", "sub/impl.py", "    total = x * FACTOR * k", "    total = (x *\n             FACTOR * k)"),
    ("local variable renamed", "sub/impl.py", "    total = x * FACTOR * k\n    return total",
     "    product = x * FACTOR * k\n    return product"),
    ("annotation", "sub/impl.py", "def scaled(x: float, k: float = 2.0) -> float:",
     "def scaled(x: int, k: float = 2.0) -> int:"),
    ("unreached helper edited", "sub/impl.py", "return x + 1", "return x + 2"),
    ("helper added", "helpers.py", "LIMIT = 10\n", "LIMIT = 10\n\n\ndef brand_new(x):\n    return x\n"),
    ("class docstring", "helpers.py", '"""A model."""', '"""The model."""'),
    ("scorecard (text only)", "experiments/x.py", "return text.sentence(result)",
     "return text.sentence(result) + '!'"),
    ("text module", "text.py", "f'value {r}'", "f'the value {r}'"),
    ("main block", "experiments/x.py", "print(run(Config()))", "print(run(Config()), 1)"),
    ("store (not code)", "store.py", "return x", "return x  # saved"),
    ("comprehension variable renamed", "experiments/x.py", "[v.twice(i) for i in range(config.n)]",
     "[v.twice(j) for j in range(config.n)]"),
]


def test_synthetic_reaches_what_run_uses(synthetic):
    units = set(reached(X, Library(synthetic)))
    assert {"ntkbook.experiments.x:run", "ntkbook.experiments.x:Config", "ntkbook.sub.impl:scaled",
            "ntkbook.sub.impl:FACTOR", "ntkbook.helpers:twice", "ntkbook.helpers:Model",
            "ntkbook.helpers:Base", "ntkbook.helpers:decorate", "ntkbook.helpers:LIMIT",
            "ntkbook.deep:deep", "ntkbook.experiments.x:X"} <= units
    assert not units & {"ntkbook.sub.impl:unreached", "ntkbook.experiments.x:scorecard",
                        "ntkbook.text:sentence", "ntkbook.store:save"}


@pytest.mark.parametrize("what, path, old, new", FLAGGED, ids=[c[0] for c in FLAGGED])
def test_a_behaviour_edit_changes_the_hash(synthetic, what, path, old, new):
    before = code_hash(X, Library(synthetic))
    assert code_hash(X, Library(_edited(synthetic, path, old, new))) != before, what


@pytest.mark.parametrize("what, path, old, new", UNFLAGGED, ids=[c[0] for c in UNFLAGGED])
def test_a_text_only_edit_leaves_the_hash(synthetic, what, path, old, new):
    before = code_hash(X, Library(synthetic))
    assert code_hash(X, Library(_edited(synthetic, path, old, new))) == before, what


def test_moving_an_unreached_helper_or_reordering_leaves_the_hash(synthetic):
    before = code_hash(X, Library(synthetic))
    path = synthetic / "ntkbook" / "sub" / "impl.py"
    text = path.read_text()
    helper = "def unreached(x):\n    return x + 1\n"
    body = text.replace(helper, "")
    path.write_text(helper + "\n\n" + body)  # to the top of the file
    assert code_hash(X, Library(synthetic)) == before
    path.write_text(body)  # to another module
    (synthetic / "ntkbook" / "other.py").write_text(helper)
    assert code_hash(X, Library(synthetic)) == before


def test_a_local_shadowing_an_import_alias_still_reads_the_alias_elsewhere(tmp_path):
    """``v`` is both a local (a parameter of inner) and the module alias: the alias's uses count."""
    files = dict(SYNTHETIC)
    files["experiments/x.py"] = '''
        from ntkbook import helpers as v


        class Config:
            pass


        def run(config, points=None):
            def inner(v):
                return v + 1
            w = [v for v in range(3)]
            return inner(2), w, (lambda: v.twice(1))()
        '''
    root = _write(tmp_path / "s", files)
    assert "ntkbook.helpers:twice" in reached(X, Library(root))
    before = code_hash(X, Library(root))
    assert code_hash(X, Library(_edited(root, "helpers.py", "return 2 * x", "return 4 * x"))) != before


# -- the real library ----------------------------------------------------------------------------
@pytest.fixture
def lib_copy(tmp_path):
    """A private copy of the library's sources, safe to edit."""
    shutil.copytree(LIB / "ntkbook", tmp_path / "ntkbook", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _body_line(path: Path, func: str) -> str:
    """The first line of ``func``'s body in ``path`` that is code (not a docstring)."""
    import ast
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func)
    stmt = next(s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)))
    return path.read_text().splitlines()[stmt.lineno - 1]


REAL_FLAGGED = [
    # (experiment, module, function whose first code line gets a no-op-looking edit)
    ("gemma_probe", "gemma/operator.py", None),   # imported inside run only
    ("modular_mlp", "ntk/features.py", "subspace_overlap"),
    ("demo_sweep", "stats.py", "loglog_slope"),
]


@pytest.mark.parametrize("experiment, module, func", REAL_FLAGGED)
def test_real_behaviour_edits_are_flagged(lib_copy, experiment, module, func):
    name = f"ntkbook.experiments.{experiment}"
    before = code_hash(name, Library(lib_copy))
    assert before == code_hash(name)  # the copy is the library
    units = reached(name, Library(lib_copy))
    mod = "ntkbook." + module[:-3].replace("/", ".")
    path = lib_copy / "ntkbook" / module
    if func is None:  # any reached function of that module
        func = sorted(k.split(":")[1] for k in units if k.startswith(mod + ":")
                      and (lib_copy / "ntkbook" / module).read_text().count(f"def {k.split(':')[1]}(") == 1)[0]
    assert f"{mod}:{func}" in units
    line = _body_line(path, func)
    indent = line[: len(line) - len(line.lstrip())]
    _edited(lib_copy, module, line + "\n", line + "\n" + indent + "_edit_marker = 1\n")
    assert code_hash(name, Library(lib_copy)) != before


def test_real_text_edits_are_not_flagged(lib_copy):
    names = [f"ntkbook.experiments.{n}" for n in ("modular_mlp", "gemma_probe", "influence_map")]
    before = {n: code_hash(n, Library(lib_copy)) for n in names}
    root = lib_copy / "ntkbook"
    for path in [root / "ntk" / "features.py", root / "gemma" / "operator.py", root / "train.py"]:
        path.write_text(path.read_text().replace('"""', '"""Edited. ', 1) + "\n# a comment\n")
    scorecard = root / "experiments" / "modular_mlp.py"
    _edited(lib_copy, "experiments/modular_mlp.py", "def scorecard(result: Result) -> list[dict]:\n",
            "def scorecard(result: Result) -> list[dict]:\n    _text_only = 1\n")
    assert scorecard.exists()
    for pkg in ("claims", "plotting", "book"):
        for path in sorted((root / pkg).glob("*.py"))[:3]:
            path.write_text(path.read_text() + "\n\ndef _added_helper():\n    return 1\n")
    progress = root / "progress.py"
    progress.write_text(progress.read_text() + "\nX_PROGRESS = 1\n")
    assert {n: code_hash(n, Library(lib_copy)) for n in names} == before


def test_legacy_hash_sees_every_byte(lib_copy):
    name = "ntkbook.experiments.gemma_probe"
    before = legacy_code_hash(name, lib_copy)
    path = lib_copy / "ntkbook" / "gemma" / "operator.py"
    path.write_text(path.read_text() + "\n# a comment\n")
    assert legacy_code_hash(name, lib_copy) != before
    assert {"ntkbook.gemma.operator", "ntkbook.gemma.weights", "ntkbook.ntk.eig"} <= set(
        reachable_modules(name, lib_copy))


def test_imported_modules_resolves_every_form(tmp_path):
    pkg = tmp_path / "ntkbook"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/__init__.py", "sub/e.py", "sub/f.py"):
        (pkg / f).write_text("")
    (pkg / "sub" / "e.py").write_text(
        "import numpy\n"
        "from ntkbook import a\n"
        "from ntkbook.b import something\n"
        "def g():\n    import ntkbook.c as c\n    from . import f\n    from ..d import h\n")
    assert imported_modules("ntkbook.sub.e", tmp_path) == {
        "ntkbook", "ntkbook.a", "ntkbook.b", "ntkbook.c", "ntkbook.d", "ntkbook.sub", "ntkbook.sub.f"}


def test_every_experiment_hashes_deterministically():
    hashes = {name: code_hash(f"ntkbook.experiments.{name}") for name in experiments.EXPERIMENTS}
    assert all(len(h) == 16 for h in hashes.values())
    assert len(set(hashes.values())) == len(hashes)
    fresh = Library(LIB)  # a new parse gives the same hashes as the cached one
    assert {n: code_hash(f"ntkbook.experiments.{n}", fresh) for n in hashes} == hashes


def test_the_cache_sees_an_edit_of_the_same_size(synthetic):
    before = code_hash(X, Library.of(synthetic))
    _edited(synthetic, "sub/impl.py", "FACTOR = 3.0", "FACTOR = 4.0")  # same length
    assert code_hash(X, Library.of(synthetic)) != before
