r"""Distance between finite-width networks and their infinite-width NTK predictor (Paper A).

Set-up (per binary task, model, width ``m`` and seed)
------------------------------------------------------
* Data: ``n_train`` training and ``n_test`` test images of two classes (balanced, subset seed 0,
  the same for every network seed), labels ``y = +-1``. 2L-ReLU sees the row-normalised raw inputs
  ``x / ||x||``; MLP-Attn sees the row-normalised attention output ``x~ / ||x~||`` with
  ``x~ = X^T X x`` (:mod:`ntkbook.models.attention`). Both input sets lie on the unit sphere.
* Network: ``f(x) = m^{-1/2} sum_r a_r relu(w_r . x)``, ``w_r ~ N(0, I)``, ``a_r = +-1`` fixed,
  symmetric initialisation (``f = 0`` at ``t = 0``), only ``W`` trained.
* Exact line ("GD"): full-batch gradient descent on ``L = (1/2n) sum_i (f(x_i) - y_i)^2`` with
  learning rate ``lr`` for ``steps`` steps (float32). The infinite-width predictor trained the same
  way is the linear model with the analytic NTK ``K`` (float64), whose discrete-time GD iterate is
  known exactly:

  .. math:: f^{NTK}_k(x) = K_{xX}\, \phi_k(K)\, Y, \qquad
            \phi_k(\lambda) = \frac{1 - (1 - \mathrm{lr}\,\lambda / n)^k}{\lambda}

  (gradient flow at time ``t = lr * k`` as ``lr -> 0``: ``(1 - e^{-t\lambda/n})/\lambda``).
  Since ``lr * lambda_max(K_m) / n <= lr * trace(K_m) / n <= lr`` for unit-norm inputs, ``lr = 1``
  is stable at every width.
* Distance: ``D(k) = sqrt(mean over the n_test test points of (f_m(x, k) - f^NTK_k(x))^2)``, at the
  same step ``k`` (also on the training points, and against the converged kernel regression
  ``f^NTK_inf = K_{xX} K^+ Y``, pseudo-inverse with cutoff ``n eps lambda_max``).
* Paper line ("Adam"): Adam (lr 1e-3), batch 128, ``adam_epochs`` epochs, MSE ``mean (f - y)^2``
  plus the L2 penalty as PyTorch's ``weight_decay`` (``grad += l2 * W``); compared with
  ``f^NTK_inf`` (no exact finite-time NTK counterpart exists for Adam).
* Lazy diagnostic: ``||K_T - K_0||_F / ||K_0||_F`` of the empirical NTK on the training points, and
  the deviation at initialisation ``||K_0 - K||_F / ||K||_F``.

Exact dimension reduction: the network is trained on coordinates in the span of the training inputs
(``p <= n_train``); a test input's component outside that span meets ``W``'s frozen complement,
drawn once (see :func:`ntkbook.models.attention.span_coordinates`). This is the same distribution
of networks and trajectories as training in the full pixel space, at a fraction of the cost.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.models import attention as att
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "ntk_distance"
VERSION = "1"

#: task name -> (data set, class a, class b)
TASKS = {
    "mnist_3v8": ("mnist", "3", "8"),
    "cifar10_auto_v_plane": ("cifar10", "automobile", "airplane"),
    "fmnist_shirt_v_tshirt": ("fashion-mnist", "Shirt", "T-shirt/top"),
}
TASK_LABELS = {
    "mnist_3v8": "MNIST 3 vs 8",
    "cifar10_auto_v_plane": "CIFAR-10 automobile vs airplane",
    "fmnist_shirt_v_tshirt": "Fashion-MNIST shirt vs T-shirt/top",
}
MODELS = {"relu": "2L-ReLU", "attn": "MLP-Attn"}

#: Paper A's reported ||f_m - f_NTK|| (normalisation not stated), at m = 16, 1024, 4096
PAPER = {
    ("mnist_3v8", "relu"): {16: 45.1, 4096: 39.2},
    ("mnist_3v8", "attn"): {16: 10.3, 4096: 43.4},
    ("cifar10_auto_v_plane", "relu"): {16: 246.2, 1024: 101.7, 4096: 56.9},
    ("cifar10_auto_v_plane", "attn"): {16: 3.7, 1024: 10.4, 4096: 12.6},
}


@dataclasses.dataclass(frozen=True)
class Config:
    tasks: tuple[str, ...] = tuple(TASKS)
    models: tuple[str, ...] = ("relu", "attn")
    widths: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    seeds: tuple[int, ...] = (0, 1, 2)
    n_train_per_class: int = 128
    n_test_per_class: int = 128
    lr: float = 1.0
    snapshots: tuple[int, ...] = (0, 10, 30, 100, 300, 1000)
    adam_epochs: int = 500
    adam_lr: float = 1e-3
    adam_batch: int = 128
    adam_l2: float = 1e-3
    train_dtype: str = "float32"

    @classmethod
    def smoke(cls) -> "Config":
        return cls(
            widths=(16, 256),
            seeds=(0,),
            n_train_per_class=16,
            n_test_per_class=16,
            snapshots=(0, 10, 100),
            adam_epochs=20,
            adam_batch=16,
        )

    @classmethod
    def paper(cls) -> "Config":
        return cls()


def estimate_seconds(config: Config) -> float:
    n = 2 * config.n_train_per_class
    steps = config.snapshots[-1] + config.adam_epochs * n / max(n, config.adam_batch) / 2
    flops = 6.0 * n * n * sum(config.widths) * steps  # p <= n coordinates
    points = len(config.tasks) * len(config.models) * len(config.seeds)
    return 5.0 * len(config.tasks) + points * (flops / 4.5e10 + 1.0)


# --------------------------------------------------------------------------------------------------
# data and kernels
# --------------------------------------------------------------------------------------------------
def task_data(task: str, config: Config):
    """``(x_train, y_train, x_test, y_test)`` raw (float64, pixels in [0, 1]), labels +-1."""
    from ntkbook import data

    dname, ca, cb = TASKS[task]
    ds = data.load(dname)
    classes = [int(c) if c.isdigit() else c for c in (ca, cb)]
    xtr, ytr = data.class_subset(ds, classes, config.n_train_per_class, split="train", seed=0)
    xte, yte = data.class_subset(ds, classes, config.n_test_per_class, split="test", seed=0)
    return xtr, 1.0 - 2.0 * ytr, xte, 1.0 - 2.0 * yte


def model_inputs(model: str, xtr, xte):
    return att.transform(xtr, xte, attend=(model == "attn"), normalize="row")


def split_coordinates(ztr, zte, rtol: float = 1e-10):
    """Train-span coordinates of train and test inputs, and the test residual's coordinates in an
    orthonormal basis of the residuals (``(n_test, 0)`` when the test inputs lie in the span)."""
    _, s, vt = np.linalg.svd(ztr, full_matrices=False)
    Q = vt[s > rtol * s[0]].T
    ctr, cte = ztr @ Q, zte @ Q
    resid = zte - cte @ Q.T
    scale = max(np.linalg.norm(zte, axis=1).max(), 1e-300)
    if np.linalg.norm(resid, axis=1).max() <= rtol * scale:
        return ctr, cte, np.zeros((zte.shape[0], 0))
    _, s2, vt2 = np.linalg.svd(resid, full_matrices=False)
    R = vt2[s2 > rtol * scale].T
    return ctr, cte, resid @ R


def gd_weights(lam, lr: float, n: int, steps):
    """``phi_k(lambda)`` for each step ``k`` in ``steps``: rows ``(len(steps), len(lam))``; ``k = inf``
    gives the pseudo-inverse with cutoff ``n eps lambda_max``."""
    lam = np.asarray(lam, dtype=np.float64)
    lam_pos = np.maximum(lam, 0.0)
    out = []
    for k in steps:
        if math.isinf(k):
            cut = n * np.finfo(np.float64).eps * lam.max()
            out.append(np.where(lam > cut, 1.0 / np.where(lam > cut, lam, 1.0), 0.0))
            continue
        a = lr * lam_pos / n
        num = -np.expm1(k * np.log1p(-np.minimum(a, 1.0 - 1e-16)))
        tiny = lam_pos < 1e-300
        out.append(np.where(tiny, k * lr / n, num / np.where(tiny, 1.0, lam_pos)))
    return np.stack(out)


def ntk_predictor(ztr, ytr, zte, config: Config, steps):
    """Analytic-NTK GD predictor at the given steps: ``(train (S, n), test (S, n_test), info)``."""
    K = att.ntk(ztr)
    Kx = att.ntk(zte, ztr)
    lam, U = np.linalg.eigh(K)
    n = ztr.shape[0]
    phi = gd_weights(lam, config.lr, n, steps)  # (S, n)
    uy = U.T @ ytr
    coef = (phi * uy) @ U.T  # (S, n): phi_k(K) Y
    f_train = coef @ K  # K symmetric
    f_test = coef @ Kx.T
    lam_d = lam[::-1]
    cut = n * np.finfo(np.float64).eps * lam_d[0]
    info = {
        "kappa_K": float(lam_d[0] / lam_d[lam_d > cut][-1]),
        "lam_K": lam_d,
        "rank_K": int(np.sum(lam_d > cut)),
    }
    return f_train, f_test, info


def rms_distance(f1, f2) -> float:
    """``||f1 - f2|| = sqrt(mean_x (f1(x) - f2(x))^2)`` over the evaluation points (the chapter's
    distance; multiply by ``sqrt(#points)`` for the plain l2 norm of the difference vector)."""
    f1 = np.asarray(f1, dtype=np.float64)
    f2 = np.asarray(f2, dtype=np.float64)
    if f1.shape != f2.shape:
        raise ValueError(f"predictions have different shapes {f1.shape} and {f2.shape}")
    return float(np.sqrt(np.mean((f1 - f2) ** 2)))


# --------------------------------------------------------------------------------------------------
# finite-width training
# --------------------------------------------------------------------------------------------------
def _forward(W1, W2, a, z1, h2):
    """Outputs for train-span coordinates ``z1`` and the frozen residual pre-activations ``h2``."""
    pre = jnp.matmul(z1, W1.T) + h2
    return jnp.matmul(jax.nn.relu(pre), a) / jnp.sqrt(W1.shape[0])


@jax.jit
def _gd_run(W1, a, z, y, lr, k):
    n = z.shape[0]

    def loss(W):
        r = _forward(W, None, a, z, 0.0) - y
        return 0.5 * jnp.sum(r**2) / n

    g = jax.grad(loss)
    return jax.lax.fori_loop(0, k, lambda i, W: W - lr * g(W), W1)


def _entk(W1, a, z):
    """Empirical NTK of the train points (float64), closed form."""
    W1 = np.asarray(W1, dtype=np.float64)
    s = (z @ W1.T > 0) * np.asarray(a, dtype=np.float64)
    return (z @ z.T) * (s @ s.T) / W1.shape[0]


def train_point(ctr, ytr, cte, hte2, f_ntk, K_inf, config: Config, width: int, seed: int):
    """One (width, seed) point: GD trajectory distances, kernel movement, Adam line."""
    t0 = time.perf_counter()
    p = ctr.shape[1]
    key = jax.random.PRNGKey(seed)
    params = att.init(key, p, width, symmetric=True)  # W over the train-span coordinates
    W1, a = params["W"], params["a"]
    k2 = jax.random.fold_in(key, 1)
    # frozen complement: W2 (m/2 rows, duplicated like W1) times the test residual coordinates
    dt = jnp.dtype(config.train_dtype)
    W1, a = W1.astype(dt), a.astype(dt)
    W2 = jax.random.normal(k2, (width // 2, hte2.shape[1]), dt)
    W2 = jnp.concatenate([W2, W2], axis=0)
    h2 = jnp.asarray(hte2, dt) @ W2.T if hte2.shape[1] else jnp.zeros((cte.shape[0], width), dt)
    z, zt, y = (jnp.asarray(v, dt) for v in (ctr, cte, ytr))
    f_tr_ntk, f_te_ntk, f_te_inf = f_ntk
    steps = config.snapshots
    K0 = _entk(W1, a, ctr)
    d_test, d_train, kmove = [], [], []
    W, done = W1, 0
    for k in steps:
        W = _gd_run(W, a, z, y, config.lr, k - done)
        done = k
        ftr = np.asarray(_forward(W, None, a, z, 0.0), np.float64)
        fte = np.asarray(_forward(W, None, a, zt, h2), np.float64)
        i = len(d_test)
        d_test.append(rms_distance(fte, f_te_ntk[i]))
        d_train.append(rms_distance(ftr, f_tr_ntk[i]))
        kmove.append(np.linalg.norm(_entk(W, a, ctr) - K0) / np.linalg.norm(K0))
    if not np.all(np.isfinite(fte)):
        raise FloatingPointError(f"GD diverged at width {width}, seed {seed}")
    scalars = {
        "dist_test_T": float(d_test[-1]),
        "dist_train_T": float(d_train[-1]),
        "dist_test_vs_converged": rms_distance(fte, f_te_inf),
        "kernel_move_T": float(kmove[-1]),
        "kernel_init_dev": float(np.linalg.norm(K0 - K_inf) / np.linalg.norm(K_inf)),
    }
    arrays = {
        "dist_test": np.asarray(d_test),
        "dist_train": np.asarray(d_train),
        "kernel_move": np.asarray(kmove),
        "f_test_T": fte.astype(np.float32),
    }
    if config.adam_epochs > 0:
        arrays_adam, scalars_adam = adam_point(W1, a, ctr, ytr, cte, h2, f_te_inf, config, seed, K0)
        arrays.update(arrays_adam)
        scalars.update(scalars_adam)
    scalars["seconds"] = time.perf_counter() - t0
    return arrays, scalars


def adam_point(W1, a, ctr, ytr, cte, h2, f_te_inf, config: Config, seed: int, K0):
    import optax

    from ntkbook.train import fit

    def loss_fn(params, batch):
        zb, yb = batch
        return jnp.mean((_forward(params["W"], None, a, zb, 0.0) - yb) ** 2)

    opt = optax.chain(optax.add_decayed_weights(config.adam_l2), optax.adam(config.adam_lr))
    res = fit(
        loss_fn,
        {"W": W1},
        opt,
        (jnp.asarray(ctr, W1.dtype), jnp.asarray(ytr, W1.dtype)),
        epochs=config.adam_epochs,
        batch_size=min(config.adam_batch, ctr.shape[0]),
        seed=seed,
        log_every=config.adam_epochs,
        show_progress=False,
    )
    W = res.params["W"]
    fte = np.asarray(_forward(W, None, a, jnp.asarray(cte, W1.dtype), h2), np.float64)
    return {"f_test_adam": fte.astype(np.float32)}, {
        "adam_dist_test_vs_converged": rms_distance(fte, f_te_inf),
        "adam_kernel_move": float(np.linalg.norm(_entk(W, a, ctr) - K0) / np.linalg.norm(K0)),
        "adam_final_loss": float(res.history["loss"][-1]),
    }


# --------------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------------
def run(config: Config, points: PointStore | None = None) -> Result:
    points = points or PointStore(None)
    arrays: dict[str, np.ndarray] = {"widths": np.asarray(config.widths), "snapshots": np.asarray(config.snapshots)}
    table = {}
    total = len(config.tasks) * len(config.models) * len(config.widths) * len(config.seeds)
    bar = Progress(total, "NTK distance")
    try:
        for task in config.tasks:
            xtr, ytr, xte, yte = task_data(task, config)
            for model in config.models:
                ztr, zte = model_inputs(model, xtr, xte)
                steps = tuple(config.snapshots) + (math.inf,)
                f_tr, f_te, info = ntk_predictor(ztr, ytr, zte, config, steps)
                f_ntk = (f_tr[:-1], f_te[:-1], f_te[-1])
                K_inf = att.ntk(ztr)
                ctr, cte, hte2 = split_coordinates(ztr, zte)
                prefix = f"{task}/{model}"
                arrays[f"{prefix}/lam_K"] = info["lam_K"]
                arrays[f"{prefix}/ntk_rms"] = np.sqrt(np.mean(f_te**2, axis=1))
                entry = {
                    "kappa_K": info["kappa_K"],
                    "rank_K": info["rank_K"],
                    "p": int(ctr.shape[1]),
                    "p_resid": int(hte2.shape[1]),
                    "ntk_acc_test_T": float(np.mean(np.sign(f_te[-2]) == yte)),
                    "ntk_acc_test_converged": float(np.mean(np.sign(f_te[-1]) == yte)),
                    "points": {},
                }
                per = {}
                for width in config.widths:
                    for seed in config.seeds:
                        key = f"task={task}/model={model}/m={width}/seed={seed}"
                        arr, sc = points.cached(
                            key,
                            lambda width=width, seed=seed: train_point(
                                ctr, ytr, cte, hte2, f_ntk, K_inf, config, width, seed
                            ),
                        )
                        sc = dict(sc)
                        sc["acc_test_net"] = float(np.mean(np.sign(arr["f_test_T"]) == yte))
                        if "f_test_adam" in arr:
                            sc["adam_acc_test"] = float(np.mean(np.sign(arr["f_test_adam"]) == yte))
                        per.setdefault(width, []).append((arr, sc))
                        bar.update()
                        bar.set_postfix(task=task, model=model, m=width)
                for width, runs in per.items():
                    for name in ("dist_test", "dist_train", "kernel_move"):
                        arrays[f"{prefix}/m={width}/{name}"] = np.stack([r[0][name] for r in runs])
                    entry["points"][str(width)] = {
                        k: [r[1][k] for r in runs] for k in runs[0][1] if k != "seconds"
                    }
                    entry["points"][str(width)]["seconds"] = [r[1].get("seconds", math.nan) for r in runs]
                table[prefix] = entry
    finally:
        bar.close()
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays=arrays,
        scalars={"table": table, "tasks": TASK_LABELS, "models": MODELS},
    )
