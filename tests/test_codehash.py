"""The code hash sees every module an experiment runs, imports inside functions included."""

import shutil
from pathlib import Path

import pytest

from ntkbook import experiments
from ntkbook.codehash import NOT_CODE, code_hash, imported_modules, module_file, reachable_modules

LIB = Path(__file__).resolve().parents[1] / "lib"


@pytest.fixture
def lib_copy(tmp_path):
    """A private copy of the library's sources, safe to edit."""
    shutil.copytree(LIB / "ntkbook", tmp_path / "ntkbook", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _edit(lib: Path, module: str) -> None:
    path = module_file(module, lib)
    path.write_text(path.read_text() + "\n# edited\n")


def test_function_level_imports_are_seen():
    """gemma_features imports the Gemma stack and Lanczos only inside functions."""
    mods = set(reachable_modules("ntkbook.experiments.gemma_features"))
    assert {"ntkbook.gemma.operator", "ntkbook.gemma.model", "ntkbook.gemma.weights",
            "ntkbook.gemma.probe", "ntkbook.ntk.eig"} <= mods
    # and at depth: gemma.weights imports the tokenizer inside a function
    assert "ntkbook.gemma.tokenizer" in mods
    assert not mods & NOT_CODE


@pytest.mark.parametrize("name", ["influence_malleability", "influence_width", "influence_advtrain"])
def test_influence_experiments_hash_their_whole_stack(name):
    mods = set(reachable_modules(f"ntkbook.experiments.{name}"))
    # the protocol (tasks, losses, training, interventions), the kernel influence, the attacks, the
    # network (and the analytic kernel it imports inside a function), the training loop, the data
    assert {"ntkbook.influence.tasks", "ntkbook.influence.losses", "ntkbook.influence.training",
            "ntkbook.influence.interventions", "ntkbook.influence.scores", "ntkbook.influence.attacks",
            "ntkbook.models.attention", "ntkbook.models.two_layer", "ntkbook.ntk.kernels",
            "ntkbook.train", "ntkbook.data"} <= mods
    if name == "influence_malleability":  # the landscape, and Lanczos through it
        assert {"ntkbook.influence.landscape", "ntkbook.ntk.eig"} <= mods


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


@pytest.mark.parametrize("experiment, edited", [
    ("gemma_features", "ntkbook.gemma.operator"),      # imported inside a function
    ("gemma_features", "ntkbook.gemma.tokenizer"),     # reached only through gemma.weights
    ("influence_width", "ntkbook.influence.scores"),
    ("influence_malleability", "ntkbook.ntk.kernels"),  # inside a function of models.two_layer
    ("modular_mlp", "ntkbook.train"),
])
def test_an_edit_anywhere_below_changes_the_hash(lib_copy, experiment, edited):
    name = f"ntkbook.experiments.{experiment}"
    before = code_hash(name, lib_copy)
    assert before == code_hash(name, LIB)  # the copy is the library
    _edit(lib_copy, edited)
    assert code_hash(name, lib_copy) != before


def test_an_edit_elsewhere_leaves_the_hash(lib_copy):
    before = code_hash("ntkbook.experiments.modular_mlp", lib_copy)
    _edit(lib_copy, "ntkbook.gemma.operator")   # not used by the modular MLP
    _edit(lib_copy, "ntkbook.progress")         # progress reports do not change results
    assert code_hash("ntkbook.experiments.modular_mlp", lib_copy) == before


def test_every_experiment_hashes():
    hashes = {name: code_hash(f"ntkbook.experiments.{name}") for name in experiments.EXPERIMENTS}
    assert all(len(h) == 16 for h in hashes.values())
    assert len(set(hashes.values())) == len(hashes)
