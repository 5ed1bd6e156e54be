"""Where things live: the repository root and the folders of results, caches and scratch files.

Every path the library derives from its own location is derived here, once. Each folder can be
moved with an environment variable (useful for tests and for a copied tree on another machine).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["repo_root", "results_dir", "cache_dir", "scratch_dir"]


def repo_root() -> Path:
    """The repository root: the folder that holds ``lib/ntkbook`` (this file is
    ``<root>/lib/ntkbook/paths.py``)."""
    return Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    """Where paper-scale results live: ``$NTKBOOK_RESULTS`` or ``<repo>/results``."""
    return Path(os.environ.get("NTKBOOK_RESULTS", repo_root() / "results"))


def cache_dir() -> Path:
    """Where smoke-scale results go: ``$NTKBOOK_CACHE`` or ``<repo>/.cache/results``."""
    return Path(os.environ.get("NTKBOOK_CACHE", repo_root() / ".cache" / "results"))


def scratch_dir() -> Path:
    """Checkpoints and locks: ``$NTKBOOK_SCRATCH`` or ``<repo>/.cache/store`` (git-ignored)."""
    return Path(os.environ.get("NTKBOOK_SCRATCH", repo_root() / ".cache" / "store"))
