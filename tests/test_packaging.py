"""One place pins the dependencies; the README's two commands are what CI runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_dependencies_pinned_exactly():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for ds in project["optional-dependencies"].values() for d in ds]
    for dep in deps:
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][A-Za-z0-9.]*", dep), f"not pinned exactly: {dep}"
    names = {d.split("==")[0].split("[")[0].lower() for d in deps}
    for required in ("jax", "jaxlib", "flax", "optax", "numpy", "scipy", "matplotlib", "jupytext",
                     "papermill", "ipykernel", "jupyter-book", "scikit-learn", "tqdm", "pytest"):
        assert required in names
    assert project["requires-python"].startswith(">=3.12")


def test_environment_yml_agrees():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.12" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert pip == ["-e .[book,test]"], "environment.yml must install the project, not pin its own versions"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert [ln for ln in ci.splitlines() if ln and not ln.startswith(("#", "set ", "cd ", "export "))] == ["make test"]
