"""The trace row: the contract between replay, metrics and reports (extend, don't break).
One row per (arm_id, repeat, session_id, turn_index, round). Parts are written to a temporary
name and renamed when complete, so a killed run loses at most the part in flight."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.run.folder import RunFolder

KEY = ("arm_id", "repeat", "session_id", "turn_index", "round")

CANDIDATE = pa.struct([("doc_id", pa.string()), ("score", pa.float64()), ("rank", pa.int32()), ("lane", pa.string())])
_STR_LIST = pa.list_(pa.string())

SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("arm_id", pa.string()),
    ("arm", pa.string()),
    ("params", pa.string()),  # JSON
    ("repeat", pa.int32()),
    ("session_id", pa.string()),
    ("turn_index", pa.int32()),
    ("query_type", pa.string()),
    ("language", pa.string()),
    ("domain", pa.string()),
    ("round", pa.int32()),
    ("is_final", pa.bool_()),
    ("original_query", pa.string()),
    ("issued_queries", _STR_LIST),
    ("lanes", _STR_LIST),
    ("must_keep", _STR_LIST),
    ("proposed_filters", pa.string()),  # JSON list of {field, op, value}
    ("applied_filters", pa.string()),  # JSON
    ("filter_violations", _STR_LIST),
    ("fallback_reason", pa.string()),
    ("not_applicable", pa.string()),
    ("candidates", pa.list_(CANDIDATE)),
    ("ranking", _STR_LIST),
    ("verdict", pa.string()),
    ("verdict_reason", pa.string()),
    ("answer", pa.string()),
    ("answer_doc_ids", _STR_LIST),
    ("abstained", pa.bool_()),
    ("llm_calls", pa.int32()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("cost_usd", pa.float64()),
    ("cache_hits", pa.int32()),
    ("ms_rewrite", pa.float64()),
    ("ms_retrieve", pa.float64()),
    ("ms_grade", pa.float64()),
    ("ms_answer", pa.float64()),
    ("ms_total", pa.float64()),
    ("error", pa.string()),
    ("prompt_hashes", pa.string()),  # JSON {role: hash}
    ("backend", pa.string()),  # JSON {role: model or "offline"}
    ("clarify", pa.string()),  # JSON {question, options} when the rewrite asked back
    ("turn_class", pa.string()),  # the decide role's class of the turn, where an arm asked it
    ("filters_removed", _STR_LIST),  # "field: reason" for every proposed filter that was rejected
])

JSON_COLUMNS = ("params", "proposed_filters", "applied_filters", "prompt_hashes", "backend")


def to_json(v) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def rows_to_table(rows: list[dict]) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in SCHEMA}
    return pa.table(cols, schema=SCHEMA)


class PartWriter:
    """Buffers rows and writes a trace part of the run folder atomically every `rows_per_part`
    rows. Callers add all rows of one turn at once, so a part never splits a turn. Rows are
    turned into Arrow every `batch_rows` rows as they come (while a replay waits for its LLM
    calls), so the last part costs little more than its write when the run ends."""

    def __init__(self, run_dir: Path, rows_per_part: int = 2000, batch_rows: int = 200):
        self.folder = RunFolder(run_dir)
        self.rows_per_part = rows_per_part
        self.batch_rows = batch_rows
        self.buf: list[dict] = []
        self.tables: list[pa.Table] = []  # converted rows of the part being filled
        self.buffered = 0  # rows of the part being filled, converted or not
        self.parts = len(self.folder.parts())
        self.written = 0

    def add(self, rows: list[dict]) -> None:
        self.buf.extend(rows)
        self.buffered += len(rows)
        if self.buffered >= self.rows_per_part:
            self.flush()
        elif len(self.buf) >= self.batch_rows:
            self.tables.append(rows_to_table(self.buf))
            self.buf = []

    def flush(self) -> None:
        if self.buf:
            self.tables.append(rows_to_table(self.buf))
        if not self.tables:
            return
        part = self.folder.new_part(self.parts)
        tmp = part.with_name(part.name + ".tmp")
        pq.write_table(pa.concat_tables(self.tables), tmp)
        tmp.replace(part)
        self.parts += 1
        self.written += self.buffered
        self.buf, self.tables, self.buffered = [], [], 0


class TraceError(RuntimeError):
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
            tables.append(pq.read_table(p, columns=read, schema=SCHEMA if columns is None else None))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise TraceError(f"{p}: unreadable trace part ({e}); run `harness run --resume {Path(run_dir)}` "
                             "to set it aside and replay its turns") from None
    table = pa.concat_tables(tables).sort_by([(k, "ascending") for k in KEY])
    return table if columns is None else table.select(list(columns))
