"""The verdict blocks that open the report: per candidate run, candidate − baseline per arm label,
metric and turn-index segment with its 95% CI, Holm-adjusted p and n, cells marked where the
change is a regression or an improvement in the metric's direction, what changed between the
paired arms, and the gate's verdict with a policy. The numbers are computed by the analysis stage
(harness.analysis.verdict, called by `harness report`) and handed to the renderer; this module
only formats them. Without them (a report rendered from run folders alone) it says why there is
no block."""
from __future__ import annotations

from pathlib import Path

from harness.analysis.unchanged import said
from harness.analysis.verdict_types import CheckResult, GateVerdict, Verdict
from harness.metrics.signflip import p_said
from harness.metrics.stats import STATS, holm_said
from harness.report.format import missing, scrub
from harness.report.load import ReportRun

ARROW = {"higher": ("↑", "higher is better"), "lower": ("↓", "lower is better"), "none": ("", "no direction")}
DIGITS = {"ms": 1, "USD": 6}
NOT_COMPUTED = ("rendered from run folders alone: `harness report BASELINE CANDIDATE` (or --baseline RUN with "
                "candidates) computes candidate − baseline and opens the report with it")
GATE_CLASS = {Verdict.PASS: "improvement", Verdict.REGRESSION: "regression", Verdict.INSUFFICIENT: "regression",
              Verdict.INFRASTRUCTURE: "regression"}


def seg_text(segment: str) -> str:
    """`turn_index>=2` as the tables head it: `t≥2`."""
    return segment.replace("turn_index", "t").replace(">=", "≥").replace("<=", "≤")


def _signed(v, digits: int) -> str:
    return "—" if missing(v) else f"{v:+.{digits}f}"


def _cell(metric: dict, c: dict | None, row_n: tuple | None) -> dict:
    if c is None:
        return {"present": False, "metric": metric["name"],
                "why": metric.get("na") or "the metric does not apply to the pair"}
    d = DIGITS.get(metric["unit"], 3)
    n = (c["n_turns"], c["n_sessions"])
    means = "" if missing(c["mean_ref"]) else f"baseline {c['mean_ref']:.{d}f} → candidate {c['mean_arm']:.{d}f}; "
    return {"present": True, "metric": metric["name"], "cls": c["mark"], "diff": _signed(c["diff"], d),
            "ci": "—" if missing(c["ci_lo"]) else f"[{_signed(c['ci_lo'], d)}, {_signed(c['ci_hi'], d)}]",
            "p": p_said(c.get("p"), c.get("p_floor"), digits=3),
            "p_holm": p_said(c["p_holm"], c.get("p_floor"), adjusted=True, digits=3),
            "title": f"{means}{n[0]} turns / {n[1]} sessions paired",
            "n": None if n == row_n else f"n={n[0]} / {n[1]}s", "unmeasured": c["n_unmeasured"] or 0}


def _row(row: dict, metrics: list[dict]) -> dict:
    first = next((c for c in row["cells"].values() if c is not None), None)
    row_n = (first["n_turns"], first["n_sessions"]) if first else None
    return {"segment": row["segment"], "seg_text": seg_text(row["segment"]),
            "n": f"{row_n[0]} turns, {row_n[1]} sessions" if row_n else "",
            "cells": [_cell(m, row["cells"].get(m["name"]), row_n) for m in metrics]}


def _said(items: list, segs: list[str]) -> str:
    """(label, segment, metric) marks grouped by metric, then label: `recall@10: rewrite (t=2, t≥2)`;
    a label marked on every segment of the block says `all segments`."""
    by: dict[str, dict[str, list[str]]] = {}
    for label, seg, metric in items:
        by.setdefault(metric, {}).setdefault(label, []).append(seg)
    parts = []
    for metric, labels in by.items():
        named = [f"{lab} ({'all segments' if len(ss) == len(segs) > 1 else ', '.join(map(seg_text, ss))})"
                 for lab, ss in labels.items()]
        parts.append(f"{metric}: {', '.join(named)}")
    return "; ".join(parts)


def summary(b: dict) -> dict:
    """The block's answer: what was compared, then its regressions and improvements in words."""
    m = max([c["holm_m"] or 0 for lab in b["labels"] for r in lab["rows"] for c in r["cells"].values() if c] or [0])
    head = (f"{len(b['labels'])} label(s) × {len(b['metrics'])} metric(s) × {len(b['segments'])} segment(s): "
            f"{b['n_tests']} comparisons; {holm_said(m, 'quality comparisons of this block')} (coverage figures "
            f"apart); marked where pHolm < {b['alpha']}. {b.get('method') or STATS.said()}.")
    return {"head": head, "regressions": _said(b["regressions"], b["segments"]) or "none",
            "improvements": _said(b["improvements"], b["segments"]) or "none",
            "n_regressions": len(b["regressions"]), "n_improvements": len(b["improvements"])}


def _check(r: CheckResult) -> dict:
    return {"name": scrub(r.name), "status": r.status.value, "detail": scrub(r.detail)}


def gate(v: GateVerdict | None, policy: str | None) -> dict | None:
    """The gate's verdict in the block: every check, the failed ones first, and its warnings."""
    if v is None:
        return None
    return {"verdict": v.verdict.value, "cls": GATE_CLASS[v.verdict], "policy": policy, "n": len(v.results),
            "failed": [_check(r) for r in v.failed], "checks": [_check(r) for r in v.results],
            "warnings": scrub(v.warnings + v.infrastructure)}


def _timed(name: str, m: dict | None) -> str:
    if not m:
        return f"{name}: machine not recorded"
    load = "/".join(f"{x:g}" for x in m.get("load_average") or []) or "?"
    return f"{name}: {m.get('host')}, {m.get('cpu_count')} CPUs, load {load} at the start"


def operational(op: dict | None) -> dict | None:
    """The operational differences, apart from the verdict: never marked as regressions; an arm
    whose parameters, models and prompts did not change says so instead of a difference."""
    if not op:
        return None
    rows = []
    for r in op["rows"]:
        cells = []
        for m in op["metrics"]:
            c = r["cells"].get(m["name"])
            d = DIGITS.get(m["unit"], 3)
            if c is None or missing(c["diff"]):
                cells.append({"text": "—", "n": ""})
                continue
            ci = "" if missing(c["ci_lo"]) else f"[{_signed(c['ci_lo'], d)}, {_signed(c['ci_hi'], d)}]"
            cells.append({"text": _signed(c["diff"], d), "n": f"{ci} p {p_said(c.get('p'), c.get('p_floor'), digits=3)}"
                          if c.get("p") is not None else ci})
        rows.append({"label": r["label"], "changed": r["changed"], "cells": cells})
    return {"metrics": op["metrics"], "rows": rows, "timed": [_timed(k, v) for k, v in op["timed"].items()]}


def _unchanged(same: dict[str, str], labels: list[dict]) -> str | None:
    """The line that stands for the rows of unchanged labels, with what changed in a pair all the same
    (a prompt, a parameter) that left its results as they were."""
    if not same:
        return None
    moved = [f"{lab['label']}: {'; '.join(lab['changes'])}" for lab in labels if lab["label"] in same and lab["changes"]]
    return f"{said(same)}: their rows are left out" + (f"; changed all the same: {', '.join(moved)}" if moved else "")


def _block(b: dict, keys: dict[str, str], policy: str | None) -> dict:
    """A verdict block for the template; the labels a change left alone (harness.analysis.unchanged)
    are one line (`unchanged`) instead of their rows."""
    metrics = [{**m, "arrow": ARROW[m["direction"]][0], "direction_text": ARROW[m["direction"]][1]} for m in b["metrics"]]
    same = b.get("unchanged") or {}
    return {"baseline": keys.get(b["baseline_dir"], b["baseline"]), "candidate": keys.get(b["candidate_dir"], b["candidate"]),
            "summary": summary(b), "metrics": metrics, "segment_note": b["segment_note"],
            "labels": [{**{k: lab[k] for k in ("label", "how", "baseline_arm", "candidate_arm", "changes")},
                        "rows": [_row(r, b["metrics"]) for r in lab["rows"]]} for lab in b["labels"]
                       if lab["label"] not in same],
            "unchanged": _unchanged(same, b["labels"]),
            "pairs": [{k: lab[k] for k in ("label", "baseline_arm", "candidate_arm")} for lab in b["labels"]],
            "notes": scrub(b["notes"]), "gate": gate(b["gate"], policy),
            "evidence": scrub(list(b.get("evidence") or [])), "judged": scrub(list(b.get("judged") or [])),
            "operational": operational(b.get("operational")),
            "na": [m["na"] for m in b["metrics"] if m.get("na")],
            **{k: b[k] for k in ("n_resamples", "n_permutations", "exact_max_sessions", "seed", "alpha")}}


def build(inputs: dict | None, runs: list[ReportRun]) -> dict:
    """{computed, blocks, why_not} for the template."""
    if inputs is None:
        return {"computed": False, "blocks": [], "why_not": [NOT_COMPUTED]}
    keys = {str(Path(r.dir).resolve()): r.key for r in runs}
    return {"computed": True, "blocks": [_block(b, keys, inputs.get("policy")) for b in inputs["blocks"]],
            "why_not": scrub(list(inputs["why_not"]))}


def pairs_of(inputs: dict | None, runs: list[ReportRun]) -> dict[str, tuple[str, list[dict]]]:
    """For the drill-down: candidate run key -> (its baseline run's key, the block's per-turn
    values of paired arms as the analysis stage computed them)."""
    if not inputs:
        return {}
    by_dir = {str(Path(r.dir).resolve()): r for r in runs}
    out = {}
    for b in inputs["blocks"]:
        base, cand = by_dir.get(b["baseline_dir"]), by_dir.get(b["candidate_dir"])
        if base is not None and cand is not None:
            out[cand.key] = (base.key, b.get("turns") or [])
    return out
