r"""Adversarial training and influence malleability (Paper A): does PGD training make ReLU malleable?

For each task, model and seed two networks are trained with the same (cheaper than the main
experiment's) recipe through :func:`ntkbook.train.fit`, Adam, batch 128, ``epochs`` epochs, width
``width``:

* **standard**: :func:`ntkbook.influence.training.train_model` with mini-batches for
  both models (for MLP-Attn this is not the main experiment's full-batch recipe, whose 10 000 steps
  would each need a PGD attack here);
* **adversarial** (Madry et al. 2018, :func:`ntkbook.influence.training.adversarial_train`):
  every mini-batch is first replaced by its PGD version (``pgd_train_steps`` steps of
  ``pgd_train_step_size`` from a uniform random start in the ``eps``-ball, maximising the batch
  loss at the current weights), and the Adam step is taken on it. For MLP-Attn the perturbed
  batch attends over the *clean* training set (keys and values frozen during training), so that
  a batch's attack does not move the other points.

Then the flip rate of both networks under the main experiment's evaluation
(:func:`ntkbook.influence.interventions.evaluate`): every training point
attacked by PGD (40 steps, with the attention recomputed over the perturbed set), and the
random-sign null model. Every (task, model, seed) is one checkpointed point.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook import validate as v
from ntkbook import verdicts
from ntkbook.influence import interventions, training
from ntkbook.influence.losses import data_loss
from ntkbook.influence.readout import TRAINED_ACC, stat, sweep_part, trained
from ntkbook.influence.tasks import (MODELS, TASK_LABELS, TASKS, accuracy, input_dim, task_classes, task_data,
                                     targets)
from ntkbook.models import attention, two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_advtrain"
VERSION = "2"  # 2: trained through ntkbook.train.fit (step keys), width 512

#: Paper A's PGD flip rate (%) under adversarial training, from secondary notes of the paper:
#: (task, model) -> (standard training, adversarial training)
PAPER = {
    ("mnist10", "relu"): (3.3, 43.4),
    ("mnist10", "attn"): (28.9, 42.2),
    ("cifar10", "relu"): (3.1, 36.5),
    ("cifar10", "attn"): (19.1, 38.6),
}


#: the scalar keys of each training's network; every key of
#: :data:`ntkbook.influence.interventions.SCORE_KEYS` is stored with the training's prefix too
#: (e.g. ``standard/adversarial/pgd/flip``, ``adversarial/null_adversarial/random/flip``)
NETWORK_KEYS = {
    "standard": {"train_loss": "standard/train_loss", "train_acc": "standard/train_acc",
                 "test_acc": "standard/test_acc", "robust_train_acc": "standard/robust_train_acc"},
    "adversarial": {"train_loss": "adversarial/train_loss", "train_acc": "adversarial/train_acc",
                    "test_acc": "adversarial/test_acc",
                    "robust_train_acc": "adversarial/robust_train_acc"},
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Standard against PGD adversarial training (module docstring). ``paper()``: MNIST and CIFAR-10
    (10 classes), three seeds, n = 500, width 512, 150 epochs, PGD-10 during training, PGD-40 after;
    ``smoke()``: MNIST, one seed, n = 100, width 64, 20 epochs, PGD-3 during training, PGD-10 after."""

    tasks: tuple[str, ...] = ("mnist10", "cifar10")  # of ntkbook.influence.tasks.TASKS
    models: tuple[str, ...] = ("relu", "attn")  # 2L-ReLU and MLP-Attn
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation, batch order and attack keys
    n_train: int = 500  # training points per task (balanced over its classes)
    n_test: int = 400  # test points per task
    width: int = 512  # as the main experiment
    epochs: int = 150  # epochs of mini-batches, both trainings and both models
    lr: float = 1e-2  # Adam's learning rate
    batch: int = 128  # mini-batch size, last batch kept
    l2: float = 0.0  # L2 penalty added to the gradient
    eps: float = 0.3  # L-infinity radius: adversarial training, the attack after it, the null
    pgd_train_steps: int = 10  # PGD steps on each mini-batch during adversarial training
    pgd_train_step_size: float = 0.075  # their step size
    # evaluation (as in the main experiment)
    lam: float = 1e-3  # KRR ridge, A = K + lam I (the influences with n * lam are stored too)
    top_fraction: float = 0.1  # tau: flip rates over the top tau of points by clean |I|
    pgd_steps: int = 40  # PGD steps of the attack after training (and of the robust accuracy)
    pgd_step_size: float = 0.01  # its step size

    @classmethod
    def smoke(cls) -> "Config":
        return cls(tasks=("mnist10",), seeds=(0,), n_train=100, n_test=100, width=64, epochs=20,
                   batch=32, pgd_train_steps=3, pgd_train_step_size=0.15, pgd_steps=10,
                   pgd_step_size=0.04)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        for field, known in (("tasks", TASKS), ("models", MODELS)):
            v.non_empty(NAME, field, getattr(self, field))
            v.all_in(NAME, field, getattr(self, field), known)
            v.unique(NAME, field, getattr(self, field))
        v.non_empty(NAME, "seeds", self.seeds)
        v.each(v.int_at_least, NAME, "seeds", self.seeds, 0, "a JAX seed")
        v.unique(NAME, "seeds", self.seeds)
        classes = math.lcm(*(len(task_classes(t)[1]) for t in self.tasks))
        for field in ("n_train", "n_test"):
            n = getattr(self, field)
            v.positive_int(NAME, field, n)
            v.require(NAME, field, n, n % classes == 0, f"a multiple of {classes}",
                      "a balanced subset of every task's classes")
        v.even_positive_int(NAME, "width", self.width, "the symmetric initialisation pairs the units")
        v.positive_int(NAME, "epochs", self.epochs)
        v.finite_positive(NAME, "lr", self.lr)
        v.positive_int(NAME, "batch", self.batch)
        v.finite_non_negative(NAME, "l2", self.l2)
        v.finite_positive(NAME, "lam", self.lam, "K + lam I must be positive definite")
        v.fraction(NAME, "top_fraction", self.top_fraction, high_closed=True)
        v.fraction(NAME, "eps", self.eps, "an L-infinity radius on pixels in [0, 1]", high_closed=True)
        v.positive_int(NAME, "pgd_steps", self.pgd_steps)
        v.finite_positive(NAME, "pgd_step_size", self.pgd_step_size)
        v.positive_int(NAME, "pgd_train_steps", self.pgd_train_steps)
        v.finite_positive(NAME, "pgd_train_step_size", self.pgd_train_step_size)


def estimate_seconds(config: Config) -> float:
    """Rough CPU time (2 cores, ~50 GFLOP/s effective), from the dominant matmuls."""
    total = 0.0
    for task in config.tasks:
        d = input_dim(task)
        pass_flops = 6.0 * config.n_train * d * config.width
        train = pass_flops * config.epochs * (2 + config.pgd_train_steps)
        total += len(config.models) * len(config.seeds) * (train + pass_flops * 4 * config.pgd_steps)
    return total / 5e10


def _point(data, task: str, model: str, seed: int, config: Config):
    """One (task, model, seed): both trainings, then each network measured and attacked."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    attend = model == "attn"
    ytr = targets(ltr, C)
    # both models with the mini-batch recipe, as the adversarial training
    recipe = training.TrainRecipe(width=config.width, epochs=config.epochs, batch=config.batch,
                                  lr=config.lr, l2=config.l2, attn_steps=None)
    settings = interventions.EvalSettings(
        lam=config.lam, top_fraction=config.top_fraction, eps=config.eps, attacks=("pgd",),
        interventions=("adversarial", "null"), pgd_steps=config.pgd_steps,
        pgd_step_size=config.pgd_step_size)
    ztr, zte = attention.transform(xtr, xte, attend=attend, normalize="row")
    arrays, sc = {}, {}
    std, hist = training.train_model(ztr, ytr, C, recipe, seed, model=model)
    adv, ahist = training.adversarial_train(xtr, ytr, C, attend, recipe, seed, eps=config.eps,
                                            pgd_steps=config.pgd_train_steps,
                                            pgd_step_size=config.pgd_train_step_size)
    arrays["adv_loss_curve"] = ahist["adv_loss"]
    arrays["std_loss_curve"] = np.asarray(hist["loss"], np.float64)
    for tag, params in (("standard", std), ("adversarial", adv)):
        keys = NETWORK_KEYS[tag]
        out_tr = np.asarray(two_layer.apply_batch(params, jnp.asarray(ztr, jnp.float32)))
        out_te = np.asarray(two_layer.apply_batch(params, jnp.asarray(zte, jnp.float32)))
        sc[keys["train_loss"]] = float(data_loss(jnp.asarray(out_tr), jnp.asarray(ytr), C))
        sc[keys["train_acc"]] = accuracy(out_tr, ltr, C)
        sc[keys["test_acc"]] = accuracy(out_te, lte, C)
        # robustness: accuracy on PGD versions of the training points (context: clean set)
        sc[keys["robust_train_acc"]] = training.robust_accuracy(
            params, xtr, ytr, ltr, C, attend, eps=config.eps, steps=config.pgd_steps,
            step_size=config.pgd_step_size, key=jax.random.PRNGKey(seed))
        _, s = interventions.evaluate(params, data, model, settings, seed, do_ablation=False)
        for k, v in s.items():
            sc[f"{tag}/{k}"] = v
    sc["seconds"] = time.perf_counter() - t0
    return arrays, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (task, model, seed) of ``config``, one checkpointed point each. Arrays
    ``<task>/<model>/adv_loss_curve`` and ``.../std_loss_curve`` (per seed); the per-seed scalars in
    ``table["<task>/<model>"]``, each key prefixed by the training, ``standard/`` or
    ``adversarial/`` (e.g. ``standard/adversarial/pgd/flip``, ``adversarial/robust_train_acc``)."""
    points = points or PointStore(None)
    table, arrays = {}, {}
    bar = Progress(len(config.tasks) * len(config.models) * len(config.seeds), "adversarial training")
    try:
        for task in config.tasks:
            data = task_data(task, config.n_train, config.n_test)
            for model in config.models:
                runs = []
                for seed in config.seeds:
                    key = f"task={task}/model={model}/seed={seed}"
                    runs.append(points.cached(key, lambda s=seed: _point(data, task, model, s, config)))
                    bar.update()
                    bar.set_postfix(task=task, model=model, seed=seed)
                table[f"{task}/{model}"] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                for name in runs[0][0]:
                    arrays[f"{task}/{model}/{name}"] = np.stack([r[0][name] for r in runs])
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "tasks": TASK_LABELS, "models": MODELS})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce influence_advtrain --sample`` recomputes: the first
    task (MNIST), both models, the first seed (each point depends only on its task, model and
    seed)."""
    sub = dataclasses.replace(config, tasks=config.tasks[:1], seeds=config.seeds[:1])
    return sub, (f"task {sub.tasks[0]}, seed {sub.seeds[0]} (of {len(config.tasks)} tasks x "
                 f"{len(config.seeds)} seeds)")


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`)."""
    return sweep_part(result, sample.tasks, sample.models, sample.seeds)


def scorecard(result: Result) -> list[dict]:
    """A.advtrain: the ReLU network's PGD flip rate after adversarial training. 'reproduces' if it
    rises by at least 3x and by more than 10 percentage points on every task (the paper: 3.3 -> 43.4,
    3.1 -> 36.5); 'partly' if it rises beyond two seed spreads on some task; 'does not' otherwise."""
    tasks = [t for t in result.config["tasks"] if f"{t}/relu" in result["table"]]
    if not tasks:
        return []
    untrained = sorted({t for t in tasks for keys in NETWORK_KEYS.values()
                        if not trained(result, t, "relu", keys["train_acc"])})
    tasks = [t for t in tasks if t not in untrained]
    skipped = (f"; not trained (no verdict): {', '.join(untrained)}" if untrained else "")
    if not tasks:
        return [{"claim": "A.advtrain", "ours": "ReLU models not trained on " + ", ".join(untrained),
                 "verdict": verdicts.DOES_NOT,
                 "note": f"a ReLU network stayed below {TRAINED_ACC:.0%} (clean) training accuracy"}]
    parts, strong, some = [], [], []
    for t in tasks:
        s, ss, _ = stat(result, t, "relu", "standard/adversarial/pgd/flip", 100)
        a, sa, _ = stat(result, t, "relu", "adversarial/adversarial/pgd/flip", 100)
        parts.append(f"{t}: {s:.1f} -> {a:.1f} %")
        strong.append(a >= 3 * s and a - s > 10)
        some.append(a - s > 2 * max(ss, sa, 1e-9))
    v = verdicts.ladder(all(strong) and not untrained, all(strong) or any(some))
    return [{"claim": "A.advtrain", "ours": "ReLU PGD flip rate " + ", ".join(parts) + skipped, "verdict": v,
             "note": (f"standard vs PGD-{result.config['pgd_train_steps']} adversarial training (width "
                      f"{result.config['width']}, {result.config['epochs']} epochs), mean of seeds")}]
