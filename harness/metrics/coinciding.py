"""Arms that coincide: their top-10 lists are identical on every turn both measured, so every
ranking metric will be equal too. Found once by the scoring step, with the reason where the
traces record one (e.g. the rewrite arms' notes: `HyDE skipped: turn class self_contained`), so
the CLI and the report can say so instead of leaving a reader to wonder."""
from __future__ import annotations

from collections import Counter

import pandas as pd

COLUMNS = ["arm_id", "same_as", "n_turns", "reasons"]  # reasons: one per arm of same_as ("" when none recorded)
TOP = 10


def _tops(final: pd.DataFrame) -> dict[str, dict[tuple, tuple]]:
    """arm -> {(repeat, session, turn): top-10 tuple} over the turns the arm measured."""
    out: dict[str, dict[tuple, tuple]] = {}
    ok = final["not_applicable"].isna() & final["error"].isna()
    for r in final[ok].itertuples():
        out.setdefault(r.arm_id, {})[(r.repeat, r.session_id, r.turn_index)] = tuple(list(r.ranking)[:TOP])
    return out


def _reason(notes: pd.Series) -> str:
    """An arm's recorded notes, summarised: `HyDE skipped (turn class self_contained 150, ...)`,
    `one query (on 204 turns)`."""
    firsts = Counter(str(n).split("; ")[0] for n in notes.dropna() if str(n))
    if not firsts:
        return ""
    heads = {k.split(":")[0] for k in firsts}
    tails = {k.rsplit(":", 1)[-1].strip() for k in firsts}
    if len(tails) == 1 and all(":" in k for k in firsts):
        return f"{next(iter(tails))} (on {sum(firsts.values())} turns)"
    top = sorted(firsts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]  # most frequent first, ties by text
    if len(heads) == 1 and all(":" in k for k in firsts):
        inner = ", ".join(f"{k.split(':', 1)[1].strip()} {n}" for k, n in top)
        return f"{next(iter(heads))} ({inner}{', ...' if len(firsts) > 3 else ''})"
    return "; ".join(f"{k} ({n})" for k, n in top) + ("; ..." if len(firsts) > 3 else "")


def coinciding_arms(final: pd.DataFrame, arm_order: list[str]) -> pd.DataFrame:
    """`final`: final trace rows (arm_id, repeat, session_id, turn_index, ranking, verdict_reason,
    not_applicable, error). One row per group of coinciding arms, the first in `arm_order`."""
    tops = _tops(final)
    arms = [a for a in arm_order if a in tops]
    groups: list[list[str]] = []
    for a in arms:
        for g in groups:
            b = g[0]
            common = tops[a].keys() & tops[b].keys()
            if common and all(tops[a][k] == tops[b][k] for k in common):
                g.append(a)
                break
        else:
            groups.append([a])
    rows = []
    for g in (g for g in groups if len(g) > 1):
        common = set.intersection(*(set(tops[a]) for a in g))
        rows.append({"arm_id": g[0], "same_as": g[1:], "n_turns": len(common),
                     "reasons": [_reason(final.loc[final["arm_id"] == a, "verdict_reason"]) for a in g[1:]]})
    return pd.DataFrame(rows, columns=COLUMNS)
