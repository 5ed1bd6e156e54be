"""Benchmark of ntkbook.ntk.entk and ntkbook.ntk.eig (a script, not a test).

    .venv/bin/python benchmarks/bench_entk.py [--quick] [--max-dense N] [--sizes 1000,10000,...]
                                              [--sections 1,2,3,4,5]

Method: every timed call is waited for (``jax.block_until_ready`` on every array of its result,
also the fields of an ``EigResult``), warmed up (compiled) before timing, and the calls compared
in a ratio are timed in alternation, repeat by repeat, so that they see the same load on shared
CPUs. Times are reported as min / median (± half the interquartile range), ratios as the median
[quartiles] of the per-repeat ratios.

Measures, in one run and float64:
1. time of one matrix-free eNTK product / time of one forward pass over the same inputs, for the
   modular-addition MLP (p = 29) and a one-layer transformer (p = 29, 3 tokens); and the chapter's
   transformer (ntkbook.models.transformer) with the chapter's call, the mean-logit product over
   all parameters and per parameter tensor;
2. Lanczos top-25 versus dense eigh, time and memory, on random low-rank + noise PSD operators
   given as matvecs, N*C from 10^3 to 10^5 (dense only while it fits);
3. own Lanczos versus matfree's (accuracy, products, time);
4. a layer-filtered product on an 8-layer MLP (filter = last layer), reusing the linearised forward
   pass versus recomputing it in each product;
5. the materialised class-mean kernel of the modular MLP (N = 841) at each ``precision=`` of the
   engine, on the per-example Jacobians' route (``route="jacobians"``, where the precision sets
   the Jacobians' memory): time, and the kernel's and eigenvalues' error against float64.
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from ntkbook.experiments.modular_transformer import group_layers  # noqa: E402
from ntkbook.models import transformer as chapter_transformer  # noqa: E402
from ntkbook.ntk.eig import dense_topk, lanczos_topk  # noqa: E402
from ntkbook.ntk.entk import PRECISIONS, entk, entk_matvec, entk_matvec_mean_logit  # noqa: E402
from timing import Timing, block, ratio, timeit  # noqa: E402,F401


# --------------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------------
P = 29


def modular_inputs(p=P):
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    onehot = np.concatenate([np.eye(p)[a], np.eye(p)[b]], axis=1)  # (p^2, 2p)
    tokens = np.stack([a, b, np.full_like(a, p)], axis=1)  # a, b, '='
    return jnp.asarray(onehot), jnp.asarray(tokens)


def mlp_init(key, p=P, width=512):
    k1, k2 = jax.random.split(key)
    return {"W1": jax.random.normal(k1, (width, 2 * p)), "W2": jax.random.normal(k2, (p, width))}


def mlp(params, x):
    """out = W2 (W1 x / sqrt(2p))^2 / width, x = one-hot(a) + one-hot(b) concatenated."""
    W1, W2 = params["W1"], params["W2"]
    h = W1 @ x / jnp.sqrt(x.shape[0])
    return W2 @ h**2 / W1.shape[0]


def transformer_init(key, p=P, d=64, d_mlp=256, heads=4, n_ctx=3):
    ks = jax.random.split(key, 9)
    dh = d // heads
    n = lambda k, s, fan: jax.random.normal(k, s) / np.sqrt(fan)  # noqa: E731
    return {
        "embed": n(ks[0], (p + 1, d), 1),
        "pos": n(ks[1], (n_ctx, d), 1),
        "attn": {"q": n(ks[2], (heads, d, dh), d), "k": n(ks[3], (heads, d, dh), d),
                 "v": n(ks[4], (heads, d, dh), d), "o": n(ks[5], (heads, dh, d), d)},
        "mlp": {"w_in": n(ks[6], (d, d_mlp), d), "w_out": n(ks[7], (d_mlp, d), d_mlp)},
        "unembed": n(ks[8], (d, p), d),
    }


def transformer(params, tokens):
    """One-layer transformer (no layer norm), causal attention, logits at the last position."""
    x = params["embed"][tokens] + params["pos"]  # (T, d)
    a = params["attn"]
    q = jnp.einsum("td,hde->hte", x, a["q"])
    k = jnp.einsum("td,hde->hte", x, a["k"])
    v = jnp.einsum("td,hde->hte", x, a["v"])
    T = tokens.shape[0]
    s = jnp.einsum("hte,hse->hts", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e30)
    z = jnp.einsum("hts,hse->hte", jax.nn.softmax(s, axis=-1), v)
    x = x + jnp.einsum("hte,hed->td", z, a["o"])
    x = x + jax.nn.relu(x @ params["mlp"]["w_in"]) @ params["mlp"]["w_out"]
    return x[-1] @ params["unembed"]


def deep_mlp_init(key, d=64, width=256, depth=8, c=10):
    sizes = [d] + [width] * (depth - 1) + [c]
    ks = jax.random.split(key, depth)
    return {f"layer{i}": {"w": jax.random.normal(ks[i], (sizes[i], sizes[i + 1])) / np.sqrt(sizes[i]),
                          "b": jnp.zeros(sizes[i + 1])} for i in range(depth)}


def deep_mlp(params, x):
    n = len(params)
    for i in range(n):
        x = x @ params[f"layer{i}"]["w"] + params[f"layer{i}"]["b"]
        if i < n - 1:
            x = jnp.tanh(x)
    return x


# --------------------------------------------------------------------------------------------------
def bench_matvec_ratio(quick):
    print("\n## 1. matrix-free product / forward pass (all p^2 = 841 inputs, float64)\n")
    print("Times: min / median (± half the interquartile range, % of the median) over the repeats;")
    print("ratios: median [quartiles] of the per-repeat ratios of interleaved calls.\n")
    onehot, tokens = modular_inputs()
    key = jax.random.PRNGKey(0)
    cases = [("modular MLP (p=29, width 512, x^2)", mlp, mlp_init(key), onehot),
             ("1-layer transformer (d 64, mlp 256, 4 heads)", transformer, transformer_init(key), tokens)]
    print("| model | params | forward (ms) | gradient / forward | flat K v (ms) | flat / forward |")
    print("|---|---|---|---|---|---|")
    rows_cm = []
    out = {}
    for name, f, params, x in cases:
        fwd = jax.jit(jax.vmap(f, in_axes=(None, 0)))
        grad = jax.jit(jax.grad(lambda p: jnp.sum(jax.vmap(f, in_axes=(None, 0))(p, x))))
        ops = {red: entk_matvec(f, params, x, reduction=red) for red in ("flat", "class_mean")}
        vs = {red: jnp.asarray(np.random.default_rng(0).standard_normal(op.dim))
              for red, op in ops.items()}
        t_f, t_g, t_flat = timeit(
            [lambda: fwd(params, x), lambda: grad(params), lambda: ops["flat"](vs["flat"])],
            repeat=7 if quick else 21)
        t_f2, t_cm = timeit([lambda: fwd(params, x), lambda: ops["class_mean"](vs["class_mean"])],
                            repeat=3 if quick else 5)
        n_par = sum(v.size for v in jax.tree_util.tree_leaves(params))
        print(f"| {name} | {n_par} | {t_f.ms()} | {ratio(t_g, t_f)} | {t_flat.ms()} | "
              f"{ratio(t_flat, t_f)} |")
        rows_cm.append(f"| {name} | {t_cm.ms()} | {ratio(t_cm, t_f2)} |")
        out[(name, "flat")] = float(np.median(t_flat.times / t_f.times))
    print("\n| model | class_mean K v (ms) | class_mean / forward |")
    print("|---|---|---|")
    print("\n".join(rows_cm))
    print("\nratio target for the flat product: at most 4 ('gradient / forward' is one reverse-mode")
    print("gradient of the summed outputs, for reference: a product is one VJP plus one JVP).")
    print("class_mean needs one VJP + JVP pair per class (vmapped over the C = 29 classes).")
    # consistency: the flat product equals the materialised kernel on a subset
    f, params, x = mlp, cases[0][2], onehot[:40]
    K = entk(f, params, x, reduction="flat")
    op = entk_matvec(f, params, x, reduction="flat")
    v = jnp.asarray(np.random.default_rng(1).standard_normal(op.dim))
    print(f"check on 40 inputs: max |K v - matvec(v)| / max |K v| = "
          f"{float(jnp.abs(K @ v - op(v)).max() / jnp.abs(K @ v).max()):.1e}")
    bench_chapter_transformer(quick)
    return out


def bench_chapter_transformer(quick):
    """The chapter's call: entk_matvec_mean_logit on the book's transformer (p = 29, all 841 inputs,
    float64), over all parameters and per parameter tensor (the experiment's groups)."""
    print("\nThe chapter's transformer (ntkbook.models.transformer, p = 29, float64 init weights), its")
    print("call: entk_matvec_mean_logit(transformer.apply, params, x, param_filter=group); forward =")
    print("jitted vmapped transformer.apply (all p + 1 logits).\n")
    print("| parameters | product (ms) | product / forward |")
    print("|---|---|---|")
    f = chapter_transformer.apply
    params = chapter_transformer.init(jax.random.PRNGKey(0), dtype=jnp.float64)
    x = jnp.asarray(chapter_transformer.dataset(P)[0])
    fwd = jax.jit(jax.vmap(f, in_axes=(None, 0)))
    v = jnp.asarray(np.random.default_rng(0).standard_normal(x.shape[0]))
    for name, flt in [("all", None)] + list(group_layers().items()):
        op = entk_matvec_mean_logit(f, params, x, param_filter=flt)
        t_f, t_op = timeit([lambda: fwd(params, x), lambda: op(v)], repeat=7 if quick else 21)
        print(f"| {name} | {t_op.ms()} | {ratio(t_op, t_f)} |")


class LowRankPlusNoise:
    """A = U diag(s) U^T + sigma^2 I with U (n, r) orthonormal: known spectrum, O(n r) products."""

    def __init__(self, n, r=60, sigma2=0.1, seed=0):
        rng = np.random.default_rng(seed)
        U, _ = np.linalg.qr(rng.standard_normal((n, r)))
        self.U = jnp.asarray(U)
        self.s = jnp.asarray(100.0 * 0.85 ** np.arange(r))
        self.sigma2 = sigma2
        self.n = n
        self.dtype = self.U.dtype
        self._mv = jax.jit(lambda U, s, v: U @ (s * (U.T @ v)) + sigma2 * v)
        self.top = np.sort(np.asarray(self.s) + sigma2)[::-1]

    def __call__(self, v):
        return self._mv(self.U, self.s, v)

    def dense(self):
        return (self.U * self.s) @ self.U.T + self.sigma2 * jnp.eye(self.n)


def bench_lanczos_vs_dense(sizes, max_dense, quick, k=25):
    print(f"\n## 2. Lanczos top-{k} vs dense eigh (low-rank + noise PSD operator, float64)\n")
    print("Lanczos: 2k+10 = 60 products, full reorthogonalisation (twice); symmetry check off.")
    print("dense: dense_topk (eigh of the formed matrix, then exact residuals; its symmetry and")
    print("finiteness checks included), waited for on every field of its result. Both warmed up")
    print("(compiled) first, then timed in alternation; times min / median (± half the IQR).")
    print("Memory: 'est.' is the size of the arrays the method must hold (dense: the n x n matrix and")
    print("its n x n eigenvectors; Lanczos: the (steps+1) x n basis).\n")
    print("| n = N*C | Lanczos (s) | Lanczos max rel err | Lanczos est. MiB | dense (s) | "
          "dense est. MiB | dense / Lanczos |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        op = LowRankPlusNoise(n)
        est_l = (2 * k + 11) * n * 8 / 2**20
        est_d = 2 * n * n * 8 / 2**20
        run_l = lambda: lanczos_topk(op, n, k, check=False)  # noqa: E731
        repeat = (3 if quick else 5) if n <= 10000 else (1 if quick else 3)
        if n <= max_dense:
            A = block(op.dense())
            run_d = lambda: dense_topk(A, k)  # noqa: E731
            t_l, t_d = timeit([run_l, run_d], repeat=repeat)
            d = block(run_d())
            err_d = float(np.max(np.abs(np.asarray(d.eigenvalues) - op.top[:k]) / op.top[:k]))
            assert err_d < 1e-10
            dense = [t_d.s(), f"{est_d:.0f}", ratio(t_d, t_l)]
            del A, d
        else:
            (t_l,) = timeit([run_l], repeat=repeat)
            dense = ["not run", f"{est_d:.0f}", "-"]
        res = block(run_l())
        err = float(np.max(np.abs(np.asarray(res.eigenvalues) - op.top[:k]) / op.top[:k]))
        print(f"| {n} | {t_l.s()} | {err:.1e} | {est_l:.1f} | " + " | ".join(dense) + " |")


def bench_own_vs_matfree(quick, k=25):
    n = 5000 if quick else 20000
    print(f"\n## 3. own Lanczos vs matfree.decomp.tridiag_sym (n = {n}, top-{k}, 60 products)\n")
    try:
        from matfree import decomp
    except ImportError:
        print("matfree is not installed here (it is optional): section skipped.")
        return

    op = LowRankPlusNoise(n, seed=1)
    steps = 2 * k + 10
    v0 = jax.random.normal(jax.random.PRNGKey(0), (n,))

    alg = decomp.tridiag_sym(steps, reortho="full", materialize=True)

    @jax.jit
    def matfree_topk(U, s, v0):
        r = alg(lambda v: U @ (s * (U.T @ v)) + op.sigma2 * v, v0)
        w, S = jnp.linalg.eigh(r.J_small)
        w, S = w[::-1][:k], S[:, ::-1][:, :k]
        return w, r.Q_tall.T @ S

    def run_matfree():
        return matfree_topk(op.U, op.s, v0)

    def run_own():
        return lanczos_topk(op, n, k, check=False)

    t_own, t_mf = timeit([run_own, run_matfree], repeat=3 if quick else 7)
    print("| implementation | time (s) | products | max rel eigenvalue err | max true residual / lambda_1 |")
    print("|---|---|---|---|---|")
    for name, fn, t in (("ntkbook.ntk.eig.lanczos_topk (reorth x2)", run_own, t_own),
                        ("matfree tridiag_sym(reortho='full')", run_matfree, t_mf)):
        out = block(fn())
        w, V = (out.eigenvalues, out.eigenvectors) if hasattr(out, "eigenvalues") else out
        err = float(np.max(np.abs(np.asarray(w) - op.top[:k]) / op.top[:k]))
        res = float(jnp.max(jnp.linalg.norm(jax.vmap(op, in_axes=1, out_axes=1)(V) - V * w, axis=0)) / op.top[0])
        print(f"| {name} | {t.s()} | {steps} | {err:.1e} | {res:.1e} |")
    print(f"\nown / matfree time: {ratio(t_own, t_mf)}")

    # breakdown: an operator of rank 3 with k = 5
    B = jnp.asarray(np.random.default_rng(0).standard_normal((200, 3)))
    alg5 = decomp.tridiag_sym(10, reortho="full")
    r = alg5(lambda v: B @ (B.T @ v), jnp.ones(200))
    own = lanczos_topk(lambda v: B @ (B.T @ v), 200, 5, num_steps=10)
    print(f"\nrank-3 operator, 10 steps: matfree T finite: {bool(jnp.all(jnp.isfinite(r.J_small)))}; "
          f"own eigenvalues finite: {bool(jnp.all(jnp.isfinite(own.eigenvalues)))} "
          f"({np.round(np.asarray(own.eigenvalues), 6).tolist()})")


def bench_filtered(quick):
    n_in = 256 if quick else 1024
    print(f"\n## 4. layer-filtered product on an 8-layer MLP (width 256, {n_in} inputs, C = 10)\n")
    key = jax.random.PRNGKey(0)
    params = deep_mlp_init(key)
    x = jax.random.normal(jax.random.PRNGKey(1), (n_in, 64))
    fwd = jax.jit(jax.vmap(deep_mlp, in_axes=(None, 0)))
    v = jnp.asarray(np.random.default_rng(0).standard_normal(n_in * 10))
    print("| filter | forward (ms) | reuse forward (ms) | recompute forward (ms) | recompute / reuse | "
          "reuse / forward |")
    print("|---|---|---|---|---|---|")
    for flt in ("layer7", None):
        op_r = entk_matvec(deep_mlp, params, x, reduction="flat", param_filter=flt)
        op_n = entk_matvec(deep_mlp, params, x, reduction="flat", param_filter=flt, reuse_forward=False)
        t_f, t_r, t_n = timeit([lambda: fwd(params, x), lambda: op_r(v), lambda: op_n(v)],
                               repeat=5 if quick else 11)
        a = op_r(v)
        b = op_n(v)
        assert float(jnp.abs(a - b).max() / jnp.abs(a).max()) < 1e-10
        print(f"| {flt or 'all parameters'} | {t_f.ms()} | {t_r.ms()} | {t_n.ms()} | "
              f"{ratio(t_n, t_r)} | {ratio(t_r, t_f)} |")


def bench_precision(quick, route="jacobians"):
    """Each precision on the per-example Jacobians' route (where precision sets the memory the
    Jacobians take, section 5 of the README); ``route="structured"`` for the engine's default."""
    width = 128 if quick else 512
    print(f"\n## 5. materialised class-mean kernel by precision (modular MLP p = 29, width {width}, "
          f"N = 841, route={route!r})\n")
    onehot, _ = modular_inputs()
    params = mlp_init(jax.random.PRNGKey(0), width=width)
    fns = [lambda pr=pr: entk(mlp, params, onehot, reduction="class_mean", precision=pr, route=route)
           for pr in PRECISIONS]
    times = timeit(fns, repeat=2 if quick else 3)
    ref = np.asarray(block(fns[0]()))
    lam_ref = np.linalg.eigvalsh(ref)[::-1]
    print("| precision | time (s) | time / model's | kernel dtype | max abs err / max entry | "
          "max rel err, top 56 eigenvalues | max rel err, all |")
    print("|---|---|---|---|---|---|---|")
    for pr, fn, t in zip(PRECISIONS, fns, times):
        k = block(fn())
        k64 = np.asarray(k, dtype=np.float64)
        lam = np.linalg.eigvalsh(k64)[::-1]
        rel = np.abs(lam - lam_ref) / np.abs(lam_ref)
        print(f"| {pr} | {t.s()} | {ratio(t, times[0])} | {k.dtype} | "
              f"{np.abs(k64 - ref).max() / np.abs(ref).max():.1e} | {rel[:56].max():.1e} | {rel.max():.1e} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats, sizes up to 10^4, matfree at n = 5000, 256 inputs in section 4 "
                         "(a few minutes on 2 CPU cores)")
    ap.add_argument("--sizes", default=None, help="comma-separated n of section 2 "
                    "(default 1000,3000,10000,30000,100000; --quick: 1000,3000,10000)")
    ap.add_argument("--max-dense", type=int, default=3000)  # dense eigh only up to this n
    ap.add_argument("--sections", default="1,2,3,4,5", help="comma-separated sections to run (default all)")
    args = ap.parse_args()
    sections = {int(s) for s in args.sections.split(",")}
    sizes = args.sizes or ("1000,3000,10000" if args.quick else "1000,3000,10000,30000,100000")
    print(f"# bench_entk: jax {jax.__version__}, backend {jax.default_backend()}, "
          f"devices {jax.devices()}, float64{', --quick' if args.quick else ''}, sections {args.sections}; "
          f"load average (1, 5, 15 min) {os.getloadavg()} on {os.cpu_count()} CPUs")
    t0 = time.perf_counter()
    if 1 in sections:
        bench_matvec_ratio(args.quick)
    if 2 in sections:
        bench_lanczos_vs_dense([int(s) for s in sizes.split(",")], args.max_dense, args.quick)
    if 3 in sections:
        bench_own_vs_matfree(args.quick)
    if 4 in sections:
        bench_filtered(args.quick)
    if 5 in sections:
        bench_precision(args.quick)
    print(f"\ntotal benchmark time: {time.perf_counter() - t0:.0f} s; load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
