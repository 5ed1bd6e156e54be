r"""The training recipes of the influence experiments: standard and PGD adversarial training.

The network is :math:`f_c(x) = m^{-1/2}\sum_r a_{rc}\,\mathrm{relu}(w_r\cdot z(x))`
(:func:`ntkbook.models.two_layer.init_heads`: heads ``a = +-1`` fixed, symmetric start, only ``W``
trained), float32, Adam with an optional L2 penalty added to the gradient (PyTorch's
``weight_decay``), on a task's loss (:func:`ntkbook.influence.losses.data_loss`), through
:func:`ntkbook.train.fit`. A :class:`TrainRecipe` holds the hyper-parameters; each experiment
builds it from its own ``Config``.

- :func:`train_model`: mini-batches of ``batch`` (last batch kept) for ``epochs`` epochs; MLP-Attn
  full-batch for ``attn_steps`` Adam steps unless ``attn_steps`` is None.
- :func:`adversarial_train` (Madry et al. 2018): every mini-batch replaced by its PGD version at the
  current weights before the step; :func:`robust_accuracy` checks that it took hold.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ntkbook.errors import InputError
from ntkbook.influence import attacks
from ntkbook.influence.losses import context_loss, data_loss
from ntkbook.influence.tasks import MODELS, accuracy
from ntkbook.models import attention, two_layer

__all__ = ["TrainRecipe", "train_model", "fit_record", "adversarial_train", "robust_accuracy"]


@dataclasses.dataclass(frozen=True)
class TrainRecipe:
    """How a network of the influence experiments is trained."""

    width: int  # hidden units m
    epochs: int  # epochs of mini-batches
    batch: int  # mini-batch size (capped at the number of training points; last batch kept)
    lr: float  # Adam's learning rate
    l2: float  # L2 penalty added to the gradient before Adam (PyTorch's weight_decay)
    #: MLP-Attn: full-batch Adam for this many steps; None trains it as 2L-ReLU (mini-batches)
    attn_steps: int | None = None

    @classmethod
    def of(cls, config, **overrides) -> "TrainRecipe":
        """The recipe of an influence experiment's ``config`` (its ``width``, ``epochs``, ``batch``,
        ``lr``, ``l2`` and ``attn_steps`` fields), with ``overrides`` in place of any of them."""
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if f.name not in overrides}
        return cls(**fields, **overrides)


@dataclasses.dataclass(frozen=True)
class _StandardRun:
    """The standard training run of :func:`train_model`, set up and not yet run: what it and
    :func:`ntkbook.influence.tracked.train_tracked` share, so that both train the same network."""

    W: jax.Array  # the initial trainable weights
    a: jax.Array  # the fixed heads
    loss_fn: Callable  # (params {"W"}, batch (z, y)) -> the task's loss at heads a
    optimizer: optax.GradientTransformation  # L2 penalty added to the gradient, then Adam
    data: tuple  # (z, y), float32
    epochs: int  # epochs of mini-batches, or full-batch steps for MLP-Attn with attn_steps
    batch: int | None  # mini-batch size (None: full batch)
    seed: int  # batch order

    def fit(self, **kwargs):
        """:func:`ntkbook.train.fit` of this run (``kwargs``: its logging and callback)."""
        from ntkbook.train import fit

        return fit(self.loss_fn, {"W": self.W}, self.optimizer, self.data, epochs=self.epochs,
                   batch_size=self.batch, seed=self.seed, **kwargs)

    def params(self, result) -> dict:
        """``{"W", "a"}`` of a finished :meth:`fit`."""
        return {"W": result.params["W"], "a": self.a}


def _standard_run(ztr, ytr, C: int, recipe: TrainRecipe, seed: int, model: str) -> _StandardRun:
    """Set up :func:`train_model`'s run: initialisation from ``seed`` (symmetric, heads fixed), the
    loss, Adam with the L2 penalty, and the epochs and batch of ``model`` (module docstring)."""
    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; choose from {sorted(MODELS)}")
    params = two_layer.init_heads(jax.random.PRNGKey(seed), ztr.shape[1], recipe.width, C)
    a = params["a"]

    def loss_fn(p, batch):
        zb, yb = batch
        return data_loss(two_layer.apply_batch({"W": p["W"], "a": a}, zb), yb, C)

    if model == "attn" and recipe.attn_steps is not None:
        epochs, batch = recipe.attn_steps, None
    else:
        epochs, batch = recipe.epochs, min(recipe.batch, ztr.shape[0])
    opt = optax.chain(optax.add_decayed_weights(recipe.l2), optax.adam(recipe.lr))
    data = (jnp.asarray(ztr, jnp.float32), jnp.asarray(ytr, jnp.float32))
    return _StandardRun(W=params["W"], a=a, loss_fn=loss_fn, optimizer=opt, data=data, epochs=epochs,
                        batch=batch, seed=seed)


def train_model(ztr, ytr, C: int, recipe: TrainRecipe, seed: int, model: str = "relu"):
    """Train ``W`` (``ztr``: (n, d) inputs of the two-layer network, ``ytr``: (n, C) targets).

    2L-ReLU, and MLP-Attn when ``recipe.attn_steps`` is None: Adam, ``recipe.epochs`` epochs of
    mini-batches of ``recipe.batch`` (last batch kept). MLP-Attn otherwise: full-batch Adam for
    ``recipe.attn_steps`` steps. Initialisation and batch order from ``seed``. Returns
    ``(params, history)``."""
    run = _standard_run(ztr, ytr, C, recipe, seed, model)
    res = run.fit(log_every=max(1, run.epochs // 20))
    return run.params(res), res.history


def fit_record(params, history, ztr, ltr, zte, lte, C: int) -> tuple[dict, dict]:
    """What a training point of the influence experiments stores about a trained network
    ``params`` (:func:`train_model`, its ``history``), from its inputs ``ztr`` (n, d) / ``zte``
    (T, d) and labels ``ltr`` (n,) / ``lte`` (T,): arrays ``loss_curve`` and ``loss_epochs``
    (L,) float64, scalars ``train_loss`` (the last logged), ``train_acc`` and ``test_acc``."""
    out_tr = np.asarray(two_layer.apply_batch(params, jnp.asarray(ztr, jnp.float32)))
    out_te = np.asarray(two_layer.apply_batch(params, jnp.asarray(zte, jnp.float32)))
    arrays = {"loss_curve": np.asarray(history["loss"], np.float64),
              "loss_epochs": np.asarray(history["epoch"], np.float64)}
    return arrays, {"train_loss": float(history["loss"][-1]), "train_acc": accuracy(out_tr, ltr, C),
                    "test_acc": accuracy(out_te, lte, C)}


def adversarial_train(xtr, ytr, C: int, attend: bool, recipe: TrainRecipe, seed: int, *,
                      eps: float, pgd_steps: int, pgd_step_size: float):
    """PGD adversarial training of ``W`` with :func:`ntkbook.train.fit` (Adam, mini-batches of
    ``recipe.batch``, last batch kept, for both models: ``recipe.attn_steps`` must be None).

    The loss of a batch is the loss at its PGD version (``pgd_steps`` steps of ``pgd_step_size``
    in the ``eps``-ball), found at the current weights from a uniform random start drawn with the
    step's own key (``step_keys``); the gradient does not flow through the attack (Madry et al.).
    For MLP-Attn the perturbed batch attends over the *clean* training set. ``xtr``: (n, d) pixels,
    ``ytr``: (n, C) targets. Returns ``(params, history)`` with the mean adversarial batch loss per
    epoch."""
    from ntkbook.train import fit

    if recipe.attn_steps is not None:
        raise InputError("adversarial training uses mini-batches for both models: attn_steps must be None")
    x = jnp.asarray(xtr, jnp.float32)
    y = jnp.asarray(ytr, jnp.float32)
    params = two_layer.init_heads(jax.random.PRNGKey(seed), x.shape[1], recipe.width, C)
    a = params["a"]
    loss_b = context_loss(attend, C)

    def adversarial_loss(p, batch, key):
        xb, yb = batch
        frozen = jax.lax.stop_gradient({"W": p["W"], "a": a})
        # PGD on the batch (the fixed context is the clean training set)
        x0 = attacks.project(xb + jax.random.uniform(key, xb.shape, xb.dtype, -eps, eps), xb, eps)

        def body(_, xa):
            g = jax.grad(loss_b)(xa, frozen, yb, x)
            return attacks.project(xa + pgd_step_size * jnp.sign(g), xb, eps)

        xa = jax.lax.stop_gradient(jax.lax.fori_loop(0, pgd_steps, body, x0))
        return loss_b(xa, {"W": p["W"], "a": a}, yb, x)

    opt = optax.chain(optax.add_decayed_weights(recipe.l2), optax.adam(recipe.lr))
    res = fit(adversarial_loss, {"W": params["W"]}, opt, (x, y), epochs=recipe.epochs,
              batch_size=min(recipe.batch, x.shape[0]), seed=10_000 + seed, step_keys=True)
    h = res.history
    return {"W": res.params["W"], "a": a}, {"epoch": h["epoch"][1:], "adv_loss": h["loss"][1:]}


def robust_accuracy(params, xtr, ytr, labels, C: int, attend: bool, *, eps: float, steps: int,
                    step_size: float, key) -> float:
    """Accuracy on PGD versions of the training points (``steps`` steps of ``step_size`` in the
    ``eps``-ball from a random start drawn with ``key``), each attacked point attending over the
    clean training set."""
    p32 = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    x32 = jnp.asarray(xtr, jnp.float32)
    xa = attacks.pgd(context_loss(attend, C), x32, eps, args=(p32, jnp.asarray(ytr, jnp.float32), x32),
                     steps=steps, step_size=step_size, key=key)
    za = attention.inputs_jax(x32, xa, attend=attend)
    return accuracy(np.asarray(two_layer.apply_batch(p32, za)), labels, C)
