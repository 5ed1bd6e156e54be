"""Key numbers of the chapters' experiments at smoke scale, against what theory fixes.

- attention width (``gram_conditioning``): the Gram matrix of linear attention is the cube of the
  input Gram matrix, ``G~ = G^3``, so on the leading block that float64 resolves
  (``d <= d*``) every eigenvalue of ``G~`` is the cube of one of ``G`` to round-off, and
  ``kappa_d(G~) = kappa_d(G)^3``; ``d*`` is the largest ``d`` with ``kappa_d(G)^3 <= 1e12``.
- modular addition (``modular_mlp``): the first cliff of the class-mean eNTK has exactly
  ``4 floor(p/2)`` eigenvalues after the constant mode, at initialisation and after training; the
  network trains (fits its training set) and generalises (grokking); the generic eNTK engine
  agrees with the closed form to round-off and Lanczos with dense ``eigh``.

(``entk_convergence`` and ``lanczos_ghosts`` are asserted in test_entk_chapter_experiments.py,
``demo_sweep`` in test_store.py.)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.experiments import gram_conditioning, modular_mlp
from ntkbook.ntk import gram


@pytest.fixture(scope="module")
def gram_result(data_dir):
    return experiments.load_or_run("gram_conditioning", "smoke")  # the smoke book's, when today's code made it


@pytest.fixture(scope="module")
def modular():
    # the smoke model (p = 23, width 128, 200 epochs), one seed, kernels at the start and the end
    config = dataclasses.replace(modular_mlp.Config.smoke(), seeds=(0,), snapshot_every=200)
    return modular_mlp.run(config)


def test_attention_gram_is_the_cube(gram_result):
    cfg = gram_conditioning.Config.smoke()
    for name in gram_result["datasets"]:
        s = gram_result["per_dataset"][name]
        lam, lam_t = gram_result[f"{name}/lam_G"], gram_result[f"{name}/lam_Gt"]
        d_star = s["d_star"]
        assert d_star >= 10
        # d* is the largest d with kappa_d(G)^3 <= the verification limit
        kd = lam[0] / lam[: s["rank_G"]]
        assert kd[d_star - 1] ** 3 <= cfg.verify_limit
        assert d_star == s["rank_G"] or kd[d_star] ** 3 > cfg.verify_limit
        # eigenvalue by eigenvalue, G~ = G^3 to round-off on the resolved block
        rel = np.abs(lam_t[:d_star] - lam[:d_star] ** 3) / lam[:d_star] ** 3
        assert rel.max() < 1e-8, (name, rel.max())
        for row in s["kappa_d"]:
            if row["d"] <= d_star:
                assert row["kappa_d_Gt_measured"] == pytest.approx(row["kappa_d_G"] ** 3, rel=1e-8)
        assert s["rank_Gt"] <= s["rank_G"]
        if s["verified_full"]:
            assert s["identity_rel_error"] < 1e-6
        else:
            assert math.isnan(s["identity_rel_error"])
        # the naive eigensolver of the formed cube cannot see beyond about 1/eps
        assert s["kappa_Gt_naive_eigh"] < 1e3 / gram.EPS or math.isinf(s["kappa_Gt_naive_eigh"])


def test_attention_narrows_the_cone_and_centring_reopens_it(gram_result):
    # row-normalised attention outputs lie in a narrower cone than the row-normalised images (the
    # cube concentrates them on the top direction), and mean-centring A before normalising opens it
    for name in gram_result["datasets"]:
        cone = gram_result["per_dataset"][name]["cone"]
        assert set(cone) == {"raw", "attention", "attention_centred"}
        assert cone["attention"]["median_angle"] < cone["raw"]["median_angle"], name
        assert cone["attention"]["cut_fraction"] < cone["raw"]["cut_fraction"], name
        assert cone["attention_centred"]["median_angle"] > cone["attention"]["median_angle"], name
        assert cone["attention_centred"]["cut_fraction"] > cone["attention"]["cut_fraction"], name
        q = gram_result[f"{name}/angle_quantiles_attention"]
        assert q.shape == (101,) and np.all(np.diff(q) >= 0)
        assert q[50] == pytest.approx(cone["attention"]["median_angle"])


def test_first_cliff_is_four_floor_half_p(modular):
    p = modular.config["p"]
    assert modular["first_cliff_theory"] == 4 * (p // 2) == 44
    sizes = modular["cliff_sizes"][:, :, 0]  # (seeds, snapshots)
    assert sizes.tolist() == [[4 * (p // 2)] * 2]
    # the constant mode sits above the cliff, at every snapshot
    assert np.all(modular["constant_index"] == 0)
    assert np.all(modular["constant_weight"] > 0.9)
    # the first cliff lies mostly in the single-operand Fourier features, far above the chance
    # level k/N of a random 44-dimensional subspace (0.95 at initialisation, 0.92 after training
    # at smoke scale; width 128 is far from the infinite-width kernel, so not exactly 1)
    ov = modular["overlaps"][0, :, modular["overlap_names"].index("cliff1:a+b axes")]
    chance = 4 * (p // 2) / p**2
    assert np.all(ov > 0.8) and np.all(ov > 8 * chance)


def test_modular_model_trains_and_groks(modular):
    modular_mlp.require_trained(modular)
    rec = modular["training"]
    assert rec["all_trained"] and rec["models"][0]["final_train_acc"] >= 0.99
    grok = modular["grokking"][0]
    assert grok["final_test_acc"] >= 0.9  # generalises, not only memorises
    assert grok["memorisation"] < grok["test90"]  # and later than it memorises


def test_modular_kernel_paths_agree(modular):
    cc = modular["crosscheck"]
    assert cc["engine_vs_closed_form_max_rel"] < 1e-12
    assert cc["used_vs_engine_eig_max_rel"] < 1e-10
    assert cc["eigenvalue_max_rel_error"] < 1e-8
    assert all(v == pytest.approx(1.0, abs=1e-8) for v in cc["subspace_overlap_fraction"].values())
