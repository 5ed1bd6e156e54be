r"""The distance to the network's own linearisation when MLP-Attn is trained (Paper A, width chapter).

:mod:`ntkbook.experiments.ntk_distance` measures the paper's Adam recipe (mini-batches of 128, lr
1e-3, L2 1e-3), under which MLP-Attn does not fit its training set (training MSE about 0.6 on MNIST
3 vs 8), so its distances are between networks that have barely moved. This experiment repeats that
experiment's "Adam" line (:func:`ntkbook.lazy.distance.adam_point`: the network and its own
linearisation, trained by the same recipe from the same initial weights) with **full-batch** Adam,
lr ``lr``, no L2, for ``steps`` steps: the recipe under which MLP-Attn does fit (the influence chapter
found that the noise of mini-batches along the attention cone's axis swamps the signal across it).
Data, models, initialisation and the distance are those of ``ntk_distance``'s preset ``base``
(:data:`ntkbook.lazy.distance.SETUPS`); each (model, width, seed) is one checkpointed point.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ntkbook import validate as v
from ntkbook.lazy import distance
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "ntk_distance_fullbatch"
VERSION = "1"


@dataclasses.dataclass(frozen=True)
class Config:
    """``ntk_distance``'s Adam line on one task with full-batch Adam.

    Presets: ``paper()`` (MNIST 3 vs 8, widths 16 to 4096, three seeds, 5,000 steps on
    ``ntk_distance``'s paper data) and ``smoke()`` (widths 16 and 64, one seed, 200 steps, on
    its smoke data).
    """

    #: the binary task (a key of :data:`ntkbook.lazy.distance.TASKS`)
    task: str = "mnist_3v8"
    #: networks: "relu" (2L-ReLU) and/or "attn" (MLP-Attn)
    models: tuple[str, ...] = ("relu", "attn")
    #: network widths
    widths: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    #: network seeds (initialisation; full batches have no batch order)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 5000          # full-batch Adam steps (= epochs)
    lr: float = 1e-2           # Adam's learning rate
    l2: float = 0.0            # L2 penalty, PyTorch's weight_decay
    base: str = "paper"        # the ntk_distance preset that fixes data and models

    @classmethod
    def smoke(cls) -> "Config":
        return cls(widths=(16, 64), seeds=(0,), steps=200, base="smoke")

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.one_of(NAME, "task", self.task, distance.TASKS, "one of ntk_distance's tasks")
        v.non_empty(NAME, "models", self.models)
        v.all_in(NAME, "models", self.models, distance.MODELS, "ntk_distance's models")
        v.unique(NAME, "models", self.models)
        v.non_empty(NAME, "widths", self.widths)
        v.each(v.even_positive_int, NAME, "widths", self.widths, "the symmetric initialisation pairs the units")
        v.increasing(NAME, "widths", self.widths)
        v.non_empty(NAME, "seeds", self.seeds)
        v.each(v.int_at_least, NAME, "seeds", self.seeds, 0, "a JAX seed")
        v.unique(NAME, "seeds", self.seeds)
        v.positive_int(NAME, "steps", self.steps)
        v.finite_positive(NAME, "lr", self.lr)
        v.finite_non_negative(NAME, "l2", self.l2)
        v.one_of(NAME, "base", self.base, distance.SETUPS, "an ntk_distance preset")

def estimate_seconds(config: Config) -> float:
    """About 5.5 s per 1000 full-batch steps at m = 1024 on MNIST (measured on 2 CPU cores), for
    the network and again for its linearisation, linear in m above that, plus the preparation."""
    per_seed = sum(max(m, 256) / 1024 * 5.5 * 2 for m in config.widths) * config.steps / 1000
    return 60.0 + per_seed * len(config.seeds) * len(config.models)


def run(config: Config, points: PointStore | None = None) -> Result:
    """Prepare the task as ``ntk_distance`` does (preset ``base``), then run
    :func:`ntkbook.lazy.distance.adam_point` with every training point in each step (``steps``
    epochs, ``lr``, ``l2``) per model, width and seed, each checkpointed in ``points``. The result
    holds one row of scalars per point, the test outputs of the first seed and the cone geometry."""
    points = points or PointStore(None)
    setup = distance.SETUPS[config.base]
    prep = distance.prepare(config.task, config.models, setup)
    ytr, yte = prep["ytr"], prep["yte"]
    rows, arrays = [], {}
    bar = Progress(len(config.models) * len(config.widths) * len(config.seeds), "full-batch distance")
    try:
        for model in config.models:
            pm = prep["models"][model]
            f_te_inf = pm["f_ntk"][2]
            for m in config.widths:
                for s in config.seeds:
                    arr, sc = points.cached(
                        f"model={model}/m={m}/seed={s}",
                        lambda m=m, s=s: distance.adam_point(
                            pm["ztr"], ytr, pm["zte"], yte, f_te_inf, width=m, seed=s, lr=config.lr, l2=config.l2,
                            epochs=config.steps, batch=2 * setup.n_train_per_class,
                            train_dtype=setup.train_dtype))
                    rows.append({"model": model, "width": m, "seed": s, **sc})
                    if s == config.seeds[0]:
                        for k, v in arr.items():
                            arrays[f"{model}/m={m}/{k}"] = v
                    bar.update()
                    bar.set_postfix(model=model, m=m, seed=s)
    finally:
        bar.close()
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays,
                  scalars={"rows": rows, "task": config.task, "n_train": int(len(ytr)),
                           "cone": {k: prep["models"][k]["cone"] for k in config.models}})


def reproduce_sample(config: Config) -> tuple[Config, str]:
    """The sample ``python -m ntkbook reproduce ntk_distance_fullbatch --sample`` recomputes: the
    first seed at the widths up to 1024, both models (each point depends only on its model, width
    and seed; the task is prepared as in the full run)."""
    widths = tuple(m for m in config.widths if m <= 1024) or config.widths[:1]
    sub = dataclasses.replace(config, widths=widths, seeds=config.seeds[:1])
    return sub, (f"seed {sub.seeds[0]} of {len(config.seeds)}, widths "
                 f"{', '.join(map(str, widths))} of {', '.join(map(str, config.widths))}")


def sample_view(result: Result, sample: Config) -> tuple[dict, dict]:
    """The part of ``result`` that the sample's points make (:func:`reproduce_sample`): their
    rows (in run order), the first seed's test outputs at the sample's widths, and the task's
    scalars."""
    keep = {(m, w, s) for m in sample.models for w in sample.widths for s in sample.seeds}
    rows = [r for r in result["rows"] if (r["model"], r["width"], r["seed"]) in keep]
    arrays = {k: v for k, v in result.arrays.items()
              if k.split("/")[0] in sample.models
              and int(k.split("/")[1].removeprefix("m=")) in sample.widths}
    scalars = {"rows": rows, "task": result["task"], "n_train": result["n_train"],
               "cone": {m: result["cone"][m] for m in sample.models}}
    return arrays, scalars


def table(result: Result, key: str = "dist_net_lin") -> dict[tuple[str, int], np.ndarray]:
    """``(model, width) -> values over seeds`` of one scalar of the rows."""
    out: dict[tuple[str, int], list] = {}
    for r in result["rows"]:
        out.setdefault((r["model"], r["width"]), []).append(r[key])
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def trend(result: Result, model: str, key: str = "dist_net_lin") -> tuple[float, str]:
    """``(log-log slope, trend)`` of the mean over seeds against width, by the width chapter's rule
    (:func:`ntkbook.lazy.distance.width_trend`)."""
    t = table(result, key)
    ws = sorted(w for (mm, w) in t if mm == model)
    return distance.width_trend(ws, [t[(model, w)].mean() for w in ws])

