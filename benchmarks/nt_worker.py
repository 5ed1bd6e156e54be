"""neural-tangents side of bench_neural_tangents.py (run inside the pinned nt environment).

    <nt-env>/bin/python benchmarks/nt_worker.py IN.npz OUT.npz [--impl jc,nvp] [--batch-size B]
        [--repeat 3] [--check-n 29]

Imports only numpy, jax and neural_tangents (neural-tangents 0.6.5 needs jax 0.5.x; see
nt-env-requirements.txt).  IN.npz holds the weights W1 (width, 2p), W2 (p, width) and the inputs x
(N, 2p), all float64, written by the driver.  The model is the modular-addition MLP of
bench_entk.py, written here for a batch of inputs as neural-tangents expects:

    out = W2 (W1 x / sqrt(2p))^2 / width,   no biases, 29 outputs.

For each implementation (jc = JACOBIAN_CONTRACTION, nvp = NTK_VECTOR_PRODUCTS) the class-mean
kernel (1/C) sum_c K_cc is computed with ``empirical_ntk_fn(f, trace_axes=(-1,), vmap_axes=0)``:
neural-tangents divides the trace over a traced axis by its size, so trace_axes=(-1,) is the mean
over the C outputs, not the sum.  This normalisation is checked on the first ``--check-n`` inputs
against ``trace_axes=()`` (the full (n, n, C, C) kernel) followed by an explicit mean of the
diagonal blocks.

Timing: compilation is excluded and reported separately (ahead-of-time ``lower().compile()``
without batching; with batching, one call on a single (B, B) block, which compiles the block
function that nt.batch reuses); then the best of ``--repeat`` calls.  With ``--batch-size B`` the kernel function is wrapped in
``nt.batch(kernel_fn, batch_size=B, device_count=0)`` (B must divide N), which computes the kernel
block by block (all blocks, including both triangles) to bound memory.

OUT.npz receives one kernel per implementation (K_jc, K_nvp), the forward outputs ``fx`` (to check
that both sides evaluate the same model), and ``meta`` (a JSON string with timings and versions).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # neural-tangents imports TensorFlow bits

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import neural_tangents as nt  # noqa: E402
import numpy as np  # noqa: E402

IMPLS = {"jc": nt.NtkImplementation.JACOBIAN_CONTRACTION,
         "nvp": nt.NtkImplementation.NTK_VECTOR_PRODUCTS}


def apply_fn(params, x):
    """Batched modular MLP: x (N, 2p) -> (N, p)."""
    W1, W2 = params["W1"], params["W2"]
    h = x @ W1.T / jnp.sqrt(x.shape[-1])
    return (h**2) @ W2.T / W1.shape[0]


def kernel_fn(impl, trace_axes, batch_size):
    fn = nt.empirical_ntk_fn(apply_fn, trace_axes=trace_axes, vmap_axes=0,
                             implementation=IMPLS[impl])
    if batch_size:
        # nt.batch jits the kernel function itself and scans over blocks
        return nt.batch(fn, batch_size=batch_size, device_count=0)
    return jax.jit(fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--impl", default="jc,nvp")
    ap.add_argument("--batch-size", default="", help="e.g. 'jc=0,nvp=29' (0: no batching)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check-n", type=int, default=29)
    args = ap.parse_args()

    d = np.load(args.inp)
    params = {"W1": jnp.asarray(d["W1"]), "W2": jnp.asarray(d["W2"])}
    x = jnp.asarray(d["x"])
    assert x.dtype == jnp.float64 and params["W1"].dtype == jnp.float64
    bs = {k: int(v) for k, v in (s.split("=") for s in args.batch_size.split(",") if s)}

    meta = {"jax": jax.__version__, "neural_tangents": nt.__version__,
            "backend": jax.default_backend(), "N": int(x.shape[0]), "impl": {}}
    out = {"fx": np.asarray(jax.jit(apply_fn)(params, x))}

    # normalisation check on a few inputs: trace_axes=(-1,) == mean_c of the trace_axes=() kernel
    xs = x[: args.check_n]
    full = np.asarray(kernel_fn("jc", (), 0)(xs, None, params))  # (n, n, C, C)
    mean_diag = np.einsum("nmcc->nm", full) / full.shape[-1]
    for impl in args.impl.split(","):
        tr = np.asarray(kernel_fn(impl, (-1,), 0)(xs, None, params))
        meta.setdefault("check_trace_vs_full", {})[impl] = float(
            np.abs(tr - mean_diag).max() / np.abs(mean_diag).max())

    for impl in args.impl.split(","):
        b = bs.get(impl, 0)
        if b and x.shape[0] % b:
            raise SystemExit(f"nt.batch needs N = {x.shape[0]} divisible by batch_size {b}")
        t = time.perf_counter()
        if b:
            # nt.batch compiles one (b, b) block function: compile it on a single block
            fn = kernel_fn(impl, (-1,), b)
            jax.block_until_ready(fn(x[:b], None, params))
        else:
            fn = kernel_fn(impl, (-1,), 0).lower(x, None, params).compile()
        compile_s = time.perf_counter() - t
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            K = jax.block_until_ready(fn(x, None, params))
            times.append(time.perf_counter() - t)
        out[f"K_{impl}"] = np.asarray(K)
        meta["impl"][impl] = {"batch_size": b, "compile_s": compile_s, "times_s": times,
                              "best_s": float(min(times))}
        print(f"[nt_worker] {impl}: compile {compile_s:.2f} s, best of {args.repeat} "
              f"{min(times):.3f} s (batch_size {b or 'none'})", flush=True)
        del K

    np.savez(args.out, meta=np.asarray(json.dumps(meta)), **out)


if __name__ == "__main__":
    main()
