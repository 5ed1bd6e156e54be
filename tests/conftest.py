"""Shared test set-up: the data directory (``NTKBOOK_DATA``, else ``../shared/data``), and the order
of the suite.

``make test`` runs the suite on every core (``pytest -n auto --dist loadfile``, pytest-xdist: a test
file runs on one worker, so a module-scoped fixture, often a smoke run of an experiment, is
computed once and not once per worker; ``--no-loadscope-reorder`` keeps the files in the order
below). The two book builds (tests/book_builds.py) are the longest single pieces of work, one
process each: as soon as a worker has collected the tests, the controller starts each build that a collected test reads as a
background process, and the tests that read a build are collected last, so the workers run the
unit tests while the builds run and a test that reads a build rarely waits. Without xdist the
first test that needs a build runs it. Tests marked ``slow`` (whole reproductions of stored
results that CI checks on a sample) run only with ``--slow``: ``make test-slow``, weekly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# One OpenBLAS thread per process: the suite runs two workers and two book builds (each with its
# kernel) on two cores, and OpenBLAS's threads spin while they wait, so with its default (a thread
# per core) each process burns twice the CPU for the same numpy work (measured on a busy 2-core
# machine: gram_conditioning's analysis of one data set, 7.8 s of CPU against 3.4 s). Set before
# numpy is imported; the builds inherit it. An explicit setting is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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


import book_builds  # noqa: E402 - tests/ is on the path (rootdir conftest)

#: the background builds this controller started (name -> process)
_STARTED: dict = {}


def _reads_build(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return next((name for name, readers in book_builds.READERS.items() if path in readers), None)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (the weekly workflow reproduce.yml runs them: "
                          "`make test-slow`); without it they are reported as skipped")


def pytest_collection_modifyitems(config, items):
    """The tests that read a book build go last (stable: the rest keep their order); the tests
    marked ``slow`` are skipped, with the reason, unless ``--slow`` is given."""
    items.sort(key=lambda item: _reads_build(item.nodeid) is not None)
    if not config.getoption("--slow"):
        skip = pytest.mark.skip(reason="slow: run weekly by .github/workflows/reproduce.yml (make test-slow)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """On the xdist controller, after the first worker's collection: start each book build that a
    collected test reads, in the background (tests/book_builds.py)."""
    if _STARTED:
        return
    wanted = sorted({name for name in map(_reads_build, ids) if name})
    wanted.sort(key=lambda name: name in book_builds.NEEDS)  # a build that waits for another starts after it
    for name in wanted:
        _STARTED[name] = book_builds.start(name, node.workerinput["testrunuid"])


def pytest_sessionfinish(session, exitstatus):
    """A run that ends early (``-x``, Ctrl-C) stops the builds it started."""
    import signal  # noqa: PLC0415

    for proc in _STARTED.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the build and the kernels it started (its own session)
        proc.wait()
