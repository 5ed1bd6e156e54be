"""The built smoke book at a phone's width in headless Chromium: the page check of tests/test_book.py
(:func:`test_book.check_page`), in a file of its own so that the two widths run on two workers at the
end of the test run, when the smoke build is done (pytest-xdist's ``--dist loadfile`` gives a file to
one worker)."""

from __future__ import annotations

import pytest
from test_book import CHAPTERS, check_page, smoke_build  # noqa: F401 - smoke_build: the fixture

from ntkbook.book import htmlcheck

pytestmark = pytest.mark.book


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_page_in_browser_at_phone_width(smoke_build, chapter):  # noqa: F811 - the fixture imported above
    check_page(smoke_build, chapter, htmlcheck.WIDTHS[1])
