"""Publishing the book: the one repository URL and where the build writes it, the student edition,
the Colab notebooks, the internal link check, the workflows (linted), licence and citation."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml

from ntkbook.book import build as bookbuild, editions, htmlcheck, notebooks
from ntkbook.errors import InputError, NtkbookError

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
SHA = "0123456789abcdef0123456789abcdef01234567"


def _config() -> dict:
    return yaml.safe_load((REPO / "_config.yml").read_text())


def _final_sphinx_config(cfg: dict) -> dict:
    """What jupyter-book makes of ``cfg`` (its own translation to Sphinx's configuration)."""
    from jupyter_book.config import get_final_config

    final, _ = get_final_config(user_yaml=cfg, cli_config={"latex_individualpages": False}, sourcedir=REPO)
    return final


def _theme_buttons(final: dict, page: str) -> list[dict]:
    """The header buttons sphinx-book-theme adds to ``page`` (a chapter, shown as a notebook) with
    the Sphinx configuration ``final``: its own code, run on a stand-in for the Sphinx app."""
    from sphinx_book_theme.header_buttons import update_context_with_repository_info
    from sphinx_book_theme.header_buttons.launch import add_launch_buttons

    class Config(SimpleNamespace):
        def __getitem__(self, key):
            return getattr(self, key)

    config = Config(html_theme_options=final["html_theme_options"], html_context={})
    app = SimpleNamespace(builder=None, config=config, env=SimpleNamespace(
        doc2path=lambda name: f"/src/{name}.ipynb", metadata={page: {"kernelspec": {"name": "python3"}}}))
    update_context_with_repository_info(app)
    context = {"pagename": page, "sourcename": f"{page}.ipynb.txt", "header_buttons": [], **config.html_context}
    add_launch_buttons(app, page, "page.html", context, None)
    return [b for group in context["header_buttons"] for b in group["buttons"]]


# ------------------------------------------------------------------------------------------------
# the repository URL: one setting, written everywhere by the build
# ------------------------------------------------------------------------------------------------
def test_repository_url_is_set_in_one_place():
    text = "\n".join((REPO / f).read_text() for f in ("_config.yml", "pyproject.toml", "Makefile"))
    assert "ntkbook/ntkbook" not in text, "the placeholder repository URL is back"
    cfg = _config()
    theme = cfg["sphinx"]["config"]["html_theme_options"]
    assert not {"repository_url", "repository_branch", "launch_buttons"} & set(theme), \
        "the repository URL and the launch buttons are written by the build from repository.url"
    assert "baseurl" not in cfg["html"] and "use_repository_button" not in cfg["html"]


def test_site_config_with_a_url(monkeypatch):
    monkeypatch.delenv("NTKBOOK_REPOSITORY_URL", raising=False)
    cfg = _config()
    cfg["repository"]["url"] = "git@github.com:Some-Owner/ntk-course.git"
    url = bookbuild.repository_url(cfg)
    assert url == "https://github.com/Some-Owner/ntk-course"
    site = bookbuild.site_config(cfg, url)
    final = _final_sphinx_config(site)
    theme = final["html_theme_options"]
    assert theme["repository_url"] == url and theme["use_repository_button"] is True
    assert final["html_baseurl"] == "https://some-owner.github.io/ntk-course/"
    buttons = _theme_buttons(final, "book/modular_mlp")
    assert [b["url"] for b in buttons if b["text"] == "Colab"] == [
        "https://colab.research.google.com/github/Some-Owner/ntk-course/blob/notebooks/book/modular_mlp.ipynb"]
    # the notebooks the workflow writes are where the button points
    assert bookbuild.NOTEBOOKS_BRANCH == "notebooks"
    # an explicit base URL (a custom domain) is kept
    cfg["html"]["baseurl"] = "https://ntk.example.org/"
    assert _final_sphinx_config(bookbuild.site_config(cfg, url))["html_baseurl"] == "https://ntk.example.org/"


def test_site_config_without_a_url_hides_the_buttons(monkeypatch):
    monkeypatch.delenv("NTKBOOK_REPOSITORY_URL", raising=False)
    cfg = _config()
    cfg["repository"]["url"] = ""
    assert bookbuild.repository_url(cfg) is None
    site = bookbuild.site_config(cfg, None)
    final = _final_sphinx_config(site)  # jupyter-book refuses a repository button without a URL
    theme = final["html_theme_options"]
    assert theme["use_repository_button"] is False
    assert "repository_url" not in theme and "launch_buttons" not in theme
    assert not final.get("html_baseurl")
    assert "github.com" not in yaml.safe_dump(site)


def test_repository_url_from_the_environment_and_bad_urls(monkeypatch):
    cfg = _config()
    monkeypatch.setenv("NTKBOOK_REPOSITORY_URL", "https://github.com/o/r/")
    assert bookbuild.repository_url(cfg) == "https://github.com/o/r"
    monkeypatch.setenv("NTKBOOK_REPOSITORY_URL", "/srv/git/book")
    with pytest.raises(NtkbookError, match="not of the form https://github.com/OWNER/NAME"):
        bookbuild.repository_url(cfg)
    # a repository elsewhere: the repository button, no Colab (it opens GitHub notebooks only)
    site = bookbuild.site_config(cfg, "https://gitlab.com/o/r")
    theme = site["sphinx"]["config"]["html_theme_options"]
    assert theme["repository_url"] == "https://gitlab.com/o/r" and "launch_buttons" not in theme
    assert "baseurl" not in site["html"]


def _fake_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in (*bookbuild.STAGED, "_static", "book"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, repo / name)
    (repo / bookbuild.MATHJAX_DIR).mkdir()
    return repo


def test_stage_writes_the_url_into_the_staged_config(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_REPOSITORY_URL", "https://github.com/o/r")
    repo = _fake_repo(tmp_path)
    bookbuild.stage(tmp_path / "src", repo)
    staged = yaml.safe_load((tmp_path / "src" / "_config.yml").read_text())
    assert staged["sphinx"]["config"]["html_theme_options"]["repository_url"] == "https://github.com/o/r"
    assert staged["html"]["baseurl"] == "https://o.github.io/r/"
    assert "{solution" in (tmp_path / "src" / bookbuild.MYST_DIR / "book" / "intro.md").read_text()
    bookbuild.stage(tmp_path / "student", repo, edition="student")
    assert "{solution" not in (tmp_path / "student" / bookbuild.MYST_DIR / "book" / "intro.md").read_text()
    assert yaml.safe_load((tmp_path / "student" / "_config.yml").read_text())["title"].endswith("(student edition)")


# ------------------------------------------------------------------------------------------------
# the student edition: no solutions, exercises kept
# ------------------------------------------------------------------------------------------------
CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
:tags: [parameters]
scale = "paper"
x = 2
```

Text before the exercises.

```{exercise}
:label: ex-1

Compute twice x.
```

```{solution} ex-1
:class: dropdown

It is 4.
```

````{exercise}
:label: ex-2

Square x, then print it:

```python
print(x ** 2)
```
````

````{solution} ex-2
:class: dropdown

A code block inside the solution:

```python
print(4)
```
````

```{exercise}
:label: ex-3

Cube x, with code.
```

```{solution-start} ex-3
:class: dropdown
```

Cubing by hand:

```{code-cell} ipython3
cube = x ** 3
print(cube)
```

which prints 8.

```{solution-end}
```

```{code-cell} ipython3
print("after the exercises", x)
```

Closing words.
"""


def _solution_text(text: str) -> list[str]:
    return [s for s in ("It is 4.", "print(4)", "Cubing by hand", "cube = x ** 3", "which prints 8",
                        "{solution", "solution-end") if s in text]


def test_student_edition_strips_solutions_from_the_source():
    out = editions.strip_solutions_text(CHAPTER)
    assert _solution_text(CHAPTER)  # the teacher's source has them
    assert _solution_text(out) == [], out
    for kept in ("# A chapter", ":label: ex-1", ":label: ex-2", "print(x ** 2)", ":label: ex-3",
                 'print("after the exercises", x)', "Closing words.", 'scale = "paper"'):
        assert kept in out, kept
    assert editions.strip_solutions_text(out) == out


def test_student_edition_strips_solutions_from_the_notebook():
    import jupytext

    nb = jupytext.reads(CHAPTER, fmt="md:myst")
    out = editions.strip_solutions_notebook(nb, "chapter")
    text = "\n".join(c.source for c in out.cells)
    assert _solution_text(text) == [], text
    code = [c.source for c in out.cells if c.cell_type == "code"]
    assert code == ['scale = "paper"\nx = 2', 'print("after the exercises", x)']
    assert len([c for c in nb.cells if c.cell_type == "code"]) == 3, "the input notebook is not changed"
    nbformat.validate(out)


def test_student_edition_refuses_unbalanced_solutions():
    with pytest.raises(InputError, match="not closed"):
        editions.strip_solutions_text("```{solution-start} ex-1\n```\n\nno end\n")
    with pytest.raises(InputError, match="without a"):
        editions.strip_solutions_text("```{solution-end}\n```\n")


def test_every_chapter_keeps_its_exercises_in_the_student_edition():
    for chapter in bookbuild.toc_chapters(REPO):
        text = (REPO / chapter).read_text()
        out = editions.strip_solutions_text(text, chapter)
        assert len(re.findall(r"^```\{exercise\}", out, re.M)) == len(re.findall(r"^```\{exercise\}", text, re.M))
        assert not re.search(r"^(`{3,}|:{3,})\{solution", out, re.M), chapter


def test_student_edition_is_built_into_its_own_folder(monkeypatch):
    seen = {}
    monkeypatch.setattr(bookbuild, "build", lambda scale, *a, **kw: seen.update(scale=scale, **kw) or 0)
    assert bookbuild.main(["--scale", "smoke", "--edition", "student"]) == 0
    assert seen["edition"] == "student"
    with pytest.raises(SystemExit):
        bookbuild.main(["--edition", "pupil"])


@pytest.mark.book
def test_a_tiny_book_renders_in_both_editions(tmp_path, monkeypatch):
    """The real build (execute, strip, stage, jupyter-book with warnings as errors) of a book of one
    chapter with both forms of solution: the teacher's edition with a repository URL shows the
    solutions, the repository button and the Colab button; the student edition without a URL
    renders (sphinx-exercise's own hide_solutions crashes here) and shows none of them."""
    repo = tmp_path / "repo"
    (repo / "book").mkdir(parents=True)
    for name in bookbuild.STAGED[1:]:
        shutil.copy2(REPO / name, repo / name)
    shutil.copy2(REPO / "_config.yml", repo / "_config.yml")
    shutil.copytree(REPO / "_static", repo / "_static")
    (repo / bookbuild.MATHJAX_DIR / "mathjax").mkdir(parents=True)
    (repo / bookbuild.MATHJAX_DIR / "mathjax" / "tex-chtml.js").write_text("")  # no math is checked here
    (repo / "_toc.yml").write_text("format: jb-book\nroot: book/home\nchapters:\n  - file: book/tiny\n")
    (repo / "book" / "home.md").write_text("# Home\n\nA tiny book.\n")
    (repo / "book" / "tiny.md").write_text(CHAPTER)
    solutions = ("It is 4.", "Cubing by hand", "which prints 8")
    monkeypatch.setenv("NTKBOOK_REPOSITORY_URL", "https://github.com/o/r")
    assert bookbuild.build("smoke", out=tmp_path / "teacher", repo=repo) == 0
    page = (tmp_path / "teacher" / "html" / "book" / "tiny.html").read_text()
    assert all(s in page for s in solutions)
    assert 'href="https://colab.research.google.com/github/o/r/blob/notebooks/book/tiny.ipynb"' in page
    assert 'href="https://github.com/o/r"' in page
    # the previews' scripts come from the book itself (no CDN), once each, popper before tippy.js,
    # and sphinx-tippy's web look-ups leave nothing in the site
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert not [s for s in scripts if "://" in s], scripts
    lib = [s.split("?")[0] for s in scripts if "tippy-lib/" in s]
    assert lib == ["../_static/tippy-lib/popper.min.js", "../_static/tippy-lib/tippy-bundle.umd.min.js"], lib
    html_dir = tmp_path / "teacher" / "html"
    assert (html_dir / "_static" / "tippy-lib" / "popper.min.js").stat().st_size > 1000
    tips = [s for s in scripts if "/_static/tippy/book/tiny." in s]
    assert len(tips) == 1 and len(list((html_dir / "_static" / "tippy" / "book").glob("tiny.*.js"))) == 1
    assert not list(html_dir.glob("tippy_*_cache.json"))
    monkeypatch.delenv("NTKBOOK_REPOSITORY_URL")
    assert bookbuild.build("smoke", out=tmp_path / "student", repo=repo, edition="student") == 0
    html = tmp_path / "student" / "html"
    page = (html / "book" / "tiny.html").read_text()
    assert not any(s in page for s in solutions) and "after the exercises" in page and "Cube x, with code" in page
    assert "colab.research.google.com" not in page and "github.com/o/r" not in page
    assert "solution" not in (html / "book" / "tiny.md").read_text() + (html / "_sources" / "book" / "tiny.ipynb").read_text()


# ------------------------------------------------------------------------------------------------
# Colab notebooks
# ------------------------------------------------------------------------------------------------
def test_colab_notebook_starts_with_the_setup_cell(tmp_path):
    src = tmp_path / "book" / "tiny.md"
    src.parent.mkdir()
    src.write_text(CHAPTER)
    nb = notebooks.colab_notebook(src, "https://github.com/o/r", SHA)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "code" and notebooks.SETUP_TAG in first.metadata["tags"]
    assert f"git clone --quiet https://github.com/o/r {notebooks.CLONE_DIR}" in first.source
    assert f"checkout --quiet {SHA}" in first.source
    assert f"%pip install --quiet -e {notebooks.CLONE_DIR}" in first.source
    assert first.source.splitlines()[-1] == "!python -m ntkbook data fetch --chapter tiny"
    assert "parameters" in nb.cells[1].metadata.get("tags", []) or "parameters" in nb.cells[2].metadata.get("tags", [])
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    with pytest.raises(InputError, match="40-hex"):
        notebooks.colab_notebook(src, "https://github.com/o/r", "main")


def test_write_notebooks_for_every_chapter_with_code(tmp_path):
    out = tmp_path / "nb"
    assert notebooks.main(["--out", str(out), "--url", "https://github.com/o/r", "--commit", SHA]) == 0
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ipynb"))
    expected = sorted(str(Path(c).with_suffix(".ipynb")) for c in bookbuild.toc_chapters(REPO)
                      if "```{code-cell}" in (REPO / c).read_text())
    assert written == expected and "book/modular_mlp.ipynb" in written
    for path in out.rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert SHA in nb.cells[0].source and f"--chapter {path.stem}" in nb.cells[0].source


# ------------------------------------------------------------------------------------------------
# internal links of the built HTML (lychee, offline)
# ------------------------------------------------------------------------------------------------
def test_link_check_finds_broken_files_and_anchors(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "_static").mkdir()
    (tmp_path / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "index.html").write_text(
        '<html><body><h1 id="top">Book</h1><a href="book/a.html#sec-1">chapter</a> <img src="img.png" alt="x">'
        '<a href="#top">top</a> <a href="https://example.org/far/away">external</a></body></html>')
    (tmp_path / "book" / "a.html").write_text(
        '<html><body><h2 id="sec-1">One</h2><a href="../index.html#top">home</a></body></html>')
    # theme templates under _static are not pages
    (tmp_path / "_static" / "macros.html").write_text('<link href="{{ pathto(\'x.css\', 1) }}">')
    assert htmlcheck.check_links(tmp_path) == []
    (tmp_path / "book" / "b.html").write_text(
        '<html><body><a href="../index.html#nowhere">bad anchor</a> <a href="missing.html">gone</a>'
        '<img src="../lost.png" alt="y"></body></html>')
    problems = htmlcheck.check_links(tmp_path)
    assert len(problems) == 3, problems
    assert all(p.startswith("book/b.html: ") for p in problems), problems
    assert any("index.html#nowhere" in p for p in problems) and any("missing.html" in p for p in problems)
    assert any("lost.png" in p for p in problems)


def test_missing_pages_are_reported(tmp_path):
    chapters = ["book/intro.md", "book/a.md"]
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text("<html><body><main>Intro</main></body></html>")
    assert htmlcheck.missing_pages(tmp_path, chapters) == ["book/a.html (for book/a.md)"]
    (tmp_path / "book" / "a.html").write_text("")
    assert htmlcheck.missing_pages(tmp_path, chapters) == ["book/a.html (for book/a.md): empty page"]


# ------------------------------------------------------------------------------------------------
# the workflows: what each does, pinned actions, least privilege; actionlint and zizmor find nothing
# ------------------------------------------------------------------------------------------------
def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    path = str(beside) if beside.exists() else shutil.which(name)
    assert path, f"{name} is not installed: `make setup` installs it (the test extra of pyproject.toml)"
    return path


def _workflow(name: str) -> dict:
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def _steps(wf: dict) -> list[dict]:
    return [s for job in wf["jobs"].values() for s in job.get("steps", [])]


def _lint(folder: Path) -> list[str]:
    """What actionlint (with shellcheck on the run: scripts) and zizmor (offline, every audit
    including the pedantic ones) report on the workflows in ``folder``."""
    files = sorted(str(p) for p in folder.glob("*.yml"))
    problems = []
    al = subprocess.run([_tool("actionlint"), "-shellcheck", _tool("shellcheck"), "-no-color", *files],
                        capture_output=True, text=True)
    if al.returncode != 0:
        problems.append("actionlint: " + al.stdout + al.stderr)
    zz = subprocess.run([_tool("zizmor"), "--offline", "--persona", "pedantic", "--format", "plain", *files],
                        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(folder)})
    if zz.returncode != 0:
        problems.append("zizmor: " + zz.stdout + zz.stderr[-3000:])
    return problems


def test_workflows_pass_actionlint_and_zizmor():
    assert _lint(WORKFLOWS) == []


def test_the_lint_catches_a_careless_workflow(tmp_path):
    (tmp_path / "bad.yml").write_text(
        "name: bad\non:\n  pull_request_target:\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: echo \"${{ github.event.pull_request.title }}\"\n")
    problems = _lint(tmp_path)
    assert len(problems) == 2, problems
    assert "untrusted" in problems[0] and "unpinned-uses" in problems[1] and "artipacked" in problems[1]


def test_every_action_is_pinned_and_checkouts_keep_no_credentials():
    for path in sorted(WORKFLOWS.glob("*.yml")):
        wf = _workflow(path.name)
        assert wf["permissions"] == {}, f"{path.name}: no permissions at the top; each job asks for its own"
        for job_name, job in wf["jobs"].items():
            assert "permissions" in job and "timeout-minutes" in job, f"{path.name}: {job_name}"
        for step in _steps(wf):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), f"{path.name}: {step['uses']}"
                if step["uses"].startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def test_what_the_workflows_do():
    publish = _workflow("publish.yml")
    assert publish["on"]["push"]["branches"] == ["main"]
    build = [s.get("run", s.get("uses", "")) for s in publish["jobs"]["build"]["steps"]]
    order = ["make setup", "sudo make texlive", "make pdf SCALE=paper", "ntkbook.book.htmlcheck _build/paper/html",
             "ntkbook.book.notebooks", "actions/upload-artifact@"]
    at = [next(i for i, s in enumerate(build) if o in s) for o in order]
    assert at == sorted(at), build
    assert not any("make data" in s for s in build), "the paper-scale book builds from results/ alone"
    assert publish["jobs"]["build"]["env"]["NTKBOOK_REPOSITORY_URL"] == "${{ github.server_url }}/${{ github.repository }}"
    site = next(s for s in publish["jobs"]["build"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")
                and s["with"]["name"] == "site")
    assert site["with"]["path"] == "_build/paper/html"
    # the site goes to the root of the Pages branch, the pull requests' previews in _preview/ kept
    assert publish["jobs"]["deploy"]["permissions"] == {"contents": "write"}
    assert "tools/pages_branch.sh site site" in publish["jobs"]["deploy"]["steps"][-1]["run"]
    push = publish["jobs"]["notebooks"]["steps"][-1]["run"]
    assert "push --force" in push and f" {bookbuild.NOTEBOOKS_BRANCH}\n" in push + "\n"
    preview = _workflow("preview.yml")
    assert list(preview["on"]) == ["pull_request"]
    assert preview["on"]["pull_request"]["types"] == ["opened", "synchronize", "reopened", "closed"]
    assert all(job["permissions"] in ({}, {"contents": "read"}) for job in preview["jobs"].values())
    runs = [s.get("run", "") for s in _steps(preview)]
    assert "make test" in runs
    checkout = next(s for s in _steps(preview) if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # tests/test_provenance.py needs the history
    upload = next(s for s in _steps(preview) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "_build/smoke/html"
    # the deployed previews: built above with no secrets, deployed by a workflow_run that runs no code
    # of the pull request (only this repository's), for pull requests of this repository only
    deploy = _workflow("preview-deploy.yml")
    assert deploy["on"] == {"workflow_run": {"workflows": ["preview"], "types": ["completed"]}}
    job = deploy["jobs"]["deploy"]
    assert job["permissions"] == {"actions": "read", "contents": "write", "pull-requests": "write"}
    assert "head_repository.full_name == github.repository" in job["if"]
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert set(checkout["with"]) == {"persist-credentials"}  # the default branch, never the pull request's head
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["name"] == upload["with"]["name"]
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert 'tools/pages_branch.sh preview "$NUMBER"' in runs and 'tools/pages_branch.sh remove "$NUMBER"' in runs
    assert "/_preview/$NUMBER/" in runs and "issues/$NUMBER/comments" in runs
    assert "${{" not in runs  # event data reaches the scripts through env only
    links = _workflow("links.yml")
    assert links["on"]["schedule"][0]["cron"].split()[2:] == ["*", "*", "1"]  # weekly
    assert any("htmlcheck --online" in s.get("run", "") for s in _steps(links))
    # a published release gets the site (a tarball) and the PDF of its tagged commit attached
    release = _workflow("release.yml")
    assert release["on"] == {"release": {"types": ["published"]}}
    build = [s.get("run", s.get("uses", "")) for s in release["jobs"]["build"]["steps"]]
    order = ["make setup", "sudo make texlive", "make pdf SCALE=paper", "ntkbook.book.htmlcheck _build/paper/html",
             "tar -czf", "actions/upload-artifact@"]
    at = [next(i for i, s in enumerate(build) if o in s) for o in order]
    assert at == sorted(at), build
    assert release["jobs"]["build"]["permissions"] == {"contents": "read"}
    assert release["jobs"]["attach"]["permissions"] == {"contents": "write"}
    upload = release["jobs"]["attach"]["steps"][-1]["run"]
    assert upload.startswith('gh release upload "$TAG" assets/*') and "${{" not in upload
    weekly = _workflow("reproduce.yml")
    assert weekly["on"]["schedule"][0]["cron"].split()[2:4] == ["*", "*"]  # weekly
    runs = [s.get("run", "") for s in _steps(weekly)]
    order = ["make setup", "make data", "make test-slow"]
    at = [next(i for i, r in enumerate(runs) if o in r) for o in order]
    assert at == sorted(at), runs


# ------------------------------------------------------------------------------------------------
# licence and citation
# ------------------------------------------------------------------------------------------------
def _bibtex_entries(text: str) -> dict[str, dict[str, str]]:
    """``{key: {field: value}}`` of the BibTeX entries in ``text`` (one field per line, braces
    around values and the {NTK}-style case protection removed)."""
    entries = {}
    for m in re.finditer(r"^@(\w+)\{([^,]+),\n(.*?)^\}", text, re.M | re.S):
        fields = {"type": m.group(1).lower()}
        for fm in re.finditer(r"^\s*([\w-]+)\s*=\s*\{(.*)\},?\s*$", m.group(3), re.M):
            fields[fm.group(1).lower()] = fm.group(2).replace("{", "").replace("}", "")
        entries[m.group(2)] = fields
    return entries


def _cff() -> dict:
    return yaml.safe_load((REPO / "CITATION.cff").read_text())


def test_citation_cff_is_valid():
    """CITATION.cff against the Citation File Format 1.2.0 schema (tests/data/cff-1.2.0.schema.json,
    the schema cffconvert validates with; cffconvert itself pins jsonschema below 4, which the book
    cannot use)."""
    import jsonschema

    schema = json.loads((REPO / "tests" / "data" / "cff-1.2.0.schema.json").read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    cff = _cff()
    assert [e.message for e in validator.iter_errors(cff)] == []
    broken = {**cff, "license": "not-a-licence"}
    del broken["message"]
    assert len(list(validator.iter_errors(broken))) == 2


def test_citation_agrees_with_the_book_the_bibtex_and_the_bibliography():
    cff = _cff()
    config = _config()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert cff["title"] == cff["preferred-citation"]["title"] == config["title"]
    assert cff["version"] == cff["preferred-citation"]["version"] == version
    assert str(cff["preferred-citation"]["year"]) == str(config["copyright"])
    assert cff["authors"] == cff["preferred-citation"]["authors"] == [{"name": config["author"]}]
    page = _bibtex_entries((REPO / "book" / "cite.md").read_text())
    book = page.pop("ntkbook2026")
    assert book["title"] == cff["title"] and book["year"] == str(cff["preferred-citation"]["year"])
    assert book["edition"] == version and book["author"] == config["author"]
    bib = _bibtex_entries((REPO / "references.bib").read_text())
    refs = {r["url"].rsplit("/", 1)[1]: r for r in cff["references"]}
    assert sorted(refs) == ["2510.00468", "2603.13085"]
    for key, entry in page.items():
        for field in ("title", "author", "journal", "year", "eprint"):
            assert entry[field] == bib[key][field], (key, field)
        ref = refs[entry["eprint"]]
        assert ref["title"] == entry["title"] and str(ref["year"]) == entry["year"]
        families = [a["family-names"] for a in ref["authors"]]
        assert [a.split(",")[0].replace("\\~n", "ñ") for a in entry["author"].split(" and ")] == families
    assert "book/cite.md" in bookbuild.toc_chapters(REPO)


def test_zenodo_metadata_agrees_with_the_citation_file():
    """``.zenodo.json`` (what Zenodo archives a GitHub release with; it takes precedence over
    CITATION.cff there) is valid JSON and says what CITATION.cff says: title, version, authors,
    keywords, the code's licence (Zenodo takes one: LICENSE's MIT; the text's CC BY 4.0 is in the
    notes), and the two papers as the works it references."""
    zenodo = json.loads((REPO / ".zenodo.json").read_text())
    cff = _cff()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert zenodo["upload_type"] == cff["type"] == "software"
    assert zenodo["title"] == cff["title"] and zenodo["version"] == cff["version"]
    assert zenodo["creators"] == [{"name": a["name"]} for a in cff["authors"]]
    assert zenodo["keywords"] == cff["keywords"]
    assert zenodo["license"] == project["license"] and zenodo["license"] in cff["license"]
    assert (REPO / "LICENSE").read_text().startswith(f"{zenodo['license']} License\n")
    assert all(lic in zenodo["notes"] for lic in ("LICENSE-text", "CC BY 4.0"))
    papers = sorted(ident["value"] for ref in cff["references"] for ident in ref["identifiers"])
    related = zenodo["related_identifiers"]
    assert sorted(r["identifier"] for r in related) == papers == ["arXiv:2510.00468", "arXiv:2603.13085"]
    assert {(r["relation"], r["scheme"]) for r in related} == {("references", "arxiv")}
    assert all(p in zenodo["description"] for p in papers) and zenodo["description"].strip()
    assert "doi" not in zenodo  # Zenodo mints the DOI of each release; none is written here


def test_licences():
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2026 the ntkbook authors\n")
    text = (REPO / "LICENSE-text").read_text()
    assert "CC-BY-4.0" in text and "https://creativecommons.org/licenses/by/4.0/legalcode" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert sorted(_cff()["license"]) == ["CC-BY-4.0", "MIT"]
    readme = (REPO / "README.md").read_text()
    assert "LICENSE-text" in readme and "CC BY 4.0" in readme and "MIT" in readme


# ------------------------------------------------------------------------------------------------
# the Pages branch: the site at its root, pull requests' previews in _preview/<number>/
# ------------------------------------------------------------------------------------------------
PAGES_BRANCH = REPO / "tools" / "pages_branch.sh"


def _pages(remote: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PAGES_REMOTE": str(remote)}
    return subprocess.run(["bash", str(PAGES_BRANCH), *args], env=env, capture_output=True, text=True)


def _pages_files(remote: Path) -> set[str]:
    out = subprocess.run(["git", "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "gh-pages"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _site(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_pages_branch_keeps_the_site_and_the_previews_apart(tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    site = _site(tmp_path / "site", {"index.html": "book", "_static/a.css": "css"})
    assert _pages(remote, "site", str(site)).returncode == 0
    assert _pages(remote, "preview", "7", str(_site(tmp_path / "pr7", {"index.html": "pr 7"}))).returncode == 0
    (site / "_static" / "a.css").unlink()
    _site(site, {"_static/b.css": "css"})
    assert _pages(remote, "site", str(site)).returncode == 0  # a new site: old files gone, previews kept
    assert _pages_files(remote) == {".nojekyll", "index.html", "_static/b.css", "_preview/7/index.html"}
    log = subprocess.run(["git", "--git-dir", str(remote), "rev-list", "--count", "gh-pages"],
                         capture_output=True, text=True, check=True).stdout
    assert log.strip() == "1"  # one commit: no history of old builds
    assert _pages(remote, "remove", "7").returncode == 0
    assert _pages_files(remote) == {".nojekyll", "index.html", "_static/b.css"}
    again = _pages(remote, "remove", "7")
    assert again.returncode == 0 and "nothing to remove" in again.stdout
    for bad in (["preview", "../x", str(site)], ["remove", "0"], ["remove", "7; rm"], ["site", str(tmp_path / "none")]):
        assert _pages(remote, *bad).returncode == 2, bad


def test_pages_branch_runs_at_the_same_time_lose_nothing(tmp_path):
    """Previews of several pull requests written at once (each push refused when the branch moved
    under it, then redone) all end up on the branch."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    env = {**os.environ, "PAGES_REMOTE": str(remote)}
    procs = [subprocess.Popen(["bash", str(PAGES_BRANCH), "preview", str(n),
                               str(_site(tmp_path / f"pr{n}", {"index.html": f"pr {n}"}))],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(1, 5)]
    assert [p.wait() for p in procs] == [0] * 4
    assert _pages_files(remote) == {".nojekyll"} | {f"_preview/{n}/index.html" for n in range(1, 5)}
