"""Notebooks to re-execute the chapters online (Google Colab), one per chapter.

The publish workflow (``.github/workflows/publish.yml``) runs
``python -m ntkbook.book.notebooks --out DIR --url URL --commit SHA`` on every push to main and
pushes ``DIR`` to the branch ``ntkbook.book.build.NOTEBOOKS_BRANCH``; each chapter's "Open in Colab" button
(``ntkbook.book.build.site_config``) opens ``book/<chapter>.ipynb`` there.

Each notebook is the chapter's jupytext source as an unexecuted notebook, preceded by one setup
cell that clones the repository at the published commit and installs it (``pip install -e``: the
chapters load the stored paper-scale results from the clone's ``results/``, which a plain
``pip install git+URL@SHA`` would not bring), moves into the clone's ``book/`` folder (where the
build executes chapters) and fetches the chapter's data (``python -m ntkbook data fetch
--chapter NAME``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ntkbook.book.build import toc_chapters
from ntkbook.errors import InputError
from ntkbook.paths import repo_root

__all__ = ["SETUP_TAG", "setup_cell_source", "colab_notebook", "write_notebooks"]

#: tag of the setup cell (the build never sees these notebooks; the tag says what the cell is)
SETUP_TAG = "colab-setup"
#: where the setup cell clones the repository in the Colab machine
CLONE_DIR = "/content/ntkbook"


def setup_cell_source(url: str, commit: str, chapter: str) -> str:
    """The first cell of the Colab notebook of ``chapter`` (``modular_mlp``): clone ``url`` at
    ``commit``, install it with its pinned dependencies, fetch the chapter's data."""
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise InputError(f"commit {commit!r} is not a full 40-hex git commit: pass `git rev-parse HEAD`")
    if not re.fullmatch(r"https://\S+", url):
        raise InputError(f"repository URL {url!r} is not an https URL")
    return "\n".join([
        "# Set-up for Colab: the book's code and stored results at the commit this page was",
        "# published from, with its pinned dependencies, and the data this chapter reads (a few minutes).",
        f"!git clone --quiet {url} {CLONE_DIR} && git -C {CLONE_DIR} checkout --quiet {commit}",
        f"%pip install --quiet -e {CLONE_DIR}",
        f"%cd {CLONE_DIR}/book",
        f"!python -m ntkbook data fetch --chapter {chapter}",
    ])


def colab_notebook(chapter: Path, url: str, commit: str):
    """The Colab notebook (nbformat v4, unexecuted) of the chapter file ``chapter`` (``book/x.md``)."""
    import jupytext
    import nbformat

    nb = jupytext.read(chapter)
    cell = nbformat.v4.new_code_cell(setup_cell_source(url, commit, chapter.stem),
                                     metadata={"tags": [SETUP_TAG]})
    nb.cells.insert(0, cell)
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.validate(nb)
    return nb


def write_notebooks(out: Path, url: str, commit: str, repo: Path | None = None) -> list[Path]:
    """Write the Colab notebook of every chapter of ``_toc.yml`` that has code to
    ``out/book/<chapter>.ipynb``; returns the paths written."""
    import jupytext
    import nbformat

    repo = repo or repo_root()
    written = []
    for chapter in toc_chapters(repo):
        src = repo / chapter
        if not any(c.cell_type == "code" for c in jupytext.read(src).cells):
            continue  # prose only: nothing to run
        dest = out / Path(chapter).with_suffix(".ipynb")
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(colab_notebook(src, url, commit), dest)
        written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ntkbook.book.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write book/<chapter>.ipynb into")
    parser.add_argument("--url", required=True, help="the repository's https URL")
    parser.add_argument("--commit", required=True, help="the full commit the notebooks install")
    args = parser.parse_args(argv)
    for path in write_notebooks(args.out, args.url, args.commit):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
