"""The losses of the influence experiments, module level so that compiled attacks are reused.

- :func:`data_loss`: a task's training objective on network outputs (cross-entropy or MSE);
- :func:`attack_loss`: the frozen network's mean training loss on a perturbed training set, every
  row attending over the perturbed set itself (what the attacks on the training set maximise);
- :func:`context_loss`: the loss of a batch attending over a fixed context, the clean training set
  (adversarial training and robust accuracy).

``attack_loss`` and ``context_loss`` return the same function object for the same arguments
(``functools.lru_cache``), as :mod:`ntkbook.influence.attacks` needs.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import optax

from ntkbook.models import attention, two_layer

__all__ = ["data_loss", "attack_loss", "context_loss"]


def data_loss(out, y, C: int):
    """Mean cross-entropy (``C > 1``, ``y`` one-hot) or mean squared error (``C = 1``, ``y = +-1``)."""
    if C == 1:
        return jnp.mean((out[:, 0] - y[:, 0]) ** 2)
    return jnp.mean(optax.softmax_cross_entropy(out, y))


def _attack_loss(x, params, y, *, attend: bool, C: int):
    """The frozen network's mean training loss on the (perturbed) training set ``x``; for MLP-Attn
    every row attends over ``x`` itself (the perturbed set)."""
    z = attention.inputs_jax(x, x, attend=attend)
    return data_loss(two_layer.apply_batch(params, z), y, C)


@functools.lru_cache(maxsize=None)
def attack_loss(attend: bool, C: int):
    """The loss ``(x, params, y) -> scalar`` of one model and head count on a perturbed training set."""
    return functools.partial(_attack_loss, attend=attend, C=C)


def _context_loss(x, params, y, ctx, *, attend: bool, C: int):
    """Loss of a batch ``x`` (raw pixels) attending over the fixed context ``ctx`` (MLP-Attn)."""
    z = attention.inputs_jax(ctx, x, attend=attend)
    return data_loss(two_layer.apply_batch(params, z), y, C)


@functools.lru_cache(maxsize=None)
def context_loss(attend: bool, C: int):
    """The loss ``(x, params, y, ctx) -> scalar`` of a batch attending over the context ``ctx``."""
    return functools.partial(_context_loss, attend=attend, C=C)
