"""The gate's verdict rendered: gate.md (also appended to $GITHUB_STEP_SUMMARY), gate.junit.xml
(one test case per check; n/a checks skipped, insufficient data a failure) and gate.json. Each
failed check lists the ten turns that moved most in the bad direction."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from xml.sax.saxutils import escape

import pandas as pd

from harness.analysis.unchanged import said
from harness.metrics.segments import segment_keys
from harness.metrics.stats import paired_frame

ICON = {"pass": "✅ pass", "regression": "❌ regression", "insufficient data": "❌ insufficient data",
        "infrastructure": "⚠️ infrastructure"}
STATUS = {"pass": "pass", "fail": "**FAIL**", "insufficient": "**FAIL** (insufficient data)", "n/a": "n/a"}


def moved_turns(pt: pd.DataFrame, base, pair, metric: str, segment: str, direction: str, n: int = 10) -> list[dict]:
    """The `n` turns whose value moved most in the bad direction (any direction for a metric
    without one), from the combined per-turn table of both runs."""
    keys = segment_keys(base.labels, segment)
    idx = pd.MultiIndex.from_arrays([pt["session_id"], pt["turn_index"]])
    frame, _ = paired_frame(pt[idx.isin(list(keys))], metric, "A:" + pair.baseline.arm_id, "B:" + pair.candidate.arm_id)
    if frame.empty:
        return []
    d = frame["b"] - frame["a"]
    worse = {"higher": -d, "lower": d}.get(direction, d.abs())
    top = frame.assign(worse=worse)
    top = top[top["worse"] > 0].sort_values(["worse", "session_id", "turn_index"], ascending=[False, True, True]).head(n)
    return [{"session_id": str(r.session_id), "turn_index": int(r.turn_index), "baseline": float(r.a),
             "candidate": float(r.b)} for r in top.itertuples()]


def _mde(r: dict) -> str:
    if r.get("kind") != "rule" or r.get("status") == "n/a":
        return "—"
    mde = r.get("mde")
    if mde is None or (isinstance(mde, float) and math.isnan(mde)):
        return "not estimable"
    return f"{mde:.4f} ({r.get('n_sessions')} sessions)"


def folded(v: dict) -> tuple[list[dict], str | None]:
    """The checks shown one by one, and the line that stands for the others: every check that passed
    (or is n/a) of a label whose pair is unchanged (`unchanged`: harness.analysis.unchanged) is left
    to that line, `6 arms unchanged: identical rankings on every turn (…): their 60 checks pass or are
    n/a`; a failed check is always shown. gate.json and gate.junit.xml keep every check."""
    same = v.get("unchanged") or {}
    hidden = [r for r in v["results"] if r.get("label") in same and r["ok"]]
    shown = [r for r in v["results"] if not (r.get("label") in same and r["ok"])]
    if not same:
        return shown, None
    na = dict.fromkeys(r["detail"].removeprefix("n/a for this arm: ").removeprefix("n/a: ")
                       for r in hidden if r["status"] == "n/a")  # why, once each: the set's, the arms'
    why = f"n/a: {'; '.join(na)}; " if na else ""
    return shown, f"{said(same)}: their {len(hidden)} checks pass or are n/a ({why}gate.json lists every check)"


def to_markdown(v: dict) -> str:
    head = f"## Gate: {ICON[v['verdict']]}"
    if v.get("not_compared"):  # coverage: subset: what was not compared leads
        head += f" on a subset: not compared (coverage: subset): {v['not_compared']}"
    on = "the " if v.get("not_compared") else "the baseline's "  # a subset's scope says `subset: N of M …`
    lines = [head, "", f"baseline `{v['baseline']}` → candidate `{v['candidate']}`"
             + (f", compared on {on}{v['scope']}" if v.get("scope") else ""), ""]
    lines += [f"- ℹ️ {n}" for n in v.get("evidence", [])] + ([""] if v.get("evidence") else [])
    shown, line = folded(v)
    lines.append(f"Compared {len(v['pairs'])} arm(s) by label:")
    for p in v["pairs"]:
        how = "" if p["how"] == "label" else f" (paired by {p['how']})"
        if p["label"] not in (v.get("unchanged") or {}) or p["changes"]:
            lines.append(f"- {p['label']}{how}: " + ("; ".join(p["changes"]) if p["changes"] else
                                                     "no change in parameters or models"))
    lines += [f"- {line}"] if line else []
    lines += [""] + [f"- ⚠️ {w}" for w in v.get("warnings", [])] + [f"- ⚠️ {msg}" for msg in v["infrastructure"]]
    if v.get("statistics"):  # the same counts as harness compare and the report: the same CI and p
        lines += ["", f"Each rule: {v['statistics']['said']}; no p is adjusted for multiplicity (each rule is one "
                  "declared comparison)."]
    lines += ["", "| check | result | detail | smallest detectable change |", "|---|---|---|---|"] if shown else []
    for r in shown:
        lines.append(f"| {r['name']} | {STATUS[r['status']]} | {r['detail']} | {_mde(r)} |")
    for r in v["results"]:
        if r.get("moved"):
            lines += ["", f"Turns that moved most, {r['name']} ({r.get('direction')} is better):", "",
                      "| session | turn | baseline | candidate |", "|---|---|---|---|"]
            lines += [f"| {t['session_id']} | {t['turn_index']} | {t['baseline']:.4f} | {t['candidate']:.4f} |"
                      for t in r["moved"]]
    return "\n".join(lines) + "\n"


def _attr(s: str) -> str:
    return escape(s, {chr(34): "&quot;"})


def to_junit(v: dict) -> str:
    cases = []
    for r in v["results"]:
        if r["status"] == "n/a":
            body = f'<skipped message="{_attr(r["detail"])}"/>'
        elif not r["ok"]:
            moved = "\n".join(f"{t['session_id']} turn {t['turn_index']}: {t['baseline']:.4f} -> {t['candidate']:.4f}"
                              for t in r.get("moved") or [])
            body = f'<failure message="{_attr(r["detail"])}">{escape(moved)}</failure>'
        else:
            body = ""
        cases.append(f'  <testcase classname="harness.analysis.gate.{r["kind"]}" name="{_attr(r["name"])}">{body}</testcase>')
    fails = sum(1 for r in v["results"] if not r["ok"])
    skipped = sum(1 for r in v["results"] if r["status"] == "n/a")
    errors = len(v["infrastructure"])
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="harness-gate" tests="{len(cases)}" '
            f'failures="{fails}" errors="{errors}" skipped="{skipped}">\n' + "\n".join(cases) + "\n</testsuite>\n")


def write_outputs(v: dict, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "gate.md", "junit": out_dir / "gate.junit.xml", "json": out_dir / "gate.json"}
    md = to_markdown(v)
    paths["markdown"].write_text(md, encoding="utf-8")
    paths["junit"].write_text(to_junit(v), encoding="utf-8")
    paths["json"].write_text(json.dumps(v, indent=2, default=float), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md)
    return paths
