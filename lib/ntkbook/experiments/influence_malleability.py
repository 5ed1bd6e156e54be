r"""Influence malleability (Paper A): NTK leave-one-out influence and how far attacks flip it.

For each task (data set and classes), model (2L-ReLU, MLP-Attn) and seed:

1. **Train** the network :math:`f_c(x) = m^{-1/2}\sum_r a_{rc}\,\mathrm{relu}(w_r\cdot z(x))`
   (:func:`ntkbook.influence.training.train_model`: ``a = +-1`` fixed, symmetric start, only ``W``
   trained) with Adam, batch 128 (last batch kept), an optional L2 penalty added to the gradient
   (PyTorch's ``weight_decay``), cross-entropy on ``C`` outputs (10 classes) or MSE on one output
   with labels ``+-1`` (binary tasks), ``epochs`` epochs, float32. The paper's lr 1e-3 with L2 1e-3
   leaves MLP-Attn at chance; the default is lr 1e-2 without L2 (the chapter shows both). Mini-batch
   Adam does not train MLP-Attn in 500 epochs either (its inputs lie in a narrow cone, and the batch
   noise along the cone's axis swamps the signal across it), so by default MLP-Attn is trained
   full-batch for ``attn_steps`` Adam steps (``attn_steps=None``: the 2L-ReLU recipe). ``z(x)`` is
   the row-normalised raw input (2L-ReLU) or the row-normalised linear-attention output
   ``x X^T X`` over the training set (MLP-Attn).
2. **Influence**: the class-diagonal eNTK of ``W`` (identical for every output, see
   :func:`~ntkbook.models.two_layer.entk_W`) on the training points ``K`` and test-train
   ``K_x``, float64; kernel ridge regression with ``A = K + lam I`` on targets ``Y`` (one-hot, or
   ``+-1``); the exact leave-one-out influence of every training point on the summed squared test
   loss (:func:`ntkbook.influence.scores.ntk_influence`), with ``lam`` and with ``n * lam``.
3. **Interventions** (:func:`ntkbook.influence.interventions.evaluate`; weights frozen; ``K``,
   ``K_x`` and, for MLP-Attn, the attention transform of the training *and* test points
   recomputed on the changed training set):

   * ``adversarial``: every training point attacked (FGSM, PGD, MIM);
   * ``transformed``: only the top-``tau`` set ``T`` (by clean ``|I|``) attacked;
   * ``curated``: ``T`` removed; the flip rate is then measured on the top-``tau`` set of the
     remaining points;
   * ``null``: the attack replaced by random signs ``+-eps`` (FGSM's norm), on every point and on T.

   Each attack maximises the frozen network's mean training loss (its own training objective
   without the L2 term) over the perturbed training set, jointly (for MLP-Attn the attention over the
   perturbed set is inside the loss). Flip rate over the top ``tau`` = 10% by clean ``|I|``, and
   Spearman's rho of all influences before and after.
4. The ``eps`` ablation (``adversarial``, all attacks) on ``ablation_tasks``.
5. **Landscape** (:func:`ntkbook.influence.landscape.measure`; first seed): filter-normalised
   1-D slices for every task, a 2-D slice on ``landscape_2d_tasks``, and the top Hessian
   eigenvalue of the training loss with respect to ``W`` by Lanczos (every seed).

Every (task, model, seed) is one checkpointed point. Paper A's numbers and the verdicts on its
claims are read from the stored results in :mod:`ntkbook.claims.influence`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook import validate as v
from ntkbook.influence import config_checks as cc
from ntkbook.influence import interventions, landscape, training
from ntkbook.influence.readout import sweep_part
from ntkbook.influence.tasks import (ATTACK_LABELS, MODELS, TASK_LABELS, TASKS, input_dim,
                                     task_classes, task_data, targets)
from ntkbook.models import attention
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_malleability"
VERSION = "1"

#: arrays kept for the first seed only (the others are stacked over seeds)
FIRST_SEED_ARRAYS = ("slice1d", "slice2d", "loss_curve", "loss_epochs")


@dataclasses.dataclass(frozen=True)
class Config:
    """The sweep: every task x model x seed trained, attacked and measured (module docstring).
    ``paper()``: the defaults (five tasks, three seeds, n = 500, width 512); ``smoke()``: MNIST
    (10 classes), one seed, n = 100, width 64, short training and attacks."""

    tasks: tuple[str, ...] = tuple(TASKS)  # of ntkbook.influence.tasks.TASKS
    models: tuple[str, ...] = ("relu", "attn")  # 2L-ReLU and MLP-Attn
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation, batch order and attack keys
    attacks: tuple[str, ...] = ("fgsm", "pgd", "mim")  # the attacks run (ntkbook.influence.attacks)
    n_train: int = 500  # training points per task (balanced over its classes)
    n_test: int = 400  # test points per task (the influence is on their summed loss)
    width: int = 512  # hidden units m
    epochs: int = 500  # epochs of mini-batches (2L-ReLU; MLP-Attn when attn_steps is None)
    lr: float = 1e-2  # the paper's 1e-3 with its L2 term leaves MLP-Attn untrained (see the chapter)
    batch: int = 128  # mini-batch size, last batch kept
    l2: float = 0.0  # the paper's 1e-3 (as PyTorch weight decay) stops MLP-Attn from training
    lam: float = 1e-3  # KRR ridge, A = K + lam I (the influences with n * lam are stored too)
    top_fraction: float = 0.1  # tau: flip rates over the top tau of points by clean |I|
    eps: float = 0.3  # L-infinity radius of the attacks and of the random-sign null
    pgd_steps: int = 40  # PGD steps from a uniform random start in the ball
    pgd_step_size: float = 0.01  # PGD step (L-infinity)
    mim_steps: int = 10  # MIM steps, each of eps / mim_steps
    mim_decay: float = 1.0  # MIM momentum decay
    #: MLP-Attn: full-batch Adam for this many steps (a departure, see the module docstring);
    #: None trains it with the 2L-ReLU recipe (``epochs`` epochs of mini-batches of ``batch``)
    attn_steps: int | None = 10_000
    #: of "adversarial", "transformed", "curated", "null" (ntkbook.influence.interventions)
    interventions: tuple[str, ...] = ("adversarial", "transformed", "curated", "null")
    ablation_tasks: tuple[str, ...] = ("mnist10",)  # tasks of the eps ablation
    ablation_eps: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5)  # radii of the eps ablation
    landscape_points: int = 41  # points of each 1-D loss slice
    landscape_2d_tasks: tuple[str, ...] = ("mnist10",)  # tasks with a 2-D loss slice
    landscape_grid: int = 21  # points per side of a 2-D slice
    landscape_radius: float = 1.0  # slices span [-radius, radius] (filter-normalised units)
    hessian_steps: int = 20  # Lanczos steps for the top Hessian eigenvalue

    @classmethod
    def smoke(cls) -> "Config":
        return cls(tasks=("mnist10",), seeds=(0,), n_train=100, n_test=100, width=64,
                   epochs=40, batch=32, pgd_steps=10, pgd_step_size=0.04, mim_steps=5, attn_steps=200,
                   ablation_eps=(0.1, 0.3), landscape_points=11, landscape_grid=7, hessian_steps=12)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        cc.check_choices(NAME, self, tasks=TASKS, models=MODELS, attacks=ATTACK_LABELS,
                         interventions=interventions.INTERVENTIONS)
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, self.tasks)
        cc.check_training(NAME, self)
        cc.check_fields(NAME, self, "lam", "top_fraction")
        cc.check_radius(NAME, "eps", self.eps)
        cc.check_fields(NAME, self, "pgd_steps", "pgd_step_size", "mim_steps", "mim_decay", "attn_steps")
        for field in ("ablation_tasks", "landscape_2d_tasks"):
            cc.check_subset(NAME, field, getattr(self, field), self.tasks, "tasks that are run")
        v.each(cc.check_radius, NAME, "ablation_eps", self.ablation_eps)
        v.require(NAME, "ablation_eps", self.ablation_eps,
                  len({int(e * 1000) for e in self.ablation_eps}) == len(self.ablation_eps),
                  "radii that differ in their first three decimals", "each radius keys its own attack")
        v.odd_at_least(NAME, "landscape_points", self.landscape_points, 3, "the middle point is the trained weights")
        v.odd_at_least(NAME, "landscape_grid", self.landscape_grid, 3, "the middle point is the trained weights")
        v.finite_positive(NAME, "landscape_radius", self.landscape_radius)
        cc.check_fields(NAME, self, "hessian_steps")


def train_recipe(config: Config) -> training.TrainRecipe:
    """The training recipe of ``config``."""
    return training.TrainRecipe.of(config)


def eval_settings(config: Config) -> interventions.EvalSettings:
    """The interventions of ``config`` and how they are measured."""
    return interventions.EvalSettings(
        lam=config.lam, top_fraction=config.top_fraction, eps=config.eps, attacks=config.attacks,
        interventions=config.interventions, pgd_steps=config.pgd_steps,
        pgd_step_size=config.pgd_step_size, mim_steps=config.mim_steps, mim_decay=config.mim_decay,
        ablation_eps=config.ablation_eps)


def estimate_seconds(config: Config) -> float:
    """Rough CPU time (2 cores, ~50 GFLOP/s effective: ~100 measured unloaded), from the dominant matmuls."""
    total = 0.0
    for task in config.tasks:
        d = input_dim(task)
        n = config.n_train
        pass_flops = 6.0 * n * d * config.width
        train = pass_flops * config.epochs
        if "attn" in config.models and config.attn_steps is not None:
            train = (train + pass_flops * config.attn_steps) / 2  # the mean over the two models
        att_passes = len(config.attacks) * (1 + config.pgd_steps + config.mim_steps)
        n_int = sum(i in config.interventions for i in ("adversarial", "transformed"))
        attack = pass_flops * att_passes * max(n_int, 1)
        if task in config.ablation_tasks:
            attack += pass_flops * att_passes * len(config.ablation_eps)
        hess = pass_flops * 4 * config.hessian_steps
        total += len(config.models) * len(config.seeds) * (train + attack + hess)
    return total / 5e10


def _point(data, task: str, model: str, seed: int, config: Config):
    """One (task, model, seed): train, measure, intervene, and the landscape."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    ztr, zte = attention.transform(xtr, xte, attend=(model == "attn"), normalize="row")
    ytr = targets(ltr, C)
    params, hist = training.train_model(ztr, ytr, C, train_recipe(config), seed, model=model)
    t_train = time.perf_counter() - t0
    arrays, sc = training.fit_record(params, hist, ztr, ltr, zte, lte, C)
    sc["train_seconds"] = t_train
    a, s = interventions.evaluate(params, data, model, eval_settings(config), seed,
                                  do_ablation=task in config.ablation_tasks)
    arrays.update(a)
    sc.update(s)
    first = seed == config.seeds[0]
    sizes = landscape.LandscapeSettings(hessian_steps=config.hessian_steps,
                                        radius=config.landscape_radius,
                                        points=config.landscape_points, grid=config.landscape_grid)
    a, s = landscape.measure(params, ztr, ytr, C, sizes, seed, do_1d=first,
                             do_2d=first and task in config.landscape_2d_tasks)
    arrays.update(a)
    sc.update(s)
    sc["seconds"] = time.perf_counter() - t0
    return arrays, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (task, model, seed) of ``config``, one checkpointed point each. Arrays
    ``<task>/<model>/<name>``: per seed the clean influences and those after PGD, the first seed's
    training loss curve and loss slices; ``table["<task>/<model>"]``: the per-seed scalars
    (training, :data:`ntkbook.influence.interventions.SCORE_KEYS`, the Hessian)."""
    points = points or PointStore(None)
    for t in config.tasks:
        task_classes(t)
    arrays: dict[str, np.ndarray] = {}
    table: dict[str, dict] = {}
    bar = Progress(len(config.tasks) * len(config.models) * len(config.seeds), "influence")
    try:
        for task in config.tasks:
            data = task_data(task, config.n_train, config.n_test)
            for model in config.models:
                runs = []
                for seed in config.seeds:
                    key = f"task={task}/model={model}/seed={seed}"
                    arr, sc = points.cached(key, lambda s=seed: _point(data, task, model, s, config))
                    runs.append((arr, sc))
                    bar.update()
                    bar.set_postfix(task=task, model=model, seed=seed)
                prefix = f"{task}/{model}"
                for name in runs[0][0]:
                    if name in FIRST_SEED_ARRAYS:
                        arrays[f"{prefix}/{name}"] = runs[0][0][name]
                    else:
                        arrays[f"{prefix}/{name}"] = np.stack([r[0][name] for r in runs])
                table[prefix] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "tasks": TASK_LABELS, "models": MODELS,
                           "attacks": ATTACK_LABELS})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce influence_malleability --sample`` recomputes: one
    task (MNIST 3 vs 8 where the sweep has it), both models, the first seed (each point depends
    only on its task, model and seed)."""
    task = "mnist_3v8" if "mnist_3v8" in config.tasks else config.tasks[0]
    only = {f: tuple(t for t in getattr(config, f) if t == task)  # per-task options of that task
            for f in ("ablation_tasks", "landscape_2d_tasks")}
    sub = dataclasses.replace(config, tasks=(task,), seeds=config.seeds[:1], **only)
    return sub, (f"task {task}, seed {sub.seeds[0]} (of {len(config.tasks)} tasks x "
                 f"{len(config.seeds)} seeds)")


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`)."""
    return sweep_part(result, sample.tasks, sample.models, sample.seeds, FIRST_SEED_ARRAYS)
