"""Shared test set-up: the data directory (``NTKBOOK_DATA``, else ``../shared/data``), and the order
of the suite.

``make test`` runs the suite on every core (``pytest -n auto --dist loadgroup``, pytest-xdist). The
two book builds are the longest single pieces of work (each one process, mostly one core): their
tests are grouped (``xdist_group`` marks in tests/test_book.py and tests/test_paper_build.py), so
each build runs once on one worker, and collected first, so that each starts at once on its own
worker while the unit tests share what is left (with ``--no-loadscope-reorder`` the scheduler keeps
this order). Without xdist the order changes nothing but when the builds run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

if not os.environ.get("NTKBOOK_DATA") and (REPO.parent / "shared" / "data").is_dir():
    os.environ["NTKBOOK_DATA"] = str(REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = os.environ.get("NTKBOOK_DATA")
    if not d or not Path(d).is_dir():
        pytest.fail(
            "the data sets are needed: set NTKBOOK_DATA to the folder holding mnist/, "
            "fashion-mnist/, cifar10/ and tinystories/ (CI uses ../shared/data)"
        )
    return Path(d)


#: the groups that hold a book build, started first (see the module docstring)
FIRST_GROUPS = ("smoke_book", "paper_book")


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None


def pytest_collection_modifyitems(config, items):
    rank = {g: i for i, g in enumerate(FIRST_GROUPS)}
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))  # stable: the rest keep their order
