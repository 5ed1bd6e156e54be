r"""Does the paper's training recipe train the influence chapter's networks? (Paper A, its setup)

Paper A trains both networks with Adam at learning rate 1e-3 and an L2 term of 1e-3 (PyTorch's
``weight_decay``), in mini-batches. The influence chapter departs from that recipe because MLP-Attn
barely trains under it; this experiment is the measurement behind the departure: on one task, each
model trained with each recipe (mini-batches, the main experiment's data, width and epochs), for
several seeds, with the final training loss and the training and test accuracy of every run. Each
(recipe, model, seed) is one checkpointed point.

The chapter reads ``table["{recipe}/{model}"]`` (lists over seeds of ``train_loss``, ``train_acc``,
``test_acc``) and the loss curves ``"{recipe}/{model}/loss_curve"`` ((seeds, log points)).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ntkbook import validate as v
from ntkbook.influence import config_checks as cc
from ntkbook.influence import training
from ntkbook.influence.tasks import MODELS, TASKS, accuracy, task_data, targets
from ntkbook.models import attention, two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_recipe"
VERSION = "1"

#: recipe key -> (label in text, Adam learning rate, L2 term)
RECIPES = {
    "paper": ("paper: lr 10⁻³, L2 10⁻³", 1e-3, 1e-3),
    "ours": ("lr 10⁻², no L2", 1e-2, 0.0),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The recipes compared. ``paper()``: MNIST (10 classes), both recipes, both models, three
    seeds, the main experiment's n = 500, width 512, 500 epochs of mini-batches of 128;
    ``smoke()``: one seed, n = 100, width 64, 40 epochs of 32."""

    task: str = "mnist10"  # of ntkbook.influence.tasks.TASKS
    recipes: tuple[str, ...] = ("paper", "ours")  # keys of RECIPES
    models: tuple[str, ...] = ("relu", "attn")  # 2L-ReLU and MLP-Attn
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation and batch order
    n_train: int = 500  # training points (balanced over the task's classes)
    n_test: int = 400  # test points
    width: int = 512  # hidden units m
    epochs: int = 500  # epochs of mini-batches
    batch: int = 128  # mini-batch size, last batch kept

    @classmethod
    def smoke(cls) -> "Config":
        return cls(seeds=(0,), n_train=100, n_test=100, width=64, epochs=40, batch=32)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.one_of(NAME, "task", self.task, TASKS)
        cc.check_choices(NAME, self, recipes=RECIPES, models=MODELS)
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, (self.task,), classes_of="the task's classes")
        cc.check_fields(NAME, self, "width", "epochs", "batch")  # lr and l2 are the recipes'


def estimate_seconds(config: Config) -> float:
    steps = config.epochs * math.ceil(config.n_train / min(config.batch, config.n_train))
    return 5.0 + len(config.recipes) * len(config.models) * len(config.seeds) * steps * config.width * 2e-6


def train_once(data, recipe: str, model: str, seed: int, config: Config) -> tuple[dict, dict]:
    """One run: ``model`` trained with ``recipe`` from ``seed`` (mini-batches, never full batch).

    ``data``: ``task_data``'s ``(xtr, ltr, xte, lte, C)``. Returns ``({"loss_curve": (k,)},
    {"train_loss", "train_acc", "test_acc"})``."""
    xtr, ltr, xte, lte, C = data
    ztr, zte = attention.transform(xtr, xte, attend=model == "attn", normalize="row")
    _, lr, l2 = RECIPES[recipe]
    rc = training.TrainRecipe(width=config.width, epochs=config.epochs, batch=config.batch, lr=lr, l2=l2,
                              attn_steps=None)
    params, hist = training.train_model(ztr, targets(ltr, C), C, rc, seed=seed, model=model)
    curve = np.asarray(hist["loss"], dtype=np.float64)
    return {"loss_curve": curve}, {
        "train_loss": float(curve[-1]),
        "train_acc": accuracy(np.asarray(two_layer.apply_batch(params, ztr)), ltr, C),
        "test_acc": accuracy(np.asarray(two_layer.apply_batch(params, zte)), lte, C),
    }


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (recipe, model, seed), each a checkpointed point (module docstring)."""
    points = points or PointStore(None)
    data = task_data(config.task, config.n_train, config.n_test)
    arrays, table = {}, {}
    runs = [(r, m) for r in config.recipes for m in config.models]
    bar = Progress(len(runs) * len(config.seeds), desc="training recipes")
    for recipe, model in runs:
        curves, rows = [], {"train_loss": [], "train_acc": [], "test_acc": []}
        for seed in config.seeds:
            a, s = points.cached(f"recipe={recipe}/model={model}/seed={seed}",
                                 lambda recipe=recipe, model=model, seed=seed:
                                 train_once(data, recipe, model, seed, config))
            curves.append(a["loss_curve"])
            for k in rows:
                rows[k].append(s[k])
            bar.update()
        arrays[f"{recipe}/{model}/loss_curve"] = np.stack(curves)
        table[f"{recipe}/{model}"] = rows
    bar.close()
    n_classes = data[4]
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "recipes": {k: RECIPES[k][0] for k in config.recipes},
                           "models": {m: MODELS[m] for m in config.models},
                           "chance_loss": math.log(n_classes), "n_classes": n_classes})
