"""An arm's final trace rows as a comparison of two runs reads them to say whether a change left the
arm alone (harness.analysis.unchanged): each row's key, its ranking and answer as 128-bit digests
and its small outcome columns, read a trace part at a time. Holding every final row's ranking as
text took 4.7 GB for 10^5 turns x 5 arms (issue 45); two rankings or answers that differ get the
same digest with a probability of about 2^-100."""
from __future__ import annotations

import functools
import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harness.store.folder import RunData
from harness.store.traces import read_part

TURN = ["repeat", "session_id", "turn_index"]
KEY = ["arm_id", *TURN]
OUTCOME = ["abstained", "not_applicable", "failed"]  # compared as they are
DIGESTS = ["ranking_1", "ranking_2", "answer_1", "answer_2"]
_BASES = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)  # odd 64-bit multipliers, one per digest


def _digest(text: str) -> tuple[int, int]:
    """Two 64-bit digests of a string, from one sha256."""
    d = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(d[:8], "little"), int.from_bytes(d[8:16], "little")


_words = functools.lru_cache(maxsize=1 << 20)(_digest)  # a document's: a month's documents recur in every part


def ranking_digests(ranking: pa.ChunkedArray) -> list[pa.Array]:
    """Two digests of each ranking: its ids' own digests combined by position, and its length (a
    missing ranking null)."""
    arr = ranking.combine_chunks()
    lens = np.asarray(pc.fill_null(pc.list_value_length(arr), 0), np.int64)
    enc = pc.dictionary_encode(pc.list_flatten(arr))
    ids = enc.dictionary.to_pylist()
    codes = np.asarray(enc.indices.fill_null(len(ids)), np.int64)  # a null id: a word of its own
    pos = np.arange(len(codes)) - np.repeat(np.cumsum(lens) - lens, lens)
    rows = np.repeat(np.arange(len(lens)), lens)
    out = []
    for i, base in enumerate(_BASES):
        words = np.array([_words(d)[i] for d in ids] + [1], np.uint64)
        powers = np.cumprod(np.full(max(int(lens.max(initial=0)), 1), base, np.uint64), dtype=np.uint64)
        with np.errstate(over="ignore"):
            sums = lens.astype(np.uint64) * np.uint64(base)  # the length, so a prefix differs from the list
            np.add.at(sums, rows, words[codes] * powers[pos])
        out.append(pa.array(sums, pa.uint64(), mask=~np.asarray(arr.is_valid(), bool)))
    return out


def _answer_digests(answer: pa.ChunkedArray) -> list[pa.Array]:
    if answer.null_count == len(answer):  # arms that retrieve only
        return [pa.nulls(len(answer), pa.uint64())] * 2
    texts = answer.to_pylist()
    words = [None if t is None else _digest(t) for t in texts]  # answers do not recur: not cached
    return [pa.array([None if w is None else w[i] for w in words], pa.uint64()) for i in range(2)]


def final_rows(run: RunData, arms: set[str]) -> pa.Table:
    """KEY, DIGESTS and OUTCOME of the final trace rows of `arms`, in key order."""
    wanted = pa.array(sorted(arms), pa.string())
    pieces = []
    for part in run.folder.parts():
        t = read_part(part, [*KEY, "is_final", "ranking", "answer", "abstained", "not_applicable", "error"], run.path)
        t = t.filter(pc.and_(pc.fill_null(pc.equal(t["is_final"], True), False), pc.is_in(t["arm_id"], wanted)))
        digests = ranking_digests(t["ranking"]) + _answer_digests(t["answer"])
        pieces.append(pa.table([*(t[c] for c in KEY), *digests, t["abstained"], t["not_applicable"],
                                pc.is_valid(t["error"])], names=[*KEY, *DIGESTS, *OUTCOME]))
    if not pieces:
        return pa.table({c: pa.array([], pa.string()) for c in [*KEY, *DIGESTS, *OUTCOME]})
    return pa.concat_tables(pieces).sort_by([(k, "ascending") for k in KEY])


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Two arms' final rows (`final_rows`, one arm each) alike on every turn: the same turns, rankings,
    answers and outcomes."""
    return a.num_rows == b.num_rows > 0 and all(a[c].combine_chunks().equals(b[c].combine_chunks())
                                            for c in [*TURN, *DIGESTS, *OUTCOME])


def answered(rows: pa.Table) -> bool:
    """Whether any of an arm's final rows holds an answer."""
    return bool(pc.any(pc.is_valid(rows["answer_1"])).as_py())
