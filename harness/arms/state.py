"""The compact state of a turn, as the rewrite and decide roles see it (harness.roles.state), built
from the arm's turn context: the arms know the turn, the roles only the state."""
from __future__ import annotations

from harness.arms.base import TurnContext
from harness.roles.state import CompactState, PastTurn, ShownItem


def compact_state(ctx: TurnContext, last_n: int = 4) -> CompactState:
    meta = getattr(ctx.index, "meta", {}) if ctx.index is not None else {}
    hist = []
    for t in ctx.history[-last_n:]:
        shown = []
        if t.assistant:
            shown = [ShownItem(s.doc_id, s.name, meta.get(s.doc_id, {})) for s in t.assistant.shown]
        hist.append(PastTurn(t.user, t.assistant.answer if t.assistant else "", shown))
    schema = [{"field": f.field, "type": f.type, **({"values": f.values} if f.values else {}),
               **({"unit": f.unit} if f.unit else {})} for f in ctx.info.filters if f.kind == "preference"]
    account = {k: v for k, v in ctx.account.model_dump().items() if v is not None}
    return CompactState(ctx.turn.user, hist, list(ctx.inherited_filters), account, schema)
