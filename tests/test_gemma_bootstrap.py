"""The stored bootstrap over stories (gemma_bootstrap): its presets resample the chapter's gemma_probe
entries; the claims read from its stored draws exactly what they compute on the spot (on a synthetic
entry: the real smoke preset runs in the smoke book, whose Gemma chapter reads it); an entry of
another result or other settings is refused; bad configs are refused naming the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.claims import gemma as claims
from ntkbook.errors import ConfigError, InputError
from ntkbook.experiments import gemma_bootstrap as gb
from ntkbook.experiments import gemma_probe
from ntkbook.gemma import bootstrap


def test_the_presets_resample_the_chapters_probe_entries():
    """paper(): the main result (gemma_probe's paper preset); sweep_layer=16 at 32 per class: the
    depth sweep's entry the chapter reads beside it; smoke(): gemma_probe's smoke preset."""
    for scale in ("paper", "smoke"):
        got_scale, over = gb.probe_overrides(gb.Config.paper() if scale == "paper" else gb.Config.smoke())
        assert got_scale == scale
        assert experiments.make_config("gemma_probe", scale, **over) == experiments.make_config("gemma_probe", scale)
    sweep = experiments.make_config("gemma_bootstrap", "paper", **gemma_probe.sweep_overrides(16, 32))
    scale, over = gb.probe_overrides(sweep)
    assert experiments.make_config("gemma_probe", scale, **over) == \
        experiments.make_config("gemma_probe", "paper", **gemma_probe.sweep_overrides(16, 32))
    for name in ("entk_scores", "pca_scores"):
        assert gb.point_key(16, name) == gemma_probe.point_key(16, "down_proj", name)
    assert gb.Config.paper().n_boot == claims.BOOT_N and gb.Config.paper().layer == claims.MAIN_LAYER


@pytest.fixture(scope="module")
def smoke():
    """A synthetic ``gemma_probe`` entry (test_gemma_claims' stories: eNTK modes that carry the
    classes, PCA noise, a morphological feature in two stories) and ``gemma_bootstrap.run`` of it:
    no Gemma forward pass here (the smoke book runs the real smoke preset)."""
    from test_gemma_claims import _story_result

    probe = _story_result(3.0)
    probe.config.setdefault("folds", 2)
    config = dataclasses.replace(gb.Config.smoke(), n_boot=30)
    mp = pytest.MonkeyPatch()
    mp.setattr(experiments, "load_or_run", lambda name, scale, **over: probe if name == "gemma_probe" else None)
    try:
        boot = gb.run(config)
    finally:
        mp.undo()
    return probe, boot


def test_stored_draws_give_what_resampling_on_the_spot_gives(smoke):
    probe, boot = smoke
    n = boot.config["n_boot"]
    assert boot["probe_config"] == dict(probe.config) and boot["N"] == probe["N"]
    for fam in gb.FAMILIES:
        here = claims.story_bootstrap(probe, fam, n, 0)
        read = claims.story_bootstrap(probe, fam, n, 0, stored=boot)
        assert here["tasks"] == read["tasks"] == boot["tasks"][fam]
        for key, values in here["draws"].items():
            method, metric = key.split("_")
            stored = np.asarray(boot[bootstrap.draw_key(fam, method, metric)])
            assert stored.shape == (n, len(here["tasks"]))
            np.testing.assert_array_equal(values, stored)  # NaN where skipped, in the same places
            assert np.isfinite(stored).any(), f"{fam} {key}: nothing evaluated, the comparison would be empty"
        assert claims.story_bootstrap_reading(here) == claims.story_bootstrap_reading(read)
        assert here["unsplit"] == read["unsplit"] == boot["unsplit"][fam]


def test_an_entry_of_other_settings_or_another_result_is_refused(smoke):
    probe, boot = smoke
    with pytest.raises(InputError, match=r"n_boot 30 \(asked: 40\)"):
        claims.story_bootstrap(probe, "pos", 40, 0, stored=boot)
    with pytest.raises(InputError, match=r"seed 0 \(asked: 1\)"):
        claims.story_bootstrap(probe, "pos", boot.config["n_boot"], 1, stored=boot)
    other = dataclasses.replace(probe, config={**probe.config, "n_splits": probe.config["n_splits"] + 1})
    with pytest.raises(InputError, match="another gemma_probe entry"):
        claims.story_bootstrap(other, "pos", boot.config["n_boot"], 0, stored=boot)


def test_the_resamples_are_deterministic_in_the_seed():
    rng = np.random.default_rng(0)
    N, stories = 60, 20
    story = np.repeat(np.arange(stories), N // stories)
    labels = rng.integers(0, 2, N)
    sets = {"entk": rng.normal(size=(3, N)), "pca": rng.normal(size=(3, N))}
    masks = bootstrap.task_masks("pos", ["a", "b"], labels, ["a", "b"], [None] * N)
    a = bootstrap.resample(sets, masks, labels, story, folds=2, n_boot=6, seed=3)
    b = bootstrap.resample(sets, masks, labels, story, folds=2, n_boot=6, seed=3)
    c = bootstrap.resample(sets, masks, labels, story, folds=2, n_boot=6, seed=4)
    for key in a[0]:
        np.testing.assert_array_equal(a[0][key], b[0][key])
    assert any(not np.array_equal(a[0][k], c[0][k], equal_nan=True) for k in a[0])
    assert set(a[0]) == {f"{m}_{x}" for m in bootstrap.METHODS for x in bootstrap.METRICS}
    with pytest.raises(InputError, match="n_boot >= 2"):
        bootstrap.resample(sets, masks, labels, story, folds=2, n_boot=1, seed=0)
    with pytest.raises(InputError, match="family must be"):
        bootstrap.task_masks("syntax", [], labels, [], [])


@pytest.mark.parametrize("field,value", [
    ("n_per_class", 0), ("n_per_class", 200), ("data_scale", "big"), ("layers", (-1,)), ("whole_layer_at", (-1,)),
    ("identity_contexts", -1), ("layer", -1), ("layer", 5), ("n_boot", 1), ("seed", -1),
])
def test_a_bad_config_is_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"^gemma_bootstrap\.{field}\b.*must be"):
        dataclasses.replace(gb.Config.smoke(), **{field: value})
