r"""Analytic infinite-width kernels of the two-layer ReLU network (arc-cosine kernels).

The network, in NTK parameterisation, on one input :math:`x \in \mathbb{R}^d` (any norm):

.. math:: f(x) = \frac{1}{\sqrt m} \sum_{r=1}^m a_r\, \mathrm{relu}(w_r \cdot x), \qquad
          w_r \sim \mathcal N(0, I_d), \quad a_r \sim \mathrm{Unif}\{\pm 1\} \ (\text{or } \mathcal N(0,1)).

Write :math:`u = \|x\|`, :math:`u' = \|x'\|`, :math:`\cos\theta = x\cdot x' / (u u')` (clipped to
:math:`[-1, 1]`; :math:`\theta = 0` when an input is zero).  For :math:`w \sim \mathcal N(0, I)` the
pair :math:`(w\cdot x, w\cdot x')` is Gaussian with covariance :math:`\begin{pmatrix}u^2 & x\cdot x'\\
x\cdot x' & u'^2\end{pmatrix}`, which gives the arc-cosine kernels of degree 0 and 1 (Cho & Saul 2009):

.. math:: \kappa_0(x, x') = \mathbb E[\mathbf 1\{w\cdot x>0\}\mathbf 1\{w\cdot x'>0\}]
                          = \frac{\pi - \theta}{2\pi},
.. math:: \kappa_1(x, x') = \mathbb E[\mathrm{relu}(w\cdot x)\,\mathrm{relu}(w\cdot x')]
                          = \frac{u u'}{2\pi}\big(\sin\theta + (\pi - \theta)\cos\theta\big).

(Check: :math:`\kappa_0(x,x) = 1/2`, :math:`\kappa_1(x,x) = \|x\|^2/2`.)  As :math:`m \to \infty`,
by the law of large numbers (:math:`a_r^2 = 1`, or :math:`\mathbb E a_r^2 = 1`):

* NNGP (covariance of the output at initialisation): :math:`\Sigma(x,x') = \kappa_1(x,x')`.
* NTK, only the first layer :math:`W` trained (:math:`a` fixed; the setting of Du et al. 2019 and of
  the MLP-Attn paper): :math:`\partial f/\partial w_r = a_r \mathbf 1\{w_r\cdot x>0\}\, x/\sqrt m`, so

  .. math:: \Theta_W(x,x') = (x\cdot x')\,\kappa_0(x,x') = (x\cdot x')\,\frac{\pi-\theta}{2\pi}.

* NTK, both layers trained: :math:`\partial f/\partial a_r = \mathrm{relu}(w_r\cdot x)/\sqrt m` adds
  the NNGP: :math:`\Theta_{\mathrm{all}} = \Theta_W + \Sigma`.

No factor of 2 (as in He-initialised conventions) and no bias terms are included.  A zero input
gives a zero row (ReLU's derivative at 0 is taken as 0, as in ``jax.nn.relu``).  Near
:math:`\theta = 0` the angle from ``arccos`` carries an error of about :math:`\sqrt{\epsilon}`
(the error of :math:`\Theta_W` is first order in it, that of :math:`\Sigma` second order), so
nearly parallel distinct inputs have relative errors up to ~1e-8 in float64; with ``x2=None`` the
diagonal uses :math:`\theta = 0` exactly.

The finite-width network itself, its initialisations and its closed-form empirical NTK are in
:mod:`ntkbook.models.two_layer`: its empirical NTK with ``param_filter="W"`` converges to
:func:`relu_ntk` with ``trainable="W"``, and over all parameters to ``trainable="all"``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ntkbook.errors import InputError

__all__ = ["relu_nngp", "relu_ntk"]


def _geometry(x1, x2):
    x1 = jnp.asarray(x1)
    same = x2 is None
    x2 = x1 if same else jnp.asarray(x2)
    if x1.ndim != 2 or x2.ndim != 2:
        raise InputError(f"inputs must be matrices (N, d), got shapes {x1.shape} and {x2.shape}")
    if x1.shape[1] != x2.shape[1]:
        raise InputError(f"x1 and x2 have mismatched feature dimensions: {x1.shape[1]} vs {x2.shape[1]}")
    dot = jnp.matmul(x1, x2.T, precision=jax.lax.Precision.HIGHEST)
    n1 = jnp.linalg.norm(x1, axis=1)
    n2 = jnp.linalg.norm(x2, axis=1)
    nn = n1[:, None] * n2[None, :]
    safe = jnp.where(nn > 0, nn, 1.0)
    cos = jnp.where(nn > 0, jnp.clip(dot / safe, -1.0, 1.0), 1.0)
    if same:  # exact theta = 0 on the diagonal (arccos is ill-conditioned near 1)
        cos = jnp.where(jnp.eye(cos.shape[0], dtype=bool), 1.0, cos)
    theta = jnp.arccos(cos)
    return dot, nn, cos, theta


def relu_nngp(x1, x2=None):
    r"""NNGP kernel :math:`\Sigma = \frac{\|x\|\|x'\|}{2\pi}(\sin\theta + (\pi-\theta)\cos\theta)`,
    shape ``(N1, N2)``; see the module docstring."""
    _, nn, cos, theta = _geometry(x1, x2)
    return nn * (jnp.sin(theta) + (jnp.pi - theta) * cos) / (2 * jnp.pi)


def relu_ntk(x1, x2=None, *, trainable: str = "W"):
    r"""Infinite-width NTK, shape ``(N1, N2)``.

    ``trainable="W"``: :math:`\Theta_W = (x\cdot x')(\pi - \theta)/(2\pi)` (first layer trained,
    :math:`a` fixed).  ``trainable="all"``: :math:`\Theta_W + \Sigma` (:func:`relu_nngp`).
    """
    if trainable not in ("W", "all"):
        raise InputError(f"trainable must be 'W' or 'all', got {trainable!r}")
    dot, nn, cos, theta = _geometry(x1, x2)
    k = dot * (jnp.pi - theta) / (2 * jnp.pi)
    if trainable == "all":
        k = k + nn * (jnp.sin(theta) + (jnp.pi - theta) * cos) / (2 * jnp.pi)
    return k
