"""The scoring step (`harness metrics RUN`): every table the CLI and the report show, computed once
from the run folder and written into it: the metrics (per-turn values and aggregates), the
paired comparisons of every arm against the run's reference arm, abstention by answerability,
precision and recall per filter field, the arms whose top-10 lists coincide, and each arm's spread
per turn bucket (the report's bands and headline CIs). Readers only load these; nothing recomputes them.
Every table carries the stamp of what it was computed from (harness/metrics/provenance.py), and
whether the run was complete when it was scored."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from harness.defaults import metric_settings
from harness.metrics.coinciding import coinciding_arms
from harness.metrics.compute import MetricsResult, compute_metrics, metrics_pieces, write_metrics
from harness.metrics.families.answers import abstention_table
from harness.metrics.families.guards import filter_fields_table
from harness.metrics.paired import paired_table
from harness.metrics.provenance import certify, metadata, read_stamp, stamp
from harness.metrics.qrels import HUMAN, agreement_table, check_qrels, scored_labels
from harness.metrics.spread import spread_table
from harness.run.folder import RunFolder, RunFolderError
from harness.run.integrity import Completeness, completeness
from harness.run.traces import read_traces

TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "applied_filters", "ranking",
                 "verdict_reason", "not_applicable", "error"]


@dataclass
class Scored:
    result: MetricsResult
    comparisons: pd.DataFrame
    abstention: pd.DataFrame
    filter_fields: pd.DataFrame
    coinciding: pd.DataFrame
    path: Path  # the metrics file
    completeness: Completeness | None = None  # of the run as scored: partial tables say so


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


def score_run(run_dir: Path, measures: list[str] = (), qrels: str | None = None) -> Scored:
    """Every table of a run folder, written into it; `measures`: ranking measures to compute beyond
    the run's metric settings (`harness metrics -m map`); `qrels`: `human` or `human+llm`, None:
    what the folder was scored with before (a stale run scored again keeps its choice)."""
    folder = RunFolder(run_dir)
    man = folder.read_manifest()
    done = completeness(folder, man)
    if not done.sound:  # a turn the labels lack, a repeat the manifest does not plan, a key twice
        raise RunFolderError(done.describe())
    qrels = check_qrels(qrels or scored_qrels(folder) or HUMAN)
    st = stamp(folder, man, done)  # the inputs as read now: a later change shows as stale
    res = compute_metrics(folder.path, measures=measures, qrels=qrels)
    st.update(qrels=qrels, llm=dataclasses.asdict(res.llm) if res.llm is not None else None)
    settings = metric_settings(man.metrics)
    comparisons = paired_table(res.per_turn, res.labels, res.arm_infos, settings=settings)
    abstention = abstention_table(res.per_turn, res.labels)
    schema = man.filter_schema
    rounds = read_traces(folder.path, TRACE_COLUMNS).to_pandas()
    filters = pd.DataFrame()
    if any(f.get("kind") != "entitlement" for f in schema) and len(rounds):
        filters = filter_fields_table(rounds, res.labels, schema)
    final = rounds[rounds["is_final"]] if len(rounds) else rounds
    same = coinciding_arms(final, res.arms) if len(final) else pd.DataFrame()
    tables = {"comparisons": comparisons, "abstention": abstention, "filter_fields": filters, "coinciding": same,
              "spread": spread_table(res.per_turn, settings=settings),
              "agreement": agreement_table(folder)}
    written = {n: [pa.Table.from_pandas(df, preserve_index=False)] for n, df in tables.items() if len(df)}
    meta = metadata(certify(st, {"metrics": metrics_pieces(res), **written}))  # a table gone or edited shows too
    path = write_metrics(folder.path, res, meta)
    for name, df in tables.items():
        _write(folder, name, df, meta)
    return Scored(res, comparisons, abstention, filters, same, path, done)
