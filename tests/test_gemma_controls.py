"""The Gemma controls (random directions, supervised probe) on synthetic residuals: no model."""

import numpy as np
import pytest

from ntkbook.experiments import gemma_controls as gc
from ntkbook.gemma import probe


def _data(n=120, d=12, seed=0):
    rng = np.random.default_rng(seed)
    y = np.zeros(n, bool)
    y[: n // 4] = True
    X = rng.standard_normal((n, d))
    X[:, 0] += 4.0 * y  # the class lies along one axis
    stories = np.arange(n) // 2  # two contexts per story
    splits = probe.story_splits(y.astype(int), stories, 3, seed=0)
    return X, y, stories, splits


def test_random_directions_are_orthonormal_seeded_and_centred():
    X, *_ = _data()
    a, b = gc.random_directions(X, 5, 1), gc.random_directions(X, 5, 1)
    assert a.shape == (5, len(X)) and np.array_equal(a, b)
    assert not np.allclose(a, gc.random_directions(X, 5, 2))
    assert np.allclose(a.mean(axis=1), 0, atol=1e-12)
    # scores on orthonormal directions: the Gram of the scores is Q^T C Q, its trace at most that of C
    Xc = X - X.mean(0)
    assert np.trace(a @ a.T) <= np.trace(Xc.T @ Xc) + 1e-9


def test_random_rows_choose_as_the_probe_chooses():
    X, y, _, splits = _data()
    rows = gc.random_rows(X, {"t": y}, splits, k=4, draws=2, seed=7)
    sc = gc.random_directions(X, 4, 8)  # the second draw
    for j, (tr, te) in enumerate(splits):
        r = probe.evaluate_task(sc, y, tr, te)
        assert rows[0]["ap"][1][j] == r["ap"] and rows[0]["auroc"][1][j] == r["auroc"]


def test_the_supervised_probe_finds_a_linear_class_and_not_noise():
    X, y, stories, splits = _data()
    good = gc.probe_rows(X, {"t": y}, splits, stories, (0.01, 1.0), 2)[0]
    assert min(good["ap"]) > 0.85 and min(good["auroc"]) > 0.95
    assert set(good["C"]) <= {0.01, 1.0}
    shuffled = np.random.default_rng(1).permutation(y)
    noise = gc.probe_rows(X, {"t": shuffled}, splits, stories, (0.01, 1.0), 2)[0]
    assert np.mean(noise["auroc"]) < 0.7


def test_k_beyond_the_width_is_refused():
    X, *_ = _data(d=3)
    with pytest.raises(gc.ConfigError, match="k"):
        gc.random_directions(X, 4, 0)


def test_the_controls_share_gemma_probes_tasks_and_splits():
    """Both presets read the contexts, tasks and splits of gemma_probe's preset of the same scale:
    the fields ntkbook.gemma.probe.subset and tasks_and_splits read are equal."""
    from ntkbook.experiments import gemma_probe
    for pc, paper in ((gc.Config.paper(), gemma_probe.Config.paper()), (gc.Config.smoke(), gemma_probe.Config.smoke())):
        _same_fields(pc, paper)


def _same_fields(pc, paper):
    for f in ("n_per_class", "data_scale", "data_n_per_class", "folds", "split_seed", "n_splits", "min_support",
              "min_words", "max_top_share"):
        assert getattr(pc, f) == getattr(paper, f), f
