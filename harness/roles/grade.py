"""The grade role: do the hits support the turn's standalone question? Offline: a dense-score
threshold plus query-term coverage of the top passages; when insufficient, a new query from
the question's terms and the top passages' salient terms."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.roles.lang import detect_language
from harness.roles.text import coverage, salient_terms, terms


class GradeOutput(BaseModel):
    sufficient: bool
    reason: str = Field(max_length=400)
    new_query: str = Field(max_length=300)


def grade_offline(question: str, passages: list[tuple[str, str, float]], threshold: float = 0.82,
                  min_coverage: float = 0.4, tried: list[str] = (), cross_margin: float = 0.04) -> GradeOutput:
    """passages: (doc_id, text, similarity of the question to the passage), best first.
    Sufficient when the best similarity reaches `threshold` and the question's content terms
    are covered by a passage (>= `min_coverage`). Terms cannot match across languages (an
    English question on a German handbook): there the similarity alone decides, against a
    stricter threshold (`threshold + cross_margin`)."""
    if not passages:
        return GradeOutput(sufficient=False, reason="no hits", new_query="")
    best_id, _, best = max(passages, key=lambda p: p[2])
    cov = max(coverage(question, t) for _, t, _ in passages)
    q_lang = detect_language(question)
    cross = all(detect_language(t) != q_lang for _, t, _ in passages)
    if cross:
        ok = best >= threshold + cross_margin
        why = (f"best hit {best_id}: similarity {best:.3f} vs {threshold + cross_margin:.2f} "
               f"(question and passages in different languages: term coverage not used)")
    else:
        ok = best >= threshold and cov >= min_coverage
        why = f"best hit {best_id}: similarity {best:.3f} vs {threshold:.2f}, term coverage {cov:.2f} vs {min_coverage:.2f}"
    if ok:
        return GradeOutput(sufficient=True, reason=why, new_query="")
    q_terms = terms(question)
    extra = salient_terms([t for _, t, _ in passages[:3]], set(q_terms), n=4)
    new = " ".join(q_terms + extra)
    if not new or new in tried:
        new = ""
    return GradeOutput(sufficient=False, reason=why, new_query=new)
