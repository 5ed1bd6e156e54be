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

Precision (``precision=`` of the materialised functions, :data:`PRECISIONS`)
    ``"model"`` (default): nothing is cast; the Jacobians, their products and the kernel have the
    dtype of the model's outputs: float64 when the caller has enabled
    ``jax.config.update("jax_enable_x64", True)`` and passes float64 parameters and inputs.  When
    the inputs and the parameters mix floating dtypes, or the kernel comes out narrower than the
    widest of them (float32 from float64 inputs), it warns (``UserWarning``) rather than casting,
    since a cast would change what the caller's model computes.

    ``"float64"``: float64 throughout: the floating parameters and inputs are cast to float64 for
    the Jacobians (a no-op when they already are: then the kernel is ``"model"``'s, bit for bit),
    float64 products, a float64 kernel.  The reference the others are measured against; needs
    ``jax_enable_x64`` (else ``InputError``).

    ``"float32_jacobians"``: the floating parameters and inputs are cast to float32 for the
    Jacobians only, which are formed and held in float32 (half the memory of float64, so twice the
    rows fit in a memory budget); each leaf's product multiplies them exactly and accumulates in
    float64 (``preferred_element_type``), and the kernel is float64.  Its only rounding beyond
    float64's is each Jacobian entry's to float32 (relative 6e-8), so a kernel entry moves by about
    1e-7 of the largest entries, and an eigenvalue by at most the spectral norm of that
    perturbation (Weyl's inequality): the small eigenvalues lose the most relative precision.  Needs ``jax_enable_x64`` (else ``InputError``).  XLA's CPU backend has no
    mixed-precision matrix product: it widens the operands to float64 and multiplies in float64, so
    the product costs what float64's does (it is widened slab by slab, :func:`_widening_dot`, so
    that no float64 copy of a whole Jacobian is made).  What it buys on CPU is memory, and with it
    fewer panels: the modular MLP's class-mean kernel (N = 841, width 512) holds 4 GB of
    Jacobians instead of 8 GB (benchmarks/README.md).

    ``"float32"``: float32 throughout: float32 Jacobians, float32 products and accumulation, a
    float32 kernel: about twice as fast as float64 on CPU, half the memory.  Summing ``P``
    products in float32 adds an error that grows with ``P``: on that modular MLP kernel the
    eigenvalues moved by up to 1e-6 relative against float64's 1e-7 for ``"float32_jacobians"``
    (tests/test_entk_precision.py); the cliffs and Fourier overlaps did not move for either.

    The parameters a model holds are never changed, and this module never changes JAX's global
    configuration.  Contractions use ``precision=jax.lax.Precision.HIGHEST`` so that GPUs do not
    silently use TF32.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey, keystr, tree_flatten_with_path

from ntkbook.errors import InputError, NumericalError
from ntkbook.ntk import structured
from ntkbook.ntk.operator import KernelOperator, check_finite
from ntkbook.ntk.structured import ROUTES, Route

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
    "KernelPlan",
    "plan_kernel",
    "DEFAULT_MEMORY_BUDGET", "default_memory_budget", "available_memory", "check_fits",
    "PRECISIONS",
    "ROUTES", "Route", "kernel_routes", "describe_routes", "leaf_label", "recording_routes",
]

REDUCTIONS = ("full", "class", "class_mean", "flat")
#: the ``precision=`` choices of the materialised kernels (see the module docstring)
PRECISIONS = ("model", "float64", "float32_jacobians", "float32")
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
#: the memory budget of a materialised eNTK when the caller names none (bytes). A constant, so that
#: the plan (panels, chunks), and with it every bit of the kernel, is a function of the shapes
#: alone, never of what else the machine runs; pass ``memory_budget=`` for more (a GPU) or less.
#: 12 GiB holds the book's largest kernel (the transformer's 841 x 841, 10 GB of Jacobians) whole.
DEFAULT_MEMORY_BUDGET = 12 << 30


def default_memory_budget() -> int:
    """Bytes the materialised eNTK may hold at once when the caller names none:
    :data:`DEFAULT_MEMORY_BUDGET`, whatever the machine has free (a budget read from the free
    memory made the float rounding of a kernel depend on the machine's load)."""
    return DEFAULT_MEMORY_BUDGET


def available_memory() -> int | None:
    """Bytes free now (the first accelerator's, else Linux's ``MemAvailable``; None if unknown).
    Only to refuse a plan that cannot fit (:func:`check_fits`), never to choose one."""
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(plan: "KernelPlan", free: int | None = None) -> None:
    """Refuse, before any work, a plan that needs more memory than is free (``free``: bytes,
    default :func:`available_memory`): a clear error instead of an allocation failure midway,
    and no silent change of plan (which would change the kernel's rounding)."""
    free = available_memory() if free is None else free
    if free is not None and plan.peak_bytes > free:
        gb = lambda b: f"{b / 2**30:.3g} GiB"  # noqa: E731
        raise InputError(
            f"this eNTK needs {gb(plan.peak_bytes)} at once (Jacobians and kernel within the memory "
            f"budget of {gb(plan.budget)}) but only {gb(free)} is free. Free memory, or pass a "
            f"smaller memory_budget= (more panels: the same kernel up to float round-off, not the "
            f"same bits as the default plan's).")


@functools.lru_cache(maxsize=16)
def _make_jacobian_fn(f, treedef, n_leaves, sel_idx, reduction, class_index):
    """A jitted function: a chunk of inputs ``(b, ...)`` -> the per-example Jacobians of the
    selected leaves, one ``(b, C', P_i)`` array per leaf (``C' = 1`` for ``"class"``, else ``C``).
    Cached, so repeated calls with the same model and structure reuse the compiled function."""

    def f_sel(sel_leaves, frozen, x):
        out = f(_rebuild(treedef, n_leaves, sel_idx, sel_leaves, frozen), x)
        if reduction == "class":
            out = out[class_index][None]
        return out

    jac_one = jax.jacrev(f_sel)  # list of (C', *leaf_shape)

    @jax.jit
    def jacobians(sel_leaves, frozen, xb):
        js = jax.vmap(jac_one, in_axes=(None, None, 0))(sel_leaves, frozen, xb)
        return tuple(j.reshape(j.shape[0], j.shape[1], -1) for j in js)

    return jacobians


def _aval(a) -> tuple:
    return tuple(a.shape), str(a.dtype)


@functools.lru_cache(maxsize=16)
def _make_routed_fn(f, treedef, n_leaves, sel_idx, names, reduction, class_index, route,
                    sel_avals, frozen_avals, x_aval):
    """``(routes, jacobians)`` for ``route`` (:data:`ROUTES`) at these shapes: one
    :class:`Route` per selected leaf (:func:`ntkbook.ntk.structured.plan_routes`) and, when some
    leaf is structured, a jitted function from a chunk of inputs ``(b, ...)`` to a flat tuple of
    arrays per leaf in order: its Jacobian ``(b, C', P_i)``, or its factors ``H (b, T, K)`` and ``D
    (b, C', T, O)`` (None when no leaf is: the caller keeps :func:`_make_jacobian_fn`). Cached
    like it."""

    def f_sel(sel_leaves, frozen, x):
        out = f(_rebuild(treedef, n_leaves, sel_idx, sel_leaves, frozen), x)
        if reduction == "class":
            out = out[class_index][None]
        return out

    spec = lambda av: jax.ShapeDtypeStruct(*av)  # noqa: E731
    closed = jax.make_jaxpr(f_sel)([spec(a) for a in sel_avals], [spec(a) for a in frozen_avals],
                                   spec(x_aval))
    routes = structured.plan_routes(closed, names, route=route, reduction=reduction)
    if not any(r.structured for r in routes):
        return tuple(routes), None
    one = structured.factor_fn(closed, routes)

    @jax.jit
    def jacobians(sel_leaves, frozen, xb):
        return jax.vmap(one, in_axes=(None, None, 0))(sel_leaves, frozen, xb)

    return tuple(routes), jacobians


def _check_route(route: str) -> None:
    if route not in ROUTES:
        raise InputError(f"unknown route {route!r}; choose one of {ROUTES}: 'auto' takes each "
                         f"parameter leaf the cheaper way, 'jacobians' forms every per-example "
                         f"Jacobian, 'structured' takes every dense product by its two Gram "
                         f"matrices (module docstring of ntkbook.ntk.structured)")


def leaf_label(name: str) -> str:
    """A leaf's key path as a reader reads it: ``"['dense1']['w']"`` -> ``"dense1.w"``,
    ``"['layers'][0]['kernel'].value"`` -> ``"layers.0.kernel.value"``."""
    return re.sub(r"\[(?:'([^']*)'|\"([^\"]*)\"|(\d+))\]", lambda m: "." + next(g for g in m.groups() if g is not None),
                  name).lstrip(".")


def describe_routes(routes: Sequence[Route]) -> str:
    """One line: which leaves a kernel takes by structured derivatives and which by Jacobians."""
    st = [r.name for r in routes if r.structured]
    why: dict[str, list[str]] = {}  # reason -> the leaves taken by Jacobians for it
    for r in routes:
        if not r.structured:
            why.setdefault(r.why, []).append(r.name)
    parts = []
    if st:
        parts.append("structured derivatives for " + ", ".join(st))
    if why:
        parts.append("Jacobians for " + "; ".join(", ".join(names) + (f" ({w})" if w else "")
                                                  for w, names in why.items()))
    return "eNTK route: " + "; ".join(parts)


#: the route lines of the kernels computed while :func:`recording_routes` is active (a stack of
#: sets, one per active recording), and the lines already printed by this process
_RECORDING: list[set] = []
_PRINTED: set = set()


class recording_routes:
    """``with recording_routes() as lines:`` collects, in the set ``lines``, the route line
    (:func:`describe_routes`) of every materialised kernel computed inside: what
    :mod:`ntkbook.experiments` stores in a result's provenance (``entk_routes``)."""

    def __enter__(self) -> set:
        self.lines: set = set()
        _RECORDING.append(self.lines)
        return self.lines

    def __exit__(self, *exc) -> None:
        _RECORDING.remove(self.lines)


def _report_route(line: str) -> None:
    """Record ``line`` in every active recording; print it the first time this process sees it."""
    for lines in _RECORDING:
        lines.add(line)
    if line not in _PRINTED:
        _PRINTED.add(line)
        print(line, flush=True)


#: bytes of one slab of a widened Jacobian (see :func:`_widening_dot`)
SLAB_BYTES = 64 << 20


def _widening_dot(a, b, accumulate: str):
    """``a @ b.T`` of ``a (n, P)`` and ``b (m, P)`` accumulated in the wider dtype ``accumulate``.

    XLA's CPU backend has no mixed-precision matrix product: with ``preferred_element_type`` it
    widens both operands to ``accumulate`` first, i.e. a float64 copy of the whole Jacobian. Here
    the parameter axis goes in slabs of about :data:`SLAB_BYTES` (at least 512 columns), each slab
    widened and multiplied in turn and the products summed, so that only one slab's wide copy
    exists at a time."""
    P = a.shape[1]
    width = max(512, SLAB_BYTES // (jnp.dtype(accumulate).itemsize * max(a.shape[0], b.shape[0])))
    dot = functools.partial(jnp.dot, precision=_HIGHEST, preferred_element_type=accumulate)
    if P <= width:
        return dot(a, b.T)
    n_full = P // width

    def add_slab(s, acc):
        sa = jax.lax.dynamic_slice_in_dim(a, s * width, width, axis=1)
        sb = jax.lax.dynamic_slice_in_dim(b, s * width, width, axis=1)
        return acc + dot(sa, sb.T)

    acc = jax.lax.fori_loop(0, n_full, add_slab, jnp.zeros((a.shape[0], b.shape[0]), accumulate))
    if P > n_full * width:
        acc = acc + dot(a[:, n_full * width:], b[:, n_full * width:].T)
    return acc


@functools.lru_cache(maxsize=16)
def _make_contract_fn(groups, reduction, C, accumulate=None, layout=None):
    """A jitted function ``(J1, J2) -> one kernel block per group`` from the per-leaf Jacobians of
    two sets of inputs (``(n, C', P_i)`` and ``(m, C', P_i)``), each product accumulated in the
    dtype ``accumulate`` (a name, e.g. ``"float64"``, by :func:`_widening_dot`; None: the
    Jacobians' dtype).

    Each selected leaf is contracted once, as one matrix product, and added to every group holding
    it: for ``"full"``/``"flat"`` ``(n C', P_i) @ (P_i, m C')``, whose ``(n C', m C')`` result is
    the flat layout itself (row ``n*C' + c``); for ``"class"``/``"class_mean"`` ``(n, C' P_i) @
    (C' P_i, m)``, which sums over the matching outputs and the parameters at once. Blocks come in
    the output layout: ``(n, m, C, C)`` for ``"full"``, ``(n C, m C)`` for ``"flat"``, ``(n, m)``
    otherwise.

    ``layout`` (None: leaf ``i`` is ``J[i]``) gives, per selected leaf, ``(slot, structured,
    scale)``: where its arrays start in ``J1``/``J2`` and, for a structured leaf, that they are
    its two factors ``H``, ``D``, contracted by :func:`ntkbook.ntk.structured.contract_factors`
    (the arrays :func:`_make_routed_fn` forms)."""
    leaves = sorted({i for g in groups for i in g})

    def dot_t(a, b):  # a @ b.T
        if accumulate is None:
            return jnp.dot(a, b.T, precision=_HIGHEST)
        return _widening_dot(a, b, accumulate)

    @jax.jit
    def contract(j1, j2):
        per_leaf = {}
        for i in leaves:
            slot, factored, scale = (i, False, 1.0) if layout is None else layout[i]
            if factored:
                per_leaf[i] = structured.contract_factors(j1[slot:slot + 2], j2[slot:slot + 2], scale,
                                                          reduction, dot_t)
                continue
            a, b = j1[slot], j2[slot]
            n, m, c = a.shape[0], b.shape[0], a.shape[1]
            if reduction in ("full", "flat"):
                k = dot_t(a.reshape(n * c, -1), b.reshape(m * c, -1))
                if reduction == "full":
                    k = k.reshape(n, c, m, c).transpose(0, 2, 1, 3)
            else:
                k = dot_t(a.reshape(n, -1), b.reshape(m, -1))
            per_leaf[i] = k
        outs = []
        for g in groups:
            k = functools.reduce(jnp.add, (per_leaf[i] for i in g))
            outs.append(k / C if reduction == "class_mean" else k)
        return tuple(outs)

    return contract


def _transpose_block(k, reduction):
    """Block (j, i) of a symmetric kernel from block (i, j), in the output layout."""
    if reduction == "full":
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


@dataclasses.dataclass(frozen=True)
class KernelPlan:
    """How :func:`entk` forms a materialised kernel within a memory budget.

    Every Jacobian is formed in chunks of ``chunk`` inputs. When the Jacobians of all inputs fit
    in the budget beside the kernel (``panel_rows`` = all rows of ``x1``), each is formed exactly
    once and every leaf is contracted in one matrix product. Otherwise the rows of ``x1`` go in
    panels of ``panel_rows`` whose Jacobians are held while the chunks of ``x2`` (of ``x1`` itself,
    right of the diagonal, when ``x2`` is None) stream past, each chunk's Jacobian formed once per
    panel: ``max_formations`` times at most.
    """

    n1: int  # rows of x1
    n2: int  # rows of x2 (of x1 when symmetric)
    symmetric: bool  # x2 is None: only blocks on and above the diagonal are computed
    chunk: int  # inputs per Jacobian formation
    panel_rows: int  # rows of x1 whose Jacobians are held at once
    row_bytes: int  # bytes of one input's Jacobian (C' x P_selected)
    kernel_bytes: int  # bytes of the kernel
    budget: int  # the memory budget (bytes)

    @property
    def panels(self) -> int:
        return -(-self.n1 // self.panel_rows)

    @property
    def peak_bytes(self) -> int:
        """Bytes held at once: every Jacobian and the kernel, or (in panels) at most the budget."""
        need = (self.n1 + (0 if self.symmetric else self.n2)) * self.row_bytes + self.kernel_bytes
        return need if self.panels == 1 else min(need, self.budget)

    @property
    def max_formations(self) -> int:
        """How many times the Jacobian of one input is formed, at most."""
        return 1 if self.panels == 1 else self.panels

    def describe(self) -> str:
        gb = lambda b: f"{b / 2**30:.2g} GB"  # noqa: E731
        need = (self.n1 + (0 if self.symmetric else self.n2)) * self.row_bytes
        if self.panels == 1:
            return (f"eNTK {self.n1} x {self.n2}: Jacobians ({gb(need)}) and kernel ({gb(self.kernel_bytes)}) "
                    f"fit in the memory budget ({gb(self.budget)}): each Jacobian formed once")
        return (f"eNTK {self.n1} x {self.n2}: Jacobians ({gb(need)}) exceed the memory budget "
                f"({gb(self.budget)}): {self.panels} panels of {self.panel_rows} rows; the other "
                f"inputs' Jacobians are formed up to {self.max_formations} times (memory_budget= "
                f"raises the budget)")


def plan_kernel(n1: int, n2: int | None, row_bytes: int, kernel_bytes: int, *,
                batch_size: int | None = None, memory_budget: int | None = None) -> KernelPlan:
    """The :class:`KernelPlan` for ``n1`` (and ``n2``; None: symmetric) inputs whose Jacobians
    take ``row_bytes`` each, a kernel of ``kernel_bytes``, Jacobians formed ``batch_size`` inputs
    at a time (None: as many as fit), within ``memory_budget`` bytes (None:
    :func:`default_memory_budget`)."""
    budget = default_memory_budget() if memory_budget is None else int(memory_budget)
    if budget < 1:
        raise InputError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
    symmetric = n2 is None
    n2_ = n1 if symmetric else n2
    free = max(budget - kernel_bytes, row_bytes)
    total_rows = n1 + (0 if symmetric else n2_)
    if total_rows * row_bytes <= free:
        chunk = batch_size or max(n1, n2_)
        return KernelPlan(n1, n2_, symmetric, min(chunk, max(n1, n2_)), n1, row_bytes, kernel_bytes, budget)
    # half the free memory for a panel of x1 rows, the rest for one streamed chunk and its block
    chunk = batch_size or max(1, min(max(n1, n2_), free // (4 * row_bytes)))
    panel = max(chunk, (free // 2 // row_bytes) // chunk * chunk)
    return KernelPlan(n1, n2_, symmetric, chunk, min(panel, n1), row_bytes, kernel_bytes, budget)


def _jacobians_of(jacobians, sel, frozen, x, chunk):
    """Per-leaf Jacobians of all rows of ``x``, formed ``chunk`` rows at a time (padding dropped)."""
    parts = []
    for c, n in zip(*_chunks(x, chunk)):
        parts.append([j[:n] for j in jacobians(sel, frozen, c)])
    return tuple(jnp.concatenate(js, axis=0) if len(js) > 1 else js[0] for js in zip(*parts))


def _check_precision(precision: str) -> tuple[str | None, str | None]:
    """``(Jacobian dtype, accumulation dtype)`` of a ``precision=`` choice (None: the model's)."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; choose one of {PRECISIONS} (see the "
                         f"module docstring of ntkbook.ntk.entk for what each costs)")
    if precision in ("float64", "float32_jacobians") and not jax.config.jax_enable_x64:
        raise InputError(
            f'precision="{precision}" computes the kernel in float64, which needs jax_enable_x64: '
            f'compute inside `with jax.enable_x64(True):` (or call '
            f'jax.config.update("jax_enable_x64", True) first), or choose precision="float32"'
        )
    return {"model": (None, None), "float64": ("float64", None),
            "float32_jacobians": ("float32", "float64"), "float32": ("float32", None)}[precision]


def _cast_floating(a, dtype):
    """``a`` in ``dtype`` when it holds floating values; integer arrays (token ids) unchanged."""
    return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a


def _kernels(f, params, x1, x2, groups_filters, reduction, class_index, batch_size, what,
             memory_budget=None, precision="model", route="auto"):
    jac_dtype, accumulate = _check_precision(precision)
    _check_route(route)
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
    xs = (x1, x2)
    if jac_dtype is not None:  # parameters and inputs cast for the Jacobians only
        sel, frozen = ([_cast_floating(a, jac_dtype) for a in leaves] for leaves in (sel, frozen))
        xs = tuple(None if x is None else _cast_floating(x, jac_dtype) for x in xs)

    # the route of every selected leaf: Jacobians, or the two factors of structured derivatives
    routes, routed = (None, None) if route == "jacobians" else _make_routed_fn(
        f, ps.treedef, len(ps.leaves), tuple(sel_idx), tuple(ps.names[i] for i in sel_idx), reduction,
        class_index, route, tuple(_aval(a) for a in sel), tuple(_aval(a) for a in frozen), _aval(xs[0][0]))
    if routed is None:
        jacobians = _make_jacobian_fn(f, ps.treedef, len(ps.leaves), tuple(sel_idx), reduction, class_index)
        contract = _make_contract_fn(groups, reduction, C, accumulate)
    else:
        jacobians = routed
        slots = np.cumsum([0] + [2 if r.structured else 1 for r in routes])
        layout = tuple((int(slots[i]), r.structured, r.scale) for i, r in enumerate(routes))
        contract = _make_contract_fn(groups, reduction, C, accumulate, layout)
    _report_route(describe_routes(routes or [Route(ps.names[i], False, "route='jacobians'")
                                             for i in sel_idx]))

    # the plan: bytes of one input's Jacobians (or factors) and of the kernels, against the budget
    out_dtype = jax.eval_shape(lambda p, x: f(p, x), params, x1[0]).dtype
    jac_itemsize = jnp.dtype(jac_dtype or out_dtype).itemsize
    kernel_itemsize = jnp.dtype(accumulate or jac_dtype or out_dtype).itemsize
    c_out = 1 if reduction == "class" else C
    n1, n2 = x1.shape[0], (None if x2 is None else x2.shape[0])
    per_pair = c_out * c_out if reduction in ("full", "flat") else 1
    row = c_out * sum(int(sel[i].size) for i in range(len(sel)))
    transient = 0  # a structured leaf's Gram matrices of positions, beside the kernel
    if routed is not None:
        row = sum(r.T * (r.K + c_out * r.O) if r.structured else c_out * r.size for r in routes)
        transient = max((2 * r.T * r.T for r in routes if r.structured), default=0)
        transient += 2 * per_pair if transient and reduction in ("full", "flat") else 0
    plan = plan_kernel(n1, n2, row * jac_itemsize,
                       (len(groups) * per_pair + transient) * n1 * (n2 or n1) * kernel_itemsize,
                       batch_size=batch_size, memory_budget=memory_budget)
    check_fits(plan)

    if plan.panels == 1:  # every Jacobian formed once, one product per leaf
        j1 = _jacobians_of(jacobians, sel, frozen, xs[0], plan.chunk)
        j2 = j1 if x2 is None else _jacobians_of(jacobians, sel, frozen, xs[1], plan.chunk)
        ks = contract(j1, j2)
    else:
        ks = _panelled(jacobians, contract, sel, frozen, *xs, plan, len(groups), reduction)

    if precision == "model":  # a stated precision casts on purpose: nothing to warn about
        _warn_on_dtypes([x for x in (x1, x2) if x is not None], ps.leaves, ks[0].dtype)
    for k in ks:
        if _is_concrete(k) and not bool(jnp.all(jnp.isfinite(k))):
            raise NumericalError(
                "the eNTK has non-finite entries although inputs and parameters are finite: the "
                "model's outputs or gradients overflow at these parameters (a diverged training "
                "run?). Use float64 (jax_enable_x64"
                + (', and precision="float64"' if jac_dtype == "float32" else "")
                + ") or check the parameters."
            )
    return ks


def _split_rows(k, sizes, reduction):
    """Split a block along its rows into pieces of ``sizes`` inputs (output layout)."""
    per = k.shape[0] // sum(sizes)  # C rows per input in the flat layout, else 1
    cuts = np.cumsum([s * per for s in sizes])[:-1]
    return jnp.split(k, cuts, axis=0)


def _panelled(jacobians, contract, sel, frozen, x1, x2, plan: KernelPlan, n_groups, reduction):
    """The kernel block by block when the Jacobians do not all fit (:class:`KernelPlan`): a panel
    of ``x1`` rows held, the column chunks streamed past it; progress reported with the plan.

    Panels are whole chunks (``panel_rows`` is a multiple of ``chunk``), so the kernel is a grid of
    chunk x chunk blocks; in the symmetric case the blocks below the diagonal are transposes."""
    from ntkbook.progress import Progress

    row_chunks, row_sizes = _chunks(x1, plan.chunk)
    col_chunks, col_sizes = (row_chunks, row_sizes) if x2 is None else _chunks(x2, plan.chunk)
    per_panel = plan.panel_rows // plan.chunk
    panels = [range(r, min(r + per_panel, len(row_chunks))) for r in range(0, len(row_chunks), per_panel)]
    grid = [dict() for _ in range(n_groups)]  # (row chunk, column chunk) -> block
    todo = sum(len([c for c in range(len(col_chunks)) if x2 is not None or c >= rows[0]]) for rows in panels)
    print(plan.describe(), flush=True)
    with Progress(todo, desc=f"eNTK blocks ({plan.panels} panels)") as bar:
        for rows in panels:
            held = [[j[:row_sizes[r]] for j in jacobians(sel, frozen, row_chunks[r])] for r in rows]
            jp = tuple(jnp.concatenate(js, axis=0) for js in zip(*held))
            sizes = [row_sizes[r] for r in rows]
            for c in range(len(col_chunks)):
                if x2 is None and c < rows[0]:
                    continue  # below the diagonal: a transpose of a block computed earlier
                if x2 is None and c in rows:  # one of the panel's own chunks: already formed
                    jc = tuple(held[c - rows[0]])
                else:
                    jc = tuple(j[:col_sizes[c]] for j in jacobians(sel, frozen, col_chunks[c]))
                out = contract(jp, jc)
                for g in range(n_groups):
                    for r, piece in zip(rows, _split_rows(out[g], sizes, reduction)):
                        grid[g][r, c] = piece
                bar.update()
    ks = []
    for g in range(n_groups):
        def block(r, c, g=g):
            if (r, c) in grid[g]:
                return grid[g][r, c]
            return _transpose_block(grid[g][c, r], reduction)
        ks.append(jnp.concatenate([jnp.concatenate([block(r, c) for c in range(len(col_chunks))], axis=1)
                                   for r in range(len(row_chunks))], axis=0))
    return tuple(ks)


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
    memory_budget: int | None = None,
    precision: str = "model",
    route: str = "auto",
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
    batch_size : form the per-example Jacobians at most ``batch_size`` examples at a time (None: as
        many as the memory budget allows).
    memory_budget : bytes the Jacobians and the kernel may take at once (None:
        :data:`DEFAULT_MEMORY_BUDGET`, 12 GiB, on every machine; a plan that needs more than is
        free is refused with the reason, :func:`check_fits`). When the Jacobians of all inputs
        fit, each is formed exactly once and each parameter leaf is contracted in one matrix
        product; otherwise the kernel is assembled from panels of rows, and the other inputs'
        Jacobians are formed once per panel, which the run reports (:class:`KernelPlan`,
        :func:`plan_kernel`). With ``x2=None`` only the blocks on and above the diagonal are
        computed. The kernel's values do not depend on the plan beyond float round-off, and the
        plan depends only on the shapes, ``batch_size`` and ``memory_budget``: the same call gives
        the same bits whatever the machine's free memory.
    precision : ``"model"`` (default: the dtype of the model's outputs, nothing cast),
        ``"float64"`` (float64 throughout; needs ``jax_enable_x64``), ``"float32_jacobians"`` (float32 Jacobians, products accumulated in float64, a float64
        kernel; needs ``jax_enable_x64``) or ``"float32"`` (float32 throughout); the module
        docstring says what each costs and buys.
    route : ``"auto"`` (default), ``"jacobians"`` or ``"structured"`` (:data:`ROUTES`): how each
        parameter leaf's part is formed. ``"jacobians"``: from its per-example Jacobians, obtained
        by ``vmap(jacrev(f))`` over examples (``C`` reverse passes per example; for ``"class"``
        only the one needed output is differentiated) and contracted. ``"structured"``: a leaf
        that enters ``f`` through one matrix product (a dense layer) from two small Gram
        matrices instead, :eq:`structured-entk` of :mod:`ntkbook.ntk.structured`, the others by
        Jacobians. ``"auto"``: each leaf the way that costs fewer multiply-adds
        (:func:`ntkbook.ntk.structured.costs`). The routes agree to float round-off; the route
        taken is printed once per process (:func:`describe_routes`) and recorded in a result's
        provenance (:class:`recording_routes`); :func:`kernel_routes` says it beforehand.
    """
    (k,) = _kernels(f, params, x1, x2, [(None, param_filter)], reduction, class_index, batch_size,
                    "param_filter", memory_budget, precision, route)
    return k


def kernel_routes(f, params, x1, *, reduction: str = "full", class_index: int | None = None,
                  param_filter: Filter = None, precision: str = "model",
                  route: str = "auto") -> list[Route]:
    """The route :func:`entk` takes for each parameter leaf ``param_filter`` selects (same
    arguments), without computing a kernel: one :class:`ntkbook.ntk.structured.Route` per leaf,
    in pytree order, with the reason for each leaf taken by Jacobians."""
    jac_dtype, _ = _check_precision(precision)
    _check_route(route)
    x1, _ = _check_inputs(x1, None)
    ps = _Params(params)
    _check_reduction(reduction, class_index, _num_outputs(f, params, x1[0]))
    sel_idx = ps.indices(param_filter)
    sel, frozen = ps.split(sel_idx)
    x_one = x1[0]
    if jac_dtype is not None:
        sel, frozen = ([_cast_floating(a, jac_dtype) for a in leaves] for leaves in (sel, frozen))
        x_one = _cast_floating(x_one, jac_dtype)
    if route == "jacobians":
        return [Route(ps.names[i], False, "route='jacobians'", int(ps.leaves[i].size)) for i in sel_idx]
    routes, _ = _make_routed_fn(f, ps.treedef, len(ps.leaves), tuple(sel_idx),
                                tuple(ps.names[i] for i in sel_idx), reduction, class_index, route,
                                tuple(_aval(a) for a in sel), tuple(_aval(a) for a in frozen), _aval(x_one))
    return list(routes)


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
    memory_budget: int | None = None,
    precision: str = "model",
    route: str = "auto",
) -> dict[str, jax.Array]:
    """Layer-wise eNTKs ``{name: kernel}``, one per filter of ``layers``, from one Jacobian pass.

    ``layers`` maps names to parameter filters (as ``param_filter`` of :func:`entk`).  By default it is
    :func:`default_layers`: one group per parent path of the leaves (e.g. one per ``Linear`` layer),
    which partitions the parameters, so the layer-wise kernels then sum to the full kernel.  Each
    Jacobian is formed once (within ``memory_budget``, as :func:`entk`) and each parameter leaf is
    contracted once, into every layer that holds it.  A filter selecting no parameter raises
    ``InputError``.  ``precision`` and ``route`` as :func:`entk`.
    """
    if layers is None:
        layers = default_layers(params)
    if not layers:
        raise InputError("layers must name at least one parameter filter")
    names = list(layers)
    ks = _kernels(f, params, x1, x2, [(n, layers[n]) for n in names], reduction, class_index,
                  batch_size, "layer", memory_budget, precision, route)
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


#: residuals up to this many bytes are compiled into entk_matvec's product as constants (see there)
_CONSTANT_RESIDUALS_BYTES = 64 * 2**20


def _save_all_but_broadcasts(prim, *_, **__) -> bool:
    """``jax.checkpoint`` policy of :func:`entk_matvec`'s linearisation: keep every residual except
    the outputs of ``broadcast_in_dim`` and ``iota``, which the linear map recomputes (a broadcast
    costs nothing inside the fusion that reads it; stored, it is an array read from memory in
    every product)."""
    return prim.name not in ("broadcast_in_dim", "iota")


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
    ``J^T v``), in one jitted function traced and compiled once per operator, at its first product;
    later products run the compiled code (no retracing).  Memory: the residuals of one forward pass
    over all ``N`` examples.

    Two choices make the product cheaper than a plain linearise-and-transpose:

    * the residuals leave out the outputs of ``broadcast_in_dim`` and ``iota`` (a
      ``jax.checkpoint`` policy around the model): the linear map recomputes them, for free inside
      the fused loops that read them, instead of reading them from memory in every product.
      Without it ``jax.linearize`` stores, e.g., the zeros of ReLU's derivative
      (``where(x > 0, dx, 0)``) and a causal mask at the activations' full batched shape;
    * residuals up to ``_CONSTANT_RESIDUALS_BYTES`` (64 MiB) in all are compiled into the product as
      constants, so that XLA lays them out for the products that read them once, at compile time,
      instead of transposing them in every product; larger ones are passed to it as arguments
      (a constant is a second copy, inside the compiled code, and lengthens compilation).

    Cost: a product is about four forward passes of arithmetic (XLA's flop count of the product is
    4.0 times the forward pass's on both transformers of ``benchmarks/bench_entk.py``): each matrix
    product ``y = a W`` of the model becomes ``da W + a dW`` in ``J u`` and ``dy W^T``, ``a^T dy``
    in ``J^T v``.  On the benchmark's one-layer transformer (841 inputs, float64, 2 loaded CPU
    cores) the two choices above cut the residuals from 19.5 to 14.4 MiB and the product from
    4.4-5.0 to 3.5-3.6 forward passes in summed per-operation times (profiler minima), 0.86x the
    time of a plain linearise-and-transpose in interleaved wall-clock repeats.  What remains above
    the matrix products themselves is mostly layout transposes XLA inserts for the weight gradients
    ``a^T dy``.  Computing ``J^T v`` with ``jax.vjp`` (a second set of residuals) was not faster.

    ``reuse_forward=False`` instead runs ``jax.vjp`` and ``jax.jvp`` of ``F`` inside each product
    (recomputing the forward pass; lower resident memory).
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
        # (prevent_cse=False: no saved forward pass is compiled with the product for XLA's common-
        # subexpression elimination to merge the recomputed broadcasts into; True gave more loops)
        lin = jax.jit(lambda s, fr, xx: jax.linearize(
            jax.checkpoint(lambda t: F(t, fr, xx), policy=_save_all_but_broadcasts, prevent_cse=False),
            s)[1])(sel, frozen, x)
        sel_like = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), sel)

        def linear_product(lin, v):
            transpose = jax.linear_transpose(lin, sel_like)
            return apply(lin, lambda ct: transpose(ct)[0], v)

        residual_bytes = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(lin))
        if residual_bytes <= _CONSTANT_RESIDUALS_BYTES:
            fn = jax.jit(lambda v: linear_product(lin, v))  # residuals: compile-time constants
        else:
            product = jax.jit(linear_product)

            def fn(v):
                return product(lin, v)
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
    memory_budget: int | None = None,
    precision: str = "model",
    route: str = "auto",
):
    r"""The **mean-logit** eNTK: ``(N1, N2)``, the full kernel averaged over all ``C × C`` output pairs.

    Equal to ``entk(f, ..., reduction="full").mean(axis=(2, 3))`` but computed from the gradient
    of the mean output (one reverse pass per example instead of ``C``), i.e. ``C²`` times less
    contraction work than ``"full"`` and ``C`` times less than ``"class_mean"``.  With ``layers``
    (a mapping name -> filter, as :func:`entk_layerwise`) it returns ``{name: kernel}`` from one
    Jacobian pass; otherwise one kernel restricted by ``param_filter``.  ``precision`` and
    ``route`` as :func:`entk`.

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
                              batch_size=batch_size, memory_budget=memory_budget, precision=precision,
                              route=route)
    return entk(fbar, params, x1, x2, reduction="class", class_index=0, param_filter=param_filter,
                batch_size=batch_size, memory_budget=memory_budget, precision=precision, route=route)


def entk_matvec_mean_logit(f, params, x, *, param_filter: Filter = None,
                           reuse_forward: bool = True) -> EntkOperator:
    """Matrix-free mean-logit eNTK on ``x``: ``v (N,) -> K̄ v`` (one VJP and one JVP of the mean
    output per product); see :func:`entk_mean_logit` and :func:`entk_matvec`."""
    return entk_matvec(mean_logit(f), params, x, reduction="class", class_index=0,
                       param_filter=param_filter, reuse_forward=reuse_forward)
