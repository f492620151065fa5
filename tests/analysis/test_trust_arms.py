"""What an arm is, and the evidence under a verdict, checked (issue 42): an arm that reads the
answers under a system arm's label, a table whose values were swapped under its stamp, and the
messages that misled. Each test failed on the code before this change; copies of the committed
b2b baseline in tmp_path, doctored."""
import json

import pandas as pd

from tests.evidence import BASELINE, POLICY, copy_run, gate, invoke, manifest, traces, write_manifest, write_traces

REWRITE = "rewrite"


def out(r) -> str:
    return " ".join(r.output.split())


def relabelled(cand, label: str, kind: str, arm_id: str, params: dict, reads: list | None = None):
    """The candidate with the `rewrite` arm replaced by a copy of the `kind` arm under `label`."""
    t, m = traces(cand), manifest(cand)
    src = next(a for a in m["arms"] if a["arm"] == kind)
    old = next(a for a in m["arms"] if a["label"] == label)
    new = {**src, "arm_id": arm_id, "label": label, "params": params}
    if reads is not None:
        new["reads_labels"] = reads
    rows = t[t["arm_id"] == src["arm_id"]].assign(arm_id=arm_id, params=json.dumps(params, separators=(",", ":")))
    t = pd.concat([t[t["arm_id"] != old["arm_id"]], rows], ignore_index=True)
    m["arms"] = [new if a is old else a for a in m["arms"]]
    write_traces(cand, t)
    write_manifest(cand, m)
    assert invoke("metrics", cand).exit_code == 0
    return cand


def test_an_oracle_under_the_label_of_a_system_arm_is_refused(tmp_path):
    params = {"answer": False, "depth": 99, "id_lane": True, "lane": "hybrid"}
    cand = relabelled(copy_run(tmp_path / "cand"), REWRITE, "oracle", "oracle(answer=false,depth=99,id_lane=true,"
                      "lane=hybrid)", params, ["expected_filters", "reference_rewrite"])
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2, r.output
    assert "'rewrite' of b2b is a rewrite arm and 'rewrite' of cand an oracle (reads expected_filters, " \
        "reference_rewrite) arm" in out(r) and "never gated as a system arm" in out(r)
    r = gate(tmp_path / "g2", BASELINE, cand, POLICY, "--pair",
             "rewrite=rewrite")
    assert r.exit_code == 2 and "never gated as a system arm" in out(r), r.output


def test_an_oracle_recorded_before_manifests_said_what_it_reads_is_still_one(tmp_path):
    params = {"answer": False, "depth": 99, "id_lane": True, "lane": "hybrid"}
    cand = relabelled(copy_run(tmp_path / "cand"), REWRITE, "oracle", "oracle(answer=false,depth=99,id_lane=true,"
                      "lane=hybrid)", params)  # no reads_labels: the `oracle` capability it declared says so
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2 and "never gated as a system arm" in out(r), r.output


def test_another_kind_of_arm_under_one_label_is_refused_naming_both_kinds(tmp_path):
    params = {"answer": False, "depth": 99, "id_lane": True, "lane": "hybrid", "max_turns": 0}
    cand = relabelled(copy_run(tmp_path / "cand"), REWRITE, "concat", "concat(answer=false,depth=99,id_lane=true,"
                      "lane=hybrid,max_turns=0)", params)
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 2, r.output
    assert "label 'rewrite' names a rewrite arm in" in out(r) and "and a concat arm in" in out(r)
    r = invoke("compare", BASELINE, cand)
    assert r.exit_code == 2 and "a change of kind under one label" in out(r), r.output


def test_a_capability_lost_across_a_named_change_of_kind_fails(tmp_path):
    params = {"answer": False, "depth": 99, "id_lane": True, "lane": "hybrid", "max_turns": 0}
    cand = relabelled(copy_run(tmp_path / "cand"), REWRITE, "concat", "concat(answer=false,depth=99,id_lane=true,"
                      "lane=hybrid,max_turns=0)", params)
    r = gate(tmp_path / "g", BASELINE, cand, POLICY, "--pair", "rewrite=rewrite")
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "g/gate.json").read_text())
    lost = [x for x in v["results"] if x["label"] == REWRITE and x["metric"] == "entitlement_violations"]
    assert lost and all(x["status"] == "fail" and "no longer declares proposes_filters" in x["detail"] for x in lost)


def test_a_metrics_table_swapped_under_its_stamp_is_rescored(tmp_path):
    import pyarrow.parquet as pq

    cand = copy_run(tmp_path / "cand")
    t, m = traces(cand), manifest(cand)
    rid = next(a["arm_id"] for a in m["arms"] if a["label"] == REWRITE)
    sel = t["is_final"] & (t["arm_id"] == rid)
    t.loc[sel, "ranking"] = pd.Series([[]] * int(sel.sum()), index=t.index[sel], dtype=object)  # recall gone
    write_traces(cand, t)
    assert invoke("metrics", cand).exit_code == 0
    meta = pq.read_metadata(cand / "metrics.parquet").metadata  # the candidate's stamp (the file's key-value metadata), on the baseline's values
    pq.write_table(pq.read_table(BASELINE / "metrics.parquet").replace_schema_metadata(meta), cand / "metrics.parquet")
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 1, r.output
    assert "metrics.parquet's values are not the ones its stamp certifies" in out(r)
