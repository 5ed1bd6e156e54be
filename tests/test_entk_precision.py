"""The precision of the materialised eNTK (``precision=`` of :mod:`ntkbook.ntk.entk`): the default is
today's kernel bit for bit; float32 Jacobians agree with float64 to ~1e-6; on the modular MLP's
class-mean kernel (the chapter's smoke model) float32 moves neither the cliffs nor the Fourier
overlaps beyond the tolerance at which a stored result counts as reproduced; each experiment that
computes materialised kernels states its precision, and new results record it."""

import ast
import dataclasses
import inspect

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook import experiments  # noqa: E402
from ntkbook.experiments import demo_sweep  # noqa: E402
from ntkbook.freshness import DEFAULT_TOLERANCE  # noqa: E402
from ntkbook.models import modular  # noqa: E402
from ntkbook.ntk import entk  # noqa: E402
from ntkbook.store import Store  # noqa: E402

C = 3
FLOAT32 = ("float32_jacobians", "float32")
#: float32 against float64 on the small models: each kernel entry, relative to the largest
SMALL_MODEL_RTOL = 1e-6


# --------------------------------------------------------------------------------------------------
# two small float64 models: real inputs, and integer tokens (which must not be cast)
# --------------------------------------------------------------------------------------------------
def mlp(params, x):
    h = jnp.tanh(x @ params["dense1"]["w"] + params["dense1"]["b"])
    return h @ params["out"]["w"]


def tokens_model(params, t):
    """Embedding of integer tokens (T,), mean-pooled, tanh, readout."""
    return jnp.tanh(jnp.mean(params["embed"][t], axis=0) @ params["hidden"]) @ params["readout"]


def setup(name, n1=6, n2=5):
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    if name == "mlp":
        params = {"dense1": {"w": jax.random.normal(k[0], (4, 7)), "b": 0.1 * jnp.ones(7)},
                  "out": {"w": jax.random.normal(k[1], (7, C))}}
        return mlp, params, jax.random.normal(k[2], (n1, 4)), jax.random.normal(k[3], (n2, 4))
    params = {"embed": jax.random.normal(k[0], (11, 6)), "hidden": jax.random.normal(k[1], (6, 6)) / 2,
              "readout": jax.random.normal(k[2], (6, C))}
    return (tokens_model, params, jax.random.randint(k[3], (n1, 3), 0, 11),
            jax.random.randint(k[4], (n2, 3), 0, 11))


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


# --------------------------------------------------------------------------------------------------
# exactness
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mlp", "tokens"])
def test_model_and_float64_precision_are_the_default_kernel_bit_for_bit(name):
    f, params, x1, x2 = setup(name)
    for reduction in entk.REDUCTIONS:
        ci = 1 if reduction == "class" else None
        default = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci)
        assert default.dtype == jnp.float64
        for precision in ("model", "float64"):
            got = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci, precision=precision)
            np.testing.assert_array_equal(got, default)
    layers = entk.entk_layerwise(f, params, x1)
    for precision in ("model", "float64"):
        got = entk.entk_layerwise(f, params, x1, precision=precision)
        for k in layers:
            np.testing.assert_array_equal(got[k], layers[k])
        np.testing.assert_array_equal(entk.entk_mean_logit(f, params, x1, x2, precision=precision),
                                      entk.entk_mean_logit(f, params, x1, x2))


def test_float32_precision_of_a_float32_model_is_its_model_kernel():
    """For a float32 model "float32" casts nothing and contracts as "model" does: the same bits."""
    f, params, x1, x2 = setup("mlp")
    p32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), params)
    x1, x2 = x1.astype(jnp.float32), x2.astype(jnp.float32)
    for reduction in ("flat", "class_mean"):
        model = entk.entk(f, p32, x1, x2, reduction=reduction)
        assert model.dtype == jnp.float32
        np.testing.assert_array_equal(entk.entk(f, p32, x1, x2, reduction=reduction, precision="float32"),
                                      model)


@pytest.mark.parametrize("name", ["mlp", "tokens"])
@pytest.mark.parametrize("precision", FLOAT32)
def test_float32_agrees_with_float64(name, precision):
    f, params, x1, x2 = setup(name)
    want_dtype = jnp.float64 if precision == "float32_jacobians" else jnp.float32
    for reduction in entk.REDUCTIONS:
        ci = 1 if reduction == "class" else None
        ref = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci)
        got = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci, precision=precision)
        assert got.dtype == want_dtype and got.shape == ref.shape
        assert _rel(got, ref) < SMALL_MODEL_RTOL, reduction
        assert 0 < _rel(got, ref)  # the float32 Jacobians do round: this is not the float64 kernel
    sym = entk.entk(f, params, x1, reduction="class_mean", precision=precision)
    np.testing.assert_array_equal(sym, sym.T)
    ml = entk.entk_mean_logit(f, params, x1, x2, precision=precision)
    assert _rel(ml, entk.entk_mean_logit(f, params, x1, x2)) < SMALL_MODEL_RTOL
    layers = entk.entk_layerwise(f, params, x1, precision=precision)
    for k, ref in entk.entk_layerwise(f, params, x1).items():
        assert _rel(layers[k], ref) < SMALL_MODEL_RTOL, k


@pytest.mark.parametrize("precision", FLOAT32)
def test_float32_panelled_kernel_agrees(precision, capsys):
    """A memory budget too small for all Jacobians: the panels give the same kernel.

    Both kernels form the Jacobians two inputs at a time (``batch_size=2``): the float32 bits of a
    Jacobian can depend on how many inputs one call forms (the vectorised code XLA emits for a
    batch differs by its size and by the CPU: on an AMD EPYC the whole batch of 6 and batches of 2
    gave Jacobians whose kernels differ by 4e-8, on the machines before it not at all), which is the
    batch size's doing, not the panels'.
    """
    f, params, x1, x2 = setup("mlp")
    whole = entk.entk(f, params, x1, x2, reduction="flat", precision=precision, batch_size=2,
                      memory_budget=1 << 30)  # every Jacobian at once, whatever is free
    assert "exceed the memory budget" not in capsys.readouterr().out
    row32 = C * sum(a.size for a in jax.tree.leaves(params)) * 4
    got = entk.entk(f, params, x1, x2, reduction="flat", precision=precision, batch_size=2,
                    memory_budget=3 * row32 + x1.shape[0] * x2.shape[0] * C * C * whole.dtype.itemsize)
    assert "exceed the memory budget" in capsys.readouterr().out
    assert _rel(got, whole) < (SMALL_MODEL_RTOL if precision == "float32" else 1e-14)


def test_memory_plan_counts_the_jacobians_dtype(capsys):
    """A budget that holds every float32 Jacobian but not every float64 one: only float64 panels."""
    f, params, x1, _ = setup("mlp", n1=8)
    n, P = x1.shape[0], sum(a.size for a in jax.tree.leaves(params))
    budget = n * C * P * 4 + n * n * 8 + 64  # float32 Jacobians of all rows beside a float64 kernel
    entk.entk(f, params, x1, reduction="class_mean", precision="float32_jacobians", memory_budget=budget,
              route="jacobians")
    assert "exceed the memory budget" not in capsys.readouterr().out
    entk.entk(f, params, x1, reduction="class_mean", memory_budget=budget, route="jacobians")
    assert "exceed the memory budget" in capsys.readouterr().out


def test_memory_plan_counts_the_structured_factors(capsys):
    """By structured derivatives a row holds, per dense weight, its input and its cotangents
    (``n_in + C n_out`` numbers), per bias its Jacobian (``C n_out``): a budget that holds these
    for every row, the kernel and the Gram matrices of positions is one panel, a byte less is
    several."""
    f, params, x1, _ = setup("mlp", n1=8)
    n = x1.shape[0]
    routes = entk.kernel_routes(f, params, x1, reduction="class_mean")
    assert {r.name for r in routes if r.structured} == {r.name for r in routes if r.name.endswith("['w']")}
    row = sum(r.T * (r.K + C * r.O) if r.structured else C * r.size for r in routes)
    # beside the kernel, a structured leaf's two Gram matrices of positions (2 T^2 per pair)
    kernel = (1 + max(2 * r.T * r.T for r in routes if r.structured)) * n * n * 8
    for extra in (0, -1):
        plan = entk.plan_kernel(n, None, row * 8, kernel, memory_budget=n * row * 8 + kernel + extra)
        assert (plan.panels == 1) == (extra == 0)
    # the engine's own plan: with that budget the kernel is formed whole, with a byte less in panels
    exact = n * row * 8 + kernel
    whole = entk.entk(f, params, x1, reduction="class_mean", memory_budget=exact)
    assert "exceed the memory budget" not in capsys.readouterr().out
    panelled = entk.entk(f, params, x1, reduction="class_mean", memory_budget=exact - 1, batch_size=2)
    assert "exceed the memory budget" in capsys.readouterr().out
    np.testing.assert_allclose(panelled, whole, rtol=1e-13, atol=1e-13 * float(np.abs(whole).max()))


def test_widening_dot_goes_slab_by_slab(monkeypatch):
    """The float64 accumulation of float32 operands, in slabs of 512 columns and a remainder,
    is the float64 product of the float32 values."""
    monkeypatch.setattr(entk, "SLAB_BYTES", 1)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 1300)).astype(np.float32)
    b = rng.standard_normal((5, 1300)).astype(np.float32)
    got = entk._widening_dot(jnp.asarray(a), jnp.asarray(b), "float64")
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-13, atol=1e-12)


def test_precision_errors():
    f, params, x1, _ = setup("mlp")
    with pytest.raises(entk.InputError, match=r"unknown precision 'half'.*float32_jacobians"):
        entk.entk(f, params, x1, precision="half")
    with jax.enable_x64(False):  # a float32 model (float64 arrays made under x64 would warn here)
        p32 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), params)
        x32 = np.asarray(x1, np.float32)
        for precision in ("float64", "float32_jacobians"):
            with pytest.raises(entk.InputError, match=rf'precision="{precision}".*jax_enable_x64'):
                entk.entk(f, p32, x32, precision=precision)
        assert entk.entk(f, p32, x32, precision="float32").dtype == jnp.float32


# --------------------------------------------------------------------------------------------------
# the chapter's kernel: the class-mean eNTK of the modular MLP (smoke model, p = 23, width 128)
# --------------------------------------------------------------------------------------------------
#: the largest relative error float32 may cost any eigenvalue of that kernel, per precision
#: (measured: 1.0e-7 and 9.5e-7 over the whole spectrum; about ten times that allowed)
EIGENVALUE_RTOL = {"float32_jacobians": 1e-6, "float32": 1e-5}


@pytest.fixture(scope="module")
def trained_modular_mlp():
    """The chapter's smoke model (p = 23, width 128, 200 epochs: it groks) after training, seed 0,
    and the float64 reference of its class-mean kernel: the closed form, which equals the engine's
    float64 kernel to ~1e-15 (the chapter's cross-check, Table 5.8) at a fraction of its time."""
    from ntkbook.experiments import modular_mlp as mm

    config = dataclasses.replace(mm.Config.smoke(), seeds=(0,))
    with jax.enable_x64(True):
        _, snaps = mm.train_seed(config, 0, {config.epochs})
    params = {k: jnp.asarray(v) for k, v in snaps[config.epochs].items()}
    x, *_ = modular.dataset(config.p)
    K64 = modular.class_mean_entk_closed_form(params, x, config.activation)
    return mm, config, params, x, K64


@pytest.mark.parametrize("precision", FLOAT32)
def test_float32_keeps_the_cliffs_and_overlaps_of_the_modular_mlp(trained_modular_mlp, precision):
    """Tolerance: the cliffs (edges, sizes, the constant mode) do not move at all, and every
    overlap stays within the tolerance at which `ntkbook reproduce` counts a rerun as the stored
    result (``freshness.DEFAULT_TOLERANCE``, modular_mlp's own), far inside the three decimals the
    chapter prints (Table 5.5). The eigenvalues move by at most :data:`EIGENVALUE_RTOL`: beyond
    that reproduce tolerance (hence float64 stays the experiment's stated precision)."""
    mm, config, params, x, K64 = trained_modular_mlp
    bases = mm.feature_bases(config.p)
    lam64, _, info64 = mm.analyse_kernel(K64, config.p, bases)
    d1 = 4 * (config.p // 2)
    assert info64["cliff_sizes"][0] == d1 and info64["cliff_sizes"][1] > 0  # both cliffs are there

    with jax.enable_x64(True):
        K = entk.entk(modular.make_apply(config.activation), params, jnp.asarray(x),
                      reduction="class_mean", precision=precision)
    lam, _, info = mm.analyse_kernel(np.asarray(K, dtype=np.float64), config.p, bases)

    rel = np.abs(lam - lam64) / np.abs(lam64)
    assert 0 < rel.max() < EIGENVALUE_RTOL[precision]
    for key in ("constant_index", "cliff_edges", "cliff_sizes"):
        assert info[key] == info64[key], key
    tol = {**DEFAULT_TOLERANCE, **getattr(mm, "REPRODUCE_TOLERANCE", {})}  # as freshness.reproduce reads it
    for name, ref in info64["overlaps"].items():
        assert abs(info["overlaps"][name] - ref) <= tol["rtol"] * abs(ref) + tol["atol"], name


# --------------------------------------------------------------------------------------------------
# the experiments state their precision, and new results record it
# --------------------------------------------------------------------------------------------------
MATERIALISED = ("entk", "entk_layerwise", "entk_mean_logit")


def _engine_calls(module) -> list[ast.Call]:
    """The calls ``entk.entk(...)``, ``entk.entk_layerwise(...)``, ``entk.entk_mean_logit(...)``."""
    tree = ast.parse(inspect.getsource(module))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in MATERIALISED
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "entk"]


def test_every_experiment_states_the_precision_of_its_kernels():
    calling = []
    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        calls = _engine_calls(module)
        if not calls:
            continue
        calling.append(name)
        assert getattr(module, "PRECISION", None) in entk.PRECISIONS, name
        for call in calls:
            passed = {kw.arg: kw.value for kw in call.keywords}
            assert isinstance(passed.get("precision"), ast.Name) and passed["precision"].id == "PRECISION", \
                f"{name}, line {call.lineno}: pass precision=PRECISION to the engine"
    assert {"modular_mlp", "modular_transformer", "entk_convergence", "lanczos_ghosts",
            "entk_cost"} <= set(calling)


def test_new_results_record_the_precision(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_GIT_COMMIT", "abc1234")
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    config = demo_sweep.Config.smoke()
    plain = experiments.run_and_save("demo_sweep", config, Store(tmp_path / "a"))
    assert "precision" not in plain.provenance  # an experiment without engine kernels states none
    monkeypatch.setattr(demo_sweep, "PRECISION", "float64", raising=False)
    store = Store(tmp_path / "b")
    experiments.run_and_save("demo_sweep", config, store)
    assert store.load("demo_sweep", demo_sweep.VERSION, config).provenance["precision"] == "float64"
