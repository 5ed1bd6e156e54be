"""Torch side of bench_author.py: the author's eNTK routes of Paper B, re-implemented in torch.

    <torch-env>/bin/python benchmarks/torch_worker.py IN.npz OUT.npz --route ROUTE [--tensors all|W_U]

Runs inside the torch environment of setup_torch_env.sh (imports only numpy and torch).  Paper B's
author (Lin, "Feature Identification via the Empirical NTK", code at github jylin04/mi-ntk) computes
his kernels with per-example Jacobians, ``vmap(jacrev(f))`` over a batch, flattened per parameter
tensor to ``(N, C, P_i)`` and contracted with ``einsum``.  His repository has no licence, so this
file is written from that algorithm, not from his code; it follows his steps and their cost (two
Jacobian passes when he passes the same inputs twice, the full ``C x C`` blocks where he forms them,
every block alive until the end as in his dictionaries), in float32 as his runs, on 2 threads.

Routes (``--route``)
    ``pairs``       modular MLP, his notebook's ``empirical_ntk_by_layer`` route: Jacobians of the
                    inputs taken twice (x_1 = x_2 = X), per layer ``K_l = einsum('ncp,mdp->nmcd')``
                    (N, N, C, C), then the class mean ``sum_l mean_c K_l[:, :, c, c]``;
    ``diag``        modular MLP, his cheaper ``jacobian_by_layer`` route: the Jacobians once, per
                    layer, only matching classes, ``sum_l einsum('ncp,mcp->nm') / C``;
    ``mean_logit``  one-layer transformer, his transformer notebook's per-tensor kernel (one group
                    per parameter tensor, Jacobians taken twice, (N, N, C, C) per tensor, all kept)
                    averaged over all C x C logit pairs.  ``--tensors W_U``: the W_U kernel alone,
                    differentiating W_U only (his per-parameter Jacobian, without the tiling).

IN.npz (from the driver): the weights in our names (MLP: ``W1`` (width, 2p), ``W2`` (p, width);
transformer: ``W_E`` ... ``W_U`` in the author's layout, see ntkbook.models.transformer) and the
inputs ``x`` (MLP: one-hot (N, 2p); transformer: tokens (N, 3)); cast to float32 here.

With ``--author-code DIR`` (a local checkout of the author's repository, which nothing here
copies) the worker runs **his** code instead of the re-implementation: the MLP is his
``ma.ModularArithmeticMLP``, ``pairs`` calls his ``ntk.empirical_ntk_by_layer`` and then his
notebook's class mean (``K.diagonal(dim1=2, dim2=3).mean(-1)`` summed over the layers), ``diag``
calls his ``ntk.jacobian_by_layer`` and contracts its matching classes; the transformer is the
model and the ``empirical_ntk_by_layer`` defined in his notebook
``modular_arithmetic_transformer_v4.ipynb`` (their cells executed as they are), and each kernel
his notebook's ``entk[name][:, :, :30, :30].mean(dim=(2, 3))``.  His function differentiates every
tensor, so ``--tensors W_U`` costs what ``all`` costs there.  The weights are copied into his
modules by name (the last component of his parameter names is ours).

Timing: one warm-up call on the first ``--warmup-n`` inputs (torch compiles nothing; this loads
kernels and warms the allocator), then one timed call on all inputs.  OUT.npz: the kernel(s) as
``K/<group>``, the model's outputs ``fx`` on the inputs (the driver checks they equal ours), and
``meta`` (JSON: seconds, versions, threads).  With ``--mem-limit-bytes`` the process limits its own
address space (``RLIMIT_AS``); a failed allocation exits with code 3 and the word OUT_OF_MEMORY on
stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

OUT_OF_MEMORY = 3
TRANSFORMER_NAMES = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U")


class ModularMLP(nn.Module):
    """``f(x) = W2 (W1 x / sqrt(2p))^2 / width`` on a batch ``x`` (B, 2p) -> (B, p); no biases.
    Parameters ``hidden.weight`` (width, 2p) and ``readout.weight`` (p, width): two layers, the
    author's two layer groups."""

    def __init__(self, w1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        self.hidden = nn.Linear(w1.shape[1], w1.shape[0], bias=False)
        self.readout = nn.Linear(w2.shape[1], w2.shape[0], bias=False)
        with torch.no_grad():
            self.hidden.weight.copy_(w1)
            self.readout.weight.copy_(w2)

    def forward(self, x):
        h = self.hidden(x) / math.sqrt(x.shape[-1])
        return self.readout(h * h) / self.hidden.weight.shape[0]


class OneLayerTransformer(nn.Module):
    """The author's one-layer transformer on ``(a, b, =)``: embedding plus position, attention with
    a causal mask over all three positions, a ReLU MLP, both residual, no LayerNorm, no biases;
    logits (B, V) at position 2.  Parameter layout as ntkbook.models.transformer (his layout)."""

    def __init__(self, weights: dict[str, torch.Tensor]):
        super().__init__()
        for name in TRANSFORMER_NAMES:
            setattr(self, name, nn.Parameter(weights[name].clone()))

    def forward(self, tokens):
        x = self.W_E[tokens] + self.W_pos  # (B, 3, d)
        d_head = self.W_Q.shape[1]
        q = torch.einsum("nhm,bsm->bsnh", self.W_Q, x)
        k = torch.einsum("nhm,bsm->bsnh", self.W_K, x)
        v = torch.einsum("nhm,bsm->bsnh", self.W_V, x)
        scores = torch.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(d_head)
        later = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
        pattern = torch.softmax(scores.masked_fill(later, float("-inf")), dim=-1)
        z = torch.einsum("bnqk,bknh->bqnh", pattern, v).flatten(2)
        x = x + torch.einsum("mn,bsn->bsm", self.W_O, z)
        x = x + torch.relu(x @ self.W_in) @ self.W_out
        return (x @ self.W_U)[:, 2, :]


def per_example_jacobians(model: nn.Module, x: torch.Tensor, wrt: list[str]) -> dict[str, torch.Tensor]:
    """``{name: (N, C, P_name)}``: the Jacobian of each example's outputs with respect to the
    parameters ``wrt`` (the others held fixed), by ``vmap(jacrev(.))`` over the examples."""
    params = {n: p.detach() for n, p in model.named_parameters()}
    frozen = {n: p for n, p in params.items() if n not in wrt}

    def one(sel, xi):
        return functional_call(model, {**frozen, **sel}, (xi.unsqueeze(0),)).squeeze(0)

    jac = vmap(jacrev(one), in_dims=(None, 0))({n: params[n] for n in wrt}, x)
    return {n: jac[n].flatten(start_dim=2) for n in wrt}


def layer_of(name: str) -> str:
    """The author's MLP layer groups: the parameter name without its last component."""
    return name.rsplit(".", 1)[0]


def route_pairs(model, x):
    """Class-mean kernel through the full (N, N, C, C) block of every layer (x_1 = x_2 = x)."""
    names = [n for n, _ in model.named_parameters()]
    j1 = per_example_jacobians(model, x, names)
    j2 = per_example_jacobians(model, x, names)
    blocks: dict[str, torch.Tensor] = {}
    for n in names:
        contrib = torch.einsum("ncp,mdp->nmcd", j1[n], j2[n])
        g = layer_of(n)
        blocks[g] = contrib if g not in blocks else blocks[g] + contrib
    return {"class_mean": sum(k.diagonal(dim1=2, dim2=3).mean(-1) for k in blocks.values())}


def route_diag(model, x):
    """Class-mean kernel from one Jacobian pass, contracting only matching classes per layer."""
    names = [n for n, _ in model.named_parameters()]
    jac = per_example_jacobians(model, x, names)
    layers: dict[str, torch.Tensor] = {}
    for n in names:  # the author's jacobian_by_layer concatenates a layer's tensors
        g = layer_of(n)
        layers[g] = jac[n] if g not in layers else torch.cat((layers[g], jac[n]), dim=2)
    C = next(iter(layers.values())).shape[1]
    return {"class_mean": sum(torch.einsum("ncp,mcp->nm", j, j) for j in layers.values()) / C}


def route_mean_logit(model, x, tensors: list[str]):
    """Per-tensor kernels averaged over all C x C logit pairs; every (N, N, C, C) block is kept
    until all are formed, as in the author's dictionary of kernels."""
    j1 = per_example_jacobians(model, x, tensors)
    j2 = per_example_jacobians(model, x, tensors)
    blocks = {n: torch.einsum("ncp,mdp->nmcd", j1[n], j2[n]) for n in tensors}
    return {n: k.mean(dim=(2, 3)) for n, k in blocks.items()}


#: the cells of the author's transformer notebook that define its model and its kernel (by what
#: they define, so that a re-numbered notebook still works)
VERBATIM_CELLS = ("class MATransformer", "def empirical_ntk_by_layer")


def _notebook_namespace(path) -> dict:
    """Execute the author's transformer notebook's imports (line by line: one it cannot import
    here, a progress bar or a plotting library, is skipped) and its defining cells
    (:data:`VERBATIM_CELLS`), as they are, in a fresh namespace."""
    import pathlib

    cells = json.loads(pathlib.Path(path).read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    defining = [next((c for c in code if marker in c), None) for marker in VERBATIM_CELLS]
    missing = [m for m, c in zip(VERBATIM_CELLS, defining) if c is None]
    if missing:
        raise SystemExit(f"torch_worker: {path} has no cell with {missing}; is it the author's notebook?")
    ns: dict = {}
    for cell in code:
        lines = [ln for ln in cell.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if lines and all(ln.startswith(("import ", "from ")) for ln in lines):
            for ln in lines:
                try:
                    exec(ln, ns)  # noqa: S102 (the author's imports)
                except ImportError:
                    pass
    for cell in dict.fromkeys(defining):
        exec(compile(cell, str(path), "exec"), ns)  # noqa: S102 (the author's code, run on purpose)
    return ns


def _load_by_last_name(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` (our names) into ``model``'s parameters whose names end in them."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            w = weights[name.rsplit(".", 1)[-1]]
            if tuple(w.shape) != tuple(param.shape):
                raise SystemExit(f"torch_worker: {name} has shape {tuple(param.shape)}, ours {tuple(w.shape)}")
            param.copy_(w)


def build_verbatim(route: str, weights: dict[str, np.ndarray], x: np.ndarray, code_dir: str):
    """The author's model from his checkout ``code_dir`` and the kernel function of his code for
    ``route``: ``(model, x, fn)`` with ``fn(xs) -> {name: kernel}``."""
    import pathlib

    sys.path.insert(0, str(code_dir))
    import ma  # noqa: PLC0415  (his modules)
    import ntk  # noqa: PLC0415

    if route in ("pairs", "diag"):
        w1, w2 = (torch.as_tensor(weights[k], dtype=torch.float32) for k in ("W1", "W2"))
        p, width = w2.shape[0], w1.shape[0]
        model = ma.ModularArithmeticMLP(p=p, n_hidden=width)
        with torch.no_grad():
            model.net[0].weight.copy_(w1)
            model.net[3].weight.copy_(w2)
        if route == "pairs":
            def fn(xs):
                entk = ntk.empirical_ntk_by_layer(model, xs, xs)
                return {"class_mean": sum(k.diagonal(dim1=2, dim2=3).mean(-1) for k in entk.values())}
        else:
            def fn(xs):
                jac = ntk.jacobian_by_layer(model, xs)
                return {"class_mean": sum(torch.einsum("ncp,mcp->nm", j, j) for j in jac.values()) / p}
        return model, torch.as_tensor(x, dtype=torch.float32), fn
    ns = _notebook_namespace(pathlib.Path(code_dir) / "modular_arithmetic_transformer_v4.ipynb")
    ours = {n: torch.as_tensor(weights[n], dtype=torch.float32) for n in TRANSFORMER_NAMES}
    d_vocab, d_model = ours["W_E"].shape
    model = ns["MATransformer"](d_vocab, d_model, ours["W_Q"].shape[0], ours["W_in"].shape[1])
    _load_by_last_name(model, ours)

    def fn(xs):
        entk = ns["empirical_ntk_by_layer"](model, xs, xs)
        return {name.rsplit(".", 1)[-1]: k[:, :, :d_vocab, :d_vocab].mean(dim=(2, 3)) for name, k in entk.items()}

    return model, torch.as_tensor(x, dtype=torch.long), fn


def build(route: str, weights: dict[str, np.ndarray], x: np.ndarray):
    if route in ("pairs", "diag"):
        model = ModularMLP(torch.as_tensor(weights["W1"], dtype=torch.float32),
                           torch.as_tensor(weights["W2"], dtype=torch.float32))
        return model, torch.as_tensor(x, dtype=torch.float32)
    model = OneLayerTransformer({n: torch.as_tensor(weights[n], dtype=torch.float32)
                                 for n in TRANSFORMER_NAMES})
    return model, torch.as_tensor(x, dtype=torch.long)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--route", required=True, choices=("pairs", "diag", "mean_logit"))
    ap.add_argument("--tensors", default="all", choices=("all", "W_U"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-n", type=int, default=8)
    ap.add_argument("--mem-limit-bytes", type=int, default=0, help="RLIMIT_AS of this process (0: none)")
    ap.add_argument("--author-code", default=None,
                    help="a local checkout of the author's repository: run his code, not the re-implementation")
    args = ap.parse_args(argv)
    if args.mem_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (args.mem_limit_bytes, args.mem_limit_bytes))
    torch.set_num_threads(args.threads)

    d = np.load(args.inp)
    weights = {k: d[k] for k in d.files if k != "x"}
    if args.author_code:
        model, x, his = build_verbatim(args.route, weights, d["x"], args.author_code)
        keep = None if args.tensors == "all" else ["W_U"]
        fn = lambda xs: {n: k for n, k in his(xs).items() if keep is None or n in keep}  # noqa: E731
    else:
        model, x = build(args.route, weights, d["x"])
        if args.route == "pairs":
            fn = lambda xs: route_pairs(model, xs)  # noqa: E731
        elif args.route == "diag":
            fn = lambda xs: route_diag(model, xs)  # noqa: E731
        else:
            tensors = list(TRANSFORMER_NAMES) if args.tensors == "all" else ["W_U"]
            fn = lambda xs: route_mean_logit(model, xs, tensors)  # noqa: E731
    model.eval()

    try:
        with torch.no_grad():
            fx = model(x).numpy()
        t = time.perf_counter()
        fn(x[: args.warmup_n])
        warmup_s = time.perf_counter() - t
        t = time.perf_counter()
        ks = fn(x)
        seconds = time.perf_counter() - t
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, MemoryError) or "memory" in str(exc).lower() or "alloc" in str(exc).lower():
            print(f"OUT_OF_MEMORY: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                  file=sys.stderr)
            return OUT_OF_MEMORY
        raise
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": "float32",
            "N": int(x.shape[0]), "seconds": seconds, "warmup_s": warmup_s,
            "route": args.route, "tensors": args.tensors, "author_code": bool(args.author_code)}
    np.savez(args.out, meta=np.asarray(json.dumps(meta)), fx=fx,
             **{f"K/{n}": k.detach().numpy() for n, k in ks.items()})
    print(f"[torch_worker] {args.route} ({args.tensors}) N={x.shape[0]}: {seconds:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
