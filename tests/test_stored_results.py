"""The committed paper-scale results: intact, traceable, and saying what the chapters say.

Every number the book prints at paper scale comes from an entry of ``results/``; here each entry
must pass its integrity check (content hashes), name the commit it was computed from, and the
entries the chapters load must be there (so a reader's build never recomputes them) and support
the chapters' statements (``gram_conditioning``, ``entk_convergence``, ``entk_cost``,
``lanczos_ghosts``, ``modular_mlp``; ``ntk_distance`` is checked for integrity only).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ntkbook import experiments
from ntkbook.experiments import modular_mlp
from ntkbook.store import Store

RESULTS = Path(__file__).resolve().parents[1] / "results"


def paper(name: str, **overrides):
    module = experiments.get(name)
    config = experiments.make_config(name, "paper", **overrides)
    store = Store(RESULTS, scale="paper")
    assert store.has(name, module.VERSION, config), (
        f"{name} {overrides or ''} is not stored in results/: the chapter would recompute it")
    return store.load(name, module.VERSION, config)


def test_every_entry_passes_its_integrity_check():
    """Every entry, the archived ones (retired experiments, ``results/archive``) too."""
    store = Store(RESULTS, scale="paper")
    rows, archived = store.list(), store.archive().list()
    assert rows, "no committed results"
    assert {r["name"] for r in archived} == {"gemma_features", "gemma_pos_data"}
    assert not {r["name"] for r in archived} & set(experiments.EXPERIMENTS), "an archived experiment is back"
    bad = [(r["name"], r["entry"], r.get("error")) for r in rows + archived if r["status"] != "ok"]
    assert not bad, bad


def test_every_entry_names_its_commit():
    """Entries saved by the current store carry a commit and clean code (or the loud mark of
    NTKBOOK_ALLOW_DIRTY); entries hashed after the fact keep what they recorded then."""
    for row in Store(RESULTS).list():
        entry = Store(RESULTS).entry_dir(row["name"], "x", {}).parent / row["entry"]
        import json

        meta = json.loads((entry / "result.json").read_text())
        prov = meta["provenance"]
        if meta["integrity"]["hashed"] == "at save":
            assert prov["git_commit"], entry
            assert prov["git_dirty"] is False or "WARNING" in prov, entry
        else:
            assert meta["integrity"]["hashed"].startswith("after the fact")
            assert "format 1 -> 2" in meta["migrations"][0]


def test_every_recorded_commit_is_in_the_history():
    """A result's commit must be one a reader can check out: an ancestor of the current HEAD
    (a commit lost by a rebase would make the provenance point nowhere)."""
    import json
    import subprocess

    repo = RESULTS.parent
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True)
    if git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout")
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("shallow clone: the history is incomplete")
    lost = []
    for js in sorted(RESULTS.glob("**/result.json")):  # the archived entries too
        commit = json.loads(js.read_text())["provenance"].get("git_commit")
        if commit and git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
            lost.append(f"{js.parent.relative_to(RESULTS)}: {commit}")
    assert not lost, f"results whose commit is not in the history: {lost}"


def test_gram_conditioning_statements():
    """Attention width chapter: G~ = G^3 on the verifiable block d <= d*, d* defined by
    kappa_d(G)^3 <= 1e12, the naive eigensolver blind beyond ~1/eps, ranks of the cube <= rank G."""
    r = paper("gram_conditioning")
    limit = r.config["verify_limit"]
    for name in r["datasets"]:
        s = r["per_dataset"][name]
        lam, lam_t = r[f"{name}/lam_G"], r[f"{name}/lam_Gt"]
        d_star = s["d_star"]
        kd = lam[0] / lam[: s["rank_G"]]
        assert kd[d_star - 1] ** 3 <= limit < kd[d_star] ** 3
        rel = np.abs(lam_t[:d_star] - lam[:d_star] ** 3) / lam[:d_star] ** 3
        assert rel.max() < 1e-7, (name, rel.max())
        for row in s["kappa_d"]:
            if row["d"] <= d_star:
                assert row["kappa_d_Gt_measured"] == pytest.approx(row["kappa_d_G_cubed"], rel=1e-8)
        assert s["rank_Gt"] <= s["rank_G"] and s["rank_Ghat"] <= s["rank_G"]
        # the naive eigensolver sees no further than ~1/eps (inf: a rounding-noise eigenvalue <= 0)
        naive = s["kappa_Gt_naive_eigh"]
        assert math.isinf(naive) or (naive < 1e4 / np.finfo(float).eps
                                     and s["kappa_Gt_measured"] > naive)
        assert (s["identity_rel_error"] < 1e-6) if s["verified_full"] else math.isnan(s["identity_rel_error"])
        # the ridge caps kappa at about 1 + 1/r (eq-ridge)
        for rr, k in zip(r["rel_ridges"], r[f"{name}/ridge_Gt"]):
            assert k <= (1 + 1 / rr) * (1 + 1e-12)


def test_entk_convergence_statements():
    """The eNTK approaches its limit like 1/sqrt(m): slopes near -1/2, the measured error below
    the root-mean-square prediction (Jensen) but close to it, errors falling with width."""
    r = paper("entk_convergence")
    assert -0.6 < r["slope_W"] < -0.4 and -0.6 < r["slope_all"] < -0.4
    assert 0.8 < r["ratio_to_prediction_W"] <= 1.0
    mean = r["err_W"].mean(axis=1)
    assert np.all(np.diff(mean) < 0)
    assert r["err_W_largest"] < r["err_W_smallest"] / 10
    assert np.all(r["err_all"].mean(axis=1) > mean)  # the read-out adds its own fluctuations


def test_entk_cost_statements():
    """The eNTK chapter reads its demonstration's inputs and its cost table from this entry (no
    data set at paper scale): unit-norm images, a product at most four forward passes of operations,
    Lanczos on the dense eigenpairs to round-off, and a Jacobian far larger than the kernel."""
    r = paper("entk_cost")
    assert r["inputs_demo"].shape == (10, 784) and r["inputs_batch"].shape == (r["n_inputs"], 784)
    for x in (r["inputs_demo"], r["inputs_batch"]):
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)
    assert 2 < r["flops_product"] / r["flops_forward"] <= 4
    assert r["lanczos_max_relative_error"] < 1e-12 and r["lanczos_max_relative_residual"] < 1e-12
    assert abs(r["lanczos_eigenspace_overlap"] - 1) < 1e-10
    assert r["bytes_jacobian"] > 100 * r["bytes_kernel"]
    assert sum(r["layer_top_eigenvalues"].values()) >= r["lanczos_eigenvalues"][0]
    assert r["cpu_model"] and r["cpu_count"] >= 1


def test_lanczos_ghosts_statements():
    """Plain Lanczos produces ghost copies; full re-orthogonalisation none, orthogonal to
    round-off, and the library's solver agrees."""
    r = paper("lanczos_ghosts")
    for op in ("synthetic", "entk"):
        assert r[f"{op}_plain_ghosts"] >= 5 and r[f"{op}_plain_library_ghosts"] >= 5
        assert r[f"{op}_reorth_ghosts"] == 0 and r[f"{op}_reorth_library_ghosts"] == 0
        assert r[f"{op}_reorth_max_orth"] < 1e-14 and r[f"{op}_plain_max_orth"] > 0.5
        assert r[f"{op}_reorth_library_topk_error"] < 1e-12
        assert r[f"{op}_plain_library_topk_error"] > 0.1
        assert 0 < r[f"{op}_first_ghost_step"] < r[f"{op}_plain_ritz"].shape[0]


def test_modular_mlp_larger_prime_engine_and_closed_form_runs_agree():
    """The book reads the larger prime through the engine; the run with the model's closed-form
    kernel, which it read before, agrees with it in every value to round-off."""
    from ntkbook.claims import modular_mlp as claims_mm
    from ntkbook.freshness import compare, flatten

    over = claims_mm.variants("paper")["larger_p"]
    engine = paper("modular_mlp", **over)
    closed = paper("modular_mlp", **{**over, "kernel": "closed_form"})
    assert engine.config["kernel"] == "engine" and closed.config["kernel"] == "closed_form"
    c = compare(flatten(closed.arrays, closed.scalars), flatten(engine.arrays, engine.scalars),
                {"rtol": 1e-10, "atol": 1e-12})
    assert c.agree and len(c.differences) > 100, [d for d in c.differences if not d.ok][:3]


@pytest.mark.parametrize("label", ["main", "relu", "larger_p"])
def test_modular_mlp_statements(label):
    """Every model trained and grokked; the first cliff has exactly 4 floor(p/2) eigenvalues at
    the end of training and spans the single-operand features; on the main preset the second
    cliff spans the sum/difference features and the kernel paths agree to round-off."""
    from ntkbook.claims import modular_mlp as claims_mm

    over = {} if label == "main" else claims_mm.variants("paper")[label]
    r = paper("modular_mlp", **over)
    modular_mlp.require_trained(r)
    p = r.config["p"]
    assert r["first_cliff_theory"] == 4 * (p // 2)
    assert np.all(r["cliff_sizes"][:, -1, 0] == 4 * (p // 2))
    for g in r["grokking"]:
        assert g["final_train_acc"] >= 0.99 and g["final_test_acc"] >= 0.99
        assert g["memorisation"] < g["test90"]
    table = r["alignment_final"]
    assert table["cliff1:a+b axes"]["mean"] > 0.9
    if label == "main":
        assert np.all(r["cliff_sizes"][:, -1, 1] == 4 * (p // 2))
        assert table["cliff2:sum"]["mean"] > 0.9 and table["cliff2:2a"]["mean"] < 0.05
        cc = r["crosscheck"]
        assert cc["engine_vs_closed_form_max_rel"] < 1e-12
        assert cc["eigenvalue_max_rel_error"] < 1e-10
        assert all(v == pytest.approx(1.0, abs=1e-10) for v in cc["subspace_overlap_fraction"].values())
