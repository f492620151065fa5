"""What the arms share beyond the retrieval pipeline (pipeline.py): the LLM statistics of a
round, from the outcomes of its role calls."""
from __future__ import annotations

from harness.arms.result import LLMStats


def llm_stats(outcomes) -> LLMStats:
    """Calls, tokens, cost, cache hits, prompt hashes and failed calls of a round's role outcomes
    (offline outcomes have no record and count nothing)."""
    st = LLMStats()
    recs = 0
    cost: float | None = 0
    for o in outcomes:
        r = None if o is None else o.record
        if r is None:
            continue
        recs += 1
        st.calls += r.requests
        st.prompt_tokens += r.prompt_tokens
        st.completion_tokens += r.completion_tokens
        cost = None if cost is None or r.cost_usd is None else cost + r.cost_usd
        st.cache_hits += bool(r.cache_hit)
        if r.prompt_hash:
            st.prompt_hashes[r.role] = r.prompt_hash
        # calls that failed after their retries (a reply the arm refused, e.g. an empty rewrite, is not one)
        st.failed += bool(r.error and o.value is None)
        st.repairs += r.repairs
        if r.repairs:
            st.repair_notes.append(f"{r.role}: {r.repair_reason}")
    st.cost_usd = (None if cost is None else float(cost)) if recs else None
    return st
