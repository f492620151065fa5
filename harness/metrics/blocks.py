"""The scoring step's per-turn rows on their way to the metrics file: each session group's rows
spilled where the group is scored, as an Arrow IPC file with a record batch per (metric, arm), then
read back block by block in the order the metrics file holds them (each metric's rows of each arm
together, in session order), so that a reader of one metric reads its row groups only."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.metrics.compute import SPILL_SCHEMA

# the ids, spilled as dictionaries: one dictionary per group file (the IPC file format's rule), and
# what ContentHash digests and the metrics file's writer casts per distinct id, not per row
SPILL_IDS = [f.name for f in SPILL_SCHEMA if pa.types.is_large_string(f.type)]
SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")  # a month uncompressed fills /tmp


def _spilled(per_turn: pd.DataFrame) -> pa.Table:
    """A group's per-turn rows as SPILL_SCHEMA's columns, the ids dictionary-encoded, one chunk each."""
    t = pa.Table.from_pandas(per_turn, schema=SPILL_SCHEMA, preserve_index=False).combine_chunks()
    for name in SPILL_IDS:
        i = t.schema.get_field_index(name)
        t = t.set_column(i, name, pc.dictionary_encode(t.column(i).chunk(0)) if t.num_rows else
                         pa.array([], pa.dictionary(pa.int32(), pa.large_string())))
    return t


class Blocks:
    """The groups' per-turn rows spilled per (metric, arm): a temporary file per group named by
    `prefix`, a record batch per (metric, arm) in it."""

    def __init__(self, spill: Path, prefix: str = ""):
        self.spill, self.prefix = spill, prefix
        self.paths: dict[tuple[str, str], list[tuple[Path, int]]] = {}  # (metric, arm) -> (file, batch)es,
        # in session order
        self.files = 0

    def add(self, per_turn: pd.DataFrame) -> None:
        t = _spilled(per_turn)
        # the blocks by the dictionaries' codes: the ids are encoded once, for the file and the order
        (mc, metrics), (ac, arms) = ((np.asarray(c.indices, np.int64), c.dictionary.to_pylist())
                                     for c in (t.column("metric").chunk(0), t.column("arm_id").chunk(0)))
        width = max(len(arms), 1)
        block = mc * width + ac
        order = np.argsort(block, kind="stable")  # one gather, then a slice per block (rows in their order)
        t = t.take(pa.array(order)).combine_chunks()
        bounds = np.flatnonzero(np.diff(block[order])) + 1
        spans = [(a, b) for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)]) if a < b]
        path = self.spill / f"block-{self.prefix}{self.files:05d}.arrow"
        self.files += 1
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, t.schema, options=SPILL_OPTIONS) as w:
            for j, (a, b) in enumerate(spans):
                w.write_batch(t.slice(a, b - a).to_batches()[0])
                key = block[order[a]]
                self.paths.setdefault((metrics[key // width], arms[key % width]), []).append((path, j))

    def merge(self, other: "Blocks") -> None:
        """The files of another (the next session group's, written in another process)."""
        for key, paths in other.paths.items():
            self.paths.setdefault(key, []).extend(paths)

    def turns(self, metrics: list[str], arms: list[str], chunk_rows: int = 1_000_000) -> Iterator[pa.Table]:
        """The spilled rows block by block (metrics in `metrics`' order, arms in `arms`', any other
        after), `chunk_rows` at a time (a block's last piece fewer), never two blocks in one piece."""
        rank_m, rank_a = {m: i for i, m in enumerate(metrics)}, {a: i for i, a in enumerate(arms)}
        for key in sorted(self.paths, key=lambda k: (rank_m.get(k[0], len(rank_m)), k[0] if k[0] not in rank_m else "",
                                                     rank_a.get(k[1], len(rank_a)), k[1])):
            yield from pieces(self.paths[key], chunk_rows)


def _batch(path: Path, j: int) -> pa.RecordBatch:
    """Record batch `j` of a spilled group file (its dictionaries read with it); the file is closed
    again, so a month's hundreds of group files are never open at once."""
    with pa.OSFile(str(path)) as f:
        return pa.ipc.open_file(f).get_batch(j)


def pieces(refs: list[tuple[Path, int]], rows: int) -> Iterator[pa.Table]:
    """The rows of the batches `refs` in order, `rows` at a time (the last piece fewer), however
    the batches fall."""
    held: list[pa.RecordBatch] = []
    n = 0
    for path, j in refs:
        batch = _batch(path, j)
        held.append(batch)
        n += batch.num_rows
        while n >= rows:
            t = pa.Table.from_batches(held)
            yield t.slice(0, rows)
            rest = t.slice(rows)
            held, n = rest.to_batches(), rest.num_rows
    if n:
        yield pa.Table.from_batches(held)
