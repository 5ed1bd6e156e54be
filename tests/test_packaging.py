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


def _lock() -> dict[str, tuple[str, list[str]]]:
    """``{normalised name: (version, [sha256 hashes])}`` of requirements/lock.txt."""
    text = (REPO / "requirements" / "lock.txt").read_text()
    lock = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", block)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            lock[name] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return lock


def test_lock_agrees_with_the_pins():
    """Every pin of the dependencies and of the extras `make setup` installs (book, test) is in the
    hashed lock at that version; every locked package has a hash (pip --require-hashes)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    lock = _lock()
    assert len(lock) > 50
    wrong = []
    for dep in project["dependencies"] + extras["book"] + extras["test"]:
        name, version = dep.split("==")
        name = re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()
        if lock.get(name, (None,))[0] != version:
            wrong.append(f"{name}: pyproject {version}, lock {lock.get(name, ('missing',))[0]}")
    assert not wrong, "requirements/lock.txt is out of date (run `make lock`): " + "; ".join(wrong)
    assert all(hashes for _, hashes in lock.values())
    assert "ntkbook" not in lock and "setuptools" in lock  # the package's build backend (--no-build-isolation)


def test_make_setup_installs_the_lock_with_hashes():
    make = (REPO / "Makefile").read_text()
    assert "pip install --quiet --require-hashes --no-deps -r $(LOCK)" in make
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in make
    assert "$(VENV)/.installed: pyproject.toml $(LOCK)" in make
