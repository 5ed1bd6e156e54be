r"""Top-k eigenpairs of symmetric positive semi-definite operators given only as a matvec.

:func:`lanczos_topk` is the Lanczos method: from a random unit vector ``q_1`` it builds an orthonormal
basis ``Q_m = [q_1 .. q_m]`` of the Krylov space ``span{q_1, A q_1, .., A^{m-1} q_1}`` with the
three-term recurrence ``beta_j q_{j+1} = A q_j - alpha_j q_j - beta_{j-1} q_{j-1}``, so that
``Q_m^T A Q_m = T_m`` is tridiagonal; the eigenpairs ``(theta_i, s_i)`` of ``T_m`` give Ritz pairs
``(theta_i, Q_m s_i)``.  The extreme eigenvalues converge first, typically in about ``2k`` products
when the spectrum has a gap after the k-th eigenvalue.

In floating point the recurrence loses orthogonality as soon as a Ritz value converges, and the
converged eigenvalue reappears as spurious duplicate copies ("ghost" eigenvalues).  By default each
new vector is therefore re-orthogonalised against all previous ones, twice
(``reorthogonalize=2``: "twice is enough", Kahan/Parlett), at ``O(m * dim)`` cost per step.
``reorthogonalize=0`` runs the plain recurrence, for demonstrating the ghosts.

Breakdown: if ``beta_j`` falls below ``eps^(2/3) * ||T||`` the Krylov space is (numerically)
invariant; the method then continues from a fresh random vector orthogonalised against the basis
(with a zero coupling in ``T``), so that ``k`` eigenpairs are found even for operators of rank below
``k``, until the whole space is spanned.

Residual norms are the Ritz estimates ``|beta_m s_{m,i}|`` (equal to ``||A y_i - theta_i y_i||`` in
exact arithmetic with full reorthogonalisation); they cost no extra products.

Own implementation versus matfree
    ``matfree.decomp.tridiag_sym(num_matvecs, reortho="full")`` (matfree 0.6.3) was compared with
    this implementation in ``benchmarks/bench_entk.py`` (numbers in ``benchmarks/README.md``): on
    the same operators, with the same 60 products for the top 25, both reach eigenvalue errors of
    ~1e-15 and true residuals of ~1e-15 * lambda_1, and both survive breakdown on a rank-3 operator.
    matfree is faster when the product itself is cheap (one jitted ``fori_loop`` and one
    re-orthogonalisation pass, against a Python loop with two passes here: about 0.4 s against
    0.6-1 s for n = 20000 on 2 CPU cores); when the operator is an eNTK product (milliseconds to
    seconds each) that difference is negligible.  This module keeps its own implementation because
    (1) the design requires matfree to be an optional, lazily imported dependency (the GPU machines
    have only jax/flax/numpy/scipy), so the core solver must not need it; (2) it accepts any
    callable, also a non-JAX one, and checks every step for non-finite values; (3) it exposes the
    plain recurrence and the number of re-orthogonalisation passes through the same interface for
    the ghost-eigenvalue demonstration; (4) breakdown is detected explicitly and restarted from a
    random orthogonal vector rather than left to round-off.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError, NtkbookError, NumericalError

__all__ = [
    "EigResult",
    "lanczos_topk",
    "dense_topk",
    "check_symmetric",
    "hvp_operator",
]


@dataclasses.dataclass(frozen=True)
class EigResult:
    """Top-k eigenpairs: ``eigenvalues`` (k,) descending, ``eigenvectors`` (dim, k) orthonormal
    columns, ``residual_norms`` (k,) (``||A v - lambda v||`` or its Ritz estimate), ``num_matvecs``
    (operator products used, excluding the symmetry check)."""

    eigenvalues: jax.Array
    eigenvectors: jax.Array
    residual_norms: jax.Array
    num_matvecs: int


def _default_dtype(matvec, dtype):
    if dtype is not None:
        return jnp.dtype(dtype)
    d = getattr(matvec, "dtype", None)
    if d is not None:
        return jnp.dtype(d)
    return jnp.zeros(()).dtype  # float64 when x64 is enabled, else float32


def _check_k(dim, k):
    if not isinstance(dim, (int, np.integer)) or dim < 1:
        raise InputError(f"dim must be a positive int, got {dim!r}")
    if not isinstance(k, (int, np.integer)) or k < 1 or k > dim:
        raise InputError(f"k must be an int with 1 <= k <= dim = {dim}, got k={k!r}")


def check_symmetric(matvec: Callable, dim: int, *, trials: int = 3, rtol: float = 1e-8, seed: int = 0,
                    dtype=None) -> None:
    """Raise ``InputError`` unless ``u^T A v == v^T A u`` (to ``rtol``) for random ``u, v``.

    The difference is measured relative to ``max(||u|| ||A v||, ||v|| ||A u||)``.  Costs ``2*trials``
    products.  ``rtol=1e-8`` suits float64 operators; use about ``1e-4`` for float32.
    """
    dtype = _default_dtype(matvec, dtype)
    rng = np.random.default_rng(seed)
    for t in range(trials):
        u = jnp.asarray(rng.standard_normal(dim), dtype=dtype)
        v = jnp.asarray(rng.standard_normal(dim), dtype=dtype)
        Av, Au = jnp.asarray(matvec(v)), jnp.asarray(matvec(u))
        if Av.shape != (dim,):
            raise InputError(f"matvec must map shape ({dim},) to ({dim},), got {Av.shape}")
        a = float(jnp.vdot(u, Av))
        b = float(jnp.vdot(v, Au))
        scale = max(float(jnp.linalg.norm(u) * jnp.linalg.norm(Av)),
                    float(jnp.linalg.norm(v) * jnp.linalg.norm(Au)), np.finfo(float).tiny)
        if not np.isfinite(a) or not np.isfinite(b):
            raise InputError("operator returned non-finite values")
        if abs(a - b) > rtol * scale:
            raise InputError(
                f"operator is not symmetric: u^T A v = {a:.6g} but v^T A u = {b:.6g} "
                f"(relative difference {abs(a - b) / scale:.2e} > rtol = {rtol:g}, trial {t})"
            )


@jax.jit
def _orthogonalize(Q, w, passes):
    # Q: (m+1, dim) with unused rows zero; classical Gram-Schmidt, `passes` times (0, 1 or 2)
    def body(_, w):
        return w - Q.T @ (Q @ w)

    return jax.lax.fori_loop(0, passes, body, w)


@functools.lru_cache(maxsize=None)
def _make_step(reorthogonalize):
    @functools.partial(jax.jit, donate_argnums=0)  # update the basis buffer in place
    def step(Q, j, w, beta_prev):
        q = Q[j]
        alpha = jnp.vdot(q, w)
        prev = jnp.where(j > 0, beta_prev, 0.0) * Q[jnp.maximum(j - 1, 0)]
        w = w - alpha * q - prev
        for _ in range(reorthogonalize):
            w = w - Q.T @ (Q @ w)
        beta = jnp.linalg.norm(w)
        Q = Q.at[j + 1].set(jnp.where(beta > 0, w / jnp.where(beta > 0, beta, 1.0), 0.0))
        return Q, alpha, beta

    return step


def lanczos_topk(
    matvec: Callable,
    dim: int,
    k: int,
    *,
    num_steps: int | None = None,
    reorthogonalize: int = 2,
    seed: int = 0,
    dtype=None,
    check: bool = True,
    progress: str | None = None,
) -> EigResult:
    """Top-``k`` eigenpairs of the symmetric PSD operator ``v -> matvec(v)`` on vectors ``(dim,)``.

    ``num_steps`` (default ``min(2k + 10, dim)``) is the number of products, i.e. the Krylov depth;
    ``reorthogonalize`` is the number of full re-orthogonalisation passes per step (2 default, 0 for
    the plain three-term recurrence).  ``dtype`` defaults to ``matvec.dtype`` if present, else JAX's
    default float.  With ``check=True`` the operator is first tested with :func:`check_symmetric`
    (6 extra products, not counted in ``num_matvecs``); without it, an operator whose ``.dim`` or
    whose product's shape is not ``dim`` is still refused (``InputError``, no extra product).  ``progress``: the label of a progress
    report over the steps (for slow operators; a run shorter than 2 s prints nothing); ``None``
    (default) is silent.  See the module docstring.
    """
    _check_k(dim, k)
    if num_steps is None:
        num_steps = min(2 * k + 10, dim)
    if not (k <= num_steps <= dim):
        raise InputError(f"num_steps must satisfy k <= num_steps <= dim ({k} <= . <= {dim}), "
                         f"got {num_steps}")
    if reorthogonalize not in (0, 1, 2):
        raise InputError(f"reorthogonalize must be 0, 1 or 2, got {reorthogonalize!r}")
    op_dim = getattr(matvec, "dim", None)
    if op_dim is not None and op_dim != dim:
        raise InputError(f"the operator acts on vectors of size {op_dim} (its .dim) but dim = {dim}: "
                         f"pass dim={op_dim}")
    dtype = _default_dtype(matvec, dtype)
    if check:
        check_symmetric(matvec, dim, dtype=dtype,
                        rtol=1e-8 if jnp.finfo(dtype).bits >= 64 else 1e-3)

    eps = float(jnp.finfo(dtype).eps)
    key = jax.random.PRNGKey(seed)

    def random_unit(key, Q):
        r = jax.random.normal(key, (dim,), dtype=dtype)
        if Q is not None:
            r = _orthogonalize(Q, r, 2)
        n = float(jnp.linalg.norm(r))
        return r / n if n > 0 else r, n

    Q = jnp.zeros((num_steps + 1, dim), dtype=dtype)
    key, sub = jax.random.split(key)
    q0, _ = random_unit(sub, None)
    Q = Q.at[0].set(q0)
    step = _make_step(reorthogonalize)

    alphas, betas = [], []  # betas[j] couples q_j and q_{j+1}
    beta = jnp.zeros((), dtype=dtype)
    anorm = 0.0
    nmv = 0
    j = 0
    bar = None
    if progress is not None:
        from ntkbook.progress import Progress

        bar = Progress(num_steps, progress)
    while j < num_steps:
        try:
            w = jnp.asarray(matvec(Q[j]), dtype=dtype)
        except Exception as exc:
            if j or isinstance(exc, NtkbookError):
                raise
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise InputError(f"matvec failed on the start vector of shape ({dim},) ({type(exc).__name__}: "
                             f"{first}): is dim = {dim} the operator's size?") from exc
        nmv += 1
        if w.shape != (dim,):
            raise InputError(f"matvec must map shape ({dim},) to ({dim},), got {w.shape}: is dim = {dim} the "
                             "operator's size?")
        if bar is not None:
            bar.update()
        Q, alpha, beta = step(Q, j, w, beta)
        a, b = float(alpha), float(beta)
        if not (np.isfinite(a) and np.isfinite(b)):
            raise NumericalError(f"Lanczos step {j}: operator produced non-finite values")
        alphas.append(a)
        anorm = max(anorm, abs(a) + b + (betas[-1] if betas else 0.0))
        if j + 1 == num_steps:
            betas.append(b)
            break
        if b <= eps ** (2.0 / 3.0) * max(anorm, np.finfo(float).tiny):
            # breakdown: invariant subspace; restart orthogonally (zero coupling) if room is left
            key, sub = jax.random.split(key)
            r, n = random_unit(sub, Q.at[j + 1].set(0.0))
            if n <= np.sqrt(eps):  # the basis spans the whole space
                betas.append(0.0)
                break
            Q = Q.at[j + 1].set(r)
            betas.append(0.0)
            beta = jnp.zeros((), dtype=dtype)
        else:
            betas.append(b)
        j += 1
    if bar is not None:
        bar.close()

    m = len(alphas)
    T = np.diag(np.asarray(alphas)) + np.diag(np.asarray(betas[: m - 1]), 1) \
        + np.diag(np.asarray(betas[: m - 1]), -1)
    theta, S = np.linalg.eigh(T)
    order = np.argsort(theta)[::-1][:k]
    if len(order) < k:
        raise NumericalError(f"Lanczos produced only {m} Ritz values for k={k}")
    theta, S = theta[order], S[:, order]
    vecs = Q[:m].T @ jnp.asarray(S, dtype=dtype)
    res = np.abs(betas[m - 1] * S[m - 1, :])
    return EigResult(
        eigenvalues=jnp.asarray(theta, dtype=dtype),
        eigenvectors=vecs,
        residual_norms=jnp.asarray(res, dtype=dtype),
        num_matvecs=nmv,
    )


def dense_topk(matrix, k: int, *, rtol: float | None = None) -> EigResult:
    """Top-``k`` eigenpairs of a dense symmetric matrix by ``eigh`` (residuals computed exactly).

    The matrix must be finite and symmetric to ``rtol`` (``||A - A^T||_F <= rtol ||A||_F``;
    default ``1e-8`` for float64 and ``1e-3`` for lower precision, as in :func:`lanczos_topk`):
    ``eigh`` reads only one triangle, so a non-symmetric input would otherwise give the
    eigenpairs of a different matrix without a word.
    """
    A = jnp.asarray(matrix)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputError(f"matrix must be square, got shape {A.shape}")
    _check_k(A.shape[0], k)
    if not bool(jnp.all(jnp.isfinite(A))):
        raise InputError(
            f"matrix holds {int(jnp.sum(~jnp.isfinite(A)))} non-finite value(s) (NaN or inf)"
        )
    if rtol is None:
        rtol = 1e-8 if jnp.finfo(A.dtype).bits >= 64 else 1e-3
    size = float(jnp.linalg.norm(A))
    asym = float(jnp.linalg.norm(A - A.T))
    if asym > rtol * size:
        raise InputError(
            f"matrix is not symmetric: ||A - A^T||_F / ||A||_F = {asym / size:.2e} > rtol = "
            f"{rtol:g}. Symmetrise it explicitly ((A + A.T) / 2) if the asymmetry is round-off."
        )
    w, V = jnp.linalg.eigh(A)
    w, V = w[::-1][:k], V[:, ::-1][:, :k]
    res = jnp.linalg.norm(jnp.matmul(A, V, precision=jax.lax.Precision.HIGHEST) - V * w, axis=0)
    return EigResult(eigenvalues=w, eigenvectors=V, residual_norms=res, num_matvecs=0)


def hvp_operator(loss_fn: Callable, params):
    """Hessian-vector products of a scalar ``loss_fn(params)`` on flattened parameters.

    Returns ``(matvec, dim, unravel)``: ``matvec(v)`` is ``H v`` for ``v`` of shape ``(dim,)``
    computed forward-over-reverse (``jax.jvp`` of ``jax.grad``), jitted; ``unravel`` maps a flat
    vector back to the pytree of ``params``.  The Hessian is symmetric but not PSD in general, so
    :func:`lanczos_topk` on it returns the largest (algebraic) eigenvalues, e.g. the sharpness.
    """
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(params)
    if not bool(jnp.all(jnp.isfinite(flat))):
        raise InputError(
            f"params hold {int(jnp.sum(~jnp.isfinite(flat)))} non-finite value(s) (NaN or inf); "
            f"the Hessian there is meaningless (a diverged training run?)"
        )
    grad = jax.grad(lambda th: loss_fn(unravel(th)))

    @jax.jit
    def _hvp(th, v):
        return jax.jvp(grad, (th,), (v,))[1]

    def matvec(v):
        return _hvp(flat, jnp.asarray(v, dtype=flat.dtype))

    matvec.dtype = flat.dtype
    return matvec, int(flat.shape[0]), unravel
