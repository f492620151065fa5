"""The grade role: do the hits support the turn's standalone question? Offline: a dense-score
threshold plus query-term coverage of the top passages; when insufficient, a new query from
the question's terms and the top passages' salient terms."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.roles.text import coverage, salient_terms, terms


class GradeOutput(BaseModel):
    sufficient: bool
    reason: str = Field(max_length=400)
    new_query: str = Field(max_length=300)


def grade_offline(question: str, passages: list[tuple[str, str, float]], threshold: float = 0.82,
                  min_coverage: float = 0.5, tried: list[str] = ()) -> GradeOutput:
    """passages: (doc_id, text, dense score) of the hits, best first."""
    if not passages:
        return GradeOutput(sufficient=False, reason="no hits", new_query="")
    top_id, top_text, top_score = passages[0]
    cov = max(coverage(question, t) for _, t, _ in passages)
    if top_score >= threshold and cov >= min_coverage:
        return GradeOutput(sufficient=True, reason=f"top hit {top_id}: score {top_score:.3f} >= {threshold}, "
                           f"term coverage {cov:.2f} >= {min_coverage}", new_query="")
    q_terms = terms(question)
    extra = salient_terms([t for _, t, _ in passages[:3]], set(q_terms), n=4)
    new = " ".join(q_terms + extra)
    if not new or new in tried:
        new = ""
    return GradeOutput(sufficient=False, reason=f"top hit {top_id}: score {top_score:.3f}, term coverage {cov:.2f} "
                       f"(needs score >= {threshold} and coverage >= {min_coverage})", new_query=new)
