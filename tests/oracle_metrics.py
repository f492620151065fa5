"""The reference implementation of the metrics, kept as a test oracle: pandas over trace rows and
ranx for the ranking metrics, one turn at a time. Slow (hours at 100,000s of turns) but plain;
`harness.metrics` (array kernels) must give the same values (tests/metrics/test_metrics_oracle.py)."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

try:
    import fcntl
except ImportError:  # Windows: no lock, each test process compiles its own kernels
    fcntl = None

from harness.store.armset import run_arms
from harness.guards.identifiers import preserved
from harness.store.manifest import read_manifest
from harness.metrics.aggregate import _quantiles
from harness.store.folder import AGG_COLUMNS
from harness.metrics.compute import MetricsResult, load_labels
from harness.metrics.families.guards import _norm_filter
from harness.metrics.registry import ranking_names
from harness.metrics.segments import default_segments
from harness.store.traces import read_traces

COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"]
from harness.metrics.kernel import LATENCY  # noqa: E402
DEFAULT_CAPS = frozenset({"ranking", "queries", "replayed"})


def present(x):
    """A string column value, or None for missing (None, NaN, pandas NA, empty)."""
    if x is None or (not isinstance(x, str) and pd.isna(x)) or x == "":
        return None
    return x


RANX = {"recall": "recall", "precision": "precision", "success": "hit_rate", "ndcg": "ndcg", "mrr": "mrr", "map": "map",
        "rprec": "r-precision"}  # the ranking family's measures by ranx's names


def ranx_name(name: str) -> str:
    stem, at, k = name.partition("@")
    return RANX[stem] + at + k


_COMPILED: set[str] = set()  # the metrics whose ranx kernels this process has run


@contextlib.contextmanager
def _compile_lock(names: list[str]):
    """The first ranx call of a process with a metric it has not run yet holds an exclusive lock on
    the numba cache folder: a second test process (pytest -n) waits for the kernels the first one
    is compiling and then loads them from the cache, instead of compiling the same kernels beside it
    (about 35 s of CPU in a fresh clone)."""
    new = set(names) - _COMPILED
    if not new or fcntl is None:
        yield
        return
    folder = Path(os.environ["NUMBA_CACHE_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "ranx-compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _COMPILED.update(new)


def ranx_scores(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], names: list[str]) -> dict:
    """ranx's value of each metric in `names` for each query of `run`: {metric: {query: value}}.
    Rankings empty in `run` are measured (make_comparable adds them back: they score 0).

    ranx keeps the documents of a Qrels or Run in numpy arrays of dtype <U(longest doc id), and numba
    compiles its kernels again for every new width (5-20 s each, in every process): ranx gets each
    document as a code of one character instead (code point 256 + its index, past the surrogates),
    the same code in qrels and run: dtype <U1, as the one-letter ids of tests/metrics/test_ir_metrics.py. A
    one-to-one renaming changes no value: ranx compares documents only for equality, and the scores
    of a ranking here (n - position) have no ties for an order among documents to decide."""
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.abspath(".cache/numba"))
    from ranx import Qrels, Run, evaluate

    codes: dict[str, str] = {}

    def code(d: str) -> str:
        if d not in codes:
            cp = 0x100 + len(codes)
            codes[d] = chr(cp if cp < 0xD800 else cp + 0x800)  # no surrogate code points
        return codes[d]

    def coded(docs: dict) -> dict:
        return {code(d): v for d, v in docs.items()}

    with _compile_lock(names):
        q = Qrels({k: coded(v) for k, v in qrels.items()})
        r = Run({k: coded(v) for k, v in run.items() if v}).make_comparable(q)
        evaluate(q, r, names, save_results_in_run=True)
    return {m: dict(r.scores[m]) for m in names}


def per_turn_ir(final: pd.DataFrame, labels: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """final: one row per (arm_id, repeat, session_id, turn_index) with `ranking` and
    `not_applicable`/`error`; labels: labels.parquet. Returns long rows
    (arm_id, repeat, session_id, turn_index, metric, value, unmeasured). `names`: the ranking
    family's (RANX), computed by ranx."""
    lab = labels.set_index(["session_id", "turn_index"])
    qrels_all: dict[str, dict[str, int]] = {}
    why_unmeasured: dict[tuple, str] = {}
    for (sid, tix), row in lab.iterrows():
        q = {d: int(g) for d, g in json.loads(row["qrels"]).items() if int(g) >= 1}
        if not row["qrels_measured"]:
            why_unmeasured[(sid, tix)] = "no relevance labels"
        elif not q:
            why_unmeasured[(sid, tix)] = "no relevant document"
        else:
            qrels_all[f"{sid}\x1f{tix}"] = q
    out = []
    for (arm_id, rep), grp in final.groupby(["arm_id", "repeat"], sort=False):
        run: dict[str, dict[str, float]] = {}
        meta = []
        for sid, tix, ranking, na, err in zip(grp["session_id"], grp["turn_index"], grp["ranking"],
                                              grp["not_applicable"], grp["error"]):
            na, err = present(na), present(err)
            reason = why_unmeasured.get((sid, tix))
            if reason is None and na:
                reason = f"n/a: {na}"
            if reason is None and err:
                reason = "error"
            meta.append((sid, tix, reason))
            if reason is None:
                ranking = list(ranking) if ranking is not None else []
                n = len(ranking)
                run[f"{sid}\x1f{tix}"] = {d: float(n - i) for i, d in enumerate(ranking)}
        scores: dict[str, dict[str, float]] = {}
        if run and not any(run.values()):
            scores = {m: {k: 0.0 for k in run} for m in names}
        elif run:
            ranx = ranx_scores({k: qrels_all[k] for k in run}, run, [ranx_name(m) for m in names])
            scores = {m: ranx[ranx_name(m)] for m in names}
        for sid, tix, reason in meta:
            key = f"{sid}\x1f{tix}"
            for m in names:
                val = scores[m].get(key, np.nan) if reason is None else np.nan
                out.append((arm_id, rep, sid, tix, m, float(val), reason))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])


def as_ranx_ranks(ranking) -> list:
    """A ranking as ranx ranks {doc: n - i}: each document once, at its last position."""
    scores = {d: len(ranking) - i for i, d in enumerate(ranking)}
    return sorted(scores, key=lambda d: -scores[d])


def _pool_value(name: str, ranking: list, qrels: dict, elsewhere: set = frozenset()) -> tuple[float, str | None]:
    """bpref (trec_eval), judged@k (ir_measures), unjudged@k (trec_eval unj), holes@k and
    holes_relevant_elsewhere@k (`elsewhere`: documents relevant for another turn of the session)
    of one ranking, by their definitions, one document at a time."""
    stem, _, k = name.partition("@")
    R = sum(1 for g in qrels.values() if g >= 1)
    if stem == "bpref":
        if not R:
            return np.nan, "no relevant document"
        N = sum(1 for g in qrels.values() if g == 0)
        total, above = 0.0, 0
        for d in ranking:
            g = qrels.get(d)
            if g is None or g < 0:
                continue
            if g == 0:
                above += 1
            else:
                total += 1.0 - min(above, R) / min(N, R) if above else 1.0
        return total / R, None
    top = ranking[:int(k)]
    if stem == "judged":
        return (sum(d in qrels for d in top) / len(top), None) if top else (np.nan, "empty ranking")
    if stem == "holes":
        return float(sum(d not in qrels for d in top)), None
    if stem == "holes_relevant_elsewhere":
        return float(sum(d not in qrels and d in elsewhere for d in top)), None
    return sum(d not in qrels or qrels[d] < 0 for d in top) / int(k), None


def per_turn_pool(final: pd.DataFrame, labels: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The pool family's measures (bpref, judged@k, unjudged@k), plainly."""
    lab = {(r.session_id, r.turn_index): r for r in labels.itertuples()}
    rel = {k: {d for d, g in json.loads(r.qrels).items() if int(g) >= 1} for k, r in lab.items()}
    out = []
    for arm, rep, sid, tix, ranking, na, err in zip(final["arm_id"], final["repeat"], final["session_id"],
                                                    final["turn_index"], final["ranking"], final["not_applicable"],
                                                    final["error"]):
        row = lab[(sid, tix)]
        qrels = {d: int(g) for d, g in json.loads(row.qrels).items()}
        na, err = present(na), present(err)
        reason = "no relevance labels" if not row.qrels_measured else f"n/a: {na}" if na else "error" if err else None
        ranked = as_ranx_ranks(list(ranking) if ranking is not None else [])
        for m in names:
            if reason is None or (m == "bpref" and reason != "no relevance labels"
                                  and not any(g >= 1 for g in qrels.values())):
                other = set().union(*[v for (s, t), v in rel.items() if s == sid and t != tix])
                val, why = _pool_value(m, ranked, qrels, other)
            else:
                val, why = np.nan, reason
            out.append((arm, rep, sid, tix, m, float(val), why))
    return pd.DataFrame(out, columns=COLUMNS)


def per_turn_outcomes(final: pd.DataFrame, caps: dict) -> pd.DataFrame:
    out = []
    for arm_id, rep, sid, tix, ranking, na, err, fb in zip(final["arm_id"], final["repeat"], final["session_id"],
                                                           final["turn_index"], final["ranking"],
                                                           final["not_applicable"], final["error"],
                                                           final["fallback_reason"]):
        na, err, fb = present(na), present(err), present(fb)
        why = f"n/a: {na}" if na else None
        zero = np.nan if (na or err) else float(ranking is None or len(ranking) == 0)
        out.append((arm_id, rep, sid, tix, "zero_results", zero, why or ("error" if err else None)))
        if "replayed" in caps.get(arm_id, DEFAULT_CAPS):
            out.append((arm_id, rep, sid, tix, "error_rate", float(bool(err)), why))
            out.append((arm_id, rep, sid, tix, "fallback_rate", np.nan if why else float(bool(fb)), why))
    return pd.DataFrame(out, columns=COLUMNS)


def turn_rounds(rounds: pd.DataFrame) -> list[tuple[tuple, list[dict]]]:
    """The trace rows of each (arm_id, repeat, session_id, turn_index) as dicts, turns in the order
    of their first row, rows in trace order (what pandas' groupby(sort=False) gives, without building
    a frame per turn)."""
    turns: dict[tuple, list[dict]] = {}
    for r in rounds.to_dict("records"):
        turns.setdefault((r["arm_id"], r["repeat"], r["session_id"], r["turn_index"]), []).append(r)
    return list(turns.items())


def per_turn_loop(rounds: pd.DataFrame, labels: pd.DataFrame, caps: dict, hits: dict) -> pd.DataFrame:
    """answered / abstained / clarified and the loop metrics."""
    rel = {(r.session_id, r.turn_index): {d for d, g in json.loads(r.qrels).items() if int(g) >= 1}
           for r in labels.itertuples()}
    out = []
    for (arm, rep, sid, tix), g in turn_rounds(rounds):
        g = sorted(g, key=lambda r: r["round"])
        final = g[-1]
        if isinstance(final["not_applicable"], str) and final["not_applicable"]:
            continue
        c = caps.get(arm, DEFAULT_CAPS)
        if "asks_back" in c:
            clar = final["clarify"]
            out.append((arm, rep, sid, tix, "clarified", float(isinstance(clar, str) and bool(clar)), None))
        has_answer = final["answer"] is not None and not (isinstance(final["answer"], float))
        fb = final["fallback_reason"]
        if "answers" in c and has_answer:
            out.append((arm, rep, sid, tix, "answered", float(not bool(final["abstained"])), None))
            out.append((arm, rep, sid, tix, "abstained", float(bool(final["abstained"])), None))
        elif "answers" in c and isinstance(fb, str) and "answer failed" in fb:
            out.append((arm, rep, sid, tix, "answered", np.nan, "answer failed"))
            out.append((arm, rep, sid, tix, "abstained", np.nan, "answer failed"))
        k = hits.get(arm)
        if "loops" not in c or k is None:
            continue
        out.append((arm, rep, sid, tix, "rounds_used", float(len(g)), None))
        relevant = rel.get((sid, tix), set())
        if not relevant:
            for m in ("rescued", "wasted_rounds", "recall_at_stop"):
                out.append((arm, rep, sid, tix, m, np.nan, "no relevant document"))
            continue
        hit = [bool(relevant & set(list(r["ranking"])[:k])) for r in g]
        first_ok = next((i for i, h in enumerate(hit) if h), None)
        out.append((arm, rep, sid, tix, "rescued", float((not hit[0]) and hit[-1]), None))
        out.append((arm, rep, sid, tix, "wasted_rounds", float(len(g) - 1 - first_ok) if first_ok is not None else 0.0, None))
        out.append((arm, rep, sid, tix, "recall_at_stop",
                    len(relevant & set(list(final["ranking"])[:k])) / len(relevant), None))
    return pd.DataFrame(out, columns=COLUMNS)


def per_turn_guards(rounds: pd.DataFrame, labels: pd.DataFrame, schema: list[dict], caps: dict | None = None) -> pd.DataFrame:
    caps = caps or {}
    entitlement = {f["field"] for f in schema if f.get("kind") == "entitlement"}
    units = {f["field"]: f.get("unit") for f in schema}
    lab = {(r["session_id"], r["turn_index"]): r for r in labels.to_dict("records")}
    out = []
    for (arm, rep, sid, tix), g in turn_rounds(rounds):
        final = sorted(g, key=lambda r: r["round"])[-1]
        c = caps.get(arm, DEFAULT_CAPS | {"proposes_filters"})
        if isinstance(final["not_applicable"], str) and final["not_applicable"] or "replayed" not in c:
            continue
        row = lab[(sid, tix)]
        user = row["user"] or ""
        ids = [i for i in (list(row["identifiers"]) if row["identifiers"] is not None else []) if i in user]
        queries = [q for r in g for q in (list(r["issued_queries"]) if r["issued_queries"] is not None else [])]
        if ids and "queries" in c:
            p = preserved(ids, queries)
            out.append((arm, rep, sid, tix, "identifier_preservation", p, None))
            out.append((arm, rep, sid, tix, "identifier_dropped", float(p < 1), None))
        applied = [f for f in json.loads(final["applied_filters"] or "[]") if f.get("field") not in entitlement]
        expected = json.loads(row["expected_filters"] or "[]")
        a = {_norm_filter(f, units) for f in applied}
        e = {_norm_filter(f, units) for f in expected}
        if a:
            out.append((arm, rep, sid, tix, "filter_precision", len(a & e) / len(a), None))
        if e:
            out.append((arm, rep, sid, tix, "filter_recall", len(a & e) / len(e), None))
        if "proposes_filters" in c:
            viol = final["filter_violations"]
            out.append((arm, rep, sid, tix, "entitlement_violations", float(len(viol) if viol is not None else 0), None))
        rel = {d for d, gr in json.loads(row["qrels"]).items() if int(gr) >= 1}
        if rel and (a - e):
            top = set(list(final["ranking"])[:10]) if final["ranking"] is not None else set()
            out.append((arm, rep, sid, tix, "wrong_filter_zero_relevant", float(not (top & rel)), None))
    return pd.DataFrame(out, columns=COLUMNS)


def per_turn_ops(rows: pd.DataFrame, caps: dict | None = None) -> pd.DataFrame:
    caps = caps or {}
    rows = rows.assign(**{m: None for m in LATENCY if m not in rows})  # stages a row's arm never had
    rows = rows[~rows["not_applicable"].map(lambda x: isinstance(x, str) and bool(x))]
    rows = rows[rows["arm_id"].map(lambda a: "replayed" in caps.get(a, DEFAULT_CAPS))]
    keys = ["arm_id", "repeat", "session_id", "turn_index"]
    g = rows.groupby(keys, sort=False)
    s = g[["llm_calls", "prompt_tokens", "completion_tokens", "cache_hits"]].sum()
    cost_known = g["cost_usd"].apply(lambda c: c.notna().all())
    rows = rows.assign(cost_usd=pd.to_numeric(rows["cost_usd"], errors="coerce"),
                       **{m: pd.to_numeric(rows[m], errors="coerce") for m in LATENCY})
    g = rows.groupby(keys, sort=False)
    cost = g["cost_usd"].sum(min_count=1)
    lat = g[list(LATENCY)].sum(min_count=1)
    # one row per turn with every sum beside it (a .loc lookup per value was most of the reference's time)
    turns = s.join(cost_known.rename("cost_known")).join(cost.rename("cost")).join(lat)
    out = []
    for key, t in zip(turns.index, turns.to_dict("records")):
        calls = float(t["llm_calls"])
        base = list(key)
        out.append((*base, "llm_calls", calls, None))
        out.append((*base, "prompt_tokens", float(t["prompt_tokens"]), None))
        out.append((*base, "completion_tokens", float(t["completion_tokens"]), None))
        if calls == 0:
            out.append((*base, "cost_usd", 0.0, None))
        elif t["cost_known"] and pd.notna(t["cost"]):
            out.append((*base, "cost_usd", float(t["cost"]), None))
        else:
            out.append((*base, "cost_usd", np.nan, "price unknown"))
        if calls > 0:
            out.append((*base, "cache_hit_rate", float(t["cache_hits"]) / calls, None))
        for m in LATENCY:
            v = t[m]
            if pd.notna(v):
                out.append((*base, f"latency_{m[3:]}_ms", float(v), None))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])


def judgment_rows(run_dir: Path) -> pd.DataFrame:
    jpath = Path(run_dir) / "judgments.parquet"
    if not jpath.exists():
        return pd.DataFrame(columns=COLUMNS)
    j = pd.read_parquet(jpath)
    j = j[~j["status"].astype(str).str.startswith("skipped")]
    return pd.DataFrame({"arm_id": j["arm_id"], "repeat": j["repeat"], "session_id": j["session_id"],
                         "turn_index": j["turn_index"], "metric": j["metric"], "value": j["value"].astype(float),
                         "unmeasured": j["status"].where(j["status"] != "ok", None)})


def reference_metrics(run_dir: Path, segments=None) -> MetricsResult:
    """Every metric of a run folder, the plain way."""
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.abspath(".cache/numba"))
    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    labels = load_labels(run_dir)
    arms = run_arms(man)
    caps = {a.arm_id: a.capabilities for a in arms}
    hits = {a.arm_id: a.hits_per_round for a in arms}
    rounds = read_traces(run_dir).to_pandas()
    final = rounds[rounds["is_final"]].reset_index(drop=True)
    names = ranking_names(man.metrics)
    parts = [per_turn_ir(final, labels, [n for n in names if n.partition("@")[0] in RANX]),
             per_turn_pool(final, labels, [n for n in names if n.partition("@")[0] not in RANX]),
             per_turn_outcomes(final, caps),
             per_turn_loop(rounds, labels, caps, hits), per_turn_guards(rounds, labels, man.filter_schema, caps),
             per_turn_ops(rounds, caps), judgment_rows(run_dir)]
    per_turn = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    agg = aggregate(per_turn, labels, segments or default_segments(labels))
    return MetricsResult(per_turn, agg, [a.arm_id for a in arms], list(dict.fromkeys(per_turn["metric"])), labels)


# the pandas aggregation harness.metrics.compute used before it scored session groups (issue 45):
# the reference its Aggregator must equal
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
            p50, p95 = _quantiles(vals.to_numpy(float))
            rows.append({
                "arm_id": arm_id, "metric": metric, "segment": seg.name,
                "mean": float(vals.mean()) if len(vals) else np.nan, "p50": p50, "p95": p95,
                "n": int(measured.sum()), "n_unmeasured": int((~measured).sum()),
                "n_sessions": int(grp.loc[measured, "session_id"].nunique()),
                "repeat_sd": float(grp["repeat_sd"].mean()) if grp["repeat_sd"].notna().any() else np.nan,
            })
    return pd.DataFrame(rows, columns=AGG_COLUMNS)
