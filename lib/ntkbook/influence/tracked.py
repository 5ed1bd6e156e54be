"""The training run of :func:`ntkbook.influence.training.train_model`, watched at every epoch's end.

:func:`train_tracked` runs ``train_model``'s own set-up (``training._standard_run``: the network,
loss, optimiser, data, epochs and batch, and the call of :func:`ntkbook.train.fit`), so it follows
the same trajectory bit for bit (``fit``'s logging and callbacks only read the weights; a test
checks the final weights against ``train_model``'s). What it adds, through ``fit``'s callback at
the end of every epoch (every ``ceil(n / batch)`` Adam steps; epoch 0 is the initialisation):

- the full-batch training loss (:func:`ntkbook.influence.losses.data_loss`, float32 as trained);
- the weights at the epochs asked for (``keep_epochs``);
- the weights at the first epoch whose loss is at or below ``target_loss``, and at the epoch
  before it (the bracket of the crossing), when one is given.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence.training import TrainRecipe, _standard_run

__all__ = ["TrackedRun", "train_tracked"]


@dataclasses.dataclass
class TrackedRun:
    """A watched training run.

    ``params``: the final ``{"W", "a"}``; ``epochs`` ``(E + 1,)`` and ``losses`` ``(E + 1,)``: the
    full-batch training loss at each epoch's end (epoch 0: the initialisation); ``kept``: epoch ->
    ``W`` for the epochs asked for; ``crossing``: the first epoch whose loss is at or below the
    target (None without a target or when the loss never got there); ``at_crossing`` and
    ``before_crossing``: ``W`` at that epoch and at the one before (None when there is none)."""

    params: dict
    epochs: np.ndarray
    losses: np.ndarray
    kept: dict[int, np.ndarray]
    crossing: int | None
    at_crossing: np.ndarray | None
    before_crossing: np.ndarray | None


def train_tracked(ztr, ytr, C: int, recipe: TrainRecipe, seed: int, model: str = "relu", *,
                  keep_epochs=(), target_loss: float | None = None) -> TrackedRun:
    """Train ``W`` exactly as ``train_model(ztr, ytr, C, recipe, seed, model)`` does (``ztr``:
    (n, d) network inputs, ``ytr``: (n, C) targets), watching every epoch (module docstring).
    ``keep_epochs``: epochs (0 to the last) whose weights are returned; ``target_loss``: the loss
    whose first crossing is kept. For MLP-Attn with ``recipe.attn_steps`` an "epoch" is one
    full-batch step."""
    run = _standard_run(ztr, ytr, C, recipe, seed, model)
    epochs = run.epochs
    keep = {int(e) for e in keep_epochs}
    outside = sorted(e for e in keep if not 0 <= e <= epochs)
    if outside:
        raise InputError(f"keep_epochs {outside} are outside 0..{epochs}, the epochs of this run")
    full_loss = jax.jit(lambda W: run.loss_fn({"W": W}, run.data))
    losses: list[float] = []
    kept: dict[int, np.ndarray] = {}
    state = {"crossing": None, "at": None, "before": None, "last": None}

    def watch(epoch: int, p) -> None:
        W = p["W"]
        loss = float(full_loss(W))
        losses.append(loss)
        if epoch in keep:
            kept[epoch] = np.asarray(W)
        if target_loss is not None and state["crossing"] is None and loss <= target_loss:
            state["crossing"], state["at"] = epoch, np.asarray(W)
            state["before"] = None if state["last"] is None else np.asarray(state["last"])
        state["last"] = W

    res = run.fit(log_every=1, callback=watch)
    return TrackedRun(params=run.params(res),
                      epochs=np.arange(epochs + 1), losses=np.asarray(losses, np.float64), kept=kept,
                      crossing=state["crossing"], at_crossing=state["at"],
                      before_crossing=state["before"])
