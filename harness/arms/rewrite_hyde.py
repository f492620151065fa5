"""`rewrite_hyde(hyde_weight=0.7, hyde_scope=vague)`: the dense query vector is (1 - w)·rewrite +
w·hypothetical passage (offline: the Rocchio feedback vector of the top hits, harness/roles/hyde.py).
`hyde_scope: vague` (the default) applies HyDE only on turns the decide role classes as vague
application questions; `all` on every turn, so its effect can be measured on any set. Never on
identifier turns, never where the turn touches an attribute the filter schema marks
safety-relevant (a guessed pressure rating or concentration is dangerous)."""
from __future__ import annotations

import json
from typing import Literal

import numpy as np
from pydantic import Field

from harness.arms.base import register
from harness.arms.pipeline import query_vectors
from harness.arms.rewrite import RewriteFamily, RewriteParams
from harness.roles import attributes
from harness.roles.hyde import HydeOutput, hyde_offline
from harness.threads import off_loop


class HydeParams(RewriteParams):
    hyde_weight: float = Field(default=0.7, ge=0, le=1)
    hyde_scope: Literal["vague", "all"] = "vague"


def safety_fields_touched(text: str, info) -> list[str]:
    schema = [{"field": f.field, "type": f.type, "values": f.values} for f in info.filters]
    named = attributes.extract(text, schema)
    return [f.field for f in info.filters if f.safety_relevant and f.field in named]


@register("rewrite_hyde")
class RewriteHyde(RewriteFamily):
    Params = HydeParams
    needs_decide = True
    needs_hyde = True

    async def vectors(self, ctx, out, queries, decision, outcomes, notes, fallbacks):
        w = self.params.hyde_weight
        why = None
        if self.params.hyde_scope == "vague" and (decision is None or decision.turn_class != "vague_application"):
            why = f"turn class {decision.turn_class if decision else 'unknown'}"
        elif ctx.identifiers or out.must_keep:
            why = "identifier turn"
        elif touched := safety_fields_touched(ctx.turn.user + " " + out.standalone, ctx.info):
            why = "safety-relevant attribute " + ", ".join(touched)
        if why:
            notes.append(f"HyDE skipped: {why}")
            return None
        filters = ctx.entitlement_filters
        user = json.dumps({"question": out.standalone}, ensure_ascii=False)
        h = await ctx.roles.call("hyde", user, HydeOutput, lambda: hyde_offline(ctx.index, out.standalone, filters), seed=ctx.seed)
        outcomes.append(h)
        if h.value is None:
            notes.append(f"HyDE failed, rewrite vector only: {h.fallback}")
            fallbacks.append(f"{h.fallback}; rewrite vector only")
            return None
        q, _ = await query_vectors(ctx, queries)
        passage = h.value.vector
        if passage is None:  # a model's passage: embedded as a passage
            passage = (await off_loop(ctx.threads, ctx.index.cache.get_or_compute, ctx.index.embedder, "passage",
                                      [h.value.passage]))[0][0]
            passage = passage / (np.linalg.norm(passage) or 1.0)
        mixed = (1 - w) * q[0] / (np.linalg.norm(q[0]) or 1.0) + w * passage
        q[0] = mixed / (np.linalg.norm(mixed) or 1.0)
        how = f"(offline: {h.value.passage})" if h.backend == "offline" else f"({h.backend})"
        notes.append(f"HyDE {how}, weight {w}")
        return q
