"""The grade role: do the hits support the turn's standalone question? Offline: the best
support among the hits (`harness/corpus/support.py`: meaning plus concepts, each in standard
deviations above the question's own baseline over the knowledge base) against `z_min`; when
insufficient, a new query that learns from the round: by negative relevance feedback when the
rejected hits share terms with the question, by the passages below the hits when they share none
(docs/roles.md)."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.corpus.support import Support
from harness.llm.schema import bound
from harness.roles.text import salient_terms, terms, uncarried, within

Z_MIN = 6.81  # chosen on handbook-de's main split by scripts/calibrate_grader.py (top_k=3)
FEEDBACK_DOCS = 2  # the best-supported passages below the hits that feed the next query
FEEDBACK_TERMS = 4
BELOW = 10  # how far below `top_k` the offline grader looks for them


REASON_CHARS, QUERY_CHARS = 400, 300  # what a grader (model or offline) may write
ASK_REASON, ASK_QUERY = 120, 150  # what a model is asked to write (the strict schema's bounds)


class GradeOutput(BaseModel):
    sufficient: bool
    reason: str = Field(max_length=REASON_CHARS, json_schema_extra=bound(ASK_REASON))
    new_query: str = Field(max_length=QUERY_CHARS, json_schema_extra=bound(ASK_QUERY))


def _graded(sufficient: bool, reason: str, new_query: str) -> GradeOutput:
    """The offline grader's verdict within the schema a model's must meet."""
    return GradeOutput(sufficient=sufficient, reason=within(reason, REASON_CHARS), new_query=new_query)


def grade_offline(question: str, passages: list[tuple[str, Support]], z_min: float = Z_MIN,
                  tried: list[str] = (), rejected: list[str] = (),
                  below: list[tuple[str, Support]] = ()) -> GradeOutput:
    """passages: (text, support) per hit, in rank order. Sufficient when the best support
    reaches `z_min`. Neither view alone is enough: dense similarity rewards a sentence on the
    question's topic that does not answer it (a laptop-on-a-train question and "a defective
    laptop is replaced within a day"), and the concept match alone misses paraphrase.

    When insufficient, the next query learns from the round, one of two ways:
    1. Negative relevance feedback (Rocchio's γ term, on terms; Wang, Fang and Zhai, SIGIR 2008)
       when the hits graded insufficient so far (these and `rejected`, the earlier rounds'
       texts) share terms with the question: they matched the question on those terms and
       still did not answer it, so those terms are its setting rather than its need. The next
       query is the question's terms with the ones no rejected hit carries counted twice. The
       whole question stays in: a conversational turn's topic terms are carried by every hit
       on the topic (dropping them cost MTRAG-UN's main split 0.14 recall@10). When they carry
       every term of the question, or that query was tried: no new query.
    2. When the rejected hits share no term with the question (no setting to tell apart),
       pseudo-relevance feedback from below the hits: the question's terms plus the salient
       terms of the best-supported passages that sat below `top_k` (`below`: (text, support),
       not yet graded), less the terms this round's hits are about. Nothing below, or nothing
       new: no new query.
    No new query: the loop stops rather than repeat the rejected topic."""
    if not passages:
        return _graded(sufficient=False, reason="no hits", new_query="")
    _, best = max(passages, key=lambda p: p[1].z)
    why = f"best hit {best.doc_id}: support {best.describe()} above the question's baseline (needs {z_min:.2f})"
    if best.z >= z_min:
        return _graded(sufficient=True, reason=why, new_query="")
    kept, carried = uncarried(question, [t for t, _ in passages] + list(rejected))
    new = within(" ".join(terms(question) + kept), QUERY_CHARS)
    if carried and (not kept or new in tried):
        return _graded(sufficient=False, reason=why + "; nothing new to weigh (the rejected hits carry every "
                       "term of the question, or the query was tried)", new_query="")
    if carried:
        return _graded(sufficient=False, new_query=new,
                       reason=f"{why}; next: the question with its terms no rejected hit carries counted twice "
                              f"({' '.join(kept)}), the setting the rejected hits matched once ({' '.join(carried)})")
    return _from_below(question, passages, below, tried, why)


def _from_below(question: str, passages, below, tried, why: str) -> GradeOutput:
    """Step 2 of `grade_offline`: the question plus what the best passages below the hits say."""
    if not below:
        return _graded(sufficient=False, reason=why + "; no candidate below the hits", new_query="")
    q_terms = terms(question)
    about = set(salient_terms([t for t, _ in passages], set(q_terms), n=6))
    lead = sorted(below, key=lambda p: -p[1].z)[:FEEDBACK_DOCS]
    extra = salient_terms([t for t, _ in lead], set(q_terms) | about, n=FEEDBACK_TERMS)
    new = within(" ".join(q_terms + extra), QUERY_CHARS)
    if not extra or new in tried:
        return _graded(sufficient=False, reason=why + "; nothing new below the hits", new_query="")
    src = ", ".join(f"{s.doc_id} ({s.z:.2f})" for _, s in lead)
    return _graded(sufficient=False, new_query=new,
                   reason=f"{why}; next: terms of {src} from below the hits ({' '.join(extra)})")
