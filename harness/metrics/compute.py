"""Score a run folder: every registered metric family's per-turn values, and aggregates per (arm,
metric, segment). Reads the run folder only: never calls a model or a retriever. Unmeasured
turns are counted beside the mean, never averaged in as 0 and never dropped silently. A metric
whose arm lacks the capability it needs (harness.store.armset) has no row for that arm."""
from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.store.armset import run_arms
from harness.store.folder import AGG_COLUMNS, METRICS_COLUMNS, TURN_COLUMNS, RunFolder
from harness.store.manifest import read_manifest
from harness.metrics.aggregate import Aggregator
from harness.metrics.fanout import Inputs, pool, scored_groups
from harness.metrics.groups import GROUP_TURNS, session_groups, split_parts
from harness.metrics.qrels import HUMAN, HUMAN_LLM, LLMLabels, check_qrels, with_llm_labels
from harness.metrics.segments import Segment, default_segments
from harness.store.turns import concat



@dataclass
class MetricsResult:
    per_turn: pd.DataFrame  # arm_id, repeat, session_id, turn_index, metric, value, unmeasured
    aggregates: pd.DataFrame  # arm_id, metric, segment, mean, n, n_unmeasured, n_sessions
    arms: list[str]
    metric_names: list[str]
    labels: pd.DataFrame | None = None  # the run's labels (load_labels), for tables that need them
    arm_infos: list | None = None  # the run's arms (harness.store.armset.ArmInfo): labels, capabilities
    llm: LLMLabels | None = None  # what an LLM's grades added to people's labels (qrels human+llm)


def load_labels(run_dir: Path) -> pd.DataFrame:
    return RunFolder(run_dir).labels()


class _Stages:
    """Seconds (and peak memory) per stage, when a caller asks for them (bench/metrics.py)."""

    def __init__(self, timings: dict | None):
        self.timings, self.clock = timings, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.timings is None:
            return
        import resource

        t = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + t - self.clock
        self.timings[f"peak MB after {name}"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.clock = t


def merge_order(merged: list[str], names: list[str]) -> None:
    """Adds to `merged` the names of one group (in the order its kernels produced them) that it
    lacks, each after the name that preceded it there: the run's order however the groups fell."""
    prev = -1
    for n in names:
        if n in merged:
            prev = merged.index(n)
        else:
            merged.insert(prev + 1, n)
            prev += 1


def empty_result(manifest: dict, labels: pd.DataFrame) -> MetricsResult:
    return MetricsResult(pd.DataFrame(columns=TURN_COLUMNS), pd.DataFrame(columns=AGG_COLUMNS),
                         [a["arm_id"] for a in manifest.arms], [], labels, run_arms(manifest))


def compute_metrics(run_dir: Path, segments: list[Segment] | None = None, timings: dict | None = None,
                    measures: list[str] = (), qrels: str = HUMAN, group_turns: int = GROUP_TURNS,
                    each_group=None,
                    keep: Callable[[str], bool] | None = None, workers: int = 1) -> MetricsResult:
    """Per-turn values of every registered metric and their aggregates, computed a session group
    of about `group_turns` labelled turns at a time (harness.metrics.groups). `timings`, when
    given, receives seconds per stage; `measures`: ranking measures to compute beyond the run's
    settings (`harness metrics -m`); `qrels`: people's labels, or people's and an LLM's for the
    holes. `each_group`: what takes every group's tables (the scoring step streams its tables from
    it): each group is fed to an `empty` copy of it, `close`d, and `merge`d into it in the groups'
    order (harness.metrics.fanout); `keep`: which metrics' per-turn rows the result holds (None:
    all); `workers`: processes that score the groups (1: this one)."""
    stage = _Stages(timings)
    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    labels, llm = load_labels(run_dir), None
    folder = RunFolder(run_dir)
    if check_qrels(qrels) == HUMAN_LLM:
        labels, llm = with_llm_labels(folder, labels)
    if not folder.parts():
        return empty_result(man, labels)
    frames, names = [], []
    groups = session_groups(labels, group_turns)
    with tempfile.TemporaryDirectory(prefix="harness-groups-") as spill:
        inputs = Inputs(run_dir, man, list(measures), Path(spill), each_group, keep)
        agg = Aggregator(labels, segments or default_segments(labels), Path(spill))
        with pool(inputs, workers if len(groups) > 1 else 1) as ex:  # its workers end with the aggregates
            gp = list(zip(groups, split_parts(folder.parts(), groups, Path(spill), ex, workers)))
            stage("read traces and labels")
            for done in scored_groups(ex, inputs, labels, gp, workers):
                stage("metrics")
                if done is None:
                    continue
                merge_order(names, done.metrics)
                agg.merge(done.agg_files)
                if done.tables is not None:
                    each_group.merge(done.tables)
                frames.append(done.kept)
                stage("aggregates")
            table = agg.table(names, sorted(a["arm_id"] for a in man.arms), ex, workers)
    if not names:
        return empty_result(man, labels)
    per_turn = concat(frames).reset_index(drop=True)
    stage("per-turn frame")
    return MetricsResult(per_turn, table, [a["arm_id"] for a in man.arms], names, labels, run_arms(man), llm)


def typed_metrics_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The metrics file's column types (nullable integers and strings, float values)."""
    df = df[METRICS_COLUMNS].reset_index(drop=True)
    for c in ("mean", "p50", "p95", "repeat_sd", "value"):
        df[c] = df[c].astype("float64")
    for c in ("n", "n_unmeasured", "n_sessions", "repeat", "turn_index"):
        df[c] = df[c].astype("Int64")
    for c in ("segment", "session_id", "unmeasured"):
        df[c] = df[c].astype("string")
    return df


SPILL_SCHEMA = pa.schema([("arm_id", pa.large_string()), ("repeat", pa.int64()), ("session_id", pa.large_string()),
                          ("turn_index", pa.int64()), ("metric", pa.large_string()), ("value", pa.float64()),
                          ("unmeasured", pa.large_string())])  # compute_metrics' per-turn columns, as Arrow


def turn_piece(rows: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """Per-turn rows (SPILL_SCHEMA's columns) as a piece of the metrics table of `schema`: kind
    `turn`, the aggregate columns null. Arrow to Arrow, no frame per piece. A column read as a
    dictionary (the spilled ids) stays one, of the file's value type: ContentHash digests its distinct
    values only, and write_pieces casts it to the file's type as it writes."""
    n = rows.num_rows
    cols, fields = [], []
    for f in schema:
        c = (pa.repeat(pa.scalar("turn", f.type), n) if f.name == "kind" else pa.nulls(n, f.type)
             if f.name not in rows.schema.names else rows.column(f.name))
        if pa.types.is_dictionary(c.type):
            f = f.with_type(pa.dictionary(c.type.index_type, f.type))
        cols.append(c.cast(f.type))
        fields.append(f)
    return pa.Table.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols],
                                schema=pa.schema(fields, schema.metadata))


def metrics_pieces(aggregates: pd.DataFrame, turns: Iterable[pd.DataFrame | pa.Table | pa.RecordBatch],
                   chunk_rows: int = 1_000_000) -> Iterator[pa.Table]:
    """The metrics table as written, a piece at a time: aggregate rows (kind=aggregate), then the
    per-turn rows of each frame (or Arrow table of SPILL_SCHEMA) of `turns` (kind=turn) a million
    at a time, every piece of the first piece's schema."""
    agg = aggregates.assign(kind="aggregate", session_id=None, turn_index=None, repeat=None, value=None,
                            unmeasured=None)
    first = pa.Table.from_pandas(typed_metrics_frame(agg), preserve_index=False)
    yield first
    for pt in turns:
        t = pt if not isinstance(pt, pd.DataFrame) else pa.Table.from_pandas(pt, schema=SPILL_SCHEMA,
                                                                                preserve_index=False)
        for a in range(0, t.num_rows, chunk_rows):  # one piece in memory at a time
            yield turn_piece(t.slice(a, chunk_rows), first.schema)


def write_pieces(run_dir: Path, pieces: Iterable[pa.Table],
                 metadata: dict[str, str] | Callable[[], dict[str, str]] | None = None) -> Path:
    """The run folder's metrics file from `metrics_pieces`, written a piece at a time. `metadata`:
    added to the file (scoring's stamp); a callable is asked once every piece is written (a stamp
    that certifies the pieces' content)."""
    folder = RunFolder(run_dir)
    with folder.metrics_writer() as tmp, ThreadPoolExecutor(1) as io:
        writer, written = None, None  # the piece being written while the next is made (read, hashed)
        try:
            for t in pieces:
                if writer is None:
                    extra = {} if callable(metadata) else {k.encode(): v.encode() for k, v in (metadata or {}).items()}
                    writer = pq.ParquetWriter(tmp, t.schema.with_metadata({**(t.schema.metadata or {}), **extra}))
                if written is not None:
                    written.result()
                written = io.submit(writer.write_table, t.cast(writer.schema) if not t.schema.equals(writer.schema) else t)
            if written is not None:
                written.result()
            if writer is not None and callable(metadata):
                writer.add_key_value_metadata(metadata())
        finally:
            if written is not None:
                wait([written])
            if writer is not None:
                writer.close()
    return tmp.with_name(tmp.name.removesuffix(".tmp"))


def write_metrics(run_dir: Path, res: MetricsResult, metadata: dict[str, str] | None = None,
                  chunk_rows: int = 1_000_000) -> Path:
    """The metrics of a result in memory (`write_pieces`), a million rows at a time."""
    return write_pieces(run_dir, metrics_pieces(res.aggregates, [res.per_turn], chunk_rows), metadata)
