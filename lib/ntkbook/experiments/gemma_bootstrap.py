"""Paper B, Gemma: error bars over the data for a ``gemma_probe`` entry, by a cluster bootstrap over
its stories with the eNTK modes and principal components held fixed.

The chapter's interval of the eNTK − PCA difference (Table 7.14) needs, per task family, ``n_boot``
resamples of the stories, each with a fresh split by story and the experiment's selection on it
(:func:`ntkbook.gemma.bootstrap.resample`). That is no forward pass and no Lanczos run, but 2 × 200
scikit-learn splits and 16,000 evaluations at N = 1024 (about a minute and a half of CPU for the
chapter's two entries), so the draws are computed once, here, and stored; the chapter reads them
(:func:`ntkbook.claims.gemma.story_bootstrap` with ``stored=``), which computes the same intervals
as resampling on the spot (``tests/test_gemma_bootstrap.py`` checks the two agree exactly).

The entry resampled is the ``gemma_probe`` entry with this config's entry fields (its selection of
contexts, its layers, its identity check): by default the main result, the chapter's N = 1024; with
:func:`ntkbook.experiments.gemma_probe.sweep_overrides` the depth sweep's entry at that layer, the
chapter's N = 256.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ntkbook import validate as v
from ntkbook.store import PointStore, Result

NAME = "gemma_bootstrap"
VERSION = "1"

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`): wall times aside, exactly
REPRODUCE_TOLERANCE = {"ignore": {"t_pos": "a wall time", "t_morph": "a wall time"}}

#: the task families, as in gemma_probe
FAMILIES = ("pos", "morph")


@dataclasses.dataclass(frozen=True)
class Config:
    """The resamples of one ``gemma_probe`` entry's stories.

    Presets: ``paper()`` the main result (1024 contexts of the paper data set at layer 16), 200
    resamples; ``smoke()`` gemma_probe's smoke preset (4 contexts per class from the smoke data set),
    50 resamples."""

    n_per_class: int = 128          # the gemma_probe entry: the first n_per_class contexts per class,
    data_scale: str = "paper"       # of the gemma_pos_windows result at this scale (gemma_probe's preset of it)
    data_n_per_class: int = 128     # and its n_per_class,
    layers: tuple[int, ...] = (16,)        # its layers with the down-projection,
    whole_layer_at: tuple[int, ...] = ()   # its layers with the whole layer too,
    identity_contexts: int = 2             # and its spectrum-identity check's contexts (0: none)
    layer: int = 16                 # the point whose down-projection modes are resampled (one of layers)
    n_boot: int = 200               # resamples of the stories
    seed: int = 0                   # NumPy seed of the resamples and their splits

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4, data_scale="smoke", data_n_per_class=4, n_boot=50)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.positive_int(NAME, "data_n_per_class", self.data_n_per_class)
        v.int_in(NAME, "n_per_class", self.n_per_class, 1, self.data_n_per_class, "contexts the data set holds")
        v.one_of(NAME, "data_scale", self.data_scale, ("smoke", "paper"))
        for field in ("layers", "whole_layer_at"):
            v.each(v.int_at_least, NAME, field, getattr(self, field), 0, "a layer index")
        v.int_at_least(NAME, "identity_contexts", self.identity_contexts, 0, "0 (no check) or a count")
        v.int_at_least(NAME, "layer", self.layer, 0, "a layer index")
        v.require(NAME, "layer", self.layer, self.layer in self.layers, "one of layers", "a point of the entry")
        v.int_at_least(NAME, "n_boot", self.n_boot, 2, "a bootstrap needs two resamples")
        v.int_at_least(NAME, "seed", self.seed, 0, "a NumPy seed")


def probe_overrides(config: Config) -> tuple[str, dict]:
    """``(scale, overrides)`` of the ``gemma_probe`` entry that ``config`` resamples: its smoke preset
    for the smoke data set, its paper preset for the paper one, with this config's entry fields."""
    fields = ("n_per_class", "data_n_per_class", "layers", "whole_layer_at", "identity_contexts")
    return config.data_scale, {f: getattr(config, f) for f in fields}


def point_key(layer: int, name: str) -> str:
    """The key of a down-projection point's array in a ``gemma_probe`` result (its ``point_key``)."""
    return f"L{layer}_down_proj/{name}"


def run(config: Config, points: PointStore | None = None) -> Result:
    """Per task family (a checkpointed point each): the tasks of the stored point's splits
    (``<family>_splits``), their masks, and :func:`ntkbook.gemma.bootstrap.resample` of the point's two
    score sets."""
    from ntkbook import experiments  # noqa: PLC0415
    from ntkbook.gemma import bootstrap  # noqa: PLC0415

    points = points or PointStore(None)
    scale, overrides = probe_overrides(config)
    probe = experiments.load_or_run("gemma_probe", scale, **overrides)
    point = next(p for p in probe["points"] if p["layer"] == config.layer and p["param_set"] == "down_proj")
    labels, story = np.asarray(probe["labels"]), np.asarray(probe["story"])
    sets = {m: np.asarray(probe[point_key(config.layer, f"{m}_scores")])
            for m in bootstrap.METHODS}
    arrays: dict = {}
    tasks, unsplit, seconds = {}, {}, {}
    for fam in FAMILIES:
        tasks[fam] = [r["task"] for r in point.get(f"{fam}_splits", [])]

        def compute(fam=fam):
            t = time.perf_counter()
            masks = bootstrap.task_masks(fam, tasks[fam], labels, probe["classes"], probe["morph"])
            draws, n_unsplit = bootstrap.resample(sets, masks, labels, story, folds=probe.config["folds"],
                                                  n_boot=config.n_boot, seed=config.seed)
            return draws, {"unsplit": n_unsplit, "seconds": time.perf_counter() - t}

        draws, scalars = points.cached(fam, compute)
        for key, values in draws.items():
            method, metric = key.split("_")
            arrays[bootstrap.draw_key(fam, method, metric)] = np.asarray(values)
        unsplit[fam], seconds[fam] = int(scalars["unsplit"]), scalars["seconds"]
    return Result(
        name=NAME, config=dataclasses.asdict(config), arrays=arrays,
        scalars={"tasks": tasks, "unsplit": unsplit, "N": int(probe["N"]), "stories": int(len(np.unique(story))),
                 "probe_config": dict(probe.config), "probe_commit": probe.provenance.get("git_commit"),
                 **{f"t_{fam}": s for fam, s in seconds.items()}},
    )
