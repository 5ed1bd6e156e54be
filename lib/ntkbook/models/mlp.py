r"""A fully connected ReLU network (multilayer perceptron) in NTK parameterisation.

With layer sizes ``(n_0, n_1, ..., n_L)`` and ``h^{(0)} = x``,

.. math:: h^{(\ell)} = \phi\Big(\frac{W^{(\ell)} h^{(\ell-1)}}{\sqrt{n_{\ell-1}}} + b^{(\ell)}\Big),
          \qquad W^{(\ell)}_{ij} \sim \mathcal N(0, 1), \quad b^{(\ell)} = 0 ,

with :math:`\phi = \mathrm{relu}` on the hidden layers and the identity on the last, so
``f(x) = h^{(L)}`` has ``C = n_L`` outputs. Each weight's derivative carries the factor
``1/sqrt(fan-in)``, the NTK parameterisation, in which the empirical NTK has a finite limit as the
hidden widths grow. The eNTK chapter uses it to demonstrate the reductions and the cost of a
matrix-free product (:mod:`ntkbook.experiments.entk_cost`).

Parameters are a dict ``{"dense1": {"w": (n_1, n_0), "b": (n_1,)}, ..., "denseL": {...}}``, one
entry per layer, so :func:`ntkbook.ntk.entk.default_layers` groups them by layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ntkbook.errors import InputError

__all__ = ["PRECISION", "init", "apply", "layer_names"]

#: matmul precision of the forward pass (full float32 on accelerators that would otherwise round)
PRECISION = jax.lax.Precision.HIGHEST


def layer_names(num_layers: int) -> list[str]:
    """``["dense1", ..., "dense<num_layers>"]``: the keys of the parameters, input layer first."""
    return [f"dense{l}" for l in range(1, num_layers + 1)]


def init(key, sizes, dtype=float):
    """Parameters of the network with layer sizes ``sizes = (n_0, ..., n_L)``: weights ``w``
    ``(n_l, n_{l-1})`` drawn ``N(0, 1)``, one key per layer (``jax.random.split(key, L)``), and
    zero biases ``b`` ``(n_l,)``. ``dtype``: ``float`` (the default) is JAX's default float, float64
    under ``jax_enable_x64``."""
    sizes = tuple(sizes)
    if len(sizes) < 2 or any(not isinstance(n, int) or n < 1 for n in sizes):
        raise InputError(f"an MLP needs at least two positive integer layer sizes (input and output), "
                         f"got {sizes}")
    keys = jax.random.split(key, len(sizes) - 1)
    return {name: {"w": jax.random.normal(k, (n_out, n_in), dtype), "b": jnp.zeros(n_out, dtype)}
            for name, k, n_in, n_out in zip(layer_names(len(sizes) - 1), keys, sizes[:-1], sizes[1:])}


def apply(params, x):
    """The outputs ``(C,)`` for ONE input ``x`` ``(n_0,)`` (the per-example convention of
    :mod:`ntkbook.ntk.entk`): each layer divides by the square root of its fan-in, ReLU between
    layers, none after the last."""
    names = layer_names(len(params))
    h = x
    for i, name in enumerate(names):
        layer = params[name]
        h = jnp.matmul(layer["w"], h, precision=PRECISION) / jnp.sqrt(h.shape[0]) + layer["b"]
        if i < len(names) - 1:
            h = jax.nn.relu(h)
    return h
