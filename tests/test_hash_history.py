"""tools/hash_history.py counts the stored results each code-hash design re-stales, commit by commit.

A synthetic repository: a docstring edit re-stales under the legacy design only, a commit without
``lib/`` changes re-stales nothing, a behaviour edit re-stales under both, and an experiment one
tree cannot parse is an ``error``, not a crash.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXPERIMENT = '''"""A toy experiment."""
from dataclasses import dataclass

from ntkbook.helper import scale


@dataclass
class Config:
    n: int = 3


def run(config):
    return scale(config.n)
'''

OTHER = '''from dataclasses import dataclass


@dataclass
class Config:
    n: int = 1


def run(config):
    return config.n
'''


def _tool(monkeypatch):
    spec = importlib.util.spec_from_file_location("hash_history", ROOT / "tools" / "hash_history.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _commit(repo: Path, files: dict[str, str], message: str) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
           "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], check=True, capture_output=True)
    subprocess.run([*git, "commit", "-q", "-m", message], check=True, capture_output=True)


def test_counts_on_a_synthetic_history(tmp_path, monkeypatch):
    tool = _tool(monkeypatch)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _commit(repo, {"README": "before the hash existed\n"}, "before")  # not examined
    _commit(repo, {
        "lib/ntkbook/__init__.py": "",
        "lib/ntkbook/codehash.py": "",
        "lib/ntkbook/helper.py": '"""Helpers."""\n\ndef scale(x):\n    """Twice x."""\n    return 2 * x\n',
        "lib/ntkbook/experiments/__init__.py": "",
        "lib/ntkbook/experiments/toy.py": EXPERIMENT,
        "lib/ntkbook/experiments/other.py": OTHER,
        "results/toy/a/result.json": "{}",
        "results/toy/b/result.json": "{}",
        "results/other/x/result.json": "{}",
    }, "the hash appears")
    _commit(repo, {"lib/ntkbook/helper.py":
                   '"""Helpers, reworded."""\n\ndef scale(x):\n    """x, doubled."""\n    return 2 * x\n'},
            "docstring")
    _commit(repo, {"results/toy/c/result.json": "{}"}, "a result, no code")
    _commit(repo, {"lib/ntkbook/helper.py": '"""Helpers, reworded."""\n\ndef scale(x):\n    return 3 * x\n',
                   "lib/ntkbook/experiments/broken.py": "def run(:\n"}, "behaviour")

    commits = tool.commits_since(repo)
    assert len(commits) == 4  # from the commit that added codehash.py
    rows = tool.history(repo, commits)
    assert [r.parent is None for r in rows] == [True, False, False, False]
    assert [r.lib_changed for r in rows[1:]] == [True, False, True]
    assert [r.computed for r in rows] == [True, True, False, True]
    assert [(r.total("legacy"), r.total("new")) for r in rows[1:]] == [(2, 0), (0, 0), (3, 3)]
    assert dict(rows[3].restaled["new"]) == {"toy": 3}  # "other" does not reach the helper
    assert rows[3].hashes["new"]["broken"] == rows[3].hashes["legacy"]["broken"] == tool.ERROR
    assert set(rows[3].errors) == {("legacy", "broken"), ("new", "broken")}

    s = tool.summary(rows)
    assert s["examined"] == 3 and s["lib_changed"] == 2
    assert s["restaling"] == {"legacy": 2, "new": 1}
    assert s["restales"] == {"legacy": 5, "new": 3}
    assert s["new_only"] == [] and len(s["errors"]) == 2
    text = tool.markdown(rows)
    assert "| docstring | 2 | 0 | — |" in text and "| behaviour | 3 | 3 | toy (3) |" in text
