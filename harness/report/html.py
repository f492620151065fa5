"""The HTML review report of one or more run folders: one self-contained file (plots as base64
PNG, no script, no external URL). Data preparation lives here as functions that return plain
dicts and lists; plots in harness.report.plots; markup in templates/report.html.j2, rendered
by jinja2 with autoescape on, so every text from eval sets, corpora, traces and models is
escaped. Reads run folders only; never writes into them."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from harness import env as _env  # noqa: F401  (offline-safe environment first)
from harness.run.manifest import read_manifest
from harness.metrics.families.answers import SHOULD_ABSTAIN
from harness.report.table import TURN_SEGMENTS, bucket
from harness.analysis.stats import session_bootstrap_ci
from harness.run.traces import read_traces

TEMPLATES = Path(__file__).with_name("templates")
BUCKETS = ["1", "2", "3", "4+"]
PLOT_METRICS = ("recall@10", "ndcg@10", "mrr@10")
HEADLINE_METRICS = ("recall@10", "ndcg@10")
GUARD_METRICS = ("identifier_preservation", "identifier_dropped", "filter_precision", "filter_recall",
                 "entitlement_violations", "wrong_filter_zero_relevant")
LOOP_METRICS = ("rounds_used", "rescued", "wasted_rounds", "recall_at_stop")
DRILL_CAP = 30
TOP_HITS = 5
BOOTSTRAP_RESAMPLES = 1000
AGG_COLUMNS = ["arm_id", "metric", "segment", "mean", "p50", "p95", "n", "n_unmeasured", "n_sessions", "repeat_sd"]
TURN_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"]
TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "issued_queries",
                 "applied_filters", "filter_violations", "filters_removed", "fallback_reason", "not_applicable",
                 "ranking", "verdict", "verdict_reason", "answer", "abstained", "error", "clarify", "turn_class"]


# --- small helpers --------------------------------------------------------------------------

def missing(v) -> bool:
    if v is None or v is pd.NA:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def fmt(v, digits: int = 3) -> str:
    """The report's number format (3 decimals); an em dash for a missing value."""
    return "—" if missing(v) else f"{float(v):.{digits}f}"


def text(v) -> str | None:
    """A trace/label string or None (NaN, None and '' are None)."""
    return None if missing(v) or v == "" else str(v)


def as_list(v) -> list:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    return list(v)


def loads(v, default):
    try:
        return json.loads(v) if text(v) else default
    except (TypeError, ValueError):
        return default


def filter_text(f: dict) -> str:
    v = f.get("value")
    v = json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v)
    return f"{f.get('field')} {f.get('op', 'eq')} {v}"


# --- loading ----------------------------------------------------------------------------------

@dataclass
class RunData:
    dir: Path
    key: str  # unique within the report (run_id, suffixed when two folders share one)
    manifest: dict
    labels: pd.DataFrame
    traces: pd.DataFrame
    agg: pd.DataFrame  # kind=aggregate rows of metrics.parquet
    turns: pd.DataFrame  # kind=turn rows of metrics.parquet
    comparisons: pd.DataFrame | None
    has_judgments: bool
    arms: list[str]
    label: dict[str, str]  # arm_id -> short label
    notes: list[str] = field(default_factory=list)
    agg_index: dict | None = None
    turn_cache: dict[str, pd.DataFrame] = field(default_factory=dict)  # metric -> turn_values


def load_traces(run_dir: Path) -> pd.DataFrame:
    """The trace columns the report needs; columns that older runs lack are left empty."""
    import pyarrow.parquet as pq

    parts = sorted((Path(run_dir) / "traces").glob("part-*.parquet"))
    have = set(TRACE_COLUMNS)
    for p in parts:
        have &= set(pq.read_schema(p).names)
    t = read_traces(run_dir, [c for c in TRACE_COLUMNS if c in have]).to_pandas()
    for c in TRACE_COLUMNS:
        if c not in t.columns:
            t[c] = None
    return t[TRACE_COLUMNS]


def load_run(run_dir: Path, key: str | None = None) -> RunData:
    """One run folder; its key defaults to its run id (build_context makes the keys unique)."""
    from harness.metrics.compute import load_labels

    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    labels = load_labels(run_dir)
    traces = load_traces(run_dir)
    notes = []
    mpath = run_dir / "metrics.parquet"
    if mpath.exists():
        m = pd.read_parquet(mpath)
        agg = m[m["kind"] == "aggregate"].reset_index(drop=True)
        turns = m[m["kind"] == "turn"].reset_index(drop=True)
    elif traces.empty:
        agg = pd.DataFrame(columns=AGG_COLUMNS)
        turns = pd.DataFrame(columns=TURN_COLUMNS)
        notes.append("no traces and no metrics.parquet: nothing was measured in this run folder.")
    else:  # scored in memory; the run folder stays untouched
        from harness.metrics.compute import compute_metrics

        res = compute_metrics(run_dir)
        agg, turns = res.aggregates, res.per_turn
        notes.append("metrics.parquet is missing: metrics were computed from the traces at render time "
                     "(run `harness metrics RUN` to write them).")
    agg = agg.assign(segment=agg["segment"].astype(str))
    turns = turns.assign(value=pd.to_numeric(turns["value"], errors="coerce").astype(float),
                         turn_index=turns["turn_index"].astype(int))
    cpath = run_dir / "comparisons.parquet"
    comparisons = pd.read_parquet(cpath) if cpath.exists() else None
    arms = [a["arm_id"] for a in man.get("arms", [])]
    arms += [a for a in dict.fromkeys(agg["arm_id"]) if a not in arms]
    return RunData(dir=run_dir, key=key or man.get("run_id") or run_dir.name, manifest=man, labels=labels,
                   traces=traces, agg=agg, turns=turns, comparisons=comparisons,
                   has_judgments=(run_dir / "judgments.parquet").exists(), arms=arms,
                   label=arm_labels(man, arms), notes=notes)


def arm_labels(manifest: dict, arm_ids: list[str]) -> dict[str, str]:
    """arm_id -> label (harness.run.armset: the config's label, else the name, else the name plus
    what differs); an arm the manifest does not list keeps its id."""
    from harness.run.armset import run_arms

    out = {a.arm_id: a.label for a in run_arms(manifest)}
    return {aid: out.get(aid, aid) for aid in arm_ids}


def _dedupe(names: list[str]) -> list[str]:
    """The names with `#n` appended to the nth occurrence (n >= 2) of a repeated name."""
    out, seen = [], {}
    for k in names:
        seen[k] = seen.get(k, 0) + 1
        out.append(k if seen[k] == 1 else f"{k}#{seen[k]}")
    return out


# --- 1. manifests side by side ------------------------------------------------------------------

def _s(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_s(x)}" for k, x in sorted(v.items()))
    if isinstance(v, list):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def arm_params(a: dict) -> str:
    """The parameter part of an arm id: `depth=100,lane=hybrid` of `original(depth=100,lane=hybrid)`."""
    aid, name = a.get("arm_id", ""), a.get("arm", "")
    if name and aid.startswith(name + "(") and aid.endswith(")"):
        return aid[len(name) + 1:-1]
    return _s(a.get("params") or {})


def manifest_rows(manifests: list[dict]) -> list[dict]:
    """Rows {section, key, values (one string per run), differs} of what defines a run."""
    rows: list[dict] = []

    def add(section: str, key: str, get):
        vals = []
        for m in manifests:
            try:
                vals.append(_s(get(m)))
            except (KeyError, TypeError, AttributeError):
                vals.append("—")
        rows.append({"section": section, "key": key, "vals": vals, "differs": len(set(vals)) > 1})

    add("run", "run_id", lambda m: m.get("run_id"))
    add("run", "status", lambda m: m.get("status"))
    add("run", "config_hash", lambda m: m.get("config_hash"))
    add("run", "started", lambda m: m.get("started"))
    add("run", "ended", lambda m: m.get("ended"))
    add("run", "seed", lambda m: m.get("seed"))
    add("run", "repeats", lambda m: m.get("repeats"))
    for k in ("name", "version", "hash", "path", "splits", "pooled_corpus", "written_here"):
        add("eval set", k, lambda m, k=k: (m.get("eval_set") or {}).get(k))
    add("git", "commit", lambda m: (m.get("git") or {}).get("commit"))
    add("git", "dirty", lambda m: (m.get("git") or {}).get("dirty"))
    add("retrieval", "embedder", lambda m: m.get("embedder"))
    for k in ("max_chars", "chunks", "qdrant"):
        add("retrieval", f"index.{k}", lambda m, k=k: (m.get("index") or {}).get(k))
    add("retrieval", "metrics config", lambda m: m.get("metrics"))
    roles = sorted({r for m in manifests for r in ((m.get("llm") or {}).get("roles") or {})}
                   | {r for m in manifests for a in m.get("arms", []) for r in (a.get("backends") or {})}
                   | {r for m in manifests for r in (m.get("prompt_hashes") or {})})
    for r in roles:
        def model(m, r=r):
            ep = ((m.get("llm") or {}).get("roles") or {}).get(r)
            if ep:
                return f"{ep.get('kind')}: {ep.get('model')}"
            used = {(a.get("backends") or {}).get(r) for a in m.get("arms", [])} - {None}
            return ", ".join(sorted(map(str, used))) if used else None
        add("models per role", r, model)
    for r in roles:  # prompts are recorded for roles with an endpoint; offline roles use none
        def prompt(m, r=r):
            ep = ((m.get("llm") or {}).get("roles") or {}).get(r) or {}
            h = (m.get("prompt_hashes") or {}).get(r)
            return f"{ep.get('prompt') or r + '.v1'} sha {h}" if (ep or h) else None
        add("prompts (name and hash)", r, prompt)
    if all(v == "—" for r in rows if r["section"].startswith("prompts") for v in r["vals"]):
        rows = [r for r in rows if not r["section"].startswith("prompts")]
        add("prompts (name and hash)", "all roles", lambda m: "none recorded: no role has an endpoint (offline rules)")
    add("llm", "cache", lambda m: (m.get("llm") or {}).get("cache"))
    names = list(dict.fromkeys(a.get("arm") or a["arm_id"] for m in manifests for a in m.get("arms", [])))
    for name in names:
        add("arms (parameters, one line per arm)", name, lambda m, name=name: "\n".join(
            arm_params(a) for a in m.get("arms", []) if (a.get("arm") or a["arm_id"]) == name) or None)
    pkgs = list(dict.fromkeys(k for m in manifests for k in (m.get("versions") or {})))
    for p in pkgs:
        add("versions", p, lambda m, p=p: (m.get("versions") or {}).get(p))
    for k in ("turns", "rows", "errors", "fallbacks", "not_applicable", "llm_calls", "cache_hits", "http_calls", "seconds"):
        add("counts", k, lambda m, k=k: (m.get("counts") or {}).get(k))
    return rows


def differing(rows: list[dict], max_keys: int = 8) -> list[dict]:
    """Per section, the keys whose values differ between runs (only a count past max_keys)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r["differs"]:
            out.setdefault(r["section"], []).append(r["key"])
    return [{"section": s, "names": k if len(k) <= max_keys else [], "count": len(k)} for s, k in out.items()]


def group_rows(rows: list[dict]) -> list[dict]:
    out: list[dict] = []
    for r in rows:
        if not out or out[-1]["section"] != r["section"]:
            out.append({"section": r["section"], "rows": []})
        out[-1]["rows"].append(r)
    return out


# --- 2. metrics by turn index -------------------------------------------------------------------

def _cell(run_key: str, arm: str, metric: str, segment: str, row) -> dict:
    if row is None:
        return {"present": False}
    n, nu = int(row["n"]) if not missing(row["n"]) else 0, int(row["n_unmeasured"]) if not missing(row["n_unmeasured"]) else 0
    return {"present": True, "run": run_key, "arm": arm, "metric": metric, "segment": segment,
            "mean": fmt(row["mean"]) if n else "n/a", "n": n, "n_unmeasured": nu}


def _agg_index(run: RunData) -> dict:
    """(arm_id, metric, segment) -> aggregate row, built once per run."""
    if run.agg_index is None:
        run.agg_index = {(r["arm_id"], r["metric"], r["segment"]): r for r in run.agg.to_dict("records")}
    return run.agg_index


def metric_table(run: RunData, metric: str) -> dict:
    """The exact aggregate numbers of metrics.parquet for one metric: turn-index segments as
    columns (main table) and every other segment as rows (details table)."""
    idx = _agg_index(run)
    segs_here = list(dict.fromkeys(run.agg.loc[run.agg["metric"] == metric, "segment"]))
    main = [s for s in TURN_SEGMENTS if s in segs_here]
    other = [s for s in segs_here if s not in main]
    arms = [a for a in run.arms if any((a, metric, s) in idx for s in segs_here)]
    rows = [{"arm": a, "label": run.label[a],
             "cells": [_cell(run.key, a, metric, s, idx.get((a, metric, s))) for s in main]} for a in arms]
    other_rows = [{"segment": s, "cells": [_cell(run.key, a, metric, s, idx.get((a, metric, s))) for a in arms]}
                  for s in other]
    return {"metric": metric, "segments": main, "rows": rows, "other_segments": other_rows,
            "arms": [{"arm": a, "label": run.label[a]} for a in arms]}


def turn_values(run: RunData, metric: str) -> pd.DataFrame:
    """Per-turn values (repeats averaged, unmeasured turns dropped) with the turn bucket; built
    once per run and metric (callers only read it)."""
    if metric not in run.turn_cache:
        t = run.turns[(run.turns["metric"] == metric)]
        t = t.groupby(["arm_id", "session_id", "turn_index"], sort=False)["value"].mean().dropna().reset_index()
        run.turn_cache[metric] = t.assign(bucket=t["turn_index"].map(bucket))
    return run.turn_cache[metric]


def turn_series(run: RunData, metric: str, n_resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[list[dict], list[str]]:
    """Mean per turn bucket (1, 2, 3, 4+) per arm with a session-level bootstrap 95% CI."""
    tv = turn_values(run, metric)
    have = set(run.labels["turn_index"].map(bucket))
    buckets = [b for b in BUCKETS if b in have]
    series = []
    for i, arm in enumerate(run.arms):
        g = tv[tv["arm_id"] == arm]
        if g.empty:
            continue
        pts = []
        for b in buckets:
            gb = g[g["bucket"] == b]
            if gb.empty:
                pts.append({"bucket": b, "mean": None, "lo": None, "hi": None, "n": 0})
                continue
            frame = pd.DataFrame({"session_id": gb["session_id"].to_numpy(), "turn_index": gb["turn_index"].to_numpy(),
                                  "a": 0.0, "b": gb["value"].to_numpy(float)})
            mean, lo, hi = session_bootstrap_ci(frame, n_resamples=n_resamples, seed=0)
            pts.append({"bucket": b, "mean": float(mean), "lo": float(lo), "hi": float(hi), "n": int(len(gb)),
                        "n_sessions": int(gb["session_id"].nunique())})
        series.append({"arm": arm, "label": run.label[arm], "color_index": i, "points": pts})
    return series, buckets


# --- 3. cost and latency ----------------------------------------------------------------------

def tradeoff_rows(run: RunData) -> list[dict]:
    """recall@10, cost per turn, LLM calls and latency per arm (segment all)."""
    idx = _agg_index(run)
    out = []
    for i, arm in enumerate(run.arms):
        rec = idx.get((arm, "recall@10", "all"))
        if rec is None or not rec["n"]:
            continue
        cost = idx.get((arm, "cost_usd", "all"))
        lat = idx.get((arm, "latency_total_ms", "all"))
        calls = idx.get((arm, "llm_calls", "all"))
        cost_v = float(cost["mean"]) if cost is not None and cost["n"] else None
        out.append({
            "arm": arm, "label": run.label[arm], "color_index": i, "y": float(rec["mean"]), "recall": fmt(rec["mean"]),
            "cost": cost_v, "cost_text": (f"{cost_v:.6f}" if cost_v is not None else "unmeasured"),
            "cost_unmeasured": int(cost["n_unmeasured"]) if cost is not None else 0,
            "llm_calls": fmt(calls["mean"], 2) if calls is not None else "—",
            "p50_ms": fmt(lat["p50"], 1) if lat is not None else "—",
            "p95_ms": float(lat["p95"]) if lat is not None and not missing(lat["p95"]) else None,
            "p95_text": fmt(lat["p95"], 1) if lat is not None else "—",
        })
    for n, r in enumerate(out, start=1):  # the numbers of the plot's legend
        r["num"] = n
    return out


# --- 4. rounds of the corrective arms -----------------------------------------------------------

def rounds_section(run: RunData) -> dict | None:
    r = run.turns[run.turns["metric"] == "rounds_used"].dropna(subset=["value"])
    if r.empty:
        return None
    r = r.assign(rounds=r["value"].astype(int), bucket=r["turn_index"].map(bucket))
    have = set(r["arm_id"])
    arms = [a for a in run.arms if a in have]
    max_r = int(r["rounds"].max())
    cols = list(range(1, max_r + 1))
    dist, by_turn = [], []
    for a in arms:
        g = r[r["arm_id"] == a]
        counts = g["rounds"].value_counts().to_dict()
        dist.append({"arm": a, "label": run.label[a], "counts": {int(k): int(v) for k, v in counts.items()},
                     "cells": [int(counts.get(c, 0)) for c in cols], "n": int(len(g)), "mean": fmt(g["rounds"].mean(), 2)})
        for b in BUCKETS:
            gb = g[g["bucket"] == b]
            if not gb.empty:
                vc = gb["rounds"].value_counts()
                by_turn.append({"label": run.label[a], "bucket": b, "cells": [int(vc.get(c, 0)) for c in cols]})
    idx = _agg_index(run)
    loop = [{"label": run.label[a], "cells": [_cell(run.key, a, m, "all", idx.get((a, m, "all"))) for m in LOOP_METRICS]}
            for a in arms]
    return {"columns": cols, "dist": dist, "by_turn": by_turn, "loop_metrics": list(LOOP_METRICS), "loop": loop}


# --- 5. identifiers and filters -----------------------------------------------------------------

def guard_section(run: RunData) -> dict | None:
    idx = _agg_index(run)
    have = set(run.agg["metric"])
    metrics = [m for m in GUARD_METRICS if m in have]
    if not metrics:
        return None
    rows = [{"label": run.label[a], "arm": a, "cells": [_cell(run.key, a, m, "all", idx.get((a, m, "all"))) for m in metrics]}
            for a in run.arms]
    fields = None
    schema = run.manifest.get("filter_schema") or []
    if any(f.get("kind") != "entitlement" for f in schema) and not run.traces.empty:
        from harness.metrics.families.guards import filter_fields_table

        ff = filter_fields_table(run.traces, run.labels, schema)
        if not ff.empty:  # rows: fields; columns: arms; cell: precision / recall (applied / expected)
            have = set(ff["arm_id"])
            arms = [a for a in run.arms if a in have]
            by = {(r["arm_id"], r["field"]): r for r in ff.to_dict("records")}
            fields = {"arms": [{"arm": a, "label": run.label[a]} for a in arms], "rows": [
                {"field": f, "cells": [None if (a, f) not in by else
                                       {"precision": fmt(by[(a, f)]["precision"]), "recall": fmt(by[(a, f)]["recall"]),
                                        "applied": int(by[(a, f)]["applied"]), "expected": int(by[(a, f)]["expected"])}
                                       for a in arms]}
                for f in sorted(set(ff["field"]), key=str)]}
    return {"metrics": metrics, "rows": rows, "fields": fields}


# --- 6. abstention --------------------------------------------------------------------------

def abstention_section(run: RunData) -> dict | None:
    ab = run.turns[run.turns["metric"] == "abstained"].dropna(subset=["value"])
    if ab.empty:
        return None
    ab = ab.merge(run.labels[["session_id", "turn_index", "answerability"]], on=["session_id", "turn_index"])
    ab = ab.assign(answerability=ab["answerability"].fillna("(unlabelled)").astype(str))
    labels = sorted(set(ab["answerability"]))
    rows = []
    for a in run.arms:
        g = ab[ab["arm_id"] == a]
        if g.empty:
            continue
        did = g["value"] >= 0.5
        should = g["answerability"].isin(SHOULD_ABSTAIN)
        tp = int((did & should).sum())
        cells = []
        for lab in labels:
            gl = g[g["answerability"] == lab]
            k = int((gl["value"] >= 0.5).sum())
            cells.append({"n": int(len(gl)), "k": k, "rate": fmt(k / len(gl)) if len(gl) else "—"})
        rows.append({"label": run.label[a], "n": int(len(g)), "abstained": int(did.sum()),
                     "precision": fmt(tp / int(did.sum())) if did.any() else "—",
                     "recall": fmt(tp / int(should.sum())) if should.any() else "—", "cells": cells})
    return {"labels": labels, "rows": rows}


# --- 7. paired comparisons ------------------------------------------------------------------

def comparison_rows(run: RunData) -> list[dict]:
    c = run.comparisons
    if c is None or c.empty:
        return []
    out = []
    for r in c.to_dict("records"):
        lo, hi, p_holm = r.get("ci_lo"), r.get("ci_hi"), r.get("p_holm")
        sig = not missing(p_holm) and p_holm < 0.05 and not missing(lo) and not missing(hi) and (lo > 0 or hi < 0)
        gap = r.get("oracle_gap_closed")
        out.append({
            "metric": r.get("metric"), "segment": r.get("segment"),
            "reference": run.label.get(r.get("reference"), r.get("reference")),
            "arm": run.label.get(r.get("arm"), r.get("arm")), "arm_id": r.get("arm"),
            "n_turns": r.get("n_turns"), "n_sessions": r.get("n_sessions"), "n_unmeasured": r.get("n_unmeasured"),
            "mean_ref": fmt(r.get("mean_ref")), "mean_arm": fmt(r.get("mean_arm")),
            "diff": "—" if missing(r.get("diff")) else f"{r['diff']:+.3f}",
            "ci": "—" if missing(lo) else f"[{lo:+.3f}, {hi:+.3f}]",
            "p": "—" if missing(r.get("p")) else f"{r['p']:.4f}",
            "p_holm": "—" if missing(p_holm) else f"{p_holm:.4f}",
            "wtl": f"{r.get('wins')}/{r.get('ties')}/{r.get('losses')}",
            "mde": fmt(r.get("mde")), "gap": "—" if missing(gap) else f"{gap:.0%}",
            "cls": (("better" if r["diff"] * (-1 if r.get("direction") == "lower" else 1) > 0 else "worse")
                    if sig and r.get("direction") != "none" else ""),
        })
    return out


# --- 8. per-session drill-down ----------------------------------------------------------------

def find_eval_set(run: RunData) -> Path | None:
    p = (run.manifest.get("eval_set") or {}).get("path")
    if not p:
        return None
    p = Path(p)
    cands = [p] if p.is_absolute() else [Path.cwd() / p, run.dir.parent.parent / p, run.dir.parent / p]
    return next((c for c in cands if (c / "corpus.jsonl").is_file()), None)


def corpus_docs(root: Path | None, doc_ids: set[str], snippet: int = 240) -> dict[str, dict]:
    """Title and the start of the text of the given documents (streamed; other lines skipped)."""
    out: dict[str, dict] = {}
    if root is None or not doc_ids:
        return out
    with open(root / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            did = str(d.get("doc_id"))
            if did in doc_ids:
                t = str(d.get("text") or "")
                out[did] = {"title": str(d.get("title") or ""),
                            "snippet": t[:snippet] + ("…" if len(t) > snippet else "")}
                if len(out) == len(doc_ids):
                    break
    return out


def disagreement(run: RunData) -> pd.DataFrame:
    """Per session: how much the arms disagree (sum over turns of the spread of recall@10 across
    arms, plus half that of ndcg@10, plus distinct top-5 lists beyond the first / 10)."""
    score = pd.Series(0.0, index=pd.Index(sorted(set(run.labels["session_id"])), name="session_id"))
    for m, w in (("recall@10", 1.0), ("ndcg@10", 0.5)):
        tv = turn_values(run, m)
        if tv.empty:
            continue
        spread = tv.groupby(["session_id", "turn_index"])["value"].agg(lambda v: v.max() - v.min())
        score = score.add(w * spread.groupby(level="session_id").sum(), fill_value=0.0)
    tr = run.traces
    if not tr.empty:
        fin = tr[tr["is_final"] & (tr["repeat"] == tr["repeat"].min())]
        top = fin.assign(top=fin["ranking"].map(lambda r: tuple(as_list(r)[:TOP_HITS])))
        distinct = top.groupby(["session_id", "turn_index"])["top"].nunique() - 1
        score = score.add(0.1 * distinct.groupby(level="session_id").sum(), fill_value=0.0)
    score = score.round(6)  # ties by session id, not by float noise
    return score.rename("score").reset_index().sort_values(["score", "session_id"], ascending=[False, True])


def _arm_cell(run: RunData, arm: str, rows: list[dict] | None, relevant: dict[str, int], docs: dict,
              scores: dict, entitlement: set[str]) -> dict:
    """One arm on one turn: its rounds (trace rows, sorted by round), final hits, answer, scores."""
    if not rows:
        return {"label": run.label[arm], "arm": arm, "missing": True}
    final = rows[-1]
    rounds = [{"round": int(r["round"]), "queries": [str(q) for q in as_list(r["issued_queries"])],
               "verdict": text(r["verdict"]),
               "verdict_reason": text(r["verdict_reason"])} for r in rows]
    hits = [{"doc_id": str(d), "relevant": d in relevant,
             "title": (docs.get(d) or {}).get("title", "")} for d in as_list(final["ranking"])[:TOP_HITS]]
    clarify = loads(final["clarify"], None)
    return {
        "label": run.label[arm], "arm": arm, "missing": False, "rounds": rounds, "multi_round": len(rounds) > 1,
        "filters": [{"text": filter_text(f), "account": f.get("field") in entitlement}
                    for f in loads(final["applied_filters"], []) if isinstance(f, dict)],
        "filters_removed": [str(x) for x in as_list(final["filters_removed"])],
        "violations": [str(x) for x in as_list(final["filter_violations"])],
        "verdict": text(final["verdict"]), "verdict_reason": text(final["verdict_reason"]),
        "fallback": text(final["fallback_reason"]), "not_applicable": text(final["not_applicable"]),
        "error": text(final["error"]), "turn_class": text(final["turn_class"]),
        "clarify": json.dumps(clarify, ensure_ascii=False) if clarify else None,
        "hits": hits,
        "answer": text(final["answer"]), "abstained": None if missing(final["abstained"]) else bool(final["abstained"]),
        "scores": scores,
    }


def drilldown(run: RunData, cap: int = DRILL_CAP) -> dict:
    """The counterfactual view: sessions where the arms disagree most first (ties by id), turn by
    turn, every arm side by side (repeat 0 of multi-repeat runs)."""
    order = disagreement(run)
    chosen = order.head(cap)
    tr = run.traces
    rep0 = int(tr["repeat"].min()) if not tr.empty else 0
    chosen_ids = set(chosen["session_id"])
    tr = tr[(tr["repeat"] == rep0) & tr["session_id"].isin(chosen_ids)]
    by_key: dict[tuple, list[dict]] = {}
    for r in tr.sort_values("round").to_dict("records"):
        by_key.setdefault((r["arm_id"], r["session_id"], int(r["turn_index"])), []).append(r)
    labs = run.labels[run.labels["session_id"].isin(chosen_ids)]
    turn_scores: dict[tuple, dict] = {}
    for m in ("recall@10", "ndcg@10"):
        tv = turn_values(run, m)
        tv = tv[tv["session_id"].isin(chosen_ids)]
        for r in tv.itertuples():
            turn_scores.setdefault((r.arm_id, r.session_id, r.turn_index), {})[m] = fmt(r.value)
    needed = set()
    for r in labs.itertuples():
        needed |= set(loads(r.qrels, {}))
    for rows in by_key.values():
        for r in rows:
            needed |= {str(d) for d in as_list(r["ranking"])[:TOP_HITS]}
    es_root = find_eval_set(run)
    docs = corpus_docs(es_root, needed)
    entitlement = {f.get("field") for f in run.manifest.get("filter_schema") or [] if f.get("kind") == "entitlement"}
    sessions = []
    for s in chosen.itertuples():
        turns = []
        for lab in labs[labs["session_id"] == s.session_id].sort_values("turn_index").to_dict("records"):
            tix = int(lab["turn_index"])
            qrels = {str(d): int(g) for d, g in loads(lab["qrels"], {}).items()}
            relevant = {d: g for d, g in qrels.items() if g >= 1}
            arms = [_arm_cell(run, a, by_key.get((a, s.session_id, tix)), relevant, docs,
                              turn_scores.get((a, s.session_id, tix), {}), entitlement) for a in run.arms]
            found = {d: [c["label"] for c in arms if not c["missing"] and d in {h["doc_id"] for h in c["hits"]}]
                     for d in relevant}
            turns.append({
                "turn_index": tix, "user": text(lab["user"]) or "", "query_type": text(lab.get("query_type")),
                "language": text(lab.get("language")), "answerability": text(lab.get("answerability")),
                "reference_rewrite": text(lab.get("reference_rewrite")),
                "identifiers": [str(i) for i in as_list(lab.get("identifiers"))],
                "expected_filters": [filter_text(f) for f in loads(lab.get("expected_filters"), []) if isinstance(f, dict)],
                "qrels_measured": bool(lab.get("qrels_measured", True)),
                "relevant": [{"doc_id": d, "grade": g, "title": (docs.get(d) or {}).get("title", ""),
                              "snippet": (docs.get(d) or {}).get("snippet", ""), "found_by": found[d]}
                             for d, g in sorted(relevant.items(), key=lambda x: (-x[1], x[0]))],
                "arms": arms,
            })
        first = turns[0]["user"] if turns else ""
        sessions.append({"session_id": s.session_id, "score": f"{s.score:.2f}", "turns": turns,
                         "preview": first[:90] + ("…" if len(first) > 90 else "")})
    return {"sessions": sessions, "total": int(len(order)), "cap": cap, "repeat": rep0,
            "repeats": int(run.manifest.get("repeats") or 1), "corpus": str(es_root) if es_root else None}


# --- 9. warnings -------------------------------------------------------------------------------

def unmeasured_groups(run: RunData) -> list[tuple[list[str], str]]:
    """Metrics with unmeasured turns (segment all), those with the same pattern grouped:
    [(metrics, "12 turns in every arm (no relevant document)")]."""
    all_seg = run.agg[(run.agg["segment"] == "all") & (run.agg["n_unmeasured"].fillna(0) > 0)]
    reasons: dict[str, set] = {}
    if "unmeasured" in run.turns:
        for m, r in run.turns.dropna(subset=["unmeasured"])[["metric", "unmeasured"]].drop_duplicates().itertuples(index=False):
            reasons.setdefault(m, set()).add(str(r))
    n_arms = len(set(run.agg.loc[run.agg["segment"] == "all", "arm_id"]))
    groups: dict[str, list[str]] = {}
    for metric, g in all_seg.groupby("metric", sort=False):
        counts = {run.label.get(a, a): int(k) for a, k in zip(g["arm_id"], g["n_unmeasured"])}
        if len(counts) == n_arms and len(set(counts.values())) == 1:
            what = f"{next(iter(counts.values()))} turn(s) in every arm"
        else:
            what = "; ".join(f"{lab}: {k}" for lab, k in counts.items())
        why = sorted(reasons.get(metric, ()))
        groups.setdefault(what + (f" ({', '.join(why)})" if why else ""), []).append(metric)
    return [(ms, what) for what, ms in groups.items()]


def warnings(run: RunData) -> list[dict]:
    """{level: warn|info, text} about what limits the reading of this run."""
    out = [{"level": "warn", "text": n} for n in run.notes]
    man = run.manifest
    if man.get("status") not in (None, "complete"):
        out.append({"level": "warn", "text": f"run status is {man.get('status')!r}"
                    + (f": {man['failure']}" if man.get("failure") else "")})
    es = man.get("eval_set") or {}
    if es.get("pooled_corpus"):
        out.append({"level": "warn", "text": f"pooled corpus ({es.get('name')}): every document is relevant to some "
                    "turn, so absolute scores are inflated; compare arms, not leaderboard numbers."})
    if (man.get("git") or {}).get("dirty"):
        out.append({"level": "info", "text": "the work tree had uncommitted changes (git dirty) when the run started."})
    all_seg = run.agg[run.agg["segment"] == "all"]
    for metrics, what in unmeasured_groups(run):
        out.append({"level": "warn", "text": f"unmeasured turns (counted beside the mean, never averaged in) of "
                    f"{', '.join(metrics)}: {what}"})
    na_all = all_seg[(all_seg["metric"] == "recall@10") & (all_seg["n"].fillna(0) == 0)]["arm_id"].tolist()
    for a in na_all:
        out.append({"level": "warn", "text": f"{run.label.get(a, a)} is n/a on every turn of this set."})
    tr = run.traces
    if not tr.empty:
        fin = tr[tr["is_final"]]
        na = fin[fin["not_applicable"].map(lambda x: text(x) is not None)]
        for a, g in na.groupby("arm_id", sort=False):
            if a in na_all:
                continue
            why = ", ".join(sorted({str(x) for x in g["not_applicable"]}))
            out.append({"level": "info", "text": f"{run.label.get(a, a)} is n/a on {len(g)} of "
                        f"{int((fin['arm_id'] == a).sum())} turn(s) ({why})."})
        err = fin[fin["error"].map(lambda x: text(x) is not None)]
        for a, g in err.groupby("arm_id", sort=False):
            out.append({"level": "warn", "text": f"{run.label.get(a, a)}: {len(g)} turn(s) ended in an error "
                        f"(e.g. {text(g['error'].iloc[0])})."})
    answers = run.turns[run.turns["metric"] == "answered"]
    if not run.has_judgments:
        who = ", ".join(run.label.get(a, a) for a in dict.fromkeys(answers["arm_id"]))
        out.append({"level": "warn", "text": "faithfulness not measured (no judgments.parquet; run `harness judge RUN` "
                    "with a judge endpoint)" + (f"; arms with answers: {who}." if who else "; no arm answered.")})
    if int(man.get("repeats") or 1) > 1:
        out.append({"level": "info", "text": f"{man.get('repeats')} repeats: metrics average the repeats per turn; "
                    "the drill-down shows the first repeat."})
    if run.comparisons is None:
        out.append({"level": "info", "text": "no comparisons.parquet (no `original` arm, or metrics not run): "
                    "no paired comparisons."})
    return out


# --- the whole report --------------------------------------------------------------------------

def headline(runs: list[RunData]) -> dict:
    arms = list(dict.fromkeys(a for r in runs for a in r.arms))
    rows = []
    for a in arms:
        cells = []
        for r in runs:
            idx = _agg_index(r)
            for m in HEADLINE_METRICS:
                cells.append(_cell(r.key, a, m, "all", idx.get((a, m, "all"))))
        rows.append({"arm": a, "label": next((r.label[a] for r in runs if a in r.label), a), "cells": cells})
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["label"]] = seen.get(row["label"], 0) + 1
    for row in rows:  # the same label for different arm ids (e.g. other defaults): show the id
        row["show_id"] = seen[row["label"]] > 1
    return {"metrics": list(HEADLINE_METRICS), "rows": rows}


def run_context(run: RunData, plots: bool = True) -> dict:
    from harness.report import plots as P

    ir = [m for m in dict.fromkeys(run.agg["metric"]) if m.startswith(("recall@", "ndcg@", "mrr@"))]
    ir = [m for m in PLOT_METRICS if m in ir] + [m for m in ir if m not in PLOT_METRICS]
    metrics = []
    for m in ir:
        tab = metric_table(run, m)
        plot = None
        if m in PLOT_METRICS and plots:
            series, buckets = turn_series(run, m)
            if series and buckets:
                plot = P.metric_by_turn(series, buckets, m, f"{m} by turn index — {run.key} (95% session bootstrap CI)")
        metrics.append({**tab, "plot": plot})
    trade = tradeoff_rows(run)
    rounds = rounds_section(run)
    es = run.manifest.get("eval_set") or {}
    return {
        "key": run.key, "dir": str(run.dir), "eval_set": f"{es.get('name')} {es.get('version')}",
        "arms": [{"arm": a, "label": run.label[a],
                  "backends": json.dumps(next((x.get("backends") for x in run.manifest.get("arms", [])
                                              if x["arm_id"] == a), {}) or {}, sort_keys=True)}
                 for a in run.arms],
        "n_sessions": int(run.labels["session_id"].nunique()), "n_turns": int(len(run.labels)),
        "metrics": metrics,
        "tradeoff": trade,
        "tradeoff_plot": P.tradeoff(trade, f"recall@10 vs cost and p95 latency — {run.key}") if trade and plots else None,
        "rounds": rounds,
        "rounds_plot": P.rounds_bars(rounds["dist"], f"rounds used — {run.key}") if rounds and plots else None,
        "guards": guard_section(run),
        "abstention": abstention_section(run),
        "comparisons": comparison_rows(run),
        "has_comparisons": run.comparisons is not None,
        "drill": drilldown(run),
        "warnings": warnings(run),
        "agreement": _agreement(run),
        "config": json.dumps(run.manifest.get("config"), indent=2, sort_keys=True, ensure_ascii=False, default=str),
    }


def _agreement(run) -> dict | None:
    """How far the judge's faithfulness agrees with people's ratings (harness import ratings)."""
    from harness.analysis.review import judge_agreement

    a = judge_agreement(run.dir)
    if not a or not a.get("n"):
        return None
    return {"n": a["n"], "agreement": f"{a['agreement']:.0%}", "judge": f"{a['judge_mean']:.3f}",
            "human": f"{a['human_mean']:.3f}"}


def build_context(run_dirs: list[Path], plots: bool = True) -> dict:
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise ValueError("give at least one run folder")
    runs = [load_run(d) for d in dirs]
    keys = _dedupe([r.key for r in runs])  # the run ids, suffixed when two folders share one
    for r, k in zip(runs, keys):
        r.key = k
    rows = manifest_rows([r.manifest for r in runs])
    return {
        "title": "Review report: " + ", ".join(keys),
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_keys": keys,
        "top_hits": TOP_HITS,
        "abstention_should": sorted(SHOULD_ABSTAIN),
        "manifest_groups": group_rows(rows),
        "differing": differing(rows),
        "headline": headline(runs),
        "runs": [run_context(r, plots) for r in runs],
    }


def environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    return env


def render_html(context: dict) -> str:
    return environment().get_template("report.html.j2").render(**context)


def render_report(run_dirs: list[Path], out: Path) -> Path:
    """Write one self-contained HTML report of the run folders to `out`; returns `out`."""
    html = render_html(build_context(run_dirs))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
