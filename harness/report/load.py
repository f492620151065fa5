"""The report's view of a run folder. ReportRun composes harness.store.folder.RunData (manifest,
labels, arms, per-turn values and aggregates; checked by harness.analysis.evidence: an unfinished run
is marked partial, stale tables are named, never computed here) with what the report reads
beside it (the trace columns of the drill-down and the tables the scoring step wrote) and its own
display state: a key unique within the report, arm labels, notes about what the folder lacks,
caches. Loading only: what a folder lacks is named in a note, never computed here."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from harness.errors import BadInput
from harness.analysis.evidence import check_run
from harness.metrics.spread import spread_metrics
from harness.metrics.aggregate import turn_values
from harness.metrics.registry import headline, judged
from harness.report.limits import TOP_HITS
from harness.report.table import bucket
from harness.store.folder import AGG_COLUMNS, METRICS, TABLES, TURN_COLUMNS, RunData, RunFolder

TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "issued_queries",
                 "applied_filters", "filter_violations", "filters_removed", "fallback_reason", "not_applicable",
                 "ranking", "verdict", "verdict_reason", "answer", "abstained", "error", "clarify", "turn_class"]
# what the report reads of every trace row; the drill-down reads TRACE_COLUMNS of the sessions it shows
SUMMARY_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "not_applicable", "error"]
RESCORE = "run `harness metrics RUN`"


@dataclass
class ReportRun:
    data: RunData
    key: str  # unique within the report (the run id, suffixed when two folders share one)
    traces: pd.DataFrame  # SUMMARY_COLUMNS and `top` (a key of the top hits), every round
    agg: pd.DataFrame  # the aggregates of the metrics table (no row when not scored)
    arms: list[str]  # arm ids in the manifest's order
    label: dict[str, str]  # arm_id -> label
    tables: dict[str, pd.DataFrame | None]  # comparisons, abstention, filter_fields as scoring wrote them
    missing: set[str] = field(default_factory=set)  # "metrics" or the tables the folder lacks (missing_tables)
    notes: list[str] = field(default_factory=list)  # the warnings about them
    agg_cache: dict | None = None
    spread_cache: dict | None = None
    turn_cache: dict[str, pd.DataFrame] = field(default_factory=dict)  # metric -> turn_values

    @property
    def folder(self) -> RunFolder:
        return self.data.folder

    @property
    def dir(self) -> Path:
        return self.data.path

    @property
    def manifest(self) -> dict:
        return self.data.manifest

    @property
    def labels(self) -> pd.DataFrame:
        return self.data.labels

    @property
    def scored(self) -> bool:
        return self.data.scored

    def turns_of(self, metrics: list[str]) -> pd.DataFrame:
        """The per-turn values of `metrics` (TURN_COLUMNS; none when not scored), read once per metric."""
        t = self.data.turns(metrics)
        return t if t is not None else pd.DataFrame(columns=TURN_COLUMNS)

    @property
    def has_judgments(self) -> bool:
        return self.folder.has_judgments()

    @property
    def headline(self) -> list[str]:
        """The run's headline ranking metrics (harness.metrics.registry.headline: its own cutoffs)."""
        return headline(self.manifest.metrics)

    @property
    def judged(self) -> list[str]:
        """The metrics judgments give (faithfulness, response relevancy: the registry's judged family)."""
        return judged()

    def table(self, name: str) -> pd.DataFrame | None:
        return self.tables[name]

    def aggregate(self, arm: str, metric: str, segment: str = "all") -> dict | None:
        """The aggregate row of (arm, metric, segment), or None (indexed once per run)."""
        if self.agg_cache is None:
            self.agg_cache = {(r["arm_id"], r["metric"], r["segment"]): r for r in self.agg.to_dict("records")}
        return self.agg_cache.get((arm, metric, segment))

    def spread(self, arm: str, metric: str, bucket: str = "all") -> dict | None:
        """The arm's mean with its session-bootstrap 95% CI in a turn bucket, as the scoring step
        wrote it (its `spread` table), or None."""
        if self.spread_cache is None:
            sp = self.tables.get("spread")
            self.spread_cache = {} if sp is None else {(r["arm_id"], r["metric"], r["bucket"]): r
                                                       for r in sp.to_dict("records")}
        return self.spread_cache.get((arm, metric, bucket))

    def turn_values(self, metric: str) -> pd.DataFrame:
        """Per-turn values (repeats averaged, unmeasured turns dropped) with the turn bucket; built
        once per run and metric (callers only read it)."""
        if metric not in self.turn_cache:
            t = turn_values(self.turns_of([metric]))
            self.turn_cache[metric] = t.assign(bucket=t["turn_index"].map(bucket))
        return self.turn_cache[metric]


def load_traces(folder: RunFolder) -> pd.DataFrame:
    """SUMMARY_COLUMNS of every trace row and `top`, a key of its top hits (TOP_HITS: equal lists,
    equal keys), read a part at a time: a month's rankings are never held at once."""
    import numpy as np
    import pyarrow as pa

    from harness.metrics.coinciding import top_keys
    from harness.store.traces import KEY, read_part

    tables, tops = [], []
    for p in folder.parts():
        t = read_part(p, [*SUMMARY_COLUMNS, "ranking"])  # columns an older part lacks: nulls
        tops.append(top_keys(t.column("ranking"), TOP_HITS))
        tables.append(t.drop_columns(["ranking"]))
    if not tables:
        return pd.DataFrame(columns=[*SUMMARY_COLUMNS, "top"])
    t = pa.concat_tables(tables).append_column("top", pa.array(np.concatenate(tops), pa.uint64()))
    df = t.sort_by([(k, "ascending") for k in KEY]).to_pandas()
    return df.astype({"arm_id": "category", "session_id": "category"})


def session_traces(folder: RunFolder, sessions: set[str]) -> pd.DataFrame:
    """TRACE_COLUMNS of the trace rows of `sessions` (what the drill-down shows), read a part at a
    time and filtered; columns that older runs lack are left empty."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from harness.store.traces import KEY, read_part

    ids = pa.array(sorted(sessions), pa.string())
    tables = []
    for p in folder.parts():
        have = set(pq.read_schema(p).names)
        t = read_part(p, [c for c in TRACE_COLUMNS if c in have])
        tables.append(t.filter(pc.is_in(t.column("session_id"), ids)))
    t = pa.concat_tables(tables, promote_options="default").sort_by([(k, "ascending") for k in KEY]).to_pandas() \
        if tables else pd.DataFrame(columns=TRACE_COLUMNS)
    for c in TRACE_COLUMNS:
        if c not in t.columns:
            t[c] = None
    return t[TRACE_COLUMNS]


def missing_tables(data: RunData, traces: pd.DataFrame, agg: pd.DataFrame, tables: dict) -> set[str]:
    """What the folder lacks that the report would show: "metrics" (not scored), or a table the
    scoring step writes whenever the per-turn values hold what it summarises (a measured turn: an
    aggregate with n > 0)."""
    if not data.scored:
        return {"metrics"}
    measured = set(agg.loc[pd.to_numeric(agg["n"], errors="coerce").fillna(0) > 0, "metric"])
    out = set()
    ab = tables["abstention"]
    if (ab is None and "abstained" in measured) or (ab is not None and not any(c.startswith("n[") for c in ab)):
        out.add("abstention")  # missing, or written by a scoring step that did not count per label
    if tables["filter_fields"] is None and measured & {"filter_precision", "filter_recall"}:
        out.add("filter_fields")
    if tables["spread"] is None and measured & set(spread_metrics(data.manifest.metrics)):
        out.add("spread")
    return out


def missing_notes(missing: set[str], traces: pd.DataFrame) -> list[str]:
    if "metrics" in missing:
        if traces.empty:
            return [f"no traces and no {METRICS}: nothing was measured in this run folder."]
        return [f"not scored: {RESCORE} ({METRICS} is missing); the report shows the run's manifest and "
                "traces, and no metric."]
    out = []
    if "abstention" in missing:
        out.append(f"abstention by answerability not scored ({TABLES['abstention']} is missing): {RESCORE}.")
    if "filter_fields" in missing:
        out.append(f"filters per field not scored ({TABLES['filter_fields']} is missing): {RESCORE}.")
    if "spread" in missing:
        out.append(f"confidence intervals of the plots and the headline not scored ({TABLES['spread']} is missing): "
                   f"{RESCORE}.")
    return out


def load_run(path: str | Path, key: str | None = None, data: RunData | None = None) -> ReportRun:
    """One run folder; its key defaults to its run id (load_runs makes the keys unique). `data`: the
    folder as check_run (complete=False, scored=False) loaded it, when the caller did, no table
    scored again."""
    if data is None:
        data = check_run(path, complete=False, scored=False, rescore=False)  # `harness report` rescored it first
    traces = load_traces(data.folder)
    agg = data.aggregates if data.aggregates is not None else pd.DataFrame(columns=AGG_COLUMNS)
    agg = agg.assign(segment=agg["segment"].astype(str))
    arms = [a.arm_id for a in data.arms]
    arms += [a for a in dict.fromkeys(agg["arm_id"]) if a not in arms]
    label = {a.arm_id: a.label for a in data.arms}
    tables = {name: data.folder.table(name) for name in TABLES}
    missing = missing_tables(data, traces, agg, tables)
    return ReportRun(data=data, key=key or data.manifest.run_id or data.name, traces=traces, agg=agg, arms=arms, label={a: label.get(a, a) for a in arms}, tables=tables,
                     missing=missing, notes=missing_notes(missing, traces))


def unique_keys(names: list[str]) -> list[str]:
    """The names with `#n` appended to the nth occurrence (n >= 2) of a repeated name."""
    out, seen = [], {}
    for k in names:
        seen[k] = seen.get(k, 0) + 1
        out.append(k if seen[k] == 1 else f"{k}#{seen[k]}")
    return out


def load_runs(paths: list[str | Path], checked: dict[str, RunData] | None = None) -> list[ReportRun]:
    """`checked`: see load_run's `data`, by resolved folder."""
    if not paths:
        raise BadInput("give at least one run folder")
    runs = [load_run(p, data=(checked or {}).get(str(Path(p).resolve()))) for p in paths]
    for r, k in zip(runs, unique_keys([r.key for r in runs])):
        r.key = k
    return runs
