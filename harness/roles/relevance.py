"""The relevance role: how well a passage serves a turn's need, graded 0-3 on the scale of
UMBRELA (Upadhyay et al. 2024, the open reproduction of the Bing assessor prompt of Thomas et al.,
SIGIR 2024): 0 nothing to do with the query, 1 on topic but no answer, 2 part of the answer,
3 the exact answer. Asked by `harness judge RUN --relevance` (harness/steps/relevance.py) about
the documents no person labelled for a turn. Its prompt is `relevance.v1` or a team's file; its
reply is strict JSON. It has no offline stand-in: without an endpoint a pair is not labelled
(a script's number is never a model's judgment)."""
from __future__ import annotations

import re

from pydantic import ConfigDict, Field

from harness.strict import Strict
from harness.unmeasured import MEASURED

ROLE = "relevance"
HOLE, AGREEMENT = "hole", "agreement"  # why a pair was graded: nobody labelled it; people did (to compare)
OK = MEASURED  # a row's status when the grade is the model's
PROMPT = "relevance.v1"
GRADES = (0, 1, 2, 3)
# The eval sets' scale: 1 relevant, 2 highly relevant, missing: not relevant. UMBRELA's 1 ("on
# topic, no answer") is not relevant there, as TREC's binary measures count it (trec_eval -l 2).
DEFAULT_GRADE_MAP = (0, 0, 1, 2)
HISTORY_TURNS = 3  # earlier user turns shown with the query
PASSAGE_CHARS = 4000


class RelevanceOutput(Strict):
    model_config = ConfigDict(strict=True)  # 2, not true, "2" or 2.0
    relevance: int = Field(ge=0, le=3)


def relevance_message(query: str, history: list[str], passage: str) -> str:
    """The user message for one (turn, document) pair: the query, up to HISTORY_TURNS earlier user
    turns (oldest first) and the passage (its title first)."""
    lines = [f"Query: {query.strip()}"]
    earlier = [h.strip() for h in history if h and h.strip()][-HISTORY_TURNS:]
    if earlier:
        lines.append("Earlier in the conversation, the user asked:")
        lines += [f"- {h}" for h in earlier]
    text = passage.strip()
    lines += ["Passage:", text[:PASSAGE_CHARS] + ("…" if len(text) > PASSAGE_CHARS else "")]
    return "\n".join(lines)


def parse_grade_map(spec: str) -> tuple[int, ...]:
    """`--grade-map 0,0,1,2`: the eval-set grade given to each LLM grade 0..3."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != len(GRADES) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise ValueError(f"--grade-map {spec!r}: expected {len(GRADES)} non-negative integers, the eval-set grade for "
                         "each LLM grade 0,1,2,3 (default 0,0,1,2: 0 and 1 not relevant, 2 relevant, 3 highly)")
    return tuple(int(p) for p in parts)


def grade_map_text(grade_map) -> str:
    return ",".join(str(int(g)) for g in grade_map)
