"""Operational metrics per turn (all rounds summed): llm_calls, prompt_tokens,
completion_tokens, cost_usd (an arm that made LLM calls at an unknown price is unmeasured,
never 0; an arm that made none costs 0), cache_hit_rate (cache hits / calls), and latency per
stage and in total (ms_*; aggregated with p50 and p95)."""
from __future__ import annotations

import numpy as np
import pandas as pd

OPS_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "llm_calls", "prompt_tokens", "completion_tokens",
               "cost_usd", "cache_hits", "ms_rewrite", "ms_retrieve", "ms_grade", "ms_answer", "ms_total", "not_applicable"]
LATENCY = ("ms_rewrite", "ms_retrieve", "ms_grade", "ms_answer", "ms_total")


def per_turn_ops(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[~rows["not_applicable"].map(lambda x: isinstance(x, str) and bool(x))]
    keys = ["arm_id", "repeat", "session_id", "turn_index"]
    g = rows.groupby(keys, sort=False)
    s = g[["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits"]].sum()
    cost_known = g["cost_usd"].apply(lambda c: c.notna().all())
    rows = rows.assign(cost_usd=pd.to_numeric(rows["cost_usd"], errors="coerce"),
                       **{m: pd.to_numeric(rows[m], errors="coerce") for m in LATENCY})
    g = rows.groupby(keys, sort=False)
    cost = g["cost_usd"].sum(min_count=1)
    lat = g[list(LATENCY)].sum(min_count=1)
    out = []
    for key in s.index:
        calls = float(s.loc[key, "llm_calls"])
        base = list(key)
        out.append((*base, "llm_calls", calls, None))
        out.append((*base, "prompt_tokens", float(s.loc[key, "prompt_tokens"]), None))
        out.append((*base, "completion_tokens", float(s.loc[key, "completion_tokens"]), None))
        if calls == 0:
            out.append((*base, "cost_usd", 0.0, None))
        elif cost_known.loc[key] and pd.notna(cost.loc[key]):
            out.append((*base, "cost_usd", float(cost.loc[key]), None))
        else:
            out.append((*base, "cost_usd", np.nan, "price unknown"))
        if calls > 0:
            out.append((*base, "cache_hit_rate", float(s.loc[key, "cache_hits"]) / calls, None))
        for m in LATENCY:
            v = lat.loc[key, m]
            if pd.notna(v):
                out.append((*base, f"latency_{m[3:]}_ms", float(v), None))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])
