"""How many stored results each code-hash design would have re-staled, on the project's own history.

A stored result is "today's" while the code hash of its experiment is the one it recorded. Two
designs of that hash are in :mod:`ntkbook.codehash`, both as they are in today's working tree:

- ``legacy``: :func:`ntkbook.codehash.legacy_code_hash`, the bytes of every library module an
  experiment reaches through imports (a docstring edit changes it);
- ``new``: :func:`ntkbook.codehash.code_hash`, the normalised syntax of what ``run``/``Config``
  reach.

For every commit on the first-parent history of HEAD since ``lib/ntkbook/codehash.py`` first
appeared, the script extracts that commit's ``lib/`` into a temporary folder and computes both
hashes of every experiment module present there (only where ``lib/`` changed; otherwise the previous
commit's hashes are reused). Commit C *re-stales* a stored result under a design when the hash of
its experiment under that design differs between C's first parent (the previous commit of the list)
and C, and the result (``results/<experiment>/<entry>/result.json``) exists at that parent. An
experiment whose hash cannot be computed in some tree (an exception) is recorded as ``error`` there,
and a comparison with an ``error`` on either side is counted as undetermined, not as a re-stale.

    python tools/hash_history.py                        # the whole history, tables on stdout
    python tools/hash_history.py --out /tmp/hh.md       # and the same markdown into a file
    python tools/hash_history.py --limit 5              # only the last 5 commits (a quick test)

Progress goes to stderr. Nothing is cached in the repository; the whole history takes a few
minutes on one core.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

from ntkbook.codehash import Library, code_hash, legacy_code_hash  # noqa: E402

#: the file whose first appearance starts the history examined
ANCHOR = "lib/ntkbook/codehash.py"
DESIGNS = ("legacy", "new")
ERROR = "error"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def commits_since(repo: Path, path: str = ANCHOR) -> list[str]:
    """The first-parent history of HEAD (oldest first) from the first commit on it that has
    ``path``."""
    chain = _git(repo, "rev-list", "--reverse", "--first-parent", "HEAD").split()
    touching = _git(repo, "rev-list", "--reverse", "--first-parent", "HEAD", "--", path).split()
    if not touching:
        raise SystemExit(f"{path} is on no commit of the first-parent history of HEAD")
    return chain[chain.index(touching[0]):]


@dataclass
class Row:
    """One commit: what its tree hashes and stores, and what it re-stales against its parent."""

    sha: str
    date: str
    subject: str
    lib_tree: str | None  # the tree id of its lib/ (None: no lib/)
    computed: bool = False  # hashes computed from this tree (not reused from the parent)
    hashes: dict[str, dict[str, str]] = field(default_factory=dict)  # design -> experiment -> hash
    errors: dict[tuple[str, str], str] = field(default_factory=dict)  # (design, exp) -> message
    results: Counter = field(default_factory=Counter)  # experiment -> stored results here
    parent: str | None = None  # the previous commit of the list (None: the first, a baseline)
    lib_changed: bool = False  # lib/ differs from the parent's
    restaled: dict[str, Counter] = field(default_factory=dict)  # design -> exp -> results
    undetermined: dict[str, Counter] = field(default_factory=dict)  # design -> exp -> results

    def total(self, design: str) -> int:
        return sum(self.restaled.get(design, Counter()).values())


def _meta(repo: Path, sha: str) -> tuple[str, str]:
    out = _git(repo, "log", "-1", "--date=short", "--format=%ad%x1f%s", sha).rstrip("\n")
    date, _, subject = out.partition("\x1f")
    return date, subject


def _lib_tree(repo: Path, sha: str) -> str | None:
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{sha}:lib"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def stored_results(repo: Path, sha: str) -> Counter:
    """How many ``results/<experiment>/<entry>/result.json`` the tree of ``sha`` holds, by
    experiment."""
    out = _git(repo, "ls-tree", "-r", "--name-only", sha, "results/")
    counts: Counter = Counter()
    for path in out.splitlines():
        parts = path.split("/")
        if len(parts) == 4 and parts[0] == "results" and parts[3] == "result.json":
            counts[parts[1]] += 1
    return counts


def _extract_lib(repo: Path, sha: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha, "lib"],
                             check=True, capture_output=True).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        t.extractall(dest, filter="data")
    return dest / "lib"


def experiment_names(lib: Path) -> list[str]:
    """The experiment modules of the library below ``lib``."""
    folder = lib / "ntkbook" / "experiments"
    return sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))


def tree_hashes(lib: Path) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], str]]:
    """Both designs' hashes of every experiment below ``lib`` (``"error"`` where one raised), and
    the error messages."""
    library = Library(lib)  # a parse of its own: nothing shared with another tree
    designs: dict[str, Callable[[str], str]] = {
        "legacy": lambda mod: legacy_code_hash(mod, lib),
        "new": lambda mod: code_hash(mod, library),
    }
    hashes: dict[str, dict[str, str]] = {d: {} for d in DESIGNS}
    errors: dict[tuple[str, str], str] = {}
    for name in experiment_names(lib):
        for design in DESIGNS:
            try:
                hashes[design][name] = designs[design](f"ntkbook.experiments.{name}")
            except Exception as exc:  # a historical tree one design cannot read: note it, go on
                hashes[design][name] = ERROR
                errors[(design, name)] = f"{type(exc).__name__}: {exc}"
    return hashes, errors


def _compare(row: Row, prev: Row) -> None:
    """What ``row``'s commit re-stales of the results stored at ``prev``."""
    row.parent = prev.sha
    row.lib_changed = row.lib_tree != prev.lib_tree
    for design in DESIGNS:
        restaled, undetermined = Counter(), Counter()
        before, after = prev.hashes.get(design, {}), row.hashes.get(design, {})
        for name, n in prev.results.items():
            old, new = before.get(name), after.get(name)  # None: no such experiment module
            if old == new:
                continue
            if ERROR in (old, new):
                undetermined[name] += n
            else:
                restaled[name] += n
        row.restaled[design], row.undetermined[design] = restaled, undetermined


def history(repo: Path, commits: list[str], progress: Callable[[str], None] | None = None
            ) -> list[Row]:
    """A :class:`Row` per commit of ``commits`` (oldest first, each the first parent of the next);
    the first is the baseline the second is compared with."""
    repo = Path(repo)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ntkbook-hash-history-") as tmp:
        for i, sha in enumerate(commits):
            date, subject = _meta(repo, sha)
            row = Row(sha, date, subject, _lib_tree(repo, sha), results=stored_results(repo, sha))
            prev = rows[-1] if rows else None
            if prev is not None and row.lib_tree == prev.lib_tree:
                row.hashes = prev.hashes  # lib/ unchanged: the same hashes
            elif row.lib_tree is not None:
                lib = _extract_lib(repo, sha, Path(tmp) / f"{i:05d}")
                row.hashes, row.errors = tree_hashes(lib)
                row.computed = True
                shutil.rmtree(lib.parent)
            if prev is not None:
                _compare(row, prev)
            rows.append(row)
            if progress:
                what = "hashed" if row.computed else "lib/ unchanged"
                stale = "" if prev is None else \
                    f", re-stales legacy {row.total('legacy')} / new {row.total('new')}"
                progress(f"commit {i + 1}/{len(commits)} {sha[:9]} {what}{stale}")
    return rows


def examined(rows: list[Row]) -> list[Row]:
    """The rows compared with a parent (all but the baseline)."""
    return [r for r in rows if r.parent is not None]


def new_only(row: Row) -> dict[str, int]:
    """Experiments whose stored results the new design re-stales at ``row`` and the legacy does
    not."""
    legacy = row.restaled.get("legacy", Counter())
    return {k: n for k, n in row.restaled.get("new", Counter()).items() if k not in legacy}


def summary(rows: list[Row]) -> dict[str, object]:
    """The numbers of the summary table."""
    ex = examined(rows)
    errors = [(r.sha, d, name, msg) for r in rows if r.computed
              for (d, name), msg in r.errors.items()]
    return {
        "baseline": rows[0].sha if rows else None,
        "examined": len(ex),
        "lib_changed": sum(r.lib_changed for r in ex),
        "restaling": {d: sum(r.total(d) > 0 for r in ex) for d in DESIGNS},
        "restales": {d: sum(r.total(d) for r in ex) for d in DESIGNS},
        "undetermined": {d: sum(sum(r.undetermined.get(d, Counter()).values()) for r in ex)
                         for d in DESIGNS},
        "new_only": [r for r in ex if new_only(r)],
        "errors": errors,
        "trees_hashed": sum(r.computed for r in rows),
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _experiments(c: Counter | dict[str, int]) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(c.items())) or "—"


def markdown(rows: list[Row], seconds: float | None = None) -> str:
    """The summary table, the per-commit table of commits that re-stale anything, and the
    details of new-only re-stales and errors."""
    s = summary(rows)
    out = ["# Stored results re-staled by each code-hash design", ""]
    if rows:
        first, last = rows[0], rows[-1]
        out += [f"First-parent history of HEAD from `{first.sha[:9]}` ({first.date}, the baseline)"
                f" to `{last.sha[:9]}` ({last.date}); today's `legacy_code_hash` and `code_hash`"
                " applied to each commit's `lib/`.", ""]
    lines = [
        ("commits examined (each against its first parent)", s["examined"], s["examined"]),
        ("commits that changed lib/", s["lib_changed"], s["lib_changed"]),
        ("commits that re-staled ≥ 1 stored result", *s["restaling"].values()),
        ("stored-result re-stales in total", *s["restales"].values()),
        ("commits where new re-stales an experiment legacy does not", "—", len(s["new_only"])),
        ("undetermined (an `error` hash on either side)", *s["undetermined"].values()),
        ("hash errors (design × experiment × tree hashed)",
         sum(e[1] == "legacy" for e in s["errors"]), sum(e[1] == "new" for e in s["errors"])),
    ]
    out += ["| | legacy | new |", "|---|---:|---:|"]
    out += [f"| {label} | {a} | {b} |" for label, a, b in lines]
    extra = f"trees hashed: {s['trees_hashed']}"
    if seconds is not None:
        extra += f"; runtime: {seconds:.0f} s"
    out += ["", extra, ""]

    out += ["## Commits that re-stale stored results", "",
            "| commit | date | subject | legacy | new | experiments (new) |",
            "|---|---|---|---:|---:|---|"]
    restaling = [r for r in examined(rows) if r.total("legacy") or r.total("new")]
    for r in restaling:
        out.append(f"| `{r.sha[:9]}` | {r.date} | {_cell(_short(r.subject))} | "
                   f"{r.total('legacy')} | {r.total('new')} | {_experiments(r.restaled['new'])} |")
    out += ["", "(none)", ""] if not restaling else [""]

    if s["new_only"]:
        out += ["## New-only re-stales (new re-stales, legacy does not)", ""]
        for r in s["new_only"]:
            out.append(f"- `{r.sha[:9]}` {_cell(_short(r.subject))}: {_experiments(new_only(r))}")
        out.append("")
    if s["errors"]:
        out += ["## Hash errors", "", "| commit | design | experiment | error |",
                "|---|---|---|---|"]
        for sha, design, name, msg in s["errors"]:
            out.append(f"| `{sha[:9]}` | {design} | {name} | {_cell(_short(msg, 100))} |")
        out.append("")
    return "\n".join(out)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: this one)")
    parser.add_argument("--limit", type=int, help="only the last N commits (each against its parent)")
    parser.add_argument("--out", type=Path, help="also write the markdown into this file")
    args = parser.parse_args(None if argv is None else list(argv))
    commits = commits_since(args.repo)
    if args.limit is not None:
        commits = commits[-(args.limit + 1):]  # the N commits and the parent of the first
    start = time.monotonic()
    rows = history(args.repo, commits, progress=lambda m: print(m, file=sys.stderr, flush=True))
    text = markdown(rows, time.monotonic() - start)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
