"""The Gemma eNTK-vs-PCA experiment end to end on a few real contexts (real weights), and the stored
paper-scale results (data set and features) against what theory and the procedure fix."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.experiments import gemma_features
from ntkbook.gemma.pos_data import CLASSES


@pytest.fixture(scope="module")
def small_run():
    config = dataclasses.replace(gemma_features.Config.smoke(), k=4, lanczos_steps=8, pca_k=4, identity_contexts=1)
    return gemma_features.run(config)


def test_small_run(small_run):
    r = small_run
    N = r["N"]
    assert N == 8 * gemma_features.Config.smoke().n_per_class
    assert r["identity"]["rel_err"] < 1e-8          # eq. (eq-gm-identity): equal to round-off
    p = gemma_features.point(r, 16)
    assert p["num_params"] == 640 * 2048
    lam = r["L16_down_proj/eigenvalues"]
    assert np.all(np.diff(lam) <= 0) and lam[-1] > 0  # PSD operator, sorted
    assert r["L16_down_proj/ritz_residuals"][0] < 1e-3 * lam[0]  # the top mode has converged
    assert r["L16_down_proj/entk_scores"].shape == (4, N)
    assert [row["task"] for row in p["pos"]] == list(CLASSES)
    for row in p["pos"]:
        assert 0 <= row["entk_auroc"] <= 1 and 0 <= row["pca_auroc"] <= 1


def test_bad_layer():
    with pytest.raises(ValueError, match="layer 18 out of range"):
        gemma_features.run(dataclasses.replace(gemma_features.Config.smoke(), layers=(18,)))


def test_stored_data_set():
    """The stored data set: class-ordered, balanced, 64-token contexts, labels of the model's word."""
    cfg = gemma_features.Config.smoke()
    data = experiments.load_or_run("gemma_pos_data", "paper", n_per_class=cfg.data_n_per_class)
    n = data.config["n_per_class"]
    labels = np.asarray(data["label"])
    assert data["contexts"].shape == (8 * n, 64)
    assert np.array_equal(labels, np.repeat(np.arange(8), n))
    assert all(s["kept"] == n and s["tried"] >= n for s in data["stats"])
    assert data.provenance["git_dirty"] is False
