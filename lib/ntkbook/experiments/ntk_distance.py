r"""Distance between finite-width networks and their NTK predictors (Paper A), three comparators.

Set-up (per binary task, model, width ``m`` and seed)
------------------------------------------------------
* Data: ``n_train`` training and ``n_test`` test images of two classes (balanced, subset seed 0,
  the same for every network seed), labels ``y = +-1``. 2L-ReLU sees the row-normalised raw inputs
  ``x / ||x||`` (**a departure**: the paper feeds raw pixels); MLP-Attn sees the row-normalised
  attention output ``x~ / ||x~||`` with ``x~ = X^T X x`` (:mod:`ntkbook.models.attention`, as in the
  paper). Both input sets lie on the unit sphere.
* Network: ``f(x) = m^{-1/2} sum_r a_r relu(w_r . x)`` (:mod:`ntkbook.models.two_layer`),
  ``w_r ~ N(0, I)``, ``a_r = +-1`` fixed, only ``W`` trained, symmetric initialisation (``f = 0`` at
  ``t = 0``; **a departure**: the paper does not say, and a standard initialisation starts from a
  random function).

Line 1, "GD" (exact comparator)
  Full-batch gradient descent on ``L = (1/2n) sum_i (f(x_i) - y_i)^2``, learning rate ``lr``, for
  ``snapshots[-1]`` steps (float32), against the linear model with the analytic NTK ``K`` trained the
  same way, whose iterate is exact (float64):

  .. math:: f^{NTK}_k(x) = K_{xX}\, \phi_k(K)\, Y, \qquad
            \phi_k(\lambda) = \frac{1 - (1 - \mathrm{lr}\,\lambda / n)^k}{\lambda} .

  Gradient descent is basis-independent, so this line trains, exactly and cheaply, on coordinates
  in the span of the training inputs (``p <= n_train``); a test input's component outside that span
  meets ``W``'s frozen complement, drawn once.
Line 2, "Adam" (the paper's recipe, on the real weights)
  Adam (``adam_lr``), batch ``adam_batch``, ``adam_epochs`` epochs, loss ``mean (f - y)^2``, L2 as
  PyTorch's ``weight_decay`` (``grad += l2 * W``), on ``W`` in pixel / attention-output space (Adam
  depends on the basis, so no span reduction). The same seed trains, with the same recipe, the same
  initial weights and the same batch order, the network's **own linearisation**
  ``f_lin(x; W) = m^{-1/2} sum_r a_r 1[w0_r . x > 0] (w_r . x)`` (for this network, with ``f(W0) = 0``,
  the first-order Taylor model around ``W0``). Reported: the distance net - linearisation, the
  distance of each to the converged analytic kernel regression ``f_NTK,inf = K_xX K^+ Y``, training
  MSE and test accuracy of both, kernel movement. ``lr_rules``: ``"constant"`` (the paper's) and
  ``"inv_sqrt_m"`` (``adam_lr * sqrt(lr_ref_width / m)``, which keeps Adam's step in function space
  independent of ``m``).
Line 3, "budget"
  The Adam recipe at one width with longer training and with and without L2: does the training loss
  become small at all?

Distances are RMS over the evaluation points, ``sqrt(mean_x (f1(x) - f2(x))^2)`` (multiply by
``sqrt(n_test)`` for the l2 norm of the difference vector).

What both distance experiments share (data, NTK predictor, the Adam line, geometry, the trend
rule) is :mod:`ntkbook.lazy.distance`; this module holds the GD and budget lines and the sweep.

Geometry
  :func:`ntkbook.lazy.distance.cone_statistics`: the median pairwise angle of the inputs the network
  sees and the fraction of random ReLU hyperplanes ``{x : w . x = 0}``, ``w ~ N(0, I)``, that
  separate them (the others see every input on the same side, so their neuron is linear on the
  data). :func:`ntkbook.lazy.distance.schur_check`: the condition number of the analytic NTK
  against that of the input Gram matrix, which the Schur product bound
  ``kappa(Theta) <= kappa(G_in)`` relates.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError, NumericalError
from ntkbook import validate as v
from ntkbook.lazy import distance
from ntkbook.models import two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "ntk_distance"
VERSION = "2"

#: Adam learning-rate rule -> its name in text
LR_RULES = {"constant": "Adam lr constant (paper)", "inv_sqrt_m": "Adam lr ∝ 1/√m"}

#: Paper A's reported ||f_m - f_NTK|| (normalisation not stated), at m = 16, 1024, 4096
PAPER = {
    ("mnist_3v8", "relu"): {16: 45.1, 4096: 39.2},
    ("mnist_3v8", "attn"): {16: 10.3, 4096: 43.4},
    ("cifar10_auto_v_plane", "relu"): {16: 246.2, 1024: 101.7, 4096: 56.9},
    ("cifar10_auto_v_plane", "attn"): {16: 3.7, 1024: 10.4, 4096: 12.6},
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The three lines of the module docstring over tasks, models, widths and seeds.

    Presets: ``paper()`` (the defaults: three tasks, widths 16 to 16384 for GD, 16 to 4096 for
    Adam, three seeds, 256 training images per task; hours on 2 CPU cores) and ``smoke()`` (two
    widths, one seed, 32 images per task, 20 Adam epochs; about a minute). The data, predictor and
    geometry fields of both presets are :data:`ntkbook.lazy.distance.SETUPS` (see :func:`setup`).
    """

    #: binary tasks (keys of :data:`ntkbook.lazy.distance.TASKS`)
    tasks: tuple[str, ...] = tuple(distance.TASKS)
    #: networks: "relu" (2L-ReLU) and/or "attn" (MLP-Attn)
    models: tuple[str, ...] = ("relu", "attn")
    #: network seeds (initialisation and batch order; the data subset is fixed)
    seeds: tuple[int, ...] = (0, 1, 2)
    #: training images per class
    n_train_per_class: int = 128
    #: test images per class
    n_test_per_class: int = 128
    # line 1: exact GD comparator (span coordinates)
    #: widths of the GD line (those above 4096 only for gd_wide_tasks x wide_models)
    widths: tuple[int, ...] = (16, 64, 256, 1024, 4096, 8192, 16384)
    #: GD learning rate (network and NTK predictor)
    lr: float = 1.0
    #: GD steps at which the distance is read (the last is the training length)
    snapshots: tuple[int, ...] = (0, 10, 30, 100, 300, 1000)
    # line 2: the paper's Adam recipe on the real weights, network and its own linearisation
    #: tasks of the Adam line
    adam_tasks: tuple[str, ...] = ("mnist_3v8", "cifar10_auto_v_plane")
    #: widths of the Adam line (up to each task's cap in adam_width_caps)
    adam_widths: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    #: Adam epochs
    adam_epochs: int = 500
    #: Adam learning rate (the paper's)
    adam_lr: float = 1e-3
    #: Adam mini-batch size
    adam_batch: int = 128
    #: L2 penalty, PyTorch's weight_decay
    adam_l2: float = 1e-3
    #: learning-rate rules (keys of LR_RULES); the first runs on every Adam task and width
    lr_rules: tuple[str, ...] = ("constant", "inv_sqrt_m")
    #: the width at which "inv_sqrt_m" equals adam_lr
    lr_ref_width: int = 16
    #: (task, largest width) pairs: the Adam line of that task stops there (CPU budget)
    adam_width_caps: tuple[tuple[str, int], ...] = (("cifar10_auto_v_plane", 1024),)
    #: tasks at which the lr rules after the first run too (all adam_tasks run the first)
    scaled_lr_tasks: tuple[str, ...] = ("mnist_3v8",)
    #: widths at which the lr rules after the first run
    scaled_lr_widths: tuple[int, ...] = (16, 64, 256, 1024)
    # past 4096: the GD line for ``gd_wide_tasks`` x ``wide_models`` only, the Adam line (first lr
    # rule) for ``adam_wide_tasks`` x ``wide_models`` at ``adam_wide_widths``; computed last
    #: models run past width 4096
    wide_models: tuple[str, ...] = ("attn",)
    #: tasks of the GD line past width 4096
    gd_wide_tasks: tuple[str, ...] = ("mnist_3v8",)
    #: tasks of the Adam line past width 4096
    adam_wide_tasks: tuple[str, ...] = ("mnist_3v8",)
    #: widths of the Adam line past 4096
    adam_wide_widths: tuple[int, ...] = (8192,)
    # line 3: training budget at one width (seed 0)
    #: the width of the budget line
    budget_width: int = 256
    #: epochs at which the budget line is read (one run to the largest)
    budget_epochs: tuple[int, ...] = (500, 2000, 5000)
    #: L2 penalties of the budget line
    budget_l2: tuple[float, ...] = (1e-3, 0.0)
    #: models of the budget line
    budget_models: tuple[str, ...] = ("attn",)
    # geometry
    #: random hyperplanes of the cut fraction
    n_hyperplanes: int = 20000
    #: float type the networks train in
    train_dtype: str = "float32"

    @classmethod
    def smoke(cls) -> "Config":
        return cls(
            widths=(16, 256),
            seeds=(0,),
            n_train_per_class=16,
            n_test_per_class=16,
            snapshots=(0, 10, 100),
            adam_widths=(16, 256),
            adam_wide_widths=(),
            adam_width_caps=(),
            scaled_lr_tasks=("mnist_3v8", "cifar10_auto_v_plane"),
            scaled_lr_widths=(16, 256),
            gd_wide_tasks=tuple(distance.TASKS),
            wide_models=("relu", "attn"),
            adam_epochs=20,
            adam_batch=16,
            budget_width=64,
            budget_models=("relu", "attn"),
            budget_epochs=(20, 80),
            n_hyperplanes=2000,
        )

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        for field in ("tasks", "models", "seeds", "widths", "snapshots", "adam_tasks", "adam_widths",
                      "budget_epochs"):
            v.non_empty(NAME, field, getattr(self, field))
        v.all_in(NAME, "tasks", self.tasks, distance.TASKS)
        v.all_in(NAME, "models", self.models, distance.MODELS)
        v.all_in(NAME, "lr_rules", self.lr_rules, LR_RULES)
        for field in ("adam_tasks", "gd_wide_tasks"):
            v.all_in(NAME, field, getattr(self, field), self.tasks, "tasks that are run")
        for field in ("adam_wide_tasks", "scaled_lr_tasks"):
            v.all_in(NAME, field, getattr(self, field), self.adam_tasks, "tasks of the Adam line")
        for field in ("wide_models", "budget_models"):
            v.all_in(NAME, field, getattr(self, field), self.models, "models that are run")
        for field in ("tasks", "models", "seeds", "adam_tasks", "lr_rules", "scaled_lr_tasks", "wide_models",
                      "gd_wide_tasks", "adam_wide_tasks", "budget_l2", "budget_models"):
            v.unique(NAME, field, getattr(self, field))
        v.each(v.int_at_least, NAME, "seeds", self.seeds, 0, "a JAX seed")
        v.positive_int(NAME, "n_train_per_class", self.n_train_per_class)
        v.positive_int(NAME, "n_test_per_class", self.n_test_per_class)
        for field in ("widths", "adam_widths", "scaled_lr_widths", "adam_wide_widths"):
            v.each(v.even_positive_int, NAME, field, getattr(self, field), "the symmetric initialisation pairs the units")
            v.increasing(NAME, field, getattr(self, field))
        v.even_positive_int(NAME, "budget_width", self.budget_width, "the symmetric initialisation pairs the units")
        v.finite_positive(NAME, "lr", self.lr)
        v.each(v.int_at_least, NAME, "snapshots", self.snapshots, 0)
        v.increasing(NAME, "snapshots", self.snapshots, "GD runs on from one snapshot to the next")
        v.int_at_least(NAME, "adam_epochs", self.adam_epochs, 0)
        v.finite_positive(NAME, "adam_lr", self.adam_lr)
        v.positive_int(NAME, "adam_batch", self.adam_batch)
        v.finite_non_negative(NAME, "adam_l2", self.adam_l2)
        v.positive_int(NAME, "lr_ref_width", self.lr_ref_width)
        for i, cap in enumerate(self.adam_width_caps):
            v.require(NAME, f"adam_width_caps[{i}]", cap,
                      isinstance(cap, tuple) and len(cap) == 2 and cap[0] in self.adam_tasks and isinstance(cap[1], int) and cap[1] >= 1,
                      "a pair (task of adam_tasks, positive width)")
        v.unique(NAME, "adam_width_caps", tuple(cap[0] for cap in self.adam_width_caps), "one cap per task")
        v.each(v.positive_int, NAME, "budget_epochs", self.budget_epochs)
        v.increasing(NAME, "budget_epochs", self.budget_epochs, "one run is read at each")
        v.each(v.finite_non_negative, NAME, "budget_l2", self.budget_l2)
        v.positive_int(NAME, "n_hyperplanes", self.n_hyperplanes)
        v.one_of(NAME, "train_dtype", self.train_dtype, ("float32", "float64"))

def setup(config: Config) -> distance.Setup:
    """The data, NTK-predictor and geometry settings of ``config`` (:class:`ntkbook.lazy.distance.Setup`)."""
    return distance.Setup(**{f.name: getattr(config, f.name) for f in dataclasses.fields(distance.Setup)})


def adam_widths_for(config: Config, task: str) -> tuple[int, ...]:
    """The widths of the Adam line of ``task`` (``adam_widths`` up to the task's cap, if any)."""
    cap = dict(config.adam_width_caps).get(task)
    return tuple(m for m in config.adam_widths if cap is None or m <= cap)


def adam_lr_for(config: Config, rule: str, width: int) -> float:
    """Adam's learning rate at ``width`` under ``rule`` (``"constant"`` or ``"inv_sqrt_m"``)."""
    if rule == "constant":
        return config.adam_lr
    if rule == "inv_sqrt_m":
        return config.adam_lr * math.sqrt(config.lr_ref_width / width)
    raise InputError(f"unknown lr rule {rule!r}; known: {', '.join(LR_RULES)}")


_DIMS = {"mnist": 784, "fashion-mnist": 784, "cifar10": 3072}


def estimate_seconds(config: Config) -> float:
    """Rough wall time on 2 CPU cores (about 1e11 flop/s for float32 matmuls)."""
    n = 2 * config.n_train_per_class
    rate = 1.0e11
    narrow = sum(m for m in config.widths if m <= 4096) * len(config.models) * len(config.tasks)
    wide = sum(m for m in config.widths if m > 4096) * len(config.wide_models) * len(config.gd_wide_tasks)
    gd = 6.0 * n * n * (narrow + wide) * config.snapshots[-1] * len(config.seeds)
    steps = config.adam_epochs * math.ceil(n / config.adam_batch)
    adam = 0.0
    for task in config.adam_tasks:
        d = _DIMS[distance.TASKS[task][0]]
        # forward + backward (2 matmuls of batch x m x d) plus the Adam update (~10 flops/weight)
        cost = lambda widths: sum(4.0 * config.adam_batch * m * d + 10.0 * m * d * 4 for m in widths)
        per_step = cost(adam_widths_for(config, task))
        if task in config.scaled_lr_tasks:
            per_step += (len(config.lr_rules) - 1) * cost(config.scaled_lr_widths)
        adam += 2 * per_step * steps * len(config.models) * len(config.seeds)
        if task in config.adam_wide_tasks:
            wide = sum(4.0 * config.adam_batch * m * d + 10.0 * m * d * 4 for m in config.adam_wide_widths)
            adam += 2 * wide * steps * len(config.wide_models) * len(config.seeds)
        budget = sum(config.budget_epochs) * math.ceil(n / config.adam_batch) * len(config.budget_l2)
        adam += budget * len(config.budget_models) * 4.0 * config.adam_batch * config.budget_width * d * 2
    return 10.0 * len(config.tasks) + (gd + adam) / rate


# --------------------------------------------------------------------------------------------------
# line 1: exact GD comparator
# --------------------------------------------------------------------------------------------------
@jax.jit
def _gd_run(W1, a, z, y, lr, k):
    """``k`` full-batch GD steps on ``(1/2n) sum (f - y)^2`` from ``W1`` (``a`` fixed)."""
    n = z.shape[0]

    def loss(W):
        r = two_layer.apply_batch({"W": W, "a": a}, z) - y
        return 0.5 * jnp.sum(r**2) / n

    g = jax.grad(loss)
    return jax.lax.fori_loop(0, k, lambda i, W: W - lr * g(W), W1)


def gd_point(ctr, ytr, cte, hte2, f_ntk, K_inf, config: Config, width: int, seed: int):
    """One (width, seed) point of the GD line: distances along training and kernel movement."""
    t0 = time.perf_counter()
    p = ctr.shape[1]
    key = jax.random.PRNGKey(seed)
    params = two_layer.init(key, p, width, symmetric=True)  # W over the train-span coordinates
    W1, a = params["W"], params["a"]
    k2 = jax.random.fold_in(key, 1)
    # frozen complement: W2 (m/2 rows, duplicated like W1) times the test residual coordinates
    dt = jnp.dtype(config.train_dtype)
    W1, a = W1.astype(dt), a.astype(dt)
    W2 = jax.random.normal(k2, (width // 2, hte2.shape[1]), dt)
    W2 = jnp.concatenate([W2, W2], axis=0)
    h2 = (jnp.matmul(jnp.asarray(hte2, dt), W2.T, precision=two_layer.PRECISION) if hte2.shape[1]
          else jnp.zeros((cte.shape[0], width), dt))
    z, zt, y = (jnp.asarray(v, dt) for v in (ctr, cte, ytr))
    f_tr_ntk, f_te_ntk, f_te_inf = f_ntk
    K0 = two_layer.entk_W({"W": W1, "a": a}, ctr)
    d_test, d_train, kmove = [], [], []
    W, done = W1, 0
    for k in config.snapshots:
        W = _gd_run(W, a, z, y, config.lr, k - done)
        done = k
        ftr = np.asarray(two_layer.apply_batch({"W": W, "a": a}, z), np.float64)
        fte = np.asarray(two_layer.apply_batch({"W": W, "a": a}, zt, offset=h2), np.float64)
        i = len(d_test)
        d_test.append(distance.rms_distance(fte, f_te_ntk[i]))
        d_train.append(distance.rms_distance(ftr, f_tr_ntk[i]))
        kmove.append(np.linalg.norm(two_layer.entk_W({"W": W, "a": a}, ctr) - K0) / np.linalg.norm(K0))
    if not np.all(np.isfinite(fte)):
        raise NumericalError(f"GD diverged at width {width}, seed {seed}; lower Config.lr")
    scalars = {
        "dist_test_T": float(d_test[-1]),
        "dist_train_T": float(d_train[-1]),
        "dist_test_vs_converged": distance.rms_distance(fte, f_te_inf),
        "train_mse_T": float(np.mean((ftr - np.asarray(ytr)) ** 2)),
        "kernel_move_T": float(kmove[-1]),
        "kernel_init_dev": float(np.linalg.norm(K0 - K_inf) / np.linalg.norm(K_inf)),
        "seconds": time.perf_counter() - t0,
    }
    arrays = {
        "dist_test": np.asarray(d_test),
        "dist_train": np.asarray(d_train),
        "kernel_move": np.asarray(kmove),
        "f_test_T": fte.astype(np.float32),
    }
    return arrays, scalars


# --------------------------------------------------------------------------------------------------
# line 3: the training budget
# --------------------------------------------------------------------------------------------------
def budget_point(ztr, ytr, zte, yte, config: Config, l2: float):
    """Training MSE and test accuracy of the network (``budget_width``, seed 0, constant lr) after
    each number of epochs in ``budget_epochs``, with L2 ``l2`` (one run, read at those epochs)."""
    dt = jnp.dtype(config.train_dtype)
    params = two_layer.init(jax.random.PRNGKey(0), ztr.shape[1], config.budget_width, symmetric=True, dtype=dt)
    W0, a = params["W"], params["a"]
    z, zt, y = (jnp.asarray(v, dt) for v in (ztr, zte, ytr))
    want = set(config.budget_epochs)
    rec: dict[int, tuple[float, float]] = {}

    def cb(epoch, p):
        if epoch in want:
            ftr = np.asarray(two_layer.apply_batch({"W": p["W"], "a": a}, z), np.float64)
            fte = np.asarray(two_layer.apply_batch({"W": p["W"], "a": a}, zt), np.float64)
            rec[epoch] = (float(np.mean((ftr - ytr) ** 2)), float(np.mean(np.sign(fte) == yte)))

    step = math.gcd(*config.budget_epochs)
    distance.adam_train(z, y, W0, a, lr=config.adam_lr, l2=l2, epochs=max(config.budget_epochs), batch=config.adam_batch,
               seed=0, callback=cb, log_every=step)
    ep = sorted(rec)
    return ({"epochs": np.asarray(ep)},
            {"train_mse": [rec[e][0] for e in ep], "acc_test": [rec[e][1] for e in ep]})


# --------------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------------
def _jobs(config: Config) -> list[tuple]:
    """All points in the order they are computed: the cheap and the most important first, so an
    interrupted paper-scale run has committed what matters (each point is saved as it finishes)."""
    seeds, models = config.seeds, config.models
    narrow = [m for m in config.widths if m <= 4096]
    wide = [m for m in config.widths if m > 4096]
    jobs = []

    def adam(rule, tasks, widths=None, models=models):
        for task in tasks:
            for m in widths or adam_widths_for(config, task):
                for model in models:
                    for s in seeds:
                        jobs.append(("adam", task, model, m, s, rule))

    def gd(widths, models=models, tasks=config.tasks):
        for task in tasks:
            for m in widths:
                for model in models:
                    for s in seeds:
                        jobs.append(("gd", task, model, m, s, None))

    first, *rest = config.lr_rules or (None,)
    if first:
        adam(first, config.adam_tasks)
    for rule in rest:
        adam(rule, config.scaled_lr_tasks, config.scaled_lr_widths)
    gd(narrow)
    for task in config.adam_tasks:
        for model in config.budget_models:
            for l2 in config.budget_l2:
                jobs.append(("budget", task, model, config.budget_width, 0, l2))
    gd(wide, config.wide_models, config.gd_wide_tasks)
    if first:
        adam(first, config.adam_wide_tasks, config.adam_wide_widths, config.wide_models)
    return jobs


def _key(job) -> str:
    line, task, model, m, s, extra = job
    if line == "gd":
        return f"line=gd/task={task}/model={model}/m={m}/seed={s}"
    if line == "adam":
        return f"line=adam/lr={extra}/task={task}/model={model}/m={m}/seed={s}"
    return f"line=budget/task={task}/model={model}/m={m}/l2={extra:g}"


def run(config: Config, points: PointStore | None = None) -> Result:
    """Prepare every task (inputs, analytic NTK predictors, geometry), then compute every point of
    the three lines (:func:`gd_point`, :func:`ntkbook.lazy.distance.adam_point`,
    :func:`budget_point`), each checkpointed in ``points``; the result holds per task and model the
    table of scalars over seeds, the distance curves and the training record of the Adam line."""
    points = points or PointStore(None)
    prep = {task: distance.prepare(task, config.models, setup(config)) for task in config.tasks}
    jobs = _jobs(config)
    done: dict[str, tuple] = {}
    bar = Progress(len(jobs), "NTK distance")
    try:
        for job in jobs:
            line, task, model, m, s, extra = job
            P, M = prep[task], prep[task]["models"][model]
            if line == "gd":
                fn = lambda M=M, P=P, m=m, s=s: gd_point(M["ctr"], P["ytr"], M["cte"], M["hte2"], M["f_ntk"],
                                                         M["K_inf"], config, m, s)
            elif line == "adam":
                fn = lambda M=M, P=P, m=m, s=s, r=extra: distance.adam_point(
                    M["ztr"], P["ytr"], M["zte"], P["yte"], M["f_ntk"][2], width=m, seed=s,
                    lr=adam_lr_for(config, r, m), l2=config.adam_l2, epochs=config.adam_epochs,
                    batch=config.adam_batch, train_dtype=config.train_dtype)
            else:
                fn = lambda M=M, P=P, l2=extra: budget_point(M["ztr"], P["ytr"], M["zte"], P["yte"], config, l2)
            done[_key(job)] = points.cached(_key(job), fn)
            bar.update()
            bar.set_postfix(line=line, task=task, model=model, m=m)
    finally:
        bar.close()

    arrays: dict[str, np.ndarray] = {
        "widths": np.asarray(config.widths),
        "adam_widths": np.asarray(config.adam_widths),
        "snapshots": np.asarray(config.snapshots),
    }
    table = {}
    for task in config.tasks:
        P = prep[task]
        for model in config.models:
            M = P["models"][model]
            prefix = f"{task}/{model}"
            arrays[f"{prefix}/lam_K"] = M["info"]["lam_K"]
            arrays[f"{prefix}/ntk_rms"] = M["ntk_rms"]
            arrays[f"{prefix}/angle_quantiles"] = M["angle_quantiles"]
            entry = {
                "kappa_K": M["info"]["kappa_K"], "rank_K": M["info"]["rank_K"],
                "p": int(M["ctr"].shape[1]), "p_resid": int(M["hte2"].shape[1]),
                "ntk_acc_test_T": M["ntk_acc_test_T"], "ntk_acc_test_converged": M["ntk_acc_test_converged"],
                "cone": M["cone"], "schur": M["schur"], "points": {}, "adam": {}, "budget": {},
            }
            for m in config.widths:
                if m > 4096 and (model not in config.wide_models or task not in config.gd_wide_tasks):
                    continue
                runs = [done[_key(("gd", task, model, m, s, None))] for s in config.seeds]
                for name in ("dist_test", "dist_train", "kernel_move"):
                    arrays[f"{prefix}/m={m}/{name}"] = np.stack([r[0][name] for r in runs])
                sc = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                sc["acc_test_net"] = [float(np.mean(np.sign(r[0]["f_test_T"]) == P["yte"])) for r in runs]
                entry["points"][str(m)] = sc
            if task in config.adam_tasks:
                for i, rule in enumerate(config.lr_rules):
                    if i and task not in config.scaled_lr_tasks:
                        continue
                    per = {}
                    wide = (config.adam_wide_widths
                            if (i == 0 and task in config.adam_wide_tasks and model in config.wide_models) else ())
                    base = adam_widths_for(config, task) if i == 0 else tuple(config.scaled_lr_widths)
                    for m in base + tuple(wide):
                        runs = [done[_key(("adam", task, model, m, s, rule))] for s in config.seeds]
                        per[str(m)] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                    entry["adam"][rule] = per
                for l2 in config.budget_l2 if model in config.budget_models else ():
                    arr, sc = done[_key(("budget", task, model, config.budget_width, 0, l2))]
                    entry["budget"][f"{l2:g}"] = {"epochs": [int(e) for e in arr["epochs"]], **sc}
            table[prefix] = entry
    from ntkbook.train import training_record

    labels, losses, accs = [], [], []
    for prefix, entry in table.items():
        for rule, per in entry["adam"].items():
            for m, sc in per.items():
                for seed, loss, acc in zip(config.seeds, sc["train_mse_net"], sc["acc_train_net"]):
                    labels.append(f"{prefix}/{rule}/m={m}/seed={seed}")
                    losses.append(loss)
                    accs.append(acc)
    training = training_record(final_train_acc=np.asarray(accs), final_train_loss=np.asarray(losses),
                               min_train_acc=distance.TRAINED_ACC, max_train_loss=distance.TRAINED_MSE,
                               labels=labels)
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays=arrays,
        scalars={"table": table, "tasks": distance.TASK_LABELS, "models": distance.MODELS, "lr_rules": LR_RULES,
                 "training": training},
    )


# --------------------------------------------------------------------------------------------------
# summaries (used by the chapter and its claims, ntkbook.claims.ntk_distance)
# --------------------------------------------------------------------------------------------------
def point_values(result: Result, task: str, model: str, key: str, *, line: str = "gd",
                 rule: str = "constant") -> tuple[np.ndarray, np.ndarray]:
    """``(widths, values (W, seeds))`` of one scalar of one line."""
    entry = result["table"][f"{task}/{model}"]
    pts = entry["points"] if line == "gd" else entry["adam"][rule]
    widths = np.array(sorted(int(m) for m in pts))
    return widths, np.array([pts[str(m)][key] for m in widths], dtype=float)


def is_trained(result: Result, task: str, model: str, rule: str = "constant") -> bool:
    """Every network of the Adam line trained (:func:`ntkbook.lazy.distance.trained`)."""
    _, mse = point_values(result, task, model, "train_mse_net", line="adam", rule=rule)
    _, acc = point_values(result, task, model, "acc_train_net", line="adam", rule=rule)
    return distance.trained(acc, mse)

