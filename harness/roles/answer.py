"""The answer role: answer from the hits with the source in brackets, or abstain. Offline:
extractive, the best sentences of the top passages (by embedding support when the arm has
measured it, else by term coverage), each with its [doc_id]; the fixed abstention text in the
turn's language when nothing covers the question."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.llm.schema import bound
from harness.roles.text import best_sentences

ASK_ANSWER, ASK_DOCS, ASK_ID = 400, 3, 40  # what a model is asked to write (the strict schema's bounds)

ABSTAIN = {"en": "I find nothing on this in the knowledge base.",
           "de": "Dazu finde ich nichts in der Wissensdatenbank."}


class AnswerOutput(BaseModel):
    answer: str = Field(max_length=2000, json_schema_extra=bound(ASK_ANSWER))
    doc_ids: list[str] = Field(json_schema_extra=bound(max_items=ASK_DOCS, item_max_length=ASK_ID))
    abstained: bool


QUOTE_CHARS = 600  # a quoted "sentence" can be a whole unpunctuated passage: the answer stays within its schema


def _quote(sentence: str) -> str:
    return sentence if len(sentence) <= QUOTE_CHARS else sentence[:QUOTE_CHARS - 1].rstrip() + "…"


def abstention(language: str | None) -> str:
    return ABSTAIN.get(language or "en", ABSTAIN["en"])


def answer_offline(question: str, passages: list[tuple[str, str]], language: str | None, k: int = 2,
                   must_answer: bool = False) -> AnswerOutput:
    """passages: (doc_id, text), best first; the answer cites the passages it quotes. Without
    any sentence that shares a term with the question it abstains, unless `must_answer` (a
    grader already judged the passages sufficient, e.g. across languages where terms cannot
    match): then it quotes the lead sentences of the top passage."""
    parts, used = [], []
    for doc_id, text in passages[:3]:
        sents = best_sentences(question, text, k=k - len(parts))
        for s in sents:
            parts.append(f"{_quote(s)} [{doc_id}]")
            if doc_id not in used:
                used.append(doc_id)
        if len(parts) >= k:
            break
    if not parts and must_answer and passages:
        from harness.corpus.chunk import split_sentences

        doc_id, text = passages[0]
        parts, used = [f"{_quote(s)} [{doc_id}]" for s in split_sentences(text)[:k]], [doc_id]
    if not parts:
        return AnswerOutput(answer=abstention(language), doc_ids=[], abstained=True)
    return AnswerOutput(answer=" ".join(parts), doc_ids=used, abstained=False)


def answer_from_evidence(evidence: list[tuple[str, str, float]], language: str | None, k: int = 2) -> AnswerOutput:
    """evidence: (doc_id, sentence, support), best first (a grader already judged it
    sufficient). Quotes the `k` best-supported sentences, each with its [doc_id]."""
    top = evidence[:k]
    if not top:
        return AnswerOutput(answer=abstention(language), doc_ids=[], abstained=True)
    return AnswerOutput(answer=" ".join(f"{_quote(s)} [{d}]" for d, s, _ in top), doc_ids=list(dict.fromkeys(d for d, _, _ in top)),
                        abstained=False)
