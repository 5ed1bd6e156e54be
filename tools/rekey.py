"""Re-key stored results to the behaviour hash, without recomputing anything (a one-off step).

Until December 2026 a result's ``code_sha256`` was :func:`ntkbook.codehash.legacy_code_hash`: the
bytes of every library module its experiment reaches. The hash is now
:func:`ntkbook.codehash.code_hash` (scheme ``ast-1``): the normalised syntax of what ``run`` and
``Config`` reach. A stored legacy hash cannot be compared with a new one, so without this step every
stored result would read "computed by earlier code" by the change of scheme alone.

For each stored entry, and each record that vouches for it (its provenance, and each agreeing
re-verification), this script:

1. takes the commit the record names (a record from uncommitted code is skipped: its code is not
   known) and extracts that commit's ``lib/`` into a temporary folder;
2. checks that :func:`legacy_code_hash` of the experiment in that tree equals the hash the record
   stores, so the commit is exactly the code that computed (or reproduced) the result;
3. computes :func:`code_hash` of the experiment in that same tree, and records it in the entry
   (``rekeyed``: the record it re-keys, the commit, both hashes, how; see
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
from ntkbook.codehash import SCHEME, Library, code_hash, legacy_code_hash  # noqa: E402
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
    before: str  # its freshness under the legacy scheme
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


def rekey_records(name: str, meta: Mapping[str, Any], lib_at: Callable[[str], Path | None]
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The re-keying records for a stored entry (``meta``: its provenance, reverified and rekeyed
    lists), and a note for every vouching record that could not be re-keyed."""
    module = experiments.EXPERIMENTS[name]
    prov = meta.get("provenance") or {}
    done = {(r.get("reverified"), r.get("scheme")) for r in meta.get("rekeyed") or []}
    candidates: list[tuple[int | None, Mapping[str, Any]]] = [(None, prov)]
    candidates += [(i, r) for i, r in enumerate(meta.get("reverified") or [])
                   if r.get("agree", True)]
    records, notes = [], []
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for index, rec in candidates:
        what = "provenance" if index is None else f"re-verification {index}"
        if (index, SCHEME) in done:
            continue
        stored = rec.get("code_sha256")
        if rec.get("code_hash_scheme") == SCHEME or not stored:
            continue  # already of this scheme, or nothing to re-key
        commit, why = _commit_of(rec)
        if commit is None:
            notes.append(f"{what}: not re-keyed ({why})")
            continue
        lib = lib_at(commit)
        if lib is None:
            notes.append(f"{what}: not re-keyed (commit {commit[:10]} is not in this repository)")
            continue
        try:
            legacy = {legacy_code_hash(module, lib)}
            if stored not in legacy:
                legacy.update(_own_hash(module, lib))
            new = code_hash(module, Library(lib))
        except Exception as exc:  # an old tree the hash cannot read: said, not hidden
            notes.append(f"{what}: not re-keyed (commit {commit[:10]}: {type(exc).__name__}: {exc})")
            continue
        if stored not in legacy:
            notes.append(f"{what}: not re-keyed (its stored hash {stored} is not the code hash of "
                         f"commit {commit[:10]}, by that commit's own code_hash or by "
                         f"legacy_code_hash: that commit is not the code)")
            continue
        records.append({
            "date": now, "scheme": SCHEME, "code_sha256": new, "reverified": index,
            "git_commit": commit, "legacy_code_sha256": stored,
            "how": (f"the code hash of lib/ at {commit[:10]} (legacy_code_hash, or that commit's "
                    f"own code_hash) equals the stored hash, so that commit is the code; "
                    f"code_hash ({SCHEME}) of the same tree"),
        })
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


def _state(result: Result, code_now: str) -> str:
    """Freshness under the legacy scheme: does a vouching record carry today's legacy hash?"""
    prov = result.provenance or {}
    vouch = [prov] if prov.get("code_sha256") == code_now else []
    vouch += [r for r in result.reverified if r.get("agree", True)
              and r.get("code_sha256") == code_now]
    if not vouch:
        return freshness.EARLIER
    return freshness.TODAY + (" (re-verified on a sample)" if all(v.get("sample") for v in vouch)
                              else "")


def rekey(store: Store, lib_at: Callable[[str], Path | None], *, dry_run: bool = False,
          report: Callable[[str], None] = print) -> list[EntryReport]:
    """Re-key every entry of ``store`` (see the module docstring); one report per entry."""
    out = []
    legacy_now = {n: legacy_code_hash(m) for n, m in experiments.EXPERIMENTS.items()}
    for row in store.list():
        if row["status"] != "ok" or row["name"] not in experiments.EXPERIMENTS:
            report(f"{row['name']}/{row['entry']}: skipped ({row['status']})")
            continue
        name = row["name"]
        result = Result(name, row["config"], provenance=row["provenance"],
                        reverified=row["reverified"], rekeyed=row["rekeyed"])
        rep = EntryReport(name, row["entry"], _state(result, legacy_now[name]))
        rep.records, rep.notes = rekey_records(name, row, lib_at)
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
