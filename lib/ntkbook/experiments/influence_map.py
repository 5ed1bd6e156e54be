r"""The influence malleability map (Paper A, issue 21): flip rate across the radius eps and the ridge.

The main experiment (:mod:`ntkbook.experiments.influence_malleability`) measures one operating
point, eps = 0.3 and lam = 1e-3, where MLP-Attn's flip rates sit at the rate of signs that carry no
information. This sweep maps the flip rate over the radius and the ridge, between two references:

- the **random-sign null** (:func:`ntkbook.influence.references.random_sign_null`): ``+-eps`` per
  pixel with fair signs drawn in NumPy (the same draws whatever JAX's settings), ``null_draws``
  draws per point, their flip rates averaged (draws keyed by seed, radius and draw: the same signs
  for both models);
- the **independence ceiling** (:func:`ntkbook.influence.references.independence_ceiling`): the
  flip rate if the perturbed signs were independent of the clean ones.

For each task, model and seed:

1. **Train** once with the main experiment's recipe (:func:`ntkbook.influence.training.train_model`:
   Adam, lr 1e-2, no L2, 2L-ReLU ``epochs`` epochs of mini-batches of ``batch``, MLP-Attn full-batch
   for ``attn_steps`` steps; the same seeds give the same networks as the main experiment). The
   weights are a checkpointed point, reused for every radius and ridge; the training record (final
   loss, training and test accuracy, loss curve) is kept whether the model trained or not.
2. **Clean influence** at every ridge (:func:`ntkbook.influence.interventions.influences`): the
   class-diagonal eNTK of the frozen network, kernel ridge regression with ``A = K + lam I`` for
   each ``lam`` of ``ridges`` and ``A = K + n lam I`` (n = ``n_train``; 0.5 for lam = 1e-3 at
   n = 500, the main experiment's "n lam") for each of ``ridges_per_point``; the top set ``T``
   (``top_fraction`` by clean ``|I|``) of each ridge and its ceiling.
3. **Loss attacks** at each ``eps`` (every training point attacked, jointly; for MLP-Attn the
   attention over the perturbed set is inside the loss;
   :func:`ntkbook.influence.interventions.run_attack`, maximising the frozen network's training
   loss): FGSM; PGD, ``pgd_steps`` steps of ``pgd_step_fraction * eps`` from ``pgd_restarts``
   uniform random starts, keeping the restart of highest loss; MIM, ``mim_steps`` steps of
   ``eps / mim_steps``. An attack does not depend on the ridge: each is run once and its
   perturbed set measured at every ridge (flip rate over that ridge's ``T``, Spearman's rho of all
   influences) -- as is each null draw.
4. **The flip-objective attack** (beyond the paper; :func:`ntkbook.influence.flip_attack.flip_attack`)
   on ``flip_tasks`` at each of ``flip_eps`` and each of ``flip_ridges`` (``K + lam I``) and
   ``flip_ridges_per_point`` (``K + n lam I``): projected signed descent on the top set's
   influences through the eNTK, the attention and the ridge solve, in float64, ``flip_steps``
   steps of ``flip_step_fraction * eps``, ``flip_restarts`` restarts (the first from the clean
   set); its flip rate and rho at its own ridge.

Every attack also records the frozen network's training loss on the set it leaves, its largest
pixel change and mean L2 norm. Checkpointed points: the training of each (task, model, seed), its
clean influences, each (eps, attack) of the loss attacks and the null, and each (eps, ridge) of
the flip-objective attack, so a stopped run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook import validate as v
from ntkbook.influence import config_checks as cc
from ntkbook.influence import flip_attack, interventions, references, scores, training
from ntkbook.influence.losses import attack_loss
from ntkbook.influence.readout import sweep_part
from ntkbook.influence.tasks import (ATTACK_LABELS, MODELS, TASK_LABELS, TASKS, input_dim, task_data,
                                     targets)
from ntkbook.models import attention, two_layer
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_map"
VERSION = "1"

#: the name of the flip-objective attack in keys, beside ATTACK_LABELS' loss attacks and "null"
FLIP_ATTACK = "flipobj"


@dataclasses.dataclass(frozen=True)
class Config:
    """The map: every task x model x seed trained once, then attacked at every radius and measured
    at every ridge (module docstring). ``paper()``: the defaults (the main experiment's five tasks,
    MNIST first, three seeds, n = 500, width 512); ``smoke()``: MNIST 3 vs 8, one seed, n = 40,
    width 32, two radii, one ridge of each kind, short training and attacks."""

    #: of ntkbook.influence.tasks.TASKS, in the order run (the MNIST tasks first: a stopped run has them)
    tasks: tuple[str, ...] = ("mnist10", "mnist_3v8", "fmnist10", "cifar10", "cifar_auto_air")
    models: tuple[str, ...] = ("relu", "attn")  # 2L-ReLU and MLP-Attn
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation, batch order and attack draws
    n_train: int = 500  # training points per task (balanced over its classes)
    n_test: int = 400  # test points per task (the influence is on their summed loss)
    width: int = 512  # hidden units m
    epochs: int = 500  # epochs of mini-batches (2L-ReLU; MLP-Attn when attn_steps is None)
    lr: float = 1e-2  # Adam's learning rate (the main experiment's)
    batch: int = 128  # mini-batch size, last batch kept
    l2: float = 0.0  # L2 penalty added to the gradient (the main experiment's: none)
    #: MLP-Attn: full-batch Adam for this many steps; None: the 2L-ReLU recipe
    attn_steps: int | None = 10_000
    top_fraction: float = 0.1  # tau: flip rates over the top tau of points by clean |I|
    eps: tuple[float, ...] = (0.01, 0.03, 0.05, 0.1, 0.3)  # L-infinity radii (pixels in [0, 1])
    ridges: tuple[float, ...] = (1e-3, 1e-2)  # KRR ridges lam with A = K + lam I
    ridges_per_point: tuple[float, ...] = (1e-3,)  # KRR ridges lam with A = K + n lam I, n = n_train
    attacks: tuple[str, ...] = ("fgsm", "pgd", "mim")  # the loss attacks (ntkbook.influence.attacks)
    pgd_steps: int = 40  # PGD steps from each random start
    pgd_step_fraction: float = 0.05  # PGD step = this times eps (40 steps travel 2 eps)
    pgd_restarts: int = 2  # PGD random starts; the one of highest loss is kept
    mim_steps: int = 10  # MIM steps, each of eps / mim_steps
    mim_decay: float = 1.0  # MIM momentum decay
    null_draws: int = 3  # random-sign draws per (eps, seed); their flip rates are averaged
    flip_tasks: tuple[str, ...] = ("mnist10", "mnist_3v8")  # tasks of the flip-objective attack
    flip_eps: tuple[float, ...] = (0.01, 0.03, 0.1)  # its radii (of eps)
    flip_ridges: tuple[float, ...] = (1e-3,)  # its ridges with K + lam I (of ridges)
    flip_ridges_per_point: tuple[float, ...] = (1e-3,)  # its ridges with K + n lam I (of ridges_per_point)
    flip_steps: int = 20  # its steps per restart
    flip_step_fraction: float = 0.1  # its step = this times eps (20 steps travel 2 eps)
    flip_restarts: int = 2  # its restarts: the first from the clean set, the others uniform in the ball

    @classmethod
    def smoke(cls) -> "Config":
        return cls(tasks=("mnist_3v8",), seeds=(0,), n_train=40, n_test=40, width=32, epochs=20,
                   batch=16, attn_steps=100, eps=(0.03, 0.3), ridges=(1e-3,), ridges_per_point=(1e-3,),
                   pgd_steps=5, pgd_step_fraction=0.4, mim_steps=3, null_draws=2,
                   flip_tasks=("mnist_3v8",), flip_eps=(0.3,), flip_steps=5, flip_step_fraction=0.4)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        cc.check_choices(NAME, self, tasks=TASKS, models=MODELS, attacks=ATTACK_LABELS)
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, self.tasks)
        cc.check_training(NAME, self)
        cc.check_fields(NAME, self, "attn_steps", "top_fraction")
        for field in ("eps", "flip_eps"):  # both checked before eps is required non-empty
            cc.check_radii(NAME, field, getattr(self, field), cc.eps_code, required=False)
        v.non_empty(NAME, "eps", self.eps)
        cc.check_ridges(NAME, self, ("ridges", "ridges_per_point", "flip_ridges", "flip_ridges_per_point"))
        cc.check_fields(NAME, self, "pgd_steps", "pgd_step_fraction", "pgd_restarts", "mim_steps", "mim_decay",
                        "null_draws")
        cc.check_subset(NAME, "flip_tasks", self.flip_tasks, self.tasks, "tasks that are run")
        v.all_in(NAME, "flip_eps", self.flip_eps, self.eps, "radii of the map")
        v.all_in(NAME, "flip_ridges", self.flip_ridges, self.ridges, "ridges of the map")
        v.all_in(NAME, "flip_ridges_per_point", self.flip_ridges_per_point, self.ridges_per_point,
                 "ridges of the map")
        v.positive_int(NAME, "flip_steps", self.flip_steps)
        v.finite_positive(NAME, "flip_step_fraction", self.flip_step_fraction)
        v.positive_int(NAME, "flip_restarts", self.flip_restarts)


def ridge_labels(config: Config) -> dict[str, tuple[float, bool]]:
    """Every ridge of ``config``: label -> ``(lam, per_point)``; ``lam=<lam>`` for ``A = K + lam I``,
    ``nlam=<lam>`` for ``A = K + n lam I``. The labels key the results."""
    return scores.ridge_labels(config.ridges, config.ridges_per_point)


def flip_ridge_labels(config: Config) -> list[str]:
    """The labels (:func:`ridge_labels`) of the flip-objective attack's ridges."""
    return [f"lam={lam:g}" for lam in config.flip_ridges] + [f"nlam={lam:g}" for lam in config.flip_ridges_per_point]


def train_recipe(config: Config) -> training.TrainRecipe:
    """The training recipe of ``config``."""
    return training.TrainRecipe.of(config)


def estimate_seconds(config: Config) -> float:
    """Rough CPU time (2 cores; ~50 GFLOP/s effective in float32, ~25 in float64), from the
    dominant matmuls: training, the attacks' passes, the flip-objective attack's float64 steps
    (about three forward passes of the eNTK pipeline each). The evaluations are a small part."""
    total = 0.0
    n, T, m = config.n_train, config.n_test, config.width
    for task in config.tasks:
        d = input_dim(task)
        pass_flops = 6.0 * n * d * m
        train = pass_flops * config.epochs
        if "attn" in config.models and config.attn_steps is not None:
            train = (train + pass_flops * config.attn_steps) / 2  # the mean over the two models
        passes = 1 + config.pgd_steps * config.pgd_restarts + config.mim_steps
        attack = pass_flops * passes * len(config.eps)
        evals = (len(config.attacks) + config.null_draws) * len(config.eps) * 2.0 * (n + T) * (d * m + n * (d + m))
        per_seed = (train + attack + evals) / 5e10
        if task in config.flip_tasks:
            step = 3 * 2.0 * (n + T) * (2 * d * m + n * (2 * d + m))
            runs = len(config.flip_eps) * len(flip_ridge_labels(config)) * config.flip_restarts
            per_seed += step * config.flip_steps * runs / 2.5e10
        total += len(config.models) * len(config.seeds) * per_seed
    return total


# --------------------------------------------------------------------------------------------------
# the points
# --------------------------------------------------------------------------------------------------
def _train(data, model: str, seed: int, config: Config):
    """The training point: the weights (``W``, ``a``), the loss curve, the training record."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    ztr, zte = attention.transform(xtr, xte, attend=(model == "attn"), normalize="row")
    params, hist = training.train_model(ztr, targets(ltr, C), C, train_recipe(config), seed, model=model)
    arrays, sc = training.fit_record(params, hist, ztr, ltr, zte, lte, C)
    return ({"W": np.asarray(params["W"]), "a": np.asarray(params["a"]), **arrays},
            {**sc, "train_seconds": time.perf_counter() - t0})


def _influences(params, x, data, attend: bool, labels) -> dict[str, np.ndarray]:
    """Influence of every training point of the (perturbed) set ``x`` at every ridge: label -> ``(n,)``."""
    _, ltr, xte, lte, C = data
    out, _ = interventions.influences(params, x, targets(ltr, C), xte, targets(lte, C), attend,
                                      scores.ridge_values(labels, x.shape[0]))
    return dict(zip(labels, out))


def _clean(params, data, model: str, config: Config):
    """The clean point: influences, the KRR test accuracy, the top set's sign mix and the ceiling
    at every ridge."""
    xtr, ltr, xte, lte, C = data
    labels = ridge_labels(config)
    ytr = targets(ltr, C)
    ztr, zte = attention.transform(xtr, xte, attend=(model == "attn"), normalize="row")
    K, Kx = two_layer.entk_W(params, ztr), two_layer.entk_W(params, zte, ztr)
    return interventions.clean_point(K, Kx, ytr, lte, C, labels, config.top_fraction)


def _loss(params, x, data, attend: bool) -> float:
    """The frozen network's mean training loss on the (perturbed) training set ``x``, in float32
    as :func:`ntkbook.influence.interventions.run_attack` measures it."""
    _, ltr, _, _, C = data
    p32 = {k: jnp.asarray(val, jnp.float32) for k, val in params.items()}
    return float(attack_loss(attend, C)(jnp.asarray(x, jnp.float32), p32,
                                        jnp.asarray(targets(ltr, C), jnp.float32)))


def _loss_attack(params, data, model: str, seed: int, eps: float, attack: str, clean, config: Config):
    """One (eps, attack) point of a loss attack or of the null, measured at every ridge."""
    t0 = time.perf_counter()
    xtr, ltr, _, _, C = data
    attend = model == "attn"
    labels = ridge_labels(config)
    n = xtr.shape[0]
    sc: dict = {}
    if attack == "null":
        per_draw = []
        for draw in range(config.null_draws):
            rng = np.random.default_rng([seed, cc.eps_code(eps), draw])
            xa = references.random_sign_null(xtr, eps, rng)
            per_draw.append({**scores.flip_and_rho(clean, _influences(params, xa, data, attend, labels), labels,
                                                     fraction=config.top_fraction),
                             "loss_after": _loss(params, xa, data, attend), **interventions.perturbation_size(xtr, xa)})
        for k in per_draw[0]:
            sc[k] = float(np.mean([d[k] for d in per_draw]))
        for label in labels:
            sc[f"{label}/flip_draws"] = [d[f"{label}/flip"] for d in per_draw]
    else:
        settings = interventions.EvalSettings(
            lam=1.0, top_fraction=config.top_fraction, eps=eps, attacks=(attack,),
            interventions=("adversarial",), pgd_steps=config.pgd_steps,
            pgd_step_size=config.pgd_step_fraction * eps, mim_steps=config.mim_steps,
            mim_decay=config.mim_decay)  # lam is not used by run_attack
        key = jax.random.fold_in(jax.random.PRNGKey(1000 + seed), cc.eps_code(eps))
        tries = []
        for r in range(config.pgd_restarts if attack == "pgd" else 1):
            tries.append(interventions.run_attack(attack, params, xtr, targets(ltr, C), attend, C, eps,
                                                  settings, np.ones(n, bool), jax.random.fold_in(key, r)))
        xa, extra = max(tries, key=lambda t: t[1]["loss_after"])
        if attack == "pgd":
            sc["restart_losses"] = [t[1]["loss_after"] for t in tries]
        after = _influences(params, xa, data, attend, labels)
        sc.update(scores.flip_and_rho(clean, after, labels, fraction=config.top_fraction))
        sc.update({k: extra[k] for k in ("loss_after", "linf", "l2_mean")})
    sc["seconds"] = time.perf_counter() - t0
    return {}, sc


def _flip_attack(params, data, model: str, seed: int, eps: float, label: str, clean, config: Config):
    """One (eps, ridge) point of the flip-objective attack, measured at its own ridge."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    attend = model == "attn"
    lam, per_point = ridge_labels(config)[label]
    ridge = lam * xtr.shape[0] if per_point else lam
    I0 = clean[label]
    top = scores.top_indices(I0, config.top_fraction)
    rng = np.random.default_rng([seed, cc.eps_code(eps), int(per_point), int(round(lam * 1e9)), 1])
    res = flip_attack.flip_attack(params, xtr, targets(ltr, C), xte, targets(lte, C), I0, ridge, eps,
                                  attend=attend, top=top, steps=config.flip_steps,
                                  step_size=config.flip_step_fraction * eps,
                                  restarts=config.flip_restarts, rng=rng)
    after = _influences(params, res.x, data, attend, {label: (lam, per_point)})[label]
    sc = {"flip": scores.flip_rate(I0, after, top=top), "rho": scores.spearman(I0, after),
          "objective": res.objective, "objective_clean": res.objective_clean,
          "restart_objectives": list(res.restart_objectives),
          "loss_after": _loss(params, res.x, data, attend), **interventions.perturbation_size(xtr, res.x),
          "seconds": time.perf_counter() - t0}
    return {}, sc


def _units(config: Config, task: str) -> int:
    """Checkpointed points per (model, seed) of ``task``: training, clean, the attack grid."""
    flips = len(config.flip_eps) * len(flip_ridge_labels(config)) if task in config.flip_tasks else 0
    return 2 + len(config.eps) * (len(config.attacks) + 1) + flips


def run(config: Config, points: PointStore | None = None) -> Result:
    """Every (task, model, seed) of ``config``: trained once, then every (eps, attack) and every
    flip-objective (eps, ridge), each a checkpointed point. Returns arrays
    ``<task>/<model>/influence_clean@<ridge>`` (``(n_seeds, n_train)``), ``.../loss_curve`` and
    ``.../loss_epochs`` (``(n_seeds, L)``); ``table["<task>/<model>"]``: per-seed lists of the
    training record (``train_loss``, ``train_acc``, ``test_acc``, ``train_seconds``), of
    ``clean/<ridge>/{krr_test_acc, frac_helpful, frac_helpful_top, ceiling}``, and per attack
    (``fgsm``, ``pgd``, ``mim``, ``null``, ``flipobj``) ``<attack>/<eps>/<ridge>/{flip, rho}`` and
    ``<attack>/<eps>/{loss_after, linf, l2_mean, seconds}`` (``null``: means over its draws, and
    ``<ridge>/flip_draws``; ``pgd``: ``restart_losses``; ``flipobj``:
    ``flipobj/<eps>/<ridge>/{flip, rho, objective, objective_clean, restart_objectives, loss_after,
    linf, l2_mean, seconds}``).
    Ridges are labelled ``lam=<lam>`` (``K + lam I``) and ``nlam=<lam>`` (``K + n lam I``)."""
    points = points or PointStore(None)
    labels = ridge_labels(config)
    arrays: dict[str, np.ndarray] = {}
    table: dict[str, dict] = {}
    total = sum(_units(config, t) for t in config.tasks) * len(config.models) * len(config.seeds)
    bar = Progress(total, "influence map")
    try:
        for task in config.tasks:
            data = task_data(task, config.n_train, config.n_test)
            for model in config.models:
                runs = []
                for seed in config.seeds:
                    base = f"task={task}/model={model}/seed={seed}"
                    tr_arr, tr_sc = points.cached(f"{base}/train",
                                                  lambda s=seed: _train(data, model, s, config))
                    bar.update()
                    params = {"W": tr_arr["W"], "a": tr_arr["a"]}
                    cl_arr, cl_sc = points.cached(f"{base}/clean", lambda: _clean(params, data, model, config))
                    bar.update()
                    clean = {label: cl_arr[f"influence_clean@{label}"] for label in labels}
                    sc = {**tr_sc, **cl_sc}
                    for eps in config.eps:
                        for attack in (*config.attacks, "null"):
                            _, s = points.cached(
                                f"{base}/eps={eps:g}/attack={attack}",
                                lambda e=eps, a=attack: _loss_attack(params, data, model, seed, e, a, clean, config))
                            sc.update({f"{attack}/{eps:g}/{k}": val for k, val in s.items()})
                            bar.update()
                            bar.set_postfix(task=task, model=model, seed=seed, eps=eps, attack=attack)
                    if task in config.flip_tasks:
                        for eps in config.flip_eps:
                            for label in flip_ridge_labels(config):
                                _, s = points.cached(
                                    f"{base}/eps={eps:g}/ridge={label}/attack={FLIP_ATTACK}",
                                    lambda e=eps, lb=label: _flip_attack(params, data, model, seed, e, lb, clean,
                                                                         config))
                                sc.update({f"{FLIP_ATTACK}/{eps:g}/{label}/{k}": val for k, val in s.items()})
                                bar.update()
                    arr = {f"influence_clean@{label}": cl_arr[f"influence_clean@{label}"] for label in labels}
                    arr.update(loss_curve=tr_arr["loss_curve"], loss_epochs=tr_arr["loss_epochs"])
                    runs.append((arr, sc))
                prefix = f"{task}/{model}"
                for name in runs[0][0]:
                    arrays[f"{prefix}/{name}"] = np.stack([r[0][name] for r in runs])
                table[prefix] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "ridges": list(labels), "flip_ridges": flip_ridge_labels(config),
                           "tasks": TASK_LABELS, "models": MODELS,
                           "attacks": {**ATTACK_LABELS, "null": "random signs",
                                       FLIP_ATTACK: "PGD on the flip objective"}})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce influence_map --sample`` recomputes: MNIST 3 vs 8
    (or the first task), both models, the first seed (each point depends only on its task, model,
    seed, radius and ridge)."""
    task = "mnist_3v8" if "mnist_3v8" in config.tasks else config.tasks[0]
    sub = dataclasses.replace(config, tasks=(task,), seeds=config.seeds[:1],
                              flip_tasks=tuple(t for t in config.flip_tasks if t == task))
    return sub, (f"task {task}, seed {sub.seeds[0]} (of {len(config.tasks)} tasks x "
                 f"{len(config.seeds)} seeds)")


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`)."""
    return sweep_part(result, sample.tasks, sample.models, sample.seeds)
