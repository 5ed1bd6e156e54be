"""ntkbook.ntk.structured: the eNTK by structured derivatives equals the explicit Jacobians' kernel
(ntkbook.ntk.entk, itself checked against explicit Jacobians in tests/test_entk.py) in float64 on
the book's models, for every reduction; leaves it cannot take are left to the Jacobians, each with
its reason."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.errors import InputError  # noqa: E402
from ntkbook.models import modular, transformer, two_layer  # noqa: E402
from ntkbook.ntk import entk, structured  # noqa: E402

TOL = 1e-12


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


def _two_layer():
    p = two_layer.init(jax.random.PRNGKey(2), 6, 8, symmetric=False, dtype=jnp.float64)
    x = jax.random.normal(jax.random.PRNGKey(3), (9, 6), jnp.float64)
    return two_layer.apply, p, x


MODELS = {"modular_square": lambda: _modular("square"), "modular_relu": lambda: _modular("relu"),
          "transformer": _transformer, "two_layer": _two_layer}


def _reduce(full, reduction: str):
    """A reduction of the full kernel (N1, N2, C, C), as ntkbook.ntk.entk defines it."""
    full = np.asarray(full)
    n1, n2, C, _ = full.shape
    return {"full": full, "class_mean": np.einsum("nmcc->nm", full) / C, "class": full[:, :, 0, 0],
            "flat": full.transpose(0, 2, 1, 3).reshape(n1 * C, n2 * C)}[reduction]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_structured_kernel_equals_the_jacobians(name):
    """Every reduction, on one set of examples and between two (the Jacobians' full kernel formed
    once, its reductions taken as ntkbook.ntk.entk defines them: tests/test_entk.py checks those)."""
    f, p, x = MODELS[name]()
    n = x.shape[0] // 2
    # the transformer's (its fallback leaves compile the Jacobians' route too): two reductions
    reductions = ("full", "class_mean") if name == "transformer" else ("full", "class_mean", "class", "flat")
    for x1, x2 in ((x, None), (x[:n], x[n:])):
        want = entk.entk(f, p, x1, x2, reduction="full")
        for reduction in reductions:
            got = structured.structured_entk(f, p, x1, x2, reduction=reduction,
                                             class_index=0 if reduction == "class" else None, batch_size=4)
            assert got.dtype == jnp.float64 and got.shape == _reduce(want, reduction).shape
            assert _rel(_reduce(want, reduction), got) < TOL, reduction


def test_routes_say_which_leaves_are_structured_and_why_the_others_are_not():
    f, p, x = _transformer()
    routes = {r.name: r for r in structured.routes(f, p, x[0])}
    assert {n for n, r in routes.items() if r.structured} == {"['W_K']", "['W_O']", "['W_Q']", "['W_U']", "['W_V']",
                                                                "['W_in']", "['W_out']"}
    assert routes["['W_E']"].why == "read by gather" and routes["['W_pos']"].why == "read by add"
    only = structured.routes(f, p, x[0], param_filter="W_U")
    assert [r.name for r in only] == ["['W_U']"]
    assert _rel(entk.entk(f, p, x, reduction="class_mean", param_filter="W_E"),
                structured.structured_entk(f, p, x, reduction="class_mean", param_filter="W_E")) < TOL
    with pytest.raises(InputError, match="selects no parameters"):
        structured.routes(f, p, x[0], param_filter="nothing")


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
    routes = {r.name: r for r in structured.routes(f, p, x[0])}
    assert routes["['A']"].structured and routes["['A']"].scale == pytest.approx(0.25)
    assert routes["['B']"].structured and routes["['P']"].structured
    assert routes["['S']"].why == "used 2 times"
    assert routes["['Q']"].why == "the other operand of a product already taken"
    assert not routes["['b']"].structured
    for reduction in ("full", "class_mean"):
        assert _rel(entk.entk(f, p, x, reduction=reduction), structured.structured_entk(f, p, x, reduction=reduction)) < TOL


def test_the_class_mean_kernel_of_the_modular_mlp_is_its_closed_form():
    f, p, x = _modular("square")
    closed = modular.class_mean_entk_closed_form(p, x, "square")
    assert _rel(closed, structured.structured_entk(f, p, x, reduction="class_mean")) < TOL
