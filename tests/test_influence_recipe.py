"""The training-recipe comparison behind the influence chapter's Table 4.3 (``influence_recipe``)."""

import dataclasses
import math

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("data_dir")

from ntkbook.experiments import influence_recipe  # noqa: E402
from ntkbook.store import PointStore  # noqa: E402

TINY = dataclasses.replace(influence_recipe.Config.smoke(), seeds=(0, 1), n_train=40, n_test=20, width=8,
                           epochs=3, batch=16)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    points = PointStore(tmp_path_factory.mktemp("points"))
    return influence_recipe.run(TINY, points), points


def test_every_key_the_chapter_reads(tiny):
    res, _ = tiny
    assert set(res["recipes"]) == {"paper", "ours"} and set(res["models"]) == {"relu", "attn"}
    assert res["chance_loss"] == pytest.approx(math.log(10))
    for recipe in ("paper", "ours"):
        for model in ("relu", "attn"):
            row = res["table"][f"{recipe}/{model}"]
            for key in ("train_loss", "train_acc", "test_acc"):
                assert len(row[key]) == len(TINY.seeds)
                assert all(np.isfinite(row[key]))
            assert all(0.0 <= a <= 1.0 for a in row["train_acc"] + row["test_acc"])
            curve = res[f"{recipe}/{model}/loss_curve"]
            assert curve.shape[0] == len(TINY.seeds)
            assert curve[:, -1].tolist() == pytest.approx(row["train_loss"])


def test_the_recipes_differ_and_seeds_differ(tiny):
    res, _ = tiny
    paper, ours = res["table"]["paper/relu"]["train_loss"], res["table"]["ours/relu"]["train_loss"]
    assert paper != pytest.approx(ours)  # the recipe is applied, not ignored
    assert paper[0] != pytest.approx(paper[1])  # each seed is its own run


def test_a_rerun_resumes_from_the_stored_points(tiny):
    res, points = tiny
    again = influence_recipe.run(TINY, points)  # every point cached: identical
    assert again["table"] == res["table"]
