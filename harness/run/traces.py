"""The trace row: the contract between replay, metrics and reports (extend, don't break),
declared once, as typed dataclasses: `TurnKey` (what the replay knows, here) and `ArmResult`
(what an arm reports for a round, with its typed `LLMStats` and `Timings`: harness/arms/result.py,
below the run stage). The Parquet schema, the columns
and the row dicts are derived from them, so adding a field is one edit. One row per (arm_id,
repeat, session_id, turn_index, round). Parts are written to a temporary name and renamed when
complete, so a killed run loses at most the part in flight."""
from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import BadInput
from harness.arms.result import ArmResult, Candidates, LLMStats, Timings, col
from harness.run.folder import RunFolder

KEY = ("arm_id", "repeat", "session_id", "turn_index", "round")

@dataclass
class TurnKey:
    """What the replay knows of the row: the arm, the turn and the round."""

    run_id: str = col(pa.string())
    arm_id: str = col(pa.string())
    arm: str = col(pa.string())
    params: dict = col(pa.string(), factory=dict, json=True)
    repeat: int = col(pa.int32(), 0)
    session_id: str = col(pa.string())
    turn_index: int = col(pa.int32(), 0)
    query_type: str | None = col(pa.string())
    language: str | None = col(pa.string())
    domain: str | None = col(pa.string())
    round: int = col(pa.int32(), 1)
    is_final: bool = col(pa.bool_(), True)
    original_query: str | None = col(pa.string())
    backend: dict = col(pa.string(), factory=dict, json=True)  # {role: model or "offline"}


_NESTED = {"llm": (LLMStats, ""), "ms": (Timings, "ms_")}


def _columns(cls) -> list[tuple[str, type, str, str | None, pa.DataType, bool]]:
    """(column, row class, field, nested field, arrow type, json) of a row class, nested
    dataclasses flattened into their own columns."""
    out = []
    for f in fields(cls):
        if f.name in _NESTED:
            sub, prefix = _NESTED[f.name]
            out += [(g.metadata["column"] or prefix + g.name, cls, f.name, g.name, g.metadata["arrow"],
                     g.metadata["json"]) for g in fields(sub)]
        else:
            out.append((f.metadata["column"] or f.name, cls, f.name, None, f.metadata["arrow"], f.metadata["json"]))
    return out


COLUMNS = _columns(TurnKey) + _columns(ArmResult)
SCHEMA = pa.schema([(c[0], c[4]) for c in COLUMNS])


def to_json(v) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


_KEY_JSON: dict[int, tuple[object, str]] = {}  # id -> (value, its JSON): TurnKey's params and backend


def _key_json(v) -> str:
    """to_json of a TurnKey value: the arm's params and backend, the same dicts (built with the
    arm, never changed) on every row of the arm, so serialised once per arm, not once per row."""
    seen = _KEY_JSON.get(id(v))
    if seen is not None and seen[0] is v:
        return seen[1]
    if len(_KEY_JSON) > 1024:
        _KEY_JSON.clear()
    text = to_json(v)
    _KEY_JSON[id(v)] = (v, text)
    return text


def row(key: TurnKey, result: ArmResult) -> dict:
    """One trace row (column -> value), from the replay's key and the arm's round. A round's
    total latency is the sum of its stages unless the arm measured it."""
    if result.ms.total is None:
        result.ms.total = result.ms.stages()
    out = {}
    for column, cls, name, sub, _, as_json in COLUMNS:
        v = getattr(key if cls is TurnKey else result, name)
        if sub is not None:
            v = getattr(v, sub)
        if as_json and v is not None:
            v = _key_json(v) if cls is TurnKey else to_json(v)
        out[column] = v
    return out


def rows_to_table(rows: list[dict]) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in SCHEMA}
    cols["candidates"] = Candidates.arrow(cols["candidates"])
    return pa.table(cols, schema=SCHEMA)


class PartWriter:
    """Buffers rows and writes a trace part of the run folder atomically every `rows_per_part`
    rows. Callers add all rows of one turn at once, so a part never splits a turn. Rows are
    turned into Arrow on the writer's own thread, `batch_rows` at a time, and parts are written
    there too: the caller (the replay's event loop) only hands rows over. Batches are small
    because a conversion holds the GIL for its whole length (about 0.2 ms a row, most of it the
    candidates): the event loop gets it back between batches. `flush()` writes what is buffered
    and waits; an error of the writer's thread is raised by the next `add` or `flush`."""

    def __init__(self, run_dir: Path, rows_per_part: int = 2000, batch_rows: int = 16):
        self.folder = RunFolder(run_dir)
        self.rows_per_part = rows_per_part
        self.batch_rows = batch_rows
        self.buf: list[dict] = []
        self.tables: list[Future] = []  # conversions of the part being filled
        self.buffered = 0  # rows of the part being filled, converted or not
        self.parts = len(self.folder.parts())
        self.written = 0
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: list[Future] = []  # part writes not yet checked

    def _submit(self, fn, *args) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="harness-traces")
        return self._pool.submit(fn, *args)

    def add(self, rows: list[dict]) -> None:
        self.buf.extend(rows)
        self.buffered += len(rows)
        if self.buffered >= self.rows_per_part:
            self._write_part()
        elif len(self.buf) >= self.batch_rows:
            self.tables.append(self._submit(rows_to_table, self.buf))
            self.buf = []

    def _write_part(self) -> None:
        """Hand the buffered rows to the writer's thread as one part; raise an earlier write's error."""
        for f in [f for f in self._jobs if f.done()]:
            self._jobs.remove(f)
            f.result()
        if self.buf:
            self.tables.append(self._submit(rows_to_table, self.buf))
        if not self.tables:
            return
        part = self.folder.new_part(self.parts)
        self._jobs.append(self._submit(self._write, part, self.tables, self.buffered))
        self.parts += 1
        self.buf, self.tables, self.buffered = [], [], 0

    def _write(self, part: Path, tables: list[Future], rows: int) -> None:
        tmp = part.with_name(part.name + ".tmp")
        pq.write_table(pa.concat_tables([t.result() for t in tables]), tmp)
        tmp.replace(part)
        self.written += rows

    def flush(self) -> None:
        self._write_part()
        jobs, self._jobs = self._jobs, []
        pool, self._pool = self._pool, None
        try:
            for f in jobs:
                f.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)


class TraceError(BadInput, RuntimeError):
    """A trace part that cannot be read (a user-facing message naming the file)."""


def repair_parts(run_dir: Path) -> dict[str, list[str]]:
    """Before a resume: remove temporary files of parts that were in flight when a run was
    killed, and set aside every complete-looking part that cannot be read with the trace schema
    (e.g. truncated), so its turns are replayed again. Returns the names of both, for the
    manifest and a warning."""
    folder = RunFolder(run_dir)
    out: dict[str, list[str]] = {"removed_tmp": [], "quarantined": []}
    for p in folder.parts_in_flight():
        p.unlink(missing_ok=True)
        out["removed_tmp"].append(p.name)
    for p in folder.parts():
        try:
            pq.read_table(p, schema=SCHEMA)
        except (pa.ArrowException, OSError, ValueError):
            folder.quarantine(p)
            out["quarantined"].append(p.name)
    return out


def read_traces(run_dir: Path, columns: list[str] | None = None) -> pa.Table:
    """All complete parts of a run (temporary files of a part in flight are ignored), rows in
    key order: the order turns finished in (concurrency, a resume) never reaches a caller, so
    sums and means over the rows are the same for equal runs, to the last bit."""
    parts = RunFolder(run_dir).parts()
    if not parts:
        return SCHEMA.empty_table() if columns is None else SCHEMA.empty_table().select(columns)
    read = None if columns is None else list(dict.fromkeys([*columns, *KEY]))
    tables = []
    for p in parts:
        try:
            tables.append(pq.read_table(p, columns=read, schema=SCHEMA))  # an older part's missing columns: nulls
        except (pa.ArrowException, OSError, ValueError) as e:
            raise TraceError(f"{p}: unreadable trace part ({e}); run `harness run --resume {Path(run_dir)}` "
                             "to set it aside and replay its turns") from None
    table = pa.concat_tables(tables).sort_by([(k, "ascending") for k in KEY])
    return table if columns is None else table.select(list(columns))
