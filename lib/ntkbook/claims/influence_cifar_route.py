"""Readings of the ``influence_cifar_route`` result: what whitening does to kappa, whether MLP-Attn
trains on whitened CIFAR, and its flip rates beside the random-sign null and the clean-share
independence level (stored as "ceiling").

Pure functions of a stored :class:`ntkbook.store.Result` of
:mod:`ntkbook.experiments.influence_cifar_route` (and, for the raw-pixel rows beside the whitened
ones, of a result whose ``table["<task>/<model>"]`` holds the same training record, e.g.
``influence_map``'s: the same seeds and recipe on raw pixels). Means and spreads over seeds are
:func:`ntkbook.stats.mean_spread` (the sample standard deviation, 0 for one seed); "trains" is
:func:`ntkbook.influence.readout.trained` (every seed reaches :data:`~ntkbook.influence.readout.TRAINED_ACC`
training accuracy).
"""

from __future__ import annotations

import numpy as np

from ntkbook.influence.readout import TRAINED_ACC, stat, trained
from ntkbook.store import Result

__all__ = ["KAPPA_COLUMNS", "kappa_table", "ridge_sweep", "training_table", "attn_trains",
           "flip_table", "cifar_rows"]

#: the spectral scalars of each input set, in table order
KAPPA_COLUMNS = ("rank_G", "kappa_G", "kappa_G_cubed", "kappa_Gt_measured", "kappa_Ghat", "kappa_rownorm",
                 "null_step_ratio")
#: the per-seed training record
_RECORD = ("train_loss", "train_acc", "test_acc")


def kappa_table(result: Result) -> list[dict]:
    """One row per (task, input set: raw, centred, whitened): ``task``, ``input`` and the columns
    of :data:`KAPPA_COLUMNS` (``kappa_G``: the data Gram over its nonzero spectrum; ``kappa_G_cubed``
    and ``kappa_Gt_measured``: the attention output's Gram, as the cube and from the SVD of
    ``X X^T X``; ``kappa_Ghat``: the row-normalised attention outputs', what MLP-Attn's network is
    given; ``kappa_rownorm``: the row-normalised inputs', what 2L-ReLU's is given;
    ``null_step_ratio``: the RMS size of a random-sign step of radius 1 over the rows' RMS norm), and
    on the whitened row the whitening's ``components``, ``rel_ridge``, ``kappa_k`` and
    ``kappa_predicted`` (``(1 + r kappa_k) / (1 + r)``)."""
    rows = []
    for task in result.config["tasks"]:
        sp = result["spectra"][task]
        for name in result["inputs"]:
            row = {"task": task, "input": name, **{c: sp[name][c] for c in KAPPA_COLUMNS}}
            if name == "whitened":
                row.update({k: sp["whitening"][k] for k in ("components", "rel_ridge", "kappa_k", "kappa_predicted")})
            rows.append(row)
    return rows


def ridge_sweep(result: Result, task: str) -> dict[str, np.ndarray]:
    """kappa of the whitened Gram against the relative ridge ``r``: ``rel_ridge`` ``(R,)``,
    ``measured``, ``predicted`` (``(1 + r kappa_k) / (1 + r)``) and ``attention`` (the attention
    output's Gram, measured)."""
    head = f"{task}/spectra/sweep"
    return {"rel_ridge": np.asarray(result.config["kappa_rel_ridges"], dtype=np.float64),
            "measured": result[f"{head}/kappa_measured"], "predicted": result[f"{head}/kappa_predicted"],
            "attention": result[f"{head}/kappa_attention_measured"]}


def _record(res: Result, task: str, model: str) -> dict:
    """Mean and spread over seeds of the training record, and whether every seed trained."""
    row = {}
    for key in _RECORD:
        mean, spread, values = stat(res, task, model, key)
        row[key] = {"mean": mean, "spread": spread, "values": values.tolist()}
    row["trained"] = trained(res, task, model)
    return row


def training_table(result: Result, raw: Result | None = None) -> list[dict]:
    """One row per (task, model) on whitened inputs (``inputs = "whitened"``) and, when ``raw`` (a
    result with the same training record on raw pixels) is given, one per (task, model) it holds
    on raw pixels (``inputs = "raw"``, first): ``task``, ``model``, ``inputs``, ``seeds`` and for
    each of ``train_loss``, ``train_acc``, ``test_acc`` a dict ``mean``, ``spread``, ``values``;
    ``trained`` by the rule of :data:`~ntkbook.influence.readout.TRAINED_ACC`."""
    rows = []
    for task in result.config["tasks"]:
        for model in result.config["models"]:
            if raw is not None and f"{task}/{model}" in raw["table"]:
                rows.append({"task": task, "model": model, "inputs": "raw", "seeds": list(raw.config["seeds"]),
                             **_record(raw, task, model)})
            rows.append({"task": task, "model": model, "inputs": "whitened", "seeds": list(result.config["seeds"]),
                         **_record(result, task, model)})
    return rows


def attn_trains(result: Result, task: str) -> bool:
    """Whether MLP-Attn on whitened inputs trains on ``task``: every seed at training accuracy
    ``>= TRAINED_ACC``."""
    return trained(result, task, "attn")


def flip_table(result: Result, ridge: str) -> list[dict]:
    """The flip rates (%) at the ridge label ``ridge`` (of ``result["ridges"]``) of every attacked
    model that trains (:func:`ntkbook.influence.readout.trained`), one row per (task, model, eps):
    ``pgd``, ``null`` and ``ceiling`` (the clean-share independence level of the clean top set, the same at
    every radius) as ``(mean, spread)`` over seeds, ``pgd_rho`` likewise (Spearman's rho, not in
    %), and the frozen network's training loss after PGD (``pgd_loss``, mean) against its clean
    loss (``clean_loss``, mean). Attacked models that do not train get no row."""
    if ridge not in result["ridges"]:
        raise KeyError(f"no ridge {ridge!r} in the result; it has {result['ridges']}")
    rows = []
    for task in result.config["tasks"]:
        for model in result.config["attack_models"]:
            if not trained(result, task, model):
                continue
            ceiling = stat(result, task, model, f"clean/{ridge}/ceiling", 100.0)[:2]
            for eps in result.config["eps"]:
                head = f"{eps:g}"
                rows.append({
                    "task": task, "model": model, "eps": eps, "ceiling": ceiling,
                    "pgd": stat(result, task, model, f"pgd/{head}/{ridge}/flip", 100.0)[:2],
                    "null": stat(result, task, model, f"null/{head}/{ridge}/flip", 100.0)[:2],
                    "pgd_rho": stat(result, task, model, f"pgd/{head}/{ridge}/rho")[:2],
                    "pgd_loss": stat(result, task, model, f"pgd/{head}/loss_after")[0],
                    "clean_loss": stat(result, task, model, f"pgd/{head}/loss_before")[0],
                })
    return rows


def cifar_rows(result: Result) -> dict[str, str]:
    """task -> a plain statement of what the route leaves of Paper A's row for it: tested (MLP-Attn
    trains on whitened inputs and was attacked, so its flip rates there are readable) or still
    untested (it does not train, or it trains but was not attacked)."""
    out = {}
    for task in result.config["tasks"]:
        mean = stat(result, task, "attn", "train_acc", 100.0)[0]
        if attn_trains(result, task) and "attn" in result.config["attack_models"]:
            out[task] = (f"tested with whitened inputs: MLP-Attn trains (training accuracy {mean:.0f} % "
                         f"on average, every seed >= {TRAINED_ACC:.0%})")
        elif attn_trains(result, task):
            out[task] = (f"untested: MLP-Attn trains on whitened inputs (training accuracy {mean:.0f} % "
                         f"on average) but was not attacked (attack_models)")
        else:
            out[task] = (f"untested: MLP-Attn does not train even on whitened inputs (training accuracy "
                         f"{mean:.0f} % on average, below {TRAINED_ACC:.0%} on some seed)")
    return out
