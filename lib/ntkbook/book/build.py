"""Build the book: jupytext -> papermill (with the chapter's ``scale``) -> jupyter-book.

``python -m ntkbook.book.build --scale paper`` (what ``make book`` runs):

1. every chapter listed in ``_toc.yml`` (``book/*.md``, jupytext MyST notebooks) is converted to a
   notebook and executed by papermill with the parameter ``scale``; papermill's injected
   parameters cell is tagged ``remove-cell`` so the HTML does not show it;
2. the executed notebooks, with ``_config.yml``, ``_toc.yml``, ``references.bib`` and ``_static/``,
   are staged in ``_build/<scale>/src`` (the source tree is never written to); a smoke build gets
   a banner on every page saying that its numbers are not the paper-scale ones;
3. ``jupyter-book build`` renders them with execution off and warnings as errors
   (``-W -n --keep-going``) into ``_build/<scale>/html``.

A chapter that raises fails the build with the chapter's name, the cell and the error.
``--execute-only book/x.md`` executes (and checks) chapters without rendering the book.
``--chapter book/x.md`` (what ``make chapter CH=x`` runs) executes that chapter only and renders
the whole book, reusing the other chapters' notebooks executed by the last build at this scale
(chapters never executed at this scale are executed too).
A summary with the status and wall time of each chapter is written to
``_build/<scale>/chapters.json``; ``--record-times`` also stores the chapters' times in
``results/chapters.json``, from which each chapter's "Run this chapter" box reads them.

``--pdf`` (what ``make pdf`` runs) also renders the whole book as one PDF with the Sphinx LaTeX
builder (``jupyter-book build --builder pdflatex``, XeLaTeX from Debian's TeX Live), from the same
executed notebooks and before the HTML, into ``_build/<scale>/pdf/ntkbook.pdf``; the PDF is then
copied beside the HTML pages and every page's download menu links it (a build without ``--pdf``
has no such link, so it is never broken). ``--pdf-only`` renders the PDF alone from the notebooks
executed by the last build at this scale, with today's configuration (the HTML is left as it is).

``--edition student`` builds the student edition: the chapters are executed with their solutions
(so both editions show the same numbers), then the solutions are removed from the executed
notebooks and the MyST downloads (:mod:`ntkbook.book.editions`); output in ``_build/<scale>-student``.

The repository URL is set in one place, ``repository.url`` in ``_config.yml`` (or
``$NTKBOOK_REPOSITORY_URL``); :func:`site_config` writes it into the staged configuration wherever
the theme needs it (repository button, ``html.baseurl``, the chapters' "Open in Colab" buttons).
Without a URL those buttons are left out.

Progress reports printed while a chapter computes (``ntkbook.progress`` lines and the store's
"computing ..." line) are moved out of the notebook into ``_build/<scale>/logs/<chapter>.log``,
so a page does not open with a box of progress lines.

This module is also a small Sphinx extension (listed in ``_config.yml``): it adds each chapter's
MyST source (``book/x.md``, copied beside ``book/x.html``) to the page's download menu, next to
the executed notebook, and gives the running text of every page one typography (true minus,
arrows, inequalities, ×; :func:`ntkbook.book.report.typeset_characters`), code and math excepted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ntkbook.book.editions import EDITIONS, strip_solutions_notebook, strip_solutions_text
from ntkbook.errors import InputError
from ntkbook.paths import repo_root

REPO = repo_root()
STAGED = ("_config.yml", "_toc.yml", "references.bib")
#: folder of the staged sources holding the chapters' MyST files (html_extra_path in _config.yml)
MYST_DIR = "_myst"
#: per-scale execution times of the chapters, read by ntkbook.book.report.run_this_chapter
TIMES_FILE = REPO / "results" / "chapters.json"
#: lines of progress output (ntkbook.progress; the "computing ..." and "waiting for ..." lines of the
#: store; the eNTK engine's route lines, ntkbook.ntk.entk.describe_routes)
PROGRESS_LINE = re.compile(
    r"^(computing \S+ \(config [0-9a-f]+[,)].*"
    r"|.*: \d+/\d+ \(\s*\d+%\) elapsed .*"
    r"|.*: done, \d+/\d+ in .*"
    r"|eNTK route: .*"
    r"|waiting for .* to finish computing .*)$")
# MathJax lives in _mathjax/mathjax, not _static: Jupyter Book adds every .js file under
# _static to every page, which would load all of MathJax's bundles at once.
MATHJAX_DIR = "_mathjax"
#: file name of the whole-book PDF (``latex.latex_documents.targetname`` in ``_config.yml`` gives
#: its stem): written to ``_build/<scale>/pdf/`` and, for the HTML, beside ``index.html``
PDF_NAME = "ntkbook.pdf"
#: what a PDF build needs on the PATH (Debian: ``make texlive`` installs them)
PDF_TOOLS = ("latexmk", "xelatex", "make")
#: scripts of the reference previews (popper and tippy.js for sphinx-tippy), installed from npm by
#: the build like MathJax and served from _vendor/tippy-lib (html_static_path), never from a CDN
VENDOR_DIR = "_vendor"
TIPPY_PACKAGES = {"@popperjs/core@2.11.8": "dist/umd/popper.min.js",
                  "tippy.js@6.3.7": "dist/tippy-bundle.umd.min.js"}
#: the branch the publish workflow writes the chapters' Colab notebooks to (ntkbook.book.notebooks);
#: the "Open in Colab" buttons open them there
NOTEBOOKS_BRANCH = "notebooks"


def toc_chapters(repo: Path = REPO) -> list[str]:
    """Chapter paths (``book/intro.md`` ...) in the order of ``_toc.yml``."""
    import yaml

    toc = yaml.safe_load((repo / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                files.append(e["file"])
            walk(e.get("sections"))
            for part in e.get("parts", []) or []:
                walk(part.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []) or []:
        walk(part.get("chapters"))
    return [f if f.endswith(".md") else f + ".md" for f in files]


class ChapterError(RuntimeError):
    pass


def execute_chapter(src: Path, dest: Path, scale: str, timeout: int | None = None) -> float:
    """Execute one jupytext chapter into notebook ``dest``; returns the wall time in seconds."""
    import jupytext
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    nb = jupytext.read(src)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not any(c.cell_type == "code" for c in nb.cells):  # prose only: nothing to execute
        nbformat.write(nb, dest)
        return 0.0
    if not any("parameters" in c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"):
        raise ChapterError(f"{src}: no code cell is tagged 'parameters' (it must set `scale`)")
    raw = dest.with_suffix(".input.ipynb")
    nbformat.write(nb, raw)
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(raw),
            str(dest),
            parameters={"scale": scale},
            kernel_name="python3",
            cwd=str(src.parent),
            progress_bar=False,
            execution_timeout=timeout,
            log_output=False,
        )
    except PapermillExecutionError as exc:
        tb = "\n".join(exc.traceback[-8:]) if exc.traceback else ""
        raise ChapterError(
            f"chapter {src.relative_to(REPO) if src.is_relative_to(REPO) else src} failed "
            f"in cell {exc.exec_count} (cell index {exc.cell_index}): {exc.ename}: {exc.evalue}\n{tb}"
        ) from None
    finally:
        raw.unlink(missing_ok=True)
    elapsed = time.perf_counter() - t0
    out = nbformat.read(dest, as_version=4)
    progress_lines: list[str] = []
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs = _strip_progress(_merge_streams(cell.get("outputs", [])), progress_lines)
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]
    nbformat.write(out, dest)
    if progress_lines:
        log_dir = _log_dir(dest)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / (src.stem + ".log")).write_text("\n".join(progress_lines) + "\n")
    return elapsed


def _log_dir(dest: Path) -> Path:
    """``_build/<scale>/logs`` for a notebook ``_build/<scale>/src/book/x.ipynb``."""
    for parent in dest.parents:
        if parent.name == "src":
            return parent.parent / "logs"
    return dest.parent / "logs"


def _strip_progress(outputs: list, removed: list[str]) -> list:
    """Move progress lines out of stdout stream outputs (into ``removed``); drop emptied outputs."""
    kept = []
    for o in outputs:
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            lines = o["text"].splitlines(keepends=True)
            keep = [ln for ln in lines if not PROGRESS_LINE.match(ln.rstrip("\n"))]
            removed.extend(ln.rstrip("\n") for ln in lines if PROGRESS_LINE.match(ln.rstrip("\n")))
            if not keep:
                continue
            o["text"] = "".join(keep)
        kept.append(o)
    return kept


def _merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (one box per block of printed lines)."""
    merged: list = []
    for o in outputs:
        if (o.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == o.get("name")):
            merged[-1]["text"] += o["text"]
        else:
            merged.append(o)
    return merged


def ensure_mathjax(repo: Path = REPO) -> Path:
    """MathJax 3 served from ``_mathjax/mathjax`` (installed from the npm registry once)."""
    target = repo / MATHJAX_DIR / "mathjax"
    if (target / "tex-chtml.js").exists():
        return target
    prefix = repo / ".cache" / "npm"
    pkg = prefix / "node_modules" / "mathjax" / "es5"
    if not (pkg / "tex-chtml.js").exists():
        if shutil.which("npm") is None:
            raise RuntimeError(
                "MathJax is not installed and npm is missing: install Node.js/npm, or put MathJax 3's "
                f"es5 folder at {target}"
            )
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(prefix), "mathjax@3.2.2"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    shutil.copytree(pkg, target, dirs_exist_ok=True)
    return target


def ensure_tippy(repo: Path = REPO) -> Path:
    """popper and tippy.js, the scripts of sphinx-tippy's previews, in ``_vendor/tippy-lib`` (the
    ``tippy_js`` of ``_config.yml`` names them there); installed from the npm registry once, into
    this checkout's ``.cache/npm-tippy`` (shared by every book ``repo`` built from it; a prefix of its
    own: ``npm install --no-save`` into MathJax's would remove MathJax, and the other way round)."""
    target = repo / VENDOR_DIR / "tippy-lib"
    files = {spec: Path(spec.rsplit("@", 1)[0]) / path for spec, path in TIPPY_PACKAGES.items()}
    if all((target / f.name).exists() for f in files.values()):
        return target
    import fcntl

    prefix = REPO / ".cache" / "npm-tippy"
    prefix.mkdir(parents=True, exist_ok=True)
    # one installer at a time (the test run builds several books at once), and always both packages:
    # `npm install --no-save` of one package removes the other from node_modules
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((prefix / "node_modules" / f).exists() for f in files.values()):
            if shutil.which("npm") is None:
                raise RuntimeError(
                    "the scripts of the reference previews (popper, tippy.js) are not installed and npm is "
                    f"missing: install Node.js/npm, or put {', '.join(f.name for f in files.values())} at {target}"
                )
            subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(prefix),
                            *TIPPY_PACKAGES], check=True, stdout=subprocess.DEVNULL)
        target.mkdir(parents=True, exist_ok=True)
        for f in files.values():
            tmp = target / (f.name + f".{os.getpid()}.tmp")
            shutil.copy2(prefix / "node_modules" / f, tmp)
            os.replace(tmp, target / f.name)
    return target


def repository_url(cfg: dict) -> str | None:
    """The book's repository URL: ``$NTKBOOK_REPOSITORY_URL`` (the publish workflow sets it to the
    repository it runs in), else ``repository.url`` of ``_config.yml``; None when neither is set.
    A ``git@host:owner/name.git`` address is turned into ``https://host/owner/name``."""
    url = (os.environ.get("NTKBOOK_REPOSITORY_URL") or (cfg.get("repository") or {}).get("url") or "").strip()
    if not url:
        return None
    m = re.match(r"^git@([^:]+):(.+)$", url)
    if m:
        url = f"https://{m.group(1)}/{m.group(2)}"
    url = url.rstrip("/").removesuffix(".git")
    if not re.fullmatch(r"https://[^/\s]+/[^/\s]+/[^/\s]+", url):
        raise InputError(f"repository URL {url!r} (repository.url in _config.yml or $NTKBOOK_REPOSITORY_URL) "
                         "is not of the form https://github.com/OWNER/NAME: fix it, or leave it empty")
    return url


def pages_url(url: str) -> str | None:
    """Where GitHub Pages publishes the repository ``url`` (``https://OWNER.github.io/NAME/``);
    None for a repository that is not on github.com."""
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    return f"https://{m.group(1).lower()}.github.io/{m.group(2)}/" if m else None


#: the banner on every page of a smoke build (the theme's ``announcement``)
SMOKE_BANNER = ("Smoke build: small-scale numbers, not the paper-scale results. Verdicts on these "
                "pages come from the smoke runs; the paper-scale book is built with "
                "<code>make book</code>.")


def site_config(cfg: dict, url: str | None, edition: str = "teacher", scale: str = "paper") -> dict:
    """The ``_config.yml`` the book is rendered with: ``cfg`` (the repository's) with the
    repository ``url`` written wherever the theme and Sphinx need it, in one go, and, for a
    ``scale="smoke"`` build, a banner on every page (:data:`SMOKE_BANNER`, the theme's
    ``announcement``) saying that its numbers and verdicts are not the paper-scale ones.

    With a URL: the repository button, ``html.baseurl`` (``html.baseurl`` of ``cfg`` when set, else
    the GitHub Pages address) and, for a GitHub repository, the "Open in Colab" button of every
    chapter, which opens ``book/<chapter>.ipynb`` on the branch the publish workflow writes the
    notebooks to (:data:`NOTEBOOKS_BRANCH`, written by :mod:`ntkbook.book.notebooks`). Without one: no repository
    button, no launch buttons and no base URL, rather than links to a placeholder. The student
    edition says so in the title."""
    import copy

    if edition not in EDITIONS:
        raise InputError(f"unknown edition {edition!r}: choose one of {', '.join(EDITIONS)}")
    cfg = copy.deepcopy(cfg)
    html = cfg.setdefault("html", {})
    theme = cfg.setdefault("sphinx", {}).setdefault("config", {}).setdefault("html_theme_options", {})
    repository = cfg.setdefault("repository", {})
    launch = cfg.pop("launch_buttons", None) or {}
    for key in ("repository_url", "repository_branch", "path_to_docs", "launch_buttons"):
        theme.pop(key, None)
    if edition == "student":
        cfg["title"] = f"{cfg.get('title', '')} (student edition)".strip()
    if scale == "smoke":
        theme["announcement"] = SMOKE_BANNER
    if url is None:
        repository.pop("url", None)
        html["use_repository_button"] = theme["use_repository_button"] = False
        if not html.get("baseurl"):
            html.pop("baseurl", None)
        return cfg
    repository["url"] = url
    html["use_repository_button"] = theme["use_repository_button"] = True
    base = html.get("baseurl") or pages_url(url)
    if base:
        html["baseurl"] = base
    theme["repository_url"] = url
    if launch.get("colab_url") and url.startswith("https://github.com/"):
        theme["launch_buttons"] = {"colab_url": launch["colab_url"]}
        theme["repository_branch"] = NOTEBOOKS_BRANCH
        theme["path_to_docs"] = ""
    return cfg


def stage(src_dir: Path, repo: Path = REPO, edition: str = "teacher", scale: str = "paper") -> None:
    """Copy the configuration (with the repository URL written in, :func:`site_config`), the
    bibliography, static files, MathJax, the previews' scripts and the chapters' MyST sources (without solutions in the
    student edition) into ``src_dir`` (executed notebooks already there are kept)."""
    import yaml

    src_dir.mkdir(parents=True, exist_ok=True)
    for name in STAGED:
        shutil.copy2(repo / name, src_dir / name)
    cfg = yaml.safe_load((repo / "_config.yml").read_text())
    cfg = site_config(cfg, repository_url(cfg), edition, scale)
    (src_dir / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    shutil.copytree(repo / "_static", src_dir / "_static", dirs_exist_ok=True)
    shutil.copytree(repo / MATHJAX_DIR, src_dir / MATHJAX_DIR, dirs_exist_ok=True)
    if (repo / VENDOR_DIR).exists():  # ensure_tippy (the build calls it) writes it
        shutil.copytree(repo / VENDOR_DIR, src_dir / VENDOR_DIR, dirs_exist_ok=True)
    myst = src_dir / MYST_DIR
    if myst.exists():
        shutil.rmtree(myst)
    for chapter in toc_chapters(repo):
        (myst / chapter).parent.mkdir(parents=True, exist_ok=True)
        text = (repo / chapter).read_text()
        if edition == "student":
            text = strip_solutions_text(text, chapter)
        (myst / chapter).write_text(text)


def record_times(scale: str, summary: dict[str, dict], path: Path = TIMES_FILE) -> None:
    """Merge the measured execution times of ``summary`` into ``results/chapters.json``."""
    data = json.loads(path.read_text()) if path.exists() else {}
    entry = data.setdefault(scale, {})
    for chapter, info in summary.items():
        if info.get("status") == "ok":
            entry[chapter] = {"seconds": info["seconds"], "cpus": os.cpu_count(),
                              "date": _dt.date.today().isoformat()}
    data[scale] = dict(sorted(entry.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def _fresh_smoke_cache(fresh: bool):
    """With ``fresh``, point ``$NTKBOOK_CACHE`` at an empty folder while the chapters execute, so
    that every smoke result is computed and the recorded times are those of a run from scratch
    (a smoke result computed earlier by today's code is otherwise reused)."""
    if not fresh:
        yield
        return
    old = os.environ.get("NTKBOOK_CACHE")
    with tempfile.TemporaryDirectory(prefix="ntkbook-smoke-") as tmp:
        os.environ["NTKBOOK_CACHE"] = tmp
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("NTKBOOK_CACHE", None)
            else:
                os.environ["NTKBOOK_CACHE"] = old


def _execute_all(todo: list[str], repo: Path, src_dir: Path, scale: str, edition: str, summary: dict,
                 failed: list) -> None:
    """Execute each chapter of ``todo`` into ``src_dir``, recording its status in ``summary`` and
    its name in ``failed`` when it raises (every chapter is tried)."""
    import nbformat

    for chapter in todo:
        dest = src_dir / Path(chapter).with_suffix(".ipynb")
        print(f"[{scale}] executing {chapter} ...", flush=True)
        try:
            seconds = execute_chapter(repo / chapter, dest, scale)
            if edition == "student":
                nbformat.write(strip_solutions_notebook(nbformat.read(dest, as_version=4), chapter), dest)
            summary[chapter] = {"status": "ok", "seconds": round(seconds, 1)}
            print(f"[{scale}] {chapter}: ok in {seconds:.1f}s", flush=True)
        except Exception as exc:  # report every failing chapter, then fail
            summary[chapter] = {"status": "failed", "error": str(exc)}
            failed.append(chapter)
            print(f"[{scale}] {exc}", file=sys.stderr, flush=True)


def missing_pdf_tools() -> list[str]:
    """The programs of :data:`PDF_TOOLS` not found on the PATH."""
    return [t for t in PDF_TOOLS if shutil.which(t) is None]


def build_pdf(out: Path, scale: str = "paper") -> Path:
    """Render the executed notebooks staged in ``out/src`` (by :func:`build`) as one PDF with
    jupyter-book's LaTeX builder (warnings as errors, like the HTML) and latexmk; returns
    ``out/pdf/ntkbook.pdf``. The LaTeX sources and log are kept in ``out/pdf-build``."""
    src_dir = out / "src"
    missing = [c for c in toc_chapters(src_dir if (src_dir / "_toc.yml").exists() else REPO)
               if not (src_dir / Path(c).with_suffix(".ipynb")).exists()]
    if not (src_dir / "_config.yml").exists() or missing:
        raise ChapterError(f"no executed notebooks to render in {src_dir} (missing: {missing or 'all'}): "
                           f"build the book at this scale first")
    if missing_tools := missing_pdf_tools():
        raise RuntimeError(f"the PDF needs {', '.join(missing_tools)} (TeX Live): `make texlive` installs "
                           "Debian's packages when run as root")
    work = out / "pdf-build"
    shutil.rmtree(work, ignore_errors=True)
    jb = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src_dir), "--path-output", str(work),
          "-W", "-n", "--keep-going", "--builder", "pdflatex"]
    print(f"[{scale}] rendering the PDF with jupyter-book and XeLaTeX ...", flush=True)
    t0 = time.perf_counter()
    # latexmk must not stop to ask on a TeX error; the build's log keeps its output
    env = {**os.environ, "LATEXMKOPTS": "-interaction=nonstopmode -halt-on-error"}
    proc = subprocess.run(jb, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    (out / "pdf.log").write_text(log)
    built = work / "_build" / "latex" / PDF_NAME
    if proc.returncode != 0 or not built.exists() or "Failed to build pdf" in log:
        warnings = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln or ln.startswith("!")]
        print("\n".join(warnings[-40:]) or log[-4000:], file=sys.stderr)
        raise ChapterError(f"the PDF build failed (log: {out / 'pdf.log'}; LaTeX: {built.with_suffix('.log')})")
    target = out / "pdf" / PDF_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, target)
    print(f"[{scale}] PDF rendered in {time.perf_counter() - t0:.0f}s: {target}", flush=True)
    return target


def build(scale: str, chapters: list[str] | None = None, execute_only: bool = False,
          out: Path | None = None, reuse_others: bool = False, times: bool = False,
          edition: str = "teacher", repo: Path = REPO, pdf: bool = False) -> int:
    """Execute ``chapters`` (all by default) at ``scale`` and, unless ``execute_only``, render the
    book; with ``pdf`` the whole-book PDF first (:func:`build_pdf`), which the HTML then links.
    With ``reuse_others`` the notebooks of the other chapters executed by the last build
    into ``out`` are kept (those missing are executed). The student ``edition`` removes the
    solutions from the executed notebooks (:mod:`ntkbook.book.editions`); it is built into
    ``_build/<scale>-student`` by default. ``repo`` is the book's root (``_toc.yml``, ``book/``)."""

    t_start = time.perf_counter()
    if edition not in EDITIONS:
        print(f"error: unknown edition {edition!r}: choose one of {', '.join(EDITIONS)}", file=sys.stderr)
        return 2
    out = out or repo / "_build" / (scale if edition == "teacher" else f"{scale}-{edition}")
    src_dir = out / "src"
    all_chapters = toc_chapters(repo)
    # a chapter is named by its file (book/intro.md) or by its name (intro)
    todo = [c if (repo / c).exists() or c.endswith(".md") else f"book/{c}.md" for c in (chapters or all_chapters)]
    unknown = [c for c in todo if not (repo / c).exists()]
    if unknown:
        print(f"error: chapter files not found: {unknown}; name chapters as in _toc.yml "
              f"(book/intro.md) or by their name (intro)", file=sys.stderr)
        return 2
    if not execute_only:
        ensure_mathjax(repo)
        ensure_tippy(repo)
        if src_dir.exists() and not reuse_others:
            shutil.rmtree(src_dir)
        stage(src_dir, repo, edition=edition, scale=scale)
        if reuse_others:
            missing = [c for c in all_chapters if c not in todo
                       and not (src_dir / Path(c).with_suffix(".ipynb")).exists()]
            if missing:
                print(f"[{scale}] no executed notebook from an earlier build for {', '.join(missing)}: "
                      "executing them too", flush=True)
            todo += missing
    previous = {}
    summary_file = out / "chapters.json"
    if reuse_others and summary_file.exists():
        old = json.loads(summary_file.read_text())
        previous = {k: {**v, "reused": True} for k, v in old.get("chapters", old).items()
                    if k not in todo and isinstance(v, dict)}
    summary: dict[str, dict] = {}
    failed = []
    with _fresh_smoke_cache(scale == "smoke" and times):
        _execute_all(todo, repo, src_dir, scale, edition, summary, failed)
    out.mkdir(parents=True, exist_ok=True)
    summary_file.write_text(json.dumps({**previous, **summary}, indent=1))
    if times:
        record_times(scale, summary)
    if failed:
        print(f"error: {len(failed)} chapter(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if execute_only:
        return 0
    if pdf:
        try:
            made = build_pdf(out, scale)
        except (ChapterError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        # beside the HTML pages (the staged _myst folder is html_extra_path); the download menu links it
        shutil.copy2(made, src_dir / MYST_DIR / PDF_NAME)
    html = out / "html"
    jb = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src_dir), "--path-output", str(out),
          "-W", "-n", "--keep-going", "--builder", "html"]
    print(f"[{scale}] rendering with jupyter-book ...", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(jb, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (out / "jupyter-book.log").write_text(log)
    if proc.returncode != 0:
        warnings = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln]
        print("\n".join(warnings[-40:]) or log[-4000:], file=sys.stderr)
        print(f"error: jupyter-book build failed (log: {out / 'jupyter-book.log'})", file=sys.stderr)
        return 1
    built = out / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    built.rename(html)
    shutil.rmtree(out / "_build", ignore_errors=True)
    summary_all = {"render_seconds": round(time.perf_counter() - t0, 1),
                   "total_seconds": round(time.perf_counter() - t_start, 1),
                   "chapters": {**previous, **summary}}
    summary_file.write_text(json.dumps(summary_all, indent=1))
    print(f"[{scale}] book built in {time.perf_counter() - t_start:.0f}s: {html / 'index.html'}")
    return 0


def _chapter_path(name: str) -> str:
    """``modular_mlp``, ``book/modular_mlp`` or ``book/modular_mlp.md`` -> ``book/modular_mlp.md``."""
    name = name.removesuffix(".md")
    if not name.startswith("book/"):
        name = f"book/{name}"
    return f"{name}.md"


# ---------------------------------------------------------------------------------------------
# Sphinx extension: the MyST source in the download menu
# ---------------------------------------------------------------------------------------------
def _add_myst_download(app, pagename, templatename, context, doctree):
    buttons = context.get("header_buttons") or []
    source = Path(app.srcdir) / MYST_DIR / f"{pagename}.md"
    # the whole-book PDF, only when this build made one (build(pdf=True) put it beside the pages)
    book_pdf = (Path(app.srcdir) / MYST_DIR / PDF_NAME).exists()
    for group in buttons:
        if group.get("label") != "download-buttons":
            continue
        for b in group["buttons"]:
            if b.get("label") == "download-source-button" and str(b.get("text")) == ".ipynb":
                b["tooltip"] = "Download the executed notebook"
        if source.exists():
            group["buttons"].insert(1, {
                "type": "link", "url": context["pathto"](f"{pagename}.md", 1), "text": ".md",
                "tooltip": "Download the MyST source (jupytext: open with `jupyter lab`)",
                "icon": "fas fa-file-code", "label": "download-myst-button"})
        if book_pdf:
            group["buttons"].append({
                "type": "link", "url": context["pathto"](PDF_NAME, 1), "text": "book .pdf",
                "tooltip": "Download the whole book as a PDF (typeset with LaTeX)",
                "icon": "fas fa-book", "label": "download-book-pdf-button"})


#: nodes whose text is never typeset: code, math, raw HTML
_VERBATIM = ("literal", "literal_block", "math", "math_block", "raw", "doctest_block", "comment")


def _typeset_doctree(app, doctree, docname):
    """Give every piece of running text of a page the book's typography
    (:func:`ntkbook.book.report.typeset`: true minus in numbers, →, ≥, ≤, ×): text printed by
    cells and glued from results is built with hyphen-minus and ASCII arrows by formatting code
    that cannot change (it is hashed into the stored results). Code, math and raw HTML are left as
    they are."""
    from docutils import nodes

    from ntkbook.book.report import typeset_characters

    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or any(type(a).__name__ in _VERBATIM for a in _ancestors(parent)):
            continue
        new = typeset_characters(str(text))
        if new != str(text):
            parent.replace(text, nodes.Text(new))


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


#: the PDF's LaTeX class (:func:`_latex_class`)
LATEX_CLASS = Path(__file__).parent / "latex" / "jupyterBook.cls"


def _latex_class(app):
    """For the PDF: write the book's LaTeX class over the one sphinx-jupyterbook-latex has just
    copied into the LaTeX build (same name, which the extension selects): Sphinx's manual class
    without the extension's bbm, pgfplots and tikz, which the book does not use and which would
    need the largest of Debian's TeX Live collections (``lib/ntkbook/book/latex/jupyterBook.cls``)."""
    if app.builder.format != "latex":
        return
    shutil.copy2(LATEX_CLASS, Path(app.outdir) / LATEX_CLASS.name)
    site = getattr(app.config, "external_site_map", None)
    unnumbered = [t.caption for t in site.root.subtrees if t.caption and not t.numbered] if site else []
    app.builder.context["preamble"] += _unnumbered_parts_preamble(unnumbered)


def _unnumbered_parts_preamble(captions: list[str]) -> str:
    """LaTeX that leaves the parts of ``_toc.yml`` without ``numbered: true`` (the back matter)
    unnumbered in the PDF, with their chapters, as the HTML does (the PDF would number them on)."""
    from sphinx.util.texescape import escape

    if not captions:
        return ""
    letters = [chr(ord("a") + i) for i in range(len(captions))]  # macro names take letters only
    names = "".join(rf"\def\ntkbook@u@{x}{{{escape(c)}}}" + "\n" for x, c in zip(letters, captions))
    tests = "".join(rf"\ifx\ntkbook@title\ntkbook@u@{x}\setcounter{{secnumdepth}}{{-2}}\fi" for x in letters)
    return ("\n% parts unnumbered in the HTML are unnumbered here too (ntkbook.book.build)\n\\makeatletter\n" + names
            + r"\AtBeginDocument{\edef\ntkbook@secnumdepth{\the\c@secnumdepth}}" + "\n"
            + r"\let\ntkbook@part\part" + "\n"
            + r"\def\part#1{\def\ntkbook@title{#1}\setcounter{secnumdepth}{\ntkbook@secnumdepth}" + tests
            + r"\ntkbook@part{#1}}" + "\n\\makeatother\n")


def _latex_table_widths(app, doctree, docname):
    """For the PDF: give every table of running text (the scorecard's, those glued from results)
    column widths in proportion to its longest cell text, so that the LaTeX writer sets wrapping
    columns rather than ``l`` columns that run off the page (a table of more than 30 rows, a
    ``longtable``, gets no other widths). Tables with widths already given keep them."""
    if app.builder.format != "latex":
        return
    from docutils import nodes

    for table in doctree.findall(nodes.table):
        if "colwidths-given" in table.get("classes", []):
            continue
        for tgroup in table.findall(nodes.tgroup):
            colspecs = [c for c in tgroup.children if isinstance(c, nodes.colspec)]
            longest = [0] * len(colspecs)
            for row in tgroup.findall(nodes.row):
                for i, entry in enumerate(e for e in row.children if isinstance(e, nodes.entry)):
                    if i < len(longest):
                        longest[i] = max(longest[i], len(entry.astext()))
            if not colspecs or sum(longest) < 80:  # fits on a line as it is
                break
            for spec, n in zip(colspecs, longest):
                spec["colwidth"] = min(max(n, 6), 60)
        else:
            table["classes"] = [*table.get("classes", []), "colwidths-given"]


def _previews_scripts_once(app, config) -> None:
    """Jupyter Book adds every ``.js`` file of the static folders to every page, in no useful order;
    popper and tippy.js are loaded by sphinx-tippy (``tippy_js``: popper first, deferred), so the
    copies Jupyter Book adds are dropped."""
    lib = "tippy-lib/"
    config.html_js_files = [f for f in config.html_js_files
                            if not (f[0] if isinstance(f, (tuple, list)) else f).startswith(lib)]


def _previews_cleanup(app, exception) -> None:
    """After sphinx-tippy has written each page's preview script (``_static/tippy/<page>.<uuid>.js``,
    a new name each time the page is written), remove the scripts that no page of the site loads
    any more (an incremental build rewrites some pages only: the others keep loading their earlier
    scripts, which stay) and its empty caches of web look-ups (which are off) from the site."""
    if exception or app.builder.format != "html":
        return
    out = Path(app.outdir)
    folder = out / "_static" / "tippy"
    if folder.is_dir():
        loaded = set()
        for page in out.rglob("*.html"):
            for src in re.findall(r'<script[^>]+src="([^"?]*_static/tippy/[^"?]+\.js)', page.read_text(errors="replace")):
                loaded.add((page.parent / src).resolve())
        for js in folder.rglob("*.js"):
            if js.resolve() not in loaded:
                js.unlink()
    for name in ("tippy_wiki_cache.json", "tippy_doi_cache.json", "tippy_rtd_cache.json"):
        Path(app.outdir, name).unlink(missing_ok=True)


def setup(app):
    """Sphinx entry point (``ntkbook.book.build`` in ``_config.yml``'s extra_extensions)."""
    app.connect("config-inited", _previews_scripts_once)
    app.connect("build-finished", _previews_cleanup, priority=900)  # after sphinx-tippy's (500)
    app.connect("html-page-context", _add_myst_download, priority=502)
    app.connect("builder-inited", _latex_class, priority=900)  # after sphinx-jupyterbook-latex's copy
    app.connect("doctree-resolved", _latex_table_widths)
    app.connect("doctree-resolved", _typeset_doctree)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ntkbook.book.build", description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=("smoke", "paper"), default=os.environ.get("SCALE", "paper"))
    parser.add_argument("--execute-only", nargs="*", metavar="CHAPTER",
                        help="only execute these chapters (all when none given); do not render")
    parser.add_argument("--chapter", metavar="CHAPTER",
                        help="execute this chapter only (e.g. modular_mlp) and render the book, reusing "
                             "the other chapters' notebooks from the last build at this scale")
    parser.add_argument("--out", type=Path, help="output folder (default _build/<scale>)")
    parser.add_argument("--edition", choices=EDITIONS, default=os.environ.get("EDITION") or "teacher",
                        help="teacher (default: with the solutions) or student (exercises without solutions; "
                             "built into _build/<scale>-student)")
    parser.add_argument("--pdf", action="store_true",
                        help="also render the whole book as a PDF (TeX Live), linked from every page's download menu")
    parser.add_argument("--pdf-only", action="store_true",
                        help="only render the PDF, from the notebooks executed by the last build at this scale")
    parser.add_argument("--record-times", action="store_true",
                        help="store the chapters' execution times in results/chapters.json")
    args = parser.parse_args(argv)
    if args.pdf_only:
        out = args.out or REPO / "_build" / (args.scale if args.edition == "teacher" else f"{args.scale}-{args.edition}")
        try:
            if (out / "src").is_dir():  # today's configuration with the notebooks executed earlier
                stage(out / "src", REPO, edition=args.edition, scale=args.scale)
            build_pdf(out, args.scale)
        except (ChapterError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.execute_only is not None:
        return build(args.scale, args.execute_only or None, execute_only=True, out=args.out,
                     times=args.record_times, edition=args.edition)
    if args.chapter:
        return build(args.scale, [_chapter_path(args.chapter)], out=args.out, reuse_others=True,
                     times=args.record_times, edition=args.edition, pdf=args.pdf)
    return build(args.scale, out=args.out, times=args.record_times, edition=args.edition, pdf=args.pdf)


if __name__ == "__main__":
    sys.exit(main())
