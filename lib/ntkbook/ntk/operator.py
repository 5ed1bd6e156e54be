"""The one matrix-free operator type of the engine: a symmetric kernel ``K`` given only as ``v -> K v``.

:class:`KernelOperator` is what :func:`ntkbook.ntk.eig.lanczos_topk` and
:func:`ntkbook.ntk.eig.check_symmetric` consume: a callable on flat vectors of length ``dim``
with a ``dtype`` (the dtype of the vectors in and out) and a ``shape`` ``(dim, dim)``.  The
engine's eNTK products (:func:`ntkbook.ntk.entk.entk_matvec`) return one; the Gemma layer
operator (:class:`ntkbook.gemma.operator.LayerOperator`) is a subclass that works on host (numpy)
vectors and carries what it was built from.

A subclass changes how an input vector is taken in by overriding :meth:`KernelOperator.prepare`;
the product itself is the function ``fn`` it was built with.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError

__all__ = ["KernelOperator", "check_finite"]


def check_finite(x, what: str) -> None:
    """Raise ``InputError`` if the (concrete, floating) array ``x`` holds NaN or inf; traced and
    integer arrays pass unchecked."""
    if isinstance(x, jax.core.Tracer) or not jnp.issubdtype(x.dtype, jnp.inexact):
        return
    bad = ~jnp.isfinite(x)
    if bool(jnp.any(bad)):
        first = np.unravel_index(int(jnp.argmax(bad.reshape(-1))), x.shape) if x.ndim else ()
        raise InputError(
            f"{what} holds {int(jnp.sum(bad))} non-finite value(s) (NaN or inf; the first at index "
            f"{tuple(int(i) for i in first)}); the eNTK of such input is meaningless. Check the "
            f"data or the training run that produced them."
        )


class KernelOperator:
    """A symmetric PSD kernel matrix ``K`` (``dim x dim``), matrix-free: ``op(v)`` is ``K v``.

    Attributes: ``dim`` (length of the vectors), ``dtype`` (of the vectors in and out),
    ``shape`` (``(dim, dim)``), ``num_products`` (products computed so far).
    ``op.matvec(v)`` is the same as ``op(v)``.
    """

    def __init__(self, fn: Callable, dim: int, dtype):
        self.fn = fn
        self.dim = int(dim)
        self.dtype = dtype
        self.num_products = 0

    @property
    def shape(self) -> tuple[int, int]:
        return (self.dim, self.dim)

    def prepare(self, v):
        """``v`` as a JAX vector of :attr:`dtype`, checked to be finite."""
        v = jnp.asarray(v, dtype=self.dtype)
        self.check_shape(v)
        check_finite(v, "the vector v of K v")
        return v

    def check_shape(self, v) -> None:
        """Raise ``InputError`` unless ``v`` has shape ``(dim,)``."""
        if v.shape != (self.dim,):
            raise InputError(f"expected a vector of shape ({self.dim},), got {v.shape}")

    def __call__(self, v):
        v = self.prepare(v)
        self.num_products += 1
        return self.fn(v)

    def matvec(self, v):
        """``K v`` (the same as calling the operator)."""
        return self(v)

    def __repr__(self):
        return f"{type(self).__name__}(dim={self.dim}, dtype={self.dtype})"
