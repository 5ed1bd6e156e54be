"""Command line of the results store.

``python -m ntkbook list``                        experiments and the state of their entries
``python -m ntkbook run NAME --scale S``          compute an entry (``--set key=value`` overrides)
``python -m ntkbook verify``                      check every entry's content hashes (archived ones too)
``python -m ntkbook reproduce NAME [--sample]``   recompute stored entries with today's code,
                                                  compare, and record the agreement
``python -m ntkbook rehash``                      add content hashes to entries from before them
``python -m ntkbook data fetch --chapter NAME``   fetch the data a chapter reads (see ``data list``)
"""

from __future__ import annotations

import argparse
import os
import sys

from ntkbook import experiments, freshness
from ntkbook.errors import NtkbookError
from ntkbook.store import ALLOW_DIRTY_ENV, ARCHIVE, Result, StoreError, config_hash


def _state(store, name: str, version: str, config) -> str:
    try:
        if not store.has(name, version, config):
            return "missing"
        fresh = freshness.freshness(store.load(name, version, config))
        return f"stored (verified), {fresh.sentence()[:-1].lower().replace('`', '')}"
    except StoreError as exc:
        return f"CORRUPT: {exc}"


def _cmd_list(args: argparse.Namespace) -> int:
    for name in sorted(experiments.EXPERIMENTS):
        module = experiments.get(name)
        doc = (module.__doc__ or "").strip().splitlines()[0]
        print(f"{name}  (version {module.VERSION})  {doc}")
        for scale in experiments.SCALES:
            store = experiments.store_for(scale, args.results)
            config = experiments.make_config(name, scale)
            state = _state(store, name, module.VERSION, config)
            print(f"    {scale:5s} {config_hash(config)}  {state}  "
                  f"({store.entry_dir(name, module.VERSION, config)})")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.data is not None:
        os.environ["NTKBOOK_DATA"] = args.data
    if args.allow_dirty:
        os.environ[ALLOW_DIRTY_ENV] = "1"
    overrides = experiments.parse_overrides(args.name, args.scale, args.set or [])
    config = experiments.make_config(args.name, args.scale, **overrides)
    store = experiments.store_for(args.scale, args.results)
    module = experiments.get(args.name)
    folder = store.entry_dir(args.name, module.VERSION, config)
    if not args.recompute and store.has(args.name, module.VERSION, config, wait=not args.no_wait):
        print(f"{args.name} at {args.scale} scale is already stored in {folder} "
              f"(content hashes verified; use --recompute to redo it)")
        return 0
    result = experiments.run_and_save(args.name, config, store, recompute=args.recompute,
                                      wait=not args.no_wait)
    wall = result.provenance.get("wall_time_s", float("nan"))
    print(f"saved {args.name} to {folder} in {wall:.1f}s on {result.provenance.get('device')}")
    return 0


def _roots(args: argparse.Namespace):
    if args.results is not None:
        return [experiments.store_for("paper", args.results)]
    return [experiments.store_for(scale) for scale in experiments.SCALES]


def _cmd_verify(args: argparse.Namespace) -> int:
    bad = 0
    for store in [s for root in _roots(args) for s in (root, root.archive())]:
        for row in store.list():
            line = f"{row['status']:10s} {store.root / row['name'] / row['entry']}"
            if row["status"] == "ok":
                line += f"  commit {str(row.get('git_commit'))[:10]}  dirty {row.get('git_dirty')}"
                if store.root.name == ARCHIVE:
                    line += "  archived (retired experiment)"
                elif row["name"] in experiments.EXPERIMENTS:
                    stored = Result(row["name"], row["config"], provenance=row["provenance"],
                                    reverified=row["reverified"], rekeyed=row["rekeyed"])
                    line += f"  {freshness.freshness(stored).short()}"
            else:
                bad += row["status"] != "unfinished"
                line += f"\n           {row.get('error', '')}"
            print(line)
    return 1 if bad else 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    if args.data is not None:
        os.environ["NTKBOOK_DATA"] = args.data
    names = sorted(experiments.EXPERIMENTS) if args.all else args.names
    if not names:
        raise freshness.ReproduceError("name the experiments to reproduce, or pass --all")
    store = experiments.store_for("paper", args.results)
    stored = {row["name"] for row in store.list()}
    failed = []
    for name in names:
        if name not in experiments.EXPERIMENTS:
            raise freshness.ReproduceError(f"unknown experiment {name!r}; known: "
                                           f"{', '.join(sorted(experiments.EXPERIMENTS))}")
        if args.all and name not in stored:
            continue
        reps = freshness.reproduce(name, store, entries=args.entry, sample=args.sample,
                                   record=not args.dry_run)
        failed += [r for r in reps if not r.agree]
    for rep in failed:
        print(f"error: {rep.name} {rep.entry.name}: {rep.comparison.summary(n=5)}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_rehash(args: argparse.Namespace) -> int:
    for store in _roots(args):
        for line in store.rehash(dry_run=args.dry_run):
            print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["data"]:  # the data files have their own command line
        from ntkbook.data.fetch import main as data_main

        return data_main(argv[1:], prog="python -m ntkbook data")
    parser = argparse.ArgumentParser(prog="python -m ntkbook", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    results_help = ("results folder (default: $NTKBOOK_RESULTS or results/ for paper scale, "
                    "$NTKBOOK_CACHE or .cache/results for smoke scale)")
    ls = sub.add_parser("list", help="list experiments and whether their results are stored")
    ls.add_argument("--results", help=results_help)
    run = sub.add_parser("run", help="compute an experiment and store its result")
    run.add_argument("name", choices=sorted(experiments.EXPERIMENTS))
    run.add_argument("--scale", choices=experiments.SCALES, default="paper")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="override a config field (repeatable), e.g. --set seeds=[0,1] --set lr=1e-3")
    run.add_argument("--data", help="data directory (else $NTKBOOK_DATA, then the user cache)")
    run.add_argument("--results", help=results_help)
    run.add_argument("--recompute", action="store_true",
                     help="recompute even when stored, discarding the entry's checkpoints")
    run.add_argument("--no-wait", action="store_true",
                     help="fail at once if another run of the same entry holds its lock")
    run.add_argument("--allow-dirty", action="store_true",
                     help=f"store a paper-scale result computed from uncommitted code, marked as "
                          f"such in its provenance (same as {ALLOW_DIRTY_ENV}=1)")
    sub.add_parser("data", help="the book's data files: `data list`, `data fetch --all | --only "
                                "NAME ... | --chapter NAME ...` (python -m ntkbook data -h)",
                   add_help=False)
    rep = sub.add_parser("reproduce", help="recompute stored entries with today's code, compare "
                                           "every value, and record the agreement in the entry")
    rep.add_argument("names", nargs="*", metavar="NAME", help="experiments to reproduce")
    rep.add_argument("--all", action="store_true", help="every experiment with a stored entry")
    rep.add_argument("--entry", action="append", metavar="VERSION-HASH",
                     help="only this stored entry (repeatable; default: all of the experiment's)")
    rep.add_argument("--sample", action="store_true",
                     help="recompute only the part the experiment defines as its sample "
                          "(e.g. one seed), and compare that part")
    rep.add_argument("--dry-run", action="store_true", help="compare, but record nothing")
    rep.add_argument("--data", help="data directory (else $NTKBOOK_DATA, then the user cache)")
    rep.add_argument("--results", help="results folder (default: $NTKBOOK_RESULTS or results/)")
    for cmd, helptext in (("verify", "check the content hashes of every stored entry"),
                          ("rehash", "add content hashes to entries written before them")):
        p = sub.add_parser(cmd, help=helptext)
        p.add_argument("--results", help="only this results folder (default: paper and smoke "
                                         "folders)")
        if cmd == "rehash":
            p.add_argument("--dry-run", action="store_true", help="say what would change")
    args = parser.parse_args(argv)
    commands = {"list": _cmd_list, "run": _cmd_run, "verify": _cmd_verify, "rehash": _cmd_rehash,
                "reproduce": _cmd_reproduce}
    try:
        return commands[args.command](args)
    except NtkbookError as exc:  # raised on purpose: its message says what to do
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
