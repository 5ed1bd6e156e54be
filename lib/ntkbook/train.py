"""A small optax training loop over pytrees of parameters.

``fit`` runs epochs of (shuffled) mini-batches, each epoch one compiled ``lax.scan`` over its
steps; it logs the mean loss per epoch and any metrics you ask for, reports progress
(:mod:`ntkbook.progress`), is deterministic given ``seed``, and raises
:class:`TrainingDiverged` naming the epoch and step at which the loss first became NaN or
infinite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ntkbook.progress import Progress

__all__ = ["fit", "TrainResult", "TrainingDiverged"]

Params = Any
Batch = tuple[jax.Array, ...]


class TrainingDiverged(FloatingPointError):
    """The loss became NaN or infinite; the message names the epoch and the step."""

    def __init__(self, epoch: int, step: int, loss: float):
        self.epoch, self.step, self.loss = epoch, step, loss
        super().__init__(
            f"the training loss became {loss} at epoch {epoch}, step {step} (global step "
            f"counted from 0 over all epochs). Lower the learning rate, check the inputs for "
            f"NaN/inf, or check the loss function."
        )


@dataclass
class TrainResult:
    """Final parameters and the logged history (one entry per logged epoch)."""

    params: Params
    history: dict[str, np.ndarray] = field(default_factory=dict)


def _check_data(data: Batch) -> int:
    if not isinstance(data, (tuple, list)) or not data:
        raise TypeError("data must be a non-empty tuple of arrays with a common leading axis, e.g. (x, y)")
    sizes = {int(np.shape(a)[0]) for a in data}
    if len(sizes) != 1:
        raise ValueError(f"the arrays in data have different leading sizes {sorted(sizes)}")
    return sizes.pop()


def fit(
    loss_fn: Callable[[Params, Batch], jax.Array],
    params: Params,
    optimizer: optax.GradientTransformation,
    data: Batch,
    *,
    epochs: int,
    batch_size: int | None = None,
    seed: int = 0,
    metrics: Callable[[Params], Mapping[str, float]] | None = None,
    log_every: int = 1,
    callback: Callable[[int, Params], None] | None = None,
    desc: str = "training",
    show_progress: bool = True,
) -> TrainResult:
    """Train ``params`` to minimise ``loss_fn(params, batch)``.

    Args:
      loss_fn: ``(params, batch) -> scalar``; ``batch`` is a tuple like ``data`` with a leading
        batch axis of ``batch_size``.
      params: a pytree of arrays.
      optimizer: an optax transformation (e.g. ``optax.adam(1e-3)``).
      data: tuple of arrays sharing a leading axis of size N.
      epochs: number of passes over the data.
      batch_size: mini-batch size; ``None`` means full batch. The last incomplete batch of an
        epoch is dropped, as in most JAX loops (N // batch_size steps per epoch).
      seed: seeds the shuffling; the run is deterministic given it.
      metrics: optional ``params -> {name: float}`` evaluated every ``log_every`` epochs (and
        after epoch 0 and the last epoch), e.g. test accuracy.
      callback: optional ``(epoch, params) -> None`` called at the same epochs, e.g. to take
        eNTK snapshots. Epoch 0 means "before training".
      desc: label of the progress report.

    Returns:
      :class:`TrainResult` with ``history["epoch"]``, ``history["loss"]`` (mean training loss of
      that epoch's steps; at epoch 0, the loss of the initial parameters on the full data) and
      one array per metric.
    """
    n = _check_data(data)
    data = tuple(jnp.asarray(a) for a in data)
    bs = n if batch_size is None else int(batch_size)
    if not 1 <= bs <= n:
        raise ValueError(f"batch_size must be between 1 and the data size {n}, got {batch_size}")
    steps = n // bs
    opt_state = optimizer.init(params)

    def step(carry, batch):
        p, s = carry
        loss, grads = jax.value_and_grad(loss_fn)(p, batch)
        updates, s = optimizer.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    @jax.jit
    def run_epoch(p, s, key):
        if bs == n:
            batches = tuple(a[None] for a in data)
        else:
            perm = jax.random.permutation(key, n)[: steps * bs]
            batches = tuple(a[perm].reshape((steps, bs) + a.shape[1:]) for a in data)
        (p, s), losses = jax.lax.scan(step, (p, s), batches)
        return p, s, losses

    full_loss = jax.jit(loss_fn)
    history: dict[str, list[float]] = {"epoch": [], "loss": []}

    def log(epoch: int, loss: float) -> None:
        history["epoch"].append(epoch)
        history["loss"].append(loss)
        if metrics is not None:
            for k, v in metrics(params).items():
                history.setdefault(k, []).append(float(v))
        if callback is not None:
            callback(epoch, params)

    key = jax.random.PRNGKey(seed)
    loss0 = float(full_loss(params, data))
    if not np.isfinite(loss0):
        raise TrainingDiverged(0, 0, loss0)
    log(0, loss0)
    bar = Progress(epochs, desc) if show_progress else None
    try:
        for epoch in range(1, epochs + 1):
            key, sub = jax.random.split(key)
            params, opt_state, losses = run_epoch(params, opt_state, sub)
            losses = np.asarray(losses)
            bad = np.flatnonzero(~np.isfinite(losses))
            if bad.size:
                raise TrainingDiverged(epoch, (epoch - 1) * steps + int(bad[0]), float(losses[bad[0]]))
            if epoch % log_every == 0 or epoch == epochs:
                log(epoch, float(losses.mean()))
                if bar is not None:
                    bar.set_postfix(loss=float(losses.mean()), **{
                        k: v[-1] for k, v in history.items() if k not in ("epoch", "loss")
                    })
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return TrainResult(params=params, history={k: np.asarray(v) for k, v in history.items()})
