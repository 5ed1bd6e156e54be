"""The re-initialised Gemma (gemma_reinit, issue 36 control (a)) on the tiny random-weight Gemma: the
re-initialisation keeps shapes, dtypes and each matrix's scale and leaves no trained structure; the
experiment's presets read gemma_probe's contexts and splits; bad configs are refused."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ntkbook.errors import ConfigError
from ntkbook.experiments import gemma_probe
from ntkbook.experiments import gemma_reinit as gr
from ntkbook.gemma import model as gemma_model
from ntkbook.gemma import probe
from ntkbook.gemma.weights import reinitialise


@pytest.fixture(scope="module")
def tiny():
    cfg = gemma_model.GemmaConfig.tiny()
    params = gemma_model.init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.float32)
    # give the "trained" matrices structure to remove: a low-rank part, a mean and per-layer scales
    rng = np.random.default_rng(3)
    layers = {}
    for key, w in params["layers"].items():
        w = np.asarray(w)
        if w.ndim >= 3:
            low = np.einsum("lor,lri->loi", rng.standard_normal(w.shape[:2] + (1,)),
                            rng.standard_normal((w.shape[0], 1, w.shape[2])))
            w = (w + low) * np.arange(1, w.shape[0] + 1)[:, None, None]
        layers[key] = w.astype(np.float32)
    trained = {"embed": np.asarray(params["embed"]), "final_norm": np.asarray(params["final_norm"]), "layers": layers}
    return cfg, trained


def _tensors(params):
    yield "embed", None, params["embed"]
    yield "final_norm", None, params["final_norm"]
    for key, w in params["layers"].items():
        for i in range(len(w)):
            yield key, i, w[i]


def test_shapes_dtypes_and_keys_are_kept(tiny):
    _, trained = tiny
    new = reinitialise(trained, 0)
    assert set(new) == set(trained) and set(new["layers"]) == set(trained["layers"])
    for (name, i, a), (_, _, b) in zip(_tensors(trained), _tensors(new)):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, i)
    f64 = jax.tree_util.tree_map(lambda w: np.asarray(w, np.float64), trained)
    assert all(b.dtype == np.float64 for _, _, b in _tensors(reinitialise(f64, 0)))


def test_the_seed_decides_the_draw(tiny):
    _, trained = tiny
    a, b, c = reinitialise(trained, 5), reinitialise(trained, 5), reinitialise(trained, 6)
    same = jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.array_equal, a, b))
    assert all(same)
    assert not np.allclose(a["embed"], c["embed"]) and not np.allclose(a["layers"]["down"], c["layers"]["down"])


def test_each_matrix_keeps_its_own_scale_and_the_norms_are_reset(tiny):
    _, trained = tiny
    new = reinitialise(trained, 1)
    for (name, i, old), (_, _, w) in zip(_tensors(trained), _tensors(new)):
        if old.ndim >= 2:  # a matrix: zero-mean normal with the trained matrix's standard deviation
            n = old.size
            assert abs(np.std(w) / np.std(old) - 1) < 6 / np.sqrt(2 * n), (name, i)
            assert abs(np.mean(w)) < 6 * np.std(old) / np.sqrt(n), (name, i)
        else:  # a norm scale (Gemma's 1 + w as stored): 1, i.e. w at its initial 0
            assert np.array_equal(w, np.ones_like(old)), (name, i)
    # one scale per layer and key, not one per stacked key: the planted 1, 2, 3, ... times survive
    stds = np.array([np.std(w) for w in new["layers"]["down"]])
    assert np.allclose(stds, [np.std(w) for w in trained["layers"]["down"]], rtol=0.15)
    assert np.all(np.diff(stds) > 0) or len(stds) == 1


def test_no_trained_structure_is_left(tiny):
    _, trained = tiny
    new = reinitialise(trained, 2)
    for (name, i, old), (_, _, w) in zip(_tensors(trained), _tensors(new)):
        if old.ndim < 2:
            continue
        r = np.corrcoef(old.ravel(), w.ravel())[0, 1]
        assert abs(r) < 6 / np.sqrt(old.size), (name, i, r)
        # the planted rank-one part dominated the trained spectrum; the draw's is flat (Marchenko-Pastur)
        if name != "embed":
            s_old, s_new = np.linalg.svd(old, compute_uv=False), np.linalg.svd(w, compute_uv=False)
            assert s_old[0] / s_old[1] > 2 * (s_new[0] / s_new[1]), (name, i)


def test_the_random_model_runs_at_the_trained_scale(tiny):
    cfg, trained = tiny
    ids = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (7,), 0, cfg.vocab_size))
    old = np.asarray(gemma_model.hidden(jax.tree_util.tree_map(jnp.asarray, trained), cfg, ids))
    new = np.asarray(gemma_model.hidden(jax.tree_util.tree_map(jnp.asarray, reinitialise(trained, 0)), cfg, ids))
    assert np.all(np.isfinite(new)) and not np.allclose(old, new)
    # the final RMSNorm with scales ~1 (trained) and 1 (reset): the hidden states have rms ~1 in both
    assert 0.5 < np.sqrt(np.mean(new ** 2)) / np.sqrt(np.mean(old ** 2)) < 2


def test_the_presets_read_gemma_probes_contexts_and_splits():
    """The paper preset is the depth sweep's gemma_probe entry at layer 16, N = 256; the smoke preset
    gemma_probe's smoke preset: every field the selection, the splits and the point read is equal."""
    sweep = gemma_probe.Config(**{**dataclasses.asdict(gemma_probe.Config.paper()),
                                  **gemma_probe.sweep_overrides(16, 32)})
    for mine, theirs in ((gr.Config.paper(), sweep), (gr.Config.smoke(), gemma_probe.Config.smoke())):
        for f in ("n_per_class", "data_scale", "data_n_per_class", "k", "lanczos_steps", "seed", "chunk", "pca_k",
                  "folds", "split_seed", "n_splits", "min_support", "min_words", "max_top_share"):
            assert getattr(mine, f) == getattr(theirs, f), f
        assert theirs.layers == (mine.layer,) and theirs.whole_layer_at == ()
    assert gr.Config.paper().n_per_class * 8 == 256 and gr.Config.paper().init_seed == 0


@pytest.mark.parametrize("field,value,named", [
    ("n_per_class", 0, "n_per_class"), ("n_per_class", 5, "n_per_class"), ("data_scale", "big", "data_scale"),
    ("layer", -1, "layer"), ("k", 0, "k"), ("lanczos_steps", 5, "lanczos_steps"), ("init_seed", -1, "init_seed"),
    ("n_splits", 0, "n_splits"), ("max_top_share", 1.5, "max_top_share"), ("folds", 1, "folds"),
])
def test_a_bad_config_is_refused_naming_the_field(field, value, named):
    with pytest.raises(ConfigError, match=rf"^gemma_reinit\.{named}\b.*must be"):
        dataclasses.replace(gr.Config.smoke(), **{field: value})


def test_a_layer_beyond_the_model_is_refused_before_any_compute():
    with pytest.raises(ConfigError, match=r"gemma_reinit\.layer: layer 18 out of range"):
        gr.run(dataclasses.replace(gr.Config.smoke(), layer=18))


def test_the_point_keys_are_gemma_probes():
    for name in gr.POINT_ARRAYS:
        assert gr.point_key(16, name) == gemma_probe.point_key(16, "down_proj", name)
    with pytest.raises(KeyError):
        gr.point_key(16, "nope")


def test_per_split_rows_choose_as_the_probe_chooses():
    rng = np.random.default_rng(1)
    y = np.zeros(60, bool)
    y[:15] = True
    sc = rng.standard_normal((4, 60))
    sc[2] += 2.0 * y
    splits = probe.story_splits(y.astype(int), np.arange(60) // 2, 3, seed=0)
    rows = probe.per_split_rows(sc, {"t": y}, splits)
    assert rows[0]["task"] == "t" and rows[0]["support"] == 15
    for j, (tr, te) in enumerate(splits):
        r = probe.evaluate_task(sc, y, tr, te)
        assert (rows[0]["ap"][j], rows[0]["auroc"][j], rows[0]["mode"][j]) == (r["ap"], r["auroc"], r["mode"])
