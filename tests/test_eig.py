"""Lanczos against dense eigh; ghosts without reorthogonalisation; HVP against jax.hessian."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.ntk.eig import EigResult, check_symmetric, dense_topk, hvp_operator, lanczos_topk  # noqa: E402


def sym_with_spectrum(evals, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(evals), len(evals))))
    A = (Q * evals) @ Q.T
    return jnp.asarray((A + A.T) / 2)


class Counting:
    def __init__(self, A):
        self.A, self.n = A, 0

    def __call__(self, v):
        self.n += 1
        return self.A @ v


def subspace_overlap(U, V):
    """||U^T V||_F^2 / k for orthonormal (dim, k) U, V: 1 when the spans coincide."""
    return float(np.linalg.norm(np.asarray(U).T @ np.asarray(V)) ** 2 / U.shape[1])


@pytest.mark.parametrize("k,dim,seed", [(5, 200, 0), (10, 300, 1), (25, 400, 2)])
def test_lanczos_matches_eigh(k, dim, seed):
    rng = np.random.default_rng(seed)
    # top-k eigenvalues in [10, 20], a gap, the rest in [0, 1]
    evals = np.concatenate([np.linspace(20, 10, k), rng.uniform(0, 1, dim - k)])
    A = sym_with_spectrum(evals, seed)
    op = Counting(A)
    res = lanczos_topk(op, dim, k, check=False)
    assert isinstance(res, EigResult)
    assert op.n == res.num_matvecs <= 2 * k + 10
    w, V = np.linalg.eigh(np.asarray(A))
    top, Vtop = w[::-1][:k], V[:, ::-1][:, :k]
    assert res.eigenvalues.shape == (k,) and res.eigenvectors.shape == (dim, k)
    assert np.all(np.diff(np.asarray(res.eigenvalues)) <= 0)
    np.testing.assert_allclose(res.eigenvalues, top, rtol=1e-8)
    assert subspace_overlap(Vtop, res.eigenvectors) > 0.999
    # residual estimates agree with true residuals (to roundoff) and are small
    true_res = np.linalg.norm(np.asarray(A @ res.eigenvectors - res.eigenvectors * res.eigenvalues),
                              axis=0)
    assert np.all(true_res < 1e-6 * top[0])
    assert np.all(np.asarray(res.residual_norms) < 1e-6 * top[0])


def test_ghost_eigenvalues_without_reorthogonalisation():
    # one dominant eigenvalue far above a dense bulk: it converges in a few steps, after which the
    # plain recurrence loses orthogonality and produces duplicate converged copies of it
    dim = 300
    evals = np.concatenate([[100.0], np.linspace(0.0, 1.0, dim - 1)])
    A = sym_with_spectrum(evals, 1)
    mv = lambda v: A @ v  # noqa: E731
    copies = {}
    for ro in (0, 2):
        res = lanczos_topk(mv, dim, 10, num_steps=100, reorthogonalize=ro)
        copies[ro] = int(np.sum(np.abs(np.asarray(res.eigenvalues) - 100.0) < 1e-6 * 100.0))
    assert copies[0] >= 3, copies  # ghosts
    assert copies[2] == 1, copies  # reorthogonalisation prevents them


def test_breakdown_low_rank():
    # rank-3 operator, k = 5: the Krylov space becomes invariant after ~4 steps
    rng = np.random.default_rng(3)
    B = rng.standard_normal((50, 3))
    A = jnp.asarray(B @ B.T)
    res = lanczos_topk(lambda v: A @ v, 50, 5)
    w = np.linalg.eigvalsh(np.asarray(A))[::-1][:5]
    assert np.all(np.isfinite(np.asarray(res.eigenvalues)))
    np.testing.assert_allclose(res.eigenvalues[:3], w[:3], rtol=1e-10)
    np.testing.assert_allclose(res.eigenvalues[3:], 0.0, atol=1e-10 * w[0])
    V = np.asarray(res.eigenvectors)
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-10)
    # tiny dim: the whole space is spanned
    A2 = sym_with_spectrum(np.array([3.0, 2.0, 1.0]))
    r2 = lanczos_topk(lambda v: A2 @ v, 3, 3)
    np.testing.assert_allclose(r2.eigenvalues, [3.0, 2.0, 1.0], rtol=1e-12)


def test_dense_topk_and_lanczos_on_entk():
    from ntkbook.ntk.entk import entk, entk_matvec

    def f(p, x):
        return jnp.tanh(x @ p["w1"]) @ p["w2"]

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w1": jax.random.normal(k1, (6, 32)), "w2": jax.random.normal(k2, (32, 4))}
    x = jax.random.normal(k3, (20, 6))
    K = entk(f, params, x, reduction="flat")
    d = dense_topk(K, 6)
    w = np.linalg.eigvalsh(np.asarray(K))[::-1][:6]
    np.testing.assert_allclose(d.eigenvalues, w, rtol=1e-10)
    assert np.all(np.asarray(d.residual_norms) < 1e-8 * w[0])
    op = entk_matvec(f, params, x, reduction="flat")
    r = lanczos_topk(op, op.dim, 6, num_steps=40)
    np.testing.assert_allclose(r.eigenvalues[:3], w[:3], rtol=1e-8)
    assert subspace_overlap(d.eigenvectors[:, :3], r.eigenvectors[:, :3]) > 0.999


def test_bad_input():
    A = jnp.asarray(np.triu(np.ones((10, 10))))
    with pytest.raises(ValueError, match="not symmetric"):
        check_symmetric(lambda v: A @ v, 10)
    with pytest.raises(ValueError, match="not symmetric"):
        lanczos_topk(lambda v: A @ v, 10, 2)
    S = jnp.eye(10)
    with pytest.raises(ValueError, match=r"1 <= k <= dim = 10"):
        lanczos_topk(lambda v: S @ v, 10, 11)
    with pytest.raises(ValueError, match=r"1 <= k <= dim = 10"):
        lanczos_topk(lambda v: S @ v, 10, 0)
    with pytest.raises(ValueError, match=r"1 <= k <= dim = 10"):
        dense_topk(S, 11)
    with pytest.raises(ValueError, match="num_steps"):
        lanczos_topk(lambda v: S @ v, 10, 5, num_steps=3)
    with pytest.raises(ValueError, match="square"):
        dense_topk(jnp.ones((3, 4)), 1)


def test_hvp_operator_matches_hessian():
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w": jax.random.normal(k1, (3, 2)), "b": jax.random.normal(k2, (2,))}
    x = jax.random.normal(k3, (5, 3))

    def loss(p):
        return jnp.mean(jnp.sin(x @ p["w"] + p["b"]) ** 2)

    mv, dim, unravel = hvp_operator(loss, params)
    assert dim == 8
    from jax.flatten_util import ravel_pytree

    flat, unr = ravel_pytree(params)
    H = jax.hessian(lambda th: loss(unr(th)))(flat)
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = rng.standard_normal(dim)
        np.testing.assert_allclose(mv(v), H @ v, rtol=1e-12, atol=1e-12)
    assert jax.tree_util.tree_structure(unravel(flat)) == jax.tree_util.tree_structure(params)
    res = lanczos_topk(mv, dim, 2, num_steps=dim)
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(np.asarray(H))[::-1][:2],
                               rtol=1e-10)


def test_dense_topk_checks_symmetry_and_finiteness():
    A = np.asarray(sym_with_spectrum(np.linspace(1, 10, 30)))
    E = np.zeros_like(A)
    E[0, 1] = 1e-6 * np.linalg.norm(A)  # asymmetry 1e-6 relative: far above round-off
    with pytest.raises(ValueError, match="not symmetric.*rtol = 1e-08"):
        dense_topk(A + E, 3)
    dense_topk(A + 1e-13 * E, 3)  # round-off level asymmetry passes
    dense_topk(A + E, 3, rtol=1e-5)
    with pytest.raises(ValueError, match="not symmetric.*rtol = 0.001"):
        dense_topk(jnp.asarray(A + 1e-2 * E / 1e-6, dtype=jnp.float32), 3)
    bad = A.copy()
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="1 non-finite"):
        dense_topk(bad, 3)


def test_symmetry_check_resolves_small_asymmetry():
    """check_symmetric must see a 1e-6 relative asymmetry in float64 (rtol 1e-8), and Lanczos
    must run it by default."""
    A = np.asarray(sym_with_spectrum(np.linspace(1, 10, 40)))
    B = A.copy()
    B[0, 1] += 1e-5 * np.abs(A).max()
    with pytest.raises(ValueError, match="not symmetric"):
        check_symmetric(lambda v: jnp.asarray(B) @ v, 40)
    with pytest.raises(ValueError, match="not symmetric"):
        lanczos_topk(lambda v: jnp.asarray(B) @ v, 40, 3)
    check_symmetric(lambda v: jnp.asarray(A) @ v, 40)


def test_hvp_operator_rejects_non_finite_params():
    with pytest.raises(ValueError, match="non-finite"):
        hvp_operator(lambda p: jnp.sum(p["w"] ** 2), {"w": jnp.array([1.0, jnp.nan])})


def test_ritz_residual_estimates_are_the_true_residuals():
    """With few steps the Ritz pairs are not converged; the estimates |beta_m s_{m,i}| must still
    equal the true residuals ||A y - theta y|| (full re-orthogonalisation)."""
    A = sym_with_spectrum(np.linspace(1.0, 2.0, 150), seed=4)
    res = lanczos_topk(lambda v: A @ v, 150, 4, num_steps=12)
    Y, th = np.asarray(res.eigenvectors), np.asarray(res.eigenvalues)
    true = np.linalg.norm(np.asarray(A) @ Y - Y * th, axis=0)
    assert true.min() > 1e-6  # not converged: the test can tell the rows apart
    np.testing.assert_allclose(np.asarray(res.residual_norms), true, rtol=1e-6)


def test_breakdown_on_an_exactly_invariant_space():
    """The zero operator breaks down at the first step (beta = 0 exactly): the method must restart
    with fresh orthogonal vectors, and return k orthonormal eigenvectors of eigenvalue 0."""
    res = lanczos_topk(lambda v: 0.0 * v, 20, 5)
    V = np.asarray(res.eigenvectors)
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-12)
    np.testing.assert_array_equal(np.asarray(res.eigenvalues), 0.0)
    # a rank-2 projector onto coordinate axes: exact invariance after two steps
    P = np.zeros(20)
    P[:2] = 1.0
    res = lanczos_topk(lambda v: jnp.asarray(P) * v, 20, 4)
    V = np.asarray(res.eigenvectors)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(np.asarray(res.eigenvalues), [1, 1, 0, 0], atol=1e-12)


def test_default_is_two_reorthogonalisation_passes():
    """The documented default ("twice is enough"). One pass after the three-term recurrence is
    numerically equivalent on every operator tried, so this contract is checked directly."""
    import inspect

    assert inspect.signature(lanczos_topk).parameters["reorthogonalize"].default == 2
    A = sym_with_spectrum(np.r_[np.arange(1.0, 6.0), 1e-9 * np.ones(95)], seed=5)
    for passes in (1, 2):
        V = np.asarray(lanczos_topk(lambda v: A @ v, 100, 8, reorthogonalize=passes).eigenvectors)
        np.testing.assert_allclose(V.T @ V, np.eye(8), atol=1e-13)


def test_lanczos_stops_on_non_finite_products_without_the_check():
    """With check=False the symmetry check cannot catch NaN: every Lanczos step must."""
    A = sym_with_spectrum(np.linspace(1.0, 3.0, 60))
    calls = []

    def flaky(v):
        calls.append(1)
        return A @ v * (jnp.nan if len(calls) == 7 else 1.0)

    with pytest.raises(FloatingPointError, match="step 6: operator produced non-finite values"):
        lanczos_topk(flaky, 60, 3, check=False)


def test_lanczos_progress_reports_slow_runs_and_changes_nothing(capsys):
    """``progress=label`` reports the steps of a slow operator under that label (work under 2 s
    prints nothing) and leaves the result bit-for-bit unchanged."""
    import time

    rng = np.random.default_rng(3)
    B = rng.standard_normal((30, 30))
    A = jnp.asarray(B @ B.T)

    def slow(v):
        time.sleep(0.12)
        return A @ v

    quiet = lanczos_topk(lambda v: A @ v, 30, 3, num_steps=20, check=False)
    capsys.readouterr()
    loud = lanczos_topk(slow, 30, 3, num_steps=20, check=False, progress="Lanczos test")
    out = capsys.readouterr()
    assert "Lanczos test" in out.out + out.err
    np.testing.assert_array_equal(np.asarray(quiet.eigenvalues), np.asarray(loud.eigenvalues))
    lanczos_topk(lambda v: A @ v, 30, 3, num_steps=20, check=False, progress="fast run")
    out = capsys.readouterr()
    assert "fast run" not in out.out + out.err
