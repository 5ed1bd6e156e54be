r"""Sharpness at equal training loss (Paper A's loss-landscape claim, issue 21): is MLP-Attn's minimum
flatter than 2L-ReLU's when both have reached the same training loss?

The main experiment compares the top Hessian eigenvalue of networks whose training losses differ by
about 100x; on cross-entropy the curvature in the outputs, :math:`\mathrm{diag}(p) - pp^\top`, itself
vanishes as the network fits, so such a comparison measures the losses as much as the minima. Here,
for each task and seed:

1. **MLP-Attn** is trained with the main experiment's recipe
   (:func:`ntkbook.influence.training.train_model`: the same seeds give the same networks as
   :mod:`ntkbook.experiments.influence_map`); its final training loss is the target.
2. **2L-ReLU** is trained with the same recipe, watched at every epoch's end
   (:func:`ntkbook.influence.tracked.train_tracked`, the same trajectory bit for bit): the
   **loss-matched** network is the one at the first epoch whose full-batch training loss (float32,
   as trained) is at or below the target; the epoch before it is kept too (the crossing's bracket;
   an epoch is ``ceil(n / batch)`` Adam steps). If the loss never gets there the result says so
   (``reached`` false, the matched values NaN). The final network and the networks at
   ``curve_points`` log-spaced epochs (and the initialisation) are kept as well.
3. **Curvature** of the training loss in ``W`` (heads fixed; float64), for MLP-Attn's final network
   and 2L-ReLU's matched and final ones: the top Hessian eigenvalue
   (:func:`ntkbook.influence.curvature.hessian_top`, Lanczos on Hessian-vector products, seeded as
   the main experiment's :func:`ntkbook.influence.landscape.measure`) and the Gauss-Newton side of
   the identity :math:`\lambda_{\max}(H) = \lambda_{\max}(S^{1/2} K S^{1/2})`
   (:func:`ntkbook.influence.curvature.gauss_newton_top`, ``K`` the eNTK, ``S`` the loss's curvature
   in the outputs), their relative gap, and the eigenvalue per unit training loss. Along 2L-ReLU's
   training, the top Hessian eigenvalue at each kept epoch.
4. **Slices**: the training loss along one filter-normalised direction through each of the three
   networks (the same random draw, ``PRNGKey(500 + seed)``, rescaled to each network's filters),
   and, for the first seed of ``slice_2d_tasks``, on a plane of two such directions through
   MLP-Attn's final network and 2L-ReLU's loss-matched one.

Each (task, model, seed) is one checkpointed point (MLP-Attn's first: 2L-ReLU's needs its loss).
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook import validate as v
from ntkbook.influence import config_checks as cc
from ntkbook.influence import curvature, landscape, training
from ntkbook.influence.losses import data_loss
from ntkbook.influence.readout import sweep_part
from ntkbook.influence.tasks import MODELS, TASK_LABELS, TASKS, accuracy, input_dim, task_classes, task_data, targets
from ntkbook.influence.tracked import train_tracked
from ntkbook.models import attention, two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_sharpness"
VERSION = "1"

#: the 2-D slices, of MLP-Attn's final network and 2L-ReLU's loss-matched one: only the first seed of
#: a task of ``slice_2d_tasks`` has them (stored as that array alone)
FIRST_SEED_ARRAYS = ("slice2d_final", "slice2d_matched")
#: what is measured of each network (:func:`_curvature`), under ``<network>/``
CURVATURE_KEYS = ("train_loss", "train_acc", "hessian_top", "hessian_resid", "gn_top", "gn_resid", "gn_gap",
                  "hessian_per_loss")

NONFINITE_ALLOWED = {
    "table.*/relu.matched*": "2L-ReLU never reached MLP-Attn's final loss: there is no loss-matched network",
    "table.*/relu.before/*": "no epoch before the crossing (the loss was at the target at initialisation, "
                             "or never reached it)",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The loss-matched sharpness comparison (module docstring). ``paper()``: the defaults (MNIST
    with ten classes and 3 vs 8, five seeds, the main experiment's n = 500, width 512 and recipe);
    ``smoke()``: both tasks, two seeds, n = 40, width 32, short training, small slices."""

    #: of ntkbook.influence.tasks.TASKS
    tasks: tuple[str, ...] = ("mnist10", "mnist_3v8")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # initialisation, batch order, Lanczos start, slice directions
    n_train: int = 500  # training points per task (balanced over its classes)
    width: int = 512  # hidden units m
    epochs: int = 500  # epochs of mini-batches (2L-ReLU; MLP-Attn when attn_steps is None)
    lr: float = 1e-2  # Adam's learning rate (the main experiment's)
    batch: int = 128  # mini-batch size, last batch kept
    l2: float = 0.0  # L2 penalty added to the gradient (the main experiment's: none)
    #: MLP-Attn: full-batch Adam for this many steps; None: the 2L-ReLU recipe
    attn_steps: int | None = 10_000
    hessian_steps: int = 20  # Lanczos steps for each top eigenvalue (Hessian and Gauss-Newton)
    #: log-spaced epochs of 2L-ReLU's training (from 1 to the last; with the initialisation) at
    #: which the top Hessian eigenvalue is measured
    curve_points: int = 8
    slice_points: int = 21  # points of each 1-D loss slice (odd: the middle one is the network)
    slice_radius: float = 1.0  # slices span [-radius, radius] (filter-normalised units)
    slice_2d_tasks: tuple[str, ...] = ("mnist10",)  # tasks with a 2-D slice (first seed)
    slice_grid: int = 15  # points per side of a 2-D slice (odd)

    @classmethod
    def smoke(cls) -> "Config":
        return cls(seeds=(0, 1), n_train=40, width=32, epochs=30, batch=16, attn_steps=150,
                   curve_points=4, slice_points=7, slice_grid=5)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        cc.check_choices(NAME, self, tasks=TASKS)
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, self.tasks, fields=("n_train",))
        cc.check_training(NAME, self)
        cc.check_fields(NAME, self, "attn_steps", "hessian_steps")
        v.int_at_least(NAME, "curve_points", self.curve_points, 2, "a curve needs two epochs besides the start")
        v.odd_at_least(NAME, "slice_points", self.slice_points, 3, "the middle point is the network")
        v.finite_positive(NAME, "slice_radius", self.slice_radius)
        cc.check_subset(NAME, "slice_2d_tasks", self.slice_2d_tasks, self.tasks, "tasks that are run")
        v.odd_at_least(NAME, "slice_grid", self.slice_grid, 3, "the middle point is the network")


def train_recipe(config: Config) -> training.TrainRecipe:
    """The training recipe of ``config`` (the main experiment's, as influence_map builds it)."""
    return training.TrainRecipe.of(config)


def curve_epochs(config: Config) -> list[int]:
    """The epochs of 2L-ReLU's training at which the top Hessian eigenvalue is measured: 0 and
    ``curve_points`` log-spaced epochs from 1 to the last (fewer where they round together)."""
    spaced = np.rint(np.geomspace(1, config.epochs, config.curve_points)).astype(int)
    return sorted({0, *spaced.tolist()})


#: estimate_seconds' rates on 2 cores: float32 and float64 flop/s of the passes (from the main
#: experiment's stored training and Hessian times at this size) and the cost of compiling one function
_FLOPS32, _FLOPS64, _COMPILE_S = 2e11, 4e10, 0.3


def estimate_seconds(config: Config) -> float:
    """Rough CPU time on 2 cores from the dominant matmuls over the ``n`` training points: training
    (3 passes an epoch or full-batch step, plus one an epoch watching 2L-ReLU), the Lanczos
    products (about 4 passes each, float64, 6 more for the symmetry check) and the slices' passes
    (float64), and :data:`_COMPILE_S` per compiled function."""
    n, m = config.n_train, config.width
    attn = config.attn_steps if config.attn_steps is not None else config.epochs
    curve = len(curve_epochs(config))
    runs = 2 * 3 + 1 + curve  # Lanczos runs: both sides for 3 networks, the epoch before, the curve
    total = 0.0
    for task in config.tasks:
        p = 2.0 * n * input_dim(task) * m  # one forward pass
        f32 = p * (3 * attn + 4 * config.epochs)
        f64 = p * (4 * (config.hessian_steps + 6) * runs + 3 * config.slice_points)
        f64_2d = p * 2 * config.slice_grid**2 if task in config.slice_2d_tasks else 0.0
        per_seed = f32 / _FLOPS32 + f64 / _FLOPS64 + (runs + 5) * _COMPILE_S
        total += len(config.seeds) * per_seed + f64_2d / _FLOPS64
    return total


# --------------------------------------------------------------------------------------------------
# the measurements of one network
# --------------------------------------------------------------------------------------------------
def _train_loss32(params, z, y, C: int) -> float:
    """The full-batch training loss in float32, as :func:`ntkbook.influence.tracked.train_tracked`
    watches it (what the crossing is judged on)."""
    p32 = {k: jnp.asarray(np.asarray(val), jnp.float32) for k, val in params.items()}
    return float(data_loss(two_layer.apply_batch(p32, jnp.asarray(z, jnp.float32)),
                           jnp.asarray(y, jnp.float32), C))


def _curvature(params, z, y, labels, C: int, seed: int, config: Config) -> dict[str, float]:
    """The training loss (float64) and accuracy, both sides of the Gauss-Newton identity with their
    Ritz residuals and relative gap, and the top Hessian eigenvalue per unit loss."""
    loss = curvature.training_loss(params, z, y, C)
    out = np.asarray(two_layer.apply_batch({k: jnp.asarray(val, jnp.float32) for k, val in params.items()},
                                           jnp.asarray(z, jnp.float32)))
    h, h_res = curvature.hessian_top(params, z, y, C, num_steps=config.hessian_steps, seed=seed)
    g, g_res = curvature.gauss_newton_top(params, z, C, num_steps=config.hessian_steps, seed=seed)
    return {"train_loss": loss, "train_acc": accuracy(out, labels, C), "hessian_top": h, "hessian_resid": h_res,
            "gn_top": g, "gn_resid": g_res, "gn_gap": abs(h - g) / abs(g), "hessian_per_loss": h / loss}


def _slices(params, z, y, C: int, seed: int, config: Config, two_d: bool) -> dict[str, np.ndarray]:
    """The training loss (float64) along one filter-normalised direction and, when ``two_d``, on a
    plane of two; the directions drawn as :func:`ntkbook.influence.landscape.measure` draws them."""
    out = {}
    with jax.enable_x64(True):
        p = {k: jnp.asarray(np.asarray(val), jnp.float64) for k, val in params.items()}
        z64, y64 = jnp.asarray(z, jnp.float64), jnp.asarray(y, jnp.float64)

        def loss(q):
            return data_loss(two_layer.apply_batch(q, z64), y64, C)

        key = jax.random.PRNGKey(500 + seed)
        r = config.slice_radius
        d1 = landscape.filter_normalized_direction(p, key, frozen=("a",))
        out["slice1d"] = landscape.slice_1d(loss, p, d1, np.linspace(-r, r, config.slice_points))
        if two_d:
            k1, k2 = jax.random.split(jax.random.fold_in(key, 1))
            e1 = landscape.filter_normalized_direction(p, k1, frozen=("a",))
            e2 = landscape.filter_normalized_direction(p, k2, frozen=("a",))
            g = np.linspace(-r, r, config.slice_grid)
            out["slice2d"] = landscape.slice_2d(loss, p, e1, e2, g, g)
    return out


def _network(W, a, z, y, labels, C, seed, config, name: str, two_d: bool):
    """``(arrays, scalars)`` of one network: its curvature under ``<name>/`` and its slices as
    ``slice1d_<name>`` (and ``slice2d_<name>``)."""
    params = {"W": np.asarray(W), "a": np.asarray(a)}
    sc = {f"{name}/{k}": val for k, val in _curvature(params, z, y, labels, C, seed, config).items()}
    arrays = {f"{k}_{name}": val for k, val in _slices(params, z, y, C, seed, config, two_d).items()}
    return arrays, sc


def _missing(name: str, two_d: bool, config: Config):
    """NaN stand-ins for a network that does not exist (no loss-matched 2L-ReLU)."""
    arrays = {f"slice1d_{name}": np.full(config.slice_points, np.nan)}
    if two_d:
        arrays[f"slice2d_{name}"] = np.full((config.slice_grid, config.slice_grid), np.nan)
    return arrays, {f"{name}/{k}": math.nan for k in CURVATURE_KEYS}


# --------------------------------------------------------------------------------------------------
# the points
# --------------------------------------------------------------------------------------------------
def _inputs(data, model: str):
    """The network inputs of the training set (row-normalised; attention over it for MLP-Attn)."""
    ztr, _ = attention.transform(data[0], attend=(model == "attn"), normalize="row")
    return ztr


def _attn_point(data, seed: int, config: Config, two_d: bool):
    """MLP-Attn trained with the recipe; its final network measured; the target loss."""
    t0 = time.perf_counter()
    _, ltr, _, _, C = data
    z, y = _inputs(data, "attn"), targets(ltr, C)
    params, hist = training.train_model(z, y, C, train_recipe(config), seed, model="attn")
    t_train = time.perf_counter() - t0
    arrays, sc = _network(params["W"], params["a"], z, y, ltr, C, seed, config, "final", two_d)
    arrays.update(loss_curve=np.asarray(hist["loss"], np.float64),
                  loss_epochs=np.asarray(hist["epoch"], np.float64))
    sc.update({"target_loss": _train_loss32(params, z, y, C), "train_loss": sc["final/train_loss"],
               "train_acc": sc["final/train_acc"], "train_seconds": t_train,
               "seconds": time.perf_counter() - t0})
    return arrays, sc


def _relu_point(data, seed: int, target: float, config: Config, two_d: bool):
    """2L-ReLU trained with the recipe, watched at every epoch: the loss-matched network (first
    epoch at or below ``target``), the epoch before it, the final network, the curve."""
    t0 = time.perf_counter()
    _, ltr, _, _, C = data
    z, y = _inputs(data, "relu"), targets(ltr, C)
    epochs = curve_epochs(config)
    run = train_tracked(z, y, C, train_recipe(config), seed, model="relu", keep_epochs=epochs,
                        target_loss=target)
    t_train = time.perf_counter() - t0
    a = run.params["a"]
    arrays, sc = _network(run.params["W"], a, z, y, ltr, C, seed, config, "final", False)
    reached = run.crossing is not None
    if reached:
        m_arr, m_sc = _network(run.at_crossing, a, z, y, ltr, C, seed, config, "matched", two_d)
    else:
        m_arr, m_sc = _missing("matched", two_d, config)
    arrays.update(m_arr)
    sc.update(m_sc)
    if run.before_crossing is not None:
        before = {"W": run.before_crossing, "a": np.asarray(a)}
        sc["before/train_loss"] = curvature.training_loss(before, z, y, C)
        sc["before/hessian_top"] = curvature.hessian_top(before, z, y, C, num_steps=config.hessian_steps,
                                                         seed=seed)[0]
    else:
        sc["before/train_loss"] = sc["before/hessian_top"] = math.nan
    curve_h, curve_loss = [], []
    for e in epochs:
        if e == config.epochs:
            h, loss = sc["final/hessian_top"], sc["final/train_loss"]
        else:
            p = {"W": run.kept[e], "a": np.asarray(a)}
            h = curvature.hessian_top(p, z, y, C, num_steps=config.hessian_steps, seed=seed)[0]
            loss = curvature.training_loss(p, z, y, C)
        curve_h.append(h)
        curve_loss.append(loss)
    arrays.update(loss_track=run.losses, curve_epochs=np.asarray(epochs, np.float64),
                  curve_loss=np.asarray(curve_loss), curve_hessian=np.asarray(curve_h))
    sc.update({"target_loss": target, "reached": reached,
               "matched_epoch": float(run.crossing) if reached else math.nan,
               "matched_loss32": float(run.losses[run.crossing]) if reached else math.nan,
               "train_loss": sc["final/train_loss"], "train_acc": sc["final/train_acc"],
               "train_seconds": t_train, "seconds": time.perf_counter() - t0})
    return arrays, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (task, seed) of ``config``: MLP-Attn, then 2L-ReLU matched to its loss, each a
    checkpointed point. Arrays ``<task>/<model>/<name>`` stacked over seeds: ``slice1d_final``
    (both models) and ``slice1d_matched`` (2L-ReLU) ``(S, slice_points)``; MLP-Attn's
    ``loss_curve``/``loss_epochs`` (its training history); 2L-ReLU's ``loss_track`` ``(S, epochs
    + 1)`` (float32 full-batch loss at each epoch's end) and ``curve_epochs``, ``curve_loss``,
    ``curve_hessian`` ``(S, len(curve_epochs))``; for the first seed of a task of
    ``slice_2d_tasks`` alone, MLP-Attn's ``slice2d_final`` and 2L-ReLU's ``slice2d_matched``
    ``(grid, grid)``.
    ``table["<task>/<model>"]``: per-seed lists of ``train_loss``, ``train_acc`` (final, float64
    loss), ``target_loss`` (MLP-Attn's final float32 loss), ``train_seconds``, ``seconds`` and, per
    network (``final``; 2L-ReLU also ``matched``), ``<network>/{train_loss, train_acc,
    hessian_top, hessian_resid, gn_top, gn_resid, gn_gap, hessian_per_loss}``; 2L-ReLU also
    ``reached``, ``matched_epoch``, ``matched_loss32`` and ``before/{train_loss, hessian_top}``
    (the epoch before the crossing). Not reached: the matched values are NaN."""
    points = points or PointStore(None)
    arrays: dict[str, np.ndarray] = {}
    table: dict[str, dict] = {}
    bar = Progress(len(config.tasks) * len(config.seeds) * 2, "influence sharpness")
    try:
        for task in config.tasks:
            n_classes = len(task_classes(task)[1])
            data = task_data(task, config.n_train, n_classes)  # the test points are not used
            runs: dict[str, list] = {"attn": [], "relu": []}
            for seed in config.seeds:
                two_d = task in config.slice_2d_tasks and seed == config.seeds[0]
                base = f"task={task}/seed={seed}"
                attn = points.cached(f"{base}/model=attn", lambda s=seed, t=two_d: _attn_point(data, s, config, t))
                bar.update()
                target = attn[1]["target_loss"]
                relu = points.cached(f"{base}/model=relu",
                                     lambda s=seed, t=two_d: _relu_point(data, s, target, config, t))
                bar.update()
                bar.set_postfix(task=task, seed=seed)
                runs["attn"].append(attn)
                runs["relu"].append(relu)
            for model, rs in runs.items():
                prefix = f"{task}/{model}"
                for name in rs[0][0]:
                    arrays[f"{prefix}/{name}"] = (rs[0][0][name] if name in FIRST_SEED_ARRAYS
                                                  else np.stack([r[0][name] for r in rs]))
                table[prefix] = {k: [r[1][k] for r in rs] for k in rs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "tasks": {t: TASK_LABELS[t] for t in config.tasks},
                           "models": MODELS, "curve_epochs": curve_epochs(config)})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce influence_sharpness --sample`` recomputes: every
    task, both models, the first seed (each point depends only on its task and seed)."""
    sub = dataclasses.replace(config, seeds=config.seeds[:1])
    return sub, f"seed {sub.seeds[0]} (of {len(config.seeds)} seeds), every task"


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`)."""
    return sweep_part(result, sample.tasks, tuple(MODELS), sample.seeds, first_seed_only=FIRST_SEED_ARRAYS)
