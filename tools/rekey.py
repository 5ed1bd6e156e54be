"""Re-key stored results to today's hashing scheme, without recomputing anything (one step per
change of scheme).

A stored hash can only be compared with a hash of the same scheme, so without this step every
stored result would read "computed by earlier code" when the scheme changes, by that change alone.
The schemes so far:

- until December 2026, :func:`ntkbook.codehash.legacy_code_hash`: the bytes of every library module
  the experiment reaches;
- ``ast-1``: :func:`ntkbook.codehash.code_hash`, the normalised syntax of what ``run`` and
  ``Config`` reach, the ``Config``'s ``smoke()`` and ``paper()`` presets included;
- ``ast-2`` (today's, :data:`ntkbook.codehash.SCHEME`): the same without the presets, which only
  choose a configuration (a stored entry keeps the configuration it was computed with).

For each stored entry, and each record that vouches for it (its provenance, each agreeing
re-verification, and each earlier re-keying of either), this script:

1. takes the commit the record names (a record from uncommitted code is skipped: its code is not
   known) and extracts that commit's ``lib/`` into a temporary folder;
2. checks that the hash of the experiment in that tree, under an earlier scheme (``ast-1``, the
   legacy hash, or the tree's own ``code_hash`` run in that tree), equals the hash the record
   stores, so the commit is exactly the code that computed (or reproduced) the result;
3. computes :func:`code_hash` of the experiment in that same tree under today's scheme, and records
   it in the entry (``rekeyed``: the record it re-keys, the commit, both hashes, how; see
   :meth:`ntkbook.store.Store.add_rekey`).

:mod:`ntkbook.freshness` then reads a re-keyed record as the record it re-keys, with the new hash:
the result is "today's code" exactly when the behaviour of the code that computed it is today's.
Nothing else in the entry changes (its arrays, scalars, provenance and re-verifications are
untouched; the JSON is re-signed). Running it again records nothing new.

    python tools/rekey.py                  # re-key every entry of results/, say per entry what happened
    python tools/rekey.py --dry-run        # the same, recording nothing
    python tools/rekey.py --results DIR
"""

from __future__ import annotations

import argparse
import datetime as _dt
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

from ntkbook import experiments, freshness  # noqa: E402
from ntkbook.codehash import SCHEME, SCHEMES, Library, code_hash, legacy_code_hash  # noqa: E402
from ntkbook.store import Result, Store  # noqa: E402


class LibraryAtCommit:
    """``lib/`` of any commit of a git repository, extracted once into a temporary folder."""

    def __init__(self, repo: Path = REPO):
        self.repo = Path(repo)
        self._tmp = tempfile.TemporaryDirectory(prefix="ntkbook-rekey-")
        self._libs: dict[str, Path | None] = {}

    def __call__(self, commit: str) -> Path | None:
        """The extracted ``lib`` folder of ``commit``, or None when the repository lacks it."""
        if commit not in self._libs:
            dest = Path(self._tmp.name) / commit
            archive = subprocess.run(["git", "-C", str(self.repo), "archive", "--format=tar",
                                      commit, "lib"], capture_output=True)
            if archive.returncode != 0:
                self._libs[commit] = None
            else:
                dest.mkdir(parents=True)
                tar = dest / "lib.tar"
                tar.write_bytes(archive.stdout)
                with tarfile.open(tar) as t:
                    t.extractall(dest, filter="data")
                tar.unlink()
                self._libs[commit] = dest / "lib"
        return self._libs[commit]

    def close(self) -> None:
        self._tmp.cleanup()


@dataclass
class EntryReport:
    """What happened to one stored entry."""

    name: str
    entry: str
    before: str  # its freshness under the earlier schemes
    after: str = ""  # under the new scheme, with what was recorded
    records: list[dict[str, Any]] = field(default_factory=list)  # the re-keyings recorded
    notes: list[str] = field(default_factory=list)  # records that could not be re-keyed, and why

    def line(self) -> str:
        how = "; ".join(self.notes)
        return (f"{self.name}/{self.entry}: before: {self.before}; after: {self.after}"
                f" ({len(self.records)} record(s) re-keyed{'; ' + how if how else ''})")


def _commit_of(record: Mapping[str, Any]) -> tuple[str | None, str]:
    """The commit a provenance or re-verification record names, or None and why not."""
    prov = record.get("provenance") if isinstance(record.get("provenance"), Mapping) else record
    commit = prov.get("git_commit")
    if not commit:
        return None, "no commit recorded"
    if prov.get("git_dirty") or prov.get("WARNING"):
        return None, f"computed from uncommitted changes to {str(commit)[:10]}"
    return str(commit), ""


def _vouching_records(meta: Mapping[str, Any]) -> list[tuple[int | None, str, Mapping[str, Any]]]:
    """``(index, what, record)`` of every record of an entry that can vouch for it: the provenance
    (index None), each agreeing re-verification (its index), and each earlier re-keying of either
    (the index of the record it re-keys; its own commit and hash)."""
    prov = meta.get("provenance") or {}
    reverified = list(meta.get("reverified") or [])
    out: list[tuple[int | None, str, Mapping[str, Any]]] = [(None, "provenance", prov)]
    out += [(i, f"re-verification {i}", r) for i, r in enumerate(reverified) if r.get("agree", True)]
    for j, rec in enumerate(meta.get("rekeyed") or []):
        if rec.get("scheme") == SCHEME or not rec.get("code_sha256"):
            continue
        index = rec.get("reverified")
        if index is not None and not (0 <= int(index) < len(reverified)
                                      and reverified[int(index)].get("agree", True)):
            continue
        what = "provenance" if index is None else f"re-verification {index}"
        out.append((index, f"{what} as re-keyed ({rec.get('scheme')}, re-keying {j})",
                    {"code_sha256": rec["code_sha256"], "git_commit": rec.get("git_commit"),
                     "code_hash_scheme": rec.get("scheme")}))
    return out


class _TreeHashes:
    """The hashes of an experiment in a commit's tree, under each earlier scheme, computed once."""

    def __init__(self, lib_at: Callable[[str], Path | None]):
        self.lib_at = lib_at
        self._libraries: dict[str, Library] = {}
        self._own: dict[tuple[str, str], list[str]] = {}

    def library(self, commit: str) -> Library | None:
        if commit not in self._libraries:
            lib = self.lib_at(commit)
            if lib is None:
                return None
            self._libraries[commit] = Library(lib)
        return self._libraries[commit]

    def matches(self, module: str, commit: str, stored: str) -> str | None:
        """The earlier scheme under which ``stored`` is the hash of ``module`` at ``commit``: an
        older :data:`SCHEMES` entry, ``"legacy"``, or ``"own"`` (that tree's own ``code_hash``);
        None if none is."""
        library = self._libraries[commit]
        for scheme in SCHEMES:
            if scheme != SCHEME and code_hash(module, library, scheme=scheme) == stored:
                return scheme
        if legacy_code_hash(module, library.lib) == stored:
            return "legacy"
        if (module, commit) not in self._own:
            self._own[(module, commit)] = _own_hash(module, library.lib)
        return "own" if stored in self._own[(module, commit)] else None


def rekey_records(name: str, meta: Mapping[str, Any], lib_at: Callable[[str], Path | None] | _TreeHashes
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The re-keying records for a stored entry (``meta``: its provenance, reverified and rekeyed
    lists), and a note for every vouching record that could not be re-keyed."""
    module = experiments.EXPERIMENTS[name]
    trees = lib_at if isinstance(lib_at, _TreeHashes) else _TreeHashes(lib_at)
    # (index, hash) of today's scheme recorded already: a record of the same result re-keyed from
    # two commits (its computation, and a proved refactor since) may give two hashes; each is kept
    done = {(r.get("reverified"), r.get("code_sha256")) for r in meta.get("rekeyed") or []
            if r.get("scheme") == SCHEME}
    keyed = {index for index, _ in done}
    records, notes = [], []
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    refused: dict[int | None, list[str]] = {}
    for index, what, rec in _vouching_records(meta):
        stored = rec.get("code_sha256")
        if not stored or rec.get("code_hash_scheme") == SCHEME:
            continue  # nothing to re-key, or already of today's scheme
        commit, why = _commit_of(rec)
        if commit is None:
            refused.setdefault(index, []).append(f"{what}: not re-keyed ({why})")
            continue
        try:
            library = trees.library(commit)
            if library is None:
                refused.setdefault(index, []).append(
                    f"{what}: not re-keyed (commit {commit[:10]} is not in this repository)")
                continue
            scheme = trees.matches(module, commit, stored)
            new = code_hash(module, library) if scheme else None
        except Exception as exc:  # an old tree the hash cannot read: said, not hidden
            refused.setdefault(index, []).append(
                f"{what}: not re-keyed (commit {commit[:10]}: {type(exc).__name__}: {exc})")
            continue
        if scheme is None:
            refused.setdefault(index, []).append(
                f"{what}: not re-keyed (its stored hash {stored} is not the code hash of commit "
                f"{commit[:10]} under any earlier scheme ({', '.join(s for s in SCHEMES if s != SCHEME)}, "
                f"legacy_code_hash, or that commit's own code_hash): that commit is not the code)")
            continue
        keyed.add(index)
        if (index, new) in done:
            continue
        done.add((index, new))
        records.append({
            "date": now, "scheme": SCHEME, "code_sha256": new, "reverified": index,
            "git_commit": commit, "legacy_code_sha256": stored, "from_scheme": scheme,
            "how": (f"the code hash of lib/ at {commit[:10]} under an earlier scheme ({scheme}) "
                    f"equals the stored hash, so that commit is the code; code_hash ({SCHEME}) of "
                    f"the same tree"),
        })
    for index, why in refused.items():
        if index not in keyed:  # another record of the same result was re-keyed: nothing lost
            notes += why
    return records, notes


#: how a tree's own ``ntkbook`` computed its code hash, run in a fresh interpreter on that tree
#: (before ``ntkbook.codehash`` existed, ``ntkbook.experiments.code_hash`` took the imported module)
_OWN_HASH = """
import importlib, sys
name = sys.argv[1]
try:
    from ntkbook.codehash import code_hash
    print(code_hash(name))
except ImportError:
    from ntkbook.experiments import code_hash
    print(code_hash(importlib.import_module(name)))
"""


def _own_hash(module: str, lib: Path) -> list[str]:
    """The code hash of ``module`` as the tree ``lib`` itself computed it (the legacy scheme
    changed over time: what it covered then is what its stored hashes mean), or nothing when
    that tree's code cannot run here."""
    import os

    env = {**os.environ, "PYTHONPATH": str(lib), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", _OWN_HASH, module], capture_output=True,
                         text=True, env=env, cwd=lib, timeout=300)
    line = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
    return [line[0]] if line and len(line[0]) == 16 else []


def _state(result: Result, earlier_now: Mapping[str, str]) -> str:
    """Freshness under an earlier scheme (``earlier_now``: today's code's hash under each): does a
    vouching record (or an earlier re-keying of one) carry today's hash of that scheme?"""
    meta = {"provenance": result.provenance, "reverified": result.reverified,
            "rekeyed": result.rekeyed}
    vouch = [(index, r) for index, _, r in _vouching_records(meta)
             if r.get("code_sha256") in earlier_now.values()]
    if not vouch:
        return freshness.EARLIER
    samples = [None if i is None else (result.reverified[i].get("sample")) for i, _ in vouch]
    return freshness.TODAY + (" (re-verified on a sample)" if all(samples) else "")


def rekey(store: Store, lib_at: Callable[[str], Path | None], *, dry_run: bool = False,
          report: Callable[[str], None] = print) -> list[EntryReport]:
    """Re-key every entry of ``store`` (see the module docstring); one report per entry."""
    out = []
    earlier_now = {n: {"legacy": legacy_code_hash(m),
                       **{s: code_hash(m, scheme=s) for s in SCHEMES if s != SCHEME}}
                   for n, m in experiments.EXPERIMENTS.items()}
    trees = _TreeHashes(lib_at)
    for row in store.list():
        if row["status"] != "ok" or row["name"] not in experiments.EXPERIMENTS:
            report(f"{row['name']}/{row['entry']}: skipped ({row['status']})")
            continue
        name = row["name"]
        result = Result(name, row["config"], provenance=row["provenance"],
                        reverified=row["reverified"], rekeyed=row["rekeyed"])
        rep = EntryReport(name, row["entry"], _state(result, earlier_now[name]))
        rep.records, rep.notes = rekey_records(name, row, trees)
        if rep.records and not dry_run:
            config = experiments.config_from_dict(name, row["config"])
            for rec in rep.records:
                store.add_rekey(name, row["version"], config, rec)
        result.rekeyed = [*result.rekeyed, *rep.records]
        rep.after = freshness.freshness(result).short()
        report(rep.line())
        out.append(rep)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(REPO / "results"), help="results folder")
    ap.add_argument("--dry-run", action="store_true", help="record nothing")
    args = ap.parse_args(argv)
    store = Store(Path(args.results))
    lib_at = LibraryAtCommit(REPO)
    try:
        reports = rekey(store, lib_at, dry_run=args.dry_run)
    finally:
        lib_at.close()
    today = sum(r.after.startswith(freshness.TODAY) for r in reports)
    was = sum(r.before.startswith(freshness.TODAY) for r in reports)
    print(f"{len(reports)} entries: today's code before {was}, after {today}"
          + (" [dry run: nothing recorded]" if args.dry_run else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
