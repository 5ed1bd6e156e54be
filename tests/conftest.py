"""Shared test set-up: the data directory (``NTKBOOK_DATA``, else ``../shared/data``)."""

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
