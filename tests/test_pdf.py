"""The whole-book PDF (``make pdf``), rendered with XeLaTeX from the executed notebooks of the smoke
build (tests/book_builds.py starts it in the background once the smoke build is done): it has the
pages of a book, embeds every figure the HTML shows, numbers the equations as the HTML does, leaves
no reference unresolved, and every page's download menu links it only when it was built."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import book_builds
import pytest

from ntkbook.book import build as bookbuild

REPO = Path(__file__).resolve().parents[1]
HTML = book_builds.SMOKE_OUT / "html"

pytestmark = pytest.mark.book


@pytest.fixture(scope="module")
def pdf() -> Path:
    """The smoke book's PDF (skipped, with the reason, where TeX Live or poppler is missing)."""
    result = book_builds.result("pdf")
    if result.get("skip"):
        pytest.skip(result["skip"])
    assert result["code"] == 0, result["log"][-5000:]
    return Path(result["pdf"])


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def text(pdf) -> str:
    return _run("pdftotext", "-layout", str(pdf), "-")


def _html_pages() -> list[Path]:
    return [HTML / Path(c).with_suffix(".html") for c in bookbuild.toc_chapters(REPO)]


def test_pdf_has_the_pages_of_the_book(pdf):
    pages = int(re.search(r"^Pages:\s+(\d+)", _run("pdfinfo", str(pdf)), re.M).group(1))
    # title, contents, eleven chapters with their figures: well over a page per chapter
    assert 40 <= pages <= 1000, pages


def test_every_figure_of_the_html_is_embedded(pdf):
    """As many images drawn in the PDF (``pdfimages -list``, their transparency masks not counted)
    as figures shown by the HTML pages (every ``<img>`` of the chapters' pages, which have no
    other images)."""
    rows = _run("pdfimages", "-list", str(pdf)).splitlines()[2:]
    drawn = [r for r in rows if r.split()[2] == "image"]
    figures = sum(len(re.findall(r"<img\b", p.read_text())) for p in _html_pages())
    assert figures > 0
    assert len(drawn) == figures, (len(drawn), figures)


def test_no_reference_is_left_unresolved(text):
    assert "??" not in text, [ln for ln in text.splitlines() if "??" in ln][:10]


def test_equations_are_numbered_as_in_the_html(text):
    """The equation numbers the PDF prints (``(3.2)`` at the end of a line) are those of the HTML
    pages: same chapter numbers (the introduction and the back matter unnumbered), same count."""
    html_numbers = set()
    for page in _html_pages():
        html_numbers |= set(re.findall(r'<span class="eqno">\((\d+\.\d+)\)', page.read_text()))
    # an equation number is ``(chapter.n)``, both counted from 1: a number in a table that ends a
    # line, such as a smoke run's ``(0.711)``, is not one
    pdf_numbers = set(re.findall(r"\(([1-9]\d*\.[1-9]\d*)\)[ \t]*$", text, re.M))
    assert len(html_numbers) > 10, html_numbers
    assert pdf_numbers == html_numbers, (sorted(pdf_numbers - html_numbers), sorted(html_numbers - pdf_numbers))


def _menu(srcdir: Path, pagename: str = "book/intro") -> list[dict]:
    """The download menu the extension gives page ``pagename`` of a book staged in ``srcdir``."""
    group = {"label": "download-buttons", "buttons": [
        {"type": "link", "text": ".ipynb", "label": "download-source-button"},
        {"type": "javascript", "text": ".pdf", "label": "download-pdf-button"}]}
    context = {"header_buttons": [group], "pathto": lambda name, resource: f"../{name}"}
    bookbuild._add_myst_download(SimpleNamespace(srcdir=str(srcdir)), pagename, "page.html", context, None)
    return group["buttons"]


def test_the_download_menu_links_the_pdf_only_when_it_was_built(tmp_path):
    (tmp_path / bookbuild.MYST_DIR / "book").mkdir(parents=True)
    (tmp_path / bookbuild.MYST_DIR / "book" / "intro.md").write_text("# Intro\n")
    labels = [b["label"] for b in _menu(tmp_path)]
    assert "download-book-pdf-button" not in labels and "download-myst-button" in labels
    (tmp_path / bookbuild.MYST_DIR / bookbuild.PDF_NAME).write_bytes(b"%PDF-1.5\n")
    book_pdf = [b for b in _menu(tmp_path) if b["label"] == "download-book-pdf-button"]
    assert len(book_pdf) == 1 and book_pdf[0]["url"] == f"../{bookbuild.PDF_NAME}"
