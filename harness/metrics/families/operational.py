"""Operational metrics per turn (all rounds summed): llm_calls, prompt_tokens,
completion_tokens, cost_usd (an arm that made LLM calls at an unknown price is unmeasured,
never 0; an arm that made none costs 0), cache_hit_rate (cache hits / calls), and latency per
stage and in total (ms_*; aggregated with p50 and p95)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.metrics.kernel import LATENCY, Long, Scoring, present
from harness.metrics.registry import Template, family

_OPS = ("replayed",)
_K = "operational"  # judged by a policy's budgets, never a regression between two runs (registry.Kind)
TEMPLATES = [
    Template("llm_calls", "lower", "calls", "distinct LLM requests of the turn (a repair counts, a transport retry "
             "does not)", needs=_OPS, reads=("llm_calls",), kind=_K),
    Template("prompt_tokens", "lower", "tokens", "prompt tokens from the replies' usage", needs=_OPS,
             reads=("prompt_tokens",), kind=_K),
    Template("completion_tokens", "lower", "tokens", "completion tokens from the replies' usage", needs=_OPS,
             reads=("completion_tokens",), kind=_K),
    Template("cost_usd", "lower", "USD", "cost from the price table; unmeasured when a model's price is unknown",
             needs=_OPS, reads=("cost_usd",), kind=_K),
    Template("cache_hit_rate", "higher", "share", "LLM cache hits / calls (turns with calls)", needs=_OPS,
             reads=("cache_hits", "llm_calls"), kind=_K),
] + [Template(f"latency_{m[3:]}_ms", "lower", "ms", f"time spent in {m[3:]} (all rounds)", needs=_OPS, reads=(m,),
              aggregation="mean, p50, p95 over turns", kind=_K) for m in LATENCY]
# shown beside a verdict by default, in this order (harness.analysis.verdict); the rest on request
SHOWN = ("latency_total_ms", "cost_usd", "llm_calls")


def _sums(s: Scoring, keep: np.ndarray):
    df = s.tr.t.select(["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits", "cost_usd", *LATENCY]) \
        .filter(pa.array(keep)).to_pandas()
    gid = s.groups.gid[keep]
    sums = df.groupby(gid, sort=False)[["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits"]].sum()
    known = df["cost_usd"].notna().groupby(gid, sort=False).all().reindex(sums.index).to_numpy(bool)
    conv = df.assign(cost_usd=pd.to_numeric(df["cost_usd"], errors="coerce"),
                     **{m: pd.to_numeric(df[m], errors="coerce") for m in LATENCY})
    g2 = conv.groupby(gid, sort=False)
    cost = g2["cost_usd"].sum(min_count=1).reindex(sums.index).to_numpy(np.float64)
    return sums, known, cost, g2[list(LATENCY)].sum(min_count=1).reindex(sums.index)


@family("operational", TEMPLATES, order=60)
def ops_rows(s: Scoring) -> Long:
    tr, G = s.tr, s.groups
    keep = ~present(tr.t.column("not_applicable"))
    sums, known, cost, lat = _sums(s, keep)
    n = len(sums)
    calls = sums["llm_calls"].to_numpy().astype(np.float64)
    ok = known & ~np.isnan(cost)
    every = np.ones(n, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        blocks = [("llm_calls", calls, every, None),
                  ("prompt_tokens", sums["prompt_tokens"].to_numpy().astype(np.float64), every, None),
                  ("completion_tokens", sums["completion_tokens"].to_numpy().astype(np.float64), every, None),
                  ("cost_usd", np.where(calls == 0, 0.0, np.where(ok, cost, np.nan)), every,
                   np.where((calls != 0) & ~ok, "price unknown", None).astype(object)),
                  ("cache_hit_rate", sums["cache_hits"].to_numpy().astype(np.float64) / calls, calls > 0, None)]
    for m in LATENCY:
        v = lat[m].to_numpy(np.float64)
        blocks.append((f"latency_{m[3:]}_ms", v, ~np.isnan(v), None))
    val = np.column_stack([b[1] for b in blocks]) if n else np.zeros((0, len(blocks)))
    have = np.column_stack([b[2] for b in blocks]) if n else np.zeros((0, len(blocks)), bool)
    why = np.column_stack([b[3] if b[3] is not None else np.full(n, None, dtype=object) for b in blocks]) \
        if n else np.zeros((0, len(blocks)), object)
    r, k = np.nonzero(have)  # row-major: turns in order, metrics in order
    mcodes = np.array([s.codes(b[0]) for b in blocks], np.int64)
    first = G.order[G.bounds[:-1]]  # any row of a turn names it; map group id -> one of its rows
    row_of = np.empty(len(G), np.int64)
    row_of[G.gid[first]] = first
    rows = row_of[sums.index.to_numpy(np.int64)][r]
    return Long(arm=tr.arm[rows], rep=tr.rep[rows], sess=tr.sess[rows], tix=tr.tix[rows], metric=mcodes[k],
                value=val[r, k], unm=why[r, k])
