"""Build the book: jupytext -> papermill (with the chapter's ``scale``) -> jupyter-book.

``python -m ntkbook.bookbuild --scale paper`` (what ``make book`` runs):

1. every chapter listed in ``_toc.yml`` (``book/*.md``, jupytext MyST notebooks) is converted to a
   notebook and executed by papermill with the parameter ``scale``; papermill's injected
   parameters cell is tagged ``remove-cell`` so the HTML does not show it;
2. the executed notebooks, with ``_config.yml``, ``_toc.yml``, ``references.bib`` and ``_static/``,
   are staged in ``_build/<scale>/src`` (the source tree is never written to);
3. ``jupyter-book build`` renders them with execution off and warnings as errors
   (``-W -n --keep-going``) into ``_build/<scale>/html``.

A chapter that raises fails the build with the chapter's name, the cell and the error.
``--execute-only book/x.md`` executes (and checks) chapters without rendering the book.
A summary with the status and wall time of each chapter is written to
``_build/<scale>/chapters.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAGED = ("_config.yml", "_toc.yml", "references.bib")
# MathJax lives in _mathjax/mathjax, not _static: Jupyter Book adds every .js file under
# _static to every page, which would load all of MathJax's bundles at once.
MATHJAX_DIR = "_mathjax"


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
    for cell in out.cells:
        if cell.cell_type == "code":
            cell.outputs = _merge_streams(cell.get("outputs", []))
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]
    nbformat.write(out, dest)
    return elapsed


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


def build(scale: str, chapters: list[str] | None = None, execute_only: bool = False,
          out: Path | None = None) -> int:
    out = out or REPO / "_build" / scale
    src_dir = out / "src"
    all_chapters = toc_chapters()
    todo = chapters or all_chapters
    unknown = [c for c in todo if not (REPO / c).exists()]
    if unknown:
        print(f"error: chapter files not found: {unknown}", file=sys.stderr)
        return 2
    if not execute_only:
        ensure_mathjax()
        if src_dir.exists():
            shutil.rmtree(src_dir)
        src_dir.mkdir(parents=True)
        for name in STAGED:
            shutil.copy2(REPO / name, src_dir / name)
        shutil.copytree(REPO / "_static", src_dir / "_static", dirs_exist_ok=True)
        shutil.copytree(REPO / MATHJAX_DIR, src_dir / MATHJAX_DIR, dirs_exist_ok=True)
    summary: dict[str, dict] = {}
    failed = []
    for chapter in todo:
        dest = src_dir / Path(chapter).with_suffix(".ipynb")
        print(f"[{scale}] executing {chapter} ...", flush=True)
        try:
            seconds = execute_chapter(REPO / chapter, dest, scale)
            summary[chapter] = {"status": "ok", "seconds": round(seconds, 1)}
            print(f"[{scale}] {chapter}: ok in {seconds:.1f}s", flush=True)
        except Exception as exc:  # report every failing chapter, then fail
            summary[chapter] = {"status": "failed", "error": str(exc)}
            failed.append(chapter)
            print(f"[{scale}] {exc}", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "chapters.json").write_text(json.dumps(summary, indent=1))
    if failed:
        print(f"error: {len(failed)} chapter(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if execute_only:
        return 0
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
    summary_all = {"render_seconds": round(time.perf_counter() - t0, 1), "chapters": summary}
    (out / "chapters.json").write_text(json.dumps(summary_all, indent=1))
    print(f"[{scale}] book built: {html / 'index.html'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ntkbook.bookbuild", description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=("smoke", "paper"), default=os.environ.get("SCALE", "paper"))
    parser.add_argument("--execute-only", nargs="*", metavar="CHAPTER",
                        help="only execute these chapters (all when none given); do not render")
    parser.add_argument("--out", type=Path, help="output folder (default _build/<scale>)")
    args = parser.parse_args(argv)
    if args.execute_only is not None:
        return build(args.scale, args.execute_only or None, execute_only=True, out=args.out)
    return build(args.scale, out=args.out)


if __name__ == "__main__":
    sys.exit(main())
