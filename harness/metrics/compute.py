"""Score a run folder: per-turn values and aggregates per (arm, metric, segment). Reads the run
folder only: never calls a model or a retriever. Unmeasured turns are counted beside the mean,
never averaged in as 0 and never dropped silently."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from harness.manifest import read_manifest
from harness.metrics.ir import DEFAULT_SETTINGS, ir_metric_names, per_turn_ir, present
from harness.metrics.guards import GUARD_COLUMNS, per_turn_guards
from harness.metrics.loop import LOOP_COLUMNS, per_turn_loop
from harness.metrics.operational import OPS_COLUMNS, per_turn_ops
from harness.metrics.segments import Segment, default_segments
from harness.traces import read_traces

FINAL_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "ranking",
                 "not_applicable", "error", "fallback_reason"]


@dataclass
class MetricsResult:
    per_turn: pd.DataFrame  # arm_id, repeat, session_id, turn_index, metric, value, unmeasured
    aggregates: pd.DataFrame  # arm_id, metric, segment, mean, n, n_unmeasured, n_sessions
    arms: list[str]
    metric_names: list[str]
    labels: pd.DataFrame | None = None  # the run's labels (load_labels), for tables that need them


def load_labels(run_dir: Path) -> pd.DataFrame:
    labels = pq.read_table(Path(run_dir) / "labels.parquet").to_pandas()
    segs = [json.loads(s or "{}") for s in labels["segments"]]
    for k in sorted({k for s in segs for k in s}):
        labels[f"seg.{k}"] = [s.get(k) for s in segs]
    return labels


def compute_metrics(run_dir: Path, segments: list[Segment] | None = None) -> MetricsResult:
    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    mcfg = man.get("metrics") or DEFAULT_SETTINGS
    labels = load_labels(run_dir)
    cols = sorted(set(FINAL_COLUMNS) | set(LOOP_COLUMNS) | set(GUARD_COLUMNS) | set(OPS_COLUMNS) | {"params"})
    rounds = read_traces(run_dir, cols).to_pandas()  # every round; the final ones for the ranking metrics
    final = rounds[rounds["is_final"]].reset_index(drop=True)
    arms = [a["arm_id"] for a in man["arms"]]
    names = ir_metric_names(mcfg["cutoffs"], mcfg["ndcg_at"], mcfg["mrr_at"])
    parts = [per_turn_ir(final, labels, names)]
    ops = []
    for arm_id, rep, sid, tix, ranking, na, err, fb in zip(final["arm_id"], final["repeat"], final["session_id"],
                                                           final["turn_index"], final["ranking"],
                                                           final["not_applicable"], final["error"],
                                                           final["fallback_reason"]):
        na, err, fb = present(na), present(err), present(fb)
        why = f"n/a: {na}" if na else None
        zero = np.nan if (na or err) else float(ranking is None or len(ranking) == 0)
        ops.append((arm_id, rep, sid, tix, "zero_results", zero, why or ("error" if err else None)))
        ops.append((arm_id, rep, sid, tix, "error_rate", float(bool(err)), why))
        ops.append((arm_id, rep, sid, tix, "fallback_rate", np.nan if why else float(bool(fb)), why))
    parts.append(pd.DataFrame(ops, columns=parts[0].columns))
    extra = [per_turn_loop(rounds, labels), per_turn_guards(rounds, labels, man.get("filter_schema", [])),
             per_turn_ops(rounds)]
    parts += extra
    jpath = run_dir / "judgments.parquet"
    if jpath.exists():  # written by `harness judge`; metrics never call a model themselves
        j = pd.read_parquet(jpath)
        j = j[~j["status"].astype(str).str.startswith("skipped")]
        extra.append(pd.DataFrame({"arm_id": j["arm_id"], "repeat": j["repeat"], "session_id": j["session_id"],
                                   "turn_index": j["turn_index"], "metric": j["metric"], "value": j["value"].astype(float),
                                   "unmeasured": j["status"].where(j["status"] != "ok", None)}))
        parts.append(extra[-1])
    per_turn = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    names = names + ["zero_results", "error_rate", "fallback_rate"] + [m for e in extra for m in dict.fromkeys(e["metric"])]
    aggregates = aggregate(per_turn, labels, segments or default_segments(labels))
    return MetricsResult(per_turn, aggregates, arms, names, labels)


def aggregate(per_turn: pd.DataFrame, labels: pd.DataFrame, segments: list[Segment]) -> pd.DataFrame:
    """Mean over turns (repeats first averaged per turn), with counts of measured and unmeasured
    turns and the between-repeat spread (mean per-turn standard deviation across repeats)."""
    g = per_turn.groupby(["arm_id", "metric", "session_id", "turn_index"], sort=False)
    turn = g["value"].agg(["mean", "std", "count"]).reset_index()
    turn = turn.rename(columns={"mean": "value", "std": "repeat_sd", "count": "n_measured_repeats"})
    keys = labels[["session_id", "turn_index"]]
    rows = []
    for seg in segments:
        sel = keys[seg.mask(labels).to_numpy()]
        if sel.empty:
            continue
        sub = turn.merge(sel, on=["session_id", "turn_index"], how="inner")
        for (arm_id, metric), grp in sub.groupby(["arm_id", "metric"], sort=False):
            measured = grp["n_measured_repeats"] > 0
            vals = grp.loc[measured, "value"]
            rows.append({
                "arm_id": arm_id, "metric": metric, "segment": seg.name,
                "mean": float(vals.mean()) if len(vals) else np.nan,
                "p50": float(vals.quantile(0.5)) if len(vals) else np.nan,
                "p95": float(vals.quantile(0.95)) if len(vals) else np.nan,
                "n": int(measured.sum()), "n_unmeasured": int((~measured).sum()),
                "n_sessions": int(grp.loc[measured, "session_id"].nunique()),
                "repeat_sd": float(grp["repeat_sd"].mean()) if grp["repeat_sd"].notna().any() else np.nan,
            })
    return pd.DataFrame(rows, columns=["arm_id", "metric", "segment", "mean", "p50", "p95", "n", "n_unmeasured",
                                       "n_sessions", "repeat_sd"])


METRICS_COLUMNS = ["kind", "arm_id", "metric", "segment", "mean", "p50", "p95", "n", "n_unmeasured", "n_sessions",
                   "repeat_sd", "repeat", "session_id", "turn_index", "value", "unmeasured"]


def typed_metrics_frame(df: pd.DataFrame) -> pd.DataFrame:
    """metrics.parquet's column types (nullable integers and strings, float values)."""
    df = df[METRICS_COLUMNS].reset_index(drop=True)
    for c in ("mean", "p50", "p95", "repeat_sd", "value"):
        df[c] = df[c].astype("float64")
    for c in ("n", "n_unmeasured", "n_sessions", "repeat", "turn_index"):
        df[c] = df[c].astype("Int64")
    for c in ("segment", "session_id", "unmeasured"):
        df[c] = df[c].astype("string")
    return df


def write_metrics(run_dir: Path, res: MetricsResult) -> Path:
    """metrics.parquet: aggregate rows (kind=aggregate) and per-turn rows (kind=turn)."""
    agg = res.aggregates.assign(kind="aggregate", session_id=None, turn_index=None, repeat=None, value=None, unmeasured=None)
    pt = res.per_turn.assign(kind="turn", segment=None, mean=None, p50=None, p95=None, n=None, n_unmeasured=None,
                             n_sessions=None, repeat_sd=None)
    df = typed_metrics_frame(pd.concat([agg[METRICS_COLUMNS], pt[METRICS_COLUMNS]], ignore_index=True))
    path = Path(run_dir) / "metrics.parquet"
    tmp = path.with_name("metrics.parquet.tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path

