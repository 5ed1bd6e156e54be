"""Paper B's eNTK routes as the author runs them (torch) against the chapters' calls (a script).

    bash benchmarks/setup_torch_env.sh                     # once: /tmp/torch-env (torch CPU)
    PYTHONPATH=lib .venv/bin/python benchmarks/bench_author.py [--quick] [--torch-python PY]

For each case, the same weights and inputs go to a fresh process per measurement:

* the author's route, re-implemented in torch by torch_worker.py (float32, 2 threads), run in the
  torch environment under a memory limit (its own ``RLIMIT_AS``, ``--mem-limit-gb``);
* ours at float64, the chapter's call (``modular_mlp.class_mean_kernel`` and
  ``modular_transformer.group_kernels`` on all p^2 inputs; on a subset the same engine call,
  ``entk.entk(..., reduction="class_mean")`` or ``entk.entk_mean_logit(..., layers=group_layers())``);
* ours at float32 (the same engine call on float32 weights and inputs, x64 off): the
  equal-precision comparison.

With ``--author-code DIR`` (a local checkout of the author's repository, github jylin04/mi-ntk; nothing
of it is in this project) the author's side runs **his** code, his ``ma.py``/``ntk.py`` and the
cells of his transformer notebook that define its model and kernel (torch_worker.py says which),
instead of the re-implementation: the re-implementation is then held against the original.

Our calls take the engine's default ``route="auto"`` (each parameter leaf by structured
derivatives where that costs less, :mod:`ntkbook.ntk.structured`; the dense layers of both models
do). ``--ours-route jacobians`` or ``structured`` makes our two sides pass that ``route=`` to the
same engine calls instead (``jacobians``: every per-example Jacobian formed, the engine before
structured derivatives), at float64 and float32 alike.

Cases (``--quick`` shrinks the MLP ones): the one-layer transformer's nine per-tensor mean-logit
kernels at N = 100 and N = 841, its W_U kernel alone at N = 841, the modular MLP's class-mean
kernel by the author's full-block route at N = 400 and by his diagonal-block route at N = 841
(p = 29, width 512; weights ``modular.init(PRNGKey(0))``; the transformer's weights are the author's
initial weights, ``ntkbook.data.load_transformer_replay``).  Inputs: all p^2 pairs, or a fixed random
subset (seed 0) in a-major order.

Method: every measurement is a fresh process, so its peak RSS (``os.wait4``) is that of one call
plus imports.  Ours: one untimed full call first (compilation), then one timed call; the author's:
one untimed call on 8 inputs, then one timed call.  Repeats are interleaved (author, ours f64, ours
f32, then again), and ratios are the median [quartiles] of the per-repeat ratios
(``benchmarks/timing.py``).  Kernel agreement: relative Frobenius error against ours at float64
(worst over the tensors), target float32 round-off (<= 1e-5).  A case whose arrays cannot fit
in the memory limit (a lower bound computed from the shapes) is reported as such without running;
one that runs out of memory anyway is reported the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from timing import Timing, ratio  # noqa: E402  (shared with bench_entk.py)

P_MOD = 29  # the modulus of both chapters
MLP_WIDTH = 512
TRANSFORMER_C = P_MOD + 1  # logits: p residues and '='
AGREEMENT_TOL = 1e-5
OUT_OF_MEMORY = 3  # torch_worker.py's exit code for a failed allocation
SETUP_HINT = ("the torch environment is missing: run `bash benchmarks/setup_torch_env.sh` (creates "
              "/tmp/torch-env with torch 2.13.0+cpu) or pass --torch-python PATH to a Python that "
              "imports torch")


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: the model, N inputs, the author's route (torch_worker.py's ``--route``) and which
    tensors (``all`` or ``W_U``)."""

    label: str
    model: str  # "mlp" | "transformer"
    n: int
    route: str  # "pairs" | "diag" | "mean_logit"
    tensors: str = "all"


def cases(quick: bool) -> list[Case]:
    """The issue's table (``quick``: the two MLP rows at N = 100 and N = 200)."""
    tf = "1L transformer, per-tensor mean over logit pairs"
    return [
        Case(f"{tf}, all 9 tensors", "transformer", 100, "mean_logit"),
        Case(f"{tf}, all 9 tensors", "transformer", P_MOD**2, "mean_logit"),
        Case(f"{tf}, W_U only", "transformer", P_MOD**2, "mean_logit", "W_U"),
        Case("modular MLP class mean, full C x C blocks (empirical_ntk_by_layer)", "mlp",
             100 if quick else 400, "pairs"),
        Case("modular MLP class mean, matching classes only (jacobian_by_layer)", "mlp",
             200 if quick else P_MOD**2, "diag"),
    ]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="The author's eNTK routes (torch) against ours.")
    ap.add_argument("--quick", action="store_true", help="smaller MLP cases, 2 repeats")
    ap.add_argument("--repeat", type=int, default=None, help="timed repeats (default 3, quick 2)")
    ap.add_argument("--torch-python", default="/tmp/torch-env/bin/python",
                    help="Python of the torch environment (setup_torch_env.sh)")
    ap.add_argument("--mem-limit-gb", type=float, default=16.0,
                    help="address-space limit of the author's processes, GiB")
    ap.add_argument("--only", default="", help="comma-separated row numbers (1-based) to run")
    ap.add_argument("--author-code", default=None,
                    help="a local checkout of the author's repository (jylin04/mi-ntk): run his code verbatim")
    ap.add_argument("--ours-route", choices=("auto", "jacobians", "structured"), default="auto",
                    help="the route= of our engine calls (default: auto, the chapters' calls)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if not args.mem_limit_gb > 0:
        ap.error("--mem-limit-gb must be positive")
    return args


# --------------------------------------------------------------------------------------------------
# weights and inputs
# --------------------------------------------------------------------------------------------------
def subset(n_all: int, n: int, seed: int = 0) -> np.ndarray:
    """Rows of a fixed random subset of size ``n`` (all rows, in order, when ``n >= n_all``)."""
    if n >= n_all:
        return np.arange(n_all)
    return np.sort(np.random.default_rng(seed).permutation(n_all)[:n])


def model_weights(model: str) -> dict[str, np.ndarray]:
    """float64 weights: the MLP's ``modular.init(PRNGKey(0))``; the transformer's initial weights
    of the author's run (the chapter's replay)."""
    import jax

    if model == "mlp":
        from ntkbook.models import modular

        with jax.enable_x64(True):
            w = modular.init(jax.random.PRNGKey(0), P_MOD, MLP_WIDTH, dtype=np.float64)
            return {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    from ntkbook import data

    return {k: np.asarray(v, dtype=np.float64) for k, v in data.load_transformer_replay().params.items()}


def model_inputs(model: str, n: int) -> np.ndarray:
    """The MLP's one-hot inputs (n, 2p) float64, or the transformer's tokens (n, 3) int64."""
    if model == "mlp":
        from ntkbook.models import modular

        x = modular.dataset(P_MOD)[0]
    else:
        from ntkbook.models import transformer

        x = transformer.dataset(P_MOD)[0]
    return x[subset(x.shape[0], n)]


def export_inputs(path, weights: dict[str, np.ndarray], x: np.ndarray) -> None:
    """Write the weights (float64, our names) and the inputs ``x`` to ``path`` (.npz), read by
    torch_worker.py and by our measuring processes."""
    if "x" in weights:
        raise ValueError("a weight may not be called 'x'")
    np.savez(path, x=x, **{k: np.asarray(v, dtype=np.float64) for k, v in weights.items()})


def author_min_bytes(case: Case, weights: dict[str, np.ndarray], verbatim: bool = False) -> int:
    """A lower bound on the memory of the author's route: the float32 arrays it holds at once.

    pairs: two Jacobians (N, C, P) and one (N, N, C, C) block per layer; diag: one Jacobian;
    mean_logit: two Jacobians of the selected tensors and one (N, N, C, C) block per tensor (his
    own code, ``verbatim``, differentiates every tensor whichever are kept).
    """
    n = case.n
    if case.model == "mlp":
        C, n_params, n_layers = P_MOD, sum(w.size for w in weights.values()), len(weights)
        if case.route == "pairs":
            return 4 * (2 * n * C * n_params + n_layers * n * n * C * C)
        return 4 * (n * C * n_params + n * n)
    C = TRANSFORMER_C
    names = list(weights) if case.tensors == "all" or verbatim else ["W_U"]
    n_params = sum(weights[k].size for k in names)
    return 4 * (2 * n * C * n_params + len(names) * n * n * C * C)


# --------------------------------------------------------------------------------------------------
# our side (runs in a child process of its own)
# --------------------------------------------------------------------------------------------------
def ours_call(case: Case, precision: str, route: str = "auto") -> str:
    """What our measurement calls, for the output."""
    if route != "auto":
        arg = f', route="{route}"'
        if case.model == "mlp":
            return f'entk.entk(f, params, x, reduction="class_mean"{arg})'
        if case.tensors == "W_U":
            return f'entk.entk_mean_logit(transformer.apply, params, x, param_filter=group_layers()["W_U"]{arg})'
        return f"entk.entk_mean_logit(transformer.apply, params, x, layers=group_layers(){arg})"
    full = case.n == P_MOD**2 and precision == "f64"
    if case.model == "mlp":
        if full:
            return "modular_mlp.class_mean_kernel(Config(), params)"
        return 'entk.entk(f, params, x, reduction="class_mean")'
    if full and case.tensors == "all":
        return 'modular_transformer.group_kernels(params, 29, "mean_logit")'
    if case.tensors == "W_U":
        return 'entk.entk_mean_logit(transformer.apply, params, x, param_filter=group_layers()["W_U"])'
    return "entk.entk_mean_logit(transformer.apply, params, x, layers=group_layers())"


def ours_kernels(case: Case, precision: str, weights, x, route: str = "auto") -> dict[str, np.ndarray]:
    """Our kernels for ``case`` at ``precision`` ("f64" needs x64 enabled), as ``ours_call`` says."""
    import jax
    import jax.numpy as jnp

    from ntkbook.experiments import modular_mlp, modular_transformer
    from ntkbook.models import modular, transformer
    from ntkbook.ntk import entk

    dtype = jnp.float64 if precision == "f64" else jnp.float32
    call = ours_call(case, precision, route)
    if call.startswith("modular_mlp."):
        return {"class_mean": modular_mlp.class_mean_kernel(modular_mlp.Config(), weights)}
    if call.startswith("modular_transformer."):
        return modular_transformer.group_kernels(weights, P_MOD, "mean_logit")
    params = {k: jnp.asarray(v, dtype=dtype) for k, v in weights.items()}
    if case.model == "mlp":
        k = entk.entk(modular.make_apply("square"), params, jnp.asarray(x, dtype=dtype), reduction="class_mean",
                      route=route)
        return {"class_mean": np.asarray(jax.block_until_ready(k))}
    layers = modular_transformer.group_layers()
    xt = jnp.asarray(x)
    if case.tensors == "W_U":
        k = entk.entk_mean_logit(transformer.apply, params, xt, param_filter=layers["W_U"], route=route)
        return {"W_U": np.asarray(jax.block_until_ready(k))}
    ks = jax.block_until_ready(entk.entk_mean_logit(transformer.apply, params, xt, layers=layers, route=route))
    return {k: np.asarray(v) for k, v in ks.items()}


def measure_ours_child(spec: dict) -> int:
    """Child process: one untimed call (compilation), one timed call; kernels and times to .npz."""
    import jax

    jax.config.update("jax_enable_x64", spec["precision"] == "f64")
    case = Case(**spec["case"])
    d = np.load(spec["inp"])
    weights = {k: d[k] for k in d.files if k != "x"}
    x = d["x"]
    route = spec.get("route", "auto")
    t = time.perf_counter()
    ours_kernels(case, spec["precision"], weights, x, route)
    first = time.perf_counter() - t
    t = time.perf_counter()
    ks = ours_kernels(case, spec["precision"], weights, x, route)
    seconds = time.perf_counter() - t
    meta = {"seconds": seconds, "first_s": first, "jax": jax.__version__, "route": route}
    np.savez(spec["out"], meta=np.asarray(json.dumps(meta)), **{f"K/{k}": v for k, v in ks.items()})
    return 0


# --------------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    """One measurement process: exit code, its peak RSS (bytes) and what it wrote."""

    rc: int
    peak_rss: int
    seconds: float | None = None
    first_s: float | None = None
    kernels: dict[str, np.ndarray] | None = None
    fx: np.ndarray | None = None
    meta: dict | None = None
    log: str = ""


def run_process(cmd: list[str], out: str, log_path: str) -> Run:
    """Run ``cmd`` to completion (no fork of this multithreaded process: no ``preexec_fn``), take
    its peak RSS from ``os.wait4``, and read what it wrote to ``out``."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = Path(log_path).read_text()
    run = Run(rc=proc.returncode, peak_rss=usage.ru_maxrss * 1024, log=text)
    if run.rc == 0:
        with np.load(out) as z:
            run.meta = json.loads(str(z["meta"]))
            run.kernels = {k[2:]: z[k] for k in z.files if k.startswith("K/")}
            run.fx = z["fx"] if "fx" in z.files else None
        run.seconds = run.meta["seconds"]
        run.first_s = run.meta.get("first_s", run.meta.get("warmup_s"))
    return run


def check_torch_env(python: str) -> str:
    """The torch version of ``python``; raises SystemExit with the set-up hint when it has none."""
    if not Path(python).exists():
        raise SystemExit(f"bench_author: {python} does not exist; {SETUP_HINT}")
    r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"bench_author: {python} cannot import torch ({last}); {SETUP_HINT}")
    return r.stdout.strip()


# --------------------------------------------------------------------------------------------------
# numbers and the table
# --------------------------------------------------------------------------------------------------
def rel_frobenius(ks: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    """Worst relative Frobenius error ``|K - K_ref| / |K_ref|`` over the kernels of ``ref``."""
    if set(ks) != set(ref):
        raise ValueError(f"kernel names differ: {sorted(ks)} vs {sorted(ref)}")
    return max(float(np.linalg.norm(np.asarray(ks[k], np.float64) - ref[k]) / np.linalg.norm(ref[k]))
               for k in ref)


def author_side(code_dir: str | None) -> str:
    """What runs on the author's side: the re-implementation, or his checkout and its commit."""
    if not code_dir:
        return "the re-implementation (torch_worker.py)"
    r = subprocess.run(["git", "-C", code_dir, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = r.stdout.strip() if r.returncode == 0 else "not a git checkout"
    return f"his code, verbatim, from {code_dir} ({commit})"


def machine_state() -> str:
    """The load average (1, 5, 15 min) and the available memory now, for the record beside a figure."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"load {load}; available memory {'?' if avail is None else gib(avail)} GiB"


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f}"


@dataclasses.dataclass
class RowResult:
    """What one case measured: times per repeat (author, ours f64, ours f32), the author's status
    when he did not run ('does not fit ...'), agreements and peak RSS (bytes) of each."""

    case: Case
    author_times: list[float] = dataclasses.field(default_factory=list)
    f64_times: list[float] = dataclasses.field(default_factory=list)
    f32_times: list[float] = dataclasses.field(default_factory=list)
    author_status: str | None = None
    err_author: float | None = None
    err_f32: float | None = None
    rss: dict[str, int] = dataclasses.field(default_factory=dict)


HEADER = ("| case | N | author, torch f32 (s) | ours f64, chapter's call (s) | ours f32 (s) "
          "| author / ours f64 | author / ours f32 | rel. error vs ours f64: author, ours f32 "
          "| peak RSS (GiB): author, f64, f32 |")


def format_row(r: RowResult) -> str:
    dash = "-"
    if r.author_status:
        author, a64, a32 = r.author_status, dash, dash
    else:
        author = Timing(np.asarray(r.author_times)).s()
        a64 = ratio(Timing(np.asarray(r.author_times)), Timing(np.asarray(r.f64_times)))
        a32 = ratio(Timing(np.asarray(r.author_times)), Timing(np.asarray(r.f32_times)))
    e_a = dash if r.err_author is None else f"{r.err_author:.1e}"
    e_32 = dash if r.err_f32 is None else f"{r.err_f32:.1e}"
    rss = ", ".join(gib(r.rss[k]) if k in r.rss else dash for k in ("author", "f64", "f32"))
    f64 = Timing(np.asarray(r.f64_times)).s()
    f32 = Timing(np.asarray(r.f32_times)).s()
    return (f"| {r.case.label} | {r.case.n} | {author} | {f64} | {f32} | {a64} | {a32} "
            f"| {e_a}, {e_32} | {rss} |")


def format_table(results: list[RowResult], ours_route: str = "auto", verbatim: bool = False) -> str:
    header = HEADER
    if ours_route != "auto":
        header = header.replace("ours f64, chapter's call (s)", f"ours f64, route={ours_route} (s)")
    if verbatim:
        header = header.replace("author, torch f32 (s)", "author's own code, torch f32 (s)")
    sep = "|" + "---|" * header.count(" | ") + "---|"
    return "\n".join([header, sep] + [format_row(r) for r in results])


# --------------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------------
def run_case(case: Case, args, tmp: str, index: int) -> RowResult:
    weights = model_weights(case.model)
    x = model_inputs(case.model, case.n)
    inp = os.path.join(tmp, f"in{index}.npz")
    export_inputs(inp, weights, x)
    res = RowResult(case)
    limit = int(args.mem_limit_gb * 2**30)
    need = author_min_bytes(case, weights, verbatim=bool(args.author_code))
    if need > limit:
        res.author_status = (f"does not fit in {args.mem_limit_gb:g} GiB "
                             f"(its arrays alone: {gib(need)} GiB)")
    print(f"\n## {index}. {case.label}, N = {case.n}", flush=True)
    print(f"ours f64: {ours_call(case, 'f64', args.ours_route)}; ours f32: {ours_call(case, 'f32', args.ours_route)}")
    print(f"author's route: torch_worker.py --route {case.route} --tensors {case.tensors}"
          f"{' --author-code ' + args.author_code if args.author_code else ''}; "
          f"his arrays need at least {gib(need)} GiB (float32)", flush=True)
    kernels: dict[str, dict] = {}
    fx = None
    for rep in range(args.repeat):
        for who in ("author", "f64", "f32"):
            if who == "author" and res.author_status:
                continue
            out = os.path.join(tmp, f"out{index}_{who}.npz")
            log = os.path.join(tmp, f"log{index}_{who}.txt")
            if who == "author":
                cmd = [args.torch_python, str(HERE / "torch_worker.py"), inp, out,
                       "--route", case.route, "--tensors", case.tensors, "--mem-limit-bytes", str(limit)]
                if args.author_code:
                    cmd += ["--author-code", args.author_code]
                run = run_process(cmd, out, log)
            else:
                spec = {"case": dataclasses.asdict(case), "precision": who, "inp": inp, "out": out,
                        "route": args.ours_route}
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
                run = run_process(cmd, out, log)
            res.rss[who] = max(res.rss.get(who, 0), run.peak_rss)
            if who == "author" and run.rc == OUT_OF_MEMORY:
                res.author_status = f"does not fit in {args.mem_limit_gb:g} GiB (ran out)"
                print(f"  repeat {rep + 1} author: out of memory: {run.log.strip().splitlines()[-1]}")
                continue
            if run.rc != 0:
                raise SystemExit(f"bench_author: the {who} process of case {index} failed "
                                 f"(exit {run.rc}):\n{run.log[-3000:]}")
            getattr(res, f"{who}_times").append(run.seconds)
            if rep == 0:
                kernels[who] = run.kernels
                fx = run.fx if who == "author" else fx
            extra = f", first call (compile + run) {run.first_s:.2f} s" if who != "author" else ""
            print(f"  repeat {rep + 1} {who}: {run.seconds:.3f} s, peak RSS {gib(run.peak_rss)} "
                  f"GiB{extra} [{machine_state()}]", flush=True)
    ref = kernels["f64"]
    if "author" in kernels:
        res.err_author = rel_frobenius(kernels["author"], ref)
        print(f"  same model on both sides: max |f_torch - f_ours| / max |f_ours| = "
              f"{model_output_error(case.model, weights, x, fx):.1e}")
    res.err_f32 = rel_frobenius(kernels["f32"], ref)
    return res


def model_output_error(model: str, weights, x, fx_torch) -> float:
    """Largest difference of the torch model's float32 outputs from ours (float64), relative."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        params = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in weights.items()}
        if model == "mlp":
            from ntkbook.models import modular

            f, xx = modular.make_apply("square"), jnp.asarray(x, dtype=jnp.float64)
        else:
            from ntkbook.models import transformer

            f, xx = transformer.apply, jnp.asarray(x)
        fx = np.asarray(jax.vmap(f, in_axes=(None, 0))(params, xx))
    return float(np.abs(fx_torch - fx).max() / np.abs(fx).max())


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return measure_ours_child(json.loads(args.child))
    torch_version = check_torch_env(args.torch_python)
    if args.author_code and not (Path(args.author_code) / "ntk.py").is_file():
        raise SystemExit(f"bench_author: --author-code {args.author_code} has no ntk.py; pass a checkout of "
                         "the author's repository (git clone https://github.com/jylin04/mi-ntk)")
    import jax

    todo = cases(args.quick)
    if args.only:
        picked = [int(s) for s in args.only.split(",")]
        todo = [todo[i - 1] for i in picked]
    t0 = time.perf_counter()
    print(f"# bench_author: torch {torch_version} (CPU, float32, 2 threads) against ntkbook on jax "
          f"{jax.__version__} ({jax.default_backend()}); {args.repeat} interleaved repeats"
          f"{', --quick' if args.quick else ''}; author's memory limit {args.mem_limit_gb:g} GiB; "
          f"our route: {args.ours_route}; the author's side: {author_side(args.author_code)}; {machine_state()}")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_author_") as tmp:
        for i, case in enumerate(todo, 1):
            results.append(run_case(case, args, tmp, i))
    print("\nTimes: min / median (± half the interquartile range, % of the median) over the "
          "repeats, each a fresh process (excluding imports and, for ours, compilation); ratios: "
          "median [quartiles] of the per-repeat ratios; > 1 means ours is faster.\n")
    print(format_table(results, args.ours_route, bool(args.author_code)))
    errs = [e for r in results for e in (r.err_author, r.err_f32) if e is not None]
    worst = max(errs)
    print(f"\nagreement target rel. error <= {AGREEMENT_TOL:g} (float32 round-off): "
          f"{'met' if worst <= AGREEMENT_TOL else 'MISSED'} (worst {worst:.1e})")
    print(f"total benchmark time: {time.perf_counter() - t0:.0f} s; {machine_state()}")
    return 0 if worst <= AGREEMENT_TOL else 1


if __name__ == "__main__":
    sys.exit(main())
