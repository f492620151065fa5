"""The tables `make demo-llm` ends with (scripts/demo_llm.py), each naming the model of every number:
per arm, its model, the retrieval metrics and the judged ones (mean over both repeats, and their
spread); per run, the share of answers each judged metric was measured on; per LLM role, the calls
this demo sent (valid, repaired, failed by kind), their latency and tokens/s, and the fallbacks
the rows show. Also on its own, for run folders already made:

    python scripts/demo_llm_summary.py runs/demo-llm-STAMP-* [--since EPOCH] [--cache .cache/llm-demo]

The calls sent are the LLM cache's replies written since `--since` (a reply is cached only when it
validated: a repaired call's reply is its repair's) plus the failed calls the run folders count
(`llm_failed.ROLE.KIND` in the manifest, the judgments' and relevance labels' errors)."""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from harness.errors import Exit  # noqa: E402

MODEL = "smollm2-135m-instruct"  # the alias make local-llm serves (scripts/local_llm.sh)
MODEL_NAME = "SmolLM2-135M-Instruct, local"

def metrics() -> tuple[str, ...]:
    """The arm table's columns: the headline recall and nDCG, then every judged metric the registry has."""
    from harness.metrics.registry import judged

    return ("recall@10", "ndcg@10", *judged())


def model_of(backends: dict) -> str:
    """Who produced an arm's numbers: the local model when any of its roles called it, else offline."""
    return MODEL_NAME if any(b == MODEL for b in backends.values()) else "offline"


def cache_replies(cache: Path, since: float) -> dict[str, list[dict]]:
    """Per role, the replies written to the LLM cache since `since` (epoch s): latency, tokens, finish."""
    db = cache / "llm_cache.sqlite"
    out: dict[str, list[dict]] = defaultdict(list)
    if not db.is_file():
        return out
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT role, body, latency_ms FROM replies WHERE created >= ?", (since,)).fetchall()
    for role, body, ms in rows:
        b = json.loads(body)
        t = b.get("timings") or {}
        out[role or "?"].append({"ms": ms or 0.0, "completion": (b.get("usage") or {}).get("completion_tokens") or 0,
                                 "predicted_ms": t.get("predicted_ms"), "predicted_n": t.get("predicted_n"),
                                 "finish": ((b.get("choices") or [{}])[0]).get("finish_reason")})
    return out


def run_failures(runs: list[Path]) -> dict[str, Counter]:
    """Per role, failed calls by kind: the manifests' llm_failed counts, the judge's and relevance labels' errors."""
    from harness.llm.failures import per_role
    from harness.store.folder import RunFolder
    from harness.steps.judge import error_kind

    out: dict[str, Counter] = defaultdict(Counter)
    for run in runs:
        f = RunFolder(run)
        for role, kinds in per_role(f.read_manifest().counts).items():
            out[role].update(kinds)
        for role, frame in (("judge", f.judgments() if f.has_judgments() else None),
                            ("relevance", f.relevance_labels() if f.has_relevance_labels() else None)):
            if frame is not None and len(frame):
                errors = frame.loc[frame["status"].str.startswith("error"), "status"]
                kind = error_kind if role == "judge" else (lambda e: e.split(":")[1].strip()[:40])
                if len(errors):
                    out[role].update(kind(e) for e in errors)
    return out


def run_repairs(runs: list[Path]) -> Counter:
    """Per role, the replies that failed validation and were asked again (each call once, however many arms shared it)."""
    from harness.store.traces import read_traces

    seen = set()
    for run in runs:
        df = read_traces(run).to_pandas()
        for _, r in df[df["llm_repairs"] > 0].iterrows():
            for note in r["llm_repair_notes"]:
                seen.add((str(run), r["session_id"], int(r["turn_index"]), int(r["repeat"]), note))
    return Counter(note.split(":")[0] for *_, note in seen)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def role_table(runs: list[Path], cache: Path, since: float) -> str:
    replies, failed, repaired = cache_replies(cache, since), run_failures(runs), run_repairs(runs)
    lines = [f"LLM calls this demo sent, per role (model: {MODEL_NAME}; a warm demo's replies come from the cache"
             + (": none sent)" if not any(replies.values()) and not any(failed.values()) else ")"),
             "| role | calls | valid | repaired | failed (by kind) | valid or repaired % | cut at max_tokens | "
             "p50 ms | p95 ms | tokens/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for role in sorted(set(replies) | set(failed)):
        got, bad = replies.get(role, []), failed.get(role, Counter())
        rep = min(repaired.get(role, 0), len(got))
        calls = len(got) + sum(bad.values())
        if not calls:  # a warm demo: nothing of this role sent
            continue
        ms = [x["ms"] for x in got]
        gen = [(x["predicted_n"], x["predicted_ms"]) for x in got if x["predicted_ms"]]
        tps = sum(n for n, _ in gen) / (sum(m for _, m in gen) / 1000) if gen else None
        cut = sum(x["finish"] == "length" for x in got) + bad.get("cut at max_tokens", 0)
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(bad.items())) or "0"
        lines.append(f"| {role} | {calls} | {len(got) - rep} | {rep} | {kinds} | "
                     f"{100 * len(got) / calls:.0f} | {cut} | {_num(pct(ms, .5) if ms else None)} | "
                     f"{_num(pct(ms, .95) if ms else None)} | {_num(tps, 1)} |")
    return "\n".join(lines)


def _num(v, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def arm_table(run: Path) -> str:
    """Per arm of a run: its model, the retrieval metrics over both repeats (mean, and the spread of
    the repeats' means), and its rows that fell back to offline after a failed call."""
    from harness.store.folder import RunFolder
    from harness.store.traces import read_traces

    f = RunFolder(run)
    man, m = f.read_manifest(), f.metrics()
    agg = m[(m["kind"] == "aggregate") & (m["segment"] == "all")]
    df = read_traces(run).to_pandas()
    es = man.eval_set.get("name") if isinstance(man.eval_set, dict) else getattr(man.eval_set, "name", "?")
    names = metrics()
    out = [f"{man.run_id} ({es}; {man.repeats} repeats; ± the spread of the repeats' means)", "| arm | model | " + " | ".join(names) + " | fallbacks |",
           "|---|---|" + "---|" * (len(names) + 1)]
    for arm in man.arms:
        cells = []
        for metric in names:
            row = agg[(agg["arm_id"] == arm["arm_id"]) & (agg["metric"] == metric)]
            if row.empty or row["mean"].isna().all():
                cells.append("n/a")
                continue
            sd = row["repeat_sd"].iloc[0]
            cells.append(f"{row['mean'].iloc[0]:.3f}" + (f" ±{sd:.3f}" if sd == sd and sd is not None else ""))
        rows = df[df["arm_id"] == arm["arm_id"]]
        fell = rows["fallback_reason"].dropna()
        fell = fell[fell.str.contains("failed")]
        example = f" ({fell.iloc[0][:60]})" if len(fell) else ""
        out.append(f"| {arm.get('label') or arm['arm']} | {model_of(arm.get('backends') or {})} | "
                   + " | ".join(cells) + f" | {len(fell)} of {len(rows)}{example} |")
    return "\n".join(out)


def judged_line(run: Path) -> str:
    """How many of a run's answers each judged metric was measured on (the rest: unmeasured, counted)."""
    from harness.store.folder import RunFolder

    f = RunFolder(run)
    if not f.has_judgments():
        return f"{run.name}: not judged"
    j = f.judgments()
    j = j[~j["status"].str.startswith("skipped")]
    parts = []
    for metric in metrics()[2:]:
        rows = j[j["metric"] == metric]
        ok = int((rows["status"] == "ok").sum())
        parts.append(f"{metric} measured on {ok}/{len(rows)} answers ({100 * ok / len(rows):.0f}%)" if len(rows)
                     else f"{metric} not judged")
    return f"{run.name}: " + ", ".join(parts)


def agreement_line(run: Path) -> str:
    """The relevance labels' agreement with people's labels on a run (Cohen's kappa), or why there is none."""
    from harness.metrics.qrels import agreement, agreement_table
    from harness.store.folder import RunFolder

    f = RunFolder(run)
    if not f.has_relevance_labels():
        return f"{run.name}: no relevance labels"
    said = agreement(agreement_table(f))
    return f"{run.name}: " + (said.line() if said else "no labelled pair was graded")


def summary(runs: list[Path], walls: dict[str, float] | None = None, since: float = 0.0,
            cache: Path = ROOT / ".cache/llm-demo") -> str:
    parts = [arm_table(r) for r in runs]
    parts.append("judged answers per run\n" + "\n".join(judged_line(r) for r in runs))
    parts.append(f"relevance labels ({MODEL_NAME}) against people's\n" + "\n".join(agreement_line(r) for r in runs))
    parts.append(role_table(runs, cache, since))
    if walls:
        parts.append("wall per set (run, judge, relevance labels): "
                     + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--since", type=float, default=0.0, help="count the cache's replies written since (epoch s)")
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache/llm-demo")
    a = ap.parse_args(argv)
    print(summary(a.runs, since=a.since, cache=a.cache))
    return Exit.PASS


if __name__ == "__main__":
    sys.exit(main())
