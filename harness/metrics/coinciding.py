"""Arms that coincide: their top-10 lists are identical on every turn both measured, so every
ranking metric will be equal too. Found once by the scoring step, with the reason where the
traces record one (e.g. the rewrite arms' notes: `HyDE skipped: turn class self_contained`), so
the CLI and the report can say so instead of leaving a reader to wonder."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.metrics.provenance import digest8

COLUMNS = ["arm_id", "same_as", "n_turns", "reasons"]  # reasons: one per arm of same_as ("" when none recorded)
TOP = 10


def top_keys(ranking, k: int) -> np.ndarray:
    """A 64-bit key of each ranking's first `k` documents (an Arrow list<string> column, or list of
    dictionary codes): equal lists, equal keys; an empty or missing ranking 0. Vectorised over the
    rows: each distinct document's own digest (`digest8`, cached across calls) is combined by
    position (a month's final rows cost a gather, not a tuple each)."""
    arr = ranking.combine_chunks() if isinstance(ranking, pa.ChunkedArray) else ranking
    if pa.types.is_dictionary(arr.type.value_type):  # the first k codes of each row, by its offsets
        off = np.asarray(arr.offsets, np.int64)
        lens = np.where(np.asarray(arr.is_valid(), bool), np.minimum(np.diff(off), k), 0)
        at = np.repeat(off[:-1], lens) + np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        codes = np.asarray(arr.values.indices.fill_null(-1), np.int64)[at]
        used, codes = np.unique(codes, return_inverse=True)  # only the documents listed in a top k are digested
        listed = arr.values.dictionary.take(pa.array(used[used >= 0])).to_pylist()
        words = np.array([0] * int((used < 0).sum()) + [digest8(d) for d in listed], np.uint64)  # a null id: 0
    else:
        top = pc.list_slice(arr, 0, k)
        lens = np.asarray(pc.fill_null(pc.list_value_length(top), 0), np.int64)
        enc = pc.dictionary_encode(pc.list_flatten(top))
        words = np.array([digest8(d) for d in enc.dictionary.to_pylist()] + [0], np.uint64)
        codes = np.asarray(enc.indices.fill_null(-1), np.int64)
    out = np.zeros(len(lens), np.uint64)
    if not len(codes):
        return out
    vals = words[codes.reshape(-1)]
    pos = np.arange(len(vals)) - np.repeat(np.cumsum(lens) - lens, lens)
    with np.errstate(over="ignore"):
        mixed = vals * _POWERS[pos] + pos.astype(np.uint64) + np.uint64(1)
        np.add.at(out, np.repeat(np.arange(len(lens)), lens), mixed)
    return out


_POWERS = np.array([pow(0x9E3779B97F4A7C15, i, 1 << 64) for i in range(64)], np.uint64)  # k <= 64


def _reason_of(firsts: Counter) -> str:
    """An arm's recorded notes (their first parts, counted), summarised: `HyDE skipped (turn class
    self_contained 150, ...)`, `one query (on 204 turns)`."""
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


class CoincidingSums:
    """coinciding_arms fed the final rows a session group at a time (`add`): what it decides by adds
    up over groups (turns each set of arms measured, turns on which two arms' top 10s agree, each
    arm's notes), so the run's top-10 lists are never held at once. `final`'s `ranking` may be any
    key of a top 10 (a hash: equal lists, equal keys)."""

    def __init__(self):
        self.masks: Counter = Counter()  # bitmask of the arms that measured a turn -> turns
        self.equal: Counter = Counter()  # (arm, arm) -> turns both measured with the same top 10
        self.notes: dict[str, Counter] = {}  # arm -> its notes' first parts
        self.bit: dict[str, int] = {}

    def add(self, final: pd.DataFrame) -> None:
        for a, notes in final.groupby("arm_id", sort=False)["verdict_reason"]:
            self.notes.setdefault(str(a), Counter()).update(str(n).split("; ")[0] for n in notes.dropna() if str(n))
        ok = final[final["not_applicable"].isna() & final["error"].isna()]
        tops: dict[str, dict[tuple, object]] = {}
        for arm, rep, sid, tix, top in zip(*(ok[c].tolist() for c in ("arm_id", "repeat", "session_id", "turn_index",
                                                                      "ranking"))):
            tops.setdefault(str(arm), {})[(rep, sid, tix)] = top if isinstance(top, (int, tuple)) else tuple(
                list(top)[:TOP])
        for a in tops:
            self.bit.setdefault(a, len(self.bit))
        turns: dict[tuple, int] = {}
        for a, t in tops.items():
            for k in t:
                turns[k] = turns.get(k, 0) | 1 << self.bit[a]
        self.masks.update(turns.values())
        for a in tops:
            for b in tops:
                if a < b:
                    self.equal[(a, b)] += sum(1 for k, v in tops[a].items() if k in tops[b] and tops[b][k] == v)

    def merge(self, other: "CoincidingSums") -> None:
        """What another was fed (the next session group): its arms' bits mapped to this one's."""
        for a, notes in other.notes.items():
            self.notes.setdefault(a, Counter()).update(notes)
        for a in other.bit:
            self.bit.setdefault(a, len(self.bit))
        moved = {other.bit[a]: self.bit[a] for a in other.bit}
        self.masks.update(Counter({sum(1 << moved[i] for i in moved if m >> i & 1): n for m, n in other.masks.items()}))
        self.equal.update(other.equal)

    def _common(self, arms: list[str]) -> int:
        need = sum(1 << self.bit[a] for a in arms)
        return sum(n for m, n in self.masks.items() if m & need == need)

    def table(self, arm_order: list[str]) -> pd.DataFrame:
        arms = [a for a in arm_order if a in self.bit]
        groups: list[list[str]] = []
        for a in arms:
            for g in groups:
                common = self._common([a, g[0]])
                if common and self.equal[tuple(sorted((a, g[0])))] == common:
                    g.append(a)
                    break
            else:
                groups.append([a])
        rows = [{"arm_id": g[0], "same_as": g[1:], "n_turns": self._common(g),
                 "reasons": [_reason_of(self.notes.get(a, Counter())) for a in g[1:]]} for g in groups if len(g) > 1]
        return pd.DataFrame(rows, columns=COLUMNS)


def coinciding_arms(final: pd.DataFrame, arm_order: list[str]) -> pd.DataFrame:
    """`final`: final trace rows (arm_id, repeat, session_id, turn_index, ranking, verdict_reason,
    not_applicable, error). One row per group of coinciding arms, the first in `arm_order`."""
    sums = CoincidingSums()
    sums.add(final)
    return sums.table(arm_order)
