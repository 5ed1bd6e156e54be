"""The eNTK's routes (ntkbook.ntk.structured, chosen by ntkbook.ntk.entk's ``route=``): structured
derivatives, the explicit Jacobians and the automatic choice give the kernel of explicit Jacobians
(``jax.jacrev`` of the model, contracted here) in float64 to 1e-12 on every model of the book, for
every reduction, between one set of examples and between two, whole and in panels; leaves the
structured route cannot take go to the Jacobians, each with its reason."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.errors import InputError  # noqa: E402
from ntkbook.gemma import model as gemma_model  # noqa: E402
from ntkbook.gemma import operator as gemma_operator  # noqa: E402
from ntkbook.models import mlp, modular, transformer, two_layer  # noqa: E402
from ntkbook.ntk import entk, structured  # noqa: E402

TOL = 1e-12
REDUCTIONS = ("full", "class_mean", "class", "flat")


def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))


def _modular(activation):
    p = modular.init(jax.random.PRNGKey(0), 7, 16, dtype=jnp.float64)
    return modular.make_apply(activation), p, jnp.asarray(modular.dataset(7)[0][:15])


def _transformer():
    shape = transformer.Shape(p=7, d_model=8, n_heads=2, d_head=4, d_mlp=16)
    p = transformer.init(jax.random.PRNGKey(1), shape, dtype=jnp.float64)
    return transformer.apply, p, jnp.asarray(transformer.dataset(7)[0][:10])


def _transformer_mean_logit():
    f, p, x = _transformer()
    return entk.mean_logit(f), p, x


def _two_layer():
    p = two_layer.init(jax.random.PRNGKey(2), 6, 8, symmetric=False, dtype=jnp.float64)
    x = jax.random.normal(jax.random.PRNGKey(3), (9, 6), jnp.float64)
    return two_layer.apply, p, x


def _mlp():
    p = mlp.init(jax.random.PRNGKey(4), (6, 10, 8, 3), dtype=jnp.float64)
    p = jax.tree_util.tree_map(lambda a: a + 0.1, p)  # nonzero biases
    return mlp.apply, p, jax.random.normal(jax.random.PRNGKey(5), (8, 6), jnp.float64)


def _gemma_layer():
    """The tiny Gemma's layer 1 as a function of its parameters, on residual streams entering it:
    the last position's output (the operator of ntkbook.gemma.operator, materialised)."""
    cfg = gemma_model.GemmaConfig.tiny()
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.float64)
    ctx = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (6, 5), 0, cfg.vocab_size))
    L = 1
    res = jnp.asarray(gemma_operator.compute_residuals(params, cfg, ctx, L, batch=3), jnp.float64)
    rest = gemma_operator.forward_from_params(params)
    theta = {k: params["layers"][k][L] for k in gemma_operator.param_keys("layer")}

    def f(th, h):
        return gemma_model.forward_from(rest, cfg, h, L, layer_L=th)[-1]

    return f, theta, res


MODELS = {"modular_square": lambda: _modular("square"), "modular_relu": lambda: _modular("relu"),
          "transformer": _transformer, "transformer_mean_logit": _transformer_mean_logit,
          "two_layer": _two_layer, "mlp": _mlp, "gemma_layer": _gemma_layer}


def _explicit_full(f, p, x1, x2):
    """``(N1, N2, C, C)`` from the per-example Jacobians of every parameter (``jax.jacrev``),
    flattened and contracted: the definition, independent of the engine."""
    def jac(x):
        js = jax.vmap(jax.jacrev(f), in_axes=(None, 0))(p, x)
        return jnp.concatenate([j.reshape(j.shape[0], j.shape[1], -1) for j in jax.tree_util.tree_leaves(js)],
                               axis=2)
    j1 = jac(x1)
    j2 = j1 if x2 is None else jac(x2)
    return np.einsum("ncp,mdp->nmcd", np.asarray(j1), np.asarray(j2))


def _reduce(full, reduction: str):
    """A reduction of the full kernel (N1, N2, C, C), as ntkbook.ntk.entk defines it."""
    n1, n2, C, _ = full.shape
    return {"full": full, "class_mean": np.einsum("nmcc->nm", full) / C, "class": full[:, :, 0, 0],
            "flat": full.transpose(0, 2, 1, 3).reshape(n1 * C, n2 * C)}[reduction]


#: the larger models (each route and shape compiles their factors anew): fewer reductions, and
#: for the Gemma layer one reduction and one set of examples (the panels' test has every reduction
#: and two sets of examples on the transformer, whose layers have positions too)
FEWER = {"gemma_layer": ("class_mean",), "transformer": ("full", "class_mean", "flat")}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_route_gives_the_kernel_of_explicit_jacobians(name):
    """``"structured"`` and ``"auto"`` (``"jacobians"``, the engine's route before them, is held
    against ``jax.jacrev`` in tests/test_entk.py on the same kinds of model)."""
    f, p, x = MODELS[name]()
    n = x.shape[0] // 2
    assert any(r.structured for r in entk.kernel_routes(f, p, x, route="structured")), \
        "no leaf of a book model takes the structured route?"

    def routes(reduction):
        """Where "auto" takes every leaf as "structured" does, it is that kernel; where it takes
        none that way, it is the Jacobians' kernel (held against jax.jacrev in tests/test_entk.py)."""
        ci = 0 if reduction == "class" else None
        taken = {route: [r.structured for r in entk.kernel_routes(f, p, x, route=route, reduction=reduction,
                                                                   class_index=ci)]
                 for route in ("structured", "auto")}
        if taken["auto"] == taken["structured"] or not any(taken["auto"]):
            return ("structured",)
        return ("structured", "auto")

    for x1, x2 in ((x, None),) if name == "gemma_layer" else ((x, None), (x[:n], x[n:])):
        want = _explicit_full(f, p, x1, x2)
        for reduction in FEWER.get(name, REDUCTIONS):
            for route in routes(reduction):
                got = entk.entk(f, p, x1, x2, reduction=reduction, route=route,
                                class_index=0 if reduction == "class" else None, batch_size=4)
                assert got.dtype == jnp.float64 and got.shape == _reduce(want, reduction).shape
                assert _rel(_reduce(want, reduction), got) < TOL, (reduction, route)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_structured_route_in_panels_and_layer_by_layer(reduction):
    """A memory budget that forces panels gives the same kernel; the layer-wise kernels of one
    pass are each layer's kernel."""
    f, p, x = _transformer()
    ci = 0 if reduction == "class" else None
    whole = entk.entk(f, p, x, reduction=reduction, class_index=ci, route="structured")
    for x2 in (None, x[:3]):
        ref = entk.entk(f, p, x, x2, reduction=reduction, class_index=ci, route="jacobians")
        got = entk.entk(f, p, x, x2, reduction=reduction, class_index=ci, route="structured",
                        batch_size=2, memory_budget=60_000)
        assert _rel(ref, got) < TOL
    assert _rel(whole, entk.entk(f, p, x, reduction=reduction, class_index=ci, route="jacobians")) < TOL
    layers = {"attn": "W_[QKVO]", "mlp": "W_(in|out)", "embed": "W_(E|pos)"}
    ks = entk.entk_layerwise(f, p, x, layers=layers, reduction=reduction, class_index=ci, route="structured")
    for name, flt in layers.items():
        ref = entk.entk(f, p, x, reduction=reduction, class_index=ci, param_filter=flt, route="jacobians")
        assert _rel(ref, ks[name]) < TOL, name


@pytest.mark.parametrize("precision", ["float32", "float32_jacobians", "float64"])
def test_structured_route_at_every_precision(precision):
    """Each precision's dtypes, and agreement with the Jacobians at that precision (float32: to
    float32 round-off)."""
    f, p, x = _modular("square")
    ref = entk.entk(f, p, x, reduction="class_mean", precision=precision, route="jacobians")
    got = entk.entk(f, p, x, reduction="class_mean", precision=precision, route="structured")
    assert got.dtype == ref.dtype == (jnp.float32 if precision == "float32" else jnp.float64)
    assert _rel(ref, got) < (1e-5 if precision == "float32" else TOL)


def test_routes_say_which_leaves_are_structured_and_why_the_others_are_not():
    f, p, x = _transformer()
    routes = {r.name: r for r in entk.kernel_routes(f, p, x, reduction="class_mean", route="structured")}
    assert {n for n, r in routes.items() if r.structured} == {"['W_K']", "['W_O']", "['W_Q']", "['W_U']", "['W_V']",
                                                                "['W_in']", "['W_out']"}
    assert routes["['W_E']"].why == "read by gather" and routes["['W_pos']"].why == "read by add"
    # W_K and W_V act on all 3 positions (T = 3): 3^2 (8 + 8 * 8) = 648 multiply-adds per pair
    # (C = 8 outputs) against the Jacobians' 8 * 64 = 512, so the automatic choice takes their Jacobians
    auto = {r.name: r for r in entk.kernel_routes(f, p, x, reduction="class_mean")}
    assert (auto["['W_K']"].T, auto["['W_K']"].K, auto["['W_K']"].O) == (3, 8, 8)
    assert not auto["['W_K']"].structured and auto["['W_K']"].why.startswith("Jacobians cheaper (512 vs 648")
    assert auto["['W_U']"].structured and auto["['W_in']"].structured
    jac = entk.kernel_routes(f, p, x, route="jacobians")
    assert not any(r.structured for r in jac) and {r.why for r in jac} == {"route='jacobians'"}
    only = entk.kernel_routes(f, p, x, param_filter="W_U")
    assert [r.name for r in only] == ["['W_U']"]
    with pytest.raises(InputError, match="selects no parameters"):
        entk.kernel_routes(f, p, x, param_filter="nothing")
    for call in (lambda: entk.entk(f, p, x, route="fast"), lambda: entk.kernel_routes(f, p, x, route="fast")):
        with pytest.raises(InputError, match="unknown route 'fast'"):
            call()
    line = entk.describe_routes(list(auto.values()))
    assert line.startswith("eNTK route: structured derivatives for ['W_O'], ['W_Q'], ['W_U']")
    assert "['W_E'] (read by gather); ['W_K'], ['W_V'] (Jacobians cheaper" in line


def test_the_routes_taken_are_recorded():
    f, p, x = _modular("square")
    with entk.recording_routes() as outer:
        entk.entk(f, p, x, reduction="class_mean", route="jacobians")
        with entk.recording_routes() as inner:
            entk.entk(f, p, x, reduction="class_mean")
    assert inner == {"eNTK route: structured derivatives for ['W1'], ['W2']"}
    assert outer == inner | {"eNTK route: Jacobians for ['W1'], ['W2'] (route='jacobians')"}
    entk.entk(f, p, x, reduction="class_mean")  # nothing recording: nothing kept
    assert len(outer) == 2
    # printed once per process; in a built chapter moved to the logs with the other progress lines
    from ntkbook.book.build import PROGRESS_LINE

    assert all(PROGRESS_LINE.match(line) for line in outer)


def test_leaf_labels_read_as_dotted_paths():
    assert entk.leaf_label("['dense1']['w']") == "dense1.w" and entk.leaf_label("['W_U']") == "W_U"
    assert entk.leaf_label("['layers'][0]['kernel'].value") == "layers.0.kernel.value"


def test_scalars_shapes_shared_weights_and_products_of_two_parameters():
    """A weight scaled by a literal and transposed is structured (the inner product scales by the
    square); a weight used twice, the second operand of a product of two parameters, and a bias
    go to the Jacobians; the sum is the kernel either way."""
    key = jax.random.split(jax.random.PRNGKey(4), 5)
    p = {"A": jax.random.normal(key[0], (5, 4), jnp.float64), "B": jax.random.normal(key[1], (3, 5), jnp.float64),
         "S": jax.random.normal(key[2], (4, 4), jnp.float64), "b": jax.random.normal(key[3], (3,), jnp.float64),
         "P": jax.random.normal(key[4], (4, 3), jnp.float64), "Q": jax.random.normal(key[0], (3, 3), jnp.float64)}

    def f(q, x):
        h = jnp.tanh((q["A"] * 0.5).T.T @ x)                 # scaled, transposed twice
        h2 = q["S"] @ x + q["S"].T @ x                           # used twice
        pq = (q["P"] @ q["Q"]) / 3.0                             # a product of two parameters
        return q["B"] @ h + q["b"] + jnp.sum(h2) + pq.T @ x[:4] * 0.1

    x = jax.random.normal(jax.random.PRNGKey(5), (7, 4), jnp.float64)
    routes = {r.name: r for r in entk.kernel_routes(f, p, x, route="structured")}
    assert routes["['A']"].structured and routes["['A']"].scale == pytest.approx(0.25)
    assert routes["['B']"].structured and routes["['P']"].structured
    assert routes["['S']"].why == "used 2 times"
    assert routes["['Q']"].why == "the other operand of a product already taken"
    assert not routes["['b']"].structured
    for reduction in ("full", "class_mean"):
        want = _reduce(_explicit_full(f, p, x, None), reduction)
        assert _rel(want, entk.entk(f, p, x, reduction=reduction, route="structured")) < TOL


def test_the_class_mean_kernel_of_the_modular_mlp_is_its_closed_form():
    f, p, x = _modular("square")
    closed = modular.class_mean_entk_closed_form(p, x, "square")
    assert _rel(closed, entk.entk(f, p, x, reduction="class_mean", route="structured")) < TOL
