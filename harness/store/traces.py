"""The trace row: the contract between replay, metrics and reports (extend, don't break),
declared once, as typed dataclasses: `TurnKey` (what the replay knows, here) and `ArmResult`
(what an arm reports for a round, with its typed `LLMStats` and `Timings`: harness/arms/result.py,
below the run stage). The Parquet schema, the columns
and the row dicts are derived from them, so adding a field is one edit. One row per (arm_id,
repeat, session_id, turn_index, round). Parts are written to a temporary name and renamed when
complete, so a killed run loses at most the part in flight."""
from __future__ import annotations

import contextlib
import json
import operator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import BadInput
from harness.forking import usable_cores
from harness.arms.result import ArmResult, Candidates, LLMStats, Timings, col
from harness.store.folder import RunFolder

T = TypeVar("T")
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


# json.dumps with these arguments builds an encoder on every call: built once, the same text
_TO_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode


_EMPTY = {list: "[]", dict: "{}"}  # an empty list or dict (most rows' filter columns) as the encoder writes it


def to_json(v) -> str:
    return (not v and _EMPTY.get(type(v))) or _TO_JSON(v)


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


def _getter(columns, cls, as_json: bool) -> tuple[tuple[str, ...], operator.attrgetter]:
    """The names of one row class's columns that are (or are not) JSON, and one getter that reads
    them all as a tuple."""
    chosen = [(column, name + ("." + sub if sub else "")) for column, c, name, sub, _, j in columns
              if c is cls and bool(j) == as_json]
    get = operator.attrgetter(*(path for _, path in chosen))
    return tuple(c for c, _ in chosen), (get if len(chosen) > 1 else lambda obj: (get(obj),))  # one name: no tuple


_KEY_PLAIN, _KEY_JSON_COLS = _getter(COLUMNS, TurnKey, False), _getter(COLUMNS, TurnKey, True)
_RESULT_PLAIN, _RESULT_JSON_COLS = _getter(COLUMNS, ArmResult, False), _getter(COLUMNS, ArmResult, True)


def _row(key: TurnKey, result: ArmResult) -> dict:
    """Every column (COLUMNS) read by attribute, the JSON columns serialised (TurnKey's once per
    arm: `_key_json`)."""
    (kp, kg), (kj, kjg), (rp, rg), (rj, rjg) = _KEY_PLAIN, _KEY_JSON_COLS, _RESULT_PLAIN, _RESULT_JSON_COLS
    out = dict(zip(kp, kg(key)))
    out.update(zip(rp, rg(result)))
    out.update((c, None if v is None else _key_json(v)) for c, v in zip(kj, kjg(key)))
    out.update((c, None if v is None else to_json(v)) for c, v in zip(rj, rjg(result)))
    return dict(zip(_NAMES, _IN_ORDER(out)))  # in the schema's order


_NAMES = tuple(c[0] for c in COLUMNS)
_IN_ORDER = operator.itemgetter(*_NAMES)


def row(key: TurnKey, result: ArmResult) -> dict:
    """One trace row (column -> value), from the replay's key and the arm's round. A round's
    total latency is the sum of its stages unless the arm measured it."""
    if result.ms.total is None:
        result.ms.total = result.ms.stages()
    return _row(key, result)


# Parquet column statistics (min and max per row group) only for the columns that name a row: the
# JSON, text and list columns' statistics are long strings no reader filters on.
STATISTICS = ["run_id", "arm_id", "arm", "repeat", "session_id", "turn_index", "round", "is_final"]


_ALL_COLUMNS = operator.itemgetter(*SCHEMA.names)


def rows_to_table(rows: list[dict]) -> pa.Table:
    try:  # rows written by `row` hold every column: read as tuples and turned into columns at once
        cols = dict(zip(SCHEMA.names, map(list, zip(*map(_ALL_COLUMNS, rows))))) if rows else {}
    except KeyError:  # rows missing a column (older writers, tests): None where missing
        cols = {}
    if len(cols) != len(SCHEMA.names):
        cols = {f.name: [r.get(f.name) for r in rows] for f in SCHEMA}
    cols["candidates"] = Candidates.arrow(cols["candidates"])
    return pa.table(cols, schema=SCHEMA)


class PartWriter:
    """Writes the trace parts of a run folder: a part holds `rows_per_part` rows (callers add all
    rows of one turn at once, so a part never splits a turn) and becomes visible under its name
    only when complete (written as .tmp, then renamed), so a killed run loses at most the part in
    flight. The caller (the replay's event loop) only hands rows over: the writer's own thread
    turns them into Arrow `batch_rows` at a time and writes each batch into the open part as a row
    group at once, so when the run ends only the last batch and the part's footer remain. Batches
    are large because a conversion has a fixed cost per column whatever its length; each column is
    its own call into Arrow and Parquet's encoding lets the GIL go, so the event loop waits at most
    one column's conversion for it. `flush()` writes what is buffered, completes the part and waits;
    an error of the writer's thread is raised by every later `add` and by `flush`."""

    def __init__(self, run_dir: Path, rows_per_part: int = 2000, batch_rows: int = 256):
        self.folder = RunFolder(run_dir)
        self.rows_per_part = rows_per_part
        self.batch_rows = batch_rows
        self.buf: list[dict] = []
        self.buffered = 0  # rows of the part being filled, written or not
        self.parts = len(self.folder.parts())
        self._error: BaseException | None = None  # a write failed: raised by every later call; the part in
        # flight is never completed (left as .tmp: a resume removes it and replays its turns)
        self._part: tuple[Path, pq.ParquetWriter] | None = None  # the part being filled (the writer's thread's)
        self._pool: ThreadPoolExecutor | None = None  # the writer's thread: writes run in order

    def _submit(self, fn, *args) -> None:
        if self._error is not None:
            raise self._error
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="harness-traces")
        self._pool.submit(self._guarded, fn, *args)

    def _guarded(self, fn, *args) -> None:
        """A write on the writer's thread; after a failed one, none (the first error is kept)."""
        if self._error is not None:
            return
        try:
            fn(*args)
        except BaseException as e:
            self._error = e

    def add(self, rows: list[dict]) -> None:
        if self._error is not None:
            raise self._error
        self.buf.extend(rows)
        self.buffered += len(rows)
        if self.buffered >= self.rows_per_part:
            self._end_part()
        elif len(self.buf) >= self.batch_rows:
            self._submit(self._write_batch, self.buf)
            self.buf = []

    def _end_part(self) -> None:
        """The buffered rows written and the part completed (on the writer's thread)."""
        if self.buf:
            self._submit(self._write_batch, self.buf)
        if self.buffered:
            self._submit(self._complete, self.buffered)
        self.buf, self.buffered = [], 0

    def _write_batch(self, rows: list[dict]) -> None:
        if self._part is None:
            part = self.folder.new_part(self.parts)
            self.parts += 1
            self._part = (part, pq.ParquetWriter(part.with_name(part.name + ".tmp"), SCHEMA,
                                                 write_statistics=STATISTICS))
        self._part[1].write_table(rows_to_table(rows))

    def _complete(self, rows: int) -> None:
        part, writer = self._part
        self._part = None
        writer.close()
        part.with_name(part.name + ".tmp").replace(part)

    def flush(self, raise_error: bool = True) -> None:
        """Write what is buffered as a complete part and wait for every write; the writer's
        thread ends (a later `add` starts another). Raises the first failed write's error, unless
        `raise_error` is False (a run stopping for another reason: its own error stands)."""
        try:
            self._end_part()
        except BaseException:
            if raise_error:
                raise
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
            if self._part is not None:  # not completed (a failed write, an interrupted flush): stays .tmp
                with contextlib.suppress(Exception):
                    self._part[1].close()
                self._part = None
        if self._error is not None and raise_error:
            raise self._error


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


def read_part(part: Path, columns: list[str] | None, run_dir: Path | None = None, filters=None) -> pa.Table:
    """`columns` (None: all) of one trace part, an older part's missing columns as nulls, its rows
    that `filters` (pyarrow's) keep; TraceError naming it when it cannot be read."""
    try:
        return pq.read_table(part, columns=columns, schema=SCHEMA, filters=filters)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise unreadable(part, e, run_dir) from None


def unreadable(part: Path, e: Exception, run_dir: Path | None = None) -> TraceError:
    """The error of a trace part that cannot be read, with what to run."""
    return TraceError(f"{part}: unreadable trace part ({e}); run `harness run --resume "
                      f"{Path(run_dir or Path(part).parent.parent)}` to set it aside and replay its turns")


def each_part(parts: list[Path], f: Callable[[Path], T]) -> list[T]:
    """`f` of every part, in the parts' order, on up to four threads, one per core this process may
    use (Arrow reads and decodes outside the GIL)."""
    with ThreadPoolExecutor(min(4, usable_cores())) as ex:
        return list(ex.map(f, parts))


def read_traces(run_dir: Path, columns: list[str] | None = None) -> pa.Table:
    """All complete parts of a run (temporary files of a part in flight are ignored), rows in
    key order: the order turns finished in (concurrency, a resume) never reaches a caller, so
    sums and means over the rows are the same for equal runs, to the last bit."""
    parts = RunFolder(run_dir).parts()
    if not parts:
        return SCHEMA.empty_table() if columns is None else SCHEMA.empty_table().select(columns)
    read = None if columns is None else list(dict.fromkeys([*columns, *KEY]))
    table = pa.concat_tables([read_part(p, read, run_dir) for p in parts]).sort_by([(k, "ascending") for k in KEY])
    return table if columns is None else table.select(list(columns))


RANKING = pa.list_(pa.dictionary(pa.int32(), pa.string()))  # a ranking as read for scoring: ids as dictionary codes
STREAM = ".arrows"  # a session group's trace rows (harness.metrics.groups): an Arrow IPC stream


def read_trace_file(path: Path, columns: list[str] | None = None) -> pa.Table:
    """`columns` (None: all) of a trace file as scoring reads it, the rankings' ids as dictionaries
    (RANKING): a run's Parquet part (an older part's missing columns as nulls), or a session
    group's Arrow stream written by the scoring step (`STREAM`)."""
    path = Path(path)
    if path.suffix == STREAM:
        with pa.memory_map(str(path)) as f:
            t = pa.ipc.open_stream(f).read_all()
        return t if columns is None else t.select(columns)
    names = SCHEMA.names if columns is None else list(columns)
    rest = [c for c in names if c != "ranking"]
    t = read_part(path, rest)
    if "ranking" in names:
        try:
            rank = (pq.read_table(path, columns=["ranking"], read_dictionary=["ranking.list.element"]).column(0)
                    if "ranking" in pq.read_schema(path).names else pa.nulls(t.num_rows, RANKING))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise unreadable(path, e) from None
        t = t.append_column("ranking", rank.cast(RANKING))
    return t.select(names)


def has_rows(path: Path) -> bool:
    """Whether a trace file (`read_trace_file`'s) has a row: a group's stream is written only with rows."""
    return Path(path).suffix == STREAM or pq.ParquetFile(path).metadata.num_rows > 0
