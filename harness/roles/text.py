"""Term helpers of the offline roles: content terms, coverage with prefix matching (so German
compounds such as `Urlaubstage` match `Urlaub`), the terms of a question no passage carries,
salient terms of passages; and the length a role's output schema allows a text (an offline role
meets the output contract of the model it stands in for)."""
from __future__ import annotations

import math
from collections import Counter

from harness.corpus.chunk import split_sentences
from harness.corpus.tokenize import tokenize


_QUESTION_WORDS = frozenset("""viele viel habe hat haben gibt muss müssen kann können darf dürfen soll sollen welche
welcher welches warum weshalb bitte eigentlich genau many much should would could need does did get got have has
which why please exactly really""".split())


def within(text: str, limit: int | None) -> str:
    """`text` cut to `limit` characters at the last word boundary that fits (no limit: as is)."""
    if limit is None or len(text) <= limit:
        return text
    head = text[:limit + 1]
    cut = head.rsplit(None, 1)[0] if len(head.split()) > 1 else head
    return cut[:limit].rstrip()


def terms(text: str) -> list[str]:
    """Content terms: the lexical tokenizer's terms less question and modal words."""
    return [t for t in tokenize(text) if (len(t) > 2 or any(c.isdigit() for c in t)) and t not in _QUESTION_WORDS]


def _match(a: str, b: str) -> bool:
    if a == b:
        return True
    n = min(len(a), len(b))
    return n >= 5 and a[:5] == b[:5]


def uncarried(question: str, passages: list[str]) -> tuple[list[str], list[str]]:
    """The question's content terms that none of `passages` carries (prefix matching, as in
    `coverage`), and the distinct ones they do carry."""
    carried = {x for p in passages for x in terms(p)}
    q = terms(question)
    kept = [t for t in q if not any(_match(t, x) for x in carried)]
    return kept, list(dict.fromkeys(t for t in q if t not in kept))


def coverage(question: str, passage: str) -> float:
    q = set(terms(question))
    if not q:
        return 0.0
    p = set(terms(passage))
    return sum(1 for t in q if any(_match(t, x) for x in p)) / len(q)


def salient_terms(passages: list[str], exclude: set[str], n: int = 6) -> list[str]:
    """Terms frequent in the passages (tf x log-length weight), not in `exclude`."""
    tf = Counter(t for p in passages for t in terms(p) if t not in exclude and not t.isdigit())
    scored = sorted(tf.items(), key=lambda kv: (-kv[1] * math.log(1 + len(kv[0])), kv[0]))
    return [t for t, _ in scored[:n]]


def best_sentences(question: str, passage: str, k: int = 2) -> list[str]:
    sents = split_sentences(passage)
    scored = sorted(((coverage(question, s), -i, s) for i, s in enumerate(sents)), reverse=True)
    return [s for c, _, s in scored[:k] if c > 0]
