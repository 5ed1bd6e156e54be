"""The training loop: convergence, determinism, logging, NaN detection naming the step."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ntkbook.progress import Progress
from ntkbook.train import TrainingDiverged, fit


def _problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0])
    return x, y


def loss(p, batch):
    x, y = batch
    return jnp.mean((x @ p["w"] - y) ** 2)


def test_fit_converges_and_logs():
    x, y = _problem()
    epochs_seen = []
    res = fit(loss, {"w": jnp.zeros(4)}, optax.adam(0.05), (x, y), epochs=200, batch_size=32,
              metrics=lambda p: {"w0": float(p["w"][0])}, log_every=50,
              callback=lambda e, p: epochs_seen.append(e), show_progress=False)
    np.testing.assert_allclose(res.params["w"], [1.0, -2.0, 0.5, 3.0], atol=1e-3)
    assert res.history["epoch"].tolist() == [0, 50, 100, 150, 200] == epochs_seen
    assert res.history["loss"][0] > 100 * res.history["loss"][-1]
    assert res.history["w0"][0] == 0.0


def test_fit_is_deterministic():
    x, y = _problem()
    a = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.01), (x, y), epochs=5, batch_size=16, seed=3, show_progress=False)
    b = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.01), (x, y), epochs=5, batch_size=16, seed=3, show_progress=False)
    c = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.01), (x, y), epochs=5, batch_size=16, seed=4, show_progress=False)
    np.testing.assert_array_equal(a.params["w"], b.params["w"])
    assert not np.array_equal(a.params["w"], c.params["w"])


def test_nan_names_the_step():
    x, y = _problem()
    with pytest.raises(TrainingDiverged) as err:
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(1e10), (x, y), epochs=20, batch_size=32, show_progress=False)
    e = err.value
    assert e.epoch >= 1 and e.step >= 0
    assert f"epoch {e.epoch}, step {e.step}" in str(e)
    x_bad = x.copy()
    x_bad[0, 0] = np.nan
    with pytest.raises(TrainingDiverged, match="epoch 0, step 0"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.01), (x_bad, y), epochs=1, show_progress=False)


def test_bad_data():
    x, y = _problem()
    with pytest.raises(ValueError, match="different leading sizes"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.1), (x, y[:10]), epochs=1)
    with pytest.raises(ValueError, match="batch_size"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(0.1), (x, y), epochs=1, batch_size=1000)


def test_progress_in_notebook_mode(capsys, monkeypatch):
    clock = iter(range(0, 1000, 3))
    monkeypatch.setattr("ntkbook.progress.time.perf_counter", lambda: float(next(clock)))
    with Progress(10, "sweep", terminal=False) as bar:
        for _ in range(10):
            bar.update()
            bar.set_postfix(loss=0.5)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sweep: 1/10 ( 10%) elapsed")
    assert "left" in lines[0] and lines[-1].startswith("sweep: done, 10/10")
    assert len(lines) == 10 and "\r" not in "".join(lines)


def test_progress_quiet_when_fast(capsys):
    with Progress(5, "fast", terminal=False) as bar:
        for _ in range(5):
            bar.update()
    assert capsys.readouterr().out == ""


def test_finite_blow_up_is_caught():
    """A loss that explodes but stays finite (1e248 with too large a step) is a divergence too."""
    x, y = _problem()
    with pytest.raises(TrainingDiverged, match="more than 1e\\+04 times its initial value") as err:
        fit(loss, {"w": jnp.zeros(4, jnp.float64)}, optax.sgd(2.0), (x, y), epochs=50, batch_size=32,
            show_progress=False)
    assert np.isfinite(err.value.loss) and err.value.loss > 1e4
    # the same run with the check off goes on (and ends far from the solution)
    res = fit(loss, {"w": jnp.zeros(4, jnp.float64)}, optax.sgd(2.0), (x, y), epochs=3, batch_size=32,
              show_progress=False, max_loss_ratio=None)
    assert res.history["loss"][-1] > 1e4


def test_nonfinite_gradient_is_caught():
    """A loss that is finite while its gradient is not (sqrt at 0) stops the run."""
    x, y = _problem()

    def sqrt_loss(p, batch):
        return jnp.sum(jnp.sqrt(p["w"] ** 2 * 0.0)) + loss(p, batch)

    with pytest.raises(TrainingDiverged, match="gradient became NaN or infinite") as err:
        fit(sqrt_loss, {"w": jnp.zeros(4)}, optax.sgd(0.01), (x, y), epochs=2, batch_size=32, show_progress=False)
    assert (err.value.epoch, err.value.step) == (1, 0)


def test_keep_last_batch_and_replayed_order():
    """drop_last=False runs ceil(N/B) steps an epoch, the last one smaller; a recorded order is
    replayed exactly (one SGD epoch equals the same steps written out by hand)."""
    x, y = _problem()
    x, y = x[:100], y[:100]
    order = np.stack([np.random.default_rng(e).permutation(100) for e in range(2)])
    lr = 0.01
    res = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(lr), (x, y), epochs=2, batch_size=32, drop_last=False,
              batch_order=order, show_progress=False)
    w = np.zeros(4)
    for e in range(2):
        for start in range(0, 100, 32):  # batches of 32, 32, 32, 4
            idx = order[e, start:start + 32]
            xb, yb = x[idx], y[idx]
            w = w - lr * 2 * xb.T @ (xb @ w - yb) / len(idx)
    np.testing.assert_allclose(res.params["w"], w, rtol=1e-5)
    default = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(lr), (x, y), epochs=2, batch_size=32,
                  batch_order=order)
    np.testing.assert_allclose(default.params["w"], w, rtol=1e-5)  # keeping it is the default
    dropped = fit(loss, {"w": jnp.zeros(4)}, optax.sgd(lr), (x, y), epochs=2, batch_size=32,
                  batch_order=order, drop_last=True)
    assert not np.allclose(dropped.params["w"], w, rtol=1e-5)
    with pytest.raises(ValueError, match="permutation"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(lr), (x, y), epochs=2, batch_size=32,
            batch_order=np.zeros((2, 100), int), show_progress=False)
    with pytest.raises(ValueError, match="shape"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(lr), (x, y), epochs=3, batch_size=32,
            batch_order=order, show_progress=False)


def test_training_record_and_require_trained():
    from ntkbook.train import NotTrained, require_trained, training_record

    rec = training_record([1.0, 0.995, 0.4, float("nan")], [1e-6, 1e-5, 0.3, 0.1],
                          min_train_acc=0.99, labels=["a", "b", "c", "d"])
    assert [m["trained"] for m in rec["models"]] == [True, True, False, False]
    assert not rec["all_trained"] and rec["criterion"] == "final training accuracy >= 0.99"
    with pytest.raises(NotTrained, match=r"2 of 4 model\(s\) did not train.*c \(final training "
                                         r"accuracy 0.4, final training loss 0.3\); d"):
        require_trained(rec, "demo")
    ok = training_record([1.0, 0.99], min_train_acc=0.99)
    require_trained(ok)
    assert ok["models"][1]["label"] == "model 1"
    both = training_record(1.0, 0.5, min_train_acc=0.9, max_train_loss=0.1)
    assert both["models"][0]["trained"] is False and "loss <= 0.1" in both["criterion"]
    with pytest.raises(ValueError, match="criterion"):
        training_record([1.0])
    with pytest.raises(TypeError, match="training_record"):
        require_trained({"all_trained": True})


def test_fit_catches_finite_blow_up_of_a_real_model():
    """lr = 1e4 on least squares: the loss grows without becoming inf for many steps."""
    x, y = _problem()
    with pytest.raises(TrainingDiverged, match="more than 1e\\+04 times"):
        fit(loss, {"w": jnp.zeros(4)}, optax.sgd(1e4), (x, y), epochs=50, batch_size=32,
            show_progress=False)


def test_step_keys_are_fresh_per_step_and_leave_the_batch_order_alone():
    """With ``step_keys=True`` the loss gets a different key at every step (and at epoch 0), the
    same keys for the same seed, and the batches are those of the run without keys."""
    import jax
    from jax.experimental import io_callback

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3)).astype(np.float32)
    Y = rng.standard_normal((40, 1)).astype(np.float32)
    seen: list[np.ndarray] = []

    def record(k):
        seen.append(np.asarray(k).copy())
        return np.zeros((), np.float32)

    def mse(p, b):
        return jnp.mean((b[0] @ p["w"] - b[1]) ** 2)

    def keyed(p, b, key):
        data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
        return mse(p, b) + io_callback(record, jax.ShapeDtypeStruct((), jnp.float32), data, ordered=True)

    p0 = {"w": jnp.zeros((3, 1))}
    kw = dict(epochs=3, batch_size=16, seed=5, drop_last=False, show_progress=False)
    plain = fit(mse, p0, optax.adam(1e-2), (X, Y), **kw)
    a = fit(keyed, p0, optax.adam(1e-2), (X, Y), step_keys=True, **kw)
    keys_a = [tuple(k.ravel()) for k in seen]
    seen.clear()
    fit(keyed, p0, optax.adam(1e-2), (X, Y), step_keys=True, **kw)
    keys_b = [tuple(k.ravel()) for k in seen]
    # 1 key at epoch 0 + 3 epochs x 3 steps (16, 16, 8), every one distinct, the same for the same seed
    assert len(keys_a) == 1 + 3 * 3
    assert len(set(keys_a)) == len(keys_a)
    assert keys_a == keys_b
    np.testing.assert_allclose(np.asarray(a.params["w"]), np.asarray(plain.params["w"]), rtol=1e-6)
