r"""The distance to the network's own linearisation when MLP-Attn is trained (Paper A, width chapter).

:mod:`ntkbook.experiments.ntk_distance` measures the paper's Adam recipe (mini-batches of 128, lr
1e-3, L2 1e-3), under which MLP-Attn does not fit its training set (training MSE about 0.6 on MNIST
3 vs 8), so its distances are between networks that have barely moved. This experiment repeats that
experiment's "Adam" line (:func:`ntkbook.experiments.ntk_distance.adam_point`: the network and its own
linearisation, trained by the same recipe from the same initial weights) with **full-batch** Adam,
lr ``lr``, no L2, for ``steps`` steps: the recipe under which MLP-Attn does fit (the influence chapter
found that the noise of mini-batches along the attention cone's axis swamps the signal across it).
Data, models, initialisation and the distance are those of ``ntk_distance`` (its paper preset); each
(model, width, seed) is one checkpointed point.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ntkbook.experiments import ntk_distance as D
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "ntk_distance_fullbatch"
VERSION = "1"

#: a network counts as trained under ntk_distance's criterion
TRAINED_ACC, TRAINED_MSE = D.TRAINED_ACC, D.TRAINED_MSE


@dataclasses.dataclass(frozen=True)
class Config:
    task: str = "mnist_3v8"
    models: tuple[str, ...] = ("relu", "attn")
    widths: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 5000          # full-batch Adam steps (= epochs)
    lr: float = 1e-2
    l2: float = 0.0
    base: str = "paper"        # the ntk_distance preset that fixes data and models

    @classmethod
    def smoke(cls) -> "Config":
        return cls(widths=(16, 64), seeds=(0,), steps=200, base="smoke")

    @classmethod
    def paper(cls) -> "Config":
        return cls()


def distance_config(config: Config) -> D.Config:
    """The ``ntk_distance`` config whose Adam line is run here: its preset ``base`` with full-batch
    Adam (``adam_batch`` = the number of training points), ``steps`` epochs, ``lr`` and ``l2``."""
    base = D.Config.smoke() if config.base == "smoke" else D.Config.paper()
    if config.task not in base.tasks:
        raise ValueError(f"task {config.task!r} is not one of ntk_distance's tasks {base.tasks}")
    unknown = set(config.models) - set(base.models)
    if unknown:
        raise ValueError(f"unknown models {sorted(unknown)}; ntk_distance has {base.models}")
    return dataclasses.replace(base, models=config.models, adam_batch=2 * base.n_train_per_class,
                               adam_epochs=config.steps, adam_lr=config.lr, adam_l2=config.l2)


def estimate_seconds(config: Config) -> float:
    """About 5.5 s per 1000 full-batch steps at m = 1024 on MNIST (measured on 2 CPU cores), for
    the network and again for its linearisation, linear in m above that, plus the preparation."""
    per_seed = sum(max(m, 256) / 1024 * 5.5 * 2 for m in config.widths) * config.steps / 1000
    return 60.0 + per_seed * len(config.seeds) * len(config.models)


def trained(row: dict) -> bool:
    return row["acc_train_net"] >= TRAINED_ACC and row["train_mse_net"] <= TRAINED_MSE


def run(config: Config, points: PointStore | None = None) -> Result:
    points = points or PointStore(None)
    dcfg = distance_config(config)
    prep = D._prepare(config.task, dcfg)
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
                        lambda m=m, s=s: D.adam_point(pm["ztr"], ytr, pm["zte"], yte, f_te_inf, dcfg, m, s,
                                                      "constant"))
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


def table(result: Result, key: str = "dist_net_lin") -> dict[tuple[str, int], np.ndarray]:
    """``(model, width) -> values over seeds`` of one scalar of the rows."""
    out: dict[tuple[str, int], list] = {}
    for r in result["rows"]:
        out.setdefault((r["model"], r["width"]), []).append(r[key])
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def trend(result: Result, model: str, key: str = "dist_net_lin") -> tuple[float, str]:
    """``(log-log slope, trend)`` of the mean over seeds against width, by the width chapter's rule
    (:func:`ntkbook.experiments.ntk_distance.width_trend`)."""
    t = table(result, key)
    ws = sorted(w for (mm, w) in t if mm == model)
    return D.width_trend(ws, [t[(model, w)].mean() for w in ws])


def scorecard(result: Result) -> list[dict]:
    """Rows for ``A.distance.relu`` and ``A.distance.attn`` from the full-batch line, by
    ``ntk_distance``'s rule: the paper's direction (2L-ReLU decreasing, MLP-Attn increasing) by the
    log-log slope of the mean distance to the network's own linearisation; reproduces when it holds
    and every network trained, partly when it holds for networks that did not all train, does not
    otherwise. (The scorecard joins these rows with ``ntk_distance``'s.)"""
    rows = []
    cfg = result.config
    mse, acc = table(result, "train_mse_net"), table(result, "acc_train_net")
    d = table(result, "dist_net_lin")
    task = D.TASK_LABELS[result["task"]]
    for model, claim, want in (("relu", "A.distance.relu", "decreasing"), ("attn", "A.distance.attn", "increasing")):
        if model not in cfg["models"]:
            continue
        slope, tr = trend(result, model)
        ws = sorted(w for (m, w) in d if m == model)
        ok = all(trained({"acc_train_net": acc[(model, w)].mean(), "train_mse_net": mse[(model, w)].mean()})
                 for w in ws)
        verdict = ("reproduces" if ok else "partly") if tr == want else "does not"
        rows.append({"claim": claim,
                     "ours": (f"{task}, full-batch Adam: {d[(model, ws[0])].mean():.2g} → {d[(model, ws[-1])].mean():.2g} "
                              f"at m = {ws[0]}–{ws[-1]} ({tr}, slope {slope:+.3f}"
                              + ("; every network trained)" if ok else "; not every network trained)")),
                     "verdict": verdict,
                     "note": (f"network vs its own linearisation, {cfg['steps']:,} full-batch Adam steps, lr {cfg['lr']:g}, "
                              f"no L2, {len(cfg['seeds'])} seeds; paper's direction: {want}")})
    return rows
