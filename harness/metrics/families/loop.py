"""Metrics of arms that retrieve in rounds (the corrective loop), from all rounds of a turn;
`hits_per_round` is what the arm declares it judges each round:

- rounds_used: rounds until the arm stopped;
- rescued: 1 when the first round's hits miss every relevant document and the final round's hit
  one (turns with relevant documents only);
- wasted_rounds: rounds run after a round whose hits already held a relevant document;
- recall_at_stop: recall of the final round's hits."""
from __future__ import annotations

import numpy as np

from harness.metrics.kernel import Long, Scoring, present
from harness.metrics.registry import Template, family

READS = ("round", "ranking", "labels.qrels")
TEMPLATES = [
    Template("rounds_used", "lower", "rounds", "rounds until the arm stopped", needs=("loops",), reads=READS),
    Template("rescued", "higher", "rate", "the first round's hits miss every relevant document, the final round's "
             "hit one", needs=("loops",), reads=READS),
    Template("wasted_rounds", "lower", "rounds", "rounds after a round whose hits already held a relevant document",
             needs=("loops",), reads=READS),
    Template("recall_at_stop", "higher", "share", "recall of the final round's hits", needs=("loops",), reads=READS),
]


@family("loop", TEMPLATES, order=40)
def loop_rows(s: Scoring) -> Long:
    tr, lab, G = s.tr, s.lab, s.groups
    na = present(tr.t.column("not_applicable"))
    hits = s.hits_per_round()
    c = {x: s.codes(x) for x in ("rounds_used", "rescued", "wasted_rounds", "recall_at_stop")}
    out = []
    for g, fi in enumerate(G.final.tolist()):
        if na[fi] or hits[tr.arm[fi]] is None:  # arms that loop declare the hits they judge per round
            continue
        k = hits[tr.arm[fi]]
        key = (tr.arm[fi], tr.rep[fi], tr.sess[fi], tr.tix[fi])
        rows = G.rows(g)
        out.append((*key, c["rounds_used"], float(len(rows)), None))
        li = G.li[fi]
        relevant = lab.rel_codes[li] if li >= 0 else set()
        n_rel = int(lab.n_rel[li]) if li >= 0 else 0
        if n_rel == 0:
            for x in ("rescued", "wasted_rounds", "recall_at_stop"):
                out.append((*key, c[x], np.nan, "no relevant document"))
            continue
        hit = [bool(relevant & set(tr.ranking(r)[:k].tolist())) for r in rows.tolist()]
        first_ok = next((i for i, h in enumerate(hit) if h), None)
        out.append((*key, c["rescued"], float((not hit[0]) and hit[-1]), None))
        out.append((*key, c["wasted_rounds"], float(len(rows) - 1 - first_ok) if first_ok is not None else 0.0, None))
        out.append((*key, c["recall_at_stop"], len(relevant & set(tr.ranking(fi)[:k].tolist())) / n_rel, None))
    return Long.from_rows(out)
