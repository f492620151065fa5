"""The judge role: Ragas faithfulness (Ragas 0.4's collections API,
`ragas.metrics.collections.Faithfulness`) with an LLM from `ragas.llms.llm_factory(model,
client=...)`, where the client is the `AsyncOpenAI` of our own `LLMClient`: every request Ragas
(through instructor, JSON mode) builds goes through our transport and so through the LLM cache.
Faithfulness is two calls per answer: statement extraction (the answer broken into atomic
statements) and verdicts (NLI: is each statement inferable from the retrieved contexts); the
score is supported statements over all statements. A failure (broken JSON after instructor's
re-asks, an HTTP error after the retries, a cache miss in replay mode) is a Verdict with value
None and an `error: ...` status, never an exception. The step that asks it about a run folder
is harness/run/judge.py."""
from __future__ import annotations

from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Any

from harness.defaults import JUDGED_METRIC
from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.transport import ROLE_HEADER

ROLE = "judge"
METRIC = JUDGED_METRIC  # the judged metric this role gives (harness/metrics/families/judged.py)
OK = "ok"


@dataclass
class Verdict:
    value: float | None
    status: str
    n_statements: int | None = None
    n_supported: int | None = None


def _counting_llm(llm):
    """`llm` (ragas's InstructorLLM) behind the same public interface, noting which step of
    Faithfulness's pipeline each call is (by the reply it asks for) and the statement counts of
    the verdicts: a Faithfulness metric built on it reports them without reaching into its steps."""
    from ragas.llms.base import InstructorBaseRagasLLM
    from ragas.metrics.collections.faithfulness.util import NLIStatementOutput, StatementGeneratorOutput

    stages = {StatementGeneratorOutput: "statement extraction", NLIStatementOutput: "verdicts"}

    class CountingLLM(InstructorBaseRagasLLM):
        stage = "start"
        n_statements: int | None = None
        n_supported: int | None = None

        def generate(self, prompt, response_model):
            raise NotImplementedError("the judge calls its LLM asynchronously")

        async def agenerate(self, prompt, response_model):
            self.stage = stages.get(response_model, self.stage)
            out = await llm.agenerate(prompt, response_model)
            if response_model is NLIStatementOutput:
                self.n_statements = len(out.statements)
                self.n_supported = sum(1 for st in out.statements if st.verdict)
            return out

    return CountingLLM()


def first_lines(e: BaseException, n: int = 2) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip() and not x.strip().startswith("For further information")]
    return "; ".join(lines[:n])[:240]


def _one(e: BaseException) -> str:
    from pydantic import ValidationError

    if isinstance(e, ValidationError):  # the judge's reply did not parse or fit the schema
        errs = e.errors()
        where = ".".join(str(x) for x in errs[0]["loc"]) if errs and errs[0]["loc"] else ""
        msg = errs[0]["msg"] if errs else str(e)
        return f"invalid reply for {e.title}: {where + ': ' if where else ''}{msg}"[:240]
    status = getattr(e, "status_code", None)
    return f"{type(e).__name__}{f' {status}' if status else ''}: {first_lines(e)}"


def describe_error(e: BaseException) -> str:
    """A short, secret-free description: instructor's retry wrapper is unwrapped to the last
    attempt's error (the invalid JSON, the HTTP status)."""
    failed = getattr(e, "failed_attempts", None)
    if failed:
        n = getattr(e, "n_attempts", None) or len(failed)
        return f"{_one(failed[-1].exception)} (after {n} attempt{'s' if n != 1 else ''})"
    return _one(e)


@contextlib.contextmanager
def _quiet_instructor():
    """instructor logs every failed attempt at ERROR with the whole reply; the step records the
    failure on the row instead."""
    log = logging.getLogger("instructor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _llm_kwargs(ep: EndpointConfig) -> dict[str, Any]:
    kw: dict[str, Any] = {"temperature": ep.temperature}
    # Ragas' statement lists with reasons need room: its own default (1024) unless set on the endpoint
    kw["max_tokens"] = ep.max_tokens if "max_tokens" in ep.model_fields_set else max(ep.max_tokens, 1024)
    if ep.extra_body:
        kw["extra_body"] = ep.extra_body
    return kw


async def _judge_one(llm, sem: asyncio.Semaphore, question: str, answer: str, contexts: list[str]) -> Verdict:
    from ragas.metrics.collections import Faithfulness

    counted = _counting_llm(llm)
    metric = Faithfulness(llm=counted)
    try:
        async with sem:
            res = await metric.ascore(user_input=question, response=answer, retrieved_contexts=contexts)
    except Exception as e:  # recorded on the row; the step goes on
        return Verdict(None, f"error: {counted.stage}: {describe_error(e)}", counted.n_statements, counted.n_supported)
    value = res.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        n = counted.n_statements if counted.n_statements is not None else 0
        return Verdict(None, "error: the judge found no statements in the answer", n, counted.n_supported)
    return Verdict(float(value), OK, counted.n_statements, counted.n_supported)


class RagasJudge:
    """The judge role on one endpoint: `async with RagasJudge(ep, cache, n) as j: await
    j.faithfulness([(question, answer, contexts), ...])`. HTTP calls and cache hits are counted."""

    def __init__(self, endpoint: EndpointConfig, cache: LLMCache, concurrency: int):
        self.endpoint, self.concurrency = endpoint, concurrency
        self.client = LLMClient(endpoint, cache, connections=concurrency)
        self.http_calls = self.cache_hits = 0

    async def __aenter__(self) -> "RagasJudge":
        return self

    async def __aexit__(self, *exc) -> None:
        self.http_calls, self.cache_hits = self.client.stats.http_calls, self.client.stats.cache_hits
        await self.client.aclose()

    async def faithfulness(self, triples: list[tuple[str, str, list[str]]]) -> list[Verdict]:
        from ragas.llms import llm_factory

        ep = self.endpoint
        # retries (429/5xx/timeouts, honouring Retry-After) by the SDK over our transport
        sdk = self.client.sdk.with_options(max_retries=ep.max_retries, default_headers={ROLE_HEADER: ROLE})
        llm = llm_factory(ep.model, client=sdk, **_llm_kwargs(ep))
        sem = asyncio.Semaphore(self.concurrency)
        with _quiet_instructor():
            return list(await asyncio.gather(*(_judge_one(llm, sem, q, a, c) for q, a, c in triples)))
