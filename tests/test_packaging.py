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


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock_entries() -> list[tuple[str, str, str, list[str]]]:
    """``(normalised name, version, environment marker or "", [sha256 hashes])`` for every pin of
    requirements/lock.txt, in file order."""
    text = (REPO / "requirements" / "lock.txt").read_text()
    entries = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)[ \t]*(?:;([^\\\n]*))?", block)
        if m:
            entries.append((_norm(m.group(1)), m.group(2), (m.group(3) or "").strip(),
                            re.findall(r"--hash=sha256:([0-9a-f]{64})", block)))
    return entries


def _lock() -> dict[str, tuple[str, list[str]]]:
    """``{normalised name: (version, [sha256 hashes])}`` of requirements/lock.txt."""
    entries = _lock_entries()
    lock = {name: (version, hashes) for name, version, _, hashes in entries}
    assert len(lock) == len(entries), "a package is pinned twice in the lock (two versions under different markers)"
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
    """`make setup` installs its installer, uv, from a hashed pin (the `lock` extra's version), then
    the lock with hashes required, then this package without its dependencies."""
    make = (REPO / "Makefile").read_text()
    assert "$(PY) -m pip install --quiet --require-hashes --no-deps -r $(UV_LOCK)" in make
    assert ("$(VENV)/bin/uv pip install --python $(PY) --quiet --compile-bytecode --require-hashes --no-deps "
            "-r $(LOCK)") in make
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in make
    assert "$(VENV)/.installed: pyproject.toml $(LOCK) $(UV_LOCK)" in make
    assert "UV_LOCK := requirements/uv.txt" in make
    text = (REPO / "requirements" / "uv.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.M)
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lock"]
    assert [f"{n}=={v}" for n, v in pins] == extra == [e for e in extra if e.startswith("uv==")]
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", text)) >= 4  # a wheel per platform at least


# The four platforms the universal lock is for (README, Quick start), as the environment markers of
# PEP 508 see them under CPython 3.12.
PLATFORMS = {
    "linux-x86_64": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"},
    "linux-aarch64": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64", "os_name": "posix"},
    "macos-arm64": {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64", "os_name": "posix"},
    "windows-x64": {"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64", "os_name": "nt"},
}


def _environment(platform: str) -> dict[str, str]:
    return {"implementation_name": "cpython", "platform_python_implementation": "CPython",
            "implementation_version": "3.12.8", "python_version": "3.12", "python_full_version": "3.12.8",
            "platform_release": "", "platform_version": "", "extra": "", **PLATFORMS[platform]}


def _platform_pins(platform: str) -> dict[str, str]:
    """``{name: version}`` that `pip install --no-deps -r requirements/lock.txt` installs on ``platform``."""
    from packaging.markers import Marker

    env = _environment(platform)
    return {name: version for name, version, marker, _ in _lock_entries()
            if not marker or Marker(marker).evaluate(env)}


def test_lock_is_universal():
    """The one lock carries environment markers (uv --universal) and a hash for every pin;
    `make lock` writes it that way."""
    entries = _lock_entries()
    assert all(hashes for *_, hashes in entries)
    markers = {name: marker for name, _, marker, _ in entries}
    assert markers.get("appnope") == "sys_platform == 'darwin'"
    assert markers.get("colorama") == "sys_platform == 'win32'"
    assert "--universal" in (REPO / "Makefile").read_text()
    assert "--python-platform" not in (REPO / "Makefile").read_text()


def test_lock_is_complete_on_each_platform():
    """Offline resolution of the lock for each platform: the pins whose markers hold there must
    contain every top-level pin of pyproject.toml and, transitively, every requirement of each
    pinned package (its Requires-Dist, read from the metadata installed here, evaluated with that
    platform's markers and the extras asked for), at a version the requirement accepts. This is
    what catches a lock made for one platform (the old Linux-only lock lacked appnope on macOS,
    colorama and nest-asyncio on Windows). Packages not installed on this machine (those of the
    other platforms) are taken as leaves: their metadata is not here."""
    from importlib import metadata

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    top = [Requirement(d) for d in project["dependencies"] + project["optional-dependencies"]["book"]
           + project["optional-dependencies"]["test"]]
    requires: dict[str, list[Requirement]] = {}
    for name, _ in _lock().items():
        try:
            requires[name] = [Requirement(r) for r in metadata.requires(name) or []]
        except metadata.PackageNotFoundError:
            requires[name] = []

    for platform in PLATFORMS:
        pins = _platform_pins(platform)
        env = _environment(platform)
        problems = []
        seen: set[tuple[str, str]] = set()
        todo = [(r, "pyproject.toml") for r in top]
        while todo:
            req, by = todo.pop()
            name = _norm(req.name)
            if name not in pins:
                problems.append(f"{name} (required by {by}) is not in the lock for {platform}")
                continue
            if not req.specifier.contains(pins[name], prereleases=True):
                problems.append(f"{name}=={pins[name]} does not satisfy {by}'s {req}")
            for extra in [""] + sorted(req.extras):
                if (name, extra) in seen:
                    continue
                seen.add((name, extra))
                for sub in requires[name]:
                    if sub.marker is None or sub.marker.evaluate({**env, "extra": extra}):
                        todo.append((sub, name))
        reached = {name for name, _ in seen}
        assert not problems, f"the lock is incomplete for {platform}: " + "; ".join(sorted(set(problems)))
        # and nothing installed there that no requirement asks for (the build backend aside)
        assert set(pins) - reached <= {"setuptools"}, (platform, sorted(set(pins) - reached))

    on = {p: _platform_pins(p) for p in PLATFORMS}
    assert "appnope" in on["macos-arm64"] and "appnope" not in on["linux-x86_64"]
    assert {"colorama", "nest-asyncio"} <= set(on["windows-x64"])
    assert "uvloop" not in on["windows-x64"] and "uvloop" in on["linux-aarch64"]
    assert "colorama" not in on["linux-x86_64"] and "colorama" not in on["macos-arm64"]
