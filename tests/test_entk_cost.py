"""The cost experiment of the eNTK chapter (``entk_cost``) and the MLP it times
(``ntkbook.models.mlp``): the smoke run holds every key the chapter reads, its stored inputs are
the unit-norm images the chapter demonstrates on, its checks are right, and the MLP is the formula."""

import re
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ntkbook.book.report import source_code  # noqa: E402
from ntkbook.errors import InputError  # noqa: E402
from ntkbook import experiments  # noqa: E402
from ntkbook.experiments import entk_cost  # noqa: E402
from ntkbook.models import mlp  # noqa: E402
from ntkbook.store import Store  # noqa: E402

CHAPTER = Path(__file__).resolve().parents[1] / "book" / "entk_lanczos.md"


@pytest.fixture(scope="module")
def cost(data_dir):
    return experiments.load_or_run("entk_cost", "smoke")  # the smoke book's, when today's code made it


def test_the_result_holds_every_key_the_chapter_reads(cost):
    text = CHAPTER.read_text()
    keys = set(re.findall(r"""\bcost\[["']([^"']+)["']\]""", text))
    config_keys = set(re.findall(r"""\bcost\.config\[["']([^"']+)["']\]""", text))
    assert {"inputs_demo", "inputs_batch", "seconds_product", "lanczos_products"} <= keys
    assert not {k for k in keys if k not in cost.arrays and k not in cost.scalars}
    assert config_keys and config_keys <= set(cost.config)


def test_stored_inputs_are_unit_norm_images_of_each_digit(cost):
    cfg = entk_cost.Config.smoke()
    demo, batch = cost["inputs_demo"], cost["inputs_batch"]
    assert demo.shape == (10, 784) and batch.shape == (10 * cfg.batch_n_per_class, 784)
    np.testing.assert_allclose(np.linalg.norm(demo, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, rtol=1e-12)
    assert np.all(demo >= 0) and np.all(batch >= 0)  # pixels
    np.testing.assert_array_equal(np.sort(cost["labels_demo"]), np.arange(10))
    np.testing.assert_array_equal(np.bincount(cost["labels_batch"], minlength=10),
                                  np.full(10, cfg.batch_n_per_class))


def test_lanczos_agrees_with_the_dense_eigensolver(cost):
    k = entk_cost.Config.smoke().k_top
    assert cost["lanczos_products"] == 2 * k + 10
    assert cost["lanczos_max_relative_error"] < 1e-10
    assert cost["lanczos_max_relative_residual"] < 1e-10
    assert cost["lanczos_eigenspace_overlap"] == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(cost["lanczos_eigenvalues"], cost["dense_eigenvalues"], rtol=1e-10)
    layers = cost["layer_top_eigenvalues"]
    assert list(layers) == ["dense1", "dense2", "dense3"]
    # Weyl: the top of the sum is at most the sum of the tops, and at least each one's top
    top = float(cost["lanczos_eigenvalues"][0])
    assert max(layers.values()) <= top * (1 + 1e-10) <= sum(layers.values()) * (1 + 1e-10)


def test_the_counts_describe_the_network(cost):
    sizes = (784, 128, 128, 10)
    n, nc = cost["n_inputs"], cost["kernel_dim"]
    assert tuple(cost["layer_sizes"]) == sizes and nc == 10 * n
    assert cost["num_params"] == sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    assert cost["bytes_kernel"] == 8 * nc**2 and cost["bytes_jacobian"] == 8 * nc * cost["num_params"]
    assert cost["flops_lanczos"] == cost["lanczos_products"] * cost["flops_product"]
    assert cost["flops_structured"] < cost["flops_materialise"] and cost["bytes_factors"] < cost["bytes_jacobian"]
    assert isinstance(cost["cpu_model"], str) and cost["cpu_model"] and cost["cpu_count"] >= 1


def test_operation_counts_on_a_hand_case():
    # sizes (3, 4, 2), N = 5: weights 12 and 8
    c = entk_cost.operation_counts((3, 4, 2), 5, num_params=26, lanczos_products=7)
    assert c["flops_forward"] == 2 * 5 * (12 + 8)
    assert c["flops_product"] == 2 * 5 * (2 * 12 + 4 * 8)
    assert c["flops_lanczos"] == 7 * c["flops_product"]
    assert c["flops_materialise"] == 2 * 10**2 * 26
    assert c["flops_eigensolver"] == 10**3
    assert c["bytes_activations"] == 8 * 5 * 9
    assert c["bytes_vectors"] == 8 * 20 and c["bytes_lanczos_basis"] == 8 * 8 * 10
    assert c["bytes_jacobian"] == 8 * 10 * 26 and c["bytes_kernel"] == 8 * 100
    # structured, per pair: each layer's input Gram (3, 4) and its cotangents' and bias's (C^2 n_l)
    assert c["flops_structured"] == 2 * 5**2 * ((3 + 2 * 4 * 4) + (4 + 2 * 4 * 2))
    assert c["bytes_factors"] == 8 * 5 * ((3 + 2 * 2 * 4) + (4 + 2 * 2 * 2))


def test_the_result_round_trips_through_the_store(tmp_path, cost):
    store = Store(tmp_path)
    cfg = entk_cost.Config.smoke()
    store.save(cost, entk_cost.VERSION)
    back = store.load(entk_cost.NAME, entk_cost.VERSION, cfg)
    for key, value in cost.arrays.items():
        np.testing.assert_array_equal(back[key], value)
    assert back["layer_top_eigenvalues"] == pytest.approx(cost["layer_top_eigenvalues"])
    assert back["cpu_model"] == cost["cpu_model"] and back["layer_sizes"] == cost["layer_sizes"]


def test_mlp_is_the_ntk_parameterised_formula_on_a_hand_case():
    params = {"dense1": {"w": jnp.array([[1.0, 2.0], [-3.0, 1.0], [2.0, -2.0]]), "b": jnp.array([0.5, 0.0, -1.0])},
              "dense2": {"w": jnp.array([[1.0, -1.0, 2.0]]), "b": jnp.array([0.25])}}
    x = jnp.array([2.0, 1.0])
    # layer 1: W x / sqrt(2) + b = (4, -5, 2) / sqrt 2 + (0.5, 0, -1); relu keeps the first and last
    h = np.maximum(np.array([4.0, -5.0, 2.0]) / np.sqrt(2) + np.array([0.5, 0.0, -1.0]), 0.0)
    expected = (h[0] - h[1] + 2 * h[2]) / np.sqrt(3) + 0.25  # no relu after the last layer
    np.testing.assert_allclose(np.asarray(mlp.apply(params, x)), [expected], rtol=1e-14)


def test_mlp_init_and_layer_order():
    params = mlp.init(jax.random.PRNGKey(0), (5, 4, 3))
    assert list(params) == ["dense1", "dense2"]
    assert params["dense1"]["w"].shape == (4, 5) and params["dense2"]["w"].shape == (3, 4)
    assert params["dense1"]["w"].dtype == jnp.float64 and not np.any(np.asarray(params["dense2"]["b"]))
    # eleven layers: applied in the order dense1, dense2, ..., dense11 (not "dense10" < "dense2")
    deep = mlp.init(jax.random.PRNGKey(1), (3,) + (2,) * 11)
    x = jnp.array([1.0, -1.0, 0.5])
    h = x
    for i in range(1, 12):
        h = deep[f"dense{i}"]["w"] @ h / np.sqrt(h.shape[0])
        h = jax.nn.relu(h) if i < 11 else h
    np.testing.assert_allclose(np.asarray(mlp.apply(deep, x)), np.asarray(h), rtol=1e-13)
    for bad in ((5,), (5, 0), (5, 2.0)):
        with pytest.raises(InputError, match="layer sizes"):
            mlp.init(jax.random.PRNGKey(0), bad)


def test_source_code_is_a_fenced_python_block():
    text = source_code(mlp.init, mlp.apply)
    assert text.startswith("```python\ndef init(") and text.endswith("\n```")
    assert "\ndef apply(params, x):" in text
