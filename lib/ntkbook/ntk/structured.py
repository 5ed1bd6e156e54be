r"""Structured derivatives: a dense layer's part of the eNTK without parameter-sized Jacobians.

For a parameter ``W`` that enters the model once, through a matrix product ``y = h W`` (a dense
layer, an attention projection, an unembedding; shared over positions ``t``), the Jacobian of an
output ``f_c`` with respect to ``W`` is a sum of outer products, :math:`\partial f_c/\partial W =
\sum_t h_t \otimes \delta_{c,t}` with :math:`\delta_{c,t} = \partial f_c / \partial y_t`, so its
part of the kernel is a sum of elementwise products of two small Gram matrices,

.. math:: \Theta^W_{cd}(x, x') = \sum_{t, t'} \big(h_t(x) \cdot h_{t'}(x')\big)
          \big(\delta_{c,t}(x) \cdot \delta_{d,t'}(x')\big),
   :label: structured-entk

never forming a tensor of the size of ``W`` per example and output (Novak, Sohl-Dickstein and
Schoenholz, "Fast Finite Width Neural Tangent Kernel", ICML 2022, call this route structured
derivatives).

This module is the route's machinery; :func:`ntkbook.ntk.entk.entk` chooses it (``route=``).  The
per-example function of the selected parameters is traced to a jaxpr, and a parameter leaf whose
only use is one ``dot_general`` without batch dimensions (reached, if at all, through reshapes,
transposes, dtype conversions, or products and quotients by a scalar literal, which preserve the
inner product up to the square of the scalar) can take this route (:func:`plan_routes`).  The
model is then evaluated with a zero "tap" added to the output of each such product, which gives
every :math:`h_t` (the product's other operand) and, by reverse differentiation with respect to
the taps, every :math:`\delta_{c,t}`, in the same reverse passes that give the other leaves'
explicit Jacobians (:func:`factor_fn`).  :func:`contract_factors` evaluates
:eq:`structured-entk` for one leaf.

Cost per pair of examples and leaf, for the class-mean kernel: ``T T' (K + C O)`` multiply-adds
instead of the Jacobians' ``C K O`` (``K``, ``O``: the contracted and free sizes of ``W``; ``T``:
the positions; ``C``: the outputs), and ``T (K + C O)`` numbers held per example instead of
``C K O`` (:func:`costs`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from ntkbook.errors import InputError

__all__ = ["ROUTES", "Route", "plan_routes", "costs", "factor_fn", "contract_factors"]

#: the ``route=`` choices of the materialised kernels: ``"auto"`` (each leaf the cheaper way, by
#: :func:`costs`), ``"jacobians"`` (explicit Jacobians for every leaf) and ``"structured"`` (every
#: leaf that can take :eq:`structured-entk` takes it)
ROUTES = ("auto", "jacobians", "structured")
#: primitives between a parameter leaf and its product that keep the Frobenius inner product
_SHAPE_ONLY = ("reshape", "transpose", "convert_element_type", "copy", "copy_p")
#: products and quotients by a scalar literal: the inner product scales by the scalar squared
_SCALED = ("mul", "div")


@dataclasses.dataclass(frozen=True)
class Route:
    """How one selected parameter leaf enters the kernel.

    ``name`` (its key path), ``structured`` (True: by :eq:`structured-entk`; False: explicit
    Jacobians), ``why`` (the reason for a leaf taken by Jacobians: it cannot take the structured
    route, or that route costs more, or the caller asked), ``size`` (its number of entries) and,
    for a leaf that can take the structured route (whichever it takes), ``eqn`` (the index of its
    product in the jaxpr), ``side`` (0 or 1: the operand of the product it is), ``scale`` (the
    square of the scalars on its way to the product) and ``T``, ``K``, ``O`` (positions,
    contracted and free sizes of the product)."""

    name: str
    structured: bool
    why: str = ""
    size: int = 0
    eqn: int = -1
    side: int = -1
    scale: float = 1.0
    T: int = 0
    K: int = 0
    O: int = 0  # noqa: E741

    @property
    def eligible(self) -> bool:
        """Whether the leaf can take the structured route (found its one product)."""
        return self.eqn >= 0


def _uses(jaxpr) -> dict:
    """Var -> [(equation index, operand position)] over the top-level equations, and the outputs."""
    uses: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for j, v in enumerate(eqn.invars):
            if not isinstance(v, Literal):
                uses.setdefault(v, []).append((i, j))
    for v in jaxpr.outvars:
        if not isinstance(v, Literal):
            uses.setdefault(v, []).append((-1, -1))
    return uses


def _scalar_literal(v) -> float | None:
    if isinstance(v, Literal) and np.ndim(v.val) == 0:
        return float(v.val)
    return None


def _dims(eqn, side: int) -> tuple[int, int, int]:
    """``(T, K, O)`` of the product ``eqn`` with the parameter on operand ``side``."""
    (lc, rc), _ = eqn.params["dimension_numbers"]
    other = eqn.invars[1 - side].aval.shape
    p_shape = eqn.invars[side].aval.shape
    o_contract = rc if side == 0 else lc
    p_contract = lc if side == 0 else rc
    T = math.prod(d for i, d in enumerate(other) if i not in o_contract)
    K = math.prod(other[i] for i in o_contract)
    O = math.prod(d for i, d in enumerate(p_shape) if i not in p_contract)  # noqa: E741
    return T, K, O


def _route(jaxpr, uses, var, name: str) -> Route:
    """Follow ``var`` (a parameter leaf) to its one product, or say why it cannot be followed."""
    size = math.prod(var.aval.shape)
    scale = 1.0
    while True:
        here = uses.get(var, [])
        if len(here) != 1:
            return Route(name, False, f"used {len(here)} times" if here else "unused", size)
        i, j = here[0]
        if i < 0:
            return Route(name, False, "an output of the model", size)
        eqn = jaxpr.eqns[i]
        prim = eqn.primitive.name
        if prim in _SHAPE_ONLY:
            var = eqn.outvars[0]
            continue
        if prim in _SCALED and len(eqn.invars) == 2:
            s = _scalar_literal(eqn.invars[1 - j])
            if s is not None and s != 0.0 and not (prim == "div" and j == 1):
                scale *= (s * s) if prim == "mul" else 1.0 / (s * s)
                var = eqn.outvars[0]
                continue
            return Route(name, False, f"{prim} by a non-scalar", size)
        if prim == "dot_general":
            (_, _), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
            if lhs_batch or rhs_batch:
                return Route(name, False, "a product with batch dimensions", size)
            T, K, O = _dims(eqn, j)  # noqa: E741
            return Route(name, True, "", size, i, j, scale, T, K, O)
        return Route(name, False, f"read by {prim}", size)


def costs(r: Route, n_out: int, reduction: str) -> tuple[int, int]:
    """``(Jacobians, structured)``: multiply-adds per pair of examples of leaf ``r``'s part of a
    kernel with ``n_out`` differentiated outputs (1 for ``"class"``) and ``reduction``.

    Jacobians: ``C P`` for ``"class"``/``"class_mean"``, ``C² P`` for ``"full"``/``"flat"``.
    Structured: ``T² K + T² C O``, or ``T² K + T² C² O`` (the two Gram matrices of
    :eq:`structured-entk`)."""
    pairs = n_out if reduction in ("class", "class_mean") else n_out * n_out
    jac = pairs * r.size
    if not r.eligible:
        return jac, jac
    return jac, r.T * r.T * (r.K + pairs * r.O)


def plan_routes(closed, names: Sequence[str], *, route: str, reduction: str) -> list[Route]:
    """One :class:`Route` per name, for the first ``len(names)`` inputs of the traced function
    ``closed`` (a closed jaxpr of ``g(selected leaves, other leaves, x) -> (C',)``).

    ``route``: ``"jacobians"`` takes every leaf by Jacobians; ``"structured"`` every leaf that can
    take :eq:`structured-entk`; ``"auto"`` those for which it costs fewer multiply-adds
    (:func:`costs`). A leaf is also left to the Jacobians when it is the second parameter operand
    of one product (only one side of a product can be tapped)."""
    if route not in ROUTES:
        raise InputError(f"unknown route {route!r}; choose one of {ROUTES} (see ntkbook.ntk.structured)")
    jaxpr = closed.jaxpr
    n_out = jaxpr.outvars[0].aval.shape[0]
    uses = _uses(jaxpr)
    out, taken = [], set()
    for name, var in zip(names, jaxpr.invars):
        r = _route(jaxpr, uses, var, name)
        if r.eligible and r.eqn in taken:  # both operands of one product are parameters
            r = Route(name, False, "the other operand of a product already taken", r.size)
        if r.eligible:
            jac, struct = costs(r, n_out, reduction)
            if route == "jacobians":
                r = dataclasses.replace(r, structured=False, why="route='jacobians'")
            elif route == "auto" and struct >= jac:
                r = dataclasses.replace(r, structured=False,
                                        why=f"Jacobians cheaper ({jac:.3g} vs {struct:.3g} per pair)")
            if r.structured:
                taken.add(r.eqn)
        out.append(r)
    return out


def _tapped(closed, taps_at: dict[int, int]):
    """``fn(args, taps) -> (out, hs)``: the jaxpr evaluated with ``taps[k]`` added to the output of
    equation ``i`` (``taps_at[i] = k``) and ``hs[k]`` the operands of those equations (both sides)."""
    jaxpr, consts = closed.jaxpr, closed.consts

    def fn(args, taps):
        env = {}

        def read(v):
            return v.val if isinstance(v, Literal) else env[v]

        for v, val in zip(jaxpr.constvars, consts):
            env[v] = val
        for v, val in zip(jaxpr.invars, args):
            env[v] = val
        hs = [None] * len(taps)
        for i, eqn in enumerate(jaxpr.eqns):
            bind_params = eqn.primitive.get_bind_params(eqn.params)
            subfuns = []
            if isinstance(bind_params, tuple):  # jax < 0.12 also returns the sub-functions
                subfuns, bind_params = bind_params
            invals = [read(v) for v in eqn.invars]
            ans = eqn.primitive.bind(*subfuns, *invals, **bind_params)
            if i in taps_at:
                k = taps_at[i]
                ans = ans + taps[k]
                hs[k] = invals
            if eqn.primitive.multiple_results:
                for v, a in zip(eqn.outvars, ans):
                    env[v] = a
            else:
                env[eqn.outvars[0]] = ans
        return read(jaxpr.outvars[0]), hs

    return fn


def _factors(eqn, side: int, h, delta):
    """The product ``eqn`` with the parameter on operand ``side``: its other operand ``h`` (one
    example) as ``(T, K)`` and the cotangents ``delta`` ``(C, *out)`` as ``(C, T, O)``."""
    (lc, rc), _ = eqn.params["dimension_numbers"]
    other = h[1 - side]
    o_contract = list(rc if side == 0 else lc)
    o_free = [d for d in range(other.ndim) if d not in o_contract]
    T, K, O = _dims(eqn, side)  # noqa: E741
    H = jnp.transpose(other, o_free + o_contract).reshape(T, K)
    C = delta.shape[0]
    if side == 1:   # output dims: the other operand's free dims, then the parameter's
        D = delta.reshape(C, T, O)
    else:           # the parameter's free dims first
        D = jnp.swapaxes(delta.reshape(C, O, T), 1, 2)
    return H, D


def factor_fn(closed, plan: Sequence[Route]) -> Callable:
    """``one(selected, others, x) -> tuple`` for ONE example: per leaf of ``plan`` in order, its
    Jacobian ``(C', P)`` (a leaf taken by Jacobians) or its two factors ``H (T, K)`` and ``D (C',
    T, O)`` of :eq:`structured-entk` (a structured leaf). ``closed`` is the jaxpr
    :func:`plan_routes` read; one forward pass and ``C'`` reverse passes give everything."""
    jaxpr = closed.jaxpr
    struct = [k for k, r in enumerate(plan) if r.structured]
    explicit = [k for k, r in enumerate(plan) if not r.structured]
    eqns = [jaxpr.eqns[plan[k].eqn] for k in struct]
    fn = _tapped(closed, {plan[k].eqn: j for j, k in enumerate(struct)})
    avals = [e.outvars[0].aval for e in eqns]
    n_out = jaxpr.outvars[0].aval.shape[0]

    def one(selected, others, x):
        xs = jax.tree_util.tree_leaves(x)

        def g(ex_leaves, taps):
            leaves = list(selected)
            for k, leaf in zip(explicit, ex_leaves):
                leaves[k] = leaf
            return fn([*leaves, *others, *xs], taps)

        zeros = [jnp.zeros(a.shape, a.dtype) for a in avals]
        y, pullback, hs = jax.vjp(g, [selected[k] for k in explicit], zeros, has_aux=True)
        jex, jtaps = jax.vmap(pullback)(jnp.eye(n_out, dtype=y.dtype))
        out: list = [None] * len(plan)
        for k, j in zip(explicit, jex):
            out[k] = (j.reshape(n_out, -1),)
        for k, e, h, d in zip(struct, eqns, hs, jtaps):
            out[k] = _factors(e, plan[k].side, h, d)
        return tuple(a for parts in out for a in parts)

    return one


def contract_factors(F1, F2, scale: float, reduction: str, dot_t: Callable):
    """One structured leaf's part of a kernel, :eq:`structured-entk`, from the factors ``(H (n, T,
    K), D (n, C', T, O))`` of two sets of examples; ``dot_t(a, b)`` is ``a @ b.T`` at the caller's
    precision. Returns, like the Jacobians' contraction: ``(n, m)`` summed over the outputs for
    ``"class"``/``"class_mean"`` (the mean is the caller's), ``(n, m, C', C')`` for ``"full"``,
    ``(n C', m C')`` for ``"flat"``."""
    (H1, D1), (H2, D2) = F1, F2
    n, C, T, O = D1.shape  # noqa: E741
    m, S = D2.shape[0], D2.shape[2]
    HH = dot_t(H1.reshape(n * T, -1), H2.reshape(m * S, -1)).reshape(n, T, m, S)
    if reduction in ("class", "class_mean"):
        a = jnp.swapaxes(D1, 1, 2).reshape(n * T, C * O)
        b = jnp.swapaxes(D2, 1, 2).reshape(m * S, C * O)
        return scale * jnp.sum(HH * dot_t(a, b).reshape(n, T, m, S), axis=(1, 3))
    k = None
    for t in range(T):
        for s in range(S):
            dd = dot_t(D1[:, :, t].reshape(n * C, O), D2[:, :, s].reshape(m * C, O)).reshape(n, C, m, C)
            part = HH[:, t, None, :, s, None] * dd
            k = part if k is None else k + part
    k = scale * k
    if reduction == "full":
        return jnp.transpose(k, (0, 2, 1, 3))
    return k.reshape(n * C, m * C)
