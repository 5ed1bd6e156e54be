"""The Gemma layer sweep: one stored ``gemma_probe`` entry per layer, computed where missing.

Each layer is its own entry (``gemma_probe.sweep_overrides``: the first ``--n-per-class``
contexts per class of the paper data set ``gemma_pos_windows``, the down-projection, the whole
layer too at ``--whole-layer-at``), so a stopped sweep resumes at the layer it stopped in (and
inside it at its checkpointed point), and each layer can be re-verified on its own
(``python -m ntkbook reproduce gemma_probe --entry VERSION-HASH``).  Layers run from the top
down: the upper layers are the cheapest (an operator product runs the layers from L to the top).

    python tools/gemma_sweep.py                        # all 18 layers at N = 256 (2 CPU cores: hours)
    python tools/gemma_sweep.py --estimate             # what each layer would cost, and stop
    python tools/gemma_sweep.py --n-per-class 128 --results DIR --times DIR/times.json   # N = 1024
    python tools/gemma_sweep.py --layers 17,16 --n-per-class 2 --set k=2 --set lanczos_steps=4

The data set is read from the paper results folder (``$NTKBOOK_RESULTS`` or ``results/``);
``--results`` moves only the sweep's entries.  Paper-scale entries are computed only from a clean
commit (:class:`ntkbook.store.Store`).  ``--times`` writes, after each layer, a JSON list of
{layer, wall_s (this process, weights loading included), t_lanczos, t_residuals, t_per_product,
products, device, computed (false: it was already stored)}.  ``tools/gpu_gemma_sweep.sh`` runs
the sweep at N = 1024 on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ntkbook import experiments
from ntkbook.experiments import gemma_probe
from ntkbook.progress import format_seconds

NAME = gemma_probe.NAME


def layer_configs(layers, n_per_class: int, whole_layer_at, extra: dict) -> list:
    """The config of each layer's entry (the paper preset with the sweep's overrides and ``extra``)."""
    return [experiments.make_config(NAME, "paper", **{**gemma_probe.sweep_overrides(L, n_per_class, whole_layer_at),
                                                      **extra}) for L in layers]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-per-class", type=int, default=32, help="contexts per class (default 32: N = 256)")
    parser.add_argument("--layers", default=",".join(map(str, sorted(gemma_probe.SWEEP_LAYERS, reverse=True))),
                        help="comma-separated layers, run in this order (default: 17 down to 0)")
    parser.add_argument("--whole-layer-at", default=",".join(map(str, gemma_probe.SWEEP_WHOLE_LAYER_AT)),
                        help="layers where the whole layer's kernel is computed too (default 17; '' for none)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another config override for every layer, as for python -m ntkbook run")
    parser.add_argument("--results", help="results folder of the sweep's entries (default: the paper one)")
    parser.add_argument("--times", help="JSON file of the time per layer, rewritten after each layer")
    parser.add_argument("--estimate", action="store_true", help="print each layer's estimated CPU time and stop")
    args = parser.parse_args(argv)

    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    whole = tuple(int(x) for x in args.whole_layer_at.split(",") if x.strip())
    extra = experiments.parse_overrides(NAME, "paper", args.set)
    configs = layer_configs(layers, args.n_per_class, whole, extra)
    store = experiments.store_for("paper", args.results)
    module = experiments.get(NAME)
    if args.estimate:
        for L, config in zip(layers, configs):
            state = "stored" if store.has(NAME, module.VERSION, config) else \
                f"~{format_seconds(gemma_probe.estimate_seconds(config))} on 2 CPU cores"
            print(f"layer {L:2d}: {state}")
        return 0
    times = []
    for L, config in zip(layers, configs):
        computed = not store.has(NAME, module.VERSION, config)
        t0 = time.perf_counter()
        result = experiments.run_and_save(NAME, config, store)
        wall = time.perf_counter() - t0
        p = gemma_probe.point(result, L)
        times.append({"layer": L, "wall_s": wall, "t_lanczos": p["t_lanczos"], "t_residuals": p["t_residuals"],
                      "t_per_product": p["t_per_product"], "products": p["products"],
                      "device": result.provenance.get("device"), "computed": computed})
        verdict = (f"eNTK - PCA test AP {p['pos_ap_diff_mean']:+.3f} over {config.n_splits} splits, robust "
                   f"eNTK wins {p['pos_robust_wins_ap']}/{p['pos_n']}") if p["pos_n"] else "no task could be split"
        print(f"layer {L:2d}: {'computed' if computed else 'stored'} in {format_seconds(wall)} "
              f"(Lanczos {format_seconds(p['t_lanczos'])}); parts of speech: {verdict}", flush=True)
        if args.times:
            Path(args.times).write_text(json.dumps(times, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
