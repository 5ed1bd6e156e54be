"""Every experiment ``Config`` checks its fields when it is built (``ntkbook.validate``): the presets
and every stored entry's config pass; a bad value of any field is a ``ConfigError`` naming the
experiment and the field, before any compute (and, from the command line, one line and exit 2)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ntkbook import validate
from ntkbook.errors import ConfigError, NtkbookError
from ntkbook.experiments import EXPERIMENTS, get

ROOT = Path(__file__).resolve().parents[1]

#: experiment -> field -> bad values (each replaces the field of the smoke preset)
BAD = {
    "demo_sweep": {
        "sample_sizes": [(), (16,), (0, 16), (64, 16), (16, 16), (16.0, 64)],
        "repeats": [0, -3, 2.0, True],
        "seed": [-1, "0"],
    },
    "entk_convergence": {
        "n_per_class": [0],
        "widths": [(32,), (64, 32), (0, 32), (-32, 64)],
        "num_seeds": [0],
        "chunk": [0],
        "data_seed": [-1],
        "store_kernels_seed": [-1, 2, 32],
    },
    "entk_cost": {
        "demo_seed": [-1],
        "batch_n_per_class": [0, 1.0],
        "batch_seed": [-1],
        "hidden": [(), (0,), (128, -1), [128]],
        "weights_seed": [-1],
        "k_top": [0, 201],
        "repeats": [0],
        "repeats_slow": [0],
    },
    "gram_conditioning": {
        "datasets": [(), ("mnist", "mnist"), ("svhn",)],
        "n_per_class": [0],
        "seed": [-2],
        "ds": [(0, 10), (10, 10)],
        "rel_ridges": [(), (0.0,), (math.nan,), (-1e-3,)],
        "verify_limit": [1.0, math.inf, math.nan],
        "delta": [0.0, 1.0, math.nan],
        "cone_hyperplanes": [0, -5, 2.5],
    },
    "influence_recipe": {
        "task": ["mnist", "svhn"],
        "recipes": [(), ("paper", "paper"), ("sgd",)],
        "models": [(), ("relu", "relu"), ("cnn",)],
        "seeds": [(), (0, 0), (-1,)],
        "n_train": [0, 55],
        "n_test": [0, 45],
        "width": [0, 63, -2],
        "epochs": [0],
        "batch": [0],
    },
    "lanczos_ghosts": {
        "dim": [8, 0],
        "n_top": [0],
        "top": [0.0, math.inf],
        "ratio": [0.0, 1.0, 1.5],
        "bulk": [0.0, -1.0],
        "num_steps": [0, 4, 201],
        "entk_n_per_class": [0],
        "entk_width": [0],
        "entk_steps": [4, 81],
        "k": [0],
        "n_check": [0, 81],
        "ghost_rtol": [0.0, 1.0],
        "seed": [-1],
    },
    "gemma_pos_windows": {
        "n_per_class": [0],
        "context_len": [0],
        "per_story": [0],
        "gen_tokens": [0],
        "batch": [0],
        "seed": [-1],
    },
    "gemma_controls": {
        "n_per_class": [0, 5],
        "data_scale": ["big"],
        "data_n_per_class": [0],
        "layer": [-1],
        "k": [0],
        "random_draws": [0],
        "random_seed": [-1],
        "probe_cs": [(), (0.0,), (1.0, 1.0)],
        "inner_folds": [1],
        "folds": [1],
        "split_seed": [-1],
        "n_splits": [0],
        "min_support": [0],
        "min_words": [0],
        "max_top_share": [0.0, 1.5],
        "batch": [0],
    },
    "gemma_kernel_inputs": {
        "n_per_class": [0, 5],
        "data_scale": ["big"],
        "data_n_per_class": [0],
        "layer": [-1],
        "k": [0],
        "folds": [1],
        "split_seed": [-1],
        "n_splits": [0],
        "min_support": [0],
        "min_words": [0],
        "max_top_share": [0.0, 1.5],
        "batch": [0],
    },
    "gemma_bootstrap": {
        "n_per_class": [0, 5],
        "data_scale": ["big"],
        "data_n_per_class": [0],
        "layers": [(-1,)],
        "whole_layer_at": [(-2,)],
        "identity_contexts": [-1],
        "layer": [-1, 5],
        "n_boot": [1],
        "seed": [-1],
    },
    "gemma_reinit": {
        "n_per_class": [0, 5],
        "data_scale": ["big"],
        "data_n_per_class": [0],
        "layer": [-1],
        "k": [0],
        "lanczos_steps": [5],
        "seed": [-1],
        "chunk": [0],
        "pca_k": [0],
        "init_seed": [-1],
        "folds": [1],
        "split_seed": [-1],
        "n_splits": [0],
        "min_support": [0],
        "min_words": [0],
        "max_top_share": [0.0, 1.5],
    },
    "gemma_probe": {
        "n_per_class": [0, 5],
        "data_scale": ["big"],
        "data_n_per_class": [0],
        "layers": [(), (-1,), (16, 16)],
        "whole_layer_at": [(-2,), (3, 3)],
        "k": [0],
        "lanczos_steps": [5],
        "seed": [-1],
        "chunk": [0],
        "pca_k": [0],
        "folds": [1],
        "split_seed": [-1],
        "n_splits": [0],
        "min_support": [0],
        "min_words": [0],
        "max_top_share": [0.0, 1.5],
        "identity_contexts": [-1],
        "identity_layer": [-1],
    },
    "influence_malleability": {
        "tasks": [(), ("mnist",), ("mnist10", "mnist10")],
        "models": [(), ("mlp",), ("relu", "relu")],
        "seeds": [(), (-1,), (0, 0)],
        "attacks": [(), ("cw",), ("pgd", "pgd")],
        "n_train": [0, 105],
        "n_test": [0, 55],
        "width": [0, 63, -64],
        "epochs": [0],
        "lr": [0.0, -1e-2, math.inf, math.nan],
        "batch": [0],
        "l2": [-1e-3, math.nan],
        "lam": [0.0],
        "top_fraction": [0.0, 1.5],
        "eps": [0.0, 1.5],
        "pgd_steps": [0],
        "pgd_step_size": [0.0],
        "mim_steps": [0],
        "mim_decay": [-0.5],
        "attn_steps": [0],
        "interventions": [(), ("poison",), ("null", "null")],
        "ablation_tasks": [("cifar10",), ("mnist10", "mnist10")],
        "ablation_eps": [(0.0,), (2.0,), (0.1, 0.1)],
        "landscape_points": [1, 10],
        "landscape_2d_tasks": [("cifar10",)],
        "landscape_grid": [1, 8],
        "landscape_radius": [0.0],
        "hessian_steps": [0],
    },
    "influence_map": {
        "tasks": [(), ("mnist",), ("mnist_3v8", "mnist_3v8")],
        "models": [(), ("mlp",), ("relu", "relu")],
        "seeds": [(), (-1,), (0, 0)],
        "n_train": [0, 41],
        "n_test": [0, 41],
        "width": [0, 31, -32],
        "epochs": [0],
        "lr": [0.0, math.inf, math.nan],
        "batch": [0],
        "l2": [-1e-3, math.nan],
        "attn_steps": [0],
        "top_fraction": [0.0, 1.5],
        "eps": [(), (0.0,), (1.5,), (0.3, 0.03), (0.03, 0.03001)],
        "ridges": [(0.0,), (-1e-3,), (math.nan,), (1e-3, 1e-3)],
        "ridges_per_point": [(0.0,), (1e-3, 1e-3)],
        "attacks": [(), ("cw",), ("pgd", "pgd")],
        "pgd_steps": [0],
        "pgd_step_fraction": [0.0, math.inf],
        "pgd_restarts": [0],
        "mim_steps": [0],
        "mim_decay": [-0.5],
        "null_draws": [0, 1.5],
        "flip_tasks": [("mnist10",), ("mnist_3v8", "mnist_3v8")],
        "flip_eps": [(0.05,), (0.0,), (0.3, 0.03)],
        "flip_ridges": [(1e-2,), (0.0,)],
        "flip_ridges_per_point": [(1e-2,), (-1.0,)],
        "flip_steps": [0],
        "flip_step_fraction": [0.0],
        "flip_restarts": [0],
    },
    "influence_cifar_route": {
        "tasks": [(), ("cifar",), ("cifar10", "cifar10")],
        "models": [(), ("mlp",), ("relu", "relu")],
        "attack_models": [("mlp",), ("attn", "attn")],
        "seeds": [(), (-1,), (0, 0)],
        "n_train": [0, 45],
        "n_test": [0, 45],
        "width": [0, 31],
        "epochs": [0],
        "lr": [0.0, math.nan],
        "batch": [0],
        "l2": [-1e-3],
        "attn_steps": [0],
        "components": [0, 40, 2.5],
        "rel_ridge": [-1e-3, math.inf, math.nan],
        "kappa_rel_ridges": [(-1.0,), (1e-3, 1e-3), (1e-3, 0.0), [0.0]],
        "top_fraction": [0.0, 1.5],
        "eps": [(), (0.0,), (1.5,), (0.3, 0.03), (0.03, 0.03001)],
        "ridges": [(0.0,), (1e-3, 1e-3)],
        "ridges_per_point": [(-1e-3,), (1e-3, 1e-3)],
        "pgd_steps": [0],
        "pgd_step_fraction": [0.0, math.inf],
        "pgd_restarts": [0],
        "null_draws": [0, 1.5],
    },
    "influence_sharpness": {
        "tasks": [(), ("mnist",), ("mnist10", "mnist10")],
        "seeds": [(), (-1,), (0, 0)],
        "n_train": [0, 41],
        "width": [0, 31],
        "epochs": [0],
        "lr": [0.0, math.nan],
        "batch": [0],
        "l2": [-1e-3],
        "attn_steps": [0],
        "hessian_steps": [0],
        "curve_points": [1],
        "slice_points": [1, 10],
        "slice_radius": [0.0, math.inf],
        "slice_2d_tasks": [("cifar10",), ("mnist10", "mnist10")],
        "slice_grid": [1, 8],
    },
    "influence_width": {
        "tasks": [(), ("mnist",)],
        "models": [("mlp",)],
        "widths": [(), (15, 128), (128, 16), (16, 16)],
        "seeds": [(), (-1,), (0, 0)],
        "attacks": [("mim",), ()],
        "n_train": [0, 101],
        "n_test": [0, 99],
        "epochs": [0],
        "lr": [0.0],
        "l2": [-1.0],
        "batch": [0],
        "pgd_steps": [0],
        "pgd_step_size": [-0.01],
        "eps": [0.0],
        "lam": [-1e-3],
        "top_fraction": [0.0],
    },
    "influence_advtrain": {
        "tasks": [(), ("nope",)],
        "models": [(), ("mlp",)],
        "seeds": [(), (-3,)],
        "n_train": [0, 95],
        "n_test": [0, 5],
        "width": [0, 65],
        "epochs": [0],
        "lr": [0.0],
        "batch": [0],
        "l2": [-1.0],
        "eps": [(), 0.3, (0.0,), (0.3, 2.0), (0.3, 0.03), (0.03, 0.03), (0.03, 0.03001)],
        "pgd_train_steps": [0],
        "pgd_train_step_fraction": [0.0],
        "lam": [0.0],
        "top_fraction": [0.0],
        "pgd_steps": [0],
        "pgd_step_fraction": [0.0],
        "null_draws": [0],
    },
    "modular_mlp": {
        "p": [2, 21, 0],
        "width": [0],
        "activation": ["tanh"],
        "train_fraction": [0.0, 1.0],
        "lr": [0.0],
        "weight_decay": [-0.01],
        "epochs": [0],
        "snapshot_every": [0],
        "seeds": [(), (-1,), (0, 0)],
        "kernel": ["dense"],
        "n_eigvecs": [-1, 23**2 + 1],
        "crosscheck": [1],
        "crosscheck_k": [-1, 23**2 + 1],
    },
    "modular_transformer": {
        "p": [2],
        "d_model": [0],
        "n_heads": [0],
        "d_head": [0],
        "d_mlp": [0],
        "train_fraction": [0.0, 1.0],
        "lr": [0.0],
        "weight_decay": [-1.0],
        "batch_size": [0],
        "epochs": [0],
        "seeds": [(), (0, 0)],
        "dtype": ["float16"],
        "replay_epochs": [-1],
        "snapshot_every": [0],
        "key_threshold": [0.0, 1.5],
        "grok_level": [0.0, 1.5],
        "n_eigvecs": [0],
        "trace_kernels": ["yes"],
        "lanczos_k": [-1],
    },
    "ntk_distance": {
        "tasks": [(), ("nope",)],
        "models": [(), ("mlp",)],
        "seeds": [(), (-1,), (0, 0)],
        "n_train_per_class": [0],
        "n_test_per_class": [0],
        "widths": [(), (15,), (256, 16)],
        "lr": [0.0, math.nan],
        "snapshots": [(), (-1, 10), (10, 0)],
        "adam_tasks": [(), ("fmnist_shirt_v_tshirt", "nope")],
        "adam_widths": [(), (16, 17)],
        "adam_epochs": [-1],
        "adam_lr": [0.0],
        "adam_batch": [0],
        "adam_l2": [-1.0],
        "lr_rules": [("sqrt",), ("constant", "constant")],
        "lr_ref_width": [0],
        "adam_width_caps": [(("nope", 64),), (("mnist_3v8", 0),), (("mnist_3v8", 64), ("mnist_3v8", 128))],
        "scaled_lr_tasks": [("fmnist_shirt_v_tshirt",)],
        "scaled_lr_widths": [(16, 15), (256, 16)],
        "wide_models": [("mlp",)],
        "gd_wide_tasks": [("nope",)],
        "adam_wide_tasks": [("fmnist_shirt_v_tshirt",)],
        "adam_wide_widths": [(8191,)],
        "budget_width": [0, 63],
        "budget_epochs": [(), (0, 20), (80, 20)],
        "budget_l2": [(-1e-3,), (0.0, 0.0)],
        "budget_models": [("mlp",)],
        "n_hyperplanes": [0],
        "train_dtype": ["float16"],
    },
    "ntk_distance_fullbatch": {
        "task": ["mnist10"],
        "models": [(), ("relu", "mlp")],
        "widths": [(), (15,), (64, 16)],
        "seeds": [(), (-1,)],
        "steps": [0],
        "lr": [0.0, math.inf],
        "l2": [-1.0],
        "base": ["huge"],
    },
}

CASES = [(name, field, value) for name, fields in BAD.items() for field, values in fields.items()
         for value in values]


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_presets_validate(name):
    module = get(name)
    for preset in (module.Config.smoke(), module.Config.paper()):
        dataclasses.replace(preset)  # __post_init__ runs again, and passes


def test_every_field_of_every_experiment_has_bad_values_in_the_table():
    assert set(BAD) == set(EXPERIMENTS)
    missing = [f"{name}.{f.name}" for name in EXPERIMENTS
               for f in dataclasses.fields(get(name).Config) if f.name not in BAD[name]]
    assert not missing, f"fields without a bad value to refuse: {missing}"


@pytest.mark.parametrize("name,field,value", CASES,
                         ids=[f"{n}.{f}={v!r}" for n, f, v in CASES])
def test_a_bad_value_is_a_config_error_naming_the_field(name, field, value):
    smoke = get(name).Config.smoke()
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(smoke, **{field: value})
    message = str(info.value)
    assert message.startswith(f"{name}.{field}"), message
    assert "must be" in message and "got" in message, message


#: (experiment, field, bad value, the field the message names): rules that tie two fields
RELATIONS = [
    ("lanczos_ghosts", "k", 61, "num_steps"),
    ("lanczos_ghosts", "dim", 59, "num_steps"),
    ("lanczos_ghosts", "entk_n_per_class", 4, "entk_steps"),
    ("gemma_probe", "data_n_per_class", 3, "n_per_class"),
    ("gemma_probe", "k", 11, "lanczos_steps"),
    ("entk_convergence", "num_seeds", 1, None),  # smoke keeps kernels of seed 0: fine
    ("modular_mlp", "p", 3, "n_eigvecs"),
    ("modular_transformer", "d_model", 32, "replay_epochs"),
    ("ntk_distance", "tasks", ("mnist_3v8",), "adam_tasks"),
    ("ntk_distance", "models", ("relu",), "wide_models"),
    ("influence_malleability", "tasks", ("mnist_3v8",), "ablation_tasks"),
    ("influence_map", "tasks", ("mnist10",), "flip_tasks"),
    ("influence_sharpness", "tasks", ("mnist_3v8",), "slice_2d_tasks"),
    ("influence_map", "eps", (0.03,), "flip_eps"),
    ("influence_map", "ridges", (1e-2,), "flip_ridges"),
    ("influence_map", "ridges_per_point", (), "flip_ridges_per_point"),
    ("influence_cifar_route", "models", ("relu",), "attack_models"),
]


@pytest.mark.parametrize("name,field,value,named", RELATIONS)
def test_a_value_that_breaks_a_rule_between_fields_names_the_other_field(name, field, value, named):
    smoke = get(name).Config.smoke()
    if named is None:
        dataclasses.replace(smoke, **{field: value})
        return
    with pytest.raises(ConfigError, match=rf"^{name}\.{named}\b"):
        dataclasses.replace(smoke, **{field: value})


def test_the_message_names_the_rule_and_the_value():
    from ntkbook.experiments import demo_sweep

    with pytest.raises(ConfigError, match=r"^demo_sweep\.repeats must be an integer >= 1 \(.*\); got 0$"):
        demo_sweep.Config(repeats=0)
    with pytest.raises(ConfigError, match=r"^demo_sweep\.sample_sizes\[1\] must be an integer >= 1; got -16$"):
        demo_sweep.Config(sample_sizes=(16, -16))


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def test_every_stored_entry_config_validates():
    """The configs of the stored results (what the chapters load) are all valid."""
    files = sorted((ROOT / "results").glob("*/*/result.json"))
    assert files
    for path in files:
        entry = json.loads(path.read_text())
        get(entry["name"]).Config(**{k: _tuples(v) for k, v in entry["config"].items()})


def test_rule_helpers():
    validate.int_at_least("e", "f", 2, 2)
    validate.fraction("e", "f", 1.0, high_closed=True)
    validate.number_in("e", "f", 0.0, 0.0, 1.0, low_closed=True)
    validate.all_in("e", "f", ("a",), ("a", "b"))
    for call in (lambda: validate.positive_int("e", "f", True),
                 lambda: validate.positive_int("e", "f", 1.0),
                 lambda: validate.finite_positive("e", "f", True),
                 lambda: validate.finite_positive("e", "f", math.nan),
                 lambda: validate.fraction("e", "f", 1.0),
                 lambda: validate.even_positive_int("e", "f", 0),
                 lambda: validate.odd_at_least("e", "f", 4, 3),
                 lambda: validate.int_in("e", "f", 5, 1, 4),
                 lambda: validate.non_empty("e", "f", []),
                 lambda: validate.increasing("e", "f", (1, 1)),
                 lambda: validate.each(validate.positive_int, "e", "f", [1])):
        with pytest.raises(ConfigError, match=r"^e\.f"):
            call()
    assert issubclass(ConfigError, NtkbookError) and issubclass(ConfigError, ValueError)


def test_cli_refuses_a_bad_override_in_one_line_and_stores_nothing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "ntkbook", "run", "demo_sweep", "--set", "repeats=0",
                           "--results", str(results)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "demo_sweep.repeats must be an integer >= 1" in lines[0] and "got 0" in lines[0]
    assert not results.exists() or not any(results.rglob("*"))
