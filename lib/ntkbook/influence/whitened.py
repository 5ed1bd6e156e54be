r"""The influence protocol with a fixed whitening inside the model (:mod:`ntkbook.influence.whitening`).

The model is pixels ``x`` in [0, 1] -> ``z = (x - mu) P`` (fitted once on the clean training set,
then frozen) -> for MLP-Attn linear attention over the whitened (possibly perturbed) training set
-> rows l2-normalised -> the two-layer ReLU network. Everything an experiment measures goes
through the same code as on raw pixels (:mod:`ntkbook.influence.interventions`,
:mod:`ntkbook.influence.attacks`), with the whitening put in front:

- :func:`inputs`: the network inputs of a training and a test set;
- :func:`influences`: :func:`ntkbook.influence.interventions.influences` on the whitened sets;
- :func:`attack_loss` / :func:`run_attack`: the frozen network's mean training loss as a function
  of the *pixels* of the training set, and the attacks (FGSM, PGD, MIM) that maximise it inside the
  L-infinity ball of radius ``eps`` around the clean pixels and the box [0, 1], as
  :func:`ntkbook.influence.interventions.run_attack` runs them (float32 attack, ball and box
  enforced again in float64), on every training point jointly.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence import attacks, interventions
from ntkbook.influence.losses import data_loss
from ntkbook.influence.whitening import Whitening, apply, apply_jax
from ntkbook.models import attention, two_layer

__all__ = ["inputs", "influences", "attack_loss", "loss", "run_attack"]


def inputs(whitening: Whitening, xtr, xte, *, attend: bool):
    """``(z_train, z_test)``: the network inputs of training and test pixels (whitened, attention
    over the whitened training set when ``attend``, rows normalised), float64."""
    return attention.transform(apply(whitening, xtr), apply(whitening, xte), attend=attend, normalize="row")


def influences(params, whitening: Whitening, xtr, ytr, xte, yte, attend: bool, lams):
    """Influence vectors ``(n,)`` (one per ridge of ``lams``) of the training pixels ``xtr`` and the
    KRR test predictions for the first ridge: :func:`ntkbook.influence.interventions.influences`
    on the whitened sets."""
    return interventions.influences(params, apply(whitening, xtr), ytr, apply(whitening, xte), yte,
                                    attend, lams)


def _attack_loss(x, params, y, mean, matrix, *, attend: bool, C: int):
    """The frozen network's mean training loss on the (perturbed) training pixels ``x``, whitened by
    the fixed ``mean`` and ``matrix``; for MLP-Attn every row attends over the whitened ``x``."""
    z = apply_jax(mean, matrix, x)
    return data_loss(two_layer.apply_batch(params, attention.inputs_jax(z, z, attend=attend)), y, C)


@functools.lru_cache(maxsize=None)
def attack_loss(attend: bool, C: int):
    """The loss ``(x, params, y, mean, matrix) -> scalar`` of one model and head count (the same
    object for the same arguments, as :mod:`ntkbook.influence.attacks` needs)."""
    return functools.partial(_attack_loss, attend=attend, C=C)


def _args(params, y, whitening: Whitening) -> tuple:
    """The float32 arguments of :func:`attack_loss` after ``x``."""
    p32 = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    return (p32, jnp.asarray(y, jnp.float32), jnp.asarray(whitening.mean, jnp.float32),
            jnp.asarray(whitening.matrix, jnp.float32))


def loss(params, whitening: Whitening, x, y, *, attend: bool, C: int) -> float:
    """The frozen network's mean training loss on training pixels ``x``, in float32 as
    :func:`run_attack` measures it."""
    return float(attack_loss(attend, C)(jnp.asarray(x, jnp.float32), *_args(params, y, whitening)))


def run_attack(name: str, params, x, y, attend: bool, C: int, eps: float, whitening: Whitening,
               settings: interventions.EvalSettings, key):
    """Attack ``name`` (``fgsm``, ``pgd``, ``mim``) of radius ``eps`` on every row of the training
    pixels ``x``, maximising :func:`attack_loss` (steps from ``settings``, PGD's random start from
    ``key``). Returns ``(x_attacked, measures)``: float64, inside the ball and the box exactly; the
    loss before and after, the largest pixel change and the mean L2 norm of a row's change."""
    fn = attack_loss(attend, C)
    args = _args(params, y, whitening)
    x32 = jnp.asarray(x, jnp.float32)
    if name == "fgsm":
        xa = attacks.fgsm(fn, x32, eps, args=args)
    elif name == "pgd":
        xa = attacks.pgd(fn, x32, eps, args=args, steps=settings.pgd_steps,
                         step_size=settings.pgd_step_size, key=key)
    elif name == "mim":
        if settings.mim_steps is None or settings.mim_decay is None:
            raise InputError("MIM needs mim_steps and mim_decay in the settings")
        xa = attacks.mim(fn, x32, eps, args=args, steps=settings.mim_steps, decay=settings.mim_decay)
    else:
        raise InputError(f"unknown attack {name!r}; choose from {sorted(attacks.ATTACKS)}")
    x = np.asarray(x, np.float64)
    xa = np.clip(np.clip(np.asarray(xa, np.float64), x - eps, x + eps), 0.0, 1.0)
    delta = xa - x
    return xa, {"loss_before": float(fn(x32, *args)),
                "loss_after": float(fn(jnp.asarray(xa, jnp.float32), *args)),
                "linf": float(np.abs(delta).max()),
                "l2_mean": float(np.mean(np.linalg.norm(delta, axis=1)))}
