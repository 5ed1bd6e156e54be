r"""Empirical neural tangent kernel (eNTK) of any JAX function.

Convention
----------
Every function here works on a *per-example* model ``f(params, x) -> (C,)``: ``f`` maps ONE input
``x`` (of any shape, e.g. ``(d,)`` or ``(tokens,)``) to a vector of ``C`` outputs; ``params`` is any
pytree.  Batches are handled inside this module with :func:`jax.vmap` over examples, never by
differentiating a batched function (a naive ``jax.jacrev`` of a batched model builds an
``N x N`` block of zeros, one row per example and output).  For a :mod:`flax.nnx` module use
:func:`split_model`, which returns such an ``(f, params)`` pair.

The kernel is

.. math:: K_{cd}(x, x') = \sum_\mu \frac{\partial f_c(x)}{\partial \theta_\mu}
                          \frac{\partial f_d(x')}{\partial \theta_\mu},

summed over all parameters, or over those selected by ``param_filter`` (a layer-wise kernel).

Reductions (``reduction=``)
    ``"full"``        ``(N1, N2, C, C)``, all blocks ``K_cd``;
    ``"class"``       ``(N1, N2)``, the block ``K_cc`` of one output ``c = class_index``;
    ``"class_mean"``  ``(N1, N2)``, ``(1/C) sum_c K_cc``;
    ``"flat"``        ``(N1*C, N2*C)``, the full kernel with row ``n*C + c`` for example ``n``,
                      output ``c``.
    The mean over all ``C x C`` output pairs (the eNTK of the mean logit) has its own functions,
    :func:`entk_mean_logit` and :func:`entk_matvec_mean_logit`, at the end of the module.

Parameter filters
    ``param_filter`` is ``None`` (all parameters), a callable ``path -> bool`` where ``path`` is the
    tuple of key entries of a leaf as given by :func:`jax.tree_util.tree_flatten_with_path` (use
    :func:`jax.tree_util.keystr` on it for a string), or a string, used as a regular expression and
    searched (``re.search``) in ``jax.tree_util.keystr(path)``, e.g. ``r"\['dense2'\]"`` or simply
    ``"dense2"``.  A filter that selects nothing raises ``InputError`` naming the available paths.
    Only the selected leaves are differentiated; the others are held fixed.

Precision
    Results have the dtype of the model's outputs: float64 when the caller has enabled
    ``jax.config.update("jax_enable_x64", True)`` and passes float64 parameters and inputs.  This
    module never changes JAX's global configuration, and never casts: when the inputs and the
    parameters mix floating dtypes, or the kernel comes out narrower than the widest of them
    (float32 from float64 inputs), it warns (``UserWarning``) rather than casting, since a cast
    would change what the caller's model computes.  Contractions use
    ``precision=jax.lax.Precision.HIGHEST`` so that GPUs do not silently use TF32.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey, keystr, tree_flatten_with_path

from ntkbook.errors import InputError, NumericalError
from ntkbook.ntk.operator import KernelOperator, check_finite

__all__ = [
    "entk",
    "entk_layerwise",
    "entk_matvec",
    "select",
    "split_model",
    "default_layers",
    "EntkOperator",
    "REDUCTIONS",
    "mean_logit",
    "entk_mean_logit",
    "entk_matvec_mean_logit",
]

REDUCTIONS = ("full", "class", "class_mean", "flat")
_HIGHEST = jax.lax.Precision.HIGHEST

Filter = Callable[[tuple], bool] | str | None


# --------------------------------------------------------------------------------------------------
# flax.nnx adapter
# --------------------------------------------------------------------------------------------------
def split_model(model, *, add_batch_axis: bool = True):
    """Turn a :class:`flax.nnx.Module` into ``(f, params)`` for the functions of this module.

    ``params`` is the :class:`nnx.State` of the module's :class:`nnx.Param` variables (a pytree whose
    leaf paths look like ``['layers'][0]['kernel'].value``); all other state (batch statistics, rng
    counters, ...) is frozen at its current value.  ``f(params, x)`` merges the module back with
    :func:`nnx.merge` and applies it to ONE example ``x``: with ``add_batch_axis=True`` (default) the
    module is called on ``x[None]`` and the leading axis of its output is removed, which suits modules
    written for batches; with ``False`` it is called on ``x`` directly.
    """
    from flax import nnx  # lazy: the rest of the module works without flax

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def f(p, x):
        m = nnx.merge(graphdef, p, rest)
        if add_batch_axis:
            return m(x[None])[0]
        return m(x)

    return f, params


# --------------------------------------------------------------------------------------------------
# parameter selection
# --------------------------------------------------------------------------------------------------
def _compile_filter(param_filter: Filter) -> Callable[[tuple], bool]:
    if param_filter is None:
        return lambda path: True
    if isinstance(param_filter, str):
        pattern = re.compile(param_filter)
        return lambda path: pattern.search(keystr(path)) is not None
    if isinstance(param_filter, re.Pattern):
        return lambda path: param_filter.search(keystr(path)) is not None
    if callable(param_filter):
        return lambda path: bool(param_filter(path))
    raise InputError(
        f"param_filter must be None, a string/regex or a callable on the key path, "
        f"got {type(param_filter).__name__}"
    )


class _Params:
    """A pytree of parameters, flattened with its paths, and a way to rebuild it from a subset."""

    def __init__(self, params):
        flat, self.treedef = tree_flatten_with_path(params)
        if not flat:
            raise InputError("params has no array leaves")
        self.paths = [p for p, _ in flat]
        self.leaves = [jnp.asarray(leaf) for _, leaf in flat]
        self.names = [keystr(p) for p in self.paths]
        for name, leaf in zip(self.names, self.leaves):
            check_finite(leaf, f"parameter {name}")

    def indices(self, param_filter: Filter, *, what: str = "param_filter") -> list[int]:
        pred = _compile_filter(param_filter)
        idx = [i for i, p in enumerate(self.paths) if pred(p)]
        if not idx:
            avail = ", ".join(self.names)
            raise InputError(
                f"{what} {param_filter!r} selects no parameters; available paths: {avail}"
            )
        return idx

    def split(self, sel_idx: Sequence[int]):
        """(selected leaves, frozen leaves) for the positions ``sel_idx``."""
        s = set(sel_idx)
        return ([self.leaves[i] for i in sel_idx],
                [leaf for i, leaf in enumerate(self.leaves) if i not in s])


def _rebuild(treedef, n_leaves, sel_idx, sel_leaves, frozen_leaves):
    """The full pytree from its selected and frozen leaves (both passed as traced arguments, so
    that frozen parameters are never baked into compiled programs as constants)."""
    leaves = [None] * n_leaves
    for i, leaf in zip(sel_idx, sel_leaves):
        leaves[i] = leaf
    it = iter(frozen_leaves)
    for i in range(n_leaves):
        if leaves[i] is None:
            leaves[i] = next(it)
    return treedef.unflatten(leaves)


def select(params, param_filter: Filter) -> dict[str, jax.Array]:
    """The leaves of ``params`` selected by ``param_filter``, as ``{keystr(path): leaf}``.

    Raises ``InputError`` (listing the available paths) when the filter selects nothing.
    """
    ps = _Params(params)
    return {ps.names[i]: ps.leaves[i] for i in ps.indices(param_filter)}


def _group_name(path: tuple) -> str:
    # drop trailing attribute accesses such as nnx's `.value`, then the leaf's own key
    p = list(path)
    while p and isinstance(p[-1], GetAttrKey):
        p.pop()
    parent = p[:-1] if len(p) > 1 else p
    return keystr(tuple(parent))


def default_layers(params) -> dict[str, Callable[[tuple], bool]]:
    """Default partition of ``params`` used by :func:`entk_layerwise`.

    Leaves are grouped by their *parent path*: the key path with trailing attribute keys (such as
    flax.nnx's ``.value``) and the leaf's own key removed.  So ``{'dense1': {'w', 'b'}, 'dense2':
    {...}}`` gives groups ``"['dense1']"`` and ``"['dense2']"``; an nnx model with ``self.layers =
    [Linear, Linear]`` gives ``"['layers'][0]"``, ``"['layers'][1]"``; a leaf directly at the top level
    (``{'W1': ..., 'W2': ...}``) forms a group of its own (``"['W1']"``).  The groups partition the
    parameters, so the layer-wise kernels sum to the full kernel.  Returns ``{name: filter}``.
    """
    ps = _Params(params)
    groups: dict[str, list[str]] = {}
    for path, name in zip(ps.paths, ps.names):
        groups.setdefault(_group_name(path), []).append(name)
    out = {}
    for g, names in groups.items():
        members = frozenset(names)
        out[g] = (lambda path, members=members: keystr(path) in members)
    return out


# --------------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------------
_CONVENTION = (
    "Convention: x1 and x2 are batches of shape (N, *feature_shape), and f(params, x) maps ONE "
    "example x of shape feature_shape to a vector of shape (C,); a single example x is passed "
    "as x[None]."
)


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_inputs(x1, x2):
    x1 = jnp.asarray(x1)
    if x1.ndim < 1 or x1.shape[0] == 0:
        raise InputError(f"x1 must be a non-empty batch with a leading example axis, got shape "
                         f"{x1.shape}. {_CONVENTION}")
    check_finite(x1, "x1")
    if x2 is None:
        return x1, None
    x2 = jnp.asarray(x2)
    if x2.ndim < 1 or x2.shape[0] == 0:
        raise InputError(f"x2 must be a non-empty batch with a leading example axis, got shape "
                         f"{x2.shape}. {_CONVENTION}")
    check_finite(x2, "x2")
    if x1.shape[1:] != x2.shape[1:]:
        raise InputError(
            f"x1 and x2 have mismatched per-example feature shapes: {x1.shape[1:]} vs {x2.shape[1:]} "
            f"(full shapes {x1.shape} and {x2.shape})"
        )
    return x1, x2


def _warn_on_dtypes(xs, leaves, out_dtype) -> None:
    """Warn (``UserWarning``) when the floating inputs and parameters do not share one dtype, or
    when the kernel comes out narrower than the widest of them: the eNTK then silently has the lower
    precision (e.g. float32 although ``jax_enable_x64`` is on and the inputs are float64)."""
    kinds = {jnp.dtype(a.dtype) for a in (*xs, *leaves) if jnp.issubdtype(a.dtype, jnp.floating)}
    widest = max(kinds, key=lambda d: d.itemsize) if kinds else None
    narrower = widest is not None and jnp.dtype(out_dtype).itemsize < widest.itemsize
    if len(kinds) > 1 or narrower:
        names = ", ".join(sorted(str(d) for d in kinds))
        warnings.warn(f"the eNTK's inputs and parameters have dtypes {names} and it comes out "
                      f"{jnp.dtype(out_dtype)}: cast x and every parameter to one dtype (float64 "
                      f"with jax_enable_x64 for a float64 kernel)", UserWarning, stacklevel=3)


def _num_outputs(f, params, x_one) -> int:
    try:
        out = jax.eval_shape(f, params, x_one)
    except Exception as exc:
        raise InputError(
            f"f(params, x) failed on one example x = x1[0] of shape {x_one.shape} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
            f"{_CONVENTION} If x1 is one example rather than a batch, pass x1[None]; if f "
            f"expects a batch, wrap it: lambda p, x: f(p, x[None])[0] (or use split_model)."
        ) from exc
    if not hasattr(out, "shape") or len(out.shape) != 1:
        shape = getattr(out, "shape", type(out).__name__)
        hint = ""
        if hasattr(out, "shape") and len(out.shape) == 2 and out.shape[0] == 1:
            hint = " (a batch axis of 1: f treats x as a batch; use lambda p, x: f(p, x[None])[0])"
        elif hasattr(out, "shape") and len(out.shape) == 0:
            hint = " (a scalar: return f(...)[None] for C = 1)"
        raise InputError(
            "f(params, x) must map ONE example x to a vector of C outputs (shape (C,)); "
            f"got output shape {shape} for an example of shape {x_one.shape}{hint}. {_CONVENTION}"
        )
    return int(out.shape[0])


def _check_reduction(reduction: str, class_index, C: int, allowed=REDUCTIONS):
    if reduction not in allowed:
        raise InputError(f"unknown reduction {reduction!r}; choose one of {allowed}")
    if reduction == "class":
        if class_index is None:
            raise InputError('reduction="class" needs class_index (an int in [0, C))')
        if isinstance(class_index, (bool, np.bool_)) or not (
                isinstance(class_index, (int, np.integer)) and 0 <= class_index < C):
            raise InputError(f"class_index={class_index!r} out of range for C={C} outputs: it must be an int "
                             f"in [0, {C}) (a bool is refused)")


# --------------------------------------------------------------------------------------------------
# materialised kernels
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _make_block_fns(f, treedef, n_leaves, sel_idx, groups, reduction, class_index, C):
    """Jitted functions computing, for chunks of inputs, the kernel of each group of leaves.

    ``groups`` is a tuple of tuples of positions into ``sel_idx``.  Each block function returns a
    tuple (one array per group) in the "full" layout (n, m, C', C') for reduction full/flat and
    (n, m) for class/class_mean.  Cached, so repeated calls with the same model and structure reuse
    the compiled functions.
    """

    def f_sel(sel_leaves, frozen, x):
        out = f(_rebuild(treedef, n_leaves, sel_idx, sel_leaves, frozen), x)
        if reduction == "class":
            out = out[class_index][None]
        return out

    jac_one = jax.jacrev(f_sel)  # list of (C', *leaf_shape)

    def jac(sel_leaves, frozen, xb):
        js = jax.vmap(jac_one, in_axes=(None, None, 0))(sel_leaves, frozen, xb)
        return [j.reshape(j.shape[0], j.shape[1], -1) for j in js]  # (b, C', P_i)

    def contract(j1, j2):
        outs = []
        for g in groups:
            k = None
            for i in g:
                if reduction in ("full", "flat"):
                    t = jnp.einsum("ncp,mdp->nmcd", j1[i], j2[i], precision=_HIGHEST)
                else:
                    t = jnp.einsum("ncp,mcp->nm", j1[i], j2[i], precision=_HIGHEST)
                k = t if k is None else k + t
            if reduction == "class_mean":
                k = k / C
            outs.append(k)
        return tuple(outs)

    @jax.jit
    def block(sel_leaves, frozen, xa, xb):
        return contract(jac(sel_leaves, frozen, xa), jac(sel_leaves, frozen, xb))

    @jax.jit
    def block_sym(sel_leaves, frozen, xa):
        ja = jac(sel_leaves, frozen, xa)
        return contract(ja, ja)

    return block, block_sym


def _transpose_block(k, reduction):
    if reduction in ("full", "flat"):
        return jnp.transpose(k, (1, 0, 3, 2))
    return k.T


def _chunks(x, batch_size):
    """Split x into chunks of exactly batch_size rows (last one padded); returns (chunks, sizes)."""
    n = x.shape[0]
    out, sizes = [], []
    for s in range(0, n, batch_size):
        c = x[s : s + batch_size]
        m = c.shape[0]
        if m < batch_size:  # pad with copies of the first row: one compiled shape for all chunks
            pad = jnp.broadcast_to(x[:1], (batch_size - m,) + x.shape[1:])
            c = jnp.concatenate([c, pad], axis=0)
        out.append(c)
        sizes.append(m)
    return out, sizes


def _kernels(f, params, x1, x2, groups_filters, reduction, class_index, batch_size, what):
    x1, x2 = _check_inputs(x1, x2)
    ps = _Params(params)
    C = _num_outputs(f, params, x1[0])
    _check_reduction(reduction, class_index, C)
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
        raise InputError(f"batch_size must be a positive int or None, got {batch_size!r}")

    # union of the selected leaves, and each group as positions into it
    group_idx = [ps.indices(flt, what=f"{what} {name!r}:" if name else what)
                 for name, flt in groups_filters]
    sel_idx = sorted(set(i for g in group_idx for i in g))
    pos = {i: k for k, i in enumerate(sel_idx)}
    groups = tuple(tuple(pos[i] for i in g) for g in group_idx)
    sel, frozen = ps.split(sel_idx)

    block, block_sym = _make_block_fns(f, ps.treedef, len(ps.leaves), tuple(sel_idx), groups,
                                       reduction, class_index, C)
    G = len(groups)

    if batch_size is None or (batch_size >= x1.shape[0] and (x2 is None or batch_size >= x2.shape[0])):
        ks = block_sym(sel, frozen, x1) if x2 is None else block(sel, frozen, x1, x2)
    else:
        c1, s1 = _chunks(x1, batch_size)
        if x2 is None:
            c2, s2 = c1, s1
        else:
            c2, s2 = _chunks(x2, batch_size)
        grid = [[[None] * len(c2) for _ in c1] for _ in range(G)]
        for i, (a, na) in enumerate(zip(c1, s1)):
            for j, (b, nb) in enumerate(zip(c2, s2)):
                if x2 is None and j < i:
                    for g in range(G):
                        grid[g][i][j] = _transpose_block(grid[g][j][i], reduction)
                    continue
                if x2 is None and i == j:
                    out = block_sym(sel, frozen, a)
                else:
                    out = block(sel, frozen, a, b)
                for g in range(G):
                    grid[g][i][j] = out[g][:na, :nb]
        ks = tuple(
            jnp.concatenate([jnp.concatenate(r, axis=1) for r in grid[g]], axis=0) for g in range(G)
        )

    if reduction == "flat":
        ks = tuple(
            jnp.transpose(k, (0, 2, 1, 3)).reshape(k.shape[0] * C, k.shape[1] * C) for k in ks
        )
    _warn_on_dtypes([x for x in (x1, x2) if x is not None], ps.leaves, ks[0].dtype)
    for k in ks:
        if _is_concrete(k) and not bool(jnp.all(jnp.isfinite(k))):
            raise NumericalError(
                "the eNTK has non-finite entries although inputs and parameters are finite: the "
                "model's outputs or gradients overflow at these parameters (a diverged training "
                "run?). Use float64 (jax_enable_x64) or check the parameters."
            )
    return ks


def entk(
    f,
    params,
    x1,
    x2=None,
    *,
    reduction: str = "full",
    class_index: int | None = None,
    param_filter: Filter = None,
    batch_size: int | None = None,
) -> jax.Array:
    """Materialised empirical NTK between the examples of ``x1`` and ``x2`` (``x2=None``: ``x1``).

    Parameters
    ----------
    f : ``f(params, x) -> (C,)`` on ONE example (see the module docstring).
    params : any pytree of arrays.
    x1, x2 : arrays ``(N1, *feature_shape)`` and ``(N2, *feature_shape)``.
    reduction : ``"full"`` ``(N1, N2, C, C)``; ``"class"`` ``(N1, N2)`` (needs ``class_index``);
        ``"class_mean"`` ``(N1, N2)``; ``"flat"`` ``(N1*C, N2*C)`` with row index ``n*C + c``.
    param_filter : restrict the sum over parameters (layer-wise kernel); see the module docstring.
    batch_size : compute per-example Jacobians for at most ``batch_size`` examples at a time and
        assemble the kernel block by block (memory ``O(batch_size * C * P)`` plus the output).  With
        ``x2=None`` only the blocks on and above the diagonal are computed.

    The per-example Jacobians are obtained by ``vmap(jacrev(f))`` over examples (``C`` reverse passes
    per example; for ``"class"`` only the one needed output is differentiated).
    """
    (k,) = _kernels(f, params, x1, x2, [(None, param_filter)], reduction, class_index, batch_size,
                    "param_filter")
    return k


def entk_layerwise(
    f,
    params,
    x1,
    x2=None,
    *,
    layers: Mapping[str, Filter] | None = None,
    reduction: str = "full",
    class_index: int | None = None,
    batch_size: int | None = None,
) -> dict[str, jax.Array]:
    """Layer-wise eNTKs ``{name: kernel}``, one per filter of ``layers``, from one Jacobian pass.

    ``layers`` maps names to parameter filters (as ``param_filter`` of :func:`entk`).  By default it is
    :func:`default_layers`: one group per parent path of the leaves (e.g. one per ``Linear`` layer),
    which partitions the parameters, so the layer-wise kernels then sum to the full kernel.  Each
    Jacobian chunk is computed once and contracted separately for every layer.  A filter selecting no
    parameter raises ``InputError``.
    """
    if layers is None:
        layers = default_layers(params)
    if not layers:
        raise InputError("layers must name at least one parameter filter")
    names = list(layers)
    ks = _kernels(f, params, x1, x2, [(n, layers[n]) for n in names], reduction, class_index,
                  batch_size, "layer")
    return dict(zip(names, ks))


# --------------------------------------------------------------------------------------------------
# matrix-free products
# --------------------------------------------------------------------------------------------------
class EntkOperator(KernelOperator):
    """The matrix-free eNTK ``v -> K v`` of :func:`entk_matvec`: a
    :class:`ntkbook.ntk.operator.KernelOperator` that also records its ``reduction`` and
    ``num_outputs`` (C)."""

    def __init__(self, fn, dim, dtype, reduction, num_outputs):
        super().__init__(fn, dim, dtype)
        self.reduction = reduction
        self.num_outputs = num_outputs

    def __repr__(self):
        return f"EntkOperator(dim={self.dim}, reduction={self.reduction!r}, C={self.num_outputs})"


def entk_matvec(
    f,
    params,
    x,
    *,
    reduction: str = "flat",
    class_index: int | None = None,
    param_filter: Filter = None,
    reuse_forward: bool = True,
) -> EntkOperator:
    """Matrix-free eNTK on the examples ``x``: a callable ``v -> K v``.

    Vectors are flattened: shape ``(N*C,)`` with index ``n*C + c`` for ``reduction="flat"`` (the
    kernel of :func:`entk` with ``reduction="flat"``), shape ``(N,)`` for ``"class_mean"`` and
    ``"class"``.  One product is ``K v = J (J^T v)``: one vector-Jacobian product and one
    Jacobian-vector product through the batched model ``F(theta) = vmap(f)(theta, x)``.  For
    ``"class_mean"`` this is done for the ``C`` outputs at once (vmapped), since
    ``(1/C) sum_c J_c J_c^T v`` does not factor through a single pair.

    Reusing the forward pass (``reuse_forward=True``, default): the model is linearised once,
    ``jax.linearize(F, theta_sel)``, where ``theta_sel`` are the leaves selected by ``param_filter``
    and all other leaves are closed over as constants.  Linearisation evaluates, once, every part of
    the forward computation that does not depend on the tangent of ``theta_sel``, in particular the
    whole computation upstream of the selected layer (e.g. seven frozen layers of an eight-layer MLP
    when only the last is selected), and stores the residuals it needs.  Each product then applies
    only the linear map ``u -> J u`` and its transpose ``jax.linear_transpose`` (which gives
    ``J^T v``); the linearised function (a :class:`jax.tree_util.Partial` holding the residuals) is
    passed as an argument to one jitted product function, compiled once and reused.  Memory: the
    residuals of one forward pass over all ``N`` examples.  ``reuse_forward=False`` instead runs
    ``jax.vjp`` and ``jax.jvp`` of ``F`` inside each product (recomputing the forward pass; lower
    resident memory).
    """
    x, _ = _check_inputs(x, None)
    ps = _Params(params)
    C = _num_outputs(f, params, x[0])
    _check_reduction(reduction, class_index, C, allowed=("flat", "class_mean", "class"))
    sel_idx = ps.indices(param_filter)
    sel, frozen = ps.split(sel_idx)
    treedef, n_leaves = ps.treedef, len(ps.leaves)
    N = x.shape[0]

    def F(sel_leaves, frozen, x):
        p = _rebuild(treedef, n_leaves, sel_idx, sel_leaves, frozen)
        out = jax.vmap(lambda xx: f(p, xx))(x)
        if reduction == "class":
            out = out[:, class_index]
        return out

    out_struct = jax.eval_shape(F, sel, frozen, x)
    dtype = out_struct.dtype
    _warn_on_dtypes([x], ps.leaves, dtype)
    dim = N * C if reduction == "flat" else N

    def apply(jvp_fn, vjp_fn, v):
        if reduction == "flat":
            return jvp_fn(vjp_fn(v.reshape(N, C))).reshape(-1)
        if reduction == "class":
            return jvp_fn(vjp_fn(v))
        # class_mean: cotangent e_c (x) v for each class, keep output column c
        cots = v[None, :, None] * jnp.eye(C, dtype=v.dtype)[:, None, :]  # (C, N, C)
        outs = jax.vmap(lambda ct: jvp_fn(vjp_fn(ct)))(cots)  # (C, N, C)
        return jnp.einsum("cnc->n", outs) / C

    if reuse_forward:
        # one forward pass: everything not depending on the tangent of `sel` is evaluated here
        lin = jax.jit(lambda s, fr, xx: jax.linearize(lambda t: F(t, fr, xx), s)[1])(sel, frozen, x)

        @jax.jit
        def product(lin, sel_like, v):
            transpose = jax.linear_transpose(lin, sel_like)
            return apply(lin, lambda ct: transpose(ct)[0], v)

        def fn(v):
            return product(lin, sel, v)
    else:

        @jax.jit
        def product(sel_leaves, frozen, x, v):
            Fs = lambda t: F(t, frozen, x)  # noqa: E731
            _, vjp = jax.vjp(Fs, sel_leaves)
            return apply(lambda u: jax.jvp(Fs, (sel_leaves,), (u,))[1], lambda ct: vjp(ct)[0], v)

        def fn(v):
            return product(sel, frozen, x, v)

    return EntkOperator(fn, dim, dtype, reduction, C)


# --------------------------------------------------------------------------------------------------
# the mean-logit reduction (Paper B's transformer kernels)
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def mean_logit(f):
    r"""The scalar model :math:`\bar f(\theta, x) = \frac1C \sum_c f_c(\theta, x)`, as ``(1,)`` output.

    Its eNTK is the full kernel averaged over all :math:`C \times C` pairs of outputs,

    .. math:: \bar K(x, x') = \frac{1}{C^2} \sum_{c, d} K_{cd}(x, x')
              = \nabla_\theta \bar f(x) \cdot \nabla_\theta \bar f(x'),

    the reduction Paper B's author applies to the transformer's layer-wise kernels.  Cached on
    ``f`` so that repeated calls reuse the engine's compiled functions.
    """

    def fbar(params, x):
        out = f(params, x)
        return jnp.mean(out, axis=-1, keepdims=True)

    return fbar


def entk_mean_logit(
    f,
    params,
    x1,
    x2=None,
    *,
    layers: Mapping[str, Filter] | None = None,
    param_filter: Filter = None,
    batch_size: int | None = None,
):
    r"""The **mean-logit** eNTK: ``(N1, N2)``, the full kernel averaged over all ``C × C`` output pairs.

    Equal to ``entk(f, ..., reduction="full").mean(axis=(2, 3))`` but computed from the gradient
    of the mean output (one reverse pass per example instead of ``C``), i.e. ``C²`` times less
    contraction work than ``"full"`` and ``C`` times less than ``"class_mean"``.  With ``layers``
    (a mapping name -> filter, as :func:`entk_layerwise`) it returns ``{name: kernel}`` from one
    Jacobian pass; otherwise one kernel restricted by ``param_filter``.

    When it agrees with ``"class_mean"``: write :math:`f = W_U^\top h` with :math:`h` the final
    hidden state and :math:`k_{mn}(x,x') = \partial_\theta h_m(x) \cdot \partial_\theta h_n(x')`
    for the selected parameters.  Then the mean-logit kernel is :math:`u^\top k\, u` with
    :math:`u = W_U \mathbf 1 / C`, the class mean :math:`\operatorname{tr}(W_U^\top k W_U)/C`; they
    are proportional whenever :math:`k_{mn} = \delta_{mn} \kappa`, e.g. for the weights ``W`` of a
    last hidden layer ``h = W^T a`` (:math:`\kappa = a \cdot a'`).  For ``W_U`` itself
    :math:`K_{cd} = \delta_{cd}\, h \cdot h'`, so both are multiples of :math:`h \cdot h'` too.
    """
    fbar = mean_logit(f)
    if layers is not None:
        if param_filter is not None:
            raise InputError("pass either layers or param_filter, not both")
        return entk_layerwise(fbar, params, x1, x2, layers=layers, reduction="class", class_index=0,
                              batch_size=batch_size)
    return entk(fbar, params, x1, x2, reduction="class", class_index=0, param_filter=param_filter,
                batch_size=batch_size)


def entk_matvec_mean_logit(f, params, x, *, param_filter: Filter = None,
                           reuse_forward: bool = True) -> EntkOperator:
    """Matrix-free mean-logit eNTK on ``x``: ``v (N,) -> K̄ v`` (one VJP and one JVP of the mean
    output per product); see :func:`entk_mean_logit` and :func:`entk_matvec`."""
    return entk_matvec(mean_logit(f), params, x, reduction="class", class_index=0,
                       param_filter=param_filter, reuse_forward=reuse_forward)
