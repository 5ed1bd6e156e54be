r"""Loss landscapes around trained weights: filter-normalised slices and the sharpest curvature.

Filter normalisation (Li et al. 2018): a random direction ``D`` (same pytree as the parameters,
Gaussian entries) is rescaled filter by filter so that each filter of ``D`` has the norm of the
corresponding filter of the weights ``theta``,

.. math:: D_{r} \leftarrow \frac{D_r}{\|D_r\|}\,\|\theta_r\| ,

where a *filter* is a row of a 2-D weight matrix (one hidden unit's incoming weights ``w_r``) and a
whole vector for 1-D leaves.  This makes slices of networks whose weights have different scales
comparable.  A 1-D slice is ``t -> L(theta + t D)``, a 2-D slice ``(s, t) -> L(theta + s D1 + t D2)``.

Sharpness is the top eigenvalue of the Hessian of the loss, found by Lanczos
(:func:`ntkbook.ntk.eig.lanczos_topk`) on Hessian-vector products (:func:`ntkbook.ntk.eig.hvp_operator`),
never forming the Hessian.  ``frozen`` leaves (e.g. fixed output heads) are excluded from both.

:func:`measure` applies them to a trained network of the influence experiments (the training loss
of ``W``, heads frozen, in float64), with the sizes of a :class:`LandscapeSettings`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence.losses import data_loss
from ntkbook.models import two_layer
from ntkbook.ntk import eig

__all__ = ["filter_normalized_direction", "slice_1d", "slice_2d", "top_hessian_eigenvalue",
           "LandscapeSettings", "measure"]


def _filter_norms(leaf):
    if leaf.ndim >= 2:
        return jnp.sqrt(jnp.sum(leaf.reshape(leaf.shape[0], -1) ** 2, axis=1)).reshape(
            (leaf.shape[0],) + (1,) * (leaf.ndim - 1))
    return jnp.sqrt(jnp.sum(leaf**2))


def filter_normalized_direction(params, key, *, frozen: Sequence[str] = ()):
    """A random direction (same structure as ``params``, a dict of arrays) whose filters have the
    norms of ``params``' filters; leaves named in ``frozen`` get a zero direction."""
    if not isinstance(params, dict):
        raise InputError("params must be a dict of arrays")
    out = {}
    keys = jax.random.split(key, len(params))
    for k, name in zip(keys, sorted(params)):
        leaf = jnp.asarray(params[name])
        if name in frozen:
            out[name] = jnp.zeros_like(leaf)
            continue
        d = jax.random.normal(k, leaf.shape, leaf.dtype)
        dn = _filter_norms(d)
        out[name] = d / jnp.where(dn > 0, dn, 1.0) * _filter_norms(leaf)
    return out


def _shift(params, coeffs, directions):
    return {k: params[k] + sum(c * d[k] for c, d in zip(coeffs, directions)) for k in params}


def slice_1d(loss_fn: Callable, params, direction, ts) -> np.ndarray:
    """``L(params + t * direction)`` for each ``t`` in ``ts``: ``(len(ts),)``."""
    f = jax.jit(lambda t: loss_fn(_shift(params, (t,), (direction,))))
    return np.asarray([float(f(jnp.asarray(t, jnp.asarray(params[next(iter(params))]).dtype))) for t in ts])


def slice_2d(loss_fn: Callable, params, d1, d2, ss, ts) -> np.ndarray:
    """``L(params + s d1 + t d2)`` on the grid ``ss x ts``: ``(len(ss), len(ts))``."""
    dt = jnp.asarray(params[next(iter(params))]).dtype
    f = jax.jit(lambda s, t: loss_fn(_shift(params, (s, t), (d1, d2))))
    return np.asarray([[float(f(jnp.asarray(s, dt), jnp.asarray(t, dt))) for t in ts] for s in ss])


def top_hessian_eigenvalue(loss_fn: Callable, params, *, trainable: Sequence[str] | None = None,
                           k: int = 1, num_steps: int = 20, seed: int = 0):
    """Top-``k`` Hessian eigenvalues of ``loss_fn(params)`` with respect to the leaves ``trainable``
    (default: all), by Lanczos on Hessian-vector products.  Returns the
    :class:`ntkbook.ntk.eig.EigResult` (eigenvalues descending, Ritz residual estimates)."""
    names = sorted(params) if trainable is None else list(trainable)
    missing = [n for n in names if n not in params]
    if missing:
        raise InputError(f"trainable names {missing} are not in params ({sorted(params)})")
    fixed = {k_: v for k_, v in params.items() if k_ not in names}
    sub = {n: params[n] for n in names}

    def loss_sub(p):
        return loss_fn({**fixed, **p})

    matvec, dim, _ = eig.hvp_operator(loss_sub, sub)
    dt = matvec.dtype
    rtol_check = jnp.finfo(dt).bits >= 64
    return eig.lanczos_topk(matvec, dim, k, num_steps=min(num_steps, dim), seed=seed,
                             check=bool(rtol_check))


@dataclasses.dataclass(frozen=True)
class LandscapeSettings:
    """Sizes of the landscape measurement of a trained network."""

    hessian_steps: int  # Lanczos steps for the top Hessian eigenvalue
    radius: float  # slices span [-radius, radius] along each filter-normalised direction
    points: int  # points of a 1-D slice
    grid: int  # points per side of a 2-D slice


def measure(params, ztr, ytr, C: int, settings: LandscapeSettings, seed: int, *, do_1d: bool,
            do_2d: bool):
    """The training loss of a trained two-layer network around its weights, in float64: the top
    Hessian eigenvalue with respect to ``W`` (Lanczos seed ``seed``) and, optionally, 1-D/2-D
    filter-normalised slices (directions from ``500 + seed``, heads frozen). ``ztr``: (n, d)
    network inputs, ``ytr``: (n, C) targets. Returns ``(arrays, scalars)``."""
    out_a, out_s = {}, {}
    with jax.enable_x64(True):
        p64 = {k: jnp.asarray(np.asarray(v), jnp.float64) for k, v in params.items()}
        z, y = jnp.asarray(ztr, jnp.float64), jnp.asarray(ytr, jnp.float64)

        def loss(p):
            return data_loss(two_layer.apply_batch(p, z), y, C)

        t0 = time.perf_counter()
        res = top_hessian_eigenvalue(loss, p64, trainable=["W"], k=1,
                                     num_steps=settings.hessian_steps, seed=seed)
        out_s["hessian_top"] = float(res.eigenvalues[0])
        out_s["hessian_resid"] = float(res.residual_norms[0])
        out_s["hessian_seconds"] = time.perf_counter() - t0
        out_s["train_loss_data"] = float(loss(p64))
        r = settings.radius
        key = jax.random.PRNGKey(500 + seed)
        if do_1d:
            d1 = filter_normalized_direction(p64, key, frozen=("a",))
            ts = np.linspace(-r, r, settings.points)
            out_a["slice1d"] = slice_1d(loss, p64, d1, ts)
        if do_2d:
            k1, k2 = jax.random.split(jax.random.fold_in(key, 1))
            d1 = filter_normalized_direction(p64, k1, frozen=("a",))
            d2 = filter_normalized_direction(p64, k2, frozen=("a",))
            g = np.linspace(-r, r, settings.grid)
            out_a["slice2d"] = slice_2d(loss, p64, d1, d2, g, g)
    return out_a, out_s
