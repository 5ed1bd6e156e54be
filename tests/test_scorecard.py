"""The reproduction scorecard and the provenance line: every catalogued claim gets exactly one row,
verdicts come from the ``scorecard`` functions of :mod:`ntkbook.claims`, bad rows give clear errors,
and links point only to labels that exist."""

from __future__ import annotations

import dataclasses

import pytest

from ntkbook.verdicts import VERDICTS
from ntkbook.book import report, scorecard
from ntkbook.store import Result

# the claim ids fixed for every helper (COMMON.md)
FIXED_IDS = {
    "B.mlp.grokking", "B.mlp.first_cliff", "B.mlp.second_cliff_sum", "B.mlp.second_cliff_diff",
    "B.mlp.dynamics", "B.lanczos", "B.tf.grokking", "B.tf.key_freqs", "B.tf.attn_axis_sum",
    "B.tf.out_sum", "B.tf.replay", "B.tf.dynamics", "B.gemma.spectrum_identity", "B.gemma.pos_vs_pca",
    "B.gemma.morph_vs_pca", "B.gemma.top_contexts", "A.gram_cube", "A.kappa", "A.width_bound",
    "A.distance.relu", "A.distance.attn", "A.flip.mnist10", "A.flip.cifar10", "A.flip.mnist38",
    "A.flip.cifar_auto_air", "A.flip.ratio", "A.advtrain", "A.landscape",
}


def test_catalogue_has_every_fixed_claim_once():
    ids = [c.id for c in scorecard.CATALOGUE]
    assert len(ids) == len(set(ids))
    assert FIXED_IDS <= set(ids)
    for c in scorecard.CATALOGUE:
        assert c.paper in ("A", "B", "background") and c.claim and c.reported and c.chapter


def test_section_label_rule():
    assert scorecard.section_label("B.mlp.first_cliff") == "sec-b-mlp-first-cliff"
    assert scorecard.section_label("A.flip.cifar_auto_air") == "sec-a-flip-cifar-auto-air"


def _result(name="modular_mlp"):
    return Result(name=name, config={}, provenance={"device": "cpu", "date": "2026-11-30T00:00:00"})


def test_rows_join_and_default_to_not_measured():
    r = _result()
    rows = scorecard.rows_from([
        (r, [{"claim": "B.lanczos", "ours": "x", "verdict": "reproduces", "note": "a"}]),
        (_result("lanczos_ghosts"), [{"claim": "B.lanczos", "ours": "y", "verdict": "partly"}]),
    ])
    assert len(rows) == len(scorecard.CATALOGUE)
    by_id = {row.claim.id: row for row in rows}
    assert by_id["B.lanczos"].verdict == "partly" and by_id["B.lanczos"].ours == "x; y"
    assert by_id["B.mlp.grokking"].verdict == scorecard.NOT_MEASURED
    counts = scorecard.verdict_counts(rows)
    assert sum(counts.values()) == len(rows) and counts["partly"] == 1


@pytest.mark.parametrize("bad, match", [
    ({"claim": "B.nope", "ours": "1", "verdict": "reproduces"}, "unknown claim id"),
    ({"claim": "B.lanczos", "ours": "1", "verdict": "maybe"}, "verdict of B.lanczos"),
    ({"claim": "B.lanczos", "verdict": "partly"}, "needs 'claim', 'ours', 'verdict'"),
])
def test_bad_rows_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        scorecard._check([bad], "mod")


def test_markdown_links_only_existing_labels():
    rows = scorecard.rows_from([])
    md = scorecard.markdown(rows, labels={"sec-b-mlp-grokking"})
    assert "{ref}`B.mlp.grokking <sec-b-mlp-grokking>`" in md
    assert "<sec-b-lanczos>" not in md and "**B.lanczos**" in md
    # in the table, in the title of the claim's details and in its body
    assert md.count("not yet measured") == 3 * len(scorecard.CATALOGUE)


def test_markdown_is_a_compact_table_then_one_dropdown_per_claim():
    r = _result()
    rows = scorecard.rows_from([(r, [{"claim": "B.lanczos", "ours": "top 5 (a; b); top 121",
                                      "verdict": "partly", "note": "reproduces when x >= 3."}])])
    md = scorecard.markdown(rows, labels={"sec-b-lanczos"})
    table = md[:md.index("````")]
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    # header, rule, one row per claim, three cells each: claim -> verdict -> section
    assert len(lines) == 2 + len(scorecard.CATALOGUE)
    assert all(ln.count(" | ") == 2 for ln in lines if not ln.startswith("|---"))
    row = next(ln for ln in lines if "B.lanczos" in ln)
    assert "<sc-b-lanczos>" in row and "**partly**" in row and "<sec-b-lanczos>" in row
    assert "top 121" not in table  # the numbers are in the details, not in the table
    assert md.count("````{dropdown}") == len(scorecard.CATALOGUE)
    card = md[md.index("````{dropdown} B.lanczos"):]
    card = card[:card.index("````", 5) + 4]
    assert ":name: sc-b-lanczos" in card
    # the parts of "ours" one per line (not split inside parentheses), the rule stated once, typeset
    assert "- top 5 (a; b)\n- top 121" in card
    assert "**Verdict: partly** (threshold to reproduce: x ≥ 3)." in card
    assert "reproduces when" not in card
    assert "`modular_mlp`" in card


def test_joined_rows_leave_no_stray_punctuation():
    r = _result()
    rows = scorecard.rows_from([
        (r, [{"claim": "B.lanczos", "ours": "x.", "verdict": "partly", "note": "decreasing / decreasing."}]),
        (_result("lanczos_ghosts"), [{"claim": "B.lanczos", "ours": "y", "verdict": "partly", "note": "more."}])])
    row = {x.claim.id: x for x in rows}["B.lanczos"]
    assert row.note == "decreasing / decreasing; more." and row.ours == "x; y"
    assert ".;" not in scorecard.markdown(rows, labels=set())


def test_joined_rows_state_a_shared_rule_once():
    rule = "reproduces when ε ≤ 10⁻³ within 3k products; partly when only more products reach it"
    rows = scorecard.rows_from([
        (_result(), [{"claim": "B.lanczos", "ours": "x", "verdict": "partly", "note": f"{rule}; one start vector"}]),
        (_result("lanczos_ghosts"), [{"claim": "B.lanczos", "ours": "y", "verdict": "partly",
                                      "note": f"{rule}; a bound from Ritz values; one start vector."}])])
    row = {x.claim.id: x for x in rows}["B.lanczos"]
    assert row.note == f"{rule}; one start vector; a bound from Ritz values", row.note


def test_claim_line_states_the_verdict_once_and_typesets():
    rows = [{"claim": "F.entk_convergence", "ours": "slope -0.486, 0.97x the prediction",
             "verdict": "reproduces", "note": "reproduces when the slope is within 0.05 of -1/2"}]
    line = scorecard.claim_line("F.entk_convergence", rows)
    assert line.count("reproduces") == 1, line
    assert "**Verdict: reproduces** (threshold: the slope is within 0.05 of −1/2)." in line
    assert "slope −0.486, 0.97× the prediction" in line
    partly = scorecard.claim_line("F.entk_convergence", [{**rows[0], "verdict": "partly"}])
    assert "**Verdict: partly** (threshold to reproduce: the slope" in partly


def test_claim_line_of_another_chapters_claim_says_the_scorecard_joins_it():
    rows = [{"claim": "B.lanczos", "ours": "top 121 from 252 products", "verdict": "reproduces"}]
    here = scorecard.claim_line("B.lanczos", rows, chapter="entk_lanczos")
    there = scorecard.claim_line("B.lanczos", rows, chapter="modular_mlp")
    assert "joins them" not in here
    assert "joins them with those of {doc}`entk_lanczos`" in there and "*partly* when they differ" in there


def test_headline_and_verdict_line_are_generated_from_rows():
    r = _result()
    rows = scorecard.rows_from([(r, [
        {"claim": "B.mlp.grokking", "ours": "1", "verdict": "reproduces"},
        {"claim": "B.mlp.first_cliff", "ours": "1", "verdict": "reproduces"},
        {"claim": "B.mlp.dynamics", "ours": "1", "verdict": "does not"}])])
    n = len(scorecard.CATALOGUE)
    assert scorecard.headline(rows) == (f"{n} claims: 2 reproduce, 0 partly, 1 do not, "
                                        f"{n - 3} not yet measured")
    measured = [x for x in rows if x.verdict != scorecard.NOT_MEASURED]
    line = scorecard.verdict_line(measured, labels={"sec-b-mlp-grokking"})
    assert line == ("**2 reproduce** ({ref}`B.mlp.grokking <sec-b-mlp-grokking>`, B.mlp.first_cliff); "
                    "**1 does not** (B.mlp.dynamics).")
    assert scorecard.verdict_line([], labels=set()).startswith("none")


def test_chapter_rows_are_the_chapters_claims_from_its_results():
    from ntkbook.experiments import load_or_run

    res = load_or_run("modular_mlp", "paper")
    rows = scorecard.chapter_rows("modular_mlp", [res])
    ids = {r.claim.id for r in rows}
    assert ids == {"B.mlp.grokking", "B.mlp.first_cliff", "B.mlp.second_cliff_sum",
                   "B.mlp.second_cliff_diff", "B.mlp.dynamics"}  # not B.lanczos: entk_lanczos's
    paper = {r.claim.id: r.verdict for r in scorecard.collect(["modular_mlp"])}
    assert all(paper[r.claim.id] == r.verdict for r in rows)


def test_collect_uses_stored_results_and_computed_verdicts():
    rows = {r.claim.id: r for r in scorecard.collect()}
    assert len(rows) == len(scorecard.CATALOGUE)
    # modular_mlp's paper-scale result is stored in results/: its claims are measured
    for cid in ("B.mlp.grokking", "B.mlp.first_cliff", "B.mlp.second_cliff_sum", "B.mlp.dynamics"):
        assert rows[cid].verdict in VERDICTS, cid
        assert "paper scale" in rows[cid].source


def test_provenance_line_names_scale_device_commit_and_time():
    from ntkbook.experiments import make_config
    import dataclasses

    cfg = dataclasses.asdict(make_config("lanczos_ghosts", "smoke"))
    r = Result(name="lanczos_ghosts", config=cfg, provenance={
        "date": "2026-11-30T01:02:03+00:00", "device": "cpu", "git_commit": "0123456789abcdef",
        "git_dirty": True, "wall_time_s": 75.0})
    line = report.provenance_line(r)
    assert line._repr_markdown_() == str(line)
    for part in ("smoke scale", "2026-11-30", "CPU", "0123456", "uncommitted", "1m15s"):
        assert part in line, (part, line)
    changed = Result(name="lanczos_ghosts", config={**cfg, "k": cfg["k"] + 1}, provenance={})
    assert f"k={cfg['k'] + 1}" in report.provenance_line(changed)


def test_run_box_reads_times_from_file(tmp_path):
    times = tmp_path / "chapters.json"
    times.write_text('{"smoke": {"book/x.md": {"seconds": 42.0}}, "paper": {"book/x.md": {"seconds": 5}}}')
    box = report.run_this_chapter("x", data=["MNIST"], times_file=times)
    assert "make chapter CH=x SCALE=smoke" in box and "make lab CH=x" in box
    assert "42.0s" in box and "5.0s" in box and "MNIST" in box
    assert "not measured" in report.run_this_chapter("y", times_file=times)


def test_run_box_gives_compute_times_and_the_latest_whole_rerun(tmp_path):
    """The paper-scale result's compute time from its provenance and, when a later rerun of the
    whole entry agreed, that rerun's time too (a sample's time is not the entry's)."""
    from ntkbook.experiments import get

    times = tmp_path / "chapters.json"
    times.write_text("{}")
    cfg = dataclasses.asdict(get("lanczos_ghosts").Config.paper())
    prov = {"device": "cpu", "wall_time_s": 3600.0}
    plain = Result(name="lanczos_ghosts", config=cfg, provenance=prov)
    assert "`lanczos_ghosts` 1h00m on CPU." in report.run_this_chapter("x", [plain], times_file=times)
    reruns = [{"agree": True, "sample": None, "wall_time_s": 90.0, "date": "2026-12-08T00:30:00+00:00",
               "provenance": {"device": "cpu"}},
              {"agree": True, "sample": "seed 0", "wall_time_s": 10.0, "date": "2026-12-09T00:00:00+00:00"}]
    again = Result(name="lanczos_ghosts", config=cfg, provenance=prov, reverified=reruns)
    box = report.run_this_chapter("x", [again], times_file=times)
    assert "`lanczos_ghosts` 1h00m on CPU (rerun whole in 1m30s on CPU, 2026-12-08)." in box


def test_catalogued_chapter_label_is_the_fallback_link():
    rows = scorecard.rows_from([])
    md = scorecard.markdown(rows, labels={"sec-influence-map", "sec-a-flip-ratio"})
    assert "{ref}`A.flip.mnist10 <sec-influence-map>`" in md
    assert "{ref}`A.flip.ratio <sec-a-flip-ratio>`" in md     # the sec-<id> label wins


def test_fmt_never_prints_negative_zero():
    from ntkbook.numbers import fmt

    assert fmt(-0.001) == "0.00" and fmt(-0.0, ".1f") == "0.0"
    assert fmt(-0.01) == "-0.01" and fmt(-3.2, ".1f") == "-3.2" and fmt(-1e-9, ".1e") == "-1.0e-09"
    assert fmt(float("nan")) == "n/a" and fmt(None) == "n/a"


def test_a_stored_stand_in_config_is_used_and_named(monkeypatch):
    """Where the paper preset is not stored, a claims module's FALLBACKS stand in, and the row's
    source names the changed fields (a reduced scale is never presented as the paper's). Simulated
    on entk_convergence (judged by ntkbook.claims.entk_convergence): its paper preset is moved to a
    config that is not stored, and the stored paper-preset run is named as the stand-in."""
    import dataclasses

    from ntkbook.book import scorecard
    from ntkbook.claims import entk_convergence as claims_conv
    from ntkbook.experiments import entk_convergence

    stored = entk_convergence.Config.paper()
    monkeypatch.setattr(entk_convergence.Config, "paper",
                        classmethod(lambda cls: dataclasses.replace(stored, num_seeds=stored.num_seeds + 1)))
    monkeypatch.setattr(claims_conv, "FALLBACKS", {"entk_convergence": (dict(num_seeds=stored.num_seeds),)},
                        raising=False)
    rows = {r.claim.id: r for r in scorecard.collect(["entk_convergence"])}
    row = rows["F.entk_convergence"]
    assert row.verdict != scorecard.NOT_MEASURED and f"changed: num_seeds={stored.num_seeds}" in row.source
    monkeypatch.setattr(claims_conv, "FALLBACKS", {})
    rows = {r.claim.id: r for r in scorecard.collect(["entk_convergence"])}
    assert rows["F.entk_convergence"].verdict == scorecard.NOT_MEASURED


def test_an_experiments_own_scorecard_reads_its_stand_in_configs(monkeypatch):
    """The same for an experiment that still carries its own ``scorecard(result)`` (read where no
    claims module supersedes it) and names its stand-ins in SCORECARD_FALLBACKS. Simulated: the
    rule of ntkbook.claims.entk_convergence put back into the experiment module, and no claims
    module."""
    import dataclasses

    from ntkbook.book import scorecard
    from ntkbook.claims import entk_convergence as claims_conv
    from ntkbook.experiments import entk_convergence

    stored = entk_convergence.Config.paper()
    monkeypatch.setattr(scorecard, "claim_modules", lambda: [])
    monkeypatch.setattr(entk_convergence, "scorecard", claims_conv.entk_convergence_scorecard, raising=False)
    monkeypatch.setattr(entk_convergence.Config, "paper",
                        classmethod(lambda cls: dataclasses.replace(stored, num_seeds=stored.num_seeds + 1)))
    monkeypatch.setattr(entk_convergence, "SCORECARD_FALLBACKS", (dict(num_seeds=stored.num_seeds),),
                        raising=False)
    rows = {r.claim.id: r for r in scorecard.collect(["entk_convergence"])}
    row = rows["F.entk_convergence"]
    assert row.verdict != scorecard.NOT_MEASURED and f"changed: num_seeds={stored.num_seeds}" in row.source
    monkeypatch.setattr(entk_convergence, "SCORECARD_FALLBACKS", ())
    rows = {r.claim.id: r for r in scorecard.collect(["entk_convergence"])}
    assert rows["F.entk_convergence"].verdict == scorecard.NOT_MEASURED


def test_experiment_modules_hold_no_verdict_rules():
    """Verdict rules live in :mod:`ntkbook.claims`: no experiment module defines ``scorecard()``
    (the last one, gemma_probe's, moved to :mod:`ntkbook.claims.gemma`), none is left to supersede,
    and the experiments whose rules moved are each judged by a claims module that reads them."""
    import importlib

    from ntkbook.experiments import EXPERIMENTS

    assert scorecard.superseded() == set()
    judged = {n for module in scorecard.claim_modules() for n in module.EXPERIMENTS}
    for name, module in EXPERIMENTS.items():
        assert not hasattr(importlib.import_module(module), "scorecard"), \
            f"{module} defines scorecard(): move it to ntkbook.claims"
    for name in ("lanczos_ghosts", "entk_convergence", "gram_conditioning", "modular_mlp",
                 "modular_transformer", "ntk_distance", "ntk_distance_fullbatch", "gemma_probe"):
        assert name in judged, name
