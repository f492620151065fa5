"""Issue 29, items 5 and 6: LLM relevance labels for the holes. `harness judge RUN --relevance`
against a scripted endpoint (`harness serve`'s script, tests/fixtures/relevance) grades every
document no person labelled in the top k of every arm of a b2b run, into its own table with
provenance; `harness metrics --qrels human+llm` scores with them (and says so), kappa against
people's labels is reported, a second run asks nothing, a mostly failing endpoint exits 3, and
runs scored with different labels are never compared."""
import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from harness.metrics.qrels import agreement, cohen_kappa
from harness.roles.relevance import RelevanceOutput
from harness.store.folder import RunFolder
from harness.store.holes import holes
from harness.metrics.qrels import agreement, agreement_table
from harness.steps.relevance import sample_labelled
from harness.testing.script import serve
from tests.conftest import ROOT
from tests.evidence import BASELINE, copy_run, gate, invoke

SCRIPT = ROOT / "tests/fixtures/relevance/script.yaml"
DEPTH = 3


@pytest.fixture(scope="module")
def endpoint():
    srv = serve(SCRIPT)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def labelled(tmp_path_factory, endpoint):
    """A copy of the committed b2b baseline, its holes in the top 3 labelled by the script."""
    tmp = tmp_path_factory.mktemp("relevance")
    run = copy_run(tmp / "b2b")
    endpoint.reset_stats()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # the run config's LLM cache (.cache/llm) lands here
        r = invoke("judge", run, "--relevance", "--endpoint", endpoint.base_url, "--model", "scripted-overlap",
                   "--depth", DEPTH)
    return tmp, run, r, endpoint.calls


def _values(run: Path, metric: str) -> pd.Series:
    m = RunFolder(run).metrics()
    a = m[(m["kind"] == "aggregate") & (m["metric"] == metric) & (m["segment"] == "all")]
    return a.set_index("arm_id")["mean"]


def test_every_hole_of_every_arm_is_graded_once_with_its_provenance(labelled):
    tmp, run, r, calls = labelled
    assert r.exit_code == 0, r.output
    folder = RunFolder(run)
    turns = {(x["session_id"], int(x["turn_index"])): x for x in folder.labels_table().to_pylist()
             if x["qrels_measured"]}
    want = holes(folder, turns, DEPTH)
    rel = folder.relevance_labels()
    got = rel[rel["purpose"] == "hole"]
    assert len(want) > 500 and len(got) == len(want)
    assert set(zip(got["session_id"], got["turn_index"], got["doc_id"])) == set(want)
    for s, t, d in list(want)[:50]:  # none of them labelled by people for its turn
        assert d not in json.loads(turns[(s, t)]["qrels"])
    assert (got["status"] == "ok").all() and got["llm_grade"].between(0, 3).all()
    assert set(got["model"]) == {"scripted-overlap"}
    assert all(re.fullmatch(r"relevance\.v1@\w+", p) for p in got["prompt"])
    assert got["labelled_at"].notna().all() and not got["cache_hit"].any()
    sample = rel[rel["purpose"] == "agreement"]
    assert len(sample) == 100 and sample["human_grade"].notna().all()
    assert set(sample["human_grade"]) == {1, 2}  # every grade people used is in the sample
    assert calls == len(rel)  # one request per pair
    assert "score with them: harness metrics" in r.output and "--qrels human+llm" in r.output
    # the agreement with people's labels, printed by the step itself (issue 41: kappa printed)
    said = agreement(agreement_table(folder))
    assert said is not None and said.n == 100
    assert f"relevance: {said.line()}" in " ".join(r.output.split()), r.output
    assert "Cohen's kappa" in said.line()
    # the grades of the script are the grade map's: 0,1 -> not relevant, 2 -> 1, 3 -> 2
    assert (got["qrel_grade"] == got["llm_grade"].map({0: 0, 1: 0, 2: 1, 3: 2})).all()


def test_human_plus_llm_fills_the_holes_and_changes_the_values(labelled):
    tmp, run, *_ = labelled
    r = invoke("metrics", run, "-m", f"judged@{DEPTH}", "-m", "ndcg@10")
    assert r.exit_code == 0, r.output
    human_judged, human_ndcg = _values(run, f"judged@{DEPTH}"), _values(run, "ndcg@10")
    assert (human_judged < 1).all()
    r = invoke("metrics", run, "--qrels", "human+llm", "-m", f"judged@{DEPTH}", "-m", "ndcg@10")
    assert r.exit_code == 0, r.output
    judged, ndcg = _values(run, f"judged@{DEPTH}"), _values(run, "ndcg@10")
    assert (judged == 1.0).all()  # every top-3 document of every measured turn has a label now
    assert (ndcg != human_ndcg).any()
    said = " ".join(r.output.split())
    assert re.search(r"relevance labels: people's, and an LLM's for the holes: (\d+) of \1 hole\(s\) in the top 3 "
                     r"graded by scripted-overlap \(prompt relevance\.v1@\w+, grade map 0,0,1,2\)", said), said
    assert re.search(r"Cohen's kappa -?\d\.\d\d \(graded\)", " ".join(r.output.split()))
    # the choice sticks: scoring again without --qrels keeps it (a stale run rescored keeps it too)
    r = invoke("metrics", run, "-m", "ndcg@10")
    assert (_values(run, "ndcg@10") == ndcg).all()
    html = tmp / "report.html"
    r = invoke("report", run, "-o", html)
    assert r.exit_code == 0, r.output
    page = " ".join(unescape(html.read_text()).split())
    assert "relevance labels: people's, and" in page and "people's grade \\ LLM's grade" in page
    assert re.search(r"Cohen's kappa -?\d\.\d\d \(graded\)", page)
    invoke("metrics", run, "--qrels", "human")  # back, for the tests after this one
    assert (_values(run, "ndcg@10") == human_ndcg).all()


def test_labelling_again_sends_no_request(labelled, endpoint):
    tmp, run, _, _ = labelled
    before = RunFolder(run).relevance_labels()
    endpoint.reset_stats()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        r = invoke("judge", run, "--relevance", "--endpoint", endpoint.base_url, "--model", "scripted-overlap",
                   "--depth", DEPTH)
    assert r.exit_code == 0, r.output
    assert endpoint.calls == 0 and "0 HTTP call(s)" in r.output
    after = RunFolder(run).relevance_labels()
    assert after["cache_hit"].all()
    cols = ["session_id", "turn_index", "doc_id", "purpose", "llm_grade", "qrel_grade", "status", "model", "prompt"]
    assert after[cols].equals(before[cols])
    with pytest.MonkeyPatch.context() as mp:  # replay mode: the cache answers, nothing may be sent
        mp.chdir(tmp)
        r = invoke("judge", run, "--relevance", "--endpoint", endpoint.base_url, "--model", "scripted-overlap",
                   "--depth", DEPTH, "--llm-cache", "replay")
    assert r.exit_code == 0 and endpoint.calls == 0, r.output
    assert RunFolder(run).relevance_labels()[cols].equals(before[cols])


def test_replay_mode_without_the_replies_stops_and_sends_nothing(tmp_path, endpoint, monkeypatch):
    run = copy_run(tmp_path / "b2b")
    monkeypatch.chdir(tmp_path)  # an empty LLM cache
    endpoint.reset_stats()
    r = invoke("judge", run, "--relevance", "--endpoint", endpoint.base_url, "--model", "scripted-overlap",
               "--depth", 1, "--sample", 0, "--llm-cache", "replay")
    assert r.exit_code == 3 and endpoint.calls == 0, r.output
    rel = RunFolder(run).relevance_labels()
    assert len(rel) and rel["status"].str.startswith("not asked").all() and rel["llm_grade"].isna().all()
    assert "stopped" in r.output


def test_runs_scored_with_different_labels_are_not_compared(labelled, tmp_path):
    _, run, *_ = labelled
    other = copy_run(tmp_path / "other", run)
    invoke("metrics", other, "--qrels", "human+llm")
    r = invoke("compare", BASELINE, other)
    assert r.exit_code == 2
    assert "scored with different relevance labels" in " ".join(r.output.split())
    r = gate(tmp_path / "gate", BASELINE, other)
    assert r.exit_code == 2 and "scored with different relevance labels" in " ".join(r.output.split())
    assert not (tmp_path / "gate" / "gate.json").exists() or "pass" not in (tmp_path / "gate" / "gate.json").read_text()


def test_without_an_endpoint_the_holes_are_counted_not_labelled(tmp_path):
    run = copy_run(tmp_path / "b2b")
    r = invoke("judge", run, "--relevance", "--depth", 2, "--sample", 0)
    assert r.exit_code == 0, r.output
    rel = RunFolder(run).relevance_labels()
    assert len(rel) and (rel["status"] == "not measured: no judge endpoint").all() and rel["llm_grade"].isna().all()
    assert "relevance not labelled (no judge endpoint)" in r.output
    r = invoke("metrics", run, "--qrels", "human+llm")  # nothing to score with: refused, not scored as people's
    assert r.exit_code == 2 and "no LLM relevance grade to score with" in " ".join(r.output.split())


def test_what_an_endpoint_graded_is_never_lost(labelled, tmp_path, endpoint):
    """No endpoint, or a replay that lacks the replies, never replaces grades the folder holds."""
    _, run, *_ = labelled
    wipe = copy_run(tmp_path / "wipe", run)
    before = RunFolder(wipe).relevance_labels()
    r = invoke("judge", wipe, "--relevance", "--depth", DEPTH)
    assert r.exit_code == 2 and "would replace with none" in " ".join(r.output.split())
    assert RunFolder(wipe).relevance_labels().equals(before)
    with pytest.MonkeyPatch.context() as mp:  # an empty cache in replay mode: the step stops at once
        mp.chdir(tmp_path)
        r = invoke("judge", wipe, "--relevance", "--endpoint", endpoint.base_url, "--model", "scripted-overlap",
                   "--depth", DEPTH, "--llm-cache", "replay")
    assert r.exit_code == 3, r.output
    after = RunFolder(wipe).relevance_labels()
    cols = ["session_id", "turn_index", "doc_id", "purpose", "llm_grade", "qrel_grade", "status"]
    assert after[cols].equals(before[cols]) and "kept their earlier grade" in " ".join(r.output.split())


def test_a_failing_endpoint_exits_3_and_keeps_the_rows(tmp_path):
    from harness.testing import TestServer

    run = copy_run(tmp_path / "b2b")
    with TestServer() as srv:
        srv.set_faults("500", rate=1.0)
        cfg = tmp_path / "judge.yaml"
        cfg.write_text(f"kind: openai-compatible\nbase_url: {srv.base_url}\nmodel: m\nmax_retries: 0\n")
        r = invoke("judge", run, "--relevance", "--config", cfg, "--depth", 1, "--sample", 5)
    assert r.exit_code == 3, r.output
    rel = RunFolder(run).relevance_labels()
    assert rel["status"].str.startswith("error").all()


def test_bad_options_exit_2(tmp_path):
    r = invoke("metrics", BASELINE, "--qrels", "humann")
    assert r.exit_code == 2 and "did you mean 'human'" in r.output
    for bad in ("0,1,2", "0,0,1,²"):
        r = invoke("judge", BASELINE, "--relevance", "--grade-map", bad)
        assert r.exit_code == 2 and "expected 4 non-negative integers" in " ".join(r.output.split())
    run = copy_run(tmp_path / "b2b")
    r = invoke("judge", run, "--relevance", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m",
               "--grade-map", "0,0,1,3")  # b2b's grades go to 2
    assert r.exit_code == 2 and "above the eval set's scale" in " ".join(r.output.split())
    empty = tmp_path / "empty.md"
    empty.write_text("\n")
    r = invoke("judge", run, "--relevance", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--prompt", empty)
    assert r.exit_code == 2 and "empty" in r.output
    assert not RunFolder(run).has_relevance_labels()  # refused before anything was asked or written


def _forged(src: Path, dst: Path, edit) -> Path:
    run = copy_run(dst, src)
    rel = RunFolder(run).relevance_labels()
    RunFolder(run).write_relevance_labels(pa.Table.from_pandas(edit(rel), preserve_index=False))
    return run


def test_labels_scoring_cannot_use_exit_2_naming_why(labelled, tmp_path):
    _, run, *_ = labelled
    holes = lambda rel: rel["purpose"] == "hole"  # noqa: E731
    cases = {
        "nocol": (lambda rel: rel.drop(columns=["qrel_grade"]), "no column qrel_grade"),
        "twice": (lambda rel: pd.concat([rel, rel[holes(rel)].head(1)]), "has 2 rows; one is expected"),
        "scale": (lambda rel: rel.assign(qrel_grade=rel["qrel_grade"].where(~holes(rel), 99)),
                  "qrel_grade 99 above the eval set's scale"),
        "mixed": (lambda rel: rel.assign(model=["a", "b"] * (len(rel) // 2) + ["a"] * (len(rel) % 2)),
                  "different (model, prompt, grade map, depth)"),
    }
    for name, (edit, said) in cases.items():
        forged = _forged(run, tmp_path / name, edit)
        r = invoke("metrics", forged, "--qrels", "human+llm")
        assert r.exit_code == 2 and said in " ".join(r.output.split()), (name, r.output)
        assert "Traceback" not in r.output


def test_a_grade_for_what_is_not_a_hole_of_these_traces_is_not_used(labelled, tmp_path):
    """Labels copied from elsewhere, or a document no arm retrieved in the top k: ignored, and the
    holes left ungraded are named, so compare refuses the run."""
    _, run, *_ = labelled
    def phantom(rel):  # every other hole's document renamed: a grade for a document no arm retrieved
        odd = (rel["purpose"] == "hole") & (pd.Series(range(len(rel)), index=rel.index) % 2 == 1)
        return rel.assign(doc_id=rel["doc_id"].where(~odd, "phantom-" + rel["doc_id"]))

    forged = _forged(run, tmp_path / "phantom", phantom)
    invoke("metrics", forged, "--qrels", "human+llm")
    invoke("metrics", run, "--qrels", "human+llm")
    r = invoke("compare", run, forged)
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "holes without an LLM grade" in said, said
    n = re.search(r"phantom: (\d+) of (\d+) hole", said)
    assert n and 0 < int(n.group(1)) < int(n.group(2))
    other = copy_run(tmp_path / "other", run)
    invoke("metrics", other, "--qrels", "human+llm")
    r = gate(tmp_path / "gate", run, other)
    assert r.exit_code in (0, 1), r.output  # same labels: compared, and the gate's report says which
    assert "an LLM's for the holes" in (tmp_path / "gate" / "gate.md").read_text()
    invoke("metrics", run, "--qrels", "human")


def test_cohens_kappa_and_a_strict_reply():
    # a textbook 2x2: agreement 0.70, chance 0.50 -> kappa 0.40
    assert cohen_kappa({(1, 1): 20, (1, 0): 5, (0, 1): 10, (0, 0): 15}) == pytest.approx(0.4)
    assert cohen_kappa({(1, 1): 7, (1, 0): 3}) is None  # people used one category: says nothing
    table = pd.DataFrame({"human_grade": [1, 1, 2, 2], "llm_grade": [2, 0, 3, 2], "qrel_grade": [1, 0, 2, 1],
                          "n": [5, 2, 4, 1]})
    a = agreement(table)
    assert a.n == 12 and a.kappa is not None and "undefined" in a.line()  # binary: people's grades all >= 1
    assert "the LLM called 10 of them relevant" in a.line()  # what can be said without a kappa
    none = agreement(pd.DataFrame({"human_grade": [0], "llm_grade": [2], "qrel_grade": [1], "n": [3]}))
    assert "all not relevant" in none.line() and "called" not in none.line()
    with pytest.raises(ValueError):
        RelevanceOutput.model_validate({"relevance": True})  # strict: a grade, not a boolean
    with pytest.raises(ValueError):
        RelevanceOutput.model_validate({"relevance": 2, "why": "x"})


def test_the_sample_is_the_same_every_time_and_holds_every_grade():
    folder = RunFolder(BASELINE)
    turns = {(x["session_id"], int(x["turn_index"])): x for x in folder.labels_table().to_pylist()}
    a, b = sample_labelled(turns, 10), sample_labelled(dict(reversed(list(turns.items()))), 10)
    assert a == b and {g for *_, g in a} == {1, 2}
