"""The paper-scale book builds from the stored results alone: no data set, no download.

A reader with a clone (results/ committed) but none of the raw data must be able to build the whole
book; raw data is needed only to recompute. The build runs with an empty data folder, an empty
download cache and downloads off, so any chapter that reads MNIST, CIFAR-10 or TinyStories at
build time, or any result the book reads that is not stored (which it would then compute), fails
this test."""

from __future__ import annotations

from pathlib import Path

import book_builds
import pytest

from ntkbook.book import build as bookbuild, htmlcheck

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = bookbuild.toc_chapters(REPO)

pytestmark = pytest.mark.book


def test_paper_book_builds_without_any_data():
    """The paper-scale build of this test run (tests/book_builds.py: empty data folder, empty
    download cache, downloads off; under xdist started in the background when the run began)."""
    built = book_builds.result("paper")
    log = built["log"]
    assert built["code"] == 0, log[-6000:]
    assert "DataNotFoundError" not in log
    assert htmlcheck.missing_pages(Path(built["out"]) / "html", CHAPTERS) == []
    assert not any(Path(built["no_data"]).iterdir()), "the build wrote into the data folder"
    assert built["status_after"] == built["status_before"], "the paper build changed the source tree (did it compute a result?)"
