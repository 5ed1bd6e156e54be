r"""Flip rate against width (beyond Paper A): does influence malleability fall as ``m`` grows?

The main experiment's pipeline (:mod:`ntkbook.experiments.influence_malleability`: training
recipe, NTK leave-one-out influence, every training point attacked with the attention recomputed,
flip rate of the top 10 %) at several widths, with the random-sign null model beside each attack.
Every (task, model, width, seed) is one checkpointed point.
"""

from __future__ import annotations

import dataclasses
import time

import jax.numpy as jnp
import numpy as np

from ntkbook.experiments import influence_malleability as IM
from ntkbook.models import attention as att
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_width"
VERSION = "1"


@dataclasses.dataclass(frozen=True)
class Config:
    tasks: tuple[str, ...] = ("mnist_3v8",)
    models: tuple[str, ...] = ("relu", "attn")
    widths: tuple[int, ...] = (64, 256, 1024, 2048)
    seeds: tuple[int, ...] = (0, 1, 2)
    attacks: tuple[str, ...] = ("fgsm", "pgd")
    n_train: int = 500
    n_test: int = 400
    epochs: int = 500
    lr: float = 1e-2
    l2: float = 0.0
    batch: int = 128
    pgd_steps: int = 40
    pgd_step_size: float = 0.01

    @classmethod
    def smoke(cls) -> "Config":
        return cls(widths=(16, 128), seeds=(0,), n_train=100, n_test=100, epochs=40, batch=32,
                   pgd_steps=10, pgd_step_size=0.04)

    @classmethod
    def paper(cls) -> "Config":
        return cls()


def estimate_seconds(config: Config) -> float:
    total = 0.0
    for task in config.tasks:
        d = IM.input_dim(task)
        for m in config.widths:
            pass_flops = 6.0 * config.n_train * d * m
            total += len(config.models) * len(config.seeds) * pass_flops * (config.epochs + 60)
    return total / 5e10


def _ecfg(config: Config) -> IM.Config:
    return dataclasses.replace(IM.Config.paper(), n_train=config.n_train, n_test=config.n_test,
                               epochs=config.epochs, lr=config.lr, l2=config.l2, batch=config.batch,
                               pgd_steps=config.pgd_steps, pgd_step_size=config.pgd_step_size,
                               attacks=config.attacks, interventions=("adversarial", "null"),
                               attn_steps=None)  # both models with the mini-batch recipe


def point(data, model, width, seed, config, ecfg):
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    ztr, zte = att.transform(xtr, xte, attend=(model == "attn"), normalize="row")
    params, hist = IM.train_model(ztr, IM.targets(ltr, C), C, ecfg, seed, width=width, model=model)
    out_tr = np.asarray(att.apply_heads(params, jnp.asarray(ztr, jnp.float32)))
    out_te = np.asarray(att.apply_heads(params, jnp.asarray(zte, jnp.float32)))
    sc = {"train_loss": float(hist["loss"][-1]), "train_acc": IM.accuracy(out_tr, ltr, C),
          "test_acc": IM.accuracy(out_te, lte, C)}
    _, s = IM.evaluate(params, data, model, ecfg, seed, do_ablation=False)
    sc.update(s)
    sc["seconds"] = time.perf_counter() - t0
    return {}, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    points = points or PointStore(None)
    ecfg = _ecfg(config)
    table = {}
    bar = Progress(len(config.tasks) * len(config.models) * len(config.widths) * len(config.seeds),
                   "flip rate vs width")
    try:
        for task in config.tasks:
            data = IM.task_data(task, config.n_train, config.n_test)
            for model in config.models:
                for m in config.widths:
                    runs = []
                    for seed in config.seeds:
                        key = f"task={task}/model={model}/m={m}/seed={seed}"
                        runs.append(points.cached(key, lambda s=seed, m=m: point(data, model, m, s, config, ecfg)))
                        bar.update()
                        bar.set_postfix(task=task, model=model, m=m)
                    table[f"{task}/{model}/{m}"] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays={"widths": np.asarray(config.widths)},
                  scalars={"table": table, "tasks": IM.TASK_LABELS, "models": IM.MODELS})
