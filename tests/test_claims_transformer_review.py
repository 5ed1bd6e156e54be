"""ntkbook.claims.modular_transformer (the per-tensor verdicts, seed records and chance levels the
transformer chapter shows), the "leading family" rule the chapter states, and the chapter's code
cells: no LaTeX command lost to a Python string escape."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from ntkbook.claims import modular_transformer as ct
from ntkbook.errors import InputError
from ntkbook.experiments import modular_transformer as mt
from ntkbook.ntk import features
from ntkbook.store import Result
from ntkbook.verdicts import DOES_NOT, PARTLY, REPRODUCES

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------
# the leading family, as the chapter defines it
# --------------------------------------------------------------------------------------------------
def _rows(*families, share=0.9):
    """Content rows (const, axis_sum, axis_diff, sum, diff, other) with ``share`` in each family."""
    names = mt.CONTENT_NAMES
    out = []
    for f in families:
        row = np.full(len(names), (1.0 - share) / (len(names) - 1))
        row[names.index(f)] = share
        out.append(row)
    return np.array(out)


def test_leading_family_is_the_order_not_the_window_weight():
    """K = 1 (2K = 2): the constant, two axis-sum modes, then two sum modes that hold more weight.
    The family holding most of the 4K + 1 = 5 window's weight is the sum; the family that comes
    first after the constant, the rule the chapter states and the code computes, is the axis sum."""
    c = np.concatenate([_rows("const"), _rows("axis_sum", "axis_sum", share=0.6),
                        _rows("sum", "sum", share=0.99)])
    window_weight = c[:5, 1:5].sum(axis=0)
    assert mt.CONTENT_NAMES[1 + int(np.argmax(window_weight))] == "sum"
    assert mt.leading_family(c, 2) == "axis_sum"
    # the constant mode is skipped wherever it sits
    assert mt.leading_family(c[[1, 0, 2, 3, 4]], 2) == "axis_sum"
    assert mt.leading_family(_rows("sum", "const", "sum", "axis_sum"), 2) == "sum"


def test_leading_family_does_not_count_other():
    """A tensor whose top eigenvectors are mostly "other" still gets a leading family (W_Q's case)."""
    c = _rows("other", "other", "other")
    c[:, mt.CONTENT_NAMES.index("sum")] += 0.01
    assert mt.leading_family(c, 2) == "sum"


# --------------------------------------------------------------------------------------------------
# the readings, on a synthetic result
# --------------------------------------------------------------------------------------------------
def _info(overlaps, leading, claim):
    info = {"overlaps": {"axis_sum": 0.0, "axis_diff": 0.0, "sum": 0.0, "diff": 0.0, **overlaps},
            "leading": leading, "window": 9}
    info["verdict"] = mt.claim_verdict(claim, info)
    return info


def _run(att, w_in, w_out, w_u, grokked=True, kf=(1, 12)):
    return {"grokking": {"grokked": grokked}, "key_frequencies": list(kf),
            "groups": {"W_in": _info(*w_in, "axis_sum"), "W_out": _info(*w_out, "sum"),
                       "W_U": _info(*w_u, "sum")},
            "blocks": {"attention": _info(*att, "axis_sum")}}


@pytest.fixture()
def synthetic():
    good = ({"axis_sum": 0.95}, "axis_sum")
    runs = {
        "replay": _run(good, good, ({"sum": 0.99, "axis_sum": 0.98}, "axis_sum"), ({"sum": 0.99}, "sum")),
        "seed=0": _run(good, ({"axis_sum": 0.80}, "axis_sum"), ({"sum": 0.95}, "axis_sum"),
                       ({"sum": 0.96}, "sum")),
        "seed=1": _run(good, good, ({"sum": 0.70}, "axis_sum"), ({"sum": 0.95}, "sum")),
        "seed=2": _run(good, good, ({"sum": 0.95}, "sum"), ({"sum": 0.95}, "sum")),
        "seed=3": _run(good, good, good, good, grokked=False),
    }
    return Result(name=mt.NAME, config={"p": 29}, scalars={
        "runs": list(runs), "main": "replay", "per_run": runs})


def test_alignment_cell_names_the_reason(synthetic):
    assert ct.alignment_cell(synthetic, "replay", "W_U", "sum") == "0.99 reproduces"
    assert ct.alignment_cell(synthetic, "replay", "W_out", "sum") == "0.99 partly (axis sum leads)"
    assert ct.alignment_cell(synthetic, "seed=0", "W_in", "axis_sum") == "0.80 partly"
    assert ct.alignment_cell(synthetic, "seed=1", "W_out", "sum") == "0.70 does not (axis sum leads)"
    assert ct.alignment_cell(synthetic, "seed=0", "attention", "axis_sum") == "0.95 reproduces"
    with pytest.raises(InputError, match="no tensor"):
        ct.member_info(synthetic, "replay", "W_X")


def test_shortfall_phrases(synthetic):
    assert ct.shortfall(synthetic, "replay", "W_U", "sum") == ""
    assert ct.shortfall(synthetic, "seed=0", "W_in", "axis_sum") == "holds only 0.80 of them"
    assert ct.shortfall(synthetic, "seed=0", "W_out", "sum") == "holds 0.95 of them but axis-sum modes lead"
    assert ct.shortfall(synthetic, "seed=1", "W_out", "sum") == "holds only 0.70 of them and axis-sum modes lead"


def test_seed_records_count_fresh_seeds_that_grok(synthetic):
    rec = ct.seed_records(synthetic)
    att, out = rec["B.tf.attn_axis_sum"], rec["B.tf.out_sum"]
    # the analysed run (replay) and the run that did not grok (seed=3) are not counted
    assert att.runs == out.runs == ("seed=0", "seed=1", "seed=2")
    assert att.held == ("seed=1", "seed=2") and att.failing == {"seed=0": ("W_in",)}
    assert out.held == ("seed=2",) and out.failing == {"seed=0": ("W_out",), "seed=1": ("W_out",)}
    assert synthetic["per_run"]["seed=1"]["groups"]["W_out"]["verdict"] == DOES_NOT
    assert synthetic["per_run"]["seed=0"]["groups"]["W_out"]["verdict"] == PARTLY


def test_window_chance_from_the_geometry(synthetic):
    p, k = 29, 9
    u, a = ct.window_chance(synthetic, "replay", "axis_sum")
    assert u == pytest.approx(k / p**2) and a == pytest.approx(k / (2 * p - 1))
    assert features.additive_chance(p, k, 4).mean / 4 == pytest.approx(a)
    u, a = ct.window_chance(synthetic, "replay", "sum")
    assert u == pytest.approx(k / p**2) and a == pytest.approx(0.0, abs=1e-12)
    # the difference features are orthogonal to the additive functions too; the axis difference is not
    assert ct.window_chance(synthetic, "replay", "diff")[1] == pytest.approx(0.0, abs=1e-12)
    assert ct.window_chance(synthetic, "replay", "axis_diff")[1] == pytest.approx(k / (2 * p - 1))


# --------------------------------------------------------------------------------------------------
# the stored paper-scale result: the readings agree with what the experiment stored and scored
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stored():
    from ntkbook.paths import results_dir
    from ntkbook.store import Store

    cfg = mt.Config.paper()
    store = Store(results_dir(), scale="paper")
    assert store.has(mt.NAME, mt.VERSION, cfg), f"{mt.NAME} is not stored in results/ at paper scale"
    return store.load(mt.NAME, mt.VERSION, cfg)


def test_stored_seed_records_are_the_scorecards(stored):
    rows = {r["claim"]: r for r in ct.modular_transformer_scorecard(stored)}
    for claim, rec in ct.seed_records(stored).items():
        assert f"holds in {len(rec.held)} of {len(rec.runs)} fresh seeds that grok" in rows[claim]["ours"]
        for run in rec.runs:
            verdicts = [ct.member_info(stored, run, m)["verdict"] for m in rec.members]
            assert (run in rec.held) == all(v == REPRODUCES for v in verdicts)


def test_stored_leading_families_follow_the_stated_rule(stored):
    """Every stored leading family is leading_family() of the stored content (the rule the chapter
    states), for every run and tensor."""
    pr = stored["per_run"]
    n = 0
    for run in stored["runs"]:
        if "groups" not in pr[run]:
            continue
        d = 2 * len(pr[run]["key_frequencies"])
        for name, info in pr[run]["groups"].items():
            content = np.asarray(stored[f"{run}/ml_content/{name}"])
            assert mt.leading_family(content, d) == info["leading"], (run, name)
            n += 1
    assert n >= 9


def test_stored_window_chance_matches_the_stored_levels(stored):
    for run in stored["runs"]:
        g = stored["per_run"][run].get("groups")
        if not g:
            continue
        u, a = ct.window_chance(stored, run, "axis_sum")
        assert u == pytest.approx(g["W_U"]["chance_uniform"], rel=1e-12)
        assert a == pytest.approx(g["W_U"]["chance_additive"], rel=1e-12)


# --------------------------------------------------------------------------------------------------
# the chapters' code cells: a non-raw string must not turn \text, \frac, \beta, ... into control
# characters (\t, \f, \b, \r, \a, \v) or a line break (\nabla, \neq, \nu)
# --------------------------------------------------------------------------------------------------
_CONTROL = "\t\b\f\r\a\v"
#: LaTeX commands that begin with n: "\\nabla" in a non-raw string is a line break and "abla"
_N_COMMANDS = ("nabla", "neq", "nu", "not", "ni", "newline", "nolimits")


def _code_cells(path: Path):
    text = path.read_text()
    for m in re.finditer(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S):
        src = m.group(1)
        if src.startswith("---\n"):  # a YAML block of cell options
            end = src.index("\n---\n", 4) + 5
            src = "\n" * src[:end].count("\n") + src[end:]
        lines = ["" if re.match(r"^:[a-z_-]+:", ln) or ln.startswith(("%", "!")) else ln
                 for ln in src.split("\n")]
        yield text[:m.start()].count("\n") + 2, "\n".join(lines)


def _escaped_latex(src: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            s = node.value
            if any(c in s for c in _CONTROL) or any(re.search("\n" + c[1:] + r"(?![a-z])", s) for c in _N_COMMANDS):
                found.append((node.lineno, s[:80]))
    return found


def test_escape_scan_finds_a_lost_latex_command():
    assert _escaped_latex('x = f"$d_{{\\text{{model}}}}$"')  # \t became a tab
    assert _escaped_latex('x = "$\\nabla f$"')
    assert not _escaped_latex('x = rf"$d_{{\\text{{model}}}}$"')
    assert not _escaped_latex('x = f"$d_{{\\\\text{{model}}}}$ and a paragraph\\n\\nMeasured"')


@pytest.mark.parametrize("path", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_no_latex_command_lost_to_a_string_escape(path):
    bad = [(line0 + ln - 1, s) for line0, src in _code_cells(path) for ln, s in _escaped_latex(src)]
    assert not bad, f"{path.name}: a non-raw string turned a LaTeX command into a control character: {bad}"


def test_scorecard_keeps_the_experiments_verdicts_and_completes_the_notes(stored):
    own = {r["claim"]: r for r in ct.modular_transformer_scorecard(stored)}
    ours = {r["claim"]: r for r in ct.scorecard({"modular_transformer": stored})}
    assert ours.keys() == own.keys() and ct.scorecard({}) == []
    for claim, row in ours.items():
        assert row["verdict"] == own[claim]["verdict"] and row["ours"] == own[claim]["ours"]
        assert row["note"].startswith(own[claim]["note"])
    assert "one run" in ours["B.tf.dynamics"]["note"] and "partly when" in ours["B.tf.dynamics"]["note"]
    assert "does not otherwise" in ours["B.tf.out_sum"]["note"]
    # the scorecard reads these rows: the experiment carries no scorecard() of its own
    from ntkbook.book import scorecard

    assert not hasattr(mt, "scorecard")
    collected = {r.claim.id: r for r in scorecard.collect(["modular_transformer"])}
    for claim, row in ours.items():
        assert (collected[claim].verdict, collected[claim].ours, collected[claim].note) == (
            row["verdict"], row["ours"], row["note"]), claim
