"""Reciprocal rank fusion of per-query rankings (the kernel; tests check it against ranx's
`fuse(method="rrf")`). score(d) = sum over lanes of 1 / (k + rank_lane(d)), ranks from 1."""
from __future__ import annotations


def order(scored: dict[str, float]) -> list[tuple[str, float]]:
    """Score descending, then doc id descending (trec_eval's tie rule)."""
    by_id = sorted(scored.items(), key=lambda x: x[0], reverse=True)
    return sorted(by_id, key=lambda x: -x[1])  # stable: ties keep doc id descending


def rrf(rankings: list[list[str]], k: int = 60, cap: int | None = None) -> list[tuple[str, float]]:
    """Fuse ranked doc-id lists (best first, duplicates within a list ignored after the first)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen = set()
        r = 0
        for d in ranking:
            if d in seen:
                continue
            seen.add(d)
            r += 1
            scores[d] = scores.get(d, 0.0) + 1.0 / (k + r)
    out = order(scores)
    return out[:cap] if cap else out
