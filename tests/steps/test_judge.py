"""The judge step (Ragas faithfulness through our LLM client) against the local test server
(response relevancy: tests/steps/test_judge_relevancy.py):
Ragas' two requests (statement extraction, NLI verdicts) and the score they give, a broken
judge counted as unmeasured, the cache (zero HTTP calls the second time, refresh asks again),
no judge endpoint, no secret on disk."""
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.errors import BadInput
from harness.roles.judge import FAITHFULNESS_MAX_TOKENS, JUDGE_STATEMENTS, REASON_CHARS, STATEMENT_CHARS, SYSTEM

from harness.store.folder import JUDGMENTS
from harness.steps.judge import NOT_MEASURED, SKIPPED, judge_command, judge_run
from harness.store.manifest import write_manifest
from harness.testing import TestServer
from harness.store.traces import rows_to_table
from tests.conftest import write_set

MARKER = "sk-JUDGE-MARKER-0123456789abcdef"

GOOD = "You get 30 days of holiday per year. Leftover days must be taken by 31 March. You also get a bonus."
BROKEN = "Rail travel is second class, BROKEN-JUDGE."
BOLTS = "The M8 hex bolt 4711-32 is stainless steel A2."

STATEMENTS = ["Employees get 30 days of holiday per year.", "Leftover days must be taken by 31 March.",
              "Employees get a bonus."]


def schema_name(req: dict) -> str | None:
    """The reply model a judge request asks for: its strict json_schema's name."""
    return ((req.get("response_format") or {}).get("json_schema") or {}).get("name")


def prompt(req: dict) -> str:
    """Ragas' prompt: the user message after the judge's system message (a repair appends more)."""
    return req["messages"][1]["content"]


def is_statements(req: dict) -> bool:
    return schema_name(req) == "StatementGeneratorOutput"


def is_verdicts(req: dict) -> bool:
    return schema_name(req) == "NLIStatementOutput"


def is_question(req: dict) -> bool:
    return schema_name(req) == "AnswerRelevanceOutput"


QUESTIONS = {"30 days": "How many days of holiday do I get per year?", "M8 hex bolt": "What is the M8 hex bolt made of?"}


def question(req: dict) -> dict:
    """Response relevancy's question generation: a question per answer the script knows."""
    user = prompt(req)
    return {"question": next((q for k, q in QUESTIONS.items() if k in user), "What?"), "noncommittal": 0}


def verdicts(req: dict) -> dict:
    """Every statement supported except one about a bonus: 3 statements, 2 supported."""
    user = prompt(req)
    return {"statements": [{"statement": s, "reason": "checked", "verdict": 0 if "bonus" in s else 1}
                           for s in STATEMENTS if s in user] or
            [{"statement": "x", "reason": "checked", "verdict": 1}]}


def script(srv: TestServer) -> None:
    srv.add_rule({"statements": ["Rail travel is second class."]}, fault="invalid_json",
                 when=lambda r: "BROKEN-JUDGE" in json.dumps(r["messages"]))
    srv.add_rule({"statements": STATEMENTS}, when=lambda r: is_statements(r) and "30 days" in prompt(r))
    srv.add_rule({"statements": ["The M8 hex bolt 4711-32 is stainless steel A2."]}, when=is_statements)
    srv.add_rule(verdicts, when=is_verdicts)
    srv.add_rule(question, when=is_question)


# the loopback-only guard is session-wide in tests/conftest.py


@pytest.fixture
def srv():
    with TestServer() as s:
        script(s)
        yield s


def trace(arm, rep, sid, tix, answer, doc_ids, ranking, abstained=False, query=None, issued=None):
    return {"run_id": "x", "arm_id": arm, "arm": arm.split("(")[0], "params": "{}", "repeat": rep,
            "session_id": sid, "turn_index": tix, "round": 1, "is_final": True, "original_query": query,
            "issued_queries": issued or [query], "answer": answer, "answer_doc_ids": doc_ids, "abstained": abstained,
            "ranking": ranking}


def make_run(tmp_path: Path, srv: TestServer | None, **judge) -> Path:
    es = write_set(tmp_path / "set")
    run = tmp_path / "runs" / "x"
    (run / "traces").mkdir(parents=True)
    roles = {}
    if srv is not None:
        roles["judge"] = {"kind": "openai-compatible", "base_url": srv.base_url, "model": "judge-model",
                          "max_retries": 0, "timeout": 10, **judge}
    config = {"name": "x", "eval_set": str(es), "arms": ["baseline", "rewrite"], "concurrency": 4,
              "llm": {"roles": roles, "cache": {"folder": str(tmp_path / "llmcache"), "mode": "readwrite"}}}
    caps = ["answers", "queries", "ranking", "replayed"]
    write_manifest(run, {"run_id": "x", "status": "complete", "config": config,
                         "eval_set": {"name": "tiny", "path": str(es)},
                         "arms": [{"arm_id": a, "arm": a, "params": {}, "capabilities": caps} for a in ("baseline", "rewrite")]})
    from harness.evalset.load import load_eval_set
    from harness.run.replay import labels_table

    snapshot = labels_table(load_eval_set(es), None)  # the labels a replay of the tiny set writes
    labels = snapshot.to_pylist()
    labels[0]["reference_answer"] = "30 days."
    pq.write_table(__import__("pyarrow").Table.from_pylist(labels, schema=snapshot.schema), run / "labels.parquet")
    q1, q2, q3 = (lab["user"] for lab in labels)
    rows = [
        trace("baseline", 0, "s1", 1, GOOD, ["d1"], ["d1", "d2"], query=q1),
        trace("baseline", 0, "s1", 2, "", [], ["d2"], abstained=True, query=q2),  # abstained
        trace("baseline", 0, "s2", 1, BOLTS, [], ["d3", "d4", "d1", "d2"], query=q3),  # no citation: top 3
        trace("rewrite", 0, "s1", 1, GOOD, ["d1"], ["d1"], query=q1, issued=["holiday days per year"]),  # same call
        trace("rewrite", 0, "s1", 2, BROKEN, ["d2"], ["d2"], query=q2, issued=["rail travel class"]),
    ]
    rows[0]["round"] = 2  # its answer is the second round's: the first, below, is a round of its own
    rows.append({**trace("baseline", 0, "s1", 1, "an earlier round", ["d1"], ["d1"], query=q1), "is_final": False})
    pq.write_table(rows_to_table(rows), run / "traces" / "part-00000-test.parquet")
    return run


def judgments(run: Path, metric: str = "faithfulness") -> dict:
    t = pq.read_table(run / JUDGMENTS).to_pylist()
    return {(r["arm_id"], r["session_id"], r["turn_index"]): r for r in t if r["metric"] == metric}


def test_faithfulness_through_our_client(tmp_path, srv):
    run = make_run(tmp_path, srv)
    assert judge_run(run) == run / JUDGMENTS
    j = judgments(run)
    assert len(j) == 5  # one per final row
    good = j[("baseline", "s1", 1)]
    assert good["status"] == "ok" and good["metric"] == "faithfulness" and good["judge_model"] == "judge-model"
    assert good["value"] == pytest.approx(2 / 3) and good["n_statements"] == 3 and good["n_supported"] == 2
    assert good["question"] == "How many holiday days do I get?" and good["context_doc_ids"] == ["d1"]
    rw = j[("rewrite", "s1", 1)]
    assert rw["value"] == pytest.approx(2 / 3) and rw["issued_query"] == "holiday days per year"
    assert rw["question"] == "How many holiday days do I get?"  # the user's question, not the rewrite
    bolts = j[("baseline", "s2", 1)]
    assert bolts["value"] == 1.0 and bolts["context_doc_ids"] == ["d3", "d4", "d1"]
    assert j[("baseline", "s1", 2)]["status"] == SKIPPED and j[("baseline", "s1", 2)]["value"] is None

    # what the judge sent: Ragas' prompt through our client, its reply model as a strict json_schema
    # (a grammar on llama-server), not instructor's JSON mode (json_object, the schema only in the text)
    reqs = [r.json for r in srv.requests if r.path.endswith("/chat/completions") and not is_question(r.json)]
    assert reqs and all(r["response_format"]["type"] == "json_schema" and r["response_format"]["json_schema"]["strict"]
                        is True and r["model"] == "judge-model" for r in reqs)
    assert {schema_name(r) for r in reqs} == {"StatementGeneratorOutput", "NLIStatementOutput"}
    assert all(r["messages"][0] == {"role": "system", "content": SYSTEM} for r in reqs)
    assert all(r["max_tokens"] == FAITHFULNESS_MAX_TOKENS == 1024 and r["temperature"] == 0 for r in reqs)
    nli_schema = next(r for r in reqs if is_verdicts(r))["response_format"]["json_schema"]["schema"]
    answer = nli_schema["$defs"]["StatementFaithfulnessAnswer"]
    assert nli_schema["additionalProperties"] is False and nli_schema["required"] == ["statements"]
    assert answer["additionalProperties"] is False and answer["required"] == ["statement", "reason", "verdict"]
    # every list and string bounded, so a small model's grammar stops before max_tokens (issue 41)
    assert nli_schema["properties"]["statements"]["maxItems"] == JUDGE_STATEMENTS
    assert answer["properties"]["statement"]["maxLength"] == STATEMENT_CHARS
    assert answer["properties"]["reason"]["maxLength"] == REASON_CHARS
    assert (answer["properties"]["verdict"]["minimum"], answer["properties"]["verdict"]["maximum"]) == (0, 1)
    extract_schema = next(r for r in reqs if is_statements(r))["response_format"]["json_schema"]["schema"]
    assert extract_schema["properties"]["statements"]["maxItems"] == JUDGE_STATEMENTS
    assert extract_schema["properties"]["statements"]["items"]["maxLength"] == STATEMENT_CHARS
    assert not any("tools" in r for r in reqs)
    extract = [r for r in reqs if is_statements(r) and "30 days" in r["messages"][-1]["content"]]
    nli = [r for r in reqs if is_verdicts(r) and STATEMENTS[0] in r["messages"][-1]["content"]]
    assert len(extract) == 1 and len(nli) == 1  # baseline and rewrite share one judgment of the same triple
    assert "Break down each sentence" in extract[0]["messages"][-1]["content"]
    assert "How many holiday days do I get?" in extract[0]["messages"][-1]["content"]
    assert GOOD in extract[0]["messages"][-1]["content"]
    assert "judge the faithfulness" in nli[0]["messages"][-1]["content"]
    assert "Employees get 30 days of holiday per calendar year." in nli[0]["messages"][-1]["content"]  # d1's text
    assert all(s in nli[0]["messages"][-1]["content"] for s in STATEMENTS)


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def test_broken_judge_is_unmeasured(tmp_path, srv):
    run = make_run(tmp_path, srv)
    r = cli("judge", run)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("judge: "))
    assert "1 unmeasured" in line
    j = judgments(run)
    broken = j[("rewrite", "s1", 2)]
    assert broken["value"] is None and broken["status"].startswith("error")
    assert "statement extraction" in broken["status"] and "attempt" in broken["status"]
    assert j[("baseline", "s1", 1)]["status"] == "ok"  # the other rows were judged
    assert sum(1 for r in j.values() if r["status"] == "ok") == 3


def test_invalid_reply_is_repaired_once_then_a_named_error(tmp_path, srv):
    """The broken judge's reply never parses: one repair (the reply and the problem shown to the
    model), then the row's status names the kind; a reply that parses after the repair is measured."""
    srv.add_rule({"statements": STATEMENTS}, fault="invalid_json", fault_times=1,  # the 30-days statements,
                 when=lambda r: is_statements(r) and "30 days" in prompt(r))
    srv.script.rules.insert(0, srv.script.rules.pop())  # invalid the first time: first
    run = make_run(tmp_path, srv)
    judge_run(run)
    j = judgments(run)
    broken = j[("rewrite", "s1", 2)]
    assert broken["value"] is None and broken["n_statements"] is None
    assert broken["status"].startswith("error: statement extraction: invalid JSON: ") and \
        broken["status"].endswith("(after 2 attempts)"), broken["status"]
    asked = [r.json for r in srv.requests if r.path.endswith("/chat/completions") and is_statements(r.json)]
    mine = [r for r in asked if BROKEN in prompt(r)]
    assert [len(r["messages"]) for r in mine] == [2, 4]  # the question, then the question and the repair
    repair = mine[1]["messages"]
    assert repair[2]["role"] == "assistant" and "not valid (invalid JSON" in repair[3]["content"]
    good = [r for r in asked if GOOD in prompt(r)]
    assert len(good) == 2 and j[("baseline", "s1", 1)]["status"] == "ok"  # repaired: measured
    assert j[("baseline", "s1", 1)]["value"] == pytest.approx(2 / 3)


def test_http_error_is_unmeasured(tmp_path, srv):
    run = make_run(tmp_path, srv)
    srv.set_faults("500")
    judge_run(run)
    j = judgments(run)
    answered = [r for r in j.values() if r["status"] != SKIPPED]
    assert answered and all(r["value"] is None and r["status"].startswith("error") for r in answered)
    assert any("500" in r["status"] for r in answered)


def test_cache_second_run_zero_calls_refresh_asks_again(tmp_path, srv):
    run = make_run(tmp_path, srv)
    judge_run(run)
    first, calls = judgments(run), srv.calls
    assert calls > 0
    summary = judge_command(run)
    again = [r for r in srv.requests[calls:]]
    # every request served from the cache but the broken judge's: its invalid replies were not cached
    assert again and all("BROKEN-JUDGE" in json.dumps(r.json["messages"]) for r in again)
    # counted over both metrics' clients (faithfulness at 1024 tokens, the question at 256)
    assert summary.http_calls == len(again) and summary.cache_hits == calls - len(again) > 0
    assert judgments(run) == first
    before = srv.calls
    judge_run(run, refresh=True)
    assert srv.calls - before == calls  # the judge asked again
    assert judgments(run) == first


def test_no_judge_endpoint_not_measured(tmp_path):
    run = make_run(tmp_path, None)
    assert cli("judge", run).exit_code == 0
    j = judgments(run)
    answered = [r for k, r in j.items() if k != ("baseline", "s1", 2)]
    assert len(answered) == 4
    assert all(r["status"] == NOT_MEASURED and r["value"] is None and r["judge_model"] is None for r in answered)
    assert not any(r["value"] is not None and not math.isnan(r["value"]) for r in j.values())


def test_not_a_run_folder(tmp_path):
    r = cli("judge", tmp_path / "nothing")
    assert r.exit_code == 2 and "not a run folder" in r.output


def test_no_key_on_disk(tmp_path, srv, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", MARKER)
    run = make_run(tmp_path, srv, api_key_env="OPENAI_API_KEY")
    judge_run(run)
    assert srv.requests and all(r.headers.get("authorization") == "***" for r in srv.requests)  # a key was sent
    files = [p for p in [*run.rglob("*"), *(tmp_path / "llmcache").rglob("*")] if p.is_file()]
    assert any(p.name == JUDGMENTS for p in files) and any(p.suffix == ".sqlite" for p in files)
    for p in files:
        assert MARKER.encode() not in p.read_bytes(), p


def test_judge_with_its_endpoint_down_exits_3_and_keeps_the_rows(tmp_path, srv):
    run = make_run(tmp_path, srv)
    srv.set_faults("500")
    r = cli("judge", run)
    assert r.exit_code == 3 and "infrastructure" in r.output, r.output
    j = judgments(run)
    asked = [r for r in j.values() if r["status"] != SKIPPED]
    assert asked and all(r["status"].startswith("error") for r in asked)  # written all the same


def test_judge_with_an_endpoint_on_the_command_line_then_gate(tmp_path, srv):
    """`harness judge RUN --endpoint URL --model M` over a run whose config has no judge, then
    `harness gate` with a faithfulness rule: the gate's verdict, without `harness metrics` between."""
    from typer.testing import CliRunner

    from harness.cli import app

    def cli(*args):
        r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})
        assert "Traceback" not in r.output, r.output
        return r

    import yaml

    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"name": "j", "eval_set": str(write_set(tmp_path / "set")),
                                   "runs_dir": str(tmp_path / "runs"), "arms": [{"name": "original", "answer": True}],
                                   "llm": {"cache": {"folder": str(tmp_path / "llmcache")}}}))
    base, cand = tmp_path / "runs" / "b", tmp_path / "runs" / "c"
    for run in (base, cand):  # no judge in the config
        assert cli("run", cfg, "--run-id", run.name, "--no-progress").exit_code == 0
    pol = tmp_path / "policy.yaml"
    pol.write_text("min_sessions: 2\nrules:\n  - {metric: faithfulness, max_drop: 0.05}\n")
    gate = ("gate", "--baseline", base, "--candidate", cand, "--policy", pol, "-o", tmp_path / "gate")
    before = cli(*gate)
    assert before.exit_code != 0  # nothing judged yet: never a pass
    for run in (base, cand):
        r = cli("judge", run, "--endpoint", srv.base_url, "--model", "judge-model")
        assert r.exit_code == 0 and "metrics:" in r.output, r.output
    judged = [r for r in judgments(base).values() if r["status"] == "ok"]
    assert judged and all(r["judge_model"] == "judge-model" for r in judged)
    after = cli(*gate)
    v = json.loads((tmp_path / "gate" / "gate.json").read_text())
    rule = next(x for x in v["results"] if x["metric"] == "faithfulness")
    assert after.exit_code == 0 and rule["status"] == "pass" and rule["n_sessions"] >= 1, after.output


def test_judge_endpoint_options_are_checked(tmp_path):
    from harness.steps.judge import judge_endpoint

    with pytest.raises(BadInput, match="--endpoint and --model go together"):
        judge_endpoint("http://127.0.0.1:1/v1", None)
    cfg = tmp_path / "judge.yaml"
    cfg.write_text("llm:\n  roles:\n    judge: {kind: openai-compatible, base_url: 'http://127.0.0.1:1/v1', model: j}\n")
    assert judge_endpoint(None, None, config=cfg).model == "j"
    cfg.write_text("kind: openai-compatible\nmodel: j\nbogus: 1\n")
    with pytest.raises(BadInput, match="not a judge endpoint") as e:
        judge_endpoint(None, None, config=cfg)
    assert f"{cfg}:3: bogus: " in str(e.value)  # file, line and field, as every file a user writes
    cfg.write_text("llm:\n  roles:\n    judge:\n      kind: openai-compatible\n      modle: j\n")
    with pytest.raises(BadInput) as e:
        judge_endpoint(None, None, config=cfg)
    assert f"{cfg}:5: llm.roles.judge.modle: " in str(e.value)
    cfg.write_text("llm:\n  roles: {}\n")
    with pytest.raises(BadInput, match="no llm.roles.judge in this run config"):
        judge_endpoint(None, None, config=cfg)
    cfg.write_text("kind: [openai\n")
    with pytest.raises(BadInput, match=f"{cfg}:2: invalid YAML"):  # exit 2, as every file a user writes
        judge_endpoint(None, None, config=cfg)


def test_a_judge_endpoint_read_back_from_a_manifest_expands_its_variables(monkeypatch):
    """demo-llm's configs write `base_url: ${HARNESS_LOCAL_LLM_URL}`; the judge and relevance steps
    read the endpoint back from the manifest as written, so the client expands it (it called the
    literal `${…}` before), and an unset variable is bad input, not a connection error."""
    from harness.llm.client import LLMClient
    from harness.llm.endpoint import EndpointConfig
    from harness.steps.relevance import relevance_endpoint

    ep = relevance_endpoint({"llm": {"roles": {"judge": {"kind": "openai-compatible", "model": "m",
                                                          "base_url": "${JUDGE_TEST_URL}/v1"}}}})
    monkeypatch.setenv("JUDGE_TEST_URL", "http://127.0.0.1:9")
    assert ep.resolved_base_url() == "http://127.0.0.1:9/v1"
    assert str(LLMClient(ep, None).sdk.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    monkeypatch.delenv("JUDGE_TEST_URL")
    with pytest.raises(BadInput, match="JUDGE_TEST_URL.*not set"):
        EndpointConfig(kind="openai-compatible", model="m", base_url="${JUDGE_TEST_URL}/v1").resolved_base_url()
