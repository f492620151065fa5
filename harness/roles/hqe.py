"""Published non-LLM query reformulation for the offline rewrite role (`method: hqe`), and the
query variants `multi_query_rrf` fuses. docs/roles.md cites each and says how it differs here.

- **HQE**, historical query expansion (Yang, Lin, Wang, Lin, Tsai: "Query and Answer Expansion
  from Conversation History", TREC CAsT 2019; as in castorini/chatty-goose): a word of a user
  turn is a *topic* keyword when its single-word BM25 retrieval scores at least R_topic, a
  *subtopic* keyword from R_sub; the turn is expanded with the topic keywords of every turn,
  and, when its own BM25 retrieval scores no more than eta (query performance prediction: an
  ambiguous turn), with the subtopic keywords of the last M turns.
- **Previous-turn expansion**: the turn with the content terms of the user's previous turn (the
  "utterance plus last utterance" baseline of CAsT).
- **RM3** pseudo-relevance feedback (Abdul-Jaleel et al., UMass at TREC 2004; Pyserini's
  defaults: 10 feedback documents, 10 terms): the terms most probable under the relevance
  model of the query's top BM25 documents, appended to the query.

Scores: the paper's thresholds are absolute Lucene BM25 scores on CAsT's 38.6M passages. Here a
score is divided by ln(1 + N), N the corpus's chunks (the largest idf a word can have), and the
thresholds are the paper's divided by CAsT's ln(1 + N), so they carry over to any corpus size
without being tuned on an eval set."""
from __future__ import annotations

import math
from collections import Counter

from harness.corpus.tokenize import tokenize
from harness.roles.state import CompactState
from harness.roles.text import terms

CAST_LN_N = math.log1p(38_636_520)  # CAsT 2019: MS MARCO + TREC CAR passages
R_TOPIC, R_SUB, ETA, M = 4.5 / CAST_LN_N, 3.5 / CAST_LN_N, 10.0 / CAST_LN_N, 5  # chatty-goose's CAsT defaults
FB_DOCS, FB_TERMS = 10, 10


class Scorer:
    """Normalised BM25 scores on one index: of a word alone (cached per index) and of a query."""

    def __init__(self, index):
        self.index = index
        self.norm = math.log1p(len(index.chunks))
        cache = getattr(index, "_hqe_word_scores", None)
        if cache is None:
            cache = index._hqe_word_scores = {}
        self.words = cache

    def query(self, text: str) -> float:
        hits = self.index.lexical([text], 1)[0]
        return hits[0].score / self.norm if hits else 0.0

    def word(self, word: str) -> float:
        if word not in self.words:
            self.words[word] = self.query(word)
        return self.words[word]


def _keywords(scorer: Scorer, text: str) -> tuple[list[str], list[str]]:
    """(topic, subtopic) keywords of one user turn, in the turn's order."""
    topic, sub = [], []
    for w in dict.fromkeys(terms(text)):
        s = scorer.word(w)
        if s >= R_TOPIC:
            topic.append(w)
        elif s >= R_SUB:
            sub.append(w)
    return topic, sub


def hqe(state: CompactState, index, limit: int | None = None) -> tuple[str, bool, list[str]]:
    """(the expanded query, whether the turn was judged ambiguous, the keywords added). The
    first turn of a conversation is issued as typed. `limit`: the characters the query may have
    (the rewrite schema's); the keywords of the earliest turns give way first, since a long
    conversation's later turns say more about this one."""
    turn = state.turn.strip()
    if not state.history:
        return turn, False, []
    scorer = Scorer(index)
    turns = [t.user for t in state.history] + [turn]
    per_turn = [_keywords(scorer, t) for t in turns]
    added = [w for topic, _ in per_turn for w in topic]
    ambiguous = scorer.query(turn) <= ETA
    if ambiguous:
        added += [w for _, sub in per_turn[-M:] for w in sub]
    added = list(dict.fromkeys(added))
    while limit is not None and added and len(" ".join(added + [turn])) > limit:
        added.pop(0)
    return " ".join(added + [turn]), ambiguous, added


def previous_turn(state: CompactState) -> str:
    """The turn with the content terms of the user's previous turn not already in it."""
    if not state.history:
        return state.turn.strip()
    own = set(terms(state.turn))
    prev = [w for w in dict.fromkeys(terms(state.history[-1].user)) if w not in own]
    return " ".join(prev + [state.turn.strip()])


def rm3(index, query: str, fb_docs: int = FB_DOCS, fb_terms: int = FB_TERMS) -> tuple[str, list[str]]:
    """The query with its RM3 expansion terms appended, and the terms. P(w|R) = sum over the
    top documents of P(w|d) P(d|q), P(d|q) proportional to exp of the BM25 score (a
    document's best chunk); query words and digits are left out."""
    hits = index.lexical([query], fb_docs)[0]
    if not hits:
        return query, []
    top = max(h.score for h in hits)
    weight = {h.doc_id: math.exp(h.score - top) for h in hits}
    total = sum(weight.values())
    own = set(tokenize(query))
    rel: Counter = Counter()
    for d, w in weight.items():
        for t, p in _doc_model(index, d).items():
            if t not in own:
                rel[t] += p * (w / total)
    expansion = [t for t, _ in sorted(rel.items(), key=lambda kv: (-kv[1], kv[0]))[:fb_terms]]
    return (query + " " + " ".join(expansion)).strip(), expansion


def _doc_model(index, doc_id: str) -> dict[str, float]:
    """P(w|d) of a feedback document (words longer than two letters, no digits), in the order
    the words first occur; kept in the run's memo, since the same documents come back as
    feedback turn after turn."""
    def model() -> dict[str, float]:
        toks = [t for t in tokenize(index.docs[doc_id].text) if len(t) > 2 and not t.isdigit()]
        return {t: n / len(toks) for t, n in Counter(toks).items()}

    memo = getattr(index, "memo", None)
    return model() if memo is None else memo(("rm3-doc", doc_id), model)[0]
