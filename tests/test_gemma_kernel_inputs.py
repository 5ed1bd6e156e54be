"""PCA of the eNTK's own inputs (gemma_kernel_inputs) on a tiny random-weight Gemma and on synthetic
data: the activations are the down-projection's input, the eNTK of the down-projection only sees
them, and the Gram route gives the principal components."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.experiments import gemma_kernel_inputs as gki
from ntkbook.gemma import model as gemma_model
from ntkbook.gemma import operator as gemma_operator
from ntkbook.gemma import probe

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def tiny():
    cfg = gemma_model.GemmaConfig.tiny()
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.float64)
    ctx = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (4, 7), 0, cfg.vocab_size))
    return cfg, params, ctx


@pytest.mark.parametrize("L", [0, 2])  # a local and the global layer
def test_the_activations_are_the_down_projections_input(tiny, L):
    """down(a) with a = mlp_inputs, normed and added to the mid-layer residual, is the layer's output;
    so a changed down-projection input would change the block (the reconstruction can fail)."""
    cfg, params, ctx = tiny
    res = gemma_operator.compute_residuals(params, cfg, ctx, L)
    lp = {k: v[L] for k, v in params["layers"].items()}
    g = L in cfg.global_layers
    for h in res:
        a = gki.mlp_inputs(lp, jnp.asarray(h), cfg, g)
        out = gemma_model.run_layer(lp, jnp.asarray(h), cfg, g)
        m = gemma_model.rms_norm(a @ lp["down"].T, lp["post_ffn_norm"], cfg.rms_eps)
        mid = out - m  # the residual after attention, if a is the MLP's input
        lp0 = {**lp, "down": jnp.zeros_like(lp["down"])}
        assert np.allclose(gemma_model.run_layer(lp0, jnp.asarray(h), cfg, g), mid, atol=1e-10)
        assert not np.allclose(a, 0)


def test_the_entk_of_the_down_projection_sees_only_the_activations(tiny):
    """Each row of the Jacobian w.r.t. W_down (d x F) lies in the span of the context's activations
    a_t (T < F), as Theta = sum_{t,t'} (delta_t . delta_t')(a_t . a_t') says; a random matrix does not."""
    cfg, params, ctx = tiny
    L = 1
    ctx = ctx[:2]
    res = gemma_operator.compute_residuals(params, cfg, ctx, L)
    J = gemma_operator.jacobian_dense(params, cfg, res, L).reshape(len(ctx), cfg.d_model, cfg.d_model, cfg.d_ff)
    lp = {k: v[L] for k, v in params["layers"].items()}
    T = ctx.shape[1]
    assert T < cfg.d_ff
    rng = np.random.default_rng(0)
    for n in range(len(ctx)):
        A = np.asarray(gki.mlp_inputs(lp, jnp.asarray(res[n]), cfg, False))  # (T, F)
        Q, _ = np.linalg.qr(A.T)  # (F, T) basis of the span
        rows = J[n].reshape(-1, cfg.d_ff)
        off = rows - (rows @ Q) @ Q.T
        assert np.abs(off).max() < 1e-8 * np.abs(rows).max()
        R = rng.standard_normal(rows.shape)
        assert np.abs(R - (R @ Q) @ Q.T).max() > 0.1


def test_gram_scores_are_the_principal_components():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 300)) @ np.diag(np.linspace(3, 0.1, 300)) + 2.0
    mine, share = gki.gram_pca_scores(X @ X.T, 5)
    ref, ref_share = probe.pca_scores(X, 5)
    signs = np.sign(np.sum(mine * ref, axis=1, keepdims=True))
    assert np.allclose(signs * mine, ref, atol=1e-8) and np.allclose(share, ref_share)
    with pytest.raises(gki.ConfigError, match="k"):
        gki.gram_pca_scores(X @ X.T, 41)


def test_split_rows_choose_as_the_probe_chooses():
    rng = np.random.default_rng(1)
    y = np.zeros(60, bool)
    y[:15] = True
    sc = rng.standard_normal((4, 60))
    sc[2] -= 3.0 * y
    splits = probe.story_splits(y.astype(int), np.arange(60) // 2, 3, seed=0)
    row = gki.split_rows(sc, {"t": y}, splits)[0]
    for j, (tr, te) in enumerate(splits):
        r = probe.evaluate_task(sc, y, tr, te)
        assert (row["ap"][j], row["auroc"][j], row["mode"][j]) == (r["ap"], r["auroc"], r["mode"])
    assert set(row["mode"]) == {2} and min(row["auroc"]) > 0.9


def test_the_presets_share_gemma_probes_tasks_and_splits():
    from ntkbook.experiments import gemma_probe

    fields = ("n_per_class", "data_scale", "data_n_per_class", "folds", "split_seed", "n_splits",
              "min_support", "min_words", "max_top_share")
    for preset in ("smoke", "paper"):
        a, b = getattr(gki.Config, preset)(), getattr(gemma_probe.Config, preset)()
        assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}
