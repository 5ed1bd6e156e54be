"""eNTK against explicit Jacobians (jax.jacrev of the batched model), in float64."""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.ntk import entk  # noqa: E402

TOL = 1e-10
C = 3


# --------------------------------------------------------------------------------------------------
# two small models, per-example convention f(params, x) -> (C,)
# --------------------------------------------------------------------------------------------------
def mlp_init(key, d=4, h=5, c=C):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "dense1": {"w": jax.random.normal(k1, (d, h)), "b": 0.1 * jnp.ones(h)},
        "dense2": {"w": jax.random.normal(k2, (h, h)) / 2, "b": jnp.zeros(h)},
        "out": {"w": jax.random.normal(k3, (h, c))},
    }


def mlp(params, x):
    h = jnp.tanh(x @ params["dense1"]["w"] + params["dense1"]["b"])
    h = jnp.tanh(h @ params["dense2"]["w"] + params["dense2"]["b"])
    return h @ params["out"]["w"]


def attn_init(key, d=4, c=C):
    ks = jax.random.split(key, 4)
    return {
        "attn": {n: jax.random.normal(k, (d, d)) / 2 for n, k in zip("qkv", ks[:3])},
        "readout": jax.random.normal(ks[3], (d, c)),
    }


def attn(params, x):
    """Single-head self-attention over the tokens of x (T, d), mean-pooled, then a readout."""
    a = params["attn"]
    q, k, v = x @ a["q"], x @ a["k"], x @ a["v"]
    w = jax.nn.softmax(q @ k.T / jnp.sqrt(x.shape[-1]), axis=-1)
    return jnp.mean(w @ v, axis=0) @ params["readout"]


MODELS = {
    "mlp": (mlp, mlp_init, (4,)),
    "attn": (attn, attn_init, (3, 4)),
}


def setup(name, n1=5, n2=4, seed=0):
    f, init, fshape = MODELS[name]
    key = jax.random.PRNGKey(seed)
    kp, k1, k2 = jax.random.split(key, 3)
    params = init(kp)
    x1 = jax.random.normal(k1, (n1,) + fshape)
    x2 = jax.random.normal(k2, (n2,) + fshape)
    return f, params, x1, x2


def explicit_jac(f, params, x, pred=None):
    """(N, C, P) Jacobian of the batched model by jax.jacrev, restricted to leaves where pred(path)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = [leaf for _, leaf in flat]
    keep = [i for i, (p, _) in enumerate(flat) if pred is None or pred(p)]

    def F(sel):
        ls = list(leaves)
        for i, s in zip(keep, sel):
            ls[i] = s
        return jax.vmap(lambda xx: f(treedef.unflatten(ls), xx))(x)

    js = jax.jit(jax.jacrev(F))([leaves[i] for i in keep])  # each (N, C, *shape)
    return jnp.concatenate([j.reshape(j.shape[0], j.shape[1], -1) for j in js], axis=-1)


def explicit(f, params, x1, x2, reduction, class_index=None, pred=None, full=None):
    if full is None:
        j1 = explicit_jac(f, params, x1, pred)
        j2 = explicit_jac(f, params, x2, pred)
        full = jnp.einsum("ncp,mdp->nmcd", j1, j2)
    if reduction == "full":
        return full
    if reduction == "class":
        return full[:, :, class_index, class_index]
    if reduction == "class_mean":
        return jnp.einsum("nmcc->nm", full) / full.shape[-1]
    n1, n2, c, _ = full.shape
    return jnp.transpose(full, (0, 2, 1, 3)).reshape(n1 * c, n2 * c)


@functools.lru_cache(maxsize=None)
def reference(name):
    """Model, data and the explicit full kernels K(x1, x2), K(x1, x1), computed once per model."""
    f, params, x1, x2 = setup(name)
    j1 = explicit_jac(f, params, x1)
    j2 = explicit_jac(f, params, x2)
    return f, params, x1, x2, jnp.einsum("ncp,mdp->nmcd", j1, j2), jnp.einsum("ncp,mdp->nmcd", j1, j1)


# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mlp", "attn"])
@pytest.mark.parametrize("reduction", ["full", "class", "class_mean", "flat"])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_reductions_match_explicit_jacobians(name, reduction, batch_size):
    f, params, x1, x2, full12, full11 = reference(name)
    ci = 1 if reduction == "class" else None
    got = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci, batch_size=batch_size)
    want = explicit(f, params, x1, x2, reduction, ci, full=full12)
    assert got.dtype == jnp.float64
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)

    # x2=None: symmetric PSD kernel of x1 with itself
    k = entk.entk(f, params, x1, reduction=reduction, class_index=ci, batch_size=batch_size)
    np.testing.assert_allclose(k, explicit(f, params, x1, x1, reduction, ci, full=full11),
                               rtol=TOL, atol=TOL)
    if reduction == "full":
        m = jnp.transpose(k, (0, 2, 1, 3)).reshape(k.shape[0] * C, -1)
    else:
        m = k
    np.testing.assert_allclose(m, m.T, rtol=0, atol=1e-12)
    assert np.linalg.eigvalsh(np.asarray(m)).min() > -1e-10 * np.abs(m).max()


def _row_bytes(f, params, reduction):
    """Bytes of one input's Jacobian, as the engine's plan counts them."""
    P = sum(leaf.size for leaf in jax.tree.leaves(params))
    return (1 if reduction == "class" else C) * P * 8


@pytest.mark.parametrize("name", ["mlp", "attn"])
@pytest.mark.parametrize("reduction", ["full", "class", "class_mean", "flat"])
@pytest.mark.parametrize("batch_size", [None, 1, 2])
def test_panelled_kernel_matches_explicit_jacobians(name, reduction, batch_size, capsys):
    """A memory budget too small for all Jacobians: the kernel is assembled from panels (rows
    held, chunks streamed), says so, and equals the explicit kernel, symmetric or not."""
    f, params, x1, x2, full12, full11 = reference(name)
    ci = 1 if reduction == "class" else None
    n1 = x1.shape[0]
    kbytes = n1 * n1 * (C * C if reduction in ("full", "flat") else 1) * 8
    budget = 3 * _row_bytes(f, params, reduction) + kbytes  # Jacobians of 3 inputs beside the kernel
    plan = entk.plan_kernel(n1, None, _row_bytes(f, params, reduction), kbytes, batch_size=batch_size,
                            memory_budget=budget)
    assert plan.panels > 1 and plan.max_formations > 1
    got = entk.entk(f, params, x1, x2, reduction=reduction, class_index=ci, batch_size=batch_size,
                    memory_budget=budget)
    np.testing.assert_allclose(got, explicit(f, params, x1, x2, reduction, ci, full=full12), rtol=TOL, atol=TOL)
    k = entk.entk(f, params, x1, reduction=reduction, class_index=ci, batch_size=batch_size,
                  memory_budget=budget)
    np.testing.assert_allclose(k, explicit(f, params, x1, x1, reduction, ci, full=full11), rtol=TOL, atol=TOL)
    m = jnp.transpose(k, (0, 2, 1, 3)).reshape(k.shape[0] * C, -1) if reduction == "full" else k
    np.testing.assert_allclose(m, m.T, rtol=0, atol=1e-12)
    assert "exceed the memory budget" in capsys.readouterr().out


def test_plan_forms_each_jacobian_once_when_it_fits():
    one = 1000  # bytes of one input's Jacobian
    fits = entk.plan_kernel(40, None, one, 5000, batch_size=8, memory_budget=40 * one + 5000)
    assert (fits.panels, fits.max_formations, fits.chunk) == (1, 1, 8)
    assert "formed once" in fits.describe()
    both = entk.plan_kernel(40, 30, one, 5000, memory_budget=70 * one + 5000)
    assert both.panels == 1  # x1 and x2 together fit
    tight = entk.plan_kernel(40, 30, one, 5000, memory_budget=69 * one + 5000)
    assert tight.panels > 1
    panels = entk.plan_kernel(40, None, one, 0, batch_size=4, memory_budget=20 * one)
    assert panels.panel_rows % panels.chunk == 0 and panels.panel_rows == 8  # half the budget, whole chunks
    assert panels.panels == 5 and panels.max_formations == 5
    assert "5 panels of 8 rows" in panels.describe()
    with pytest.raises(entk.InputError, match="memory_budget"):
        entk.plan_kernel(4, None, one, 0, memory_budget=0)
    # with no budget named, the plan is the one of the fixed default: a function of the shapes
    # alone, never of the machine's free memory
    assert entk.default_memory_budget() == entk.DEFAULT_MEMORY_BUDGET == 12 << 30
    for n2, kernel in ((30, 5000), (None, 10 * one)):
        assert entk.plan_kernel(40, n2, one, kernel) == entk.plan_kernel(
            40, n2, one, kernel, memory_budget=entk.DEFAULT_MEMORY_BUDGET)
    big = 1 << 30  # 40 rows of 1 GiB each: panels under the default, on any machine
    assert entk.plan_kernel(40, None, big, 0).panels == entk.plan_kernel(
        40, None, big, 0, memory_budget=12 << 30).panels > 1


def test_a_plan_that_cannot_fit_is_refused_before_any_work():
    """Free memory never changes the plan; it only refuses one that cannot fit, saying what to do."""
    one = 1000
    whole = entk.plan_kernel(40, None, one, 5000, memory_budget=10**9)
    assert whole.panels == 1 and whole.peak_bytes == 40 * one + 5000
    entk.check_fits(whole, free=40 * one + 5000)  # fits exactly
    with pytest.raises(entk.InputError, match=r"needs .* but only .* is free.*memory_budget="):
        entk.check_fits(whole, free=40 * one + 4999)
    panels = entk.plan_kernel(40, None, one, 0, batch_size=4, memory_budget=20 * one)
    assert panels.panels > 1 and panels.peak_bytes == 20 * one  # at most the budget
    entk.check_fits(panels, free=20 * one)


def test_param_filter_string_and_callable():
    f, params, x1, x2 = setup("mlp")
    pred = lambda path: jax.tree_util.keystr(path).startswith("['dense2']")  # noqa: E731
    want = explicit(f, params, x1, x2, "flat", pred=pred)
    for flt in ("dense2", r"\['dense2'\]", pred):
        got = entk.entk(f, params, x1, x2, reduction="flat", param_filter=flt, batch_size=3)
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert set(entk.select(params, "dense2")) == {"['dense2']['b']", "['dense2']['w']"}


@pytest.mark.parametrize("name", ["mlp", "attn"])
def test_layerwise_sums_to_full(name):
    f, params, x1, x2 = setup(name)
    full = entk.entk(f, params, x1, x2, reduction="class_mean")
    layers = entk.entk_layerwise(f, params, x1, x2, reduction="class_mean")
    expected = {"mlp": {"['dense1']", "['dense2']", "['out']"}, "attn": {"['attn']", "['readout']"}}
    assert set(layers) == expected[name]
    np.testing.assert_allclose(sum(layers.values()), full, rtol=TOL, atol=TOL)
    # explicit partition, chunked, full reduction
    if name == "mlp":
        parts = {"first": "dense1", "rest": lambda p: "dense1" not in jax.tree_util.keystr(p)}
        lw = entk.entk_layerwise(f, params, x1, layers=parts, reduction="full", batch_size=2)
        np.testing.assert_allclose(
            lw["first"] + lw["rest"], entk.entk(f, params, x1, reduction="full"), rtol=TOL, atol=TOL
        )
        np.testing.assert_allclose(
            lw["first"], entk.entk(f, params, x1, param_filter="dense1"), rtol=TOL, atol=TOL
        )
        # panelled (a budget for the Jacobians of 2 inputs): the same kernels
        tight = entk.entk_layerwise(f, params, x1, layers=parts, reduction="full", batch_size=1,
                                    memory_budget=2 * _row_bytes(f, params, "full") + 5 * 5 * C * C * 8 * 2)
        for k in parts:
            np.testing.assert_allclose(tight[k], lw[k], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", ["mlp", "attn"])
@pytest.mark.parametrize("reduction", ["flat", "class", "class_mean"])
@pytest.mark.parametrize("flt", [None, "out|readout"])
def test_matvec_matches_materialised(name, reduction, flt):
    f, params, x1, _ = setup(name)
    ci = 2 if reduction == "class" else None
    K = entk.entk(f, params, x1, reduction=reduction, class_index=ci, param_filter=flt)
    rng = np.random.default_rng(0)
    for reuse in (True, False):
        op = entk.entk_matvec(f, params, x1, reduction=reduction, class_index=ci, param_filter=flt,
                           reuse_forward=reuse)
        assert op.dim == K.shape[0]
        for _ in range(2):
            v = rng.standard_normal(op.dim)
            np.testing.assert_allclose(op(v), K @ v, rtol=TOL, atol=TOL)



@pytest.mark.parametrize("name", ["mlp", "attn"])
@pytest.mark.parametrize("reduction", ["flat", "class_mean"])
@pytest.mark.parametrize("residuals", ["constants", "arguments"])
def test_matvec_traces_and_compiles_once(name, reduction, residuals, monkeypatch):
    """After its first product, an operator's products trace and compile nothing (JAX reports
    every trace and compilation to jax.monitoring), with the residuals compiled in as constants
    (small, the default here) or passed as arguments (above the size limit), and both match the
    materialised kernel."""
    if residuals == "arguments":
        monkeypatch.setattr(entk, "_CONSTANT_RESIDUALS_BYTES", 0)
    f, params, x1, _ = setup(name)
    K = entk.entk(f, params, x1, reduction=reduction)
    op = entk.entk_matvec(f, params, x1, reduction=reduction)
    vs = [jnp.asarray(v) for v in np.random.default_rng(0).standard_normal((4, op.dim))]
    outs = [op(vs[0])]
    events = []

    def record(event, duration, **kwargs):
        events.append(event)

    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        outs += [op(v) for v in vs[1:]]
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
    compiled = [e for e in events if e.startswith("/jax/core/compile/")]
    assert not compiled, f"products 2-4 traced or compiled again: {compiled}"
    for v, out in zip(vs, outs):
        np.testing.assert_allclose(out, K @ v, rtol=TOL, atol=TOL)

def test_nnx_split_model():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(4, 6, param_dtype=jnp.float64, rngs=rngs)
            self.l2 = nnx.Linear(6, C, param_dtype=jnp.float64, rngs=rngs)

        def __call__(self, x):
            return self.l2(jnp.tanh(self.l1(x)))

    model = Net(nnx.Rngs(0))
    f, params = entk.split_model(model)
    x = jax.random.normal(jax.random.PRNGKey(1), (4, 4))
    layers = entk.entk_layerwise(f, params, x, reduction="flat")
    assert set(layers) == {"['l1']", "['l2']"}
    K = entk.entk(f, params, x, reduction="flat")
    np.testing.assert_allclose(layers["['l1']"] + layers["['l2']"], K, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(K, explicit(f, params, x, x, "flat"), rtol=TOL, atol=TOL)


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------
def test_bad_inputs():
    f, params, x1, _ = setup("mlp")
    with pytest.raises(ValueError, match="mismatched per-example feature shapes"):
        entk.entk(f, params, x1, jnp.ones((3, 5)))
    with pytest.raises(ValueError, match="unknown reduction"):
        entk.entk(f, params, x1, reduction="trace")
    with pytest.raises(ValueError, match="needs class_index"):
        entk.entk(f, params, x1, reduction="class")
    with pytest.raises(ValueError, match="out of range"):
        entk.entk(f, params, x1, reduction="class", class_index=C)
    with pytest.raises(ValueError, match=r"selects no parameters; available paths: .*\['dense1'\]"):
        entk.entk(f, params, x1, param_filter="no_such_layer")
    with pytest.raises(ValueError, match=r"layer 'bad'.*selects no parameters"):
        entk.entk_layerwise(f, params, x1, layers={"ok": "dense1", "bad": "nothing"})
    with pytest.raises(ValueError, match="selects no parameters"):
        entk.select(params, lambda p: False)
    with pytest.raises(ValueError, match="selects no parameters"):
        entk.entk_matvec(f, params, x1, param_filter="nothing")
    with pytest.raises(ValueError, match="unknown reduction"):
        entk.entk_matvec(f, params, x1, reduction="full")
    with pytest.raises(ValueError, match="ONE example"):
        entk.entk(lambda p, x: mlp(p, x).sum(), params, x1)
    op = entk.entk_matvec(f, params, x1)
    with pytest.raises(ValueError, match="expected a vector of shape"):
        op(jnp.ones(3))


def test_convention_errors_teach_the_convention():
    """A 1-D x (one example, no batch axis) and a batched f are explained, not raw JAX errors."""
    f, params, x1, _ = setup("mlp")
    with pytest.raises(ValueError, match=r"failed on one example .* shape \(\).*\(C,\).*x1\[None\]"):
        entk.entk(f, params, x1[0])  # one example (4,): x1[0] is then a scalar
    batched = lambda p, xb: jax.vmap(lambda x: mlp(p, x))(xb)  # noqa: E731
    with pytest.raises(ValueError, match=r"failed on one example|batch axis of 1"):
        entk.entk(batched, params, x1)
    with pytest.raises(ValueError, match=r"batch axis of 1.*x\[None\]\)\[0\]"):
        entk.entk(lambda p, x: mlp(p, x)[None], params, x1)
    with pytest.raises(ValueError, match=r"a scalar.*\(C,\)"):
        entk.entk(lambda p, x: mlp(p, x).sum(), params, x1)
    with pytest.raises(ValueError, match=r"non-empty batch.*\(N, \*feature_shape\)"):
        entk.entk(f, params, jnp.ones((0, 4)))


def test_non_finite_inputs_and_params_are_rejected():
    f, params, x1, x2 = setup("mlp")
    bad = x1.at[2, 1].set(jnp.nan)
    with pytest.raises(ValueError, match=r"x1 holds 1 non-finite value.*index \(2, 1\)"):
        entk.entk(f, params, bad)
    with pytest.raises(ValueError, match=r"x2 holds 1 non-finite"):
        entk.entk(f, params, x1, bad)
    with pytest.raises(ValueError, match=r"x1 holds"):
        entk.entk_matvec(f, params, bad)
    p_bad = jax.tree_util.tree_map(lambda a: a, params)
    p_bad["dense2"]["w"] = p_bad["dense2"]["w"].at[0, 0].set(jnp.inf)
    with pytest.raises(ValueError, match=r"parameter \['dense2'\]\['w'\] holds 1 non-finite"):
        entk.entk(f, p_bad, x1)
    with pytest.raises(ValueError, match=r"parameter \['dense2'\]\['w'\]"):
        entk.entk_matvec(f, p_bad, x1)
    op = entk.entk_matvec(f, params, x1)
    with pytest.raises(ValueError, match="the vector v of K v holds"):
        op(jnp.full(op.dim, jnp.nan))
    # finite inputs and parameters whose outputs overflow: the kernel says so
    huge = jax.tree_util.tree_map(lambda a: a * 1e200, params)
    with pytest.raises(FloatingPointError, match="overflow"):
        entk.entk(lambda p, x: jnp.exp(mlp(p, x)) * 1e300, huge, x1)
