"""The scoring step (`harness metrics RUN`): every table the CLI and the report show, computed once
from the run folder and written into it: the metrics (per-turn values and aggregates), the
paired comparisons of every arm against the run's reference arm, abstention by answerability,
precision and recall per filter field, the arms whose top-10 lists coincide, and each arm's spread
per turn bucket (the report's bands and headline CIs). Readers only load these; nothing recomputes them.
Every table carries the stamp of what it was computed from (harness/metrics/provenance.py), and
whether the run was complete when it was scored."""
from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.defaults import metric_settings
from harness.metrics.coinciding import TOP, CoincidingSums, top_keys
from harness.metrics.compute import SPILL_SCHEMA, MetricsResult, compute_metrics, metrics_pieces, write_pieces
from harness.metrics.fanout import default_workers
from harness.metrics.families.answers import abstention_table
from harness.metrics.families.guards import filter_fields_table, merge_filter_fields
from harness.metrics.families.pool import hole_sums, holes_rounded
from harness.metrics.groups import GROUP_TURNS, Group, read_rounds
from harness.metrics.paired import PairedSums
from harness.metrics.provenance import ContentHash, certify, metadata, read_stamp, stamp
from harness.metrics.qrels import HUMAN, agreement_table, check_qrels, scored_labels
from harness.metrics.spread import SpreadSums
from harness.store.armset import run_arms
from harness.store.folder import RunFolder, RunFolderError
from harness.store.integrity import Completeness, completeness

TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "applied_filters", "ranking",
                 "verdict_reason", "not_applicable", "error"]
COINCIDING_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "ranking", "verdict_reason", "not_applicable",
                      "error"]

SPILL_IDS = [f.name for f in SPILL_SCHEMA if pa.types.is_large_string(f.type)]  # read back as dictionaries
TURN_GROUP = 131_072  # per-turn rows of one row group of the metrics file: `harness show` reads one per block


@dataclass
class Scored:
    result: MetricsResult
    comparisons: pd.DataFrame
    abstention: pd.DataFrame
    filter_fields: pd.DataFrame
    coinciding: pd.DataFrame
    path: Path  # the metrics file
    completeness: Completeness | None = None  # of the run as scored: partial tables say so
    holes: dict | None = None  # arm -> the pool's holes (harness.analysis.pool_warnings.holes_by_arm)


def _write(folder: RunFolder, name: str, df: pd.DataFrame, meta: dict[str, str]) -> None:
    """A table when it has rows; a table of an earlier scoring that no longer has any goes."""
    if len(df):
        folder.write_table(name, df, meta)
    else:
        folder.remove_table(name)


def scored_qrels(folder: RunFolder) -> str | None:
    """The relevance labels the folder's tables were scored with (None: not scored)."""
    try:
        st = read_stamp(folder) if folder.has_metrics() else None
    except RunFolderError:
        return None
    return None if st is None else scored_labels(st)[0]


def _kept(metric: str) -> bool:
    """The metrics whose per-turn rows the scoring step keeps in memory for what it prints (abstention,
    rounds, answers: an answering arm's, categorical); every other per-turn row only goes to the
    metrics file, and the pool's holes are summed group by group (`_Tables.holes`)."""
    return metric in ("abstained", "answered", "rounds_used")


class _Blocks:
    """The groups' per-turn rows spilled per (metric, arm), a temporary file per group named by
    `prefix` with a row group per (metric, arm), so that the metrics file holds each metric's rows
    of each arm together (in session order) and a reader of one metric reads its blocks only, by
    the row groups' statistics (harness.store.folder.RunFolder)."""

    def __init__(self, spill: Path, prefix: str = ""):
        self.spill, self.prefix = spill, prefix
        self.paths: dict[tuple[str, str], list[tuple[Path, int]]] = {}  # (metric, arm) -> (file, row group)s,
        # in session order
        self.files = 0

    def add(self, per_turn: pd.DataFrame) -> None:
        mc, metrics = pd.factorize(per_turn["metric"])
        ac, arms = pd.factorize(per_turn["arm_id"])
        block = mc * max(len(arms), 1) + ac
        order = np.argsort(block, kind="stable")  # one gather, then a slice per block (rows in their order)
        t = pa.Table.from_pandas(per_turn, schema=SPILL_SCHEMA, preserve_index=False).take(pa.array(order))
        bounds = np.flatnonzero(np.diff(block[order])) + 1
        path = self.spill / f"block-{self.prefix}{self.files:05d}.parquet"
        self.files += 1
        spans = [(a, b) for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)]) if a < b]
        with pq.ParquetWriter(path, SPILL_SCHEMA, write_statistics=False) as w:  # compressed: a month
            for a, b in spans:  # uncompressed filled /tmp
                w.write_table(t.slice(a, b - a), row_group_size=b - a)  # a row group (more past pyarrow's cap)
        md = pq.read_metadata(path)  # each block's row groups, as the file holds them
        starts = np.cumsum([0] + [md.row_group(j).num_rows for j in range(md.num_row_groups)])[:-1]
        for a, b in spans:
            key = (str(metrics[block[order[a]] // max(len(arms), 1)]), str(arms[block[order[a]] % max(len(arms), 1)]))
            self.paths.setdefault(key, []).extend((path, int(j)) for j in np.flatnonzero((starts >= a) & (starts < b)))

    def close(self) -> None:
        """Nothing is left open (each group's file is closed as it is written)."""

    def merge(self, other: "_Blocks") -> None:
        """The files of another (the next session group's, written in another process)."""
        for key, paths in other.paths.items():
            self.paths.setdefault(key, []).extend(paths)

    def turns(self, metrics: list[str], arms: list[str], chunk_rows: int = 1_000_000) -> Iterator[pa.Table]:
        """The spilled rows block by block (metrics in `metrics`' order, arms in `arms`', any other
        after), `chunk_rows` at a time (a block's last piece fewer), never two blocks in one piece."""
        rank_m, rank_a = {m: i for i, m in enumerate(metrics)}, {a: i for i, a in enumerate(arms)}
        footers: dict[Path, pq.FileMetaData] = {}  # each group file's, read once (about 0.75 MB in memory each)
        for key in sorted(self.paths, key=lambda k: (rank_m.get(k[0], len(rank_m)), k[0] if k[0] not in rank_m else "",
                                                     rank_a.get(k[1], len(rank_a)), k[1])):
            yield from _pieces(self.paths[key], chunk_rows, footers)


def _pieces(refs: list[tuple[Path, int]], rows: int, footers: dict) -> Iterator[pa.Table]:
    """The rows of the row groups `refs` in order, `rows` at a time (the last piece fewer), however
    the row groups fall; `footers` caches each file's metadata."""
    held: list[pa.RecordBatch] = []
    n = 0
    for path, group in refs:  # the ids as dictionaries: what is hashed and cast per distinct id, not per row
        if path not in footers:
            footers[path] = pq.read_metadata(path)
        f = pq.ParquetFile(path, metadata=footers[path], read_dictionary=SPILL_IDS)
        for batch in f.read_row_group(group).to_batches(max_chunksize=rows):
            held.append(batch)
            n += batch.num_rows
            while n >= rows:
                t = pa.Table.from_batches(held)
                yield t.slice(0, rows)
                rest = t.slice(rows)
                held, n = rest.to_batches(), rest.num_rows
    if n:
        yield pa.Table.from_batches(held)


class _Tables:
    """Every table of the scoring step but the metrics, fed a session group at a time (the groups'
    per-turn rows spilled by (metric, arm) to `spill` for the metrics file, which is written after
    its aggregates)."""

    def __init__(self, labels: pd.DataFrame, man, spill: Path):
        self.settings, self.schema = metric_settings(man.metrics), man.filter_schema
        self.paired = PairedSums(labels, run_arms(man), settings=self.settings)
        self.spread = SpreadSums(settings=self.settings)
        self.filters, self.coinciding, self.holes = [], CoincidingSums(), {}
        self.blocks = _Blocks(spill)

    def empty(self, prefix: str) -> "_Tables":
        """One of the same settings with nothing fed yet, spilling to files named by `prefix`: a
        session group scored in another process (harness.metrics.fanout), `merge`d here after."""
        out = copy.copy(self)
        out.paired, out.spread = self.paired.empty(), self.spread.empty()
        out.filters, out.coinciding, out.holes = [], CoincidingSums(), {}
        out.blocks = _Blocks(self.blocks.spill, prefix)
        return out

    def close(self) -> None:
        self.blocks.close()

    def merge(self, other: "_Tables") -> None:
        """What an `empty` one was fed (the next session group), added in the groups' order."""
        self.paired.merge(other.paired)
        self.spread.merge(other.spread)
        self.blocks.merge(other.blocks)
        self.filters += other.filters
        self.coinciding.merge(other.coinciding)
        for arm, (n, h, e) in other.holes.items():
            acc = self.holes.setdefault(arm, [0, 0.0, 0.0])
            acc[0], acc[1], acc[2] = acc[0] + n, acc[1] + h, acc[2] + e

    def __call__(self, g: Group) -> None:
        self.paired.add(g.per_turn, g.labels)
        self.spread.add(g.per_turn)
        self.blocks.add(g.per_turn)
        hole_sums(g.per_turn, self.holes)
        # of a ranking only a 64-bit key of its top 10 (equal top 10s, equal keys), not its document ids
        rounds = read_rounds(g.parts, TRACE_COLUMNS, {"ranking": lambda r: pa.array(top_keys(r, TOP), pa.uint64())}
                             ).to_pandas()
        if any(f.get("kind") != "entitlement" for f in self.schema) and len(rounds):
            self.filters.append(filter_fields_table(rounds, g.labels, self.schema))
        self.coinciding.add(rounds.loc[rounds["is_final"], COINCIDING_COLUMNS])


def _hashing(pieces: Iterator[pa.Table], h: ContentHash) -> Iterator[pa.Table]:
    """`pieces` as they come, each hashed in order on a thread of its own while the next is read
    (and the previous written): at most two pieces wait for the hash."""
    with ThreadPoolExecutor(1) as ex:
        pending: deque = deque()
        for piece in pieces:
            pending.append(ex.submit(h.add, piece))
            if len(pending) > 2:
                pending.popleft().result()
            yield piece
        while pending:
            pending.popleft().result()


def score_run(run_dir: Path, measures: list[str] = (), qrels: str | None = None, group_turns: int = GROUP_TURNS,
              workers: int | None = None) -> Scored:
    """Every table of a run folder, written into it; `measures`: ranking measures to compute beyond
    the run's metric settings (`harness metrics -m map`); `qrels`: `human` or `human+llm`, None:
    what the folder was scored with before (a stale run scored again keeps its choice). Scored a
    session group of about `group_turns` labelled turns at a time (harness.metrics.groups), on
    `workers` processes (None: the machine's cores; harness.metrics.fanout)."""
    folder = RunFolder(run_dir)
    man = folder.read_manifest()
    labels = folder.labels()  # for the check and the tables both: a month's labels take a second to read
    done = completeness(folder, man, labels)
    if not done.sound:  # a turn the labels lack, a repeat the manifest does not plan, a key twice
        raise RunFolderError(done.describe())
    qrels = check_qrels(qrels or scored_qrels(folder) or HUMAN)
    st = stamp(folder, man, done)  # the inputs as read now: a later change shows as stale
    with tempfile.TemporaryDirectory(prefix="harness-score-") as tmp:
        acc = _Tables(labels, man, Path(tmp))
        res = compute_metrics(folder.path, measures=measures, qrels=qrels, group_turns=group_turns,
                              each_group=acc, keep=_kept, workers=default_workers() if workers is None else workers)
        st.update(qrels=qrels, llm=dataclasses.asdict(res.llm) if res.llm is not None else None)
        tables = {"comparisons": acc.paired.table(), "abstention": abstention_table(res.per_turn, res.labels),
                  "filter_fields": merge_filter_fields(acc.filters),
                  "coinciding": acc.coinciding.table(res.arms),
                  "spread": acc.spread.table(), "agreement": agreement_table(folder)}
        written = {n: [pa.Table.from_pandas(df, preserve_index=False)] for n, df in tables.items() if len(df)}
        h = ContentHash()  # of the metrics as written: one pass over the spilled rows
        pieces = metrics_pieces(res.aggregates, acc.blocks.turns(res.metric_names, res.arms, TURN_GROUP))
        meta: dict[str, str] = {}

        def stamped() -> dict[str, str]:  # once every piece is written (and hashed)
            meta.update(metadata(certify(st, written, {"metrics": h.hexdigest()})))
            return meta

        path = write_pieces(folder.path, _hashing(pieces, h), stamped)
    for name, df in tables.items():
        _write(folder, name, df, meta)
    return Scored(res, tables["comparisons"], tables["abstention"], tables["filter_fields"], tables["coinciding"],
                  path, done, holes_rounded(acc.holes))
