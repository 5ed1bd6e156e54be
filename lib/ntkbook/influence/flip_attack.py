r"""A worst-case influence attack: projected descent on the flip objective itself (beyond Paper A).

FGSM, PGD and MIM (:mod:`ntkbook.influence.attacks`) maximise the frozen network's training loss;
a flip they cause is a side effect. This attack aims at the flips. With the network frozen, the
influence of every training point is a differentiable function of the (perturbed) training set
:math:`X'` (``n x D`` pixels), through

1. the input map :math:`z(\cdot)` (row-normalised pixels for 2L-ReLU; for MLP-Attn the linear
   attention :math:`x X'^\top X'` over the *perturbed* training set, for training and test points
   alike; :func:`ntkbook.models.attention.inputs_jax`),
2. the class-diagonal eNTK :math:`K = (Z Z'^\top)\odot(S S'^\top)/m`,
   :math:`S = \mathbf 1[Z W^\top > 0]` (the closed form of
   :func:`ntkbook.models.two_layer.entk_W`; the activation pattern is piecewise constant, so the
   gradient flows through :math:`Z Z'^\top`),
3. the ridge solve :math:`A^{-1}`, :math:`A = K + \lambda I`, and the exact leave-one-out influence
   of :func:`ntkbook.influence.scores.ntk_influence` (the same formula, in JAX: :func:`influence`).

With :math:`T` the top set by clean :math:`|I^0|` and :math:`s_i = \operatorname{sign} I^0_i`, the
attack minimises

.. math:: F(X') = \frac{1}{|T|}\sum_{i\in T} \tanh\!\Bigl(\frac{s_i\, I_i(X')}{|I^0_i|}\Bigr)

over :math:`\|X' - X\|_\infty\le\varepsilon`, :math:`0\le X'\le 1`: ``F(X) = tanh 1`` at the clean
set, 0 when every point of :math:`T` sits on zero, negative once they have crossed. Each term is
scaled by its own clean magnitude (so the largest influences do not own the objective) and bounded
(so a point pushed far across stops pulling and the others get the steps). Signed gradient steps
of ``step_size``, each projected onto the ball and the box, ``steps`` of them; restart 0 starts at
the clean set, restarts 1, 2, ... at uniform draws in the ball (from a seeded NumPy generator); the
iterate of smallest ``F`` over every step of every restart is returned. Everything in float64
(inside ``jax.enable_x64``), so the gradient through the ridge solve of an ill-conditioned
attention kernel is not float32 noise.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence import attacks
from ntkbook.models import attention

__all__ = ["FlipAttackResult", "head_weights", "entk", "influence", "perturbed_influence",
           "flip_objective", "flip_attack"]

_HI = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class FlipAttackResult:
    """``x``: the perturbed training set ``(n, D)`` float64 (inside the ball and the box);
    ``objective``: its ``F``; ``objective_clean``: ``F`` of the clean set (``tanh 1`` up to
    rounding); ``restart_objectives``: the best ``F`` of each restart."""

    x: np.ndarray
    objective: float
    objective_clean: float
    restart_objectives: tuple[float, ...]


def head_weights(a) -> np.ndarray:
    """The per-unit weights ``w_r`` of the eNTK (``(m,)``): ``a`` itself for one output (``a`` of
    shape ``(m,)``); ones for heads ``a`` ``(m, C)`` of ``+-1``, whose class-diagonal block does not
    depend on them (:func:`ntkbook.models.two_layer.entk_W`)."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 2:
        if not np.all(np.abs(a) == 1.0):
            raise InputError("the eNTK with several heads needs head weights of +-1")
        return np.ones(a.shape[0])
    if a.ndim != 1:
        raise InputError(f"head weights must be (m,) or (m, C), got shape {a.shape}")
    return a


def entk(W, w, z1, z2):
    r"""The eNTK of :func:`ntkbook.models.two_layer.entk_W` in JAX: ``(N1, N2)``,
    :math:`(z\cdot z')\,\frac1m\sum_r w_r^2\,\mathbf 1[w_r\cdot z>0]\,\mathbf 1[w_r\cdot z'>0]`,
    for ``W`` ``(m, d)``, unit weights ``w`` ``(m,)`` (:func:`head_weights`), inputs ``z1``
    ``(N1, d)``, ``z2`` ``(N2, d)``."""
    s1 = (jnp.matmul(z1, W.T, precision=_HI) > 0).astype(z1.dtype) * w
    s2 = (jnp.matmul(z2, W.T, precision=_HI) > 0).astype(z2.dtype) * w
    return jnp.matmul(z1, z2.T, precision=_HI) * jnp.matmul(s1, s2.T, precision=_HI) / W.shape[0]


def influence(K, Kx, Y, Y_test, lam):
    """:func:`ntkbook.influence.scores.ntk_influence` in JAX (differentiable): the influence
    ``(n,)`` of each training point on the summed squared test loss, ``K`` ``(n, n)``, ``Kx``
    ``(T, n)``, ``Y`` ``(n, C)``, ``Y_test`` ``(T, C)``, ``A = K + lam I`` by Cholesky."""
    n = K.shape[0]
    A = 0.5 * (K + K.T) + lam * jnp.eye(n, dtype=K.dtype)
    L = jnp.linalg.cholesky(A)
    A_inv = jax.scipy.linalg.cho_solve((L, True), jnp.eye(n, dtype=K.dtype))
    A_inv = 0.5 * (A_inv + A_inv.T)
    alpha = jnp.matmul(A_inv, Y, precision=_HI)
    R = jnp.matmul(Kx, alpha, precision=_HI) - Y_test
    B = jnp.matmul(Kx, A_inv, precision=_HI)
    c = alpha / jnp.diag(A_inv)[:, None]
    cross = jnp.einsum("ti,tc,ic->i", B, R, c, precision=_HI)
    return -cross + 0.5 * jnp.sum(c**2, axis=1) * jnp.sum(B**2, axis=0)


def perturbed_influence(x, x_test, W, w, Y, Y_test, lam, *, attend: bool):
    """Influence ``(n,)`` of the training set ``x`` ``(n, D)`` (pixels) with the network frozen
    (``W`` ``(m, d)``, unit weights ``w``); for MLP-Attn training and test points attend over
    ``x``. The JAX form of :func:`ntkbook.influence.interventions.influences`."""
    ztr = attention.inputs_jax(x, x, attend=attend)
    zte = attention.inputs_jax(x, x_test, attend=attend)
    return influence(entk(W, w, ztr, ztr), entk(W, w, zte, ztr), Y, Y_test, lam)


def flip_objective(x, x_test, W, w, Y, Y_test, lam, top, clean_top, *, attend: bool):
    """``F`` of the module docstring: the mean over the top set ``top`` (indices) of
    ``tanh(sign(clean_top) * I_top(x) / |clean_top|)``, ``clean_top`` the clean influences of
    ``top``."""
    I = perturbed_influence(x, x_test, W, w, Y, Y_test, lam, attend=attend)
    return jnp.mean(jnp.tanh(jnp.sign(clean_top) * I[top] / jnp.abs(clean_top)))


@functools.partial(jax.jit, static_argnames=("attend", "steps"))
def _descend(x0, x, eps, step_size, x_test, W, w, Y, Y_test, lam, top, clean_top, *, attend, steps):
    """``steps`` projected signed-gradient steps on ``F`` from ``x0``; the best iterate and its
    ``F`` (the final iterate included)."""
    obj = functools.partial(flip_objective, x_test=x_test, W=W, w=w, Y=Y, Y_test=Y_test, lam=lam,
                            top=top, clean_top=clean_top, attend=attend)
    value_grad = jax.value_and_grad(obj)

    def body(_, carry):
        xa, best_x, best_v = carry
        v, g = value_grad(xa)
        better = v < best_v
        best_x = jnp.where(better, xa, best_x)
        best_v = jnp.where(better, v, best_v)
        return attacks.project(xa - step_size * jnp.sign(g), x, eps), best_x, best_v

    xa, best_x, best_v = jax.lax.fori_loop(0, steps, body, (x0, x0, jnp.asarray(jnp.inf, x.dtype)))
    v = obj(xa)
    return jnp.where(v < best_v, xa, best_x), jnp.minimum(v, best_v)


def flip_attack(params, x, Y, x_test, Y_test, clean, lam: float, eps: float, *, attend: bool,
                top, steps: int, step_size: float, restarts: int,
                rng: np.random.Generator) -> FlipAttackResult:
    """Minimise ``F`` (module docstring) over the ``eps``-ball around the training set ``x``
    ``(n, D)`` in [0, 1]: ``params`` the frozen network (``W`` ``(m, d)``, ``a``), ``Y`` ``(n, C)``
    and ``Y_test`` ``(T, C)`` targets, ``x_test`` ``(T, D)``, ``clean`` ``(n,)`` the clean influences
    at ridge ``lam`` (``A = K + lam I``), ``top`` the indices of the top set. ``restarts`` runs of
    ``steps`` steps of ``step_size`` (restart 0 from ``x``, the others from uniform starts drawn
    from ``rng``); the best iterate of all."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise InputError(f"x must be a batch of shape (N, D), got shape {x.shape}")
    if np.any(x < 0) or np.any(x > 1):
        raise InputError("x must lie in the box [0, 1] (pixels scaled to [0, 1])")
    if not eps >= 0:
        raise InputError(f"eps must be >= 0, got {eps}")
    if steps < 1 or restarts < 1:
        raise InputError(f"steps and restarts must be >= 1, got {steps} and {restarts}")
    if not step_size > 0:
        raise InputError(f"step_size must be > 0, got {step_size}")
    top = np.asarray(top, dtype=int)
    clean_top = np.asarray(clean, dtype=np.float64)[top]
    if top.size == 0 or not np.all(np.abs(clean_top) > 0):
        raise InputError("the top set must be non-empty with nonzero clean influences")
    w = head_weights(params["a"])
    with jax.enable_x64(True):
        f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
        xj = f64(x)
        fixed = dict(x_test=f64(x_test), W=f64(params["W"]), w=f64(w), Y=f64(Y), Y_test=f64(Y_test),
                     lam=f64(lam), top=jnp.asarray(top), clean_top=f64(clean_top))
        clean_value = float(flip_objective(xj, **fixed, attend=attend))
        best_x, best_v, per_restart = x, np.inf, []
        for r in range(restarts):
            start = x if r == 0 else np.clip(x + rng.uniform(-eps, eps, size=x.shape), 0.0, 1.0)
            xr, vr = _descend(f64(start), xj, f64(eps), f64(step_size), **fixed, attend=attend,
                              steps=int(steps))
            vr = float(vr)
            per_restart.append(vr)
            if vr < best_v:
                best_x, best_v = np.asarray(xr, dtype=np.float64), vr
    # the iterate is in the ball up to rounding; enforce it exactly
    best_x = np.clip(np.clip(best_x, x - eps, x + eps), 0.0, 1.0)
    return FlipAttackResult(x=best_x, objective=best_v, objective_clean=clean_value,
                            restart_objectives=tuple(per_restart))

