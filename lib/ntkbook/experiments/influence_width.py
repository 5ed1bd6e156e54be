r"""Flip rate against width (beyond Paper A): does influence malleability fall as ``m`` grows?

The protocol of the main experiment (:mod:`ntkbook.experiments.influence_malleability`) at several
widths: both models trained with the mini-batch recipe
(:func:`ntkbook.influence.training.train_model`, MLP-Attn too), the NTK leave-one-out influence,
every training point attacked with the attention recomputed
(:func:`ntkbook.influence.interventions.evaluate`), flip rate of the top ``top_fraction``, with the
random-sign null model beside each attack. Every (task, model, width, seed) is one checkpointed
point.
"""

from __future__ import annotations

import dataclasses
import time

import jax.numpy as jnp
import numpy as np

from ntkbook.influence import config_checks as cc
from ntkbook.influence import interventions, training
from ntkbook.influence.tasks import MODELS, TASK_LABELS, TASKS, accuracy, input_dim, task_data, targets
from ntkbook.models import attention, two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_width"
VERSION = "2"  # 2: eps, lam and top_fraction are fields of the Config (were the main experiment's)


@dataclasses.dataclass(frozen=True)
class Config:
    """The width sweep. ``paper()``: MNIST 3 vs 8, widths 64 to 2048, three seeds, n = 500, the
    main experiment's training, ridge and attacks (FGSM, PGD; eps 0.3); ``smoke()``: widths 16 and
    128, one seed, n = 100, short training and PGD."""

    tasks: tuple[str, ...] = ("mnist_3v8",)  # of ntkbook.influence.tasks.TASKS
    models: tuple[str, ...] = ("relu", "attn")  # 2L-ReLU and MLP-Attn
    widths: tuple[int, ...] = (64, 256, 1024, 2048)  # hidden units m
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation, batch order and attack keys
    attacks: tuple[str, ...] = ("fgsm", "pgd")  # of "fgsm", "pgd" (MIM is not configured here)
    n_train: int = 500  # training points per task (balanced over its classes)
    n_test: int = 400  # test points per task
    epochs: int = 500  # epochs of mini-batches, both models
    lr: float = 1e-2  # Adam's learning rate
    l2: float = 0.0  # L2 penalty added to the gradient
    batch: int = 128  # mini-batch size, last batch kept
    pgd_steps: int = 40  # PGD steps from a uniform random start in the ball
    pgd_step_size: float = 0.01  # PGD step (L-infinity)
    eps: float = 0.3  # L-infinity radius of the attacks and of the random-sign null
    lam: float = 1e-3  # KRR ridge, A = K + lam I (the influences with n * lam are stored too)
    top_fraction: float = 0.1  # tau: flip rates over the top tau of points by clean |I|

    @classmethod
    def smoke(cls) -> "Config":
        return cls(widths=(16, 128), seeds=(0,), n_train=100, n_test=100, epochs=40, batch=32,
                   pgd_steps=10, pgd_step_size=0.04)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        cc.check_choices(NAME, self, tasks=TASKS, models=MODELS, attacks=("fgsm", "pgd"))
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, self.tasks)
        cc.check_widths(NAME, self.widths)
        cc.check_fields(NAME, self, "epochs", "lr", "batch", "l2", "lam", "top_fraction")
        cc.check_radius(NAME, "eps", self.eps)
        cc.check_fields(NAME, self, "pgd_steps", "pgd_step_size")


def estimate_seconds(config: Config) -> float:
    """Rough CPU time (2 cores, ~50 GFLOP/s effective), from the dominant matmuls."""
    total = 0.0
    for task in config.tasks:
        d = input_dim(task)
        for m in config.widths:
            pass_flops = 6.0 * config.n_train * d * m
            total += len(config.models) * len(config.seeds) * pass_flops * (config.epochs + 60)
    return total / 5e10


def _point(data, model: str, width: int, seed: int, config: Config):
    """One (task, model, width, seed): train with mini-batches, measure, attack every point."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    ztr, zte = attention.transform(xtr, xte, attend=(model == "attn"), normalize="row")
    recipe = training.TrainRecipe(width=width, epochs=config.epochs, batch=config.batch,
                                  lr=config.lr, l2=config.l2, attn_steps=None)
    params, hist = training.train_model(ztr, targets(ltr, C), C, recipe, seed, model=model)
    out_tr = np.asarray(two_layer.apply_batch(params, jnp.asarray(ztr, jnp.float32)))
    out_te = np.asarray(two_layer.apply_batch(params, jnp.asarray(zte, jnp.float32)))
    sc = {"train_loss": float(hist["loss"][-1]), "train_acc": accuracy(out_tr, ltr, C),
          "test_acc": accuracy(out_te, lte, C)}
    settings = interventions.EvalSettings(
        lam=config.lam, top_fraction=config.top_fraction, eps=config.eps, attacks=config.attacks,
        interventions=("adversarial", "null"), pgd_steps=config.pgd_steps,
        pgd_step_size=config.pgd_step_size)
    _, s = interventions.evaluate(params, data, model, settings, seed, do_ablation=False)
    sc.update(s)
    sc["seconds"] = time.perf_counter() - t0
    return {}, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (task, model, width, seed) of ``config``, one checkpointed point each; the per-seed
    scalars in ``table["<task>/<model>/<width>"]`` (training, and the ``adversarial`` and ``null``
    keys of :data:`ntkbook.influence.interventions.SCORE_KEYS`)."""
    points = points or PointStore(None)
    table = {}
    bar = Progress(len(config.tasks) * len(config.models) * len(config.widths) * len(config.seeds),
                   "flip rate vs width")
    try:
        for task in config.tasks:
            data = task_data(task, config.n_train, config.n_test)
            for model in config.models:
                for m in config.widths:
                    runs = []
                    for seed in config.seeds:
                        key = f"task={task}/model={model}/m={m}/seed={seed}"
                        runs.append(points.cached(key, lambda s=seed, m=m: _point(data, model, m, s, config)))
                        bar.update()
                        bar.set_postfix(task=task, model=model, m=m)
                    table[f"{task}/{model}/{m}"] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays={"widths": np.asarray(config.widths)},
                  scalars={"table": table, "tasks": TASK_LABELS, "models": MODELS})
