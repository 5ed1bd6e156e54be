r"""Distance between finite-width networks and their NTK predictors (Paper A), three comparators.

Set-up (per binary task, model, width ``m`` and seed)
------------------------------------------------------
* Data: ``n_train`` training and ``n_test`` test images of two classes (balanced, subset seed 0,
  the same for every network seed), labels ``y = +-1``. 2L-ReLU sees the row-normalised raw inputs
  ``x / ||x||`` (**a departure**: the paper feeds raw pixels); MLP-Attn sees the row-normalised
  attention output ``x~ / ||x~||`` with ``x~ = X^T X x`` (:mod:`ntkbook.models.attention`, as in the
  paper). Both input sets lie on the unit sphere.
* Network: ``f(x) = m^{-1/2} sum_r a_r relu(w_r . x)``, ``w_r ~ N(0, I)``, ``a_r = +-1`` fixed, only
  ``W`` trained, symmetric initialisation (``f = 0`` at ``t = 0``; **a departure**: the paper does
  not say, and a standard initialisation starts from a random function).

Line 1, "GD" (exact comparator)
  Full-batch gradient descent on ``L = (1/2n) sum_i (f(x_i) - y_i)^2``, learning rate ``lr``, for
  ``snapshots[-1]`` steps (float32), against the linear model with the analytic NTK ``K`` trained the
  same way, whose iterate is exact (float64):

  .. math:: f^{NTK}_k(x) = K_{xX}\, \phi_k(K)\, Y, \qquad
            \phi_k(\lambda) = \frac{1 - (1 - \mathrm{lr}\,\lambda / n)^k}{\lambda} .

  Gradient descent is basis-independent, so this line trains, exactly and cheaply, on coordinates
  in the span of the training inputs (``p <= n_train``); a test input's component outside that span
  meets ``W``'s frozen complement, drawn once.
Line 2, "Adam" (the paper's recipe, on the real weights)
  Adam (``adam_lr``), batch ``adam_batch``, ``adam_epochs`` epochs, loss ``mean (f - y)^2``, L2 as
  PyTorch's ``weight_decay`` (``grad += l2 * W``), on ``W`` in pixel / attention-output space (Adam
  depends on the basis, so no span reduction). The same seed trains, with the same recipe, the same
  initial weights and the same batch order, the network's **own linearisation**
  ``f_lin(x; W) = m^{-1/2} sum_r a_r 1[w0_r . x > 0] (w_r . x)`` (for this network, with ``f(W0) = 0``,
  the first-order Taylor model around ``W0``). Reported: the distance net - linearisation, the
  distance of each to the converged analytic kernel regression ``f_NTK,inf = K_xX K^+ Y``, training
  MSE and test accuracy of both, kernel movement. ``lr_rules``: ``"constant"`` (the paper's) and
  ``"inv_sqrt_m"`` (``adam_lr * sqrt(lr_ref_width / m)``, which keeps Adam's step in function space
  independent of ``m``).
Line 3, "budget"
  The Adam recipe at one width with longer training and with and without L2: does the training loss
  become small at all?

Distances are RMS over the evaluation points, ``sqrt(mean_x (f1(x) - f2(x))^2)`` (multiply by
``sqrt(n_test)`` for the l2 norm of the difference vector).

Geometry
  :func:`cone_statistics`: the median pairwise angle of the inputs the network sees and the fraction
  of random ReLU hyperplanes ``{x : w . x = 0}``, ``w ~ N(0, I)``, that separate them (the others see
  every input on the same side, so their neuron is linear on the data). :func:`schur_check`: the
  condition number of the analytic NTK against that of the input Gram matrix, which the Schur
  product bound ``kappa(Theta) <= kappa(G_in)`` relates.
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
VERSION = "2"

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
LR_RULES = {"constant": "Adam lr constant (paper)", "inv_sqrt_m": "Adam lr ∝ 1/√m"}

#: Paper A's reported ||f_m - f_NTK|| (normalisation not stated), at m = 16, 1024, 4096
PAPER = {
    ("mnist_3v8", "relu"): {16: 45.1, 4096: 39.2},
    ("mnist_3v8", "attn"): {16: 10.3, 4096: 43.4},
    ("cifar10_auto_v_plane", "relu"): {16: 246.2, 1024: 101.7, 4096: 56.9},
    ("cifar10_auto_v_plane", "attn"): {16: 3.7, 1024: 10.4, 4096: 12.6},
}

#: a log-log slope of distance against width beyond +-SLOPE_FLAT counts as a trend
SLOPE_FLAT = 0.15
#: a network counts as trained when it classifies at least TRAINED_ACC of its training points
#: correctly and its training MSE is at most TRAINED_MSE (half that of the zero function, 1). With
#: the paper's L2 penalty the MSE of a network that fits its data plateaus well above 0.
TRAINED_ACC = 0.9
TRAINED_MSE = 0.5


@dataclasses.dataclass(frozen=True)
class Config:
    tasks: tuple[str, ...] = tuple(TASKS)
    models: tuple[str, ...] = ("relu", "attn")
    seeds: tuple[int, ...] = (0, 1, 2)
    n_train_per_class: int = 128
    n_test_per_class: int = 128
    # line 1: exact GD comparator (span coordinates)
    widths: tuple[int, ...] = (16, 64, 256, 1024, 4096, 8192, 16384)
    lr: float = 1.0
    snapshots: tuple[int, ...] = (0, 10, 30, 100, 300, 1000)
    # line 2: the paper's Adam recipe on the real weights, network and its own linearisation
    adam_tasks: tuple[str, ...] = ("mnist_3v8", "cifar10_auto_v_plane")
    adam_widths: tuple[int, ...] = (16, 64, 256, 1024, 4096)
    adam_epochs: int = 500
    adam_lr: float = 1e-3
    adam_batch: int = 128
    adam_l2: float = 1e-3
    lr_rules: tuple[str, ...] = ("constant", "inv_sqrt_m")
    lr_ref_width: int = 16
    #: (task, largest width) pairs: the Adam line of that task stops there (CPU budget)
    adam_width_caps: tuple[tuple[str, int], ...] = (("cifar10_auto_v_plane", 1024),)
    #: tasks and widths at which the lr rules after the first run too (all adam_tasks run the first)
    scaled_lr_tasks: tuple[str, ...] = ("mnist_3v8",)
    scaled_lr_widths: tuple[int, ...] = (16, 64, 256, 1024)
    # past 4096: the GD line for ``gd_wide_tasks`` x ``wide_models`` only, the Adam line (first lr
    # rule) for ``adam_wide_tasks`` x ``wide_models`` at ``adam_wide_widths``; computed last
    wide_models: tuple[str, ...] = ("attn",)
    gd_wide_tasks: tuple[str, ...] = ("mnist_3v8",)
    adam_wide_tasks: tuple[str, ...] = ("mnist_3v8",)
    adam_wide_widths: tuple[int, ...] = (8192,)
    # line 3: training budget at one width (seed 0)
    budget_width: int = 256
    budget_epochs: tuple[int, ...] = (500, 2000, 5000)
    budget_l2: tuple[float, ...] = (1e-3, 0.0)
    budget_models: tuple[str, ...] = ("attn",)
    # geometry
    n_hyperplanes: int = 20000
    train_dtype: str = "float32"

    @classmethod
    def smoke(cls) -> "Config":
        return cls(
            widths=(16, 256),
            seeds=(0,),
            n_train_per_class=16,
            n_test_per_class=16,
            snapshots=(0, 10, 100),
            adam_widths=(16, 256),
            adam_wide_widths=(),
            adam_width_caps=(),
            scaled_lr_tasks=("mnist_3v8", "cifar10_auto_v_plane"),
            scaled_lr_widths=(16, 256),
            gd_wide_tasks=tuple(TASKS),
            wide_models=("relu", "attn"),
            adam_epochs=20,
            adam_batch=16,
            budget_width=64,
            budget_models=("relu", "attn"),
            budget_epochs=(20, 80),
            n_hyperplanes=2000,
        )

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        bad = [t for t in set(self.tasks) | set(self.adam_tasks) | set(self.adam_wide_tasks) | set(self.gd_wide_tasks)
               if t not in TASKS]
        if bad:
            raise ValueError(f"unknown task(s) {bad}; known: {', '.join(TASKS)}")
        if not set(self.adam_tasks) <= set(self.tasks) or not (
                set(self.adam_wide_tasks) | set(self.scaled_lr_tasks)) <= set(self.adam_tasks):
            raise ValueError(f"adam_wide_tasks {self.adam_wide_tasks} and scaled_lr_tasks {self.scaled_lr_tasks} "
                             f"must be among adam_tasks {self.adam_tasks}, and those among tasks {self.tasks}")
        if (set(self.wide_models) | set(self.budget_models)) - set(self.models):
            raise ValueError(f"wide_models {self.wide_models} and budget_models {self.budget_models} must be "
                             f"among models {self.models}")
        if set(self.models) - set(MODELS):
            raise ValueError(f"models must be among {tuple(MODELS)}, got {self.models}")
        if set(self.lr_rules) - set(LR_RULES):
            raise ValueError(f"lr_rules must be among {tuple(LR_RULES)}, got {self.lr_rules}")
        if set(self.gd_wide_tasks) - set(self.tasks):
            raise ValueError(f"gd_wide_tasks {self.gd_wide_tasks} must be among tasks {self.tasks}")
        odd = [m for m in tuple(self.widths) + tuple(self.adam_widths) + tuple(self.adam_wide_widths)
               + (self.budget_width,) if m % 2]
        if odd:
            raise ValueError(f"the symmetric initialisation needs even widths, got {odd}")


def adam_widths_for(config: Config, task: str) -> tuple[int, ...]:
    """The widths of the Adam line of ``task`` (``adam_widths`` up to the task's cap, if any)."""
    cap = dict(config.adam_width_caps).get(task)
    return tuple(m for m in config.adam_widths if cap is None or m <= cap)


def adam_lr_for(config: Config, rule: str, width: int) -> float:
    """Adam's learning rate at ``width`` under ``rule`` (``"constant"`` or ``"inv_sqrt_m"``)."""
    if rule == "constant":
        return config.adam_lr
    if rule == "inv_sqrt_m":
        return config.adam_lr * math.sqrt(config.lr_ref_width / width)
    raise ValueError(f"unknown lr rule {rule!r}; known: {', '.join(LR_RULES)}")


_DIMS = {"mnist": 784, "fashion-mnist": 784, "cifar10": 3072}


def estimate_seconds(config: Config) -> float:
    """Rough wall time on 2 CPU cores (about 1e11 flop/s for float32 matmuls)."""
    n = 2 * config.n_train_per_class
    rate = 1.0e11
    narrow = sum(m for m in config.widths if m <= 4096) * len(config.models) * len(config.tasks)
    wide = sum(m for m in config.widths if m > 4096) * len(config.wide_models) * len(config.gd_wide_tasks)
    gd = 6.0 * n * n * (narrow + wide) * config.snapshots[-1] * len(config.seeds)
    steps = config.adam_epochs * math.ceil(n / config.adam_batch)
    adam = 0.0
    for task in config.adam_tasks:
        d = _DIMS[TASKS[task][0]]
        # forward + backward (2 matmuls of batch x m x d) plus the Adam update (~10 flops/weight)
        cost = lambda widths: sum(4.0 * config.adam_batch * m * d + 10.0 * m * d * 4 for m in widths)
        per_step = cost(adam_widths_for(config, task))
        if task in config.scaled_lr_tasks:
            per_step += (len(config.lr_rules) - 1) * cost(config.scaled_lr_widths)
        adam += 2 * per_step * steps * len(config.models) * len(config.seeds)
        if task in config.adam_wide_tasks:
            wide = sum(4.0 * config.adam_batch * m * d + 10.0 * m * d * 4 for m in config.adam_wide_widths)
            adam += 2 * wide * steps * len(config.wide_models) * len(config.seeds)
        budget = sum(config.budget_epochs) * math.ceil(n / config.adam_batch) * len(config.budget_l2)
        adam += budget * len(config.budget_models) * 4.0 * config.adam_batch * config.budget_width * d * 2
    return 10.0 * len(config.tasks) + (gd + adam) / rate


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


# --------------------------------------------------------------------------------------------------
# input geometry
# --------------------------------------------------------------------------------------------------
def pairwise_angles(z) -> np.ndarray:
    """Angles (radians, float64) between all pairs of rows of ``z`` (``n (n - 1) / 2`` of them)."""
    zn = att.normalize_rows(z)
    if not np.all(np.linalg.norm(zn, axis=1) > 0):
        raise ValueError("pairwise_angles needs nonzero rows")
    c = np.clip(zn @ zn.T, -1.0, 1.0)
    iu = np.triu_indices(zn.shape[0], k=1)
    return np.arccos(c[iu])


def hyperplane_cut_fraction(z, n_hyperplanes: int, seed: int = 0, chunk: int = 1000) -> float:
    """Fraction of random hyperplanes ``{x : w . x = 0}``, ``w ~ N(0, I_d)``, that have rows of ``z``
    strictly on both sides. A ReLU neuron whose hyperplane does not cut the data is linear on it
    (identically zero or the identity)."""
    z = np.asarray(z, dtype=np.float64)
    if n_hyperplanes < 1:
        raise ValueError(f"n_hyperplanes must be positive, got {n_hyperplanes}")
    rng = np.random.default_rng(seed)
    cut = 0
    for start in range(0, n_hyperplanes, chunk):
        k = min(chunk, n_hyperplanes - start)
        s = z @ rng.standard_normal((z.shape[1], k))  # (n, k)
        cut += int(np.sum((s > 0).any(axis=0) & (s < 0).any(axis=0)))
    return cut / n_hyperplanes


def cone_statistics(z, n_hyperplanes: int, seed: int = 0) -> tuple[dict, np.ndarray]:
    """``({"median_angle", "max_angle", "cut_fraction"}, 101 quantiles of the pairwise angles)``."""
    ang = pairwise_angles(z)
    q = np.quantile(ang, np.linspace(0.0, 1.0, 101))
    stats = {
        "median_angle": float(np.median(ang)),
        "max_angle": float(ang.max()),
        "cut_fraction": hyperplane_cut_fraction(z, n_hyperplanes, seed),
    }
    return stats, q


def schur_check(z_train, x_train_raw, kappa_theta: float, attend: bool) -> dict:
    """Condition numbers of the step "``kappa(Theta) <= kappa(G_in)``" (Schur product theorem) and,
    for MLP-Attn, of ``kappa(G_in) ~ kappa(G)^3``: all over the nonzero spectrum, from singular
    values (:mod:`ntkbook.ntk.gram`)."""
    from ntkbook.ntk import gram as gm

    _, rank_in, k_in = gm.factor_spectrum(z_train)
    out = {"kappa_Theta": float(kappa_theta), "kappa_G_in": k_in, "rank_G_in": rank_in,
           "schur_ratio": float(k_in / kappa_theta)}
    if attend:
        _, rank_raw, k_raw = gm.factor_spectrum(x_train_raw)
        out.update({"kappa_G_raw": k_raw, "kappa_G_raw_cubed": k_raw**3, "rank_G_raw": rank_raw})
    return out


# --------------------------------------------------------------------------------------------------
# line 1: exact GD comparator
# --------------------------------------------------------------------------------------------------
def gd_point(ctr, ytr, cte, hte2, f_ntk, K_inf, config: Config, width: int, seed: int):
    """One (width, seed) point of the GD line: distances along training and kernel movement."""
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
    K0 = _entk(W1, a, ctr)
    d_test, d_train, kmove = [], [], []
    W, done = W1, 0
    for k in config.snapshots:
        W = _gd_run(W, a, z, y, config.lr, k - done)
        done = k
        ftr = np.asarray(_forward(W, None, a, z, 0.0), np.float64)
        fte = np.asarray(_forward(W, None, a, zt, h2), np.float64)
        i = len(d_test)
        d_test.append(rms_distance(fte, f_te_ntk[i]))
        d_train.append(rms_distance(ftr, f_tr_ntk[i]))
        kmove.append(np.linalg.norm(_entk(W, a, ctr) - K0) / np.linalg.norm(K0))
    if not np.all(np.isfinite(fte)):
        raise FloatingPointError(f"GD diverged at width {width}, seed {seed}; lower Config.lr")
    scalars = {
        "dist_test_T": float(d_test[-1]),
        "dist_train_T": float(d_train[-1]),
        "dist_test_vs_converged": rms_distance(fte, f_te_inf),
        "train_mse_T": float(np.mean((ftr - np.asarray(ytr)) ** 2)),
        "kernel_move_T": float(kmove[-1]),
        "kernel_init_dev": float(np.linalg.norm(K0 - K_inf) / np.linalg.norm(K_inf)),
        "seconds": time.perf_counter() - t0,
    }
    arrays = {
        "dist_test": np.asarray(d_test),
        "dist_train": np.asarray(d_train),
        "kernel_move": np.asarray(kmove),
        "f_test_T": fte.astype(np.float32),
    }
    return arrays, scalars


#: backwards-compatible name of :func:`gd_point`
train_point = gd_point


# --------------------------------------------------------------------------------------------------
# line 2: Adam on the real weights, network and its own linearisation
# --------------------------------------------------------------------------------------------------
def net_apply(W, a, z):
    """``f(z) = m^{-1/2} relu(z W^T) a``: outputs ``(N,)`` for inputs ``(N, d)``, ``W (m, d)``."""
    return jnp.matmul(jax.nn.relu(jnp.matmul(z, W.T)), a) / jnp.sqrt(W.shape[0])


def lin_apply(W, a, z, pattern):
    """The linearisation around ``W0``: ``m^{-1/2} ((z W^T) * pattern) a`` with the activation
    pattern ``pattern = 1[z W0^T > 0]`` (``(N, m)``) frozen at initialisation. Since ``relu`` is
    positively homogeneous, ``f(W0) + <grad f(W0), W - W0>`` equals this exactly."""
    return jnp.matmul(jnp.matmul(z, W.T) * pattern, a) / jnp.sqrt(W.shape[0])


def activation_pattern(W, z, dtype=jnp.float32):
    """``1[z W^T > 0]`` as ``(N, m)`` floats."""
    return (jnp.matmul(z, W.T) > 0).astype(dtype)


def adam_train(z, y, W0, a, *, lr: float, l2: float, epochs: int, batch: int, seed: int,
               linearised: bool = False, callback=None, log_every: int | None = None):
    """Train ``W`` (from ``W0``) of the network, or of its linearisation around ``W0``, by the
    paper's recipe: Adam(lr) on ``mean (f - y)^2`` with ``grad += l2 * W`` (PyTorch's
    ``weight_decay``), mini-batches of ``batch`` reshuffled each epoch by ``seed`` (the last
    incomplete batch kept, as PyTorch's ``DataLoader`` does). Returns the :class:`TrainResult`."""
    import optax

    from ntkbook.train import fit

    if linearised:
        data = (z, y, activation_pattern(W0, z, z.dtype))

        def loss_fn(params, b):
            return jnp.mean((lin_apply(params["W"], a, b[0], b[2]) - b[1]) ** 2)
    else:
        data = (z, y)

        def loss_fn(params, b):
            return jnp.mean((net_apply(params["W"], a, b[0]) - b[1]) ** 2)

    opt = optax.chain(optax.add_decayed_weights(l2), optax.adam(lr))
    return fit(loss_fn, {"W": W0}, opt, data, epochs=epochs, batch_size=min(batch, z.shape[0]), seed=seed,
               log_every=log_every or epochs, callback=callback, show_progress=False, drop_last=False)


def adam_point(ztr, ytr, zte, yte, f_te_inf, config: Config, width: int, seed: int, rule: str):
    """One (width, seed, lr rule) point of the Adam line: the network and its own linearisation,
    trained by the same recipe from the same initial weights with the same batch order."""
    t0 = time.perf_counter()
    dt = jnp.dtype(config.train_dtype)
    params = att.init(jax.random.PRNGKey(seed), ztr.shape[1], width, symmetric=True, dtype=dt)
    W0, a = params["W"], params["a"]
    z, zt, y = (jnp.asarray(v, dt) for v in (ztr, zte, ytr))
    lr = adam_lr_for(config, rule, width)
    kw = dict(lr=lr, l2=config.adam_l2, epochs=config.adam_epochs, batch=config.adam_batch, seed=seed)
    W_net = adam_train(z, y, W0, a, **kw).params["W"]
    W_lin = adam_train(z, y, W0, a, linearised=True, **kw).params["W"]
    f = {
        "net_train": net_apply(W_net, a, z),
        "net_test": net_apply(W_net, a, zt),
        "lin_train": lin_apply(W_lin, a, z, activation_pattern(W0, z, dt)),
        "lin_test": lin_apply(W_lin, a, zt, activation_pattern(W0, zt, dt)),
    }
    f = {k: np.asarray(v, np.float64) for k, v in f.items()}
    if not all(np.all(np.isfinite(v)) for v in f.values()):
        raise FloatingPointError(f"Adam produced non-finite outputs at width {width}, seed {seed}, lr {lr}")
    K0 = _entk(W0, a, ztr)
    s0 = np.asarray(activation_pattern(W0, z)) > 0
    sT = np.asarray(activation_pattern(W_net, z)) > 0
    w0n = float(jnp.linalg.norm(W0))
    scalars = {
        "lr": lr,
        "train_mse_net": float(np.mean((f["net_train"] - ytr) ** 2)),
        "train_mse_lin": float(np.mean((f["lin_train"] - ytr) ** 2)),
        "acc_train_net": float(np.mean(np.sign(f["net_train"]) == ytr)),
        "acc_test_net": float(np.mean(np.sign(f["net_test"]) == yte)),
        "acc_test_lin": float(np.mean(np.sign(f["lin_test"]) == yte)),
        "dist_net_lin": rms_distance(f["net_test"], f["lin_test"]),
        "dist_net_lin_train": rms_distance(f["net_train"], f["lin_train"]),
        "dist_net_ntk": rms_distance(f["net_test"], f_te_inf),
        "dist_lin_ntk": rms_distance(f["lin_test"], f_te_inf),
        "kernel_move": float(np.linalg.norm(_entk(W_net, a, ztr) - K0) / np.linalg.norm(K0)),
        "weight_move": float(jnp.linalg.norm(W_net - W0)) / w0n,
        "pattern_flips": float(np.mean(s0 != sT)),
        "seconds": time.perf_counter() - t0,
    }
    arrays = {"f_test_net": f["net_test"].astype(np.float32), "f_test_lin": f["lin_test"].astype(np.float32)}
    return arrays, scalars


# --------------------------------------------------------------------------------------------------
# line 3: the training budget
# --------------------------------------------------------------------------------------------------
def budget_point(ztr, ytr, zte, yte, config: Config, l2: float):
    """Training MSE and test accuracy of the network (``budget_width``, seed 0, constant lr) after
    each number of epochs in ``budget_epochs``, with L2 ``l2`` (one run, read at those epochs)."""
    dt = jnp.dtype(config.train_dtype)
    params = att.init(jax.random.PRNGKey(0), ztr.shape[1], config.budget_width, symmetric=True, dtype=dt)
    W0, a = params["W"], params["a"]
    z, zt, y = (jnp.asarray(v, dt) for v in (ztr, zte, ytr))
    want = set(config.budget_epochs)
    rec: dict[int, tuple[float, float]] = {}

    def cb(epoch, p):
        if epoch in want:
            ftr = np.asarray(net_apply(p["W"], a, z), np.float64)
            fte = np.asarray(net_apply(p["W"], a, zt), np.float64)
            rec[epoch] = (float(np.mean((ftr - ytr) ** 2)), float(np.mean(np.sign(fte) == yte)))

    step = math.gcd(*config.budget_epochs)
    adam_train(z, y, W0, a, lr=config.adam_lr, l2=l2, epochs=max(config.budget_epochs), batch=config.adam_batch,
               seed=0, callback=cb, log_every=step)
    ep = sorted(rec)
    return ({"epochs": np.asarray(ep)},
            {"train_mse": [rec[e][0] for e in ep], "acc_test": [rec[e][1] for e in ep]})


# --------------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------------
def _prepare(task: str, config: Config) -> dict:
    """Inputs, NTK predictors, span coordinates, cone and Schur numbers of one task, per model."""
    xtr, ytr, xte, yte = task_data(task, config)
    out = {"ytr": ytr, "yte": yte, "models": {}}
    for model in config.models:
        ztr, zte = model_inputs(model, xtr, xte)
        steps = tuple(config.snapshots) + (math.inf,)
        f_tr, f_te, info = ntk_predictor(ztr, ytr, zte, config, steps)
        ctr, cte, hte2 = split_coordinates(ztr, zte)
        cone, angle_q = cone_statistics(np.concatenate([ztr, zte]), config.n_hyperplanes)
        out["models"][model] = {
            "ztr": ztr, "zte": zte, "ctr": ctr, "cte": cte, "hte2": hte2,
            "f_ntk": (f_tr[:-1], f_te[:-1], f_te[-1]), "K_inf": att.ntk(ztr), "info": info,
            "ntk_rms": np.sqrt(np.mean(f_te**2, axis=1)), "cone": cone, "angle_quantiles": angle_q,
            "schur": schur_check(ztr, xtr, info["kappa_K"], attend=(model == "attn")),
            "ntk_acc_test_T": float(np.mean(np.sign(f_te[-2]) == yte)),
            "ntk_acc_test_converged": float(np.mean(np.sign(f_te[-1]) == yte)),
        }
    return out


def _jobs(config: Config) -> list[tuple]:
    """All points in the order they are computed: the cheap and the most important first, so an
    interrupted paper-scale run has committed what matters (each point is saved as it finishes)."""
    seeds, models = config.seeds, config.models
    narrow = [m for m in config.widths if m <= 4096]
    wide = [m for m in config.widths if m > 4096]
    jobs = []

    def adam(rule, tasks, widths=None, models=models):
        for task in tasks:
            for m in widths or adam_widths_for(config, task):
                for model in models:
                    for s in seeds:
                        jobs.append(("adam", task, model, m, s, rule))

    def gd(widths, models=models, tasks=config.tasks):
        for task in tasks:
            for m in widths:
                for model in models:
                    for s in seeds:
                        jobs.append(("gd", task, model, m, s, None))

    first, *rest = config.lr_rules or (None,)
    if first:
        adam(first, config.adam_tasks)
    for rule in rest:
        adam(rule, config.scaled_lr_tasks, config.scaled_lr_widths)
    gd(narrow)
    for task in config.adam_tasks:
        for model in config.budget_models:
            for l2 in config.budget_l2:
                jobs.append(("budget", task, model, config.budget_width, 0, l2))
    gd(wide, config.wide_models, config.gd_wide_tasks)
    if first:
        adam(first, config.adam_wide_tasks, config.adam_wide_widths, config.wide_models)
    return jobs


def _key(job) -> str:
    line, task, model, m, s, extra = job
    if line == "gd":
        return f"line=gd/task={task}/model={model}/m={m}/seed={s}"
    if line == "adam":
        return f"line=adam/lr={extra}/task={task}/model={model}/m={m}/seed={s}"
    return f"line=budget/task={task}/model={model}/m={m}/l2={extra:g}"


def run(config: Config, points: PointStore | None = None) -> Result:
    points = points or PointStore(None)
    prep = {task: _prepare(task, config) for task in config.tasks}
    jobs = _jobs(config)
    done: dict[str, tuple] = {}
    bar = Progress(len(jobs), "NTK distance")
    try:
        for job in jobs:
            line, task, model, m, s, extra = job
            P, M = prep[task], prep[task]["models"][model]
            if line == "gd":
                fn = lambda M=M, P=P, m=m, s=s: gd_point(M["ctr"], P["ytr"], M["cte"], M["hte2"], M["f_ntk"],
                                                         M["K_inf"], config, m, s)
            elif line == "adam":
                fn = lambda M=M, P=P, m=m, s=s, r=extra: adam_point(M["ztr"], P["ytr"], M["zte"], P["yte"],
                                                                    M["f_ntk"][2], config, m, s, r)
            else:
                fn = lambda M=M, P=P, l2=extra: budget_point(M["ztr"], P["ytr"], M["zte"], P["yte"], config, l2)
            done[_key(job)] = points.cached(_key(job), fn)
            bar.update()
            bar.set_postfix(line=line, task=task, model=model, m=m)
    finally:
        bar.close()

    arrays: dict[str, np.ndarray] = {
        "widths": np.asarray(config.widths),
        "adam_widths": np.asarray(config.adam_widths),
        "snapshots": np.asarray(config.snapshots),
    }
    table = {}
    for task in config.tasks:
        P = prep[task]
        for model in config.models:
            M = P["models"][model]
            prefix = f"{task}/{model}"
            arrays[f"{prefix}/lam_K"] = M["info"]["lam_K"]
            arrays[f"{prefix}/ntk_rms"] = M["ntk_rms"]
            arrays[f"{prefix}/angle_quantiles"] = M["angle_quantiles"]
            entry = {
                "kappa_K": M["info"]["kappa_K"], "rank_K": M["info"]["rank_K"],
                "p": int(M["ctr"].shape[1]), "p_resid": int(M["hte2"].shape[1]),
                "ntk_acc_test_T": M["ntk_acc_test_T"], "ntk_acc_test_converged": M["ntk_acc_test_converged"],
                "cone": M["cone"], "schur": M["schur"], "points": {}, "adam": {}, "budget": {},
            }
            for m in config.widths:
                if m > 4096 and (model not in config.wide_models or task not in config.gd_wide_tasks):
                    continue
                runs = [done[_key(("gd", task, model, m, s, None))] for s in config.seeds]
                for name in ("dist_test", "dist_train", "kernel_move"):
                    arrays[f"{prefix}/m={m}/{name}"] = np.stack([r[0][name] for r in runs])
                sc = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                sc["acc_test_net"] = [float(np.mean(np.sign(r[0]["f_test_T"]) == P["yte"])) for r in runs]
                entry["points"][str(m)] = sc
            if task in config.adam_tasks:
                for i, rule in enumerate(config.lr_rules):
                    if i and task not in config.scaled_lr_tasks:
                        continue
                    per = {}
                    wide = (config.adam_wide_widths
                            if (i == 0 and task in config.adam_wide_tasks and model in config.wide_models) else ())
                    base = adam_widths_for(config, task) if i == 0 else tuple(config.scaled_lr_widths)
                    for m in base + tuple(wide):
                        runs = [done[_key(("adam", task, model, m, s, rule))] for s in config.seeds]
                        per[str(m)] = {k: [r[1][k] for r in runs] for k in runs[0][1]}
                    entry["adam"][rule] = per
                for l2 in config.budget_l2 if model in config.budget_models else ():
                    arr, sc = done[_key(("budget", task, model, config.budget_width, 0, l2))]
                    entry["budget"][f"{l2:g}"] = {"epochs": [int(e) for e in arr["epochs"]], **sc}
            table[prefix] = entry
    from ntkbook.train import training_record

    labels, losses, accs = [], [], []
    for prefix, entry in table.items():
        for rule, per in entry["adam"].items():
            for m, sc in per.items():
                for seed, loss, acc in zip(config.seeds, sc["train_mse_net"], sc["acc_train_net"]):
                    labels.append(f"{prefix}/{rule}/m={m}/seed={seed}")
                    losses.append(loss)
                    accs.append(acc)
    training = training_record(final_train_acc=np.asarray(accs), final_train_loss=np.asarray(losses),
                               min_train_acc=TRAINED_ACC, max_train_loss=TRAINED_MSE, labels=labels)
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays=arrays,
        scalars={"table": table, "tasks": TASK_LABELS, "models": MODELS, "lr_rules": LR_RULES,
                 "training": training},
    )


# --------------------------------------------------------------------------------------------------
# summaries (used by the chapter and the scorecard)
# --------------------------------------------------------------------------------------------------
def point_values(result: Result, task: str, model: str, key: str, *, line: str = "gd",
                 rule: str = "constant") -> tuple[np.ndarray, np.ndarray]:
    """``(widths, values (W, seeds))`` of one scalar of one line."""
    entry = result["table"][f"{task}/{model}"]
    pts = entry["points"] if line == "gd" else entry["adam"][rule]
    widths = np.array(sorted(int(m) for m in pts))
    return widths, np.array([pts[str(m)][key] for m in widths], dtype=float)


def loglog_slope(widths, values) -> float:
    """Least-squares slope of ``log(mean value)`` against ``log(width)`` over positive means
    (nan with fewer than two)."""
    w = np.asarray(widths, dtype=float)
    y = np.asarray(values, dtype=float)
    y = y.mean(axis=1) if y.ndim == 2 else y
    ok = y > 0
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(w[ok]), np.log(y[ok]), 1)[0])


def trend(slope: float) -> str:
    """``"decreasing"`` / ``"increasing"`` / ``"flat"`` by the threshold ``SLOPE_FLAT``."""
    if not math.isfinite(slope):
        return "not measured"
    return "decreasing" if slope < -SLOPE_FLAT else ("increasing" if slope > SLOPE_FLAT else "flat")


def width_trend(widths, values) -> tuple[float, str]:
    """``(log-log slope, trend)`` of the mean over seeds against width (widths with a mean of 0 are
    left out of the fit). A distance that is exactly 0 at the narrow end (the network *is* its
    linearisation there) and positive at fewer than two widths is ``"increasing"``."""
    y = np.asarray(values, dtype=float)
    y = y.mean(axis=1) if y.ndim == 2 else y
    s = loglog_slope(widths, y)
    if not math.isfinite(s) and y.size >= 2 and y[0] == 0.0 and y[-1] > 0.0:
        return s, "increasing"
    return s, trend(s)


def is_trained(result: Result, task: str, model: str, rule: str = "constant") -> bool:
    """Every network of the Adam line trained: training accuracy at least ``TRAINED_ACC`` and
    training MSE at most ``TRAINED_MSE``."""
    _, mse = point_values(result, task, model, "train_mse_net", line="adam", rule=rule)
    _, acc = point_values(result, task, model, "acc_train_net", line="adam", rule=rule)
    return bool(np.all(mse <= TRAINED_MSE) and np.all(acc >= TRAINED_ACC))


def scorecard(result: Result) -> list[dict]:
    """Rows for ``A.distance.relu`` and ``A.distance.attn``.

    Rule: on each task of the Adam line, the distance between the network and its own linearisation
    (the paper's recipe, constant lr) has a log-log slope against width; the paper's direction
    (2L-ReLU decreasing, MLP-Attn increasing) holds on a task when the slope is beyond
    ``SLOPE_FLAT`` with the paper's sign (or the distance rises from exactly 0). Reproduces: the
    direction holds on every task and every network there trained (training MSE at most
    ``TRAINED_MSE``); does not: the direction holds on no task; partly: anything in between (in
    particular the direction holding only for networks that did not train).
    """
    cfg = result.config
    tasks = [t for t in cfg["adam_tasks"] if f"{t}/relu" in result["table"] and f"{t}/attn" in result["table"]]
    if not tasks or "constant" not in cfg["lr_rules"]:
        return []
    rows = []
    for model, claim, want in (("relu", "A.distance.relu", "decreasing"), ("attn", "A.distance.attn", "increasing")):
        parts, held, full = [], 0, 0
        for task in tasks:
            w, d = point_values(result, task, model, "dist_net_lin", line="adam")
            s, tr = width_trend(w, d)
            trained = is_trained(result, task, model)
            held += tr == want
            full += tr == want and trained
            mu = d.mean(axis=1)
            parts.append(f"{TASK_LABELS[task]}: {mu[0]:.2g} → {mu[-1]:.2g} at m = {w[0]}–{w[-1]} ({tr}, slope {s:+.3f}"
                         + ("" if trained else f"; not trained: training accuracy below {TRAINED_ACC:.0%} "
                                                   f"or MSE above {TRAINED_MSE:g}") + ")")
        verdict = "reproduces" if full == len(tasks) else ("partly" if held else "does not")
        gd_parts = []
        for task in tasks:
            w, d = point_values(result, task, model, "dist_test_T")
            gd_parts.append(width_trend(w, d)[1])
        rows.append({
            "claim": claim,
            "ours": "; ".join(parts),
            "verdict": verdict,
            "note": (f"Network vs its own linearisation, paper's Adam recipe, "
                     f"{len(cfg['seeds'])} {'seed' if len(cfg['seeds']) == 1 else 'seeds'}, RMS over test points; "
                     f"paper's direction: {want}; against the exact "
                     f"GD-trained NTK predictor the distance is {' / '.join(gd_parts)}."),
        })
    return rows
