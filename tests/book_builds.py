"""The book builds that tests read, each run once per test run: the whole book at smoke scale
(``tests/test_book.py``), at paper scale with no data set, no download cache and downloads off
(``tests/test_paper_build.py``), and the whole-book PDF rendered from the smoke build's executed
notebooks (``tests/test_pdf.py``: it waits for the smoke build, then runs alongside the tests that
read the smoke book; without TeX Live it records why it was skipped).

Under xdist (``make test``) the controller starts both builds as background processes as soon as
a worker has collected the tests (``pytest_xdist_node_collection_finished`` in tests/conftest.py),
and the tests that read a build are collected last, so the workers run the unit tests while the
builds run and the cores stay busy; a test that reads a build waits for it. Without xdist (or in a
run whose controller did not start it) the first test that needs a build runs it itself, under a
file lock, so two processes never build into one folder.

A build writes what the tests read to one JSON file, ``_build/ci/<run id>/<name>.json``: its exit
code, its output, the chapter summary, and ``git status`` before and after it.

Run by the controller as ``python tests/book_builds.py NAME RUN_ID``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "_build" / "ci"
#: where the smoke build writes the book (tests/test_book.py reads its pages)
SMOKE_OUT = REPO / "_build" / "smoke"
#: build name -> the test files that read it (the smoke book's pages at two widths: two files, so
#: that two workers check them at once when the build is done)
READERS = {"smoke": ("tests/test_book.py", "tests/test_book_phone.py"), "paper": ("tests/test_paper_build.py",),
           "pdf": ("tests/test_pdf.py",)}
#: builds that render what another build executed: name -> the build they wait for
NEEDS = {"pdf": "smoke"}
#: how often a waiting test looks for the result (seconds)
POLL = 2.0


def run_dir(run_id: str | None) -> Path:
    """The folder of one test run's builds (``local`` when the run has no xdist id)."""
    return ROOT / (run_id or "local")


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=REPO,
                          capture_output=True, text=True).stdout


def _command(name: str, where: Path) -> tuple[list[str], dict, dict]:
    """The build's command line, its environment and the paths its tests check."""
    if name == "pdf":  # the smoke build's notebooks, rendered as a PDF (its HTML is left as it is)
        cmd = [sys.executable, "-m", "ntkbook.book.build", "--scale", "smoke", "--out", str(SMOKE_OUT), "--pdf-only"]
        return cmd, dict(os.environ), {"out": str(SMOKE_OUT), "pdf": str(SMOKE_OUT / "pdf" / "ntkbook.pdf")}
    cmd = [sys.executable, "-m", "ntkbook.book.build", "--scale", name]
    if name == "smoke":
        return cmd + ["--out", str(SMOKE_OUT)], dict(os.environ), {"out": str(SMOKE_OUT)}
    if name != "paper":
        raise ValueError(f"unknown build {name!r}: the builds are {sorted(READERS)}")
    empty, out = where / "paper-no-data", where / "paper"
    empty.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NTKBOOK_DATA": str(empty), "XDG_CACHE_HOME": str(where / "paper-cache"),
           "NTKBOOK_OFFLINE": "1", "NTKBOOK_SCRATCH": str(where / "paper-scratch")}
    env.pop("NTKBOOK_RESULTS", None)  # the repository's committed results
    return cmd + ["--out", str(out)], env, {"out": str(out), "no_data": str(empty)}


def _skip_reason(name: str, run_id: str | None) -> str | None:
    """Why build ``name`` cannot run here (its tools are missing, the build it renders failed), or
    None; waits for the build it needs (:data:`NEEDS`)."""
    if name not in NEEDS:
        return None
    from ntkbook.book import build as bookbuild  # noqa: PLC0415

    if missing := bookbuild.missing_pdf_tools() + [t for t in ("pdfinfo", "pdfimages", "pdftotext")
                                                   if shutil.which(t) is None]:
        return (f"{', '.join(missing)} not installed (TeX Live, poppler-utils: `make test` installs them "
                "when run as root); the PDF was not built")
    needed = _wait(NEEDS[name], run_id)
    if needed.get("code") != 0:
        return f"the {NEEDS[name]} build failed (its tests say why); the PDF was not built"
    return None


def _wait(name: str, run_id: str | None) -> dict:
    """The result of build ``name`` of this run: waited for when it was started in the background,
    else run here (under the file lock)."""
    where = run_dir(run_id)
    done, started = where / f"{name}.json", where / f"{name}.started"
    if started.exists():
        pid = json.loads(started.read_text())["pid"]
        while not done.exists() and _alive(pid):
            time.sleep(POLL)
        return json.loads(done.read_text()) if done.exists() else {"code": -1}
    where.mkdir(parents=True, exist_ok=True)
    with open(where / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if run_id and done.exists():
            return json.loads(done.read_text())
        return build(name, run_id)


def build(name: str, run_id: str | None) -> dict:
    """Run build ``name`` in the foreground and write its result file; returns the result."""
    where = run_dir(run_id)
    where.mkdir(parents=True, exist_ok=True)
    cmd, env, paths = _command(name, where)
    skip = _skip_reason(name, run_id)
    before = _git_status()
    start = time.perf_counter()
    if skip:
        proc = subprocess.CompletedProcess(cmd, None, "", "")
    else:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    summary_file = Path(paths["out"]) / "chapters.json"
    result = {"name": name, "code": proc.returncode, "log": proc.stdout + proc.stderr, "skip": skip,
              "summary": json.loads(summary_file.read_text()) if summary_file.exists() else {},
              "status_before": before, "status_after": _git_status(),
              "seconds": round(time.perf_counter() - start, 1), **paths}
    tmp = where / f"{name}.json.part"
    tmp.write_text(json.dumps(result))
    tmp.replace(where / f"{name}.json")  # atomic: a waiting test never reads half a file
    return result


def start(name: str, run_id: str) -> subprocess.Popen:
    """Start build ``name`` for run ``run_id`` in the background (the xdist controller calls this);
    earlier runs' build folders are removed first."""
    ROOT.mkdir(parents=True, exist_ok=True)
    for old in ROOT.iterdir():
        if old.is_dir() and old.name != run_id:
            shutil.rmtree(old, ignore_errors=True)
    where = run_dir(run_id)
    where.mkdir(parents=True, exist_ok=True)
    log = open(where / f"{name}.log", "w")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), name, run_id], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (where / f"{name}.started").write_text(json.dumps({"pid": proc.pid}))
    return proc


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def result(name: str) -> dict:
    """What build ``name`` of this test run returned: read when it is done, waited for when it was
    started in the background, else run here (once per run, under a file lock)."""
    import pytest  # noqa: PLC0415

    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    where = run_dir(run_id)
    done, started = where / f"{name}.json", where / f"{name}.started"
    if started.exists():
        pid = json.loads(started.read_text())["pid"]
        while not done.exists():
            if not _alive(pid) and not done.exists():
                log = (where / f"{name}.log").read_text() if (where / f"{name}.log").exists() else ""
                pytest.fail(f"the background {name} build (pid {pid}) ended without writing {done}; "
                            f"its output ends:\n{log[-3000:]}")
            time.sleep(POLL)
        return json.loads(done.read_text())
    where.mkdir(parents=True, exist_ok=True)
    with open(where / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if run_id and done.exists():
            return json.loads(done.read_text())
        return build(name, run_id)


if __name__ == "__main__":
    try:
        build(sys.argv[1], sys.argv[2])
    except BaseException:  # the waiting tests read the failure instead of waiting for a file
        import traceback  # noqa: PLC0415

        where = run_dir(sys.argv[2])
        (where / f"{sys.argv[1]}.json").write_text(json.dumps(
            {"name": sys.argv[1], "code": -1, "log": traceback.format_exc(), "summary": {},
             "status_before": "", "status_after": ""}))
        raise
