r"""The empirical NTK of a two-layer ReLU network converges to the analytic one as the width grows.

Network (NTK parameterisation, the network of :mod:`ntkbook.models.two_layer`, independent
initialisation):
:math:`f(x) = m^{-1/2}\sum_{r=1}^m a_r\,\mathrm{relu}(w_r\cdot x)`, :math:`w_r \sim \mathcal N(0, I)`,
:math:`a_r = \pm 1`. Inputs: ``N`` MNIST training images, ``n_per_class`` of each of the ten digits,
flattened to 784 pixels and scaled to unit Euclidean norm (:func:`ntkbook.data.mnist_unit_norm`).

For every width ``m`` and seed the empirical NTK is computed with :func:`ntkbook.ntk.entk.entk_layerwise`
(float64), split into the kernel of the first layer ``W`` (``a`` fixed, the setting of Paper A) and
that of the read-out ``a``; ``K_all = K_W + K_a``. Both are compared with
:func:`ntkbook.ntk.kernels.relu_ntk` (``trainable="W"`` and ``"all"``) by the relative Frobenius error
``||K_m - Θ_∞||_F / ||Θ_∞||_F``.

The eNTK is a sum over hidden units, so a wide network is processed in blocks of ``chunk`` units:
the block network ``g(x) = c^{-1/2}\sum_{r \in \text{block}} a_r relu(w_r\cdot x)`` has the eNTK
``(m/c)`` times the block's share of ``K_m``, hence ``K_m`` is the average of the blocks' eNTKs (for
equal blocks). This is exact and keeps the per-example Jacobians at ``N * chunk * 784`` numbers.

For ``K_W`` the expected squared error is known in closed form: each unit adds an independent term
``(x\cdot x') 1[w\cdot x>0] 1[w\cdot x'>0]`` of mean ``Θ_W(x,x')`` and variance
``(x\cdot x')^2 κ_0(1-κ_0)`` with ``κ_0 = (π-θ)/(2π)``, so
``E||K_W - Θ_W||_F^2 = m^{-1} Σ_{ij} (x_i\cdot x_j)^2 κ_0(1-κ_0)``. The result stores this prediction
(``predicted_W``, the root-mean-square relative error) beside the measurement.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ntkbook import validate as v
from ntkbook.progress import Progress
from ntkbook.stats import loglog_slope
from ntkbook.store import PointStore, Result

NAME = "entk_convergence"
VERSION = "1"
#: the precision of the engine's materialised kernels (ntkbook.ntk.entk.PRECISIONS), recorded in
#: each new result's provenance: float64 throughout, so that round-off never floors the eNTK's
#: error against the analytic NTK, which the experiment follows down as the width grows
PRECISION = "float64"


@dataclasses.dataclass(frozen=True)
class Config:
    """The relative error of the eNTK against width.

    Presets: ``paper()`` (N = 80 images, widths 2^5 to 2^14, four seeds) and ``smoke()`` (N = 40,
    widths 2^5 to 2^9, two seeds).
    """

    n_per_class: int = 8  # ten digits -> N = 10 * n_per_class images
    widths: tuple[int, ...] = tuple(2**k for k in range(5, 15))  # network widths m
    num_seeds: int = 4  # network seeds per width (0, 1, ...)
    chunk: int = 1024  # hidden units per eNTK block
    data_seed: int = 0  # seed of the image subset
    store_kernels_seed: int = 0  # seed whose K_W at the smallest and largest width is stored

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4, widths=tuple(2**k for k in range(5, 10)), num_seeds=2)

    @classmethod
    def paper(cls) -> "Config":
        return cls(n_per_class=8, widths=tuple(2**k for k in range(5, 15)), num_seeds=4)

    def __post_init__(self):
        v.positive_int(NAME, "n_per_class", self.n_per_class)
        v.each(v.positive_int, NAME, "widths", self.widths)
        v.require(NAME, "widths", self.widths, len(self.widths) >= 2, "at least two widths",
                  "the log-log slope needs two points")
        v.increasing(NAME, "widths", self.widths, "the first is the smallest, the last the largest")
        v.positive_int(NAME, "num_seeds", self.num_seeds)
        v.positive_int(NAME, "chunk", self.chunk)
        v.int_at_least(NAME, "data_seed", self.data_seed, 0, "a NumPy seed")
        v.int_in(NAME, "store_kernels_seed", self.store_kernels_seed, 0, self.num_seeds - 1, "one of the seeds run")


def estimate_seconds(config: Config) -> float:
    n = 10 * config.n_per_class
    # measured on 2 shared CPU cores: ~2.4e-7 s per (hidden unit x N^2) with d = 784, plus compiles
    return 2.4e-7 * n * n * sum(config.widths) * config.num_seeds + 1.0 * len(config.widths)


def predicted_error_W(x: np.ndarray, width: int | np.ndarray) -> np.ndarray:
    """Root-mean-square relative Frobenius error of the width-``m`` ``K_W`` (closed form, see the
    module docstring), for ``a_r = ±1``."""
    dot = x @ x.T
    nrm = np.linalg.norm(x, axis=1)
    cos = np.clip(dot / np.outer(nrm, nrm), -1.0, 1.0)
    np.fill_diagonal(cos, 1.0)
    k0 = (np.pi - np.arccos(cos)) / (2 * np.pi)
    theta_w = dot * k0
    var = np.sum(dot**2 * k0 * (1 - k0))
    return np.sqrt(var / np.asarray(width, dtype=float)) / np.linalg.norm(theta_w)


def entk_two_layer(x, width: int, seed: int, chunk: int):
    """``(K_W, K_a)``: the eNTK of the width-``width`` two-layer ReLU network on ``x``, split into
    the first-layer and read-out parts, computed in blocks of ``chunk`` hidden units (float64;
    call inside ``jax.enable_x64``)."""
    import jax
    import jax.numpy as jnp

    from ntkbook.models import two_layer
    from ntkbook.ntk import entk

    params = two_layer.init(jax.random.fold_in(jax.random.PRNGKey(seed), width), x.shape[1], width,
                            symmetric=False, dtype=jnp.float64)
    xj = jnp.asarray(x, dtype=jnp.float64)
    kw = np.zeros((x.shape[0], x.shape[0]))
    ka = np.zeros_like(kw)
    for s in range(0, width, chunk):
        block = {"W": params["W"][s : s + chunk], "a": params["a"][s : s + chunk]}
        share = block["W"].shape[0] / width
        ks = entk.entk_layerwise(two_layer.apply, block, xj,
                                 layers={"W": "W", "a": "a"}, reduction="class_mean",
                                 precision=PRECISION)
        kw += share * np.asarray(ks["W"])
        ka += share * np.asarray(ks["a"])
    return kw, ka


def run(config: Config, points: PointStore | None = None) -> Result:
    """The eNTK (:func:`entk_two_layer`) of every width and seed, each checkpointed in ``points``,
    against the analytic NTK: the errors per width and seed, their log-log slopes, the closed-form
    prediction, and ``K_W`` of one seed at the smallest and largest width."""
    import jax

    from ntkbook import data

    points = points or PointStore(None)
    x, y = data.mnist_unit_norm(config.n_per_class, config.data_seed)
    with jax.enable_x64(True):
        import jax.numpy as jnp

        from ntkbook.ntk import kernels

        theta_w = np.asarray(kernels.relu_ntk(jnp.asarray(x), trainable="W"))
        theta_all = np.asarray(kernels.relu_ntk(jnp.asarray(x), trainable="all"))
        nw, nall = np.linalg.norm(theta_w), np.linalg.norm(theta_all)
        keep = {min(config.widths), max(config.widths)}

        err_w = np.zeros((len(config.widths), config.num_seeds))
        err_all = np.zeros_like(err_w)
        stored = {}
        total_units = sum(config.widths) * config.num_seeds
        bar = Progress(total_units, desc="eNTK vs width")
        for i, m in enumerate(config.widths):
            for seed in range(config.num_seeds):
                def compute(m=m, seed=seed):
                    kw, ka = entk_two_layer(x, m, seed, config.chunk)
                    arrays = {}
                    if seed == config.store_kernels_seed and m in keep:
                        arrays["K_W"] = kw
                    return arrays, {
                        "err_W": float(np.linalg.norm(kw - theta_w) / nw),
                        "err_all": float(np.linalg.norm(kw + ka - theta_all) / nall),
                    }

                arrays, scalars = points.cached(f"width={m},seed={seed}", compute)
                err_w[i, seed] = scalars["err_W"]
                err_all[i, seed] = scalars["err_all"]
                if "K_W" in arrays:
                    stored[m] = arrays["K_W"]
                bar.update(m)
                bar.set_postfix(width=m, err_W=scalars["err_W"])
        bar.close()

    widths = np.asarray(config.widths, dtype=float)
    mean_w, mean_all = err_w.mean(axis=1), err_all.mean(axis=1)
    predicted = predicted_error_W(x, widths)
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays={
            "widths": widths,
            "err_W": err_w,
            "err_all": err_all,
            "predicted_W": predicted,
            "theta_W": theta_w,
            "K_W_smallest": stored[min(config.widths)],
            "K_W_largest": stored[max(config.widths)],
            "labels": y,
        },
        scalars={
            "n_inputs": int(x.shape[0]),
            "input_dim": int(x.shape[1]),
            "slope_W": loglog_slope(widths, mean_w),
            "slope_all": loglog_slope(widths, mean_all),
            "ratio_to_prediction_W": float(np.mean(mean_w / predicted)),
            "smallest_width": int(min(config.widths)),
            "largest_width": int(max(config.widths)),
            "err_W_largest": float(mean_w[-1]),
            "err_all_largest": float(mean_all[-1]),
            "err_W_smallest": float(mean_w[0]),
            "err_all_smallest": float(mean_all[0]),
        },
    )

