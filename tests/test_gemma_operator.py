"""Fast tests of the Gemma code on a tiny random-weight model: architecture pieces, the residual-start
forward, the matrix-free reduced eNTK against dense Jacobians, the S^{1/2} identity, sharding."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.gemma import operator as gemma_operator
from ntkbook.ntk.eig import lanczos_topk
from ntkbook.gemma import model as gemma_model

jax.config.update("jax_enable_x64", True)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    cfg = gemma_model.GemmaConfig.tiny()
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.float64)
    ctx = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (5, 7), 0, cfg.vocab_size))
    return cfg, params, ctx


def test_global_layers():
    assert gemma_model.GemmaConfig().global_layers == (5, 11, 17)
    assert gemma_model.GemmaConfig.tiny().global_layers == (2,)


def _attention_brute(q, k, v, scale, allowed):
    """Loop-over-positions attention (one head); allowed(i, j) -> bool."""
    T = q.shape[0]
    out = np.zeros_like(v)
    for i in range(T):
        js = [j for j in range(T) if allowed(i, j)]
        s = np.array([q[i] @ k[j] * scale for j in js])
        w = np.exp(s - s.max())
        w /= w.sum()
        out[i] = sum(wj * v[j] for wj, j in zip(w, js))
    return out


def _layer_brute(lp, h, cfg, is_global):
    """Independent numpy implementation of one Gemma-3 layer (loops, explicit rotation pairs)."""
    lp = {k: np.asarray(v) for k, v in lp.items()}
    h = np.asarray(h)
    T, hd, eps = h.shape[0], cfg.head_dim, cfg.rms_eps

    def norm(x, s):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * s

    def rope(x, base):  # x (T, hd): rotate pairs (i, i + hd/2)
        y = x.copy()
        for t in range(T):
            for i in range(hd // 2):
                th = t / base ** (2 * i / hd)
                a, b = x[t, i], x[t, i + hd // 2]
                y[t, i], y[t, i + hd // 2] = a * np.cos(th) - b * np.sin(th), b * np.cos(th) + a * np.sin(th)
        return y

    base = cfg.rope_global_base if is_global else cfg.rope_local_base
    allowed = (lambda i, j: j <= i) if is_global else (lambda i, j: i - cfg.sliding_window < j <= i)
    x = norm(h, lp["attn_norm"])
    q, k, v = x @ lp["q"].T, x @ lp["k"].T, x @ lp["v"].T
    heads = []
    for hh in range(cfg.n_heads):
        kv = hh // (cfg.n_heads // cfg.n_kv_heads)
        qh = rope(norm(q[:, hh * hd:(hh + 1) * hd], lp["q_norm"]), base)
        kh = rope(norm(k[:, kv * hd:(kv + 1) * hd], lp["k_norm"]), base)
        heads.append(_attention_brute(qh, kh, v[:, kv * hd:(kv + 1) * hd], cfg.query_pre_attn_scalar ** -0.5, allowed))
    h = h + norm(np.concatenate(heads, 1) @ lp["o"].T, lp["post_attn_norm"])
    x = norm(h, lp["ffn_norm"])
    g = x @ lp["gate"].T
    g = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    return h + norm((g * (x @ lp["up"].T)) @ lp["down"].T, lp["post_ffn_norm"])


@pytest.mark.parametrize("layer", [0, 2])  # a local layer (window 4 < T) and the global one
def test_layer_matches_brute_force(tiny, layer):
    cfg, params, ctx = tiny
    h = gemma_model.residual(params, cfg, ctx[0], layer)
    lp = {k: v[layer] for k, v in params["layers"].items()}
    ours = gemma_model.run_layer(lp, h, cfg, layer in cfg.global_layers)
    ref = _layer_brute(lp, h, cfg, layer in cfg.global_layers)
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=1e-10, atol=1e-10)


def test_forward_from_residual_equals_full(tiny):
    cfg, params, ctx = tiny
    full = gemma_model.hidden(params, cfg, ctx[1])
    for L in range(cfg.n_layers + 1):
        h = gemma_model.residual(params, cfg, ctx[1], L)
        np.testing.assert_allclose(np.asarray(gemma_model.forward_from(params, cfg, h, L)), np.asarray(full),
                                   rtol=1e-12, atol=1e-12)


def test_causal(tiny):
    cfg, params, ctx = tiny
    a = gemma_model.hidden(params, cfg, ctx[0])
    changed = ctx[0].copy()
    changed[-1] = (changed[-1] + 1) % cfg.vocab_size
    b = gemma_model.hidden(params, cfg, changed)
    np.testing.assert_allclose(np.asarray(a[:-1]), np.asarray(b[:-1]), atol=1e-12)
    assert not np.allclose(np.asarray(a[-1]), np.asarray(b[-1]))


def test_bad_input(tiny):
    cfg, params, ctx = tiny
    with pytest.raises(ValueError, match="layer index"):
        gemma_model.residual(params, cfg, ctx[0], cfg.n_layers + 1)
    with pytest.raises(ValueError, match="layer index"):
        gemma_operator.layer_operator(params, cfg, np.zeros((2, 3, cfg.d_model)), cfg.n_layers)
    with pytest.raises(ValueError, match="longer than the model's window"):
        gemma_model.residual(params, cfg, np.zeros(cfg.max_context + 1, np.int32), 0)
    with pytest.raises(ValueError, match="unknown parameter set"):
        gemma_operator.layer_operator(params, cfg, np.zeros((2, 3, cfg.d_model)), 0, param_set="attention")
    with pytest.raises(ValueError, match="residuals must be"):
        gemma_operator.layer_operator(params, cfg, np.zeros((2, 3, cfg.d_model + 1)), 0)


@pytest.mark.parametrize("param_set", ["down_proj", "layer"])
def test_operator_matches_dense(tiny, param_set):
    cfg, params, ctx = tiny
    L = 1
    res = gemma_operator.compute_residuals(params, cfg, ctx, L, batch=2)
    J = gemma_operator.jacobian_dense(params, cfg, res, L, param_set)
    Gh = gemma_operator.gram_sqrt(params["embed"])
    K_dense = Gh_kron(Gh, len(ctx)) @ (J @ J.T) @ Gh_kron(Gh, len(ctx))
    op = gemma_operator.layer_operator(params, cfg, res, L, param_set=param_set, gram_half=Gh, chunk=2)
    assert op.num_params == J.shape[1]
    rng = np.random.default_rng(0)
    for _ in range(3):
        w = rng.standard_normal(op.dim)
        np.testing.assert_allclose(op(w), K_dense @ w, rtol=1e-9, atol=1e-9 * np.abs(K_dense).max())
    # the plain reduced kernel K_r
    op_r = gemma_operator.layer_operator(params, cfg, res, L, param_set=param_set, chunk=3)
    w = rng.standard_normal(op.dim)
    np.testing.assert_allclose(op_r(w), J @ (J.T @ w), rtol=1e-9, atol=1e-9 * np.abs(J @ J.T).max())


def Gh_kron(Gh, N):
    return np.kron(np.eye(N), Gh)


def test_gram_sqrt(tiny):
    _, params, _ = tiny
    U = np.asarray(params["embed"])
    Gh = gemma_operator.gram_sqrt(U, block=10)
    np.testing.assert_allclose(Gh @ Gh, U.T @ U, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(Gh, Gh.T, atol=1e-13)


def test_reduced_operator_identity(tiny):
    """Nonzero spectrum of S^{1/2} K_r S^{1/2} equals that of the eNTK of all N V logits."""
    cfg, params, ctx = tiny
    L = 2
    res = gemma_operator.compute_residuals(params, cfg, ctx[:3], L)
    J = gemma_operator.jacobian_dense(params, cfg, res, L, "down_proj")
    U = np.asarray(params["embed"])
    K_logits = gemma_operator.logit_kernel_dense(J, U)  # (N V, N V) = (291, 291)
    Gh = gemma_operator.gram_sqrt(U)
    S = Gh_kron(Gh, 3)
    K_red = S @ (J @ J.T) @ S  # (N d, N d) = (48, 48)
    ev_full = np.sort(np.linalg.eigvalsh(K_logits))[::-1]
    ev_red = np.sort(np.linalg.eigvalsh(K_red))[::-1]
    r = len(ev_red)
    np.testing.assert_allclose(ev_full[:r], ev_red, rtol=1e-8, atol=1e-8 * ev_red[0])
    assert np.abs(ev_full[r:]).max() < 1e-8 * ev_red[0]
    # Lanczos on the matrix-free operator finds the same top eigenvalues
    op = gemma_operator.layer_operator(params, cfg, res, L, gram_half=Gh, chunk=2)
    top = lanczos_topk(op, op.dim, 5, num_steps=30, dtype=jnp.float64)
    np.testing.assert_allclose(np.asarray(top.eigenvalues), ev_red[:5], rtol=1e-8)


def test_mode_scores_rank_one():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(6), rng.standard_normal(4)
    v = np.outer(a, b).reshape(-1, 1) * 3.0
    s = gemma_operator.mode_scores(v, 6, 4)[0]
    expected = a * 3.0 * np.linalg.norm(b)
    assert np.allclose(s, expected) or np.allclose(s, -expected)


SHARD_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    from ntkbook.gemma import operator as gemma_operator
    from ntkbook.ntk.eig import lanczos_topk
    from ntkbook.gemma import model as gemma_model
    assert len(jax.local_devices()) == 4, jax.local_devices()
    cfg = gemma_model.GemmaConfig.tiny()
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.float64)
    ctx = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (6, 7), 0, cfg.vocab_size))
    res = gemma_operator.compute_residuals(params, cfg, ctx, 1)
    Gh = gemma_operator.gram_sqrt(params["embed"])
    out = {}
    for name, devs in (("one", jax.local_devices()[:1]), ("four", jax.local_devices())):
        op = gemma_operator.layer_operator(params, cfg, res, 1, gram_half=Gh, chunk=4, devices=devs)
        r = lanczos_topk(op, op.dim, 6, num_steps=40, dtype=jnp.float64)
        out[name] = np.asarray(r.eigenvalues)
        out[name + "_devices"] = op.devices
    assert out["four_devices"] == 4 and out["one_devices"] == 1
    print("EIGS", repr(out["one"].tolist()), repr(out["four"].tolist()))
    np.testing.assert_allclose(out["four"], out["one"], rtol=1e-10)
    print("OK")
""")


def test_sharded_equals_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO / "lib"))
    out = subprocess.run([sys.executable, "-c", SHARD_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "OK" in out.stdout


def test_cached_greedy_equals_uncached():
    cfg = gemma_model.GemmaConfig.tiny()  # window 4 < prompt length: the local mask matters in decoding too
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(3), dtype=jnp.float64)
    ids = np.asarray(jax.random.randint(jax.random.PRNGKey(4), (3, 6), 0, cfg.vocab_size))
    out = gemma_model.greedy_generate(params, cfg, ids, 5)
    for b in range(3):
        np.testing.assert_array_equal(out[b], gemma_model.greedy_generate_uncached(params, cfg, ids[b], 5))
    # the decode step's hidden state equals the full forward's at that position
    full = gemma_model.hidden(params, cfg, np.concatenate([ids[0], out[0]]))
    f, K, V = gemma_model.prefill(params, cfg, jnp.asarray(ids[0]), 11)
    np.testing.assert_allclose(np.asarray(f), np.asarray(full[5]), rtol=1e-12, atol=1e-12)
    for s in range(4):
        f, K, V = gemma_model.decode_step(params, cfg, out[0][s], 6 + s, K, V)
        np.testing.assert_allclose(np.asarray(f), np.asarray(full[6 + s]), rtol=1e-10, atol=1e-10)
