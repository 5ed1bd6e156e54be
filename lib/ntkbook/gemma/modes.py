r"""One point of a layer sweep over Gemma: the top eNTK modes of a layer and the PCA baseline.

:func:`layer_point` computes, for N contexts and one (layer ``L``, parameter set): the residual
streams entering layer ``L`` (:func:`ntkbook.gemma.operator.compute_residuals`), the top ``k``
modes of the reduced operator ``S^{1/2} K_r S^{1/2}`` by Lanczos
(:func:`ntkbook.ntk.eig.lanczos_topk`: full re-orthogonalisation, seeded, float64 vectors; the model
runs in float32), each mode's score per context (:func:`ntkbook.gemma.operator.mode_scores`), and
the top principal components of the output of block ``L`` at the last position
(:func:`ntkbook.gemma.probe.pca_scores`).  :func:`identity_check` checks on the real model that the
reduced operator has the nonzero spectrum of the eNTK of all ``N V`` logits.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["layer_point", "layer_output_fn", "identity_check"]


def layer_point(params, cfg, contexts: np.ndarray, L: int, param_set: str, gram_half: np.ndarray, *, k: int,
                lanczos_steps: int, seed: int, chunk: int, pca_k: int) -> tuple[dict, dict]:
    """The modes and principal components of one point for ``contexts`` (N, T) token ids.

    Returns arrays ``eigenvalues`` (k,), ``ritz_residuals`` (k,), ``entk_scores`` (k, N),
    ``pca_scores`` (pca_k, N), ``pca_variance`` (pca_k,), and scalars (layer, parameter set,
    number of parameters, wall times of the residuals, the symmetry check and Lanczos, products
    and seconds per product)."""
    import jax  # noqa: PLC0415

    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415
    from ntkbook.gemma import probe  # noqa: PLC0415
    from ntkbook.ntk.eig import check_symmetric, lanczos_topk  # noqa: PLC0415

    N = len(contexts)
    t = time.perf_counter()
    res = gemma_operator.compute_residuals(params, cfg, contexts, L)
    block_out = np.concatenate([np.asarray(layer_output_fn(cfg, L)(params["layers"], res[s:s + 32]))
                                for s in range(0, N, 32)])
    t_res = time.perf_counter() - t
    op = gemma_operator.layer_operator(params, cfg, res, L, param_set=param_set, gram_half=gram_half, chunk=chunk)
    with jax.enable_x64(True):
        t = time.perf_counter()
        check_symmetric(op, op.dim, trials=1, rtol=1e-4, dtype=jax.numpy.float64)
        t_check = time.perf_counter() - t
        t = time.perf_counter()
        eig = lanczos_topk(op, op.dim, k, num_steps=lanczos_steps, seed=seed,
                           dtype=jax.numpy.float64, check=False, progress=f"Lanczos, layer {L} {param_set}")
        t_lanczos = time.perf_counter() - t
        vecs = np.asarray(eig.eigenvectors)
        lam = np.asarray(eig.eigenvalues)
        ritz = np.asarray(eig.residual_norms)
    entk_sc = gemma_operator.mode_scores(vecs, N, cfg.d_model)
    pca_sc, pca_var = probe.pca_scores(block_out, pca_k)
    scalars = {"layer": L, "param_set": param_set, "num_params": op.num_params, "t_residuals": t_res,
               "t_symmetry_check": t_check, "t_lanczos": t_lanczos,
               "products": eig.num_matvecs, "t_per_product": t_lanczos / eig.num_matvecs}
    return ({"eigenvalues": lam, "ritz_residuals": ritz, "entk_scores": entk_sc, "pca_scores": pca_sc,
             "pca_variance": pca_var}, scalars)


def layer_output_fn(cfg, L: int):
    """jit(vmap) of block ``L`` on residual streams ``(B, T, d)``: the output of the block (the
    residual entering block ``L+1``) at the last position, ``(B, d)``."""
    import jax  # noqa: PLC0415

    from ntkbook.gemma import model as gemma_model  # noqa: PLC0415

    def one(layers, h):
        lp = {k: v[L] for k, v in layers.items()}
        return gemma_model.run_layer(lp, h, cfg, L in cfg.global_layers)[-1]

    return jax.jit(jax.vmap(one, in_axes=(None, 0)))


def identity_check(params, cfg, residuals, L: int, param_set=("k_norm",), directions: int = 32,
                   gram_half: np.ndarray | None = None, block: int = 8192, seed: int = 0) -> dict:
    """Nonzero spectrum of ``S^{1/2} K_r S^{1/2}`` vs that of the eNTK of all ``N V`` logits.

    The Jacobian is taken along ``directions`` random orthonormal directions ``R`` of the chosen
    parameters (the eNTK of the reparametrisation ``theta = theta_0 + R phi``; the identity holds
    for any parameter set): ``J = J_r R`` (N d x r) by forward mode.  The logit side is
    ``J_L^T J_L`` (r x r) with ``J_L = (I (x) U) J``, accumulated over blocks of the vocabulary in
    float64, so the (N V x N V) logit kernel is never formed: its nonzero eigenvalues are those of
    ``J_L^T J_L``.  Returns both spectra and their largest difference relative to the top eigenvalue.
    """
    import jax  # noqa: PLC0415

    from ntkbook.gemma import operator as gemma_operator  # noqa: PLC0415
    from ntkbook.gemma import model as gemma_model  # noqa: PLC0415

    keys = gemma_operator.param_keys(param_set)
    theta = {k: params["layers"][k][L] for k in keys}
    flat0, unravel = jax.flatten_util.ravel_pytree(theta)
    R, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((flat0.size, directions)))
    rest = gemma_operator.forward_from_params(params)
    h = jax.numpy.asarray(residuals)

    def F(vec):
        th = unravel(vec)
        return jax.vmap(lambda x: gemma_model.forward_from(rest, cfg, x, L, layer_L=th)[-1])(h).reshape(-1)

    jvp = jax.jit(jax.vmap(lambda t: jax.jvp(F, (flat0,), (t,))[1]))
    J = np.asarray(jvp(jax.numpy.asarray(R.T, flat0.dtype)), np.float64).T  # (N d, r)
    N, d = h.shape[0], cfg.d_model
    Gh = gemma_operator.gram_sqrt(params["embed"]) if gram_half is None else np.asarray(gram_half, np.float64)
    S_J = np.einsum("de,nep->ndp", Gh, J.reshape(N, d, -1)).reshape(N * d, -1)
    ev_red = np.sort(np.linalg.eigvalsh(S_J @ S_J.T))[::-1]
    U = np.asarray(params["embed"])
    A = np.zeros((J.shape[1], J.shape[1]))
    Jn = J.reshape(N, d, -1)
    for s in range(0, U.shape[0], block):
        Ub = U[s:s + block].astype(np.float64)
        for n in range(N):
            JL = Ub @ Jn[n]
            A += JL.T @ JL
    ev_logit = np.sort(np.linalg.eigvalsh(A))[::-1]
    r = min(len(ev_red), len(ev_logit))
    err = float(np.max(np.abs(ev_red[:r] - ev_logit[:r])) / ev_logit[0])
    return {"ev_reduced": ev_red[:r], "ev_logit": ev_logit[:r], "rel_err": err, "P": int(flat0.size),
            "directions": int(directions), "N": int(N), "param_set": list(keys),
            "rest_max": float(np.max(np.abs(ev_red[r:])) / ev_logit[0]) if len(ev_red) > r else 0.0}
