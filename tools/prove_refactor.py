"""Prove that a refactor keeps what the code computes, and re-key the stored results it touched.

The code hash (:func:`ntkbook.codehash.code_hash`) follows behaviour, but it cannot tell a
behaviour-preserving refactor (folding repeated validation into a helper, merging two training
loops) from a behaviour change: both change the syntax that ``run`` reaches, so both make the
stored results of the experiments they touch read "computed by earlier code". This tool turns
the first kind back into "today's code", with evidence, and refuses the second:

1. ``BASE`` is the commit before the refactor, ``HEAD`` the committed refactor (the working tree's
   ``lib/`` must be clean: the re-keying names the commit whose code it vouches for);
2. every experiment whose :func:`code_hash` differs between ``lib/`` at BASE and at HEAD is
   *touched*; an untouched one needs nothing;
3. each touched experiment that has stored entries vouched for by BASE's code (its provenance, an
   agreeing re-verification, or a re-keying of either, with BASE's hash) is run at its smoke preset
   twice, once with BASE's library and once with HEAD's, each in a fresh interpreter, against the
   same stored results and data; every output array must be identical byte for byte (dtype and
   shape too), every scalar identical in its exact JSON text (wall times the experiment declares in
   ``REPRODUCE_TOLERANCE["ignore"]``, and a value that is the commit of the code that ran, aside);
   and the paper preset and every stored
   entry's configuration must be accepted by both and read back the same;
4. when all of that holds, each vouching record of each such entry gets a re-keying record
   (``rekeyed``: HEAD's hash, the commit, BASE and how it was proved; see
   :meth:`ntkbook.store.Store.add_rekey`), which :mod:`ntkbook.freshness` reads as the record it
   re-keys (date, sample and environment kept). When any of it fails, nothing is recorded for that
   experiment and the report says what differed: its results stay "computed by earlier code" until
   ``python -m ntkbook reproduce`` reruns them.

The smoke run exercises the code paths the smoke preset reaches, not every branch of the paper
scale; a refactor should come with its own equivalence tests beside this proof.

    python tools/prove_refactor.py BASE              # prove, re-key, say per entry what happened
    python tools/prove_refactor.py BASE --dry-run    # prove and report, record nothing
    python tools/prove_refactor.py BASE --only influence_map,influence_width
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))
sys.path.insert(0, str(REPO / "tools"))

from ntkbook import experiments, freshness  # noqa: E402
from ntkbook.codehash import SCHEME, Library, code_hash  # noqa: E402
from ntkbook.store import COMMIT_ENV, Result, Store  # noqa: E402
from rekey import LibraryAtCommit  # noqa: E402

#: what runs in each fresh interpreter: the smoke preset of one experiment with the library on
#: ``PYTHONPATH``, and the configurations read back; outputs written beside ``out``
_RUNNER = r"""
import dataclasses, json, sys
import numpy as np
from ntkbook import experiments

name, out, configs_file = sys.argv[1], sys.argv[2], sys.argv[3]
module = experiments.get(name)
configs = {"paper": dataclasses.asdict(module.Config.paper())}
for key, cfg in json.loads(open(configs_file).read()).items():
    configs[key] = dataclasses.asdict(experiments.config_from_dict(name, cfg))
result = module.run(module.Config.smoke())
arrays, odd = {}, {}
for key, value in result.arrays.items():
    a = np.asarray(value)
    if a.dtype == object:
        odd[key] = repr(value)
    else:
        arrays[key] = a
np.savez(out + ".npz", **arrays)
with open(out + ".json", "w") as f:
    json.dump({"scalars": result.scalars, "object_arrays": odd, "configs": configs}, f,
              sort_keys=True, default=repr)
"""


@dataclass
class Proof:
    """The outcome of running one experiment's smoke preset at BASE and at HEAD."""

    name: str
    identical: bool
    differences: list[str] = field(default_factory=list)
    arrays: int = 0
    scalars: int = 0

    def how(self, base: str, head: str) -> str:
        return (f"refactor proof (tools/prove_refactor.py): the smoke preset run with lib/ at "
                f"{base[:10]} and at {head[:10]}, each in a fresh interpreter, gave identical "
                f"outputs ({self.arrays} arrays byte for byte, {self.scalars} scalars by their "
                f"exact JSON text, wall times and the commit that ran aside); the paper preset and the stored configurations are accepted "
                f"by both and read back the same")


def _count_scalars(obj: Any) -> int:
    if isinstance(obj, Mapping):
        return sum(_count_scalars(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_count_scalars(v) for v in obj)
    return 1


def compare_outputs(base: Path, head: Path, *, ignore: Mapping[str, str] | None = None,
                    commits: tuple[set, set] = (set(), set())) -> list[str]:
    """What differs between two runner outputs (``<stem>.npz`` and ``<stem>.json`` each);
    empty when they are identical: same array names, dtypes, shapes and bytes, and the same JSON
    text of the scalars, object arrays and configurations.

    Two kinds of scalar are not results and are passed over: those the experiment declares so
    (``ignore``: the ``{pattern: reason}`` of its ``REPRODUCE_TOLERANCE``, wall times) and
    those that are the commit of the code that ran (a value in ``commits[0]`` at BASE and in
    ``commits[1]`` at HEAD: the provenance of a result computed during the run)."""
    import fnmatch

    import numpy as np

    ignore = dict(ignore or {})

    out = []
    with np.load(str(base) + ".npz") as a, np.load(str(head) + ".npz") as b:
        if sorted(a.files) != sorted(b.files):
            out.append(f"array names differ: only at BASE {sorted(set(a.files) - set(b.files))}, "
                       f"only at HEAD {sorted(set(b.files) - set(a.files))}")
        for key in sorted(set(a.files) & set(b.files)):
            x, y = a[key], b[key]
            if x.dtype != y.dtype or x.shape != y.shape:
                out.append(f"array {key}: {x.dtype}{list(x.shape)} at BASE, {y.dtype}{list(y.shape)} at HEAD")
            elif x.tobytes() != y.tobytes():
                bx = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, x.itemsize)
                by = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(y.size, y.itemsize)
                diff = int(np.count_nonzero((bx != by).any(axis=1)))
                out.append(f"array {key}: {diff} of {x.size} entries differ in their bits")
    ja = json.loads(Path(str(base) + ".json").read_text())
    jb = json.loads(Path(str(head) + ".json").read_text())
    for part in ("scalars", "object_arrays", "configs"):
        fa, fb = _flat(ja.get(part)), _flat(jb.get(part))
        for key in sorted(set(fa) | set(fb)):
            if part == "scalars" and any(fnmatch.fnmatchcase(key, p) for p in ignore):
                continue
            if (part == "scalars" and all(isinstance(v, (str, type(None))) for v in (fa.get(key), fb.get(key)))
                    and fa.get(key) in commits[0] and fb.get(key) in commits[1]):
                continue
            if key not in fa or key not in fb:
                out.append(f"{part} {key}: only at {'HEAD' if key in fb else 'BASE'}")
            elif json.dumps(fa[key]) != json.dumps(fb[key]):
                out.append(f"{part} {key}: {json.dumps(fa[key])[:60]} at BASE, {json.dumps(fb[key])[:60]} at HEAD")
    return out


def _flat(obj: Any, path: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{path}.{k}" if path else str(k)))
        return out or {path: {}}
    if isinstance(obj, list) and obj and any(isinstance(v, (Mapping, list)) for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flat(v, f"{path}[{i}]"))
        return out
    return {path: obj}


def run_smoke(name: str, lib: Path, out: Path, configs: Mapping[str, Any], *,
              env: Mapping[str, str] | None = None, timeout: float = 3600) -> str:
    """Run ``name``'s smoke preset with the library ``lib`` (a ``lib`` folder) in a fresh
    interpreter, writing ``out.npz`` and ``out.json``; returns "" or what went wrong."""
    configs_file = Path(str(out) + ".configs.json")
    configs_file.write_text(json.dumps(dict(configs), default=repr))
    run_env = {**os.environ, **(env or {}), "PYTHONPATH": str(lib), "JAX_PLATFORMS": "cpu"}
    with tempfile.TemporaryDirectory(prefix="ntkbook-proof-cache-") as cache:
        run_env.setdefault("NTKBOOK_CACHE", cache)
        run_env["NTKBOOK_CACHE"] = cache  # a smoke result reused from a cache would prove nothing
        proc = subprocess.run([sys.executable, "-c", _RUNNER, name, str(out), str(configs_file)],
                              capture_output=True, text=True, env=run_env, cwd=str(out.parent),
                              timeout=timeout)
    if proc.returncode != 0:
        return f"the smoke run with {lib} failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
    return ""


def prove(name: str, lib_base: Path, lib_head: Path, configs: Mapping[str, Any], work: Path, *,
          env: Mapping[str, str] | None = None, commits: tuple[set, set] = (set(), set())) -> Proof:
    """Run ``name``'s smoke preset with both libraries and compare (see the module docstring and
    :func:`compare_outputs`; wall times declared by the experiment and the commit of the code
    that ran are passed over)."""
    import numpy as np

    outs = {}
    for side, lib, known in (("base", lib_base, commits[0]), ("head", lib_head, commits[1])):
        outs[side] = work / f"{name}.{side}"
        # each side's results (and the data entries it computes on the way) record that side's
        # commit, whatever HEAD of the checkout is by the time they are stored (a commit made
        # during a long proof would otherwise be recorded, and differ)
        pinned = sorted(c for c in known if c)
        side_env = {**(env or {}), **({COMMIT_ENV: pinned[0]} if len(pinned) == 1 else {})}
        failure = run_smoke(name, lib, outs[side], configs, env=side_env)
        if failure:
            return Proof(name, False, [failure])
    module = experiments.get(name)
    ignore = {**freshness.WALL_TIMES, **(getattr(module, "REPRODUCE_TOLERANCE", None) or {}).get("ignore", {})}
    differences = compare_outputs(outs["base"], outs["head"], ignore=ignore, commits=commits)
    with np.load(str(outs["head"]) + ".npz") as f:
        n_arrays = len(f.files)
    scalars = json.loads(Path(str(outs["head"]) + ".json").read_text())["scalars"]
    return Proof(name, not differences, differences, n_arrays, _count_scalars(scalars))


def vouching_records(result: Result, code: str) -> list[int | None]:
    """The records of ``result`` that vouch for it under the code hash ``code``, each named as a
    re-keying names it: None for the provenance, ``i`` for re-verification ``i`` (a re-keying
    with that hash stands for the record it re-keys)."""
    prov = result.provenance or {}
    reverified = list(result.reverified or [])
    out: list[int | None] = []
    if prov.get("code_sha256") == code:
        out.append(None)
    out += [i for i, r in enumerate(reverified) if r.get("agree", True) and r.get("code_sha256") == code]
    for rec in result.rekeyed or []:
        index = rec.get("reverified")
        if rec.get("code_sha256") != code:
            continue
        if index is None or (0 <= int(index) < len(reverified) and reverified[int(index)].get("agree", True)):
            out.append(None if index is None else int(index))
    return list(dict.fromkeys(out))


@dataclass
class EntryReport:
    name: str
    entry: str
    before: str
    after: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def line(self) -> str:
        return (f"{self.name}/{self.entry}: before: {self.before}; after: {self.after} "
                f"({len(self.records)} record(s) re-keyed{'; ' + self.note if self.note else ''})")


def touched(lib_base: Path, lib_head: Path, names: Iterable[str] | None = None) -> dict[str, tuple[str, str]]:
    """Experiment -> (hash at BASE, hash at HEAD) for those whose hashes differ."""
    base, head = Library(lib_base), Library(lib_head)
    out = {}
    for name in names or experiments.EXPERIMENTS:
        module = experiments.EXPERIMENTS[name]
        h_base, h_head = code_hash(module, base), code_hash(module, head)
        if h_base != h_head:
            out[name] = (h_base, h_head)
    return out


def rekey_refactor(store: Store, lib_base: Path, lib_head: Path, *, base_commit: str, head_commit: str,
                   work: Path, only: Iterable[str] | None = None, dry_run: bool = False,
                   env: Mapping[str, str] | None = None, report: Callable[[str], None] = print,
                   ) -> list[EntryReport]:
    """Prove and re-key (see the module docstring); one report per stored entry of a touched
    experiment."""
    changed = touched(lib_base, lib_head, only)
    rows = [r for r in store.list() if r["status"] == "ok" and r["name"] in changed]
    out = []
    for name, (h_base, h_head) in sorted(changed.items()):
        entries = []
        for row in (r for r in rows if r["name"] == name):
            result = Result(name, row["config"], provenance=row["provenance"],
                            reverified=row["reverified"], rekeyed=row["rekeyed"])
            indices = vouching_records(result, h_base)
            already = vouching_records(result, h_head)
            entries.append((row, result, indices, already))
        need = [e for e in entries if e[2] and not e[3]]
        if not entries:
            report(f"{name}: touched by the refactor ({h_base} -> {h_head}); nothing stored")
            continue
        proof = None
        if need:
            configs = {row["entry"]: row["config"] for row, *_ in need}
            report(f"{name}: touched ({h_base} -> {h_head}); proving on its smoke preset ...")
            proof = prove(name, lib_base, lib_head, configs, work, env=env,
                          commits=({None, base_commit}, {None, head_commit}))
            report(f"{name}: " + ("identical at BASE and HEAD" if proof.identical
                                  else "NOT identical: " + "; ".join(proof.differences[:8])))
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        for row, result, indices, already in entries:
            rep = EntryReport(name, row["entry"], "vouched for by BASE's code" if indices
                              else "not vouched for by BASE's code")
            if already:
                rep.note = "already vouched for by HEAD's code"
            elif not indices:
                rep.note = "nothing to re-key: its results were not today's at BASE either"
            elif proof is None or not proof.identical:
                rep.note = "not re-keyed: the proof failed"
            else:
                rep.records = [{
                    "date": now, "scheme": SCHEME, "code_sha256": h_head, "reverified": index,
                    "git_commit": head_commit, "base_commit": base_commit, "base_code_sha256": h_base,
                    "how": proof.how(base_commit, head_commit)} for index in indices]
                if not dry_run:
                    config = experiments.config_from_dict(name, row["config"])
                    for rec in rep.records:
                        store.add_rekey(name, row["version"], config, rec)
            result.rekeyed = [*result.rekeyed, *rep.records]
            rep.after = _state(result, h_head)
            report(rep.line())
            out.append(rep)
    return out


def _state(result: Result, code: str) -> str:
    return freshness.TODAY if vouching_records(result, code) else freshness.EARLIER


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the commit before the refactor")
    ap.add_argument("--results", default=str(REPO / "results"), help="results folder")
    ap.add_argument("--only", help="comma-separated experiments (default: every touched one)")
    ap.add_argument("--dry-run", action="store_true", help="prove and report, record nothing")
    ap.add_argument("--data", default=os.environ.get("NTKBOOK_DATA") or str(REPO.parent / "shared" / "data"),
                    help="the data sets the smoke runs read (default $NTKBOOK_DATA, else ../shared/data)")
    args = ap.parse_args(argv)
    if _git("status", "--porcelain", "--", "lib"):
        print("error: lib/ has uncommitted changes: commit the refactor first (the re-keying names "
              "the commit whose code it vouches for)", file=sys.stderr)
        return 2
    head, base = _git("rev-parse", "HEAD"), _git("rev-parse", args.base)
    lib_at = LibraryAtCommit(REPO)
    try:
        lib_base = lib_at(base)
        if lib_base is None:
            print(f"error: commit {args.base} has no lib/", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="ntkbook-proof-") as work:
            reports = rekey_refactor(Store(Path(args.results)), lib_base, REPO / "lib", base_commit=base,
                                     head_commit=head, work=Path(work), dry_run=args.dry_run,
                                     only=args.only.split(",") if args.only else None,
                                     env={"NTKBOOK_RESULTS": str(Path(args.results).resolve()),
                                          "NTKBOOK_DATA": str(Path(args.data).resolve())})
    finally:
        lib_at.close()
    keyed = sum(bool(r.records) for r in reports)
    print(f"{len(reports)} entries of touched experiments; {keyed} re-keyed"
          + (" [dry run: nothing recorded]" if args.dry_run else ""))
    return 0 if all(r.after == freshness.TODAY or not r.before.startswith("vouched") for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
