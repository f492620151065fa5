"""How strongly hits support one question, on a scale that holds across questions and
languages. Two views of each unit of evidence (a hit's sentences, or the hit itself with
`unit: chunk`), each as a z-score against the question's own baseline over the knowledge base:

- meaning: the dense similarity of the question to the unit, in standard deviations above the
  question's mean similarity to every chunk (`Index.reference`). Raw cosines cannot be
  thresholded: e5's scores are compressed, more so across languages, and their level differs
  from question to question.
- concepts: the latent-term match of the unit with the question's concepts, each weighted by
  its rarity (`harness/corpus/latent.py`), in standard deviations above the question's mean
  match over the knowledge base's units. It sees what the question is about, across
  languages: "I lost my laptop" shares the concept of loss with "Verlorene oder gestohlene
  Geräte ...", not with "bei einem Defekt bekommst du ein Ersatzgerät".

A unit's support is the sum of the two; a hit's support is its best unit's."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


def support_z(value: float, reference: tuple[float, float]) -> float:
    """How many standard deviations `value` lies above the mean of `reference` (mean, sd);
    0 when the knowledge base gives no spread."""
    mu, sd = reference
    return (value - mu) / sd if sd > 0 else 0.0


@dataclass(frozen=True)
class Support:
    doc_id: str
    meaning: float  # z of the dense similarity
    concepts: float  # z of the latent-term match

    @property
    def z(self) -> float:
        return self.meaning + self.concepts

    def describe(self) -> str:
        return f"{self.z:.2f} sd ({self.meaning:.2f} meaning + {self.concepts:.2f} concepts)"


class SupportScorer:
    """Support of hits for one question. The question's vector and its baselines are computed
    once per turn, and only when a round is scored: with an LLM grader and `support: doc`
    nothing here is needed, and nothing is encoded."""

    def __init__(self, index, question: str, unit: str = "sentence"):
        if unit not in ("sentence", "chunk"):
            raise ValueError(f"support unit must be sentence or chunk, not {unit!r}")
        self.index, self.question, self.unit = index, question, unit

    @cached_property
    def _meaning(self):
        q = self.index.query_vector(self.question)
        return q, self.index.reference(q)

    @cached_property
    def _concepts(self):
        view = self.index.latent(self.unit)
        q = view.question(self.question)
        return view, q, view.reference(q)

    def score(self, hits: list[str]) -> tuple[dict[str, Support], list[tuple[str, str, float]]]:
        """Per hit its best unit's support, and every sentence as evidence (doc_id, sentence,
        support), best first (empty with unit: chunk)."""
        if not hits:
            return {}, []
        q, reference = self._meaning
        if self.unit == "sentence":
            sents = self.index.sentence_scores(q, hits)
            units = [(d, s, sim) for d, ss in sents.items() for s, sim in ss]
        else:
            sims = self.index.similarity(q, hits)
            units = [(d, t, sims[d]) for d in dict.fromkeys(hits) for t in self.index.chunk_texts(d)]
        view, cq, concept_reference = self._concepts
        match = view.match(cq, [t for _, t, _ in units])
        best: dict[str, Support] = {}
        evidence = []
        for (d, text, sim), m in zip(units, match):
            s = Support(d, support_z(sim, reference), support_z(float(m), concept_reference))
            if d not in best or s.z > best[d].z:
                best[d] = s
            evidence.append((d, text, s.z))
        evidence.sort(key=lambda e: -e[2])
        return best, evidence if self.unit == "sentence" else []
