"""The grade role: do the hits support the turn's standalone question? Offline: the best
support among the hits (`harness/corpus/support.py`: meaning plus concepts, each in standard
deviations above the question's own baseline over the knowledge base) against `z_min`; when
insufficient, a new query from the question's terms and the top passages' salient terms."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.corpus.support import Support
from harness.roles.text import salient_terms, terms

Z_MIN = 6.81  # chosen on handbook-de's main split by scripts/calibrate_grader.py (top_k=3)


class GradeOutput(BaseModel):
    sufficient: bool
    reason: str = Field(max_length=400)
    new_query: str = Field(max_length=300)


def grade_offline(question: str, passages: list[tuple[str, Support]], z_min: float = Z_MIN,
                  tried: list[str] = ()) -> GradeOutput:
    """passages: (text, support) per hit, in rank order. Sufficient when the best support
    reaches `z_min`. Neither view alone is enough: dense similarity rewards a sentence on the
    question's topic that does not answer it (a laptop-on-a-train question and "a defective
    laptop is replaced within a day"), and the concept match alone misses paraphrase."""
    if not passages:
        return GradeOutput(sufficient=False, reason="no hits", new_query="")
    _, best = max(passages, key=lambda p: p[1].z)
    why = f"best hit {best.doc_id}: support {best.describe()} above the question's baseline (needs {z_min:.2f})"
    if best.z >= z_min:
        return GradeOutput(sufficient=True, reason=why, new_query="")
    q_terms = terms(question)
    extra = salient_terms([t for t, _ in passages[:3]], set(q_terms), n=4)
    new = " ".join(q_terms + extra)
    if not new or new in tried:
        new = ""
    return GradeOutput(sufficient=False, reason=why, new_query=new)
