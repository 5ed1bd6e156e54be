"""benchmarks/bench_author.py without torch: arguments, the lower bound on the author's memory, the
weight export, the kernel agreement, the table, and a clear message when the torch environment is
missing.  (The timings themselves are the benchmark's business, never a test's.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ba():
    path = REPO / "benchmarks" / "bench_author.py"
    spec = importlib.util.spec_from_file_location("bench_author", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_author"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_arguments(ba):
    a = ba.parse_args([])
    assert (a.quick, a.repeat, a.mem_limit_gb, a.child) == (False, 3, 16.0, None)
    assert ba.parse_args(["--quick"]).repeat == 2
    assert ba.parse_args(["--quick", "--repeat", "5"]).repeat == 5
    for bad in (["--repeat", "0"], ["--mem-limit-gb", "0"], ["--mem-limit-gb", "-1"]):
        with pytest.raises(SystemExit):
            ba.parse_args(bad)


def test_cases_are_the_issues_table(ba):
    full = [(c.model, c.n, c.route, c.tensors) for c in ba.cases(False)]
    assert full == [("transformer", 100, "mean_logit", "all"), ("transformer", 841, "mean_logit", "all"),
                    ("transformer", 841, "mean_logit", "W_U"), ("mlp", 400, "pairs", "all"),
                    ("mlp", 841, "diag", "all")]
    quick = [(c.model, c.n) for c in ba.cases(True)]
    assert quick == [("transformer", 100), ("transformer", 841), ("transformer", 841), ("mlp", 100),
                     ("mlp", 200)]


def test_subset(ba):
    assert np.array_equal(ba.subset(841, 841), np.arange(841))
    assert np.array_equal(ba.subset(841, 5000), np.arange(841))
    s = ba.subset(841, 100)
    assert len(s) == 100 and len(set(s)) == 100 and np.all(np.diff(s) > 0) and s.max() < 841
    assert np.array_equal(s, ba.subset(841, 100))
    assert not np.array_equal(s, ba.subset(841, 100, seed=1))


def _transformer_weights():
    from ntkbook.models import transformer

    return {k: np.zeros(s) for k, s in transformer.param_shapes(transformer.Shape()).items()}


def test_author_memory_lower_bound(ba):
    w = _transformer_weights()
    P = sum(v.size for v in w.values())
    N, C = 841, 30
    all9 = ba.Case("t", "transformer", N, "mean_logit")
    assert ba.author_min_bytes(all9, w) == 4 * (2 * N * C * P + 9 * N * N * C * C)
    assert ba.author_min_bytes(all9, w) > 16 * 2**30  # the issue's row that does not fit
    wu = ba.Case("t", "transformer", N, "mean_logit", "W_U")
    assert ba.author_min_bytes(wu, w) == 4 * (2 * N * C * w["W_U"].size + N * N * C * C)
    mlp = {"W1": np.zeros((512, 58)), "W2": np.zeros((29, 512))}
    pairs = ba.Case("m", "mlp", 400, "pairs")
    assert ba.author_min_bytes(pairs, mlp) == 4 * (2 * 400 * 29 * 44544 + 2 * 400 * 400 * 29 * 29)
    diag = ba.Case("m", "mlp", 841, "diag")
    assert ba.author_min_bytes(diag, mlp) == 4 * (841 * 29 * 44544 + 841 * 841)


def test_export_inputs_round_trip(ba, tmp_path):
    from ntkbook.models import transformer

    w = {k: np.random.default_rng(0).normal(size=v.shape).astype(np.float32)
         for k, v in _transformer_weights().items()}
    x = transformer.dataset(29)[0][ba.subset(841, 10)]
    path = tmp_path / "in.npz"
    ba.export_inputs(path, w, x)
    with np.load(path) as z:
        assert sorted(z.files) == sorted([*w, "x"])
        assert np.array_equal(z["x"], x) and z["x"].dtype == np.int64
        for k, v in w.items():
            assert z[k].dtype == np.float64 and np.array_equal(z[k], v.astype(np.float64))
    with pytest.raises(ValueError, match="'x'"):
        ba.export_inputs(tmp_path / "bad.npz", {"x": np.ones(2)}, x)


def test_model_inputs(ba):
    x = ba.model_inputs("mlp", 841)
    assert x.shape == (841, 58) and np.all(x.sum(axis=1) == 2)
    t = ba.model_inputs("transformer", 100)
    assert t.shape == (100, 3) and np.all(t[:, 2] == 29)
    assert np.array_equal(t[:, 0] * 29 + t[:, 1], ba.subset(841, 100))


def test_rel_frobenius(ba):
    ref = {"a": np.array([[3.0, 0.0], [0.0, 4.0]]), "b": np.eye(2)}
    assert ba.rel_frobenius(ref, ref) == 0.0
    ks = {"a": ref["a"] * (1 + 1e-3), "b": ref["b"] + np.array([[0.0, 0.1], [0.0, 0.0]])}
    assert ba.rel_frobenius(ks, ref) == pytest.approx(0.1 / np.sqrt(2))  # the worst of the two
    with pytest.raises(ValueError, match="differ"):
        ba.rel_frobenius({"a": ref["a"]}, ref)


def test_table(ba):
    ran = ba.RowResult(ba.Case("MLP diag", "mlp", 841, "diag"), author_times=[10.0, 12.0, 11.0],
                       f64_times=[40.0, 48.0, 44.0], f32_times=[5.0, 6.0, 5.5], err_author=2.5e-7,
                       err_f32=9e-7, rss={"author": 9 * 2**30, "f64": 3 * 2**30, "f32": 6 * 2**30})
    oom = ba.RowResult(ba.Case("TF all", "transformer", 841, "mean_logit"),
                       author_status="does not fit in 16 GiB (its arrays alone: 31.0 GiB)",
                       f64_times=[0.5, 0.6], f32_times=[0.2, 0.3], err_f32=1e-6,
                       rss={"f64": 2**30, "f32": 2**30})
    lines = ba.format_table([ran, oom]).splitlines()
    assert len(lines) == 4 and lines[0] == ba.HEADER
    assert {line.count("|") for line in lines} == {lines[0].count("|")}
    assert lines[2] == ("| MLP diag | 841 | 10 / 11 (±5%) | 40 / 44 (±5%) | 5 / 5.5 (±5%) "
                        "| 0.25 [0.25, 0.25] | 2 [2, 2] | 2.5e-07, 9.0e-07 | 9.0, 3.0, 6.0 |")
    assert lines[3].startswith("| TF all | 841 | does not fit in 16 GiB (its arrays alone: 31.0 GiB) ")
    assert "| - | - | -, 1.0e-06 | -, 1.0, 1.0 |" in lines[3]


def test_missing_torch_env_is_a_clear_message(ba, tmp_path):
    with pytest.raises(SystemExit) as e:
        ba.main(["--torch-python", str(tmp_path / "nope" / "python")])
    msg = str(e.value)
    assert "does not exist" in msg and "setup_torch_env.sh" in msg


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="needs an interpreter without torch: this one has it")
def test_python_without_torch_is_a_clear_message(ba):
    with pytest.raises(SystemExit) as e:
        ba.main(["--torch-python", sys.executable])
    msg = str(e.value)
    assert "cannot import torch" in msg and "setup_torch_env.sh" in msg


def test_author_memory_lower_bound_of_his_own_code(ba):
    """His own code differentiates every tensor whichever kernels are kept: the W_U row costs, in his
    code, what all nine cost."""
    w = _transformer_weights()
    wu = ba.Case("t", "transformer", 841, "mean_logit", "W_U")
    all9 = ba.Case("t", "transformer", 841, "mean_logit")
    assert ba.author_min_bytes(wu, w, verbatim=True) == ba.author_min_bytes(all9, w)
    assert ba.author_min_bytes(wu, w, verbatim=True) > ba.author_min_bytes(wu, w)


def test_table_headers_name_both_sides(ba):
    assert ba.format_table([]).splitlines()[0] == ba.HEADER
    head = ba.format_table([], "jacobians", verbatim=True).splitlines()[0]
    assert "ours f64, route=jacobians (s)" in head and "author's own code" in head and "chapter's call" not in head
    assert ba.author_side(None).startswith("the re-implementation")


def test_author_code_without_his_files_is_a_clear_message(ba, tmp_path, monkeypatch):
    monkeypatch.setattr(ba, "check_torch_env", lambda python: "2.13.0+cpu")
    with pytest.raises(SystemExit) as e:
        ba.main(["--author-code", str(tmp_path)])
    assert "no ntk.py" in str(e.value) and "jylin04/mi-ntk" in str(e.value)
    with pytest.raises(SystemExit):
        ba.parse_args(["--ours-route", "fast"])


@pytest.mark.parametrize("case", [("mlp", 12, "diag", "all"), ("transformer", 8, "mean_logit", "W_U")])
def test_every_ours_route_gives_the_chapters_kernels(ba, case):
    """``--ours-route jacobians``/``structured`` time the same kernels as the chapters' engine calls
    (float64), and the calls they print name the route. (All nine transformer tensors take the same
    path as W_U, a loop over the names; the routes are checked on every model in
    tests/test_structured.py.)"""
    import jax

    case = ba.Case("c", *case)
    w, x = ba.model_weights(case.model), ba.model_inputs(case.model, case.n)
    with jax.enable_x64(True):
        engine = ba.ours_kernels(case, "f64", w, x)
        for route in ("jacobians", "structured"):
            other = ba.ours_kernels(case, "f64", w, x, route)
            assert sorted(other) == sorted(engine)
            assert ba.rel_frobenius(other, engine) < 1e-12
            assert f'route="{route}"' in ba.ours_call(case, "f64", route)
    assert "route" not in ba.ours_call(case, "f64")
