"""Evidence you can trust, second pass: what an adversarial review of the gate found (30 attempts
on copies of the committed b2b baseline; 9 gave a pass they should not have, 5 misleading output).
Each test below passed a damaged or untrustworthy candidate, or crashed, before this change."""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests.evidence import (BASELINE, POLICY, copy_run, gate, invoke, labels, manifest, sharded, traces,
                            write_manifest, write_traces)

REWRITE = "rewrite"  # the HQE rewrite's label; `rewrite rules` is the other rewrite arm


def empty(t: pd.DataFrame, sel) -> None:
    t.loc[sel, "ranking"] = pd.Series([[]] * int(sel.sum()), index=t.index[sel], dtype=object)


def first_turns(run, every: int = 3) -> set:
    lab = labels(run)
    return set(sorted(lab.loc[lab["turn_index"] == 1, "session_id"])[::every])


def damaged(t: pd.DataFrame, hurt: set):
    return t["is_final"] & (t["arm_id"].str.startswith("rewrite(")) & t["session_id"].isin(hurt) & \
        (t["turn_index"] == 1) & t["params"].str.contains('"method":"hqe"')


def write_labels(run, lab: pd.DataFrame) -> None:
    schema = pq.read_schema(run / "labels.parquet")
    pq.write_table(pa.Table.from_pandas(lab[schema.names], preserve_index=False).cast(schema), run / "labels.parquet")


def out(r) -> str:
    return " ".join(r.output.split())


def test_a_candidate_that_drops_a_capability_fails_the_checks_it_escapes(tmp_path):
    cand = copy_run(tmp_path / "cand")
    t, m = traces(cand), manifest(cand)
    rid = next(a["arm_id"] for a in m["arms"] if a["label"] == REWRITE)
    empty(t, t["is_final"] & (t["arm_id"] == rid))
    write_traces(cand, t)
    next(a for a in m["arms"] if a["arm_id"] == rid)["capabilities"] = ["queries", "replayed"]
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "g/gate.json").read_text())
    failed = [x for x in v["results"] if x["label"] == REWRITE and x["status"] == "fail"]
    assert len(failed) == 7 and all("no longer declares" in x["detail"] for x in failed)  # 6 rules, a floor
    assert all("no longer declares ranking" in x["detail"] for x in failed if x["kind"] == "rule")
    assert any("capabilities lost" in c for p in v["pairs"] if p["label"] == REWRITE for c in p["changes"])


def test_labels_edited_in_the_candidate_are_refused(tmp_path):
    cand = copy_run(tmp_path / "cand")
    hurt = first_turns(cand)
    t = traces(cand)
    empty(t, damaged(t, hurt))
    write_traces(cand, t)
    lab = labels(cand)
    lab.loc[lab["session_id"].isin(hurt) & (lab["turn_index"] == 1), "qrels"] = "{}"  # the damage unlabelled
    write_labels(cand, lab)
    assert invoke("metrics", cand).exit_code == 0
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "labels differ" in out(r) and "17 turn(s) labelled differently" in out(r), r.output


def test_sessions_added_to_the_candidate_are_refused(tmp_path):
    cand = copy_run(tmp_path / "cand")
    lab, t = labels(cand), traces(cand)
    extra = lab.assign(session_id=lab["session_id"] + "-copy")
    write_labels(cand, pd.concat([lab, extra], ignore_index=True))
    write_traces(cand, pd.concat([t, t.assign(session_id=t["session_id"] + "-copy")], ignore_index=True))
    assert invoke("metrics", cand).exit_code == 0
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "204 turn(s) only in cand" in out(r), r.output


def test_turns_the_candidate_declines_are_not_compared_away(tmp_path):
    cand = copy_run(tmp_path / "cand")
    t = traces(cand)
    sel = damaged(t, first_turns(cand))
    empty(t, sel)
    t.loc[sel, "not_applicable"] = "declined"
    write_traces(cand, t)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "g/gate.json").read_text())
    lost = [x for x in v["results"] if x["label"] == REWRITE and x["segment"] == "turn_index=1" and x["kind"] == "rule"]
    assert lost and all(x["status"] == "fail" and "17 of 50 turns the baseline measured are unmeasured" in x["detail"]
                        for x in lost)
    r = invoke("compare", BASELINE, cand, "-o", tmp_path / "cmp")
    assert r.exit_code == 0 and "are unmeasured in cand" in out(r), r.output


def test_failed_llm_calls_are_read_from_the_traces_not_the_counts(tmp_path):
    cand = copy_run(tmp_path / "cand")
    t = traces(cand)
    sel = t["is_final"] & (t["arm"] == "rewrite_hyde") & t["session_id"].str[-1].isin(list("02468"))
    t.loc[sel, "llm_failed"], t.loc[sel, "fallback_reason"] = 1, "rewrite failed: 500"
    write_traces(cand, t)  # the manifest's counts still say no turn failed
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 3, r.output
    md = (tmp_path / "g/gate.md").read_text()
    assert "rewrite_hyde:" in md and "turns failed" in md and "rewrite failed: 500" in md


def test_rows_outside_the_plan_or_twice_are_refused(tmp_path):
    cand = copy_run(tmp_path / "repeats")
    t = traces(cand)
    firsts = t[t["is_final"] & (t["arm"] == "rewrite") & (t["turn_index"] == 1)]
    write_traces(cand, pd.concat([t, *[firsts.assign(repeat=r) for r in range(1, 5)]], ignore_index=True))
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "repeats 1–4 (the manifest says repeats: 1)" in out(r), r.output
    cand = copy_run(tmp_path / "twice")
    t = traces(cand)
    sel = t["is_final"] & (t["arm"] == "rewrite") & (t["turn_index"] == 1)
    bad = t.copy()
    empty(bad, sel)
    write_traces(cand, pd.concat([bad, t[sel]], ignore_index=True))
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "turn(s) with more than one final row" in out(r), r.output
    r = invoke("metrics", cand)
    assert r.exit_code == 2 and "more than one final row" in out(r), r.output


def test_a_labels_snapshot_missing_traced_turns_is_named_not_a_crash(tmp_path):
    cand = copy_run(tmp_path / "cand")
    write_labels(cand, labels(cand).iloc[1:])
    for args in (("metrics", cand), ("gate", "--baseline", BASELINE, "--candidate", cand, "--policy", POLICY,
                                     "-o", tmp_path / "g")):
        r = invoke(*args)
        assert r.exit_code == 2 and "turns the labels snapshot does not hold" in out(r), r.output


def test_a_judgments_file_not_written_by_the_judge_is_named(tmp_path):
    cand = copy_run(tmp_path / "cand")
    pd.DataFrame({"x": [1]}).to_parquet(cand / "judgments.parquet")
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "judgments.parquet: unreadable (no column" in out(r), r.output


def test_a_shard_baseline_is_refused_or_named_on_the_first_line(tmp_path):
    base = sharded(tmp_path / "base", 0, 2)
    cand = copy_run(tmp_path / "cand")
    r = gate(tmp_path / "g", base, cand)
    assert r.exit_code == 2 and "is shard 0/2" in out(r) and "harness merge" in out(r), r.output
    p = tmp_path / "subset.yaml"
    p.write_text(POLICY.read_text().replace("coverage: full", "coverage: subset"))
    r = gate(tmp_path / "g", base, cand, p)
    assert r.exit_code == 0, r.output
    first = (tmp_path / "g/gate.md").read_text().splitlines()[0]
    assert "not compared" in first and "shard 0/2" in first and "30 of 50 sessions" in first


def test_a_metric_the_candidate_settings_never_computed_is_bad_input(tmp_path):
    cand = copy_run(tmp_path / "cand")
    m = manifest(cand)
    m["metrics"]["cutoffs"] = [5, 20]
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "recall@10 was not computed" in out(r), r.output


def test_a_table_deleted_after_scoring_is_rescored(tmp_path):
    cand = copy_run(tmp_path / "cand")
    (cand / "spread.parquet").unlink()
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 0 and "spread.parquet is missing" in out(r), r.output
    assert (cand / "spread.parquet").is_file()


def test_a_run_gated_against_itself_says_so(tmp_path):
    r = gate(tmp_path / "g", BASELINE, copy_run(tmp_path / "same"))
    assert r.exit_code == 0 and "is the baseline b2b itself" in out(r), r.output


def test_a_crash_of_the_harness_exits_3_never_1(tmp_path, monkeypatch, capsys):
    """An unexpected exception (a bug) must not read as "regression" in CI."""
    import sys

    import pytest

    from harness import cli

    def boom(*a, **k):
        raise KeyError("status")

    monkeypatch.setattr("harness.analysis.gate.evaluate_to", boom)
    monkeypatch.setattr(sys, "argv", ["harness", "gate", "--baseline", str(BASELINE), "--candidate", str(BASELINE),
                                      "--policy", str(POLICY), "-o", str(tmp_path / "g")])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 3
    err = capsys.readouterr().err
    assert "internal error (exit 3): KeyError" in err and "Traceback" not in err


def test_a_policy_metric_is_resolved_once_and_travels(tmp_path, monkeypatch):
    """The policy resolves each rule's, floor's and budget's metric when it loads; the gate uses that
    Metric and never resolves the name again (it was resolved six times between file and report)."""
    from harness.analysis import policy as policy_module
    from harness.analysis.gate import evaluate
    from harness.metrics.registry import Metric

    calls = []
    real = policy_module.resolve
    monkeypatch.setattr(policy_module, "resolve", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    pol = policy_module.load_policy(POLICY)
    checks = [*pol.rules, *pol.floors, *pol.budgets]
    loaded = len(calls)
    assert all(isinstance(c.m, Metric) and c.m.name == c.metric for c in checks)
    v = evaluate(BASELINE, BASELINE, pol)
    assert v.status == 0 and len(calls) == loaded  # not one more resolution while gating
