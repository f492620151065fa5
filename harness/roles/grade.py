"""The grade role: do the hits support the turn's standalone question? Offline: how far the
best evidence among the hits stands out from the whole knowledge base (a z-score of the best
support against the question's similarity to every chunk); when insufficient, a new query from
the question's terms and the top passages' salient terms."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.roles.text import salient_terms, terms


class GradeOutput(BaseModel):
    sufficient: bool
    reason: str = Field(max_length=400)
    new_query: str = Field(max_length=300)


def support_z(support: float, reference: tuple[float, float]) -> float:
    """How many standard deviations `support` lies above the question's mean similarity to the
    knowledge base (`Index.reference`); 0 when the knowledge base gives no spread."""
    mu, sd = reference
    return (support - mu) / sd if sd > 0 else 0.0


def grade_offline(question: str, passages: list[tuple[str, str, float]], reference: tuple[float, float],
                  z_min: float = 3.08, tried: list[str] = ()) -> GradeOutput:
    """passages: (doc_id, text, support of the question by the passage), best first;
    reference: mean and standard deviation of the question's similarity to every chunk of the
    knowledge base (`Index.reference`). Sufficient when the best support lies at least `z_min`
    standard deviations above that mean. A raw cosine threshold cannot work here: e5's scores
    are compressed, more so across languages (an English question on a German handbook), and
    differ from question to question; the distance from the question's own baseline does not
    depend on either. `z_min` is chosen on the main split (scripts/calibrate_grader.py)."""
    if not passages:
        return GradeOutput(sufficient=False, reason="no hits", new_query="")
    best_id, _, best = max(passages, key=lambda p: p[2])
    z = support_z(best, reference)
    why = f"best hit {best_id}: support {best:.3f}, {z:.2f} sd above the knowledge base's mean {reference[0]:.3f} (needs {z_min:.2f})"
    if z >= z_min:
        return GradeOutput(sufficient=True, reason=why, new_query="")
    q_terms = terms(question)
    extra = salient_terms([t for _, t, _ in passages[:3]], set(q_terms), n=4)
    new = " ".join(q_terms + extra)
    if not new or new in tried:
        new = ""
    return GradeOutput(sufficient=False, reason=why, new_query=new)
