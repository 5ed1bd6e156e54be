"""Command line: ``python -m ntkbook list`` and ``python -m ntkbook run NAME --scale S``."""

from __future__ import annotations

import argparse
import os
import sys

from ntkbook import experiments
from ntkbook.store import Store, config_hash


def _cmd_list(args: argparse.Namespace) -> int:
    for name in sorted(experiments.EXPERIMENTS):
        module = experiments.get(name)
        doc = (module.__doc__ or "").strip().splitlines()[0]
        print(f"{name}  (version {module.VERSION})  {doc}")
        for scale, root in (("paper", experiments.results_dir()), ("smoke", experiments.cache_dir())):
            config = experiments.make_config(name, scale)
            store = Store(root)
            state = "stored" if store.has(name, module.VERSION, config) else "missing"
            print(f"    {scale:5s} {config_hash(config)}  {state}  ({store.entry_dir(name, module.VERSION, config)})")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.data is not None:
        os.environ["NTKBOOK_DATA"] = args.data
    if args.results is not None:
        os.environ["NTKBOOK_RESULTS"] = args.results
    config = experiments.make_config(args.name, args.scale)
    root = experiments.results_dir() if args.scale == "paper" else experiments.cache_dir()
    store = Store(root)
    module = experiments.get(args.name)
    if store.has(args.name, module.VERSION, config) and not args.recompute:
        print(f"{args.name} at {args.scale} scale is already stored in "
              f"{store.entry_dir(args.name, module.VERSION, config)} (use --recompute to redo it)")
        return 0
    result = experiments.run_and_save(args.name, config, store)
    print(f"saved {args.name} to {store.entry_dir(args.name, module.VERSION, config)} "
          f"in {result.provenance['wall_time_s']:.1f}s on {result.provenance['device']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ntkbook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list experiments and whether their results are stored")
    run = sub.add_parser("run", help="compute an experiment and store its result")
    run.add_argument("name", choices=sorted(experiments.EXPERIMENTS))
    run.add_argument("--scale", choices=experiments.SCALES, default="paper")
    run.add_argument("--data", help="data directory (else $NTKBOOK_DATA, then the user cache)")
    run.add_argument("--results", help="results directory (else $NTKBOOK_RESULTS or results/)")
    run.add_argument("--recompute", action="store_true", help="recompute even when stored")
    args = parser.parse_args(argv)
    return {"list": _cmd_list, "run": _cmd_run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
