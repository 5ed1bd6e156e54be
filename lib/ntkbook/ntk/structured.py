r"""The empirical NTK by structured derivatives: dense layers without parameter-sized Jacobians.

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
derivatives).  Here it is found automatically: the per-example model ``f(params, x) -> (C,)`` (the
convention of :mod:`ntkbook.ntk.entk`) is traced to a jaxpr, and a parameter leaf whose only use
is one ``dot_general`` without batch dimensions (reached, if at all, through reshapes, transposes,
dtype conversions, or products and quotients by a scalar literal, which preserve the inner
product up to the square of the scalar) is taken this route.  The model is then evaluated with a
zero "tap" added to the output of each such product, which gives every :math:`h_t` (the product's
other operand) and, by reverse differentiation with respect to the taps, every
:math:`\delta_{c,t}`.  Every other parameter leaf (an embedding read by ``gather``, a bias, a norm
scale, a weight used twice) is left to :func:`ntkbook.ntk.entk.entk`'s explicit Jacobians, and the
two parts are added: :func:`routes` says which leaf goes which way.

The cost per example is that of ``C`` reverse passes (as for the Jacobians) plus, per structured
leaf and pair of examples, ``T T' (K + C O)`` multiply-adds for the class-mean kernel (``K``, ``O``:
the contracted and free sizes of ``W``; ``T``: the positions) instead of ``C K O``.  Kernels are
computed in the dtype of the model's outputs, with ``Precision.HIGHEST`` contractions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal
from jax.tree_util import keystr, tree_flatten_with_path

from ntkbook.errors import InputError
from ntkbook.ntk import entk as _entk

__all__ = ["Route", "routes", "structured_entk"]

_HIGHEST = jax.lax.Precision.HIGHEST
#: primitives between a parameter leaf and its product that keep the Frobenius inner product
_SHAPE_ONLY = ("reshape", "transpose", "convert_element_type", "copy", "copy_p")
#: products and quotients by a scalar literal: the inner product scales by the scalar squared
_SCALED = ("mul", "div")


@dataclasses.dataclass(frozen=True)
class Route:
    """How one parameter leaf enters the kernel: ``name`` (its key path), ``structured`` (True: by
    :eq:`structured-entk`; False: explicit Jacobians) and, for a structured leaf, ``eqn`` (the index
    of its product in the jaxpr), ``side`` (0 or 1: the operand of the product it is), ``scale``
    (the square of the scalars on its way to the product) and ``why`` (for the others, the reason)."""

    name: str
    structured: bool
    eqn: int = -1
    side: int = -1
    scale: float = 1.0
    why: str = ""


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


def _route(jaxpr, uses, var, name: str) -> Route:
    """Follow ``var`` (a parameter leaf) to its one product, or say why it cannot be followed."""
    scale = 1.0
    while True:
        here = uses.get(var, [])
        if len(here) != 1:
            return Route(name, False, why=f"used {len(here)} times" if here else "unused")
        i, j = here[0]
        if i < 0:
            return Route(name, False, why="an output of the model")
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
            return Route(name, False, why=f"{prim} by a non-scalar")
        if prim == "dot_general":
            (_, _), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
            if lhs_batch or rhs_batch:
                return Route(name, False, why="a product with batch dimensions")
            return Route(name, True, eqn=i, side=j, scale=scale)
        return Route(name, False, why=f"read by {prim}")


def _trace(f, params, x_one):
    flat, treedef = tree_flatten_with_path(params)
    leaves = [jnp.asarray(leaf) for _, leaf in flat]
    names = [keystr(p) for p, _ in flat]

    def g(leaves, x):
        return f(treedef.unflatten(leaves), x)

    closed = jax.make_jaxpr(g)(leaves, x_one)
    return closed, [p for p, _ in flat], names, leaves


def routes(f, params, x_one, *, param_filter=None) -> list[Route]:
    """How each parameter leaf selected by ``param_filter`` (as in :mod:`ntkbook.ntk.entk`) enters
    the kernel of ``f`` at ONE example ``x_one``: one :class:`Route` per leaf, in pytree order."""
    closed, paths, names, _ = _trace(f, params, x_one)
    jaxpr = closed.jaxpr
    if len(jaxpr.outvars) != 1 or len(jaxpr.outvars[0].aval.shape) != 1:
        raise InputError("f(params, x) must return one vector (C,) for ONE example x")
    pred = _entk._compile_filter(param_filter)
    uses = _uses(jaxpr)
    out = []
    taken = set()
    for path, name, var in zip(paths, names, jaxpr.invars[:len(paths)]):
        if pred(path):
            r = _route(jaxpr, uses, var, name)
            if r.structured and r.eqn in taken:   # both operands of one product are parameters
                r = Route(name, False, why="the other operand of a product already taken")
            taken.add(r.eqn)
            out.append(r)
    if not out:
        raise InputError(f"param_filter {param_filter!r} selects no parameters; available paths: "
                         + ", ".join(names))
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
    p_contract = list(lc if side == 0 else rc)
    o_free = [d for d in range(other.ndim) if d not in o_contract]
    p_ndim = eqn.invars[side].aval.ndim
    p_free = [d for d in range(p_ndim) if d not in p_contract]
    o_shape = [other.shape[d] for d in o_free]
    p_shape = [eqn.invars[side].aval.shape[d] for d in p_free]
    T, O = math.prod(o_shape), math.prod(p_shape)
    K = math.prod(other.shape[d] for d in o_contract)
    H = jnp.transpose(other, o_free + o_contract).reshape(T, K)
    C = delta.shape[0]
    if side == 1:   # output dims: the other operand's free dims, then the parameter's
        D = delta.reshape(C, T, O)
    else:           # the parameter's free dims first
        D = jnp.swapaxes(delta.reshape(C, O, T), 1, 2)
    return H, D


def _per_example(closed, structured: list[Route], n_leaves: int):
    """``fn(leaves, x) -> [(H (T, K), D (C, T, O)) per structured leaf]`` for ONE example."""
    eqns = closed.jaxpr.eqns
    taps_at = {r.eqn: k for k, r in enumerate(structured)}
    fn = _tapped(closed, taps_at)
    avals = [eqns[r.eqn].outvars[0].aval for r in structured]

    def factors(leaves, x):
        args = [*leaves, *jax.tree_util.tree_leaves(x)]
        zeros = [jnp.zeros(a.shape, a.dtype) for a in avals]
        _, hs = fn(args, zeros)
        deltas = jax.jacrev(lambda taps: fn(args, taps)[0])(zeros)
        return [_factors(eqns[r.eqn], r.side, h, d) for r, h, d in zip(structured, hs, deltas)]

    return factors


#: (f, the parameters' structure, shapes and dtypes, one example's, the filter) -> what
#: :func:`_compiled` returns: a model's plan and its compiled factors are made once per process
_COMPILED: dict = {}


def _compiled(f, params, x_one, param_filter):
    """``(closed jaxpr, routes, jitted batched factors, leaves)`` of ``f`` at these shapes."""
    flat, treedef = jax.tree_util.tree_flatten(params)
    leaves = [jnp.asarray(leaf) for leaf in flat]
    try:
        key = (f, treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves), x_one.shape,
               str(x_one.dtype), param_filter)
        hit = _COMPILED.get(key)
    except TypeError:  # an unhashable filter: nothing is remembered
        key, hit = None, None
    if hit is None:
        closed, _, _, _ = _trace(f, params, x_one)
        plan = routes(f, params, x_one, param_filter=param_filter)
        structured = [r for r in plan if r.structured]
        batched = jax.jit(jax.vmap(_per_example(closed, structured, len(leaves)), in_axes=(None, 0)))
        hit = (closed, plan, batched)
        if key is not None:
            _COMPILED[key] = hit
    return (*hit, leaves)


def _contract(F1, F2, scale: float, reduction: str, class_index: int | None):
    """One leaf's kernel from the factors of two sets of examples, :eq:`structured-entk`."""
    H1, D1 = F1   # (N1, T1, K), (N1, C, T1, O)
    H2, D2 = F2
    if reduction == "class":
        D1, D2 = D1[:, class_index], D2[:, class_index]
        return scale * jnp.einsum("ntk,msk,nto,mso->nm", H1, H2, D1, D2, precision=_HIGHEST,
                                  optimize="optimal")
    if reduction == "class_mean":
        C = D1.shape[1]
        return (scale / C) * jnp.einsum("ntk,msk,ncto,mcso->nm", H1, H2, D1, D2, precision=_HIGHEST,
                                        optimize="optimal")
    return scale * jnp.einsum("ntk,msk,ncto,mdso->nmcd", H1, H2, D1, D2, precision=_HIGHEST,
                              optimize="optimal")


def structured_entk(f: Callable, params, x1, x2=None, *, reduction: str = "full",
                    class_index: int | None = None, param_filter=None, batch_size: int = 256) -> jax.Array:
    """The empirical NTK of :func:`ntkbook.ntk.entk.entk` (same arguments, same result up to float
    round-off), the leaves that :func:`routes` marks structured by :eq:`structured-entk`, the others
    by ``entk``'s explicit Jacobians (``precision="model"``). ``batch_size``: examples whose
    factors are formed at once."""
    x1 = jnp.asarray(x1)
    x2_ = x1 if x2 is None else jnp.asarray(x2)
    closed, plan, batched, leaves = _compiled(f, params, x1[0], param_filter)
    C = closed.jaxpr.outvars[0].aval.shape[0]
    _entk._check_reduction(reduction, class_index, C)
    structured = [r for r in plan if r.structured]
    other = {r.name for r in plan if not r.structured}

    kernel = None
    if structured:
        def factors(x):
            parts = [batched(leaves, x[s:s + batch_size]) for s in range(0, x.shape[0], batch_size)]
            return [(jnp.concatenate([p[k][0] for p in parts]), jnp.concatenate([p[k][1] for p in parts]))
                    for k in range(len(structured))]

        F1 = factors(x1)
        F2 = F1 if x2 is None else factors(x2_)
        for r, a, b in zip(structured, F1, F2):
            part = _contract(a, b, r.scale, "full" if reduction == "flat" else reduction, class_index)
            kernel = part if kernel is None else kernel + part
        if reduction == "flat":
            n1, n2 = kernel.shape[0], kernel.shape[1]
            kernel = jnp.transpose(kernel, (0, 2, 1, 3)).reshape(n1 * C, n2 * C)
    if other:
        rest = _entk.entk(f, params, x1, x2, reduction=reduction, class_index=class_index,
                          param_filter=lambda path: keystr(path) in other)
        kernel = rest if kernel is None else kernel + rest
    return kernel
