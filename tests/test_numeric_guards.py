"""The engine refuses input it cannot answer for (NaN/inf spectra, negative eigenvalues beyond
round-off, a bool class index, a wrong-sized operator) instead of answering quietly; a Lanczos step
does as many re-orthogonalisation passes as it is given; every eNTK contraction runs at HIGHEST."""

from __future__ import annotations

import math
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.errors import InputError  # noqa: E402
from ntkbook.ntk import eig, entk, features, gram, kernels  # noqa: E402


# --------------------------------------------------------------------------------------------------
# spectra
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda lam: gram.effective_condition_number(lam, 2),
    lambda lam: gram.condition_number(lam),
    lambda lam: gram.ridge_condition_number(lam, 1e-3),
    lambda lam: features.find_cliffs(lam, n=1, min_size=1),
], ids=["effective_condition_number", "condition_number", "ridge_condition_number", "find_cliffs"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_spectrum_functions_refuse_nan_and_inf(fn, bad):
    lam = np.array([10.0, 5.0, 1.0, 0.5])
    lam[1] = bad
    with pytest.raises(InputError, match=r"NaN or infinite.*index 1"):
        fn(lam)


@pytest.mark.parametrize("fn", [
    lambda lam: gram.effective_condition_number(lam, 2),
    lambda lam: gram.condition_number(lam),
    lambda lam: gram.ridge_condition_number(lam, 1e-3),
    lambda lam: features.find_cliffs(lam, n=1, min_size=1),
], ids=["effective_condition_number", "condition_number", "ridge_condition_number", "find_cliffs"])
def test_spectrum_functions_refuse_a_clear_negative_but_take_round_off(fn):
    with pytest.raises(InputError, match="negative eigenvalue -1.000e-03"):
        fn(np.array([10.0, 5.0, 1.0, -1e-3]))
    fn(np.array([10.0, 5.0, 1.0, -1e-15]))  # 4 * eps * 10 = 8.9e-15: round-off


def test_round_off_negatives_change_no_number():
    lam = np.array([10.0, 5.0, 1e-3, -1e-15])
    assert gram.condition_number(lam) == pytest.approx(1e4, rel=1e-15)
    assert gram.effective_condition_number(lam, 4) == math.inf
    assert gram.ridge_condition_number(lam, 0.1) == pytest.approx(11.0 / 1.0, rel=1e-15)


def test_psd_spectrum_tolerance_is_n_eps_max():
    n, top = 100, 7.0
    tol = n * gram.EPS * top
    lam = np.r_[top, np.zeros(n - 2), -0.99 * tol]
    np.testing.assert_array_equal(gram.psd_spectrum(lam), np.sort(lam)[::-1])
    lam[-1] = -1.01 * tol
    with pytest.raises(InputError, match="beyond round-off"):
        gram.psd_spectrum(lam)


# --------------------------------------------------------------------------------------------------
# the eNTK: class index and dtypes
# --------------------------------------------------------------------------------------------------
def _mlp(params, x):
    h = jnp.tanh(jnp.matmul(params["W1"], x, precision=jax.lax.Precision.HIGHEST))
    return jnp.matmul(params["W2"], h, precision=jax.lax.Precision.HIGHEST)


def _params(dtype=jnp.float64, C=3):
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"W1": jax.random.normal(k1, (6, 4), dtype), "W2": jax.random.normal(k2, (C, 6), dtype)}


X = np.random.default_rng(0).standard_normal((5, 4))


@pytest.mark.parametrize("ci", [True, False, np.bool_(True)])
def test_a_bool_class_index_is_refused(ci):
    with pytest.raises(InputError, match=r"class_index=.* must be an int in \[0, 3\) \(a bool is refused\)"):
        entk.entk(_mlp, _params(), X, reduction="class", class_index=ci)
    with pytest.raises(InputError, match=r"class_index=.* must be an int in \[0, 3\) \(a bool is refused\)"):
        entk.entk_matvec(_mlp, _params(), X, reduction="class", class_index=ci)
    entk.entk(_mlp, _params(), X, reduction="class", class_index=int(ci))  # the int is fine


def test_mixed_dtypes_warn_and_one_dtype_does_not():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert entk.entk(_mlp, _params(), X).dtype == jnp.float64
        assert entk.entk(_mlp, _params(jnp.float32), X.astype(np.float32)).dtype == jnp.float32
    with pytest.warns(UserWarning, match="float32, float64.*comes out float64"):
        entk.entk(_mlp, _params(), X.astype(np.float32))
    with pytest.warns(UserWarning, match="float32, float64"):
        entk.entk(_mlp, _params(jnp.float32), X)
    with pytest.warns(UserWarning, match="float32, float64"):
        entk.entk_matvec(_mlp, _params(jnp.float32), X)


def test_an_operator_narrower_than_its_float64_inputs_warns():
    def to32(params, x):  # a model that rounds its outputs: the operator works in float32
        return _mlp(params, x).astype(jnp.float32)

    with pytest.warns(UserWarning, match="dtypes float64 and it comes out float32"):
        op = entk.entk_matvec(to32, _params(), X, reduction="flat")
    assert op.dtype == jnp.float32


# --------------------------------------------------------------------------------------------------
# Lanczos: operator size without the check, re-orthogonalisation passes
# --------------------------------------------------------------------------------------------------
def test_lanczos_without_check_refuses_a_wrong_sized_operator():
    A = jnp.asarray(np.diag(np.arange(1.0, 11.0)))
    with pytest.raises(InputError, match=r"start vector of shape \(8,\).*is dim = 8 the operator's size"):
        eig.lanczos_topk(lambda v: A @ v, 8, 2, check=False)
    with pytest.raises(InputError, match=r"map shape \(8,\) to \(8,\), got \(10,\)"):
        eig.lanczos_topk(lambda v: jnp.ones(10) * v.sum(), 8, 2, check=False)
    op = entk.entk_matvec(_mlp, _params(), X, reduction="flat")  # dim 15
    with pytest.raises(InputError, match=r"its \.dim\) but dim = 12: pass dim=15"):
        eig.lanczos_topk(op, 12, 2, check=False)
    assert op.num_products == 0  # refused from the metadata, no product spent


@pytest.mark.parametrize("passes", [0, 1, 2])
def test_a_lanczos_step_does_the_passes_it_is_given(passes):
    """With a basis that is not quite orthonormal every Gram-Schmidt pass changes the vector, so
    the step's output tells how many passes it made."""
    rng = np.random.default_rng(1)
    dim, j = 12, 3
    Q = np.zeros((6, dim))
    Q[: j + 1] = np.linalg.qr(rng.standard_normal((dim, j + 1)))[0].T
    Q[: j + 1] += 1e-2 * rng.standard_normal((j + 1, dim))  # a loss of orthogonality to remove
    w, beta_prev = rng.standard_normal(dim), 0.7
    ref = w - (Q[j] @ w) * Q[j] - beta_prev * Q[j - 1]
    for _ in range(passes):
        ref = ref - Q.T @ (Q @ ref)
    step = eig._make_step(passes)
    Qn, alpha, beta = step(jnp.asarray(Q), j, jnp.asarray(w), jnp.asarray(beta_prev))
    assert float(alpha) == pytest.approx(Q[j] @ w, rel=1e-13)
    assert float(beta) == pytest.approx(np.linalg.norm(ref), rel=1e-12)
    np.testing.assert_allclose(np.asarray(Qn[j + 1]), ref / np.linalg.norm(ref), rtol=0, atol=1e-12)
    others = [p for p in (0, 1, 2) if p != passes]
    for p in others:  # the passes are distinguishable: one more or fewer moves the vector
        alt = w - (Q[j] @ w) * Q[j] - beta_prev * Q[j - 1]
        for _ in range(p):
            alt = alt - Q.T @ (Q @ alt)
        assert np.linalg.norm(alt - ref) > 1e-6


def test_lanczos_topk_passes_its_reorthogonalisation_to_the_step(monkeypatch):
    made = []
    real = eig._make_step

    def spy(passes):
        made.append(passes)
        return real(passes)

    monkeypatch.setattr(eig, "_make_step", spy)
    A = np.diag(np.arange(1.0, 21.0))
    for passes in (0, 1, 2):
        eig.lanczos_topk(lambda v: jnp.asarray(A) @ v, 20, 2, num_steps=6, reorthogonalize=passes, check=False)
    assert made == [0, 1, 2]


# --------------------------------------------------------------------------------------------------
# precision of every contraction
# --------------------------------------------------------------------------------------------------
def _dot_generals(jaxpr):
    """Every dot_general equation of a (closed) jaxpr and of the jaxprs nested in its equations."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append(eqn)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    out.extend(_dot_generals(sub))
    return out


def _is_highest(precision) -> bool:
    highest = jax.lax.Precision.HIGHEST
    if isinstance(precision, tuple):
        return all(p == highest for p in precision)
    return precision == highest


def _routes():
    from ntkbook.models import modular, transformer, two_layer

    p2 = two_layer.init(jax.random.PRNGKey(0), 4, 8, dtype=jnp.float64)
    x2 = jnp.asarray(X)
    pm = modular.init(jax.random.PRNGKey(0), 5, 6, dtype=jnp.float64)
    xm = jnp.asarray(modular.dataset(5)[0][:4])
    shape = transformer.Shape(p=5, d_model=8, n_heads=2, d_head=4, d_mlp=8)
    pt = transformer.init(jax.random.PRNGKey(0), shape, dtype=jnp.float64)
    xt = jnp.asarray(transformer.dataset(5)[0][:3])
    op = entk.entk_matvec(_mlp, _params(), X, reduction="class_mean")
    op_flat = entk.entk_matvec(_mlp, _params(), X, reduction="flat", reuse_forward=False)
    return {
        "entk full": (lambda x: entk.entk(_mlp, _params(), x), (x2,)),
        "entk class_mean, batched": (lambda x: entk.entk(_mlp, _params(), x, reduction="class_mean",
                                                         batch_size=2), (x2,)),
        "entk_layerwise": (lambda x: entk.entk_layerwise(_mlp, _params(), x, layers={"1": "W1", "2": "W2"}), (x2,)),
        "EntkOperator matvec (linearised)": (op, (jnp.ones(5),)),
        "EntkOperator matvec (vjp/jvp)": (op_flat, (jnp.ones(15),)),
        "two_layer eNTK": (lambda p, x: entk.entk(two_layer.apply, p, x), (p2, x2)),
        "relu_ntk (two_layer.ntk)": (lambda x: kernels.relu_ntk(x, trainable="W"), (x2,)),
        "modular eNTK": (lambda p, x: entk.entk(modular.make_apply("square"), p, x, reduction="class_mean"),
                         (pm, xm)),
        "transformer eNTK": (lambda p, x: entk.entk(transformer.apply, p, x, reduction="class_mean"), (pt, xt)),
    }


@pytest.mark.parametrize("route", list(_routes()))
def test_every_entk_contraction_runs_at_highest_precision(route):
    fn, args = _routes()[route]
    dots = _dot_generals(jax.make_jaxpr(fn)(*args))
    assert dots, f"{route}: no dot_general found (the walk missed the nested jaxprs?)"
    low = [str(e.params["precision"]) for e in dots if not _is_highest(e.params["precision"])]
    assert not low, f"{route}: {len(low)} of {len(dots)} dot_generals below HIGHEST: {low[:3]}"
