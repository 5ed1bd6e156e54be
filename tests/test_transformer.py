"""The one-layer transformer of Paper B: model, replay of the author's run, kernels, features.

What is tested, and against what:
- the model against an independent numpy forward pass written from the author's equations (all
  positions, causal mask), and its gradient against central finite differences of that forward;
- the training loop (``ntkbook.train.fit`` with optax's AdamW, the last batch of 36 kept, the
  recorded batch order) against a hand-written numpy AdamW with torch's update formula, step by
  step for the first two epochs, in float64;
- the float64 replay against the author's printed log (training loss to its 4 printed decimals,
  test accuracy exactly) at his epochs 0 and 20; no PyTorch trajectory is available here;
- the mean-logit eNTK reduction against the full kernel averaged over all output pairs, its
  matrix-free operator against the dense kernel, and the SVD shortcut for W_U and W_out;
- the Fourier tools (axis features, content shares, key frequencies, additive chance level);
- the experiment at smoke scale: key numbers against what the theory fixes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ntkbook import data, experiments
from ntkbook.claims.modular_transformer import modular_transformer_scorecard
from ntkbook.data import fetch
from ntkbook.ntk import entk, features
from ntkbook.experiments import modular_transformer
from ntkbook.models import transformer
from ntkbook.train import fit

jax.config.update("jax_enable_x64", True)

SMALL = transformer.Shape(p=7, d_model=8, n_heads=2, d_head=4, d_mlp=12)


# --------------------------------------------------------------------------------------------------
# an independent numpy implementation of the author's model and optimiser
# --------------------------------------------------------------------------------------------------
def np_forward(P, tokens):
    """Logits (B, 3, V) of the author's forward pass, loops and numpy only."""
    P = {k: np.asarray(v, dtype=np.float64) for k, v in P.items()}
    H, dh, d = P["W_Q"].shape
    out = []
    for t in np.asarray(tokens):
        x = P["W_E"][t] + P["W_pos"]  # (3, d)
        heads = []
        for n in range(H):
            q, k, v = x @ P["W_Q"][n].T, x @ P["W_K"][n].T, x @ P["W_V"][n].T  # (3, dh)
            s = q @ k.T / math.sqrt(dh)
            s[np.triu_indices(3, 1)] = -np.inf
            a = np.exp(s - s.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            heads.append(a @ v)
        z = np.concatenate(heads, axis=1)  # (3, H*dh), head-major as torch.flatten
        x = x + z @ P["W_O"].T
        x = x + np.maximum(x @ P["W_in"], 0.0) @ P["W_out"]
        out.append(x @ P["W_U"])
    return np.stack(out)


def np_loss(P, tokens, labels, p):
    z = np_forward(P, tokens)[:, 2, :p]
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(labels)), labels])


@pytest.fixture(scope="module")
def replay():
    return data.load_transformer_replay()


def test_forward_matches_numpy():
    params = transformer.init(jax.random.PRNGKey(0), SMALL, dtype=jnp.float64)
    x, _ = transformer.dataset(SMALL.p)
    ref = np_forward(params, x[:20])
    got_all = jax.vmap(transformer.apply_all_positions, in_axes=(None, 0))(params, jnp.asarray(x[:20]))
    got = jax.vmap(transformer.apply, in_axes=(None, 0))(params, jnp.asarray(x[:20]))
    np.testing.assert_allclose(np.asarray(got_all), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got), ref[:, 2], rtol=1e-12, atol=1e-12)


def test_author_weights_forward(replay):
    params = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in replay.params.items()}
    assert {k: v.shape for k, v in params.items()} == transformer.param_shapes(transformer.Shape())
    got = jax.vmap(transformer.apply, in_axes=(None, 0))(params, jnp.asarray(replay.train_x[:8]))
    np.testing.assert_allclose(np.asarray(got), np_forward(replay.params, replay.train_x[:8])[:, 2],
                               rtol=1e-11, atol=1e-12)


def test_gradient_matches_finite_differences():
    params = transformer.init(jax.random.PRNGKey(1), SMALL, dtype=jnp.float64)
    x, y = transformer.dataset(SMALL.p)
    xb, yb = x[:15], y[:15]
    g = jax.grad(lambda prm: transformer.cross_entropy(jax.vmap(transformer.apply, in_axes=(None, 0))(prm, jnp.asarray(xb)),
                                             jnp.asarray(yb), SMALL.p))(params)
    rng = np.random.default_rng(0)
    base = {k: np.asarray(v) for k, v in params.items()}
    h = 1e-6
    for name in transformer.PARAM_NAMES:
        for _ in range(2):
            idx = tuple(rng.integers(0, s) for s in base[name].shape)
            plus = {k: v.copy() for k, v in base.items()}
            minus = {k: v.copy() for k, v in base.items()}
            plus[name][idx] += h
            minus[name][idx] -= h
            fd = (np_loss(plus, xb, yb, SMALL.p) - np_loss(minus, xb, yb, SMALL.p)) / (2 * h)
            assert abs(float(g[name][idx]) - fd) <= 1e-7 + 1e-5 * abs(fd), (name, idx)


def test_training_matches_handwritten_adamw(replay):
    """fit + optax.adamw, last batch kept, recorded order == torch's AdamW formula in numpy."""
    p, lr, wd, b1, b2, eps, bs = 29, 3e-4, 1.0, 0.9, 0.999, 1e-8, 64
    X, Y = transformer.dataset(p)
    tr = transformer.rows_of(replay.train_x, p)
    xtr, ytr = X[tr], Y[tr]
    params = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in replay.params.items()}
    epochs = 2
    batched = jax.vmap(transformer.apply, in_axes=(None, 0))

    def loss_fn(prm, batch):
        return transformer.cross_entropy(batched(prm, batch[0]), batch[1], p)

    res = fit(loss_fn, params, optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd),
              (jnp.asarray(xtr), jnp.asarray(ytr)), epochs=epochs, batch_size=bs, drop_last=False,
              batch_order=replay.perms[:epochs], show_progress=False)
    grad = jax.jit(jax.grad(loss_fn))
    P = {k: np.asarray(v) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v2 = {k: np.zeros_like(v) for k, v in P.items()}
    t = 0
    for e in range(epochs):
        order = replay.perms[e]
        for s in range(0, len(order), bs):  # 6 batches of 64 and one of 36
            idx = order[s:s + bs]
            g = grad({k: jnp.asarray(val) for k, val in P.items()},
                     (jnp.asarray(xtr[idx]), jnp.asarray(ytr[idx])))
            t += 1
            for k in P:
                gk = np.asarray(g[k])
                P[k] = P[k] * (1 - lr * wd)  # torch: decoupled decay first
                m[k] = b1 * m[k] + (1 - b1) * gk
                v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
                denom = np.sqrt(v2[k]) / math.sqrt(1 - b2**t) + eps
                P[k] = P[k] - lr / (1 - b1**t) * m[k] / denom
    assert t == 14
    for k in P:
        np.testing.assert_allclose(np.asarray(res.params[k]), P[k], rtol=0, atol=1e-13)


def test_replay_matches_author_log(replay):
    """Float64 replay vs the author's printed log at his epochs 0 and 20 (after 1 and 21 epochs)."""
    X, Y = transformer.dataset(29)
    tr, te = transformer.rows_of(replay.train_x, 29), transformer.rows_of(replay.test_x, 29)
    params = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in replay.params.items()}
    hist, _ = modular_transformer.train_run(params, X[tr], Y[tr], X[te], Y[te], p=29, lr=3e-4, weight_decay=1.0,
                           batch_size=64, epochs=21, batch_order=replay.perms[:21])
    for e_author in (0, 20):
        loss, acc = modular_transformer.AUTHOR_LOG[e_author]
        assert abs(hist["train_loss"][e_author + 1] - loss) <= 5e-5
        assert round(100 * hist["test_acc"][e_author + 1], 1) == acc


def test_replay_loader_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("NTKBOOK_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch, "shipped_dir", lambda: tmp_path / "repo-data")  # as if not shipped
    with pytest.raises(data.DataNotFoundError, match="transformer_p29_seed2_init_and_order.npz"):
        data.load_transformer_replay(tmp_path)
    (tmp_path / "mi-ntk").mkdir()
    (tmp_path / "mi-ntk" / "transformer_p29_seed2_init_and_order.npz").write_bytes(b"not it")
    with pytest.raises(data.ChecksumError):
        data.load_transformer_replay(tmp_path)


def test_replay_file_contents(replay):
    assert replay.perms.shape == (4000, 420) and replay.train_x.shape == (420, 3)
    assert (np.sort(replay.perms, axis=1) == np.arange(420)).all()
    rows = np.concatenate([transformer.rows_of(replay.train_x, 29), transformer.rows_of(replay.test_x, 29)])
    assert np.array_equal(np.sort(rows), np.arange(841)) and (replay.train_x[:, 2] == 29).all()


def test_split_and_bad_input():
    tr, te = transformer.split(29, 0.5, 3)
    assert len(tr) == 420 and len(te) == 421 and len(np.intersect1d(tr, te)) == 0
    with pytest.raises(ValueError, match="train_fraction"):
        transformer.split(29, 1.0, 0)
    with pytest.raises(ValueError, match="p must be"):
        transformer.dataset(1)


# --------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------
def test_mean_logit_equals_full_kernel_average():
    params = transformer.init(jax.random.PRNGKey(2), SMALL, dtype=jnp.float64)
    x, _ = transformer.dataset(SMALL.p)
    x = jnp.asarray(x[:10])
    for flt in ("W_E", "W_in", "W_U", None):
        full = entk.entk(transformer.apply, params, x, reduction="full", param_filter=flt)
        ml = entk.entk_mean_logit(transformer.apply, params, x, param_filter=flt)
        np.testing.assert_allclose(np.asarray(ml), np.asarray(full).mean(axis=(2, 3)), rtol=1e-10,
                                   atol=1e-14)
    layers = modular_transformer.group_layers()
    ks = entk.entk_mean_logit(transformer.apply, params, x, layers=layers, batch_size=4)
    total = entk.entk_mean_logit(transformer.apply, params, x)
    np.testing.assert_allclose(sum(np.asarray(k) for k in ks.values()), np.asarray(total), rtol=1e-10)
    op = entk.entk_matvec_mean_logit(transformer.apply, params, x, param_filter=layers["W_O"])
    v = np.random.default_rng(0).standard_normal(10)
    np.testing.assert_allclose(np.asarray(op(v)), np.asarray(ks["W_O"]) @ v, rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="either layers or param_filter"):
        entk.entk_mean_logit(transformer.apply, params, x, layers=layers, param_filter="W_U")


def test_readout_kernels_are_gram_matrices():
    """W_U and W_out mean-logit kernels are H H^T / C and |W_U 1|^2 A A^T / C^2; the class trace
    of both is proportional (the chapter's derivation)."""
    params = transformer.init(jax.random.PRNGKey(3), SMALL, dtype=jnp.float64)
    x, _ = transformer.dataset(SMALL.p)
    xs = jnp.asarray(x[:12])
    C = SMALL.vocab
    H, A = modular_transformer.readout_features(params, SMALL.p)
    H, A = H[:12], A[:12]
    u = np.asarray(params["W_U"]).sum(axis=1)
    ml = entk.entk_mean_logit(transformer.apply, params, xs, layers={"W_U": "W_U", "W_out": "W_out"})
    np.testing.assert_allclose(np.asarray(ml["W_U"]), H @ H.T / C, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(ml["W_out"]), (u @ u) * A @ A.T / C**2, rtol=1e-10)
    tr = entk.entk_layerwise(transformer.apply, params, xs, layers={"W_U": "W_U", "W_out": "W_out"},
                             reduction="class_mean")
    np.testing.assert_allclose(np.asarray(tr["W_U"]), H @ H.T, rtol=1e-10)
    WU = np.asarray(params["W_U"])
    np.testing.assert_allclose(np.asarray(tr["W_out"]), np.trace(WU.T @ WU) / C * A @ A.T, rtol=1e-10)
    # the SVD route gives the same top eigenspace as the kernel
    top = modular_transformer.cheap_top_vectors(params, SMALL.p, 3)
    Kfull = np.asarray(entk.entk_mean_logit(transformer.apply, params, jnp.asarray(x), param_filter="W_U"))
    w, V = np.linalg.eigh(Kfull)
    assert features.subspace_overlap(top["W_U"], V[:, ::-1][:, :3]) == pytest.approx(3.0, abs=1e-8)


# --------------------------------------------------------------------------------------------------
# Fourier tools
# --------------------------------------------------------------------------------------------------
def test_key_frequency_bases_orthogonal_and_content():
    p, freqs = 11, (2, 5)
    B = features.key_frequency_bases(p, freqs)
    assert [b.shape[1] for b in B.values()] == [1, 4, 4, 4, 4]
    M = np.concatenate(list(B.values()), axis=1)
    np.testing.assert_allclose(M.T @ M, np.eye(M.shape[1]), atol=1e-12)
    a, b = features.grid(p)
    w = 2 * np.pi * 5 / p
    v = np.stack([np.cos(w * a) + np.cos(w * b), np.cos(w * (a + b)) + 0.5,
                  np.cos(2 * np.pi * 3 * (a - b) / p)], axis=1)
    c = features.fourier_content(v, B)
    np.testing.assert_allclose(c.sum(axis=1), 1.0, atol=1e-12)
    assert c[0, 1] == pytest.approx(1.0)  # axis sum
    assert c[1, 3] == pytest.approx(1 / (1 + 0.25 * 2))  # sum, the rest constant
    assert c[1, 0] == pytest.approx(0.5 / 1.5)
    assert c[2, -1] == pytest.approx(1.0)  # difference at a non-key frequency: "other"
    with pytest.raises(ValueError, match="distinct integers"):
        features.key_frequency_bases(p, (0, 2))
    add = features.additive_basis(p)
    assert add.shape[1] == features.additive_dimension(p) == 2 * p - 1
    np.testing.assert_allclose(add.T @ add, np.eye(2 * p - 1), atol=1e-12)
    # axis features lie in the additive space, sum features are orthogonal to it
    assert np.linalg.norm(add.T @ B["axis_sum"]) ** 2 == pytest.approx(4.0)
    assert np.linalg.norm(add.T @ B["sum"]) == pytest.approx(0.0, abs=1e-10)


def test_key_frequencies_and_additive_chance():
    p = 29
    rng = np.random.default_rng(0)
    a = np.arange(p)
    W = 0.05 * rng.standard_normal((p + 1, 16))
    W[:p, 0] += 3 * np.cos(2 * np.pi * 4 * a / p)
    W[:p, 1] += 2 * np.sin(2 * np.pi * 11 * a / p)
    kf = features.key_frequencies(W, p)
    assert kf.frequencies == (4, 11)
    assert kf.power.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        features.key_frequencies(W[:5], p)
    r = features.additive_chance(p, 9, 4, samples=400, seed=1)
    assert r.n == 57 and r.mean == pytest.approx(9 * 4 / 57)
    assert abs(r.sampled_mean - r.mean) < 4 * r.std / math.sqrt(400) + 1e-3


# --------------------------------------------------------------------------------------------------
# the experiment at smoke scale
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke():
    assert modular_transformer.Config.smoke().trace_kernels is False  # the test reads no trace kernels
    return experiments.load_or_run("modular_transformer", "smoke")  # the smoke book's, when today's code made it


def test_smoke_experiment(smoke):
    res = smoke
    pr = res["per_run"]
    main = res["main"]
    assert main == "seed=0"
    # the replay check: the author's log at epochs 0, 20, 40 (4 decimals at 0 and 20)
    rows = {r["author_epoch"]: r for r in res["replay_vs_author"]}
    assert abs(rows[0]["loss"] - 3.4278) <= 5e-5 and abs(rows[20]["loss"] - 3.2946) <= 5e-5
    assert abs(rows[40]["loss"] - 3.1861) <= 1e-3
    for name in res["runs"]:
        if name == "replay":
            continue
        g = pr[name]["grokking"]
        assert g["grokked"] and g["final_train_acc"] == 1.0  # the smoke setting groks
        kf = pr[name]["key_frequencies"]
        assert 1 <= len(kf) <= 4  # sparse
        groups = pr[name]["groups"]
        K = len(kf)
        # W_U's mean-logit kernel is H H^T/C: its top 2K+1 hold the sum features
        assert groups["W_U"]["overlaps"]["sum"] >= 0.9
        assert groups["W_U"]["window"] == 4 * K + 1
    g0 = pr[main]["groups"]
    # the attention block's kernel is the sum of its four tensors' kernels: its trace is theirs
    blk = pr[main]["blocks"]["attention"]
    assert blk["members"] == ["W_Q", "W_K", "W_V", "W_O"]
    lam_b = res[f"{main}/ml_eigenvalues/attention"]
    assert lam_b.sum() == pytest.approx(sum(res[f"{main}/ml_eigenvalues/{n}"].sum() for n in blk["members"]),
                                        rel=1e-9)
    for info in list(g0.values()) + [blk]:
        w = info["window_edge_ratios"]
        assert set(w) == {"2K+1", "4K+1"} and all(r >= 1.0 for r in w.values())
    # attention values / output and the MLP input: axis-sum features, far above the additive chance
    for name in ("W_V", "W_O", "W_in"):
        assert g0[name]["overlaps"]["axis_sum"] >= 0.8 > 2 * g0[name]["chance_additive"]
    # the cheap W_U dynamics end aligned with the sum features
    i = [tuple(m) for m in res["dyn_metrics"]].index(("W_U", "2K+1", "sum"))
    dyn = res[f"{main}/dynamics"][:, i]
    assert dyn[-1] >= 0.9 and dyn[0] < 0.5
    lz = res["main_analysis"]["lanczos"]
    assert lz["W_U"]["default"]["max_rel_error"] < 1e-8
    assert lz["W_E"]["long"]["max_rel_error"] <= lz["W_E"]["default"]["max_rel_error"]
    rows = modular_transformer_scorecard(res)
    assert {r["claim"] for r in rows} == {"B.tf.grokking", "B.tf.key_freqs", "B.tf.attn_axis_sum",
                                          "B.tf.out_sum", "B.tf.replay", "B.tf.dynamics"}
    assert all(r["verdict"] in ("reproduces", "partly", "does not") for r in rows)
    by = {r["claim"]: r for r in rows}
    assert "attention block (Q, K, V, O)" in by["B.tf.attn_axis_sum"]["ours"]
    assert "fresh seeds that grok" in by["B.tf.attn_axis_sum"]["ours"]
    assert "fresh seeds: 1 of 1 grok" in by["B.tf.grokking"]["ours"]
    assert res[f"{main}/final_params_flat"].size == sum(
        int(np.prod(s)) for s in transformer.param_shapes(modular_transformer.Config.smoke().shape).values())


def test_attention_block_kernel_on_the_stored_replay_weights():
    """The claim B.tf.attn_axis_sum is judged on the attention block's kernel (Q, K, V, O
    together): recomputed here from the replay's stored trained weights, it matches the stored
    analysis, and aligns with the axis-sum features by the chapter's rule."""
    from ntkbook.paths import results_dir
    from ntkbook.store import Store

    cfg = modular_transformer.Config.paper()
    store = Store(results_dir(), scale="paper")
    assert store.has(NAME := modular_transformer.NAME, modular_transformer.VERSION, cfg), (
        f"{NAME} is not stored in results/ at paper scale")
    res = store.load(NAME, modular_transformer.VERSION, cfg)
    assert res["main"] == "replay"
    params = modular_transformer._unflatten(np.asarray(res["replay/final_params_flat"]), cfg.shape)
    stored = res["per_run"]["replay"]["blocks"]["attention"]
    bases = features.key_frequency_bases(cfg.p, res["per_run"]["replay"]["key_frequencies"])
    with jax.enable_x64(True):
        kernels = modular_transformer.group_kernels(params, cfg.p, "mean_logit")
    block = sum(kernels[n] for n in modular_transformer.BLOCKS["attention"])
    info = modular_transformer.analyse_group(block, cfg.p, bases, cfg.n_eigvecs)
    for fam, ov in stored["overlaps"].items():
        assert info["overlaps"][fam] == pytest.approx(ov, abs=1e-8)
    assert modular_transformer.claim_verdict("axis_sum", info) == stored["verdict"]
    assert info["overlaps"]["axis_sum"] >= 0.9 and info["leading"] == "axis_sum"


# --------------------------------------------------------------------------------------------------
# the chapter: the reader-side conventions of tests/test_book.py, applied to this chapter too
# --------------------------------------------------------------------------------------------------
CHAPTER = "book/modular_transformer.md"


def test_chapter_opens_with_its_finding():
    """Title, "In this chapter" with generated verdicts, run box and folded provenance; no code
    shown before the first sentence (the check of the reader chapters)."""
    import test_book

    test_book.test_reader_chapters_open_with_their_finding(CHAPTER)


def test_chapter_knobs_reach_the_run():
    """Every knob of the parameters cell is passed to ``load_or_run``, and each is a field of
    the experiment's Config (so an override cannot be silently ignored)."""
    import ast

    import test_book

    cells = [c for c in test_book._cells(CHAPTER) if c.cell_type == "code"]
    params = next(c for c in cells if "parameters" in c.metadata.get("tags", []))
    knobs = [t.id for node in ast.parse(params.source).body if isinstance(node, ast.Assign)
             for t in node.targets if t.id != "scale"]
    assert len(knobs) >= 4
    run_cell = next(c.source for c in cells if "load_or_run(" in c.source)
    fields = {f.name for f in dataclasses.fields(modular_transformer.Config)}
    for k in knobs:
        assert k in fields, f"knob {k} is not a field of modular_transformer.Config"
        assert f"{k}={k}" in run_cell, f"knob {k} does not reach load_or_run"


def test_figures_are_readable():
    """Every figure of the chapter, drawn from the stored paper-scale result, keeps its smallest
    text at 9 pt or more when scaled to the text column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ntkbook.experiments import load_or_run
    from ntkbook.plotting import MIN_FONT_PX, display_font_px
    from ntkbook.plotting import transformer as transformer_plots

    res = load_or_run("modular_transformer", "paper")
    small = {}
    for name in ("plot_training", "plot_key_power", "plot_spectra", "plot_content",
                 "plot_eigenvectors", "plot_dynamics", "plot_lanczos"):
        fig = getattr(transformer_plots, name)(res)
        if display_font_px(fig) < MIN_FONT_PX:
            small[name] = round(display_font_px(fig), 1)
        plt.close(fig)
    assert not small, f"text smaller than 9 pt at display size (px): {small}"
