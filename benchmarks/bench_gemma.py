"""Benchmark of the Gemma-3-270M reduced eNTK operator (the Gemma chapter).

Prints, for contexts of 64 TinyStories tokens:

1. the time of one forward pass from the stored residual at layer L, of one operator product
   ``S^{1/2} K_r S^{1/2} w`` (down_proj only, and the whole layer), timed interleaved (each repeat
   runs all three back to back, :mod:`timing`), and the median [quartiles] of the per-repeat
   ratios product / forward (target <= 4);
2. the time per product at several layers, and the extrapolated time of a 50-step Lanczos run
   (52 products with the symmetry check) at N = 1024 per layer;
3. the accuracy of the float32 product (highest matmul precision, as the library runs it) against
   the same product in float64.

Usage: ``PYTHONPATH=lib python benchmarks/bench_gemma.py [--contexts 16] [--layers 0 8 16]``.
On a machine with several devices the contexts are sharded over all of them.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.gemma import operator as gemma_operator
from ntkbook.gemma import weights as gemma_weights
from ntkbook.gemma import model as gemma_model
from ntkbook.gemma.pos_data import load_stories
from timing import ratio, timeit


def contexts(tok, n: int, T: int = 64) -> np.ndarray:
    out = []
    for s in load_stories():
        ids = tok.encode(s)
        if len(ids) >= T:
            out.append(ids[:T])
        if len(out) == n:
            return np.asarray(out, np.int32)
    raise RuntimeError("not enough long stories")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--layers", type=int, nargs="+", default=[0, 8, 16])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"devices: {jax.devices()}  backend: {jax.default_backend()}")
    cfg, params, tok = gemma_weights.load()
    Gh = gemma_weights.unembedding_gram_sqrt(params)
    ctx = contexts(tok, args.contexts)
    N = len(ctx)
    rng = np.random.default_rng(0)
    for L in args.layers:
        res = gemma_operator.compute_residuals(params, cfg, ctx, L)
        fwd = jax.jit(jax.vmap(lambda rest, h: gemma_model.forward_from(rest, cfg, h, L)[-1], in_axes=(None, 0)))
        rest = gemma_operator.forward_from_params(params)
        chunks = [jnp.asarray(res[s:s + args.chunk]) for s in range(0, N, args.chunk)]
        ops = {ps: gemma_operator.layer_operator(params, cfg, res, L, param_set=ps, gram_half=Gh, chunk=args.chunk)
               for ps in ("down_proj", "layer")}
        ws = {ps: rng.standard_normal(op.dim) for ps, op in ops.items()}
        t_fwd, t_down, t_layer = timeit([lambda: [fwd(rest, c) for c in chunks],
                                         lambda: ops["down_proj"](ws["down_proj"]),
                                         lambda: ops["layer"](ws["layer"])], repeat=args.repeats)
        print(f"layer {L:2d} forward from the residual: {t_fwd.s()} s (min / median)", flush=True)
        for ps, t in (("down_proj", t_down), ("layer", t_layer)):
            print(f"layer {L:2d} {ps:9s} P={ops[ps].num_params:>9,}  product {t.s()} s  "
                  f"product / forward {ratio(t, t_fwd)}  "
                  f"-> 52 products at N=1024: {52 * t.median * 1024 / N / 60:6.1f} min", flush=True)
    # accuracy of float32 against float64 (layer 16, down_proj, 4 contexts)
    L = 16
    res = gemma_operator.compute_residuals(params, cfg, ctx[:4], L)
    w = rng.standard_normal(4 * cfg.d_model)
    y32 = gemma_operator.layer_operator(params, cfg, res, L, gram_half=Gh)(w)
    with jax.enable_x64(True):
        p64 = {"embed": params["embed"][:1], "final_norm": params["final_norm"].astype(jnp.float64),
               "layers": jax.tree_util.tree_map(lambda x: x[L:].astype(jnp.float64), params["layers"])}
        y64 = _product64(p64, cfg, res.astype(np.float64), L, Gh, w)
    err = float(np.linalg.norm(y32 - y64) / np.linalg.norm(y64))
    print(f"float32 product vs float64 (layer {L}, down_proj, N=4): relative error {err:.2e}")


def _product64(p64, cfg, res, L, Gh, w):
    """The operator product in float64 through the original model code (layers L.. only)."""
    layers = p64["layers"]
    full_layers = {k: jnp.concatenate([jnp.zeros((L, *v.shape[1:]), v.dtype), v]) for k, v in layers.items()}
    params = {"embed": p64["embed"], "final_norm": p64["final_norm"], "layers": full_layers}
    op = gemma_operator.layer_operator(params, cfg, res, L, gram_half=Gh)
    return op(w)


if __name__ == "__main__":
    main()
