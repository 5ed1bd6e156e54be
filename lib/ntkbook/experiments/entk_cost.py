r"""What a matrix-free eNTK product, Lanczos and the dense route cost, measured once and stored.

The network is the MLP of :mod:`ntkbook.models.mlp` (NTK parameterisation, float64) with layer
sizes ``(784, *hidden, 10)`` and weights from ``weights_seed``; its inputs are
``N = 10 * batch_n_per_class`` MNIST training images (the same number of each digit, flattened,
unit norm: :func:`ntkbook.data.mnist_unit_norm` with ``batch_seed``). On them the run

- times (:func:`best_seconds`: best of ``repeats`` or ``repeats_slow`` runs after one that
  compiles) a forward pass, one product ``v -> K v`` of the flattened ``NC x NC`` eNTK
  (:func:`ntkbook.ntk.entk.entk_matvec`), Lanczos for the top ``k_top`` eigenpairs
  (:func:`ntkbook.ntk.eig.lanczos_topk`, its default ``2k + 10`` products), materialising ``J`` and
  ``K = J J^T`` (:func:`ntkbook.ntk.entk.entk` with ``route="jacobians"``, 10 examples per Jacobian
  block), the same ``K`` by structured derivatives (``route="structured"``: each weight's part
  from the Gram matrices of its layer's inputs and of the cotangents at its outputs, the biases'
  from their Jacobians), and the dense eigensolver on ``K`` (:func:`ntkbook.ntk.eig.dense_topk`);
- counts their floating-point operations and the memory they hold (:func:`operation_counts`);
- checks Lanczos against the dense eigensolver (:func:`lanczos_check`) and computes the top
  eigenvalue of each layer's kernel (:func:`layer_top_eigenvalues`).

The timings depend on the machine: the result records it (the store's provenance has the JAX
device and backend; the scalars ``cpu_model`` and ``cpu_count`` say which processor and how many of
its cores the run could use). A rerun compares everything but the timings and the machine
(:data:`REPRODUCE_TOLERANCE`).

The result also stores the images the chapter demonstrates the eNTK on, so that the chapter runs
without the data set: ``inputs_demo`` (one image of each digit, ``demo_seed``) and
``inputs_batch`` (the ``N`` images above), 70 MNIST images at paper scale, with their labels.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from typing import Callable

import numpy as np

from ntkbook import validate as v
from ntkbook.store import PointStore, Result

NAME = "entk_cost"
VERSION = "1"
#: the precision of the engine's materialised kernel (ntkbook.ntk.entk.PRECISIONS), recorded in
#: each new result's provenance: float64 throughout, the precision at which the chapters compute
#: the kernels whose cost is measured here
PRECISION = "float64"

#: outputs of the network: the ten digits
NUM_CLASSES = 10

#: how a rerun is compared with a stored entry (:mod:`ntkbook.freshness`; the ``seconds_*``
#: timings are never compared)
REPRODUCE_TOLERANCE = {"ignore": {
    "cpu_*": "the machine, not a result",
    "lanczos_max_relative_error": "round-off by construction",
    "lanczos_max_relative_residual": "round-off by construction",
}}


@dataclasses.dataclass(frozen=True)
class Config:
    """The network, its inputs and the timing runs.

    Presets: ``paper()`` (N = 60 images, hidden widths 128 and 128, top 10 eigenpairs) and
    ``smoke()`` (N = 20).
    """

    demo_seed: int = 0  # seed of the demonstration's images, one of each digit
    batch_n_per_class: int = 6  # ten digits -> N = 10 * batch_n_per_class images timed
    batch_seed: int = 1  # seed of the timed images
    hidden: tuple[int, ...] = (128, 128)  # hidden widths of the MLP
    weights_seed: int = 1  # seed of the MLP's weights
    k_top: int = 10  # eigenpairs asked of Lanczos and of the dense eigensolver
    repeats: int = 5  # timed runs of the forward pass and of one product (the best is kept)
    repeats_slow: int = 2  # timed runs of Lanczos, materialising and the dense eigensolver

    @classmethod
    def smoke(cls) -> "Config":
        return cls(batch_n_per_class=2)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.int_at_least(NAME, "demo_seed", self.demo_seed, 0, "a NumPy seed")
        v.positive_int(NAME, "batch_n_per_class", self.batch_n_per_class)
        v.int_at_least(NAME, "batch_seed", self.batch_seed, 0, "a NumPy seed")
        v.non_empty(NAME, "hidden", self.hidden, "an MLP with at least one hidden layer")
        v.each(v.positive_int, NAME, "hidden", self.hidden)
        v.int_at_least(NAME, "weights_seed", self.weights_seed, 0, "a JAX seed")
        v.int_in(NAME, "k_top", self.k_top, 1, NUM_CLASSES * 10 * self.batch_n_per_class,
                 "at most the kernel's size N * C = 100 * batch_n_per_class")
        v.positive_int(NAME, "repeats", self.repeats, "the best of at least one timed run")
        v.positive_int(NAME, "repeats_slow", self.repeats_slow, "the best of at least one timed run")


def estimate_seconds(config: Config) -> float:
    # measured on 2 shared CPU cores: compiles, then materialising K (N^2 P each, run
    # repeats_slow + 2 times) dominates
    n = 10 * config.batch_n_per_class
    sizes = (784, *config.hidden, NUM_CLASSES)
    params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    return 8.0 + 5e-9 * n * n * params * (config.repeats_slow + 2)


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`),
    or ``"unknown"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_count() -> int:
    """The number of CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def best_seconds(fn: Callable, repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls of ``fn`` (waiting for JAX's result), after one
    untimed call that compiles."""
    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def operation_counts(sizes: tuple[int, ...], n_inputs: int, num_params: int, lanczos_products: int,
                     bytes_per_number: int = 8) -> dict[str, int]:
    """Floating-point operations and memory (bytes) of each route, for an MLP with layer sizes
    ``sizes`` on ``n_inputs`` inputs (``C = sizes[-1]`` outputs, ``num_params`` parameters):

    - ``flops_forward`` ``2N sum_l n_{l-1} n_l``; ``flops_product`` ``2N (2 n_0 n_1 + 4 sum_{l>=2}
      n_{l-1} n_l)`` (a VJP and a JVP; the first layer's input does not depend on the parameters);
      ``flops_lanczos`` ``lanczos_products`` products; ``flops_materialise`` ``2 (NC)^2 P``
      (``K = J J^T``); ``flops_structured`` ``2 N^2 sum_l (n_{l-1} + C^2 n_l + C^2 n_l)`` (the
      kernel by structured derivatives: per layer the Gram matrices of its inputs and of the
      cotangents at its outputs, and its bias's Jacobian); ``flops_eigensolver`` ``(NC)^3``;
    - ``bytes_activations`` (one forward pass), ``bytes_vectors`` (``v`` and ``Kv``),
      ``bytes_lanczos_basis`` (``lanczos_products + 1`` vectors), ``bytes_jacobian`` (``NC x P``),
      ``bytes_factors`` (per input and layer its input and the cotangents at its outputs, and its
      bias's Jacobian: ``N sum_l (n_{l-1} + 2 C n_l)``), ``bytes_kernel`` (``NC x NC``).
    """
    n, c = n_inputs, sizes[-1]
    weights = [a * b for a, b in zip(sizes[:-1], sizes[1:])]
    flops_product = 2 * n * (2 * weights[0] + 4 * sum(weights[1:]))
    return {
        "flops_forward": 2 * n * sum(weights),
        "flops_product": flops_product,
        "flops_lanczos": lanczos_products * flops_product,
        "flops_materialise": 2 * (n * c) ** 2 * num_params,
        "flops_structured": 2 * n * n * sum(a + 2 * c * c * b for a, b in zip(sizes[:-1], sizes[1:])),
        "flops_eigensolver": (n * c) ** 3,
        "bytes_activations": bytes_per_number * n * sum(sizes),
        "bytes_vectors": bytes_per_number * 2 * n * c,
        "bytes_lanczos_basis": bytes_per_number * (lanczos_products + 1) * n * c,
        "bytes_jacobian": bytes_per_number * n * c * num_params,
        "bytes_factors": bytes_per_number * n * sum(a + 2 * c * b for a, b in zip(sizes[:-1], sizes[1:])),
        "bytes_kernel": bytes_per_number * (n * c) ** 2,
    }


def lanczos_check(top, ref, k: int) -> dict[str, float]:
    """Lanczos (``top``) against the dense eigensolver (``ref``), both
    :class:`ntkbook.ntk.eig.EigResult` of the top ``k`` eigenpairs: the products Lanczos used, the
    largest eigenvalue error and the largest residual ``||K y - θ y||``, both relative to the top
    eigenvalue, and the overlap ``||Y_lanczos^T Y_dense||_F^2 / k`` of the two top-``k``
    eigenspaces (1 when they coincide)."""
    import jax.numpy as jnp

    return {
        "lanczos_products": int(top.num_matvecs),
        "lanczos_max_relative_error": float(jnp.max(jnp.abs(top.eigenvalues - ref.eigenvalues))
                                            / ref.eigenvalues[0]),
        "lanczos_max_relative_residual": float(jnp.max(top.residual_norms) / top.eigenvalues[0]),
        "lanczos_eigenspace_overlap": float(jnp.linalg.norm(top.eigenvectors.T @ ref.eigenvectors) ** 2 / k),
    }


def layer_top_eigenvalues(params, x) -> dict[str, float]:
    """``{layer: λ_max(K^(layer))}``: the top eigenvalue of each layer's flattened eNTK of the MLP
    ``params`` on the inputs ``x`` ``(N, 784)``, by Lanczos on the operator restricted to the
    layer's parameters (``param_filter``)."""
    from ntkbook.models import mlp
    from ntkbook.ntk import eig, entk

    out = {}
    for name, keep in entk.default_layers(params).items():
        op = entk.entk_matvec(mlp.apply, params, x, reduction="flat", param_filter=keep)
        out[name.strip("[']")] = float(eig.lanczos_topk(op, op.dim, 1).eigenvalues[0])
    return out


def run(config: Config, points: PointStore | None = None) -> Result:
    """The timings, operation counts, Lanczos check and per-layer top eigenvalues of the module
    docstring, and the inputs. ``points`` is not used: the run is one measurement, timed as a whole.

    Arrays: ``inputs_demo`` ``(10, 784)`` and ``labels_demo``, ``inputs_batch`` ``(N, 784)`` and
    ``labels_batch``, ``lanczos_eigenvalues`` and ``dense_eigenvalues`` ``(k_top,)``. Scalars:
    ``seconds_forward``, ``seconds_product``, ``seconds_lanczos``, ``seconds_materialise`` (the
    kernel from the per-example Jacobians, ``route="jacobians"``), ``seconds_structured`` (the same
    kernel by structured derivatives), ``seconds_eigensolver``; the counts of
    :func:`operation_counts`; those of :func:`lanczos_check`;
    ``layer_top_eigenvalues`` (a dict); ``n_inputs``, ``num_outputs``, ``kernel_dim`` (``NC``),
    ``num_params``, ``layer_sizes``; ``cpu_model``, ``cpu_count``."""
    import jax

    from ntkbook import data
    from ntkbook.models import mlp
    from ntkbook.ntk import eig, entk

    x_demo, y_demo = data.mnist_unit_norm(1, config.demo_seed)
    x_batch, y_batch = data.mnist_unit_norm(config.batch_n_per_class, config.batch_seed)
    k = config.k_top
    with jax.enable_x64(True):
        import jax.numpy as jnp

        sizes = (x_batch.shape[1], *config.hidden, NUM_CLASSES)
        params = mlp.init(jax.random.PRNGKey(config.weights_seed), sizes, dtype=jnp.float64)
        xb = jnp.asarray(x_batch, dtype=jnp.float64)
        op = entk.entk_matvec(mlp.apply, params, xb, reduction="flat")
        vec = jnp.asarray(np.random.default_rng(0).standard_normal(op.dim))
        forward = jax.jit(jax.vmap(mlp.apply, in_axes=(None, 0)))

        def materialise(route="jacobians"):  # J, then K = J J^T
            return entk.entk(mlp.apply, params, xb, reduction="flat", batch_size=10, precision=PRECISION,
                             route=route)

        seconds = {
            "seconds_forward": best_seconds(lambda: forward(params, xb), config.repeats),
            "seconds_product": best_seconds(lambda: op(vec), config.repeats),
            "seconds_lanczos": best_seconds(lambda: eig.lanczos_topk(op, op.dim, k).eigenvectors,
                                            config.repeats_slow),
            "seconds_materialise": best_seconds(materialise, config.repeats_slow),
            "seconds_structured": best_seconds(lambda: materialise("structured"), config.repeats_slow),
        }
        top = eig.lanczos_topk(op, op.dim, k)
        kernel = materialise()
        seconds["seconds_eigensolver"] = best_seconds(lambda: eig.dense_topk(kernel, k).eigenvalues,
                                                      config.repeats_slow)
        ref = eig.dense_topk(kernel, k)
        check = lanczos_check(top, ref, k)
        layer_tops = layer_top_eigenvalues(params, xb)
        num_params = int(sum(leaf.size for leaf in jax.tree.leaves(params)))
        arrays = {"lanczos_eigenvalues": np.asarray(top.eigenvalues),
                  "dense_eigenvalues": np.asarray(ref.eigenvalues)}

    n = int(x_batch.shape[0])
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays={"inputs_demo": x_demo, "labels_demo": y_demo, "inputs_batch": x_batch,
                "labels_batch": y_batch, **arrays},
        scalars={
            **seconds,
            **operation_counts(sizes, n, num_params, check["lanczos_products"]),
            **check,
            "layer_top_eigenvalues": layer_tops,
            "n_inputs": n,
            "num_outputs": NUM_CLASSES,
            "kernel_dim": int(op.dim),
            "num_params": num_params,
            "layer_sizes": list(sizes),
            "cpu_model": cpu_model(),
            "cpu_count": cpu_count(),
        },
    )
