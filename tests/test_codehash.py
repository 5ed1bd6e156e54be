"""The code hash follows behaviour, in both directions, on the real library.

:func:`ntkbook.codehash.code_hash` must change for every edit that can move a stored number and
stay for every edit that cannot. Each case below copies the sources into ``tmp_path``, makes one
edit by text substitution (the old text must occur exactly once, so a case cannot silently become
vacuous when the source changes) and compares the hash with the pristine one:

- :data:`FLAGGED`: a behaviour edit, so the hash must change: in code reached only through a
  function-level import, another module, an attribute chain, a package re-export, a relative
  import or a default argument; a constant, a default value, a class attribute, a method never
  called by name, a decorator, a base class, a ``Config`` default, a ``ClassVar`` made a field,
  a module's top-level statement, a renamed parameter, another global read; an import alias
  beside locals of its name, a comprehension whose first iterable is a global of its variable's
  name.
- :data:`UNFLAGGED`: a text-only edit, so the hash must stay: docstrings, comments, formatting,
  annotations, renamed local variables, new, moved or reordered definitions, code no ``run``
  reaches (``scorecard()``, ``ntkbook.claims``, ``plotting``, ``book``, ``progress``, a main block),
  and a ``Config``'s ``smoke()``/``paper()`` presets with what only they reach (scheme ``ast-2``:
  a preset only chooses a configuration, and a stored entry keeps the one it was computed with) —
  unless the code a ``run`` reaches reads a preset itself (``Config.paper()``, ``getattr(c,
  "smoke")``): then an edit of the preset is flagged (synthetic experiment ``y``).

Each case also names the definitions (``"module:name"`` units of :func:`reached`) that hold the
edited code and must (``reaches``) or must not (``misses``) be reached after the edit, so a case
says why the hash does what it does. Where the real library has no example of a form (a package
re-export, a relative import, a chain through two modules, ``ClassVar``, ``__getattr__``, star
imports, ``global``), :data:`SYNTHETIC` is a small package written into ``tmp_path`` that has it,
with the experiments ``ntkbook.experiments.x``, ``.y`` and ``.z`` (case experiments ``"x"``,
``"y"``, ``"z"``).

The rest: the legacy scheme (:func:`legacy_code_hash`: the bytes of every module reached by
imports) and the import graph (:func:`imported_modules`, also used by ``tests/test_layout.py``),
every experiment's hash (distinct, deterministic across fresh parses) and the content-keyed cache
of :meth:`Library.of`. ``tools/mutations.py`` (C1 to C16) checks that these tests fail when
``codehash.py`` is broken in each of the ways they are meant to catch.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ntkbook import experiments
from ntkbook.codehash import (NOT_CODE, Library, code_hash, imported_modules, legacy_code_hash,
                              reachable_modules, reached)

LIB = Path(__file__).resolve().parents[1] / "lib"
X = "ntkbook.experiments.x"  # the synthetic experiment
Y = "ntkbook.experiments.y"  # the synthetic experiment whose run reads its presets by getattr
Z = "ntkbook.experiments.z"  # the synthetic experiment whose run calls Config.smoke()


# -- helpers: copies, edits, hashes -------------------------------------------------------------
def _copy_lib(root: Path) -> Path:
    """A private copy of the library's sources below ``root``, safe to edit."""
    shutil.copytree(LIB / "ntkbook", root / "ntkbook", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def lib_copy(tmp_path) -> Path:
    return _copy_lib(tmp_path)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "ntkbook" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def _apply(root: Path, edit) -> None:
    """One edit below ``root/ntkbook``: ``(file, old, new)`` replaces ``old``, which must occur
    exactly once, by ``new``; ``(file, None, new)`` appends ``new`` (creating the file); a
    callable is called with ``root``."""
    if callable(edit):
        edit(root)
        return
    file, old, new = edit
    path = root / "ntkbook" / file
    text = path.read_text() if path.exists() else ""
    if old is None:
        path.write_text(text + new)
        return
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {file}"
    path.write_text(text.replace(old, new))


def _block(path: Path, name: str) -> str:
    """The source text of the top-level definition ``name`` in ``path`` (decorators included)."""
    text = path.read_text()
    nodes = [n for n in ast.parse(text).body if getattr(n, "name", None) == name]
    assert len(nodes) == 1, f"{name} must be defined once at the top of {path}"
    node = nodes[0]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    block = "".join(text.splitlines(keepends=True)[first - 1:node.end_lineno])
    assert text.count(block) == 1
    return block


def move(file: str, name: str, to: str | None = None):
    """An edit: definition ``name`` of ``file`` moved to the end of ``to`` (default: its own file)."""
    def edit(root: Path) -> None:
        block = _block(root / "ntkbook" / file, name)
        _apply(root, (file, block, ""))
        _apply(root, (to or file, None, "\n\n" + block))
    return edit


def swap(file: str, a: str, b: str):
    """An edit: top-level definitions ``a`` and ``b`` of ``file`` trade places."""
    def edit(root: Path) -> None:
        path = root / "ntkbook" / file
        block_a, block_b = _block(path, a), _block(path, b)
        text = path.read_text().replace(block_a, "\0a\0").replace(block_b, block_a)
        path.write_text(text.replace("\0a\0", block_b))
    return edit


def case(id: str, experiment: str, *edits, reaches=(), misses=(), marks=()):
    """One row of a table: ``edits`` applied to a copy of the library (or, for experiment ``"x"``,
    of :data:`SYNTHETIC`); after them the units ``reaches`` must be reached, and neither the units
    ``misses`` nor any unit of a module (or package) named in ``misses``."""
    return pytest.param(experiment, edits, tuple(reaches), tuple(misses), id=id, marks=marks)


def _pristine(experiment: str, tmp_path: Path) -> tuple[str, Path, str]:
    """The module name, an editable copy of the sources, and the hash before any edit."""
    if experiment in ("x", "y", "z"):
        name = f"ntkbook.experiments.{experiment}"
        before = code_hash(name, Library(_write(tmp_path / "pristine", SYNTHETIC)))
        return name, _write(tmp_path / "edited", SYNTHETIC), before
    name = f"ntkbook.experiments.{experiment}"
    return name, _copy_lib(tmp_path / "edited"), code_hash(name, LIB)  # cached by Library.of


def _edited(tmp_path: Path, experiment: str, edits, reaches, misses) -> tuple[str, str]:
    """The hash before and after ``edits``, with the reached units checked after them."""
    name, root, before = _pristine(experiment, tmp_path)
    for edit in edits:
        _apply(root, edit)
    library = Library(root)
    units = set(reached(name, library))
    assert set(reaches) <= units, f"not reached: {sorted(set(reaches) - units)}"
    hit = sorted(u for u in units for m in misses if u == m or u.startswith((m + ":", m + ".")))
    assert not hit, f"reached: {hit}"
    return before, code_hash(name, library)


# -- the synthetic package: the forms the real library has no example of ------------------------
SYNTHETIC = {
    "__init__.py": '"""A package with every form of reference the real library lacks."""\n',
    "errors.py": "class ConfigError(ValueError):\n    pass\n",
    "store.py": "def save(x):\n    return x\n",
    "sub/__init__.py": "from .impl import scaled  # a package re-export, by a relative import\n",
    "sub/impl.py": '''
        """Implementation."""
        FACTOR = 3.0
        OTHER = 7


        def scaled(x: float, k: float = 2.0) -> float:
            """x times the factor and k."""
            total = x * FACTOR * k
            return total


        def unreached(x):
            return x + 1
        ''',
    "rel/__init__.py": "",
    "rel/a.py": '''
        from .b import bee


        def ay(x):
            return bee(x) + 1
        ''',
    "rel/b.py": '''
        def bee(x):
            return x * 10
        ''',
    "deep.py": '''
        from ntkbook import helpers


        def deep(x):
            return helpers.only_deep(x)
        ''',
    "helpers.py": '''
        import functools

        LIMIT = 10
        SECOND = 2


        def with_default(x, n=SECOND):
            return x * n


        def only_deep(x):
            return x - 3


        def via_alias(x):
            return x + 4


        def paper_size():  # only a preset reaches it
            return 5


        def via_global(x):
            return x + 5


        def decorate(fn):
            @functools.wraps(fn)
            def wrapped(x):
                return fn(x)
            return wrapped


        def _method_helper():
            return 0


        class Base:
            offset = 1


        class Model(Base):
            """A model."""
            scale = 5

            def apply(self, x):
                return x * self.scale + self.offset

            def unused_method(self):
                return _method_helper()


        @decorate
        def decorated(x):
            return x - 1
        ''',
    "dyn_a.py": '''
        def __getattr__(name):
            return lambda x: x + 1
        ''',
    "dyn_b.py": '''
        def __getattr__(name):
            return lambda x: x + 2
        ''',
    "starred.py": "def star_fn(x):\n    return x + 3\n",
    "text.py": "def sentence(r):\n    return f'value {r}'\n",
    "experiments/__init__.py": "",
    "experiments/x.py": '''
        """An experiment using every form of reference."""
        import dataclasses
        from typing import ClassVar

        import ntkbook.sub.impl
        from ntkbook import dyn_b
        from ntkbook import helpers as v
        from ntkbook.dyn_a import alpha
        from ntkbook.starred import *  # noqa: F403
        from ntkbook.store import save
        from ntkbook.sub import scaled

        NAME = "x"
        x = (1, 2)  # a global named like the comprehension variable in run


        @dataclasses.dataclass(frozen=True)
        class Config:
            n: int = 3
            marker: ClassVar[int] = 0

            @classmethod
            def smoke(cls):
                return cls(n=2)

            @classmethod
            def paper(cls):
                return cls(n=v.paper_size())

            @classmethod
            def variant(cls):  # a class method that is not a preset
                return cls(n=4)

            def scaled(self):  # called by run
                return self.n * v.SECOND


        def _local(config):
            from ntkbook.deep import deep  # a function-level import
            from ..rel.a import ay  # a function-level relative import
            return deep(config.n) + ay(1)


        def _shadowed(config):
            def inner(v):  # a parameter named like the alias
                return v + 1
            squares = [v * v for v in range(config.n)]  # a comprehension variable named like it
            return inner(1), squares, (lambda: v.via_alias(1))()  # the alias, in a nested scope


        def _global_alias(config):
            v = config.n  # a local named like the alias
            def read():
                global v  # the alias itself, in a nested scope
                return v.via_global(1)
            return read() + v


        def run(config, points=None):
            """Run it."""
            model = v.Model()
            first = [x for x in x]  # the first iterable is the global x
            return save((scaled(1.0), model.apply(2), _local(config), v.decorated(1), v.LIMIT,
                         ntkbook.sub.impl.OTHER, v.with_default(1), alpha(1), dyn_b.beta(1),
                         star_fn(1), _shadowed(config), _global_alias(config), first,
                         config.scaled()))


        def scorecard(result):
            from ntkbook import text
            return text.sentence(result)


        if __name__ == "__main__":
            print(run(Config()))
        ''',
    "experiments/y.py": '''
        """An experiment whose run reads its own presets: they are in its hash."""
        import dataclasses

        NAME = "y"


        @dataclasses.dataclass(frozen=True)
        class Config:
            n: int = 3

            @classmethod
            def smoke(cls):
                return cls(n=2)

            @classmethod
            def paper(cls):
                return cls(n=8)


        def run(config, points=None):
            reference = getattr(Config, "paper")() if config.n < 0 else getattr(Config, "smoke")()
            return config.n + reference.n
        ''',
    "experiments/z.py": '''
        """An experiment whose run calls its smoke preset by attribute."""
        import dataclasses

        NAME = "z"


        @dataclasses.dataclass(frozen=True)
        class Config:
            n: int = 3

            @classmethod
            def smoke(cls):
                return cls(n=2)


        def run(config, points=None):
            return config.n + Config.smoke().n
        ''',
}



# -- must flag: behaviour edits -----------------------------------------------------------------
FLAGGED = [
    # gemma_probe imports ntkbook.gemma.operator only inside run (as gemma_operator)
    case("function-level import", "gemma_probe",
         ("gemma/operator.py", 'sub = {"embed": params["embed"], "layers": params["layers"]}',
          'sub = {"embed": params["embed"] * 2, "layers": params["layers"]}'),
         reaches=["ntkbook.gemma.operator:compute_residuals"]),
    # experiment -(in run)-> gemma.weights -(in build_cache)-> gemma.tokenizer: depth 2
    case("function-level import, depth 2", "gemma_probe",
         ("gemma/tokenizer.py", "    ts.byte_fallback = True\n", "    ts.byte_fallback = False\n"),
         reaches=["ntkbook.gemma.tokenizer:build_sentencepiece_model"]),
    # experiment -(in a function)-> ntk.entk -(module level)-> ntk.operator.check_finite
    case("through another module", "lanczos_ghosts",
         ("ntk/operator.py", "    bad = ~jnp.isfinite(x)\n", "    bad = jnp.isnan(x)\n"),
         reaches=["ntkbook.ntk.operator:check_finite"]),
    # demo_sweep's Config calls v.increasing (``from ntkbook import validate as v``)
    case("attribute chain mod.func", "demo_sweep",
         ("validate.py", "if any(b <= a for a, b in zip(values, values[1:])):",
          "if any(b < a for a, b in zip(values, values[1:])):"),
         reaches=["ntkbook.validate:increasing"]),
    # synthetic: ``import ntkbook.sub.impl`` then ``ntkbook.sub.impl.OTHER``
    case("attribute chain through two modules", "x", ("sub/impl.py", "OTHER = 7", "OTHER = 8"),
         reaches=["ntkbook.sub.impl:OTHER"]),
    # synthetic: ``from ntkbook.sub import scaled``, which sub/__init__.py re-exports from .impl
    case("package re-export", "x", ("sub/impl.py", "x * FACTOR * k", "x * FACTOR * k * k"),
         reaches=["ntkbook.sub.impl:scaled"]),
    # synthetic: rel/a.py has ``from .b import bee``
    case("relative import in a module", "x", ("rel/b.py", "return x * 10", "return x * 11"),
         reaches=["ntkbook.rel.b:bee"]),
    # synthetic: ``from ..rel.a import ay`` inside a function of the experiment
    case("function-level relative import", "x", ("rel/a.py", "return bee(x) + 1", "return bee(x) + 2"),
         reaches=["ntkbook.rel.a:ay"]),
    # synthetic: experiment -(in a function)-> deep -(module level)-> helpers.only_deep
    case("function-level then module-level import", "x",
         ("helpers.py", "return x - 3", "return x - 4"), reaches=["ntkbook.helpers:only_deep"]),
    # _widening_dot reads the module constant SLAB_BYTES
    case("module constant a function reads", "lanczos_ghosts",
         ("ntk/entk.py", "SLAB_BYTES = 64 << 20", "SLAB_BYTES = 32 << 20"),
         reaches=["ntkbook.ntk.entk:SLAB_BYTES", "ntkbook.ntk.entk:_widening_dot"]),
    # synthetic: ``v.LIMIT``, a constant read through an alias
    case("constant through an attribute", "x", ("helpers.py", "LIMIT = 10", "LIMIT = 11"),
         reaches=["ntkbook.helpers:LIMIT"]),
    # lanczos_topk(..., reorthogonalize=2): the default is part of the function
    case("default argument value", "lanczos_ghosts",
         ("ntk/eig.py", "    reorthogonalize: int = 2,\n", "    reorthogonalize: int = 1,\n"),
         reaches=["ntkbook.ntk.eig:lanczos_topk"]),
    # REDUCTIONS is read only as the default of _check_reduction(..., allowed=REDUCTIONS)
    case("global read only by a default argument", "lanczos_ghosts",
         ("ntk/entk.py", 'REDUCTIONS = ("full", "class", "class_mean", "flat")',
          'REDUCTIONS = ("full", "class", "class_mean")'),
         reaches=["ntkbook.ntk.entk:REDUCTIONS", "ntkbook.ntk.entk:_check_reduction"]),
    # synthetic: with_default(x, n=SECOND)
    case("global read only by a default argument (synthetic)", "x",
         ("helpers.py", "SECOND = 2", "SECOND = 3"), reaches=["ntkbook.helpers:SECOND"]),
    # GemmaConfig (a dataclass the run builds) is reached whole: a field default is in the hash
    case("class attribute: a dataclass field of a reached class", "gemma_probe",
         ("gemma/model.py", "    rms_eps: float = 1e-6\n", "    rms_eps: float = 1e-5\n"),
         reaches=["ntkbook.gemma.model:GemmaConfig"]),
    # synthetic: Model.scale, read as self.scale
    case("class attribute", "x", ("helpers.py", "scale = 5", "scale = 6"),
         reaches=["ntkbook.helpers:Model"]),
    # nothing calls KernelOperator.__repr__ by name
    case("method never called by name", "lanczos_ghosts",
         ("ntk/operator.py", '(dim={self.dim}, dtype={self.dtype})"', '(dim={self.dim})"'),
         reaches=["ntkbook.ntk.operator:KernelOperator"]),
    # synthetic: nothing calls Model.unused_method
    case("method never called by name (synthetic)", "x",
         ("helpers.py", "return _method_helper()", "return _method_helper() + 1"),
         reaches=["ntkbook.helpers:Model"]),
    # _method_helper is used only inside Model.unused_method: a class body's names are followed
    case("what a method never called uses", "x",
         ("helpers.py", "def _method_helper():\n    return 0", "def _method_helper():\n    return 1"),
         reaches=["ntkbook.helpers:_method_helper"]),
    # the @jax.jit of ntk.eig._orthogonalize removed
    case("decorator of a reached function", "lanczos_ghosts",
         ("ntk/eig.py", "@jax.jit\ndef _orthogonalize(", "def _orthogonalize("),
         reaches=["ntkbook.ntk.eig:_orthogonalize"]),
    # synthetic: ``@decorate`` is an ntkbook function, reached only as a decorator
    case("decorator's own body", "x",
         ("helpers.py", "        return fn(x)\n", "        return fn(x) * 2\n"),
         reaches=["ntkbook.helpers:decorate"]),
    # LayerOperator(KernelOperator): the base class's methods run for the subclass
    case("base class", "gemma_probe",
         ("ntk/operator.py", "        if v.shape != (self.dim,):\n", "        if v.shape[0] != self.dim:\n"),
         reaches=["ntkbook.gemma.operator:LayerOperator", "ntkbook.ntk.operator:KernelOperator"]),
    # synthetic: Base is named only as the base of Model
    case("base class attribute", "x", ("helpers.py", "offset = 1", "offset = 2"),
         reaches=["ntkbook.helpers:Base"]),
    # a dataclass field of the experiment's own Config
    case("Config default", "demo_sweep",
         ("experiments/demo_sweep.py", "    repeats: int = 200  #", "    repeats: int = 201  #"),
         reaches=["ntkbook.experiments.demo_sweep:Config"]),
    # synthetic: run calls Config.smoke() (z), or reads getattr(Config, "paper") (y): the presets
    # are in the hash
    case("smoke preset called by run (synthetic)", "z",
         ("experiments/z.py", "return cls(n=2)", "return cls(n=1)"), reaches=[Z + ":Config"]),
    case("smoke preset read by getattr in run (synthetic)", "y",
         ("experiments/y.py", "return cls(n=2)", "return cls(n=1)"), reaches=[Y + ":Config"]),
    case("paper preset read by getattr in run (synthetic)", "y",
         ("experiments/y.py", "return cls(n=8)", "return cls(n=9)"), reaches=[Y + ":Config"]),
    # synthetic: a class method of the Config that is not a preset, and a method run calls
    case("Config class method that is not a preset (synthetic)", "x",
         ("experiments/x.py", "return cls(n=4)", "return cls(n=5)"), reaches=[X + ":Config"]),
    case("Config method run calls (synthetic)", "x",
         ("experiments/x.py", "return self.n * v.SECOND", "return self.n * v.SECOND + 1"),
         reaches=[X + ":Config"]),
    # the validation in __post_init__ is not a preset
    case("Config validation", "demo_sweep",
         ("validate.py", "def increasing(name: str, field: str, values: tuple, why: str = \"\") -> None:\n",
          "def increasing(name: str, field: str, values: tuple, why: str = \"\") -> None:\n    values = tuple(values)[:-1] or values\n"),
         reaches=["ntkbook.validate:increasing"]),
    # annotations are dropped, but ClassVar decides that ``marker`` is not a dataclass field
    case("ClassVar made a field", "x",
         ("experiments/x.py", "marker: ClassVar[int] = 0", "marker: int = 0"),
         reaches=["ntkbook.experiments.x:Config"]),
    # importing ntkbook.stats now changes NumPy's error handling
    case("top-level statement of an imported module", "demo_sweep",
         ("stats.py", "import numpy as np\n", 'import numpy as np\n\nnp.seterr(all="raise")\n'),
         reaches=["ntkbook.stats:<import>"]),
    # ntk/__init__.py runs when lanczos_ghosts imports ntkbook.ntk.entk (inside a function)
    case("top-level statement of a package __init__", "lanczos_ghosts",
         ("ntk/__init__.py", None, '\nimport jax\n\njax.config.update("jax_enable_x64", True)\n'),
         reaches=["ntkbook.ntk:<import>"]),
    # synthetic: an ``if`` at the top of helpers (imported as v)
    case("top-level statement of an imported module (synthetic)", "x",
         ("helpers.py", "import functools\n", "import functools\n\nif LIMIT:\n    print('imported')\n"),
         reaches=["ntkbook.helpers:<import>"]),
    # rms_error is called positionally, but a keyword could name the parameter
    case("parameter renamed", "demo_sweep",
         ("experiments/demo_sweep.py", "def rms_error(n: int, repeats: int, seed: int)",
          "def rms_error(n: int, repeats: int, rng_seed: int)"),
         ("experiments/demo_sweep.py", "default_rng([seed, n])", "default_rng([rng_seed, n])"),
         reaches=["ntkbook.experiments.demo_sweep:rms_error"]),
    # the body reassigns both parameters: renamed like locals, the swap would look the same
    case("two parameters' roles swapped in the body", "demo_sweep",
         ("stats.py",
          "    x = np.asarray(x, dtype=np.float64)\n    y = np.asarray(y, dtype=np.float64)\n"
          "    y = y.mean(axis=1) if y.ndim == 2 else y\n    ok = y > 0\n    if ok.sum() < 2:\n"
          "        return math.nan\n    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])\n",
          "    y = np.asarray(y, dtype=np.float64)\n    x = np.asarray(x, dtype=np.float64)\n"
          "    x = x.mean(axis=1) if x.ndim == 2 else x\n    ok = x > 0\n    if ok.sum() < 2:\n"
          "        return math.nan\n    return float(np.polyfit(np.log(y[ok]), np.log(x[ok]), 1)[0])\n"),
         reaches=["ntkbook.stats:loglog_slope"]),
    # both globals are reached either way: only which one the function reads changes
    case("which global a function reads", "lanczos_ghosts",
         ("ntk/entk.py", "    if precision not in PRECISIONS:\n", "    if precision not in REDUCTIONS:\n"),
         reaches=["ntkbook.ntk.entk:_check_precision", "ntkbook.ntk.entk:PRECISIONS"]),
    # synthetic: ``from ntkbook.dyn_a import alpha``, a name made by dyn_a's module __getattr__
    case("name made by a module __getattr__ (from-import)", "x",
         ("dyn_a.py", "return lambda x: x + 1", "return lambda x: x - 1"),
         reaches=["ntkbook.dyn_a:__getattr__"]),
    # synthetic: ``dyn_b.beta``, an attribute made by dyn_b's module __getattr__
    case("name made by a module __getattr__ (attribute)", "x",
         ("dyn_b.py", "return lambda x: x + 2", "return lambda x: x - 2"),
         reaches=["ntkbook.dyn_b:__getattr__"]),
    # synthetic: in _shadowed, ``v`` is a parameter of inner and a comprehension variable, and
    # the module's alias of ntkbook.helpers inside the lambda
    case("alias used beside locals of its name", "x",
         ("helpers.py", "return x + 4", "return x + 40"), reaches=["ntkbook.helpers:via_alias"]),
    # synthetic: in _global_alias, ``v`` is a local, and the alias in read() (``global v``)
    case("alias read through global in a nested scope", "x",
         ("helpers.py", "return x + 5", "return x + 50"), reaches=["ntkbook.helpers:via_global"]),
    # synthetic: ``[x for x in x]``: the first iterable is the module's x
    case("comprehension's first iterable named like its variable", "x",
         ("experiments/x.py", "x = (1, 2)  #", "x = (1, 3)  #"), reaches=["ntkbook.experiments.x:x"]),
    # synthetic: ``from ntkbook.starred import *`` then star_fn(1)
    case("star import", "x", ("starred.py", "return x + 3", "return x + 30"),
         reaches=["ntkbook.starred:star_fn"]),
]

# -- must not flag: text-only edits --------------------------------------------------------------
UNFLAGGED = [
    # demo_sweep's Config calls validate.increasing, positive_int, ...
    case("module docstring", "demo_sweep",
         ("validate.py", '"""Rules for the fields of an experiment ``Config``,',
          '"""The rules for the fields of an experiment ``Config``,'),
         reaches=["ntkbook.validate:increasing"]),
    # the docstring of a reached function
    case("function docstring", "demo_sweep",
         ("validate.py", '"""``values`` is strictly increasing (sorted, no repeats)."""',
          '"""``values`` increases strictly: sorted, without repeats."""'),
         reaches=["ntkbook.validate:increasing"]),
    # the docstring of a reached class
    case("class docstring", "gemma_probe",
         ("gemma/model.py", '"""Hyper-parameters of a Gemma-3 decoder.',
          '"""The hyper-parameters of a Gemma-3 decoder.'),
         reaches=["ntkbook.gemma.model:GemmaConfig"]),
    # a comment line and an end-of-line comment in train.fit
    case("comments", "modular_mlp",
         ("train.py", "    full_loss = jax.jit(loss_fn)\n",
          "    # the loss on the full data, compiled once\n    full_loss = jax.jit(loss_fn)  # jitted\n"),
         reaches=["ntkbook.train:fit"]),
    # a call re-wrapped over lines, other quotes, blank lines, a trailing comma
    case("reformat", "demo_sweep",
         ("validate.py", '        raise _fail(name, field, "strictly increasing", values, why)\n',
          "\n        raise _fail(\n            name, field, 'strictly increasing',\n\n"
          "            values, why,\n        )\n\n"),
         reaches=["ntkbook.validate:increasing"]),
    # every use of fit's local ``limit`` (its loop variable ``epoch`` is also the parameter of
    # the nested log(): renaming it would change the hash, a dependency too many)
    case("local variable renamed (train.fit)", "modular_mlp",
         ("train.py", "    limit = None if max_loss_ratio", "    ceiling = None if max_loss_ratio"),
         ("train.py", "grad_ok, limit, loss0)", "grad_ok, ceiling, loss0)"),
         reaches=["ntkbook.train:fit"]),
    # the loop variable of gemma.operator.mode_scores
    case("loop variable renamed", "gemma_probe",
         ("gemma/operator.py",
          "    for i in range(V.shape[1]):\n        M = V[:, i].reshape(N, d)\n"
          "        Uu, s, _ = np.linalg.svd(M, full_matrices=False)\n        out[i] = Uu[:, 0] * s[0]\n",
          "    for col in range(V.shape[1]):\n        M = V[:, col].reshape(N, d)\n"
          "        Uu, s, _ = np.linalg.svd(M, full_matrices=False)\n        out[col] = Uu[:, 0] * s[0]\n"),
         reaches=["ntkbook.gemma.operator:mode_scores"]),
    # the variables of the generator in validate.increasing
    case("generator variables renamed", "demo_sweep",
         ("validate.py", "if any(b <= a for a, b in zip(values, values[1:])):",
          "if any(hi <= lo for lo, hi in zip(values, values[1:])):"),
         reaches=["ntkbook.validate:increasing"]),
    # synthetic: a local of _shadowed, beside the names shadowing the alias v
    case("local and comprehension variable renamed (synthetic)", "x",
         ("experiments/x.py", "squares = [v * v for v in range(config.n)]",
          "sq = [v * v for v in range(config.n)]"),
         ("experiments/x.py", "return inner(1), squares,", "return inner(1), sq,"),
         reaches=["ntkbook.experiments.x:_shadowed"]),
    # a parameter's and the return annotation of a reached function
    case("parameter annotations", "demo_sweep",
         ("validate.py", "def increasing(name: str, field: str, values: tuple, why: str = \"\") -> None:",
          "def increasing(name: str, field: str, values: tuple[int, ...], why: str = \"\") -> bool:"),
         reaches=["ntkbook.validate:increasing"]),
    # synthetic: a dataclass field's type (it stays a field)
    case("field annotation (not ClassVar)", "x",
         ("experiments/x.py", "    n: int = 3\n", "    n: float = 3\n"), reaches=[X + ":Config"]),
    # the presets choose a configuration; a stored entry keeps the one it was computed with
    case("smoke preset", "demo_sweep",
         ("experiments/demo_sweep.py", "return cls(sample_sizes=(16, 64, 256, 1024), repeats=100)",
          "return cls(sample_sizes=(16, 64), repeats=10)"),
         reaches=["ntkbook.experiments.demo_sweep:Config"]),
    case("paper preset", "influence_map",
         ("experiments/influence_map.py", "    def paper(cls) -> \"Config\":\n        return cls()\n",
          "    def paper(cls) -> \"Config\":\n        return cls(n_train=41)\n"),
         reaches=["ntkbook.experiments.influence_map:Config"]),
    # synthetic: helpers.paper_size is reached only by Config.paper()
    case("what only a preset reaches (synthetic)", "x",
         ("helpers.py", "def paper_size():  # only a preset reaches it\n    return 5",
          "def paper_size():  # only a preset reaches it\n    return 6"),
         reaches=[X + ":Config"], misses=["ntkbook.helpers:paper_size"]),
    # a function nothing calls, appended to validate.py
    case("new helper in a reached module", "demo_sweep",
         ("validate.py", None, "\n\ndef brand_new(values):\n    return sorted(values)\n"),
         reaches=["ntkbook.validate:increasing"], misses=["ntkbook.validate:brand_new"]),
    # validate.all_in: no rule of demo_sweep's Config uses it
    case("unreached helper moved to the end of its file", "demo_sweep", move("validate.py", "all_in"),
         misses=["ntkbook.validate:all_in"]),
    # ... or to stats.py, which demo_sweep reaches too
    case("unreached helper moved to another reached module", "demo_sweep",
         move("validate.py", "all_in", to="stats.py"),
         reaches=["ntkbook.stats:loglog_slope"], misses=["ntkbook.stats:all_in"]),
    # a dense reference of gemma.operator (tests and chapters only) beside what the run reaches
    case("unreached helper edited", "gemma_probe",
         ("gemma/operator.py", "def logit_kernel_dense(J: np.ndarray, unembed: np.ndarray) -> np.ndarray:\n",
          "def logit_kernel_dense(J: np.ndarray, unembed: np.ndarray) -> np.ndarray:\n    J = J * 2\n"),
         reaches=["ntkbook.gemma.operator:mode_scores"], misses=["ntkbook.gemma.operator:logit_kernel_dense"]),
    # definitions enter the hash sorted by name, not in file order
    case("two reached functions reordered", "demo_sweep", swap("validate.py", "int_at_least", "positive_int"),
         reaches=["ntkbook.validate:int_at_least", "ntkbook.validate:positive_int"]),
    # a verdict threshold of the experiment's scorecard (text, not a stored number), which lives in
    # ntkbook.claims beside the chapter's other rules
    case("scorecard()", "lanczos_ghosts",
         ("claims/lanczos.py", "        matches = not (err > 1e-8 or steps < 0)\n",
          "        matches = not (err > 1e-7 or steps < 0)\n"),
         reaches=["ntkbook.experiments.lanczos_ghosts:run"],
         misses=["ntkbook.claims.lanczos:lanczos_ghosts_scorecard"]),
    # numbers.fmt is used by entk_convergence's scorecard (ntkbook.claims.entk_convergence), not by its run
    case("a function only scorecard() uses", "entk_convergence",
         ("numbers.py", '        return "n/a"\n', '        return "--"\n'),
         reaches=["ntkbook.experiments.entk_convergence:run"], misses=["ntkbook.numbers:fmt"]),
    # the chapter's reading of the lanczos_ghosts result
    case("ntkbook.claims", "lanczos_ghosts",
         ("claims/lanczos.py", "def ghosts_rows(result: Result) -> list[dict]:\n",
          "def ghosts_rows(result: Result) -> list[dict]:\n    result = dict(result)\n"),
         misses=["ntkbook.claims"]),
    # the figure of the entk_convergence result
    case("ntkbook.plotting", "entk_convergence",
         ("plotting/entk.py", "def plot_entk_convergence(result: Result):\n",
          "def plot_entk_convergence(result: Result):\n    result = dict(result)\n"),
         misses=["ntkbook.plotting"]),
    # the book's figure helpers, and a top-level statement there
    case("ntkbook.book", "modular_mlp",
         ("book/report.py", "def min_font_pt(fig, *, draw: bool = True) -> float:\n",
          "def min_font_pt(fig, *, draw: bool = True) -> float:\n    fig = fig\n"),
         ("book/report.py", None, "\n\nprint('edited')\n"), misses=["ntkbook.book"]),
    # demo_sweep iterates over progress(...): progress reports are not code (NOT_CODE)
    case("ntkbook.progress", "demo_sweep",
         ("progress.py", "    if total is None:\n        total = len(iterable)",
          "    if total is None:\n        total = len(list(iterable))"),
         misses=["ntkbook.progress"]),
    # modular_mlp's ``if __name__ == "__main__":`` (and the main() it calls, which run does not)
    case("main block", "modular_mlp",
         ("experiments/modular_mlp.py", "    raise SystemExit(main())\n", "    raise SystemExit(main() or 1)\n"),
         reaches=["ntkbook.experiments.modular_mlp:run"], misses=["ntkbook.experiments.modular_mlp:main"]),
    # synthetic: the same, in the experiment with a scorecard and a text module
    case("main block (synthetic)", "x", ("experiments/x.py", "print(run(Config()))", "print(run(Config()), 1)")),
    case("scorecard's text module (synthetic)", "x", ("text.py", "f'value {r}'", "f'the value {r}'"),
         misses=["ntkbook.text:sentence"]),
    # synthetic: a scorecard() beside run in the experiment module itself (as an experiment not yet
    # moved to ntkbook.claims carries one)
    case("scorecard() beside run (synthetic)", "x",
         ("experiments/x.py", "    return text.sentence(result)\n", "    return text.sentence(result) + '!'\n"),
         reaches=[X + ":run"], misses=[X + ":scorecard"]),
    # synthetic: the store is not code (NOT_CODE), though run calls save()
    case("store, not code (synthetic)", "x", ("store.py", "return x", "return [x]"),
         misses=["ntkbook.store:save"]),
]


@pytest.mark.parametrize("experiment, edits, reaches, misses", FLAGGED)
def test_a_behaviour_edit_changes_the_hash(tmp_path, experiment, edits, reaches, misses):
    before, after = _edited(tmp_path, experiment, edits, reaches, misses)
    assert after != before


@pytest.mark.parametrize("experiment, edits, reaches, misses", UNFLAGGED)
def test_a_text_only_edit_leaves_the_hash(tmp_path, experiment, edits, reaches, misses):
    before, after = _edited(tmp_path, experiment, edits, reaches, misses)
    assert after == before


def test_the_synthetic_experiment_runs(tmp_path):
    """The synthetic package is real Python whose forms mean what the cases assume: e.g. the
    ``global v`` reads the helpers module, ``[x for x in x]`` the module's x."""
    root = _write(tmp_path, SYNTHETIC)
    code = "from ntkbook.experiments import x; print(x.run(x.Config()))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    expected = (1.0 * 3.0 * 2.0,  # scaled, re-exported
                2 * 5 + 1,  # Model.apply: the class attribute and the base's
                (3 - 3) + (2 * 10 + 1 - 10),  # deep(3) + ay(1) = only_deep(3) + bee(1) + 1
                1 - 1, 10, 7, 1 * 2,  # decorated(1), LIMIT, OTHER, with_default(1)
                1 + 1, 1 + 2, 1 + 3,  # made by dyn_a's and dyn_b's __getattr__, star_fn(1)
                (2, [0, 1, 4], 1 + 4),  # _shadowed: the lambda's v is the alias
                (1 + 5) + 3,  # _global_alias: read()'s v is the alias, the other v the local
                [1, 2],  # [x for x in x]: the global x
                3 * 2)  # Config().scaled()
    assert out.strip() == str(expected)
    # x's presets (its run reads neither), and y's run, which reads both
    code = ("from ntkbook.experiments import x, y, z; print(x.Config.smoke().n, x.Config.paper().n, "
            "y.run(y.Config()), y.run(y.Config(n=-1)), z.run(z.Config()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.split() == ["2", "5", str(3 + 2), str(-1 + 8), str(3 + 2)]


def test_text_only_packages_are_outside_every_hash(lib_copy):
    """An edit anywhere in claims, plotting, book and progress leaves every experiment's hash."""
    root = lib_copy
    for path in sorted((root / "ntkbook").rglob("*.py")):
        rel = path.relative_to(root / "ntkbook").parts
        if rel[0] in ("claims", "plotting", "book") or rel == ("progress.py",):
            path.write_text(path.read_text() + "\n\nprint('edited')\n\n\ndef _added():\n    return 1\n")
    library = Library(root)
    for name in experiments.EXPERIMENTS:
        module = f"ntkbook.experiments.{name}"
        assert code_hash(module, library) == code_hash(module, LIB), name
        assert not any(k.startswith(("ntkbook.claims", "ntkbook.plotting", "ntkbook.book", "ntkbook.progress"))
                       for k in reached(module, library)), name


# -- every experiment, determinism, the cache ----------------------------------------------------
def test_every_experiment_hashes():
    hashes = {name: code_hash(f"ntkbook.experiments.{name}", LIB) for name in experiments.EXPERIMENTS}
    assert all(len(h) == 16 and set(h) <= set("0123456789abcdef") for h in hashes.values())
    assert len(set(hashes.values())) == len(hashes)


def test_the_hash_is_deterministic(lib_copy):
    """Fresh parses of the library, and of a copy of it elsewhere, give the cached hashes."""
    cached = {name: code_hash(f"ntkbook.experiments.{name}", Library.of(LIB)) for name in experiments.EXPERIMENTS}
    assert Library.of(LIB) is Library.of(LIB)
    fresh, copy = Library(LIB), Library(lib_copy)
    for name, h in cached.items():
        module = f"ntkbook.experiments.{name}"
        assert code_hash(module) == code_hash(module, fresh) == code_hash(module, copy) == h, name


def test_the_cache_sees_an_edit_of_the_same_size(lib_copy):
    """:meth:`Library.of` keys its cache by the sources' contents, not their sizes or times."""
    root = lib_copy
    name = "ntkbook.experiments.modular_mlp"
    first = Library.of(root)
    before = code_hash(name, first)
    assert Library.of(root) is first  # nothing changed: the same parse
    # a local renamed to another of the same length: a new parse, the same hash
    _apply(root, ("train.py", "    limit = None if max_loss_ratio", "    bound = None if max_loss_ratio"))
    _apply(root, ("train.py", "grad_ok, limit, loss0)", "grad_ok, bound, loss0)"))
    second = Library.of(root)
    assert second is not first
    assert "bound = None" in ast.unparse(reached(name, second)["ntkbook.train:fit"][0])
    assert code_hash(name, second) == before
    # a behaviour edit of the same size: seen
    _apply(root, ("ntk/entk.py", "SLAB_BYTES = 64 << 20", "SLAB_BYTES = 32 << 20"))
    assert code_hash(name, Library.of(root)) != before


# -- the legacy scheme and the import graph -------------------------------------------------------
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


def test_reachable_modules_follow_function_level_imports():
    """gemma_probe imports the Gemma stack and Lanczos only inside functions; gemma.weights
    imports the tokenizer inside a function (depth 2)."""
    mods = set(reachable_modules("ntkbook.experiments.gemma_probe"))
    assert {"ntkbook.gemma.operator", "ntkbook.gemma.model", "ntkbook.gemma.weights",
            "ntkbook.gemma.probe", "ntkbook.ntk.eig", "ntkbook.gemma.tokenizer"} <= mods
    assert not mods & NOT_CODE


@pytest.mark.parametrize("experiment, edited", [
    ("gemma_probe", "gemma/operator.py"),         # imported inside a function
    ("gemma_probe", "gemma/tokenizer.py"),        # reached only through gemma.weights
    ("influence_malleability", "ntk/kernels.py"),  # inside a function of models.two_layer
])
def test_legacy_hash_sees_every_byte_of_every_module_reached(lib_copy, experiment, edited):
    name = f"ntkbook.experiments.{experiment}"
    root = lib_copy
    before = legacy_code_hash(name, root)
    assert before == legacy_code_hash(name, LIB)  # the copy is the library
    _apply(root, (edited, None, "\n# a comment\n"))  # a comment: the legacy hash sees it
    assert legacy_code_hash(name, root) != before


def test_legacy_hash_leaves_out_other_modules(lib_copy):
    name = "ntkbook.experiments.modular_mlp"
    root = lib_copy
    before = legacy_code_hash(name, root)
    _apply(root, ("gemma/operator.py", None, "\n# a comment\n"))  # not imported by modular_mlp
    _apply(root, ("progress.py", None, "\n# a comment\n"))  # not code
    assert legacy_code_hash(name, root) == before


def test_the_hashes_are_kept_on_disk_for_the_next_process(lib_copy, monkeypatch):
    """A second process (here: the in-memory cache emptied) takes the hashes of the same sources
    from disk, equal to a fresh parse; an edit of the sources gives another file, so a hash written
    for other sources is never read."""
    from ntkbook import codehash

    monkeypatch.setenv("NTKBOOK_SCRATCH", str(lib_copy / "scratch"))
    name = "ntkbook.experiments.modular_mlp"
    first = code_hash(name, Library.of(lib_copy))
    files = sorted((lib_copy / "scratch" / "codehash").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == {name: first}
    monkeypatch.setattr(codehash, "_LIBRARIES", {})
    again = Library.of(lib_copy)
    assert again._hashes == {name: first}  # read from disk, not parsed
    assert code_hash(name, Library(lib_copy)) == first  # and equal to a fresh parse
    # a poisoned value under the old digest is not read once the sources change
    files[0].write_text(json.dumps({name: "0" * 16}))
    _apply(lib_copy, ("ntk/entk.py", "SLAB_BYTES = 64 << 20", "SLAB_BYTES = 32 << 20"))
    edited = code_hash(name, Library.of(lib_copy))
    assert edited not in (first, "0" * 16)
    assert edited == code_hash(name, Library(lib_copy))
    assert len(list((lib_copy / "scratch" / "codehash").glob("*.json"))) == 2


def test_an_unwritable_hash_cache_is_no_error(lib_copy, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(blocker))  # codehash/ cannot be made below a file
    name = "ntkbook.experiments.modular_mlp"
    assert code_hash(name, Library.of(lib_copy)) == code_hash(name, Library(lib_copy))
