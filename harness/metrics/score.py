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

import pandas as pd
import pyarrow as pa

from harness.defaults import metric_settings
from harness.metrics.coinciding import TOP, CoincidingSums, top_keys
from harness.metrics.blocks import Blocks
from harness.metrics.compute import MetricsResult, compute_metrics, metrics_pieces, write_pieces
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


class _Tables:
    """Every table of the scoring step but the metrics, fed a session group at a time (the groups'
    per-turn rows spilled by (metric, arm) to `spill` for the metrics file, which is written after
    its aggregates)."""

    def __init__(self, labels: pd.DataFrame, man, spill: Path):
        self.settings, self.schema = metric_settings(man.metrics), man.filter_schema
        self.paired = PairedSums(labels, run_arms(man), settings=self.settings)
        self.spread = SpreadSums(settings=self.settings)
        self.filters, self.coinciding, self.holes = [], CoincidingSums(), {}
        self.blocks = Blocks(spill)

    def empty(self, prefix: str) -> "_Tables":
        """One of the same settings with nothing fed yet, spilling to files named by `prefix`: a
        session group scored in another process (harness.metrics.fanout), `merge`d here after."""
        out = copy.copy(self)
        out.paired, out.spread = self.paired.empty(), self.spread.empty()
        out.filters, out.coinciding, out.holes = [], CoincidingSums(), {}
        out.blocks = Blocks(self.blocks.spill, prefix)
        return out

    def close(self) -> None:
        """Nothing is left open: each group's spill file is closed as it is written."""

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
