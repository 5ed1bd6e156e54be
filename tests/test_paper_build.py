"""The paper-scale book builds from the stored results alone: no data set, no download.

A reader with a clone (results/ committed) but none of the raw data must be able to build the whole
book; raw data is needed only to recompute. The build runs with an empty data folder, an empty
download cache and downloads off, so any chapter that reads MNIST, CIFAR-10 or TinyStories at
build time, or any result the book reads that is not stored (which it would then compute), fails
this test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ntkbook.book import build as bookbuild, htmlcheck

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = bookbuild.toc_chapters(REPO)

#: its own group, started first on a worker of its own (tests/conftest.py)
pytestmark = [pytest.mark.book, pytest.mark.xdist_group("paper_book")]


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=REPO,
                          capture_output=True, text=True).stdout


def test_paper_book_builds_without_any_data(tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    env = {**os.environ, "NTKBOOK_DATA": str(empty), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "NTKBOOK_OFFLINE": "1", "NTKBOOK_SCRATCH": str(tmp_path / "scratch")}
    env.pop("NTKBOOK_RESULTS", None)  # the repository's committed results
    out = tmp_path / "paper"
    before = _git_status()
    proc = subprocess.run([sys.executable, "-m", "ntkbook.book.build", "--scale", "paper", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert "DataNotFoundError" not in log
    assert htmlcheck.missing_pages(out / "html", CHAPTERS) == []
    assert not any(empty.iterdir()), "the build wrote into the data folder"
    assert _git_status() == before, "the paper build changed the source tree (did it compute a result?)"
