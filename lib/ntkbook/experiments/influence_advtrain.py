r"""Adversarial training and influence malleability (Paper A): does PGD training make ReLU malleable?

For each task, model and seed two networks are trained with the same (cheaper than the main
experiment's) recipe through :func:`ntkbook.train.fit`, Adam, batch 128, ``epochs`` epochs, width
``width``:

* **standard**: :func:`ntkbook.experiments.influence_malleability.train_model` with mini-batches for
  both models (for MLP-Attn this is not the main experiment's full-batch recipe, whose 10 000 steps
  would each need a PGD attack here);
* **adversarial** (Madry et al. 2018): every mini-batch is first replaced by its PGD version
  (``pgd_train_steps`` steps of ``pgd_train_step_size`` from a uniform random start in the
  ``eps``-ball, maximising the batch loss at the current weights), and the Adam step is taken on
  it. For MLP-Attn the perturbed batch attends over the *clean* training set (keys and values
  frozen during training), so that a batch's attack does not move the other points.

Then the flip rate of both networks under the main experiment's evaluation: every training point
attacked by PGD (40 steps, with the attention recomputed over the perturbed set), and the
random-sign null model. Every (task, model, seed) is one checkpointed point.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ntkbook.influence import attacks as _attacks
from ntkbook.experiments import influence_malleability as IM
from ntkbook.models import attention as att
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "influence_advtrain"
VERSION = "2"  # 2: trained through ntkbook.train.fit (step keys), width 512


@dataclasses.dataclass(frozen=True)
class Config:
    tasks: tuple[str, ...] = ("mnist10", "cifar10")
    models: tuple[str, ...] = ("relu", "attn")
    seeds: tuple[int, ...] = (0, 1, 2)
    n_train: int = 500
    n_test: int = 400
    width: int = 512  # as the main experiment
    epochs: int = 150
    lr: float = 1e-2
    batch: int = 128
    l2: float = 0.0
    eps: float = 0.3
    pgd_train_steps: int = 10
    pgd_train_step_size: float = 0.075
    # evaluation (as in the main experiment)
    lam: float = 1e-3
    top_fraction: float = 0.1
    pgd_steps: int = 40
    pgd_step_size: float = 0.01

    @classmethod
    def smoke(cls) -> "Config":
        return cls(tasks=("mnist10",), seeds=(0,), n_train=100, n_test=100, width=64, epochs=20,
                   batch=32, pgd_train_steps=3, pgd_train_step_size=0.15, pgd_steps=10,
                   pgd_step_size=0.04)

    @classmethod
    def paper(cls) -> "Config":
        return cls()


def estimate_seconds(config: Config) -> float:
    total = 0.0
    for task in config.tasks:
        d = IM.input_dim(task)
        pass_flops = 6.0 * config.n_train * d * config.width
        train = pass_flops * config.epochs * (2 + config.pgd_train_steps)
        total += len(config.models) * len(config.seeds) * (train + pass_flops * 4 * config.pgd_steps)
    return total / 5e10


def _eval_config(config: Config) -> IM.Config:
    return dataclasses.replace(
        IM.Config.paper(), n_train=config.n_train, n_test=config.n_test, width=config.width,
        epochs=config.epochs, lr=config.lr, batch=config.batch, l2=config.l2, lam=config.lam,
        top_fraction=config.top_fraction, eps=config.eps, pgd_steps=config.pgd_steps,
        pgd_step_size=config.pgd_step_size, attacks=("pgd",), interventions=("adversarial", "null"),
        attn_steps=None)  # both models with the mini-batch recipe, as the adversarial training


def _batch_loss(x, params, y, ctx, *, attend: bool, C: int):
    """Loss of a batch ``x`` (raw pixels) attending over the fixed context ``ctx`` (MLP-Attn)."""
    z = att.inputs_jax(ctx, x, attend=attend)
    return IM.data_loss(att.apply_heads(params, z), y, C)


@functools.lru_cache(maxsize=None)
def batch_loss(attend: bool, C: int):
    return functools.partial(_batch_loss, attend=attend, C=C)


def adversarial_train(xtr, ytr, C: int, attend: bool, config: Config, seed: int):
    """PGD adversarial training of ``W`` with :func:`ntkbook.train.fit` (Adam, mini-batches of
    ``config.batch``, last batch kept). The loss of a batch is the loss at its PGD version, found
    at the current weights from a random start drawn with the step's own key (``step_keys``); the
    gradient does not flow through the attack (Madry et al.). ``xtr``: (n, d) pixels, ``ytr``:
    (n, C) targets. Returns ``(params, history)`` with the mean adversarial batch loss per epoch."""
    from ntkbook.train import fit

    x = jnp.asarray(xtr, jnp.float32)
    y = jnp.asarray(ytr, jnp.float32)
    params = att.init_heads(jax.random.PRNGKey(seed), x.shape[1], config.width, C)
    a = params["a"]
    loss_b = batch_loss(attend, C)

    def adversarial_loss(p, batch, key):
        xb, yb = batch
        frozen = jax.lax.stop_gradient({"W": p["W"], "a": a})
        # PGD on the batch (the fixed context is the clean training set)
        x0 = _attacks.project(xb + jax.random.uniform(key, xb.shape, xb.dtype, -config.eps, config.eps),
                              xb, config.eps)

        def body(_, xa):
            g = jax.grad(loss_b)(xa, frozen, yb, x)
            return _attacks.project(xa + config.pgd_train_step_size * jnp.sign(g), xb, config.eps)

        xa = jax.lax.stop_gradient(jax.lax.fori_loop(0, config.pgd_train_steps, body, x0))
        return loss_b(xa, {"W": p["W"], "a": a}, yb, x)

    opt = optax.chain(optax.add_decayed_weights(config.l2), optax.adam(config.lr))
    res = fit(adversarial_loss, {"W": params["W"]}, opt, (x, y), epochs=config.epochs,
              batch_size=min(config.batch, x.shape[0]), seed=10_000 + seed, step_keys=True,
              drop_last=False, show_progress=False)
    h = res.history
    return {"W": res.params["W"], "a": a}, {"epoch": h["epoch"][1:], "adv_loss": h["loss"][1:]}


def point(data, task: str, model: str, seed: int, config: Config):
    t0 = time.perf_counter()
    xtr, ltr, xte, lte, C = data
    attend = model == "attn"
    ytr = IM.targets(ltr, C)
    ecfg = _eval_config(config)
    ztr, zte = att.transform(xtr, xte, attend=attend, normalize="row")
    arrays, sc = {}, {}
    std, hist = IM.train_model(ztr, ytr, C, ecfg, seed, model=model)
    adv, ahist = adversarial_train(xtr, ytr, C, attend, config, seed)
    arrays["adv_loss_curve"] = ahist["adv_loss"]
    arrays["std_loss_curve"] = np.asarray(hist["loss"], np.float64)
    for tag, params in (("standard", std), ("adversarial", adv)):
        out_tr = np.asarray(att.apply_heads(params, jnp.asarray(ztr, jnp.float32)))
        out_te = np.asarray(att.apply_heads(params, jnp.asarray(zte, jnp.float32)))
        sc[f"{tag}/train_loss"] = float(IM.data_loss(jnp.asarray(out_tr), jnp.asarray(ytr), C))
        sc[f"{tag}/train_acc"] = IM.accuracy(out_tr, ltr, C)
        sc[f"{tag}/test_acc"] = IM.accuracy(out_te, lte, C)
        # robustness: accuracy on PGD versions of the training points (context: clean set)
        loss_b = batch_loss(attend, C)
        p32 = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
        x32 = jnp.asarray(xtr, jnp.float32)
        xa = _attacks.pgd(loss_b, x32, config.eps, args=(p32, jnp.asarray(ytr, jnp.float32), x32),
                          steps=config.pgd_steps, step_size=config.pgd_step_size,
                          key=jax.random.PRNGKey(seed))
        za = att.inputs_jax(x32, xa, attend=attend)
        sc[f"{tag}/robust_train_acc"] = IM.accuracy(np.asarray(att.apply_heads(p32, za)), ltr, C)
        a, s = IM.evaluate(params, data, model, ecfg, seed, do_ablation=False)
        for k, v in s.items():
            sc[f"{tag}/{k}"] = v
    sc["seconds"] = time.perf_counter() - t0
    return arrays, sc


def run(config: Config, points: PointStore | None = None) -> Result:
    points = points or PointStore(None)
    table, arrays = {}, {}
    bar = Progress(len(config.tasks) * len(config.models) * len(config.seeds), "adversarial training")
    try:
        for task in config.tasks:
            data = IM.task_data(task, config.n_train, config.n_test)
            for model in config.models:
                runs = []
                for seed in config.seeds:
                    key = f"task={task}/model={model}/seed={seed}"
                    runs.append(points.cached(key, lambda s=seed: point(data, task, model, s, config)))
                    bar.update()
                    bar.set_postfix(task=task, model=model, seed=seed)
                table[f"{task}/{model}"] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                for name in runs[0][0]:
                    arrays[f"{task}/{model}/{name}"] = np.stack([r[0][name] for r in runs])
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"table": table, "tasks": IM.TASK_LABELS, "models": IM.MODELS})


def stat(result: Result, task: str, model: str, key: str, scale: float = 1.0):
    v = np.asarray(result["table"][f"{task}/{model}"][key], dtype=np.float64) * scale
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, v


def scorecard(result: Result) -> list[dict]:
    """A.advtrain: the ReLU network's PGD flip rate after adversarial training. 'reproduces' if it
    rises by at least 3x and by more than 10 percentage points on every task (the paper: 3.3 -> 43.4,
    3.1 -> 36.5); 'partly' if it rises beyond two seed spreads on some task; 'does not' otherwise."""
    tasks = [t for t in result.config["tasks"] if f"{t}/relu" in result["table"]]
    if not tasks:
        return []
    untrained = sorted({t for t in tasks for tag in ("standard", "adversarial")
                        if np.any(np.asarray(result["table"][f"{t}/relu"][f"{tag}/train_acc"]) < IM.TRAINED_ACC)})
    tasks = [t for t in tasks if t not in untrained]
    skipped = (f"; not trained (no verdict): {', '.join(untrained)}" if untrained else "")
    if not tasks:
        return [{"claim": "A.advtrain", "ours": "ReLU models not trained on " + ", ".join(untrained),
                 "verdict": "does not",
                 "note": f"a ReLU network stayed below {IM.TRAINED_ACC:.0%} (clean) training accuracy"}]
    parts, strong, some = [], [], []
    for t in tasks:
        s, ss, _ = stat(result, t, "relu", "standard/adversarial/pgd/flip", 100)
        a, sa, _ = stat(result, t, "relu", "adversarial/adversarial/pgd/flip", 100)
        parts.append(f"{t}: {s:.1f} -> {a:.1f} %")
        strong.append(a >= 3 * s and a - s > 10)
        some.append(a - s > 2 * max(ss, sa, 1e-9))
    v = "reproduces" if all(strong) and not untrained else "partly" if all(strong) or any(some) else "does not"
    return [{"claim": "A.advtrain", "ours": "ReLU PGD flip rate " + ", ".join(parts) + skipped, "verdict": v,
             "note": (f"standard vs PGD-{result.config['pgd_train_steps']} adversarial training (width "
                      f"{result.config['width']}, {result.config['epochs']} epochs), mean of seeds")}]
