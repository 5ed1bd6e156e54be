"""A small optax training loop over pytrees of parameters.

``fit`` runs epochs of (shuffled) mini-batches, each epoch one compiled ``lax.scan`` over its
steps; it logs the mean loss per epoch and any metrics you ask for, reports progress
(:mod:`ntkbook.progress`), is deterministic given ``seed`` (or replays a recorded batch order), and raises
:class:`TrainingDiverged` naming the epoch and step at which the run blew up: the loss or the
gradient became NaN or infinite, or the loss rose far above its starting value (a finite
blow-up, e.g. a loss of 1e248 with too large a learning rate, is caught too).

A run that ends without blowing up may still not have trained. :func:`training_record` states,
per model, the final training accuracy/loss against a stated criterion, for an experiment to
store in its result; :func:`require_trained` is what a chapter calls before drawing a conclusion
from those models: it raises :class:`NotTrained` naming the models that did not train.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ntkbook.errors import InputError, NtkbookError
from ntkbook.progress import Progress

__all__ = ["fit", "TrainResult", "TrainingDiverged", "NotTrained", "training_record", "require_trained"]

Params = Any
Batch = tuple[jax.Array, ...]


class TrainingDiverged(NtkbookError, FloatingPointError):
    """Training blew up; the message names the epoch, the step, the value and what happened."""

    def __init__(self, epoch: int, step: int, loss: float, reason: str | None = None):
        self.epoch, self.step, self.loss = epoch, step, loss
        self.reason = reason or f"the training loss became {loss}"
        super().__init__(
            f"{self.reason} at epoch {epoch}, step {step} (global step counted from 0 over all "
            f"epochs). Lower the learning rate, check the inputs for NaN/inf, or check the loss "
            f"function."
        )


@dataclass
class TrainResult:
    """Final parameters and the logged history (one entry per logged epoch)."""

    params: Params
    history: dict[str, np.ndarray] = field(default_factory=dict)


def _check_data(data: Batch) -> int:
    if not isinstance(data, (tuple, list)) or not data:
        raise InputError("data must be a non-empty tuple of arrays with a common leading axis, e.g. (x, y)")
    sizes = {int(np.shape(a)[0]) for a in data}
    if len(sizes) != 1:
        raise InputError(f"the arrays in data have different leading sizes {sorted(sizes)}")
    return sizes.pop()


def _check_epoch(epoch: int, steps: int, losses: np.ndarray, grad_ok: np.ndarray,
                 limit: float | None, loss0: float) -> None:
    """Raise :class:`TrainingDiverged` at the first bad step of an epoch, if any."""
    bad_loss = ~np.isfinite(losses)
    too_big = np.zeros_like(bad_loss) if limit is None else np.isfinite(losses) & (losses > limit)
    bad = bad_loss | ~grad_ok | too_big
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    value = float(losses[i])
    if bad_loss[i]:
        reason = f"the training loss became {value}"
    elif not grad_ok[i]:
        reason = f"the gradient became NaN or infinite (loss {value:.4g})"
    else:
        reason = (f"the training loss reached {value:.4g}, more than {limit / (abs(loss0) + 1.0):.3g} times "
                  f"its initial value {loss0:.4g} (plus one)")
    raise TrainingDiverged(epoch, (epoch - 1) * steps + i, value, reason)


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
    show_progress: bool = False,
    drop_last: bool = False,
    batch_order: np.ndarray | None = None,
    max_loss_ratio: float | None = 1e4,
    step_keys: bool = False,
) -> TrainResult:
    """Train ``params`` to minimise ``loss_fn(params, batch)``.

    Args:
      loss_fn: ``(params, batch) -> scalar``; ``batch`` is a tuple like ``data`` with a leading
        batch axis of ``batch_size``.
      params: a pytree of arrays.
      optimizer: an optax transformation (e.g. ``optax.adam(1e-3)``).
      data: tuple of arrays sharing a leading axis of size N.
      epochs: number of passes over the data.
      batch_size: mini-batch size; ``None`` means full batch.
      seed: seeds the shuffling; the run is deterministic given it.
      drop_last: if False (the default, as PyTorch's ``DataLoader`` and every experiment here)
        the last incomplete batch of an epoch is kept as a smaller final step
        (ceil(N / batch_size) steps per epoch); if True it is dropped (N // batch_size steps).
      batch_order: optional ``(epochs, N)`` integer array; row ``e - 1`` is the order of the
        examples in epoch ``e`` (a recorded order to replay, e.g. a PyTorch run's). Replaces the
        seeded shuffling; each row must be a permutation of ``range(N)``.
      step_keys: if True, ``loss_fn`` is called as ``loss_fn(params, batch, key)`` with a fresh
        PRNG key at every step (for randomness inside the loss: an attack's random start, dropout),
        drawn from a stream of its own (derived from ``seed``), so the batch order is the same as
        without it. The starting loss (epoch 0) is evaluated with a key of that stream too.
      max_loss_ratio: a step whose loss exceeds this multiple of the initial loss (plus one, so
        a near-zero start does not trip it) is a divergence; ``None`` turns the check off. The
        gradient is checked for NaN/inf at every step.
      metrics: optional ``params -> {name: float}`` evaluated every ``log_every`` epochs (and
        after epoch 0 and the last epoch), e.g. test accuracy.
      callback: optional ``(epoch, params) -> None`` called at the same epochs, e.g. to take
        eNTK snapshots. Epoch 0 means "before training".
      desc: label of the progress report.
      show_progress: show a progress report over the epochs (off by default: the experiments
        report progress per point, around their training runs).

    Raises:
      TrainingDiverged: a non-finite loss or gradient, or a loss above ``max_loss_ratio`` times
        its start, naming the epoch, the step and the value.

    Returns:
      :class:`TrainResult` with ``history["epoch"]``, ``history["loss"]`` (mean training loss of
      that epoch's steps; at epoch 0, the loss of the initial parameters on the full data) and
      one array per metric.
    """
    n = _check_data(data)
    data = tuple(jnp.asarray(a) for a in data)
    bs = n if batch_size is None else int(batch_size)
    if not 1 <= bs <= n:
        raise InputError(f"batch_size must be between 1 and the data size {n}, got {batch_size}")
    if batch_order is not None:
        batch_order = np.asarray(batch_order)
        if batch_order.shape != (epochs, n):
            raise InputError(f"batch_order must have shape (epochs, N) = ({epochs}, {n}), got {batch_order.shape}")
        if not (np.sort(batch_order, axis=1) == np.arange(n)).all():
            raise InputError("each row of batch_order must be a permutation of range(N)")
    full_steps, rest = divmod(n, bs)
    rest = 0 if drop_last else rest
    steps = full_steps + (1 if rest else 0)
    opt_state = optimizer.init(params)

    def step(carry, inputs):
        p, s = carry
        batch, key = inputs
        args = (batch, key) if step_keys else (batch,)
        loss, grads = jax.value_and_grad(loss_fn)(p, *args)
        grad_ok = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        updates, s = optimizer.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), (loss, grad_ok)

    @jax.jit
    def run_epoch(p, s, perm, epoch_key):
        keys = jax.random.split(epoch_key, steps)
        if bs == n:
            batches = tuple(a[None] for a in data)
        else:
            batches = tuple(a[perm[: full_steps * bs]].reshape((full_steps, bs) + a.shape[1:]) for a in data)
        (p, s), (losses, ok) = jax.lax.scan(step, (p, s), (batches, keys[:full_steps]))
        if rest:
            last = tuple(a[perm[full_steps * bs:]] for a in data)
            (p, s), (l_last, ok_last) = step((p, s), (last, keys[full_steps]))
            losses = jnp.concatenate([losses, l_last[None]])
            ok = jnp.concatenate([ok, ok_last[None]])
        return p, s, losses, ok

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
    key_stream = jax.random.fold_in(key, 0x5EED)  # the step keys' own stream (see step_keys)
    loss0 = float(full_loss(params, data, jax.random.fold_in(key_stream, 0)) if step_keys
                  else full_loss(params, data))
    if not np.isfinite(loss0):
        raise TrainingDiverged(0, 0, loss0)
    limit = None if max_loss_ratio is None else max_loss_ratio * (abs(loss0) + 1.0)
    log(0, loss0)
    bar = Progress(epochs, desc) if show_progress else None
    try:
        for epoch in range(1, epochs + 1):
            if batch_order is not None:
                perm = jnp.asarray(batch_order[epoch - 1])
            else:
                key, sub = jax.random.split(key)
                perm = jax.random.permutation(sub, n)
            params, opt_state, losses, grad_ok = run_epoch(params, opt_state, perm,
                                                           jax.random.fold_in(key_stream, epoch))
            losses, grad_ok = np.asarray(losses), np.asarray(grad_ok)
            _check_epoch(epoch, steps, losses, grad_ok, limit, loss0)
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


class NotTrained(NtkbookError, RuntimeError):
    """A conclusion was about to be drawn from a model that did not train."""


def training_record(
    final_train_acc: Any = None,
    final_train_loss: Any = None,
    *,
    min_train_acc: float | None = None,
    max_train_loss: float | None = None,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    """Whether each of a set of models trained, by a stated criterion (JSON-able, for a result).

    Args:
      final_train_acc: final training accuracy per model, shape ``(M,)`` (or a scalar).
      final_train_loss: final training loss per model, shape ``(M,)`` (or a scalar).
      min_train_acc: a model trained if its final training accuracy is at least this ...
      max_train_loss: ... and its final training loss at most this (either may be ``None``).
      labels: one name per model (default ``model 0``, ``model 1``, ...).

    Returns:
      ``{"criterion": str, "models": [{"label", "final_train_acc", "final_train_loss",
      "trained"}], "all_trained": bool}``. A NaN accuracy or loss never counts as trained.
    """
    if min_train_acc is None and max_train_loss is None:
        raise InputError("give min_train_acc and/or max_train_loss: the criterion for 'trained'")
    acc = None if final_train_acc is None else np.atleast_1d(np.asarray(final_train_acc, float))
    loss = None if final_train_loss is None else np.atleast_1d(np.asarray(final_train_loss, float))
    if min_train_acc is not None and acc is None:
        raise InputError("min_train_acc needs final_train_acc")
    if max_train_loss is not None and loss is None:
        raise InputError("max_train_loss needs final_train_loss")
    m = len(acc) if acc is not None else len(loss)
    if acc is not None and loss is not None and len(loss) != m:
        raise InputError(f"{m} accuracies but {len(loss)} losses")
    labels = labels or [f"model {i}" for i in range(m)]
    if len(labels) != m:
        raise InputError(f"{m} models but {len(labels)} labels")
    parts = []
    if min_train_acc is not None:
        parts.append(f"final training accuracy >= {min_train_acc:g}")
    if max_train_loss is not None:
        parts.append(f"final training loss <= {max_train_loss:g}")
    models = []
    for i in range(m):
        a = None if acc is None else float(acc[i])
        lo = None if loss is None else float(loss[i])
        ok = True
        if min_train_acc is not None:
            ok &= bool(np.isfinite(a) and a >= min_train_acc)
        if max_train_loss is not None:
            ok &= bool(np.isfinite(lo) and lo <= max_train_loss)
        models.append({"label": labels[i], "final_train_acc": a, "final_train_loss": lo,
                       "trained": ok})
    return {"criterion": " and ".join(parts), "models": models,
            "all_trained": all(r["trained"] for r in models)}


def require_trained(record: Mapping[str, Any], what: str = "this result") -> None:
    """Raise :class:`NotTrained` unless every model of a :func:`training_record` trained.

    A chapter calls it before it draws any conclusion from the models (kernels, spectra,
    alignments of an untrained network say nothing about what training does).
    """
    if not isinstance(record, Mapping) or "models" not in record:
        raise InputError("require_trained expects the dict made by ntkbook.train.training_record")
    bad = [r for r in record["models"] if not r["trained"]]
    if bad:
        def show(r):
            vals = []
            if r.get("final_train_acc") is not None:
                vals.append(f"final training accuracy {r['final_train_acc']:.4g}")
            if r.get("final_train_loss") is not None:
                vals.append(f"final training loss {r['final_train_loss']:.4g}")
            return f"{r['label']} ({', '.join(vals)})"

        raise NotTrained(
            f"{what}: {len(bad)} of {len(record['models'])} model(s) did not train by the "
            f"criterion '{record['criterion']}': {'; '.join(show(r) for r in bad)}. No conclusion "
            f"is drawn from an untrained model: check the learning rate, the epochs and the "
            f"training curves, then recompute."
        )
