"""The gate's verdict (a GateVerdict, harness.analysis.verdict_types) rendered: gate.md (also
appended to $GITHUB_STEP_SUMMARY), gate.junit.xml (one test case per check; n/a checks skipped,
insufficient data a failure) and gate.json, its one serialisation. Each failed check lists the ten
turns that moved most in the bad direction."""
from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pandas as pd

from harness.analysis.unchanged import said
from harness.analysis.verdict_types import CheckKind, CheckResult, CheckStatus, GateVerdict, PairSaid, Verdict
from harness.metrics.stats import paired_frame

ICON = {Verdict.PASS: "✅ pass", Verdict.REGRESSION: "❌ regression", Verdict.INSUFFICIENT: "❌ insufficient data",
        Verdict.INFRASTRUCTURE: "⚠️ infrastructure"}
STATUS = {CheckStatus.PASS: "pass", CheckStatus.FAIL: "**FAIL**", CheckStatus.INSUFFICIENT: "**FAIL** (insufficient data)",
          CheckStatus.NA: "n/a"}


def moved_turns(pt: pd.DataFrame, where, pair, metric: str, segment: str, direction: str,
                n: int = 10) -> list[dict]:
    """The `n` turns whose value moved most in the bad direction (any direction for a metric
    without one), from both arms' per-turn rows (`A:arm`, `B:arm`: harness.analysis.split.Split's
    `pair_rows`) on the segment's labelled turns (`where`: harness.analysis.label_rows.LabelRows)."""
    pos = where.positions(pt["session_id"], pt["turn_index"])
    inside = (pos >= 0) & where.mask(segment)[np.clip(pos, 0, None)] if len(pos) else np.zeros(0, bool)
    frame, _ = paired_frame(pt[inside], metric, "A:" + pair.baseline.arm_id, "B:" + pair.candidate.arm_id)
    if frame.empty:
        return []
    d = frame["b"] - frame["a"]
    worse = {"higher": -d, "lower": d}.get(direction, d.abs())
    top = frame.assign(worse=worse)
    top = top[top["worse"] > 0].sort_values(["worse", "session_id", "turn_index"], ascending=[False, True, True]).head(n)
    return [{"session_id": str(r.session_id), "turn_index": int(r.turn_index), "baseline": float(r.a),
             "candidate": float(r.b)} for r in top.itertuples()]


def _mde(r: CheckResult) -> str:
    if r.kind is not CheckKind.RULE or r.status is CheckStatus.NA:
        return "—"
    return "not estimable" if r.mde is None else f"{r.mde:.4f} ({r.n_sessions} sessions)"


def folded(v: GateVerdict) -> tuple[list[CheckResult], str | None]:
    """The checks shown one by one, and the line that stands for the others: every check that passed
    (or is n/a) of a label whose pair is unchanged (`unchanged`: harness.analysis.unchanged) is left
    to that line, `6 arms unchanged: identical rankings on every turn (…): their 60 checks pass or are
    n/a`; a failed check is always shown. gate.json and gate.junit.xml keep every check."""
    same = v.unchanged
    hidden = [r for r in v.results if r.label in same and r.ok]
    shown = [r for r in v.results if not (r.label in same and r.ok)]
    if not same:
        return shown, None
    na = dict.fromkeys(r.detail.removeprefix("n/a for this arm: ").removeprefix("n/a: ")
                       for r in hidden if r.status is CheckStatus.NA)  # why, once each: the set's, the arms'
    why = f"n/a: {'; '.join(na)}; " if na else ""
    return shown, f"{said(same)}: their {len(hidden)} checks pass or are n/a ({why}gate.json lists every check)"


def changed_pairs(v: GateVerdict) -> list[tuple[PairSaid, str]]:
    """The pairs said one by one (those not folded into the unchanged line) with what changed."""
    return [(p, "; ".join(p.changes) if p.changes else "no change in parameters or models") for p in v.pairs
            if p.label not in v.unchanged or p.changes]


def _pairs(v: GateVerdict, line: str | None) -> list[str]:
    """The compared pairs, a line each, and `line`, which stands for the unchanged ones."""
    lines = [f"Compared {len(v.pairs)} arm(s) by label:"]
    for p, changes in changed_pairs(v):
        how = "" if p.how == "label" else f" (paired by {p.how})"
        lines.append(f"- {p.label}{how}: {changes}")
    return lines + ([f"- {line}"] if line else [])


def to_markdown(v: GateVerdict) -> str:
    head = f"## Gate: {ICON[v.verdict]}"
    if v.not_compared:  # coverage: subset: what was not compared leads
        head += f" on a subset: not compared (coverage: subset): {v.not_compared}"
    on = "the " if v.not_compared else "the baseline's "  # a subset's scope says `subset: N of M …`
    lines = [head, "", f"baseline `{v.baseline}` → candidate `{v.candidate}`"
             + (f", compared on {on}{v.scope}" if v.scope else ""), ""]
    lines += [f"- ℹ️ {n}" for n in v.evidence] + ([""] if v.evidence else [])
    shown, line = folded(v)
    lines += _pairs(v, line)
    lines += [""] + [f"- ⚠️ {w}" for w in v.warnings] + [f"- ⚠️ {msg}" for msg in v.infrastructure]
    # the same counts as harness compare and the report: the same CI and p
    lines += ["", f"Each rule: {v.statistics.said}; no p is adjusted for multiplicity (each rule is one declared "
              "comparison)."]
    lines += ["", "| check | result | detail | smallest detectable change |", "|---|---|---|---|"] if shown else []
    for r in shown:
        lines.append(f"| {r.name} | {STATUS[r.status]} | {r.detail} | {_mde(r)} |")
    for r in v.results:
        if r.moved:
            lines += ["", f"Turns that moved most, {r.name} ({r.direction} is better):", "",
                      "| session | turn | baseline | candidate |", "|---|---|---|---|"]
            lines += [f"| {t.session_id} | {t.turn_index} | {t.baseline:.4f} | {t.candidate:.4f} |" for t in r.moved]
    return "\n".join(lines) + "\n"


def _attr(s: str) -> str:
    return escape(s, {chr(34): "&quot;"})


def to_junit(v: GateVerdict) -> str:
    cases = []
    for r in v.results:
        if r.status is CheckStatus.NA:
            body = f'<skipped message="{_attr(r.detail)}"/>'
        elif not r.ok:
            moved = "\n".join(f"{t.session_id} turn {t.turn_index}: {t.baseline:.4f} -> {t.candidate:.4f}"
                              for t in r.moved or [])
            body = f'<failure message="{_attr(r.detail)}">{escape(moved)}</failure>'
        else:
            body = ""
        cases.append(f'  <testcase classname="harness.analysis.gate.{r.kind.value}" name="{_attr(r.name)}">{body}'
                     '</testcase>')
    skipped = sum(1 for r in v.results if r.status is CheckStatus.NA)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="harness-gate" tests="{len(cases)}" '
            f'failures="{len(v.failed)}" errors="{len(v.infrastructure)}" skipped="{skipped}">\n' + "\n".join(cases)
            + "\n</testsuite>\n")


def write_outputs(v: GateVerdict, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "gate.md", "junit": out_dir / "gate.junit.xml", "json": out_dir / "gate.json"}
    md = to_markdown(v)
    paths["markdown"].write_text(md, encoding="utf-8")
    paths["junit"].write_text(to_junit(v), encoding="utf-8")
    paths["json"].write_text(v.to_json(), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md)
    return paths
