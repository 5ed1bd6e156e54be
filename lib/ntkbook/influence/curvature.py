r"""The curvature of the training loss in ``W``: the Hessian and its Gauss-Newton term, which agree.

The training loss of the influence networks (:func:`ntkbook.influence.losses.data_loss`, ``W``
trained, heads ``a`` fixed) is :math:`L(W) = \frac1n\sum_i \ell(f(z_i; W), y_i)`, and by the chain rule

.. math:: \nabla^2_W L = J^\top S\,J + \frac1n\sum_{i,c}\frac{\partial\ell_i}{\partial f_c}\,
          \nabla^2_W f_c(z_i), \qquad S = \frac1n\,\mathrm{blockdiag}_i\,\nabla^2_f\ell_i ,

with :math:`J` the ``(nC, md)`` Jacobian of the outputs. The network
:math:`f_c = m^{-1/2}\sum_r a_{rc}\,\mathrm{relu}(w_r\cdot z)` is linear in ``W`` on each region of
fixed activation pattern, so :math:`\nabla^2_W f_c = 0` off the kinks :math:`w_r\cdot z_i = 0` (a set
of measure zero, which JAX's ``relu`` derivative also treats as flat), and the Hessian IS its
Gauss-Newton term, :math:`H = J^\top S J`. The non-zero eigenvalues of :math:`(S^{1/2}J)^\top
(S^{1/2}J)` and :math:`(S^{1/2}J)(S^{1/2}J)^\top` coincide, so with the eNTK :math:`K = J J^\top`

.. math:: \lambda_{\max}(H) = \lambda_{\max}(S^{1/2} K S^{1/2}) .

- squared error (``C = 1``): :math:`\ell = (f - y)^2`, :math:`S = \frac2n I`, so
  :math:`\lambda_{\max}(H) = 2\lambda_{\max}(K)/n`, whatever the residuals;
- cross-entropy: :math:`\nabla^2_f\ell_i = \mathrm{diag}(p_i) - p_i p_i^\top` (``p_i`` the softmax),
  which vanishes as ``p_i`` approaches a one-hot vector: the sharpness falls with the loss even
  at a fixed kernel.

:func:`hessian_top` computes the left side (Lanczos on Hessian-vector products,
:func:`ntkbook.influence.landscape.top_hessian_eigenvalue`), :func:`gauss_newton_top` the right
(Lanczos on :math:`v \mapsto S^{1/2} K S^{1/2} v`, ``K`` the matrix-free eNTK of
:func:`ntkbook.ntk.entk.entk_matvec`); both in float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.influence.landscape import top_hessian_eigenvalue
from ntkbook.influence.losses import data_loss
from ntkbook.models import two_layer
from ntkbook.ntk import eig, entk

__all__ = ["output_curvature", "curvature_sqrt", "training_loss", "hessian_top", "gauss_newton_top"]


def _f64(*arrays):
    """Each array (or dict of arrays) as float64 JAX arrays (call inside ``jax.enable_x64``)."""
    def cast(a):
        if isinstance(a, dict):
            return {k: jnp.asarray(np.asarray(v), jnp.float64) for k, v in a.items()}
        return jnp.asarray(np.asarray(a), jnp.float64)

    return tuple(cast(a) for a in arrays)


def output_curvature(out, C: int):
    r"""The per-example blocks of :math:`S`, the Hessian of ``data_loss`` in the outputs:
    ``(n, C, C)`` from the outputs ``out`` ``(n, C)``; :math:`\frac2n` for squared error (``C = 1``),
    :math:`\frac1n(\mathrm{diag}(p_i) - p_i p_i^\top)` for cross-entropy (``C > 1``)."""
    out = jnp.asarray(out)
    n = out.shape[0]
    if C == 1:
        return jnp.full((n, 1, 1), 2.0 / n, out.dtype)
    p = jax.nn.softmax(out, axis=1)
    return (jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]) / n


def curvature_sqrt(blocks):
    """The symmetric positive semi-definite square root of each ``(C, C)`` block of ``blocks``
    ``(n, C, C)`` (round-off negatives clipped to 0)."""
    w, V = jnp.linalg.eigh(blocks)
    return jnp.einsum("nab,nb,ncb->nac", V, jnp.sqrt(jnp.clip(w, 0.0, None)), V)


def training_loss(params, z, y, C: int) -> float:
    """``data_loss`` of the network ``params`` (``{"W", "a"}``) on ``z`` (n, d), ``y`` (n, C), in
    float64."""
    with jax.enable_x64(True):
        p, z, y = _f64(params, z, y)
        return float(data_loss(two_layer.apply_batch(p, z), y, C))


def hessian_top(params, z, y, C: int, *, num_steps: int, seed: int):
    """``(lambda, residual)``: the top eigenvalue of the Hessian of the training loss in ``W``
    (float64 Lanczos, ``num_steps`` products from the start vector of ``seed``, heads frozen) and
    its Ritz residual estimate, as :func:`ntkbook.influence.landscape.measure` computes it."""
    with jax.enable_x64(True):
        p, z, y = _f64(params, z, y)
        res = top_hessian_eigenvalue(lambda q: data_loss(two_layer.apply_batch(q, z), y, C), p,
                                     trainable=["W"], k=1, num_steps=num_steps, seed=seed)
        return float(res.eigenvalues[0]), float(res.residual_norms[0])


def _one_example(params, x):
    """The network on ONE input ``(d,)``: outputs ``(C,)`` (the convention of ``ntkbook.ntk.entk``)."""
    return two_layer.apply_batch(params, x[None])[0]


def gauss_newton_top(params, z, C: int, *, num_steps: int, seed: int):
    r"""``(lambda, residual)``: the top eigenvalue of :math:`S^{1/2} K S^{1/2}` (``nC`` x ``nC``, the
    module docstring) and its Ritz residual estimate: float64 Lanczos, ``num_steps`` products
    from the start vector of ``seed``, ``K`` the eNTK in ``W`` (``ntkbook.ntk.entk.entk_matvec``,
    flattened with index ``i C + c``). Neither loss's curvature in the outputs depends on the
    targets, so none are taken."""
    with jax.enable_x64(True):
        p, z = _f64(params, z)
        n = z.shape[0]
        R = curvature_sqrt(output_curvature(two_layer.apply_batch(p, z).reshape(n, C), C))
        K = entk.entk_matvec(_one_example, p, z, reduction="flat", param_filter=r"\['W'\]")

        def product(v):
            u = jnp.einsum("nab,nb->na", R, jnp.asarray(v).reshape(n, C)).reshape(-1)
            return jnp.einsum("nab,nb->na", R, K(u).reshape(n, C)).reshape(-1)

        product.dtype = jnp.float64
        res = eig.lanczos_topk(product, n * C, 1, num_steps=min(num_steps, n * C), seed=seed)
        return float(res.eigenvalues[0]), float(res.residual_norms[0])
