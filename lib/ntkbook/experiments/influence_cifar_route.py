r"""CIFAR's MLP-Attn with whitened inputs (Paper A, issue 21 item 7): one route to a trained network.

On raw CIFAR-10 pixels MLP-Attn does not train with the main recipe (the influence chapter's
malleability and map experiments: about 28 % / 70 % training accuracy on ``cifar10`` /
``cifar_auto_air``, full-batch), so Paper A's CIFAR rows are untested there. The attention
``X X^T X`` cubes the Gram matrix of whatever it is given; whitening the inputs first flattens that
Gram matrix (:mod:`ntkbook.influence.whitening`: ``kappa(Z Z^T) = (1 + r kappa_k) / (1 + r)`` for
a ridge ``r`` times the top covariance eigenvalue). This experiment takes that route:

- the **model**: pixels ``x`` in [0, 1] -> ``z = (x - mu) P`` -> (MLP-Attn: linear attention over
  the whitened training set) -> rows l2-normalised -> the two-layer ReLU network. ``mu`` and ``P``
  (PCA whitening, ``components`` leading directions of the centred training set, None: all of its
  rank; ridge ``rel_ridge`` times the top covariance eigenvalue) are fitted once on the clean
  training set of the task and then frozen: a fixed affine map inside the model. So the attacks and
  the random-sign null still act on **pixels**, inside the L-infinity ball of radius ``eps``
  around the clean images and the box [0, 1], exactly as on raw pixels; a perturbed training set is
  whitened with the clean set's ``mu`` and ``P``, and the attention runs over it.
- **spectra** of each task's training set: the Gram matrix ``G`` of the raw pixels, of the centred
  pixels and of the whitened inputs (the nonzero spectrum, :func:`ntkbook.ntk.gram.factor_spectrum`,
  as the ``gram_conditioning`` experiment defines ``kappa``), the attention output's Gram (``G^3``:
  measured from the SVD of ``X X^T X``, and ``kappa(G)^3``), the Gram of the row-normalised
  attention outputs and of the row-normalised inputs (what the network of MLP-Attn and of 2L-ReLU
  is given), and ``kappa`` of the whitened Gram measured and predicted at each ridge of
  ``kappa_rel_ridges``;
- **training** of both networks on the whitened inputs with the main recipe
  (:func:`ntkbook.influence.training.train_model` as ``influence_map`` calls it: Adam, lr 1e-2, no
  L2, 2L-ReLU ``epochs`` epochs of mini-batches, MLP-Attn full-batch for ``attn_steps`` steps),
  the training record of every seed;
- for the models of ``attack_models``: the **clean influence** at every ridge (``K + lam I`` and
  ``K + n lam I``), the independence ceiling of its top set, then at every radius **PGD**
  (``pgd_steps`` steps of ``pgd_step_fraction * eps`` from ``pgd_restarts`` random starts, the
  restart of highest loss kept; it maximises the frozen network's training loss through the
  whitening and the attention) and the **random-sign null** (``null_draws`` draws of ``+-eps`` per
  pixel, NumPy, keyed by seed, radius and draw as in ``influence_map``), each measured at every
  ridge: flip rate over the clean top set and Spearman's rho.

Checkpointed points: the spectra of each task; for each (task, model, seed) its training, its
clean influences and each (eps, attack).
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from ntkbook import validate as v
from ntkbook.influence import config_checks as cc
from ntkbook.influence import interventions, references, scores, training, whitened
from ntkbook.influence import whitening as wh
from ntkbook.influence.readout import sweep_part
from ntkbook.influence.tasks import MODELS, TASK_LABELS, TASKS, input_dim, task_data, targets
from ntkbook.models import attention, two_layer
from ntkbook.ntk import gram
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_cifar_route"
VERSION = "1"

#: the inputs whose Gram spectra are measured: raw pixels, centred pixels, whitened inputs
INPUTS = {"raw": "raw pixels", "centred": "centred pixels", "whitened": "whitened"}
#: the attacks of each radius: PGD on the training loss, and random signs
ATTACKS = {"pgd": "PGD", "null": "random signs"}


@dataclasses.dataclass(frozen=True)
class Config:
    """The whitening route on CIFAR. ``paper()``: the defaults (both CIFAR tasks, three seeds,
    n = 500, width 512, the main recipe, every direction of the centred set kept, ridge 1e-3 of the
    top variance, PGD and the null on MLP-Attn at four radii); ``smoke()``: 40 images per task, one
    seed, width 32, short training and attacks, two radii."""

    tasks: tuple[str, ...] = ("cifar10", "cifar_auto_air")  # of ntkbook.influence.tasks.TASKS
    models: tuple[str, ...] = ("relu", "attn")  # trained on whitened inputs: 2L-ReLU and MLP-Attn
    attack_models: tuple[str, ...] = ("attn",)  # of models: clean influence, PGD and the null
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
    #: leading directions of the centred training set the whitening keeps (None: all, its rank)
    components: int | None = None
    #: the whitening's ridge: eps = rel_ridge * the top covariance eigenvalue (kappa(Z Z^T) = (1 + r kappa_k) / (1 + r))
    rel_ridge: float = 1e-3
    #: ridges at which kappa of the whitened Gram is measured and predicted (spectra only, no training)
    kappa_rel_ridges: tuple[float, ...] = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
    top_fraction: float = 0.1  # tau: flip rates over the top tau of points by clean |I|
    eps: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)  # L-infinity radii on pixels in [0, 1]
    ridges: tuple[float, ...] = (1e-3,)  # KRR ridges lam with A = K + lam I
    ridges_per_point: tuple[float, ...] = (1e-3,)  # KRR ridges lam with A = K + n lam I, n = n_train
    pgd_steps: int = 40  # PGD steps from each random start
    pgd_step_fraction: float = 0.05  # PGD step = this times eps (40 steps travel 2 eps)
    pgd_restarts: int = 2  # PGD random starts; the one of highest loss is kept
    null_draws: int = 3  # random-sign draws per (eps, seed); their flip rates are averaged

    @classmethod
    def smoke(cls) -> "Config":
        return cls(seeds=(0,), n_train=40, n_test=40, width=32, epochs=20, batch=16, attn_steps=100,
                   kappa_rel_ridges=(0.0, 1e-3), eps=(0.03, 0.3), pgd_steps=5, pgd_step_fraction=0.4,
                   null_draws=2)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        cc.check_choices(NAME, self, tasks=TASKS, models=MODELS)
        cc.check_subset(NAME, "attack_models", self.attack_models, self.models, "models that are trained")
        cc.check_seeds(NAME, self.seeds)
        cc.check_balanced_sizes(NAME, self, self.tasks)
        cc.check_training(NAME, self)
        cc.check_fields(NAME, self, "attn_steps")
        if self.components is not None:
            v.int_in(NAME, "components", self.components, 1, self.n_train - 1,
                     "or None: the centred training set has rank at most n_train - 1")
        v.finite_non_negative(NAME, "rel_ridge", self.rel_ridge, "a ridge relative to the top variance")
        v.each(v.finite_non_negative, NAME, "kappa_rel_ridges", self.kappa_rel_ridges,
               "a ridge relative to the top variance")
        v.increasing(NAME, "kappa_rel_ridges", self.kappa_rel_ridges)
        cc.check_fields(NAME, self, "top_fraction")
        cc.check_radii(NAME, "eps", self.eps, cc.eps_code)
        cc.check_ridges(NAME, self, ("ridges", "ridges_per_point"))
        cc.check_fields(NAME, self, "pgd_steps", "pgd_step_fraction", "pgd_restarts", "null_draws")


def ridge_labels(config: Config) -> dict[str, tuple[float, bool]]:
    """Every ridge of ``config``: label -> ``(lam, per_point)``; ``lam=<lam>`` for ``A = K + lam I``,
    ``nlam=<lam>`` for ``A = K + n lam I`` (the labels of ``influence_map``)."""
    return scores.ridge_labels(config.ridges, config.ridges_per_point)


def train_recipe(config: Config) -> training.TrainRecipe:
    """The training recipe of ``config``."""
    return training.TrainRecipe.of(config)


#: effective float32 matmul rate (FLOP/s), float64 SVD rate (FLOP/s) and fixed cost per point (s,
#: compilation and set-up), calibrated on 2 shared CPU cores from the smoke run and from n = 500
#: probes of the spectra, of training and of PGD
RATE = 5e10
SVD_RATE = 3e9
POINT_OVERHEAD = 2.0


def _svd_flops(n: int, p: int) -> float:
    """FLOPs of a thin SVD of an ``n x p`` matrix (``n <= p``)."""
    return 4.0 * n * n * p + 22.0 * n**3


def estimate_seconds(config: Config) -> float:
    """Rough CPU time on 2 cores (:data:`RATE`, :data:`SVD_RATE`, :data:`POINT_OVERHEAD`): the
    spectra (14 SVDs of ``n x d`` factors, two per ridge of the sweep of ``n x k`` ones), training
    (a pass is ``6 n k m``, ``k`` = kept directions), PGD (a gradient through the whitening, the
    attention and the network) and the influences (eNTK and an ``n x n`` solve per evaluation)."""
    n, T, m = config.n_train, config.n_test, config.width
    k = config.components or n - 1
    total = 0.0
    for task in config.tasks:
        d = input_dim(task)
        total += POINT_OVERHEAD + (14 * _svd_flops(n, d) + 2 * len(config.kappa_rel_ridges) * _svd_flops(n, k)) / SVD_RATE
        for model in config.models:
            per_seed = 2 * POINT_OVERHEAD
            steps = config.attn_steps if model == "attn" and config.attn_steps is not None else \
                config.epochs * math.ceil(n / min(config.batch, n))
            rows = n if model == "attn" and config.attn_steps is not None else min(config.batch, n)
            per_seed += 6.0 * rows * k * m * steps / RATE
            if model in config.attack_models:
                evals = 1 + len(config.eps) * (1 + config.null_draws)
                per_eval = 2.0 * (n + T) * (d * k + n * k + k * m) + n**3
                grad = 3 * 2.0 * n * (d * k + (2 * n * k if model == "attn" else 0) + k * m)
                per_seed += (evals * per_eval + len(config.eps) * config.pgd_steps * config.pgd_restarts * grad) / RATE
                per_seed += POINT_OVERHEAD * len(config.eps) * 2
            total += per_seed * len(config.seeds)
    return total


# --------------------------------------------------------------------------------------------------
# the points
# --------------------------------------------------------------------------------------------------
def _gram_stats(x) -> tuple[dict, dict]:
    """Spectral scalars and arrays of one input set ``x`` ``(n, p)``: its Gram, its attention
    output's Gram (measured and cubed), and the Grams of the row-normalised attention outputs and
    row-normalised inputs (nonzero spectra, :func:`ntkbook.ntk.gram.factor_spectrum`)."""
    lam, rank, kappa = gram.factor_spectrum(x)
    a = attention.attention(x)
    lam_a, rank_a, kappa_a = gram.factor_spectrum(a)
    _, _, kappa_hat = gram.factor_spectrum(attention.normalize_rows(a))
    _, _, kappa_rows = gram.factor_spectrum(attention.normalize_rows(x))
    return ({"rank_G": rank, "kappa_G": kappa, "rank_Gt": rank_a, "kappa_Gt_measured": kappa_a,
             "kappa_G_cubed": kappa**3, "kappa_Ghat": kappa_hat, "kappa_rownorm": kappa_rows},
            {"lam_G": lam[:rank], "lam_Gt": lam_a[:rank_a]})


def _spectra(xtr, config: Config) -> tuple[dict, dict]:
    """The spectra point of one task's training pixels ``xtr``: raw, centred, whitened
    (:data:`INPUTS`), the fitted whitening and the ridge sweep."""
    w = wh.fit(xtr, components=config.components, rel_ridge=config.rel_ridge)
    sets = {"raw": xtr, "centred": xtr - w.mean, "whitened": wh.apply(w, xtr)}
    # the random-sign step of radius 1 moves a row by ||P||_F in expectation (squared), the linear
    # map being P = I before whitening: its size relative to the rows' RMS norm
    frob = {"raw": math.sqrt(xtr.shape[1]), "centred": math.sqrt(xtr.shape[1]),
            "whitened": float(np.linalg.norm(w.matrix))}
    arrays, sc = {}, {}
    for name, x in sets.items():
        s, a = _gram_stats(x)
        s["null_step_ratio"] = frob[name] / math.sqrt(float(np.mean(np.sum(x**2, axis=1))))
        sc[name] = s
        arrays.update({f"{name}/{k}": val for k, val in a.items()})
    sweep_measured, sweep_attention = [], []
    for r in config.kappa_rel_ridges:
        wr = dataclasses.replace(w, rel_ridge=float(r), ridge=float(r * w.variances[0]))
        z = wh.apply(wr, xtr)
        sweep_measured.append(gram.factor_spectrum(z)[2])
        sweep_attention.append(gram.factor_spectrum(attention.attention(z))[2])
    arrays["sweep/kappa_measured"] = np.asarray(sweep_measured)
    arrays["sweep/kappa_predicted"] = np.asarray([wh.whitened_condition(w.variances, r)
                                                  for r in config.kappa_rel_ridges])
    arrays["sweep/kappa_attention_measured"] = np.asarray(sweep_attention)
    arrays["whitening/variances"] = w.variances
    sc["whitening"] = {"components": w.components, "rank": w.rank, "rel_ridge": w.rel_ridge,
                       "ridge": w.ridge, "top_variance": float(w.variances[0]),
                       "kappa_k": float(w.variances[0] / w.variances[-1]),
                       "kappa_predicted": wh.whitened_condition(w.variances, w.rel_ridge),
                       "gain_ratio": float(w.gains[-1] / w.gains[0])}
    return arrays, sc


def _train(data, w: wh.Whitening, model: str, seed: int, config: Config):
    """The training point: the weights (``W``, ``a``), the loss curve, the training record."""
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    ztr, zte = whitened.inputs(w, xtr, xte, attend=(model == "attn"))
    params, hist = training.train_model(ztr, targets(ltr, C), C, train_recipe(config), seed, model=model)
    arrays, sc = training.fit_record(params, hist, ztr, ltr, zte, lte, C)
    return ({"W": np.asarray(params["W"]), "a": np.asarray(params["a"]), **arrays},
            {**sc, "train_seconds": time.perf_counter() - t0})


def _influences(params, w, x, data, attend: bool, labels) -> dict[str, np.ndarray]:
    """Influence of every training point of the (perturbed) pixels ``x`` at every ridge: label -> ``(n,)``."""
    _, ltr, xte, lte, C = data
    out, _ = whitened.influences(params, w, x, targets(ltr, C), xte, targets(lte, C), attend,
                                 scores.ridge_values(labels, x.shape[0]))
    return dict(zip(labels, out))


def _clean(params, w, data, model: str, config: Config):
    """The clean point: influences, the KRR test accuracy, the top set's sign mix and the ceiling
    at every ridge."""
    xtr, ltr, xte, lte, C = data
    labels = ridge_labels(config)
    ytr = targets(ltr, C)
    ztr, zte = whitened.inputs(w, xtr, xte, attend=(model == "attn"))
    K, Kx = two_layer.entk_W(params, ztr), two_layer.entk_W(params, zte, ztr)
    return interventions.clean_point(K, Kx, ytr, lte, C, labels, config.top_fraction)


def _attack(params, w, data, model: str, seed: int, eps: float, attack: str, clean, config: Config):
    """One (eps, attack) point, PGD or the null, measured at every ridge."""
    t0 = time.perf_counter()
    xtr, ltr, _, _, C = data
    attend = model == "attn"
    labels = ridge_labels(config)
    ytr = targets(ltr, C)
    sc: dict = {}
    if attack == "null":
        per_draw = []
        for draw in range(config.null_draws):
            rng = np.random.default_rng([seed, cc.eps_code(eps), draw])
            xa = references.random_sign_null(xtr, eps, rng)
            per_draw.append({**scores.flip_and_rho(clean, _influences(params, w, xa, data, attend, labels), labels,
                                                     fraction=config.top_fraction),
                             "loss_after": whitened.loss(params, w, xa, ytr, attend=attend, C=C),
                             **interventions.perturbation_size(xtr, xa)})
        for k in per_draw[0]:
            sc[k] = float(np.mean([d[k] for d in per_draw]))
        for label in labels:
            sc[f"{label}/flip_draws"] = [d[f"{label}/flip"] for d in per_draw]
    else:
        settings = interventions.EvalSettings(
            lam=1.0, top_fraction=config.top_fraction, eps=eps, attacks=("pgd",),
            interventions=("adversarial",), pgd_steps=config.pgd_steps,
            pgd_step_size=config.pgd_step_fraction * eps)  # lam is not used by run_attack
        key = jax.random.fold_in(jax.random.PRNGKey(1000 + seed), cc.eps_code(eps))
        tries = [whitened.run_attack("pgd", params, xtr, ytr, attend, C, eps, w, settings, jax.random.fold_in(key, r))
                 for r in range(config.pgd_restarts)]
        xa, extra = max(tries, key=lambda t: t[1]["loss_after"])
        sc["restart_losses"] = [t[1]["loss_after"] for t in tries]
        after = _influences(params, w, xa, data, attend, labels)
        sc.update(scores.flip_and_rho(clean, after, labels, fraction=config.top_fraction))
        sc.update({k: extra[k] for k in ("loss_before", "loss_after", "linf", "l2_mean")})
    sc["seconds"] = time.perf_counter() - t0
    return {}, sc


def _units(config: Config, model: str) -> int:
    """Checkpointed points per seed of one (task, model): training, and clean plus the attack grid."""
    return 1 + ((1 + len(config.eps) * len(ATTACKS)) if model in config.attack_models else 0)


def run(config: Config, points: PointStore | None = None) -> Result:
    """The spectra of every task, then every (task, model, seed) trained on whitened inputs and,
    for the models of ``attack_models``, attacked at every radius; each a checkpointed point.

    Returns scalars ``spectra[<task>]`` with ``raw``, ``centred``, ``whitened`` (each ``rank_G``,
    ``kappa_G``, ``rank_Gt``, ``kappa_Gt_measured``, ``kappa_G_cubed``, ``kappa_Ghat``,
    ``kappa_rownorm``, ``null_step_ratio``) and ``whitening`` (``components``, ``rank``,
    ``rel_ridge``, ``ridge``, ``top_variance``, ``kappa_k``, ``kappa_predicted``, ``gain_ratio``);
    arrays ``<task>/spectra/<input>/{lam_G, lam_Gt}``, ``<task>/spectra/sweep/{kappa_measured,
    kappa_predicted, kappa_attention_measured}`` (over ``kappa_rel_ridges``) and
    ``<task>/spectra/whitening/variances``; ``table["<task>/<model>"]``: per-seed lists of the
    training record (``train_loss``, ``train_acc``, ``test_acc``, ``train_seconds``) and, for an
    attacked model, ``clean/<ridge>/{krr_test_acc, frac_helpful, frac_helpful_top, ceiling}``,
    ``<attack>/<eps>/<ridge>/{flip, rho}`` and ``<attack>/<eps>/{loss_after, linf, l2_mean,
    seconds}`` (``pgd``: ``loss_before``, ``restart_losses``; ``null``: means over its draws and
    ``<ridge>/flip_draws``); arrays ``<task>/<model>/{loss_curve, loss_epochs}`` and
    ``<task>/<model>/influence_clean@<ridge>`` (``(n_seeds, ...)``)."""
    points = points or PointStore(None)
    labels = ridge_labels(config)
    arrays: dict[str, np.ndarray] = {}
    table: dict[str, dict] = {}
    spectra: dict[str, dict] = {}
    total = len(config.tasks) * (1 + len(config.seeds) * sum(_units(config, m) for m in config.models))
    bar = Progress(total, "CIFAR whitening route")
    try:
        for task in config.tasks:
            data = task_data(task, config.n_train, config.n_test)
            sp_arr, sp_sc = points.cached(f"task={task}/spectra", lambda: _spectra(data[0], config))
            bar.update()
            spectra[task] = sp_sc
            arrays.update({f"{task}/spectra/{k}": val for k, val in sp_arr.items()})
            w = wh.fit(data[0], components=config.components, rel_ridge=config.rel_ridge)
            for model in config.models:
                runs = []
                for seed in config.seeds:
                    base = f"task={task}/model={model}/seed={seed}"
                    tr_arr, sc = points.cached(f"{base}/train", lambda s=seed: _train(data, w, model, s, config))
                    bar.update()
                    sc = dict(sc)
                    arr = {"loss_curve": tr_arr["loss_curve"], "loss_epochs": tr_arr["loss_epochs"]}
                    if model in config.attack_models:
                        params = {"W": tr_arr["W"], "a": tr_arr["a"]}
                        cl_arr, cl_sc = points.cached(f"{base}/clean", lambda: _clean(params, w, data, model, config))
                        bar.update()
                        clean = {label: cl_arr[f"influence_clean@{label}"] for label in labels}
                        sc.update(cl_sc)
                        arr.update({f"influence_clean@{label}": clean[label] for label in labels})
                        for eps in config.eps:
                            for attack in ATTACKS:
                                _, s = points.cached(
                                    f"{base}/eps={eps:g}/attack={attack}",
                                    lambda e=eps, a=attack: _attack(params, w, data, model, seed, e, a, clean, config))
                                sc.update({f"{attack}/{eps:g}/{k}": val for k, val in s.items()})
                                bar.update()
                                bar.set_postfix(task=task, model=model, seed=seed, eps=eps, attack=attack)
                    runs.append((arr, sc))
                prefix = f"{task}/{model}"
                for name in runs[0][0]:
                    arrays[f"{prefix}/{name}"] = np.stack([r[0][name] for r in runs])
                table[prefix] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "spectra": spectra, "ridges": list(labels),
                           "tasks": {t: TASK_LABELS[t] for t in config.tasks},
                           "models": {m: MODELS[m] for m in config.models},
                           "inputs": INPUTS, "attacks": ATTACKS})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce influence_cifar_route --sample`` recomputes: every
    task and model, the first seed (each point depends only on its task, model, seed and radius;
    the spectra on the task alone)."""
    sub = dataclasses.replace(config, seeds=config.seeds[:1])
    return sub, f"seed {sub.seeds[0]} (of {len(config.seeds)} seeds), every task and model"


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`): the
    training and attack points of its seeds, and the spectra of its tasks."""
    arrays, scalars = sweep_part(result, sample.tasks, sample.models, sample.seeds)
    arrays.update({k: a for k, a in result.arrays.items()
                   if any(k.startswith(f"{task}/spectra/") for task in sample.tasks)})
    scalars["spectra"] = {task: result["spectra"][task] for task in sample.tasks}
    return arrays, scalars
