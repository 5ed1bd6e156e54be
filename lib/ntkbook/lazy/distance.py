r"""The set-up and the measurements shared by the NTK-distance experiments (Paper A, width chapter).

:mod:`ntkbook.experiments.ntk_distance` (three comparators over tasks, models and widths) and
:mod:`ntkbook.experiments.ntk_distance_fullbatch` (its Adam line with full batches) measure the same
thing on the same data; what they share is here, so that neither imports the other.

* Data (:func:`task_data`): ``n_train_per_class`` training and ``n_test_per_class`` test images of
  two classes (balanced, subset seed 0), labels ``y = +-1``. 2L-ReLU sees the row-normalised raw
  inputs, MLP-Attn the row-normalised attention output (:func:`model_inputs`); both lie on the unit
  sphere. :data:`SETUPS` holds the data, predictor and geometry settings of ``ntk_distance``'s two
  presets, which ``ntk_distance_fullbatch`` reuses by name.
* Network: the two-layer ReLU network of :mod:`ntkbook.models.two_layer`, only ``W`` trained,
  symmetric initialisation (``f = 0`` at ``t = 0``).
* The analytic NTK predictor trained by gradient descent, exact at every step
  (:func:`ntk_predictor`, :func:`gd_weights`), and the distance :func:`rms_distance`.
* The paper's Adam recipe on the network and on its own linearisation (:func:`adam_train`,
  :func:`adam_point`).
* The geometry of the inputs (:func:`cone_statistics`, :func:`schur_check`) and the verdict
  vocabulary: when a network counts as trained (:func:`trained`), when a distance rises or falls
  with width (:func:`width_trend`).
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError, NumericalError
from ntkbook.models import attention
from ntkbook.models import two_layer
from ntkbook.stats import loglog_slope

#: task name -> (data set, class a, class b)
TASKS = {
    "mnist_3v8": ("mnist", "3", "8"),
    "cifar10_auto_v_plane": ("cifar10", "automobile", "airplane"),
    "fmnist_shirt_v_tshirt": ("fashion-mnist", "Shirt", "T-shirt/top"),
}
#: task name -> its name in text
TASK_LABELS = {
    "mnist_3v8": "MNIST 3 vs 8",
    "cifar10_auto_v_plane": "CIFAR-10 automobile vs airplane",
    "fmnist_shirt_v_tshirt": "Fashion-MNIST shirt vs T-shirt/top",
}
#: model name -> its name in text
MODELS = {"relu": "2L-ReLU", "attn": "MLP-Attn"}

#: a log-log slope of distance against width beyond +-SLOPE_FLAT counts as a trend
SLOPE_FLAT = 0.15
#: a network counts as trained when it classifies at least TRAINED_ACC of its training points
#: correctly and its training MSE is at most TRAINED_MSE (half that of the zero function, 1). With
#: the paper's L2 penalty the MSE of a network that fits its data plateaus well above 0.
TRAINED_ACC = 0.9
TRAINED_MSE = 0.5


@dataclasses.dataclass(frozen=True)
class Setup:
    """The settings of one task's preparation (:func:`prepare`) and of the networks' float type:
    the fields of ``ntk_distance.Config`` of the same names."""

    #: training images per class
    n_train_per_class: int
    #: test images per class
    n_test_per_class: int
    #: learning rate of the gradient descent the NTK predictor follows
    lr: float
    #: the GD steps at which the NTK predictor is evaluated
    snapshots: tuple[int, ...]
    #: random hyperplanes of the cut fraction (:func:`hyperplane_cut_fraction`)
    n_hyperplanes: int
    #: float type the networks train in
    train_dtype: str


#: the set-up of ``ntk_distance``'s presets (``Config.paper()`` and ``Config.smoke()``), by preset
#: name; ``ntk_distance_fullbatch`` selects one with its ``base``
SETUPS = {
    "paper": Setup(n_train_per_class=128, n_test_per_class=128, lr=1.0, snapshots=(0, 10, 30, 100, 300, 1000),
                   n_hyperplanes=20000, train_dtype="float32"),
    "smoke": Setup(n_train_per_class=16, n_test_per_class=16, lr=1.0, snapshots=(0, 10, 100),
                   n_hyperplanes=2000, train_dtype="float32"),
}


# --------------------------------------------------------------------------------------------------
# data and kernels
# --------------------------------------------------------------------------------------------------
def task_data(task: str, n_train_per_class: int, n_test_per_class: int):
    """``(x_train, y_train, x_test, y_test)`` raw (float64, pixels in [0, 1]), labels +-1."""
    from ntkbook import data

    dname, ca, cb = TASKS[task]
    ds = data.load(dname)
    classes = [int(c) if c.isdigit() else c for c in (ca, cb)]
    xtr, ytr = data.class_subset(ds, classes, n_train_per_class, split="train", seed=0)
    xte, yte = data.class_subset(ds, classes, n_test_per_class, split="test", seed=0)
    return xtr, 1.0 - 2.0 * ytr, xte, 1.0 - 2.0 * yte


def model_inputs(model: str, xtr, xte):
    """``(z_train, z_test)``: the row-normalised inputs of 2L-ReLU (``"relu"``) or the row-normalised
    attention outputs of MLP-Attn (``"attn"``)."""
    return attention.transform(xtr, xte, attend=(model == "attn"), normalize="row")


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


def ntk_predictor(ztr, ytr, zte, lr: float, steps):
    """Analytic-NTK predictor after GD with learning rate ``lr`` for each number of ``steps``
    (``math.inf``: converged): ``(train (S, n), test (S, n_test), info)``."""
    K = two_layer.ntk(ztr)
    Kx = two_layer.ntk(zte, ztr)
    lam, U = np.linalg.eigh(K)
    n = ztr.shape[0]
    phi = gd_weights(lam, lr, n, steps)  # (S, n)
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
        raise InputError(f"predictions have different shapes {f1.shape} and {f2.shape}")
    return float(np.sqrt(np.mean((f1 - f2) ** 2)))


# --------------------------------------------------------------------------------------------------
# input geometry
# --------------------------------------------------------------------------------------------------
def pairwise_angles(z) -> np.ndarray:
    """Angles (radians, float64) between all pairs of rows of ``z`` (``n (n - 1) / 2`` of them)."""
    zn = attention.normalize_rows(z)
    if not np.all(np.linalg.norm(zn, axis=1) > 0):
        raise InputError("pairwise_angles needs nonzero rows")
    c = np.clip(zn @ zn.T, -1.0, 1.0)
    iu = np.triu_indices(zn.shape[0], k=1)
    return np.arccos(c[iu])


def hyperplane_cut_fraction(z, n_hyperplanes: int, seed: int = 0, chunk: int = 1000) -> float:
    """Fraction of random hyperplanes ``{x : w . x = 0}``, ``w ~ N(0, I_d)``, that have rows of ``z``
    strictly on both sides. A ReLU neuron whose hyperplane does not cut the data is linear on it
    (identically zero or the identity)."""
    z = np.asarray(z, dtype=np.float64)
    if n_hyperplanes < 1:
        raise InputError(f"n_hyperplanes must be positive, got {n_hyperplanes}")
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
    from ntkbook.ntk import gram

    _, rank_in, k_in = gram.factor_spectrum(z_train)
    out = {"kappa_Theta": float(kappa_theta), "kappa_G_in": k_in, "rank_G_in": rank_in,
           "schur_ratio": float(k_in / kappa_theta)}
    if attend:
        _, rank_raw, k_raw = gram.factor_spectrum(x_train_raw)
        out.update({"kappa_G_raw": k_raw, "kappa_G_raw_cubed": k_raw**3, "rank_G_raw": rank_raw})
    return out


def prepare(task: str, models, setup: Setup) -> dict:
    """Inputs, NTK predictors, span coordinates, cone and Schur numbers of one task, per model:
    ``{"ytr", "yte", "models": {model: {...}}}``."""
    xtr, ytr, xte, yte = task_data(task, setup.n_train_per_class, setup.n_test_per_class)
    out = {"ytr": ytr, "yte": yte, "models": {}}
    for model in models:
        ztr, zte = model_inputs(model, xtr, xte)
        steps = tuple(setup.snapshots) + (math.inf,)
        f_tr, f_te, info = ntk_predictor(ztr, ytr, zte, setup.lr, steps)
        ctr, cte, hte2 = split_coordinates(ztr, zte)
        cone, angle_q = cone_statistics(np.concatenate([ztr, zte]), setup.n_hyperplanes)
        out["models"][model] = {
            "ztr": ztr, "zte": zte, "ctr": ctr, "cte": cte, "hte2": hte2,
            "f_ntk": (f_tr[:-1], f_te[:-1], f_te[-1]), "K_inf": two_layer.ntk(ztr), "info": info,
            "ntk_rms": np.sqrt(np.mean(f_te**2, axis=1)), "cone": cone, "angle_quantiles": angle_q,
            "schur": schur_check(ztr, xtr, info["kappa_K"], attend=(model == "attn")),
            "ntk_acc_test_T": float(np.mean(np.sign(f_te[-2]) == yte)),
            "ntk_acc_test_converged": float(np.mean(np.sign(f_te[-1]) == yte)),
        }
    return out


# --------------------------------------------------------------------------------------------------
# Adam on the real weights, network and its own linearisation
# --------------------------------------------------------------------------------------------------
def adam_train(z, y, W0, a, *, lr: float, l2: float, epochs: int, batch: int, seed: int,
               linearised: bool = False, callback=None, log_every: int | None = None):
    """Train ``W`` (from ``W0``) of the network, or of its linearisation around ``W0``, by the
    paper's recipe: Adam(lr) on ``mean (f - y)^2`` with ``grad += l2 * W`` (PyTorch's
    ``weight_decay``), mini-batches of ``batch`` reshuffled each epoch by ``seed`` (the last
    incomplete batch kept, as PyTorch's ``DataLoader`` does). Returns the :class:`TrainResult`."""
    import optax

    from ntkbook.train import fit

    if linearised:
        data = (z, y, two_layer.activation_pattern(W0, z, z.dtype))

        def loss_fn(params, b):
            return jnp.mean((two_layer.apply_batch({"W": params["W"], "a": a}, b[0], pattern=b[2]) - b[1]) ** 2)
    else:
        data = (z, y)

        def loss_fn(params, b):
            return jnp.mean((two_layer.apply_batch({"W": params["W"], "a": a}, b[0]) - b[1]) ** 2)

    opt = optax.chain(optax.add_decayed_weights(l2), optax.adam(lr))
    return fit(loss_fn, {"W": W0}, opt, data, epochs=epochs, batch_size=min(batch, z.shape[0]), seed=seed,
               log_every=log_every or epochs, callback=callback)


def adam_point(ztr, ytr, zte, yte, f_te_inf, *, width: int, seed: int, lr: float, l2: float, epochs: int,
               batch: int, train_dtype: str):
    """One (width, seed) point of the Adam line: the network (symmetric initialisation from
    ``PRNGKey(seed)``) and its own linearisation, trained by :func:`adam_train` with the same recipe
    from the same initial weights with the same batch order, compared on the test inputs with each
    other and with the converged NTK predictor ``f_te_inf``. Returns ``(arrays, scalars)``."""
    t0 = time.perf_counter()
    dt = jnp.dtype(train_dtype)
    params = two_layer.init(jax.random.PRNGKey(seed), ztr.shape[1], width, symmetric=True, dtype=dt)
    W0, a = params["W"], params["a"]
    z, zt, y = (jnp.asarray(v, dt) for v in (ztr, zte, ytr))
    kw = dict(lr=lr, l2=l2, epochs=epochs, batch=batch, seed=seed)
    net = {"W": adam_train(z, y, W0, a, **kw).params["W"], "a": a}
    lin = {"W": adam_train(z, y, W0, a, linearised=True, **kw).params["W"], "a": a}
    f = {
        "net_train": two_layer.apply_batch(net, z),
        "net_test": two_layer.apply_batch(net, zt),
        "lin_train": two_layer.apply_batch(lin, z, pattern=two_layer.activation_pattern(W0, z, dt)),
        "lin_test": two_layer.apply_batch(lin, zt, pattern=two_layer.activation_pattern(W0, zt, dt)),
    }
    f = {k: np.asarray(v, np.float64) for k, v in f.items()}
    if not all(np.all(np.isfinite(v)) for v in f.values()):
        raise NumericalError(f"Adam produced non-finite outputs at width {width}, seed {seed}, lr {lr}")
    K0 = two_layer.entk_W(params, ztr)
    s0 = np.asarray(two_layer.activation_pattern(W0, z)) > 0
    sT = np.asarray(two_layer.activation_pattern(net["W"], z)) > 0
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
        "kernel_move": float(np.linalg.norm(two_layer.entk_W(net, ztr) - K0) / np.linalg.norm(K0)),
        "weight_move": float(jnp.linalg.norm(net["W"] - W0)) / w0n,
        "pattern_flips": float(np.mean(s0 != sT)),
        "seconds": time.perf_counter() - t0,
    }
    arrays = {"f_test_net": f["net_test"].astype(np.float32), "f_test_lin": f["lin_test"].astype(np.float32)}
    return arrays, scalars


# --------------------------------------------------------------------------------------------------
# the verdict vocabulary: trained, and the trend with width
# --------------------------------------------------------------------------------------------------
def trained(acc_train, train_mse) -> bool:
    """Trained: training accuracy at least ``TRAINED_ACC`` and training MSE at most
    ``TRAINED_MSE`` (for arrays: every entry)."""
    return bool(np.all(np.asarray(train_mse) <= TRAINED_MSE) and np.all(np.asarray(acc_train) >= TRAINED_ACC))


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
