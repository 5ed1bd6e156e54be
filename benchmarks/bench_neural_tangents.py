"""Class-mean eNTK of the modular-addition MLP: ntkbook.ntk.entk versus neural-tangents (a script).

    bash benchmarks/setup_nt_env.sh              # once: the pinned neural-tangents environment
    .venv/bin/python benchmarks/bench_neural_tangents.py [--n 400] [--nt-python /tmp/nt-env/bin/python]

The model is the one of bench_entk.py (p = 29, width 512, x^2 activation,
out = W2 (W1 x / sqrt(2p))^2 / width, no biases, 29 outputs, one-hot(a) + one-hot(b) inputs),
with weights drawn from a fixed seed.  The kernel is the class-mean eNTK (1/C) sum_c K_cc on N
inputs (all p^2 = 841 pairs with --n 841, otherwise a fixed random subset), in float64:

* ours: ``ntkbook.ntk.entk.entk(mlp, params, x, reduction="class_mean")``;
* neural-tangents 0.6.5 ``empirical_ntk_fn(f, trace_axes=(-1,), vmap_axes=0)`` with
  ``JACOBIAN_CONTRACTION`` and ``NTK_VECTOR_PRODUCTS``, run by nt_worker.py in a separate
  environment (neural-tangents does not import with current JAX).  ``trace_axes=(-1,)`` divides
  the trace by C, i.e. it is the class mean; the worker checks this against ``trace_axes=()``.

Weights and inputs go to a temporary .npz read by both sides.  Times exclude compilation and are
the best of --repeat calls; the two sides run one after the other, never at the same time.
Prints the agreement (max |K_nt - K_ours| / max |K_ours|, target <= 1e-6) and ours/nt time ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from bench_entk import P, mlp, mlp_init, modular_inputs  # noqa: E402  (same model as bench_entk)
from ntkbook.ntk.entk import entk  # noqa: E402


def rss_gib():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if platform.system() != "Darwin" else r / 2**30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400, help="number of inputs (841 = all pairs)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and of the subset")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nt-python", default="/tmp/nt-env/bin/python")
    ap.add_argument("--impl", default="jc,nvp", help="neural-tangents implementations to run")
    ap.add_argument("--ours-batch-size", type=int, default=0, help="0: no chunking")
    ap.add_argument("--jc-batch-size", type=int, default=0, help="nt.batch size for jc (0: none)")
    ap.add_argument("--nvp-batch-size", type=int, default=25, help="nt.batch size for nvp")
    args = ap.parse_args()

    t_start = time.perf_counter()
    print(f"# bench_neural_tangents: jax {jax.__version__}, backend {jax.default_backend()}, float64")
    onehot, _ = modular_inputs()
    params = mlp_init(jax.random.PRNGKey(args.seed))
    n_all = onehot.shape[0]
    if args.n >= n_all:
        idx = np.arange(n_all)
    else:
        idx = np.sort(np.random.default_rng(args.seed).permutation(n_all)[: args.n])
    x = onehot[idx]
    n_params = sum(v.size for v in jax.tree_util.tree_leaves(params))
    N = x.shape[0]
    print(f"modular MLP p = {P}, width {params['W1'].shape[0]}, {n_params} parameters, "
          f"C = {P} outputs, N = {N} inputs" + ("" if N == n_all else f" (of {n_all}, seed {args.seed})"))
    print(f"per-example Jacobian of all N inputs: {N * P * n_params * 8 / 2**30:.2f} GiB (float64)\n")

    # ---- ours -------------------------------------------------------------------------------
    bs = args.ours_batch_size or None
    t = time.perf_counter()
    K = jax.block_until_ready(entk(mlp, params, x, reduction="class_mean", batch_size=bs))
    first = time.perf_counter() - t
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        K = jax.block_until_ready(entk(mlp, params, x, reduction="class_mean", batch_size=bs))
        times.append(time.perf_counter() - t)
    K_ours = np.asarray(K)
    del K
    ours = {"first_s": first, "best_s": min(times), "rss": rss_gib()}
    print(f"ours: first call (compile + run) {first:.2f} s, best of {args.repeat} {min(times):.2f} s, "
          f"peak RSS of this process {ours['rss']:.1f} GiB", flush=True)

    # ---- neural-tangents --------------------------------------------------------------------
    impls = args.impl.split(",")
    batch = {"jc": args.jc_batch_size, "nvp": args.nvp_batch_size}
    with tempfile.TemporaryDirectory(prefix="bench_nt_") as tmp:
        inp, out = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(inp, W1=np.asarray(params["W1"]), W2=np.asarray(params["W2"]), x=np.asarray(x))
        cmd = [args.nt_python, str(HERE / "nt_worker.py"), inp, out, "--impl", args.impl,
               "--repeat", str(args.repeat),
               "--batch-size", ",".join(f"{k}={batch[k]}" for k in impls)]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        t = time.perf_counter()
        # the worker's peak memory is that of the child process (getrusage RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        worker_s = time.perf_counter() - t
        for line in proc.stdout.splitlines():
            print("  " + line)
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"nt worker failed (exit {proc.returncode})")
        r = np.load(out)
        meta = json.loads(str(r["meta"]))
        Ks = {impl: r[f"K_{impl}"] for impl in impls}
        fx_nt = r["fx"]
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"  worker: {worker_s:.0f} s in all (imports, checks, compilation), "
          f"peak RSS {child_rss:.1f} GiB\n")

    # ---- agreement and ratios ---------------------------------------------------------------
    fx = np.asarray(jax.vmap(mlp, in_axes=(None, 0))(params, x))
    print(f"neural-tangents {meta['neural_tangents']} on jax {meta['jax']} ({meta['backend']})")
    print(f"same model on both sides: max |f_nt - f_ours| / max |f_ours| = "
          f"{np.abs(fx_nt - fx).max() / np.abs(fx).max():.1e}")
    print("nt normalisation: trace_axes=(-1,) vs mean of the diagonal blocks of trace_axes=() "
          "(first 29 inputs): " + ", ".join(f"{k} {v:.1e}" for k, v in meta["check_trace_vs_full"].items()))
    print()
    names = {"jc": "neural-tangents JACOBIAN_CONTRACTION", "nvp": "neural-tangents NTK_VECTOR_PRODUCTS"}
    print(f"| implementation | chunking | compilation (s) | best of {args.repeat} (s) | ours / this | "
          f"max rel diff to ours |")
    print("|---|---|---|---|---|---|")
    print(f"| ntkbook.ntk.entk.entk(reduction='class_mean') | {f'batch_size={bs}' if bs else 'none'} | "
          f"first call {first:.1f} (compile + run) | {ours['best_s']:.2f} | 1 | - |")
    worst = 0.0
    for impl in impls:
        m = meta["impl"][impl]
        diff = float(np.abs(Ks[impl] - K_ours).max() / np.abs(K_ours).max())
        worst = max(worst, diff)
        chunk = f"nt.batch(batch_size={m['batch_size']})" if m["batch_size"] else "none"
        print(f"| {names[impl]} | {chunk} | {m['compile_s']:.1f} | {m['best_s']:.2f} | "
              f"{ours['best_s'] / m['best_s']:.2f} | {diff:.1e} |")
    print(f"\nagreement target max rel diff <= 1e-6: {'met' if worst <= 1e-6 else 'MISSED'} "
          f"(worst {worst:.1e}); ours / nt < 1 means ours is faster")
    print(f"total benchmark time: {time.perf_counter() - t_start:.0f} s")
    return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
