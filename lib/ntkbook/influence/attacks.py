r"""L-infinity adversarial perturbations of inputs in the box [0, 1]: FGSM, PGD and MIM.

All three maximise a scalar ``loss_fn(x, *args)`` over a batch ``x`` of shape ``(N, D)`` (one
example per row) subject to

.. math:: \|x' - x\|_\infty \le \varepsilon, \qquad 0 \le x' \le 1,

and act only on the rows selected by ``mask`` (a boolean ``(N,)``; default: every row).  The loss
may couple the rows (a transductive model whose output at one example depends on all of them, like
the linear attention of :mod:`ntkbook.models.attention`): the gradient is that of the whole batch
loss, and the masked rows are perturbed jointly.

* **FGSM** (Goodfellow et al. 2015): one step ``x' = x + eps * sign(grad)``.
* **PGD** (Madry et al. 2018): a uniform random start in the ball, then ``steps`` steps
  ``x' <- Proj(x' + step_size * sign(grad))``, projecting onto the ball and the box.
* **MIM** (Dong et al. 2018): momentum ``g <- decay * g + grad / ||grad||_1`` (the L1 norm taken
  per row), then ``x' <- Proj(x' + step_size * sign(g))``; ``steps`` steps from ``x``.

``loss_fn`` must be a function that stays the same object between calls (a module-level function,
not a fresh lambda), so that its compiled attack is reused; data it needs (parameters, labels) go
through ``args``.  The attacks are jitted (``jax.lax.fori_loop`` over the steps) and run in the
dtype of ``x``.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from ntkbook.errors import InputError

__all__ = ["fgsm", "pgd", "mim", "project", "random_sign", "ATTACKS"]


def _check(x, eps, mask):
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise InputError(f"x must be a batch of shape (N, D), got shape {x.shape}")
    if not (eps >= 0):
        raise InputError(f"eps must be >= 0, got {eps}")
    if bool(jnp.any(x < 0)) or bool(jnp.any(x > 1)):
        raise InputError("x must lie in the box [0, 1] (pixels scaled to [0, 1])")
    if mask is None:
        mask = jnp.ones(x.shape[0], bool)
    mask = jnp.asarray(mask, bool)
    if mask.shape != (x.shape[0],):
        raise InputError(f"mask must have shape ({x.shape[0]},), got {mask.shape}")
    return x, mask


def project(x_adv, x, eps):
    """Project ``x_adv`` onto ``{||x' - x||_inf <= eps} ∩ [0, 1]^D`` (elementwise clipping)."""
    return jnp.clip(jnp.clip(x_adv, x - eps, x + eps), 0.0, 1.0)


def _grad(loss_fn):
    return jax.grad(lambda x, *args: loss_fn(x, *args))


@functools.partial(jax.jit, static_argnums=0)
def _fgsm(loss_fn, x, eps, mask, args):
    g = _grad(loss_fn)(x, *args)
    step = eps * jnp.sign(g) * mask[:, None]
    return project(x + step, x, eps)


@functools.partial(jax.jit, static_argnums=(0, 6))
def _pgd(loss_fn, x, eps, start_eps, step_size, mask, steps, key, args):
    m = mask[:, None].astype(x.dtype)
    x0 = project(x + m * start_eps * jax.random.uniform(key, x.shape, x.dtype, -1.0, 1.0), x, eps)

    def body(_, xa):
        g = _grad(loss_fn)(xa, *args)
        return project(xa + m * step_size * jnp.sign(g), x, eps)

    return jax.lax.fori_loop(0, steps, body, x0)


@functools.partial(jax.jit, static_argnums=(0, 5))
def _mim(loss_fn, x, eps, step_size, mask, steps, decay, args):
    m = mask[:, None].astype(x.dtype)

    def body(_, carry):
        xa, mom = carry
        g = _grad(loss_fn)(xa, *args)
        l1 = jnp.sum(jnp.abs(g), axis=1, keepdims=True)
        mom = decay * mom + g / jnp.where(l1 > 0, l1, 1.0)
        return project(xa + m * step_size * jnp.sign(mom), x, eps), mom

    xa, _ = jax.lax.fori_loop(0, steps, body, (x, jnp.zeros_like(x)))
    return xa


def fgsm(loss_fn: Callable, x, eps: float, *, args: tuple = (), mask=None) -> jax.Array:
    """Fast gradient sign method: ``(N, D)`` adversarial batch, one gradient."""
    x, mask = _check(x, eps, mask)
    return _fgsm(loss_fn, x, jnp.asarray(eps, x.dtype), mask, tuple(args))


def pgd(loss_fn: Callable, x, eps: float, *, args: tuple = (), mask=None, steps: int = 40,
        step_size: float = 0.01, key=None, random_start: bool = True) -> jax.Array:
    """Projected gradient (sign) ascent from a uniform random start in the ball (``key``; default
    ``PRNGKey(0)``), ``steps`` steps of ``step_size``.  Note that ``steps * step_size`` must reach
    ``eps`` for the iterate to be able to reach the ball's faces from the centre."""
    x, mask = _check(x, eps, mask)
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    key = jax.random.PRNGKey(0) if key is None else key
    e = jnp.asarray(eps, x.dtype)
    start_eps = e if random_start else jnp.asarray(0.0, x.dtype)
    # the random start is drawn in the ball of radius start_eps; the projection always uses eps
    return _pgd(loss_fn, x, e, start_eps, jnp.asarray(step_size, x.dtype), mask, int(steps), key,
                tuple(args))


def mim(loss_fn: Callable, x, eps: float, *, args: tuple = (), mask=None, steps: int = 10,
        step_size: float | None = None, decay: float = 1.0) -> jax.Array:
    """Momentum iterative method: ``steps`` steps of ``step_size`` (default ``eps / steps``) along the
    sign of the L1-normalised gradient accumulated with momentum ``decay``."""
    x, mask = _check(x, eps, mask)
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    step_size = eps / steps if step_size is None else step_size
    return _mim(loss_fn, x, jnp.asarray(eps, x.dtype), jnp.asarray(step_size, x.dtype), mask,
                int(steps), jnp.asarray(decay, x.dtype), tuple(args))


def random_sign(x, eps: float, key, *, mask=None) -> jax.Array:
    """The null model: ``x + eps * s`` with independent uniform random signs ``s`` on the masked rows,
    clipped to the box.  Before clipping it has exactly the L-inf and L2 norm of an FGSM step."""
    x, mask = _check(x, eps, mask)
    s = jnp.where(jax.random.bernoulli(key, 0.5, x.shape), 1.0, -1.0).astype(x.dtype)
    return project(x + eps * s * mask[:, None], x, eps)


#: name -> attack, all called as ``attack(loss_fn, x, eps, args=..., mask=..., **options)``
ATTACKS = {"fgsm": fgsm, "pgd": pgd, "mim": mim}
