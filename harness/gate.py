"""The CI gate: a policy (YAML) turned into a verdict and an exit code.

Rules compare candidate against baseline, paired by turn, with session-level statistics:
- `noninferiority` passes only when the lower bound of the paired session-level bootstrap CI
  of (candidate - baseline) lies above -max_drop;
- `regression` fails only when the mean drop is larger than max_drop AND significant at alpha
  (one-sided randomization test over sessions).
Each rule also reports the smallest drop this eval set can detect with its sessions (MDE).
Floors (absolute bounds on a candidate metric), budgets (cost per turn, p95 latency) and limits
(errors, unmeasured turns) follow. Exit codes: 0 pass, 1 regression, 2 bad input or usage,
3 infrastructure (too many errors or unmeasured turns)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.compare import CompareError, check_same_evalset, combined, compare_pair, is_offline, load_run, resolve_pairs
from harness.metrics.segments import SegmentError, parse_segment, segment_keys
from harness.yamlpos import line_of

PASS, REGRESSION, USAGE, INFRA = 0, 1, 2, 3


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rule(Strict):
    metric: str
    segment: str = "all"
    arm: str = "*"  # a candidate arm id, or * for every pair
    max_drop: float = Field(ge=0)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    test: Literal["noninferiority", "regression"] = "noninferiority"


class Floor(Strict):
    metric: str
    segment: str = "all"
    arm: str = "*"
    min: float | None = None
    max: float | None = None


class Budget(Strict):
    metric: str  # e.g. cost_usd, latency_total_ms
    stat: Literal["mean", "p50", "p95"] = "mean"
    arm: str = "*"
    max: float


class Limits(Strict):
    max_error_rate: float = Field(default=0.05, ge=0, le=1)
    max_unmeasured_rate: float = Field(default=0.2, ge=0, le=1)


class Policy(Strict):
    pairs: dict[str, str] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    floors: list[Floor] = Field(default_factory=list)
    budgets: list[Budget] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    n_resamples: int = Field(default=5000, ge=100)
    seed: int = 0


class GateUsageError(Exception):
    pass


def load_policy(path: Path) -> Policy:
    try:
        text = Path(path).read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except OSError as e:
        raise GateUsageError(f"{path}: cannot read: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise GateUsageError(f"{path}:{mark.line + 1 if mark else '?'}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(raw, dict):
        raise GateUsageError(f"{path}: expected a mapping with rules, floors, budgets, limits")
    try:
        pol = Policy.model_validate(raw)
    except ValidationError as e:
        msgs = [f"{path}:{line_of(text, err['loc']) or '?'}: {'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]
        raise GateUsageError("\n".join(msgs)) from None
    for r in [*pol.rules, *pol.floors]:
        try:
            parse_segment(r.segment)
        except SegmentError as e:
            raise GateUsageError(f"{path}: {e}") from None
    return pol


def _match(rule_arm: str, cand_arm: str) -> bool:
    return rule_arm == "*" or rule_arm == cand_arm


def evaluate(baseline: Path, candidate: Path, policy: Policy, pairs_cli: dict[str, str] | None = None) -> dict:
    base, cand = load_run(baseline), load_run(candidate)
    check_same_evalset([base, cand], False)
    pairs = {**policy.pairs, **(pairs_cli or {})}
    pr = resolve_pairs(base, cand, pairs or None)  # without named pairs, arms with the same id
    results, status = [], PASS
    # infrastructure first: a run with too many errors or unmeasured turns cannot be gated
    infra = []
    for arm in sorted({c for _, c in pr}):
        pt = cand.per_turn[cand.per_turn["arm_id"] == arm]
        err = pt[pt["metric"] == "error_rate"]["value"].mean()
        ir = pt[pt["metric"].isin([r.metric for r in policy.rules])]
        unmeasured = ir["value"].isna().mean() if len(ir) else 0.0
        if err > policy.limits.max_error_rate:
            infra.append(f"{arm}: error rate {err:.1%} > {policy.limits.max_error_rate:.1%}")
        if unmeasured > policy.limits.max_unmeasured_rate:
            infra.append(f"{arm}: unmeasured rate {unmeasured:.1%} > {policy.limits.max_unmeasured_rate:.1%}")
    pt = combined(base, cand)
    for i, rule in enumerate(policy.rules):
        matched = [(b, c) for b, c in pr if _match(rule.arm, c)]
        if not matched:
            raise GateUsageError(f"rule {i + 1} ({rule.metric}, {rule.segment}, arm {rule.arm}) matches no arm pair")
        for b, c in matched:
            if is_offline(base.backends(b)) != is_offline(cand.backends(c)) and b not in pairs:
                raise GateUsageError(f"rule {i + 1}: {b} and {c} are an offline and an LLM arm; pair them explicitly")
            row = compare_pair(base, cand, b, c, rule.metric, rule.segment, policy.n_resamples, policy.seed, rule.alpha, pt=pt)
            diff, lo = row.get("diff", math.nan), row.get("ci_lo", math.nan)
            if not row or row.get("n_turns", 0) == 0 or math.isnan(diff):
                raise GateUsageError(f"rule {i + 1}: no turn measured in both runs for {rule.metric} on {rule.segment}")
            if rule.test == "noninferiority":
                ok = lo > -rule.max_drop
                why = f"CI lower bound {lo:+.4f} {'>' if ok else '<='} -{rule.max_drop}"
            else:
                p_one = row["p"] / 2 if diff < 0 else 1.0
                ok = not (-diff > rule.max_drop and p_one < rule.alpha)
                why = f"drop {-diff:+.4f} vs max {rule.max_drop}, one-sided p {p_one:.4f} vs alpha {rule.alpha}"
            results.append({"kind": "rule", "name": f"rule {i + 1}: {rule.test} {rule.metric} [{rule.segment}] {c}",
                            "ok": bool(ok), "detail": why, "diff": diff, "ci": [row["ci_lo"], row["ci_hi"]],
                            "p": row["p"], "mde": row["mde"], "n_sessions": row.get("n_sessions"),
                            "baseline_arm": b, "candidate_arm": c})
    for i, fl in enumerate(policy.floors):
        for _, c in pr:
            if not _match(fl.arm, c):
                continue
            keys = segment_keys(cand.labels, fl.segment)
            pt = cand.per_turn[(cand.per_turn["arm_id"] == c) & (cand.per_turn["metric"] == fl.metric)]
            pt = pt[[(s, t) in keys for s, t in zip(pt["session_id"], pt["turn_index"])]]
            v = pt.groupby(["session_id", "turn_index"])["value"].mean().mean()
            if math.isnan(v):
                continue
            ok = (fl.min is None or v >= fl.min) and (fl.max is None or v <= fl.max)
            results.append({"kind": "floor", "name": f"floor {i + 1}: {fl.metric} [{fl.segment}] {c}", "ok": bool(ok),
                            "detail": f"{v:.4f} (min {fl.min}, max {fl.max})"})
    for i, bd in enumerate(policy.budgets):
        for _, c in pr:
            if not _match(bd.arm, c):
                continue
            vals = cand.per_turn[(cand.per_turn["arm_id"] == c) & (cand.per_turn["metric"] == bd.metric)]["value"]
            if vals.isna().any() and bd.metric == "cost_usd":
                results.append({"kind": "budget", "name": f"budget {i + 1}: {bd.stat} {bd.metric} {c}", "ok": False,
                                "detail": "cost unknown for some turns (no price for the model)"})
                continue
            vals = vals.dropna()
            if vals.empty:
                continue
            v = {"mean": vals.mean(), "p50": vals.quantile(0.5), "p95": vals.quantile(0.95)}[bd.stat]
            results.append({"kind": "budget", "name": f"budget {i + 1}: {bd.stat} {bd.metric} {c}", "ok": bool(v <= bd.max),
                            "detail": f"{v:.4f} vs max {bd.max}"})
    if infra:
        status = INFRA
    elif not all(r["ok"] for r in results):
        status = REGRESSION
    return {"status": status, "verdict": {PASS: "pass", REGRESSION: "regression", INFRA: "infrastructure"}[status],
            "baseline": base.name, "candidate": cand.name, "pairs": [list(p) for p in pr], "infrastructure": infra,
            "results": results}


def to_markdown(v: dict) -> str:
    icon = {"pass": "✅ pass", "regression": "❌ regression", "infrastructure": "⚠️ infrastructure"}[v["verdict"]]
    lines = [f"## Gate: {icon}", "", f"baseline `{v['baseline']}` → candidate `{v['candidate']}`", ""]
    for msg in v["infrastructure"]:
        lines.append(f"- ⚠️ {msg}")
    lines += ["", "| check | result | detail | smallest detectable drop |", "|---|---|---|---|"]
    for r in v["results"]:
        mde = f"{r['mde']:.4f} ({r['n_sessions']} sessions)" if r.get("mde") is not None and not math.isnan(r["mde"]) else "—"
        lines.append(f"| {r['name']} | {'pass' if r['ok'] else '**FAIL**'} | {r['detail']} | {mde} |")
    return "\n".join(lines) + "\n"


def to_junit(v: dict) -> str:
    cases = []
    for r in v["results"]:
        body = "" if r["ok"] else f'<failure message="{escape(r["detail"], {chr(34): "&quot;"})}"/>'
        cases.append(f'  <testcase classname="harness.gate.{r["kind"]}" name="{escape(r["name"], {chr(34): "&quot;"})}">{body}</testcase>')
    fails = sum(1 for r in v["results"] if not r["ok"])
    errors = len(v["infrastructure"])
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="harness-gate" tests="{len(cases)}" '
            f'failures="{fails}" errors="{errors}">\n' + "\n".join(cases) + "\n</testsuite>\n")


def write_outputs(v: dict, out_dir: Path) -> dict[str, Path]:
    import os

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


def gate(baseline: Path, candidate: Path, policy_path: Path, pairs: dict[str, str] | None, out_dir: Path) -> tuple[int, str]:
    """Returns (exit code, Markdown or error message)."""
    try:
        pol = load_policy(policy_path)
        v = evaluate(baseline, candidate, pol, pairs)
    except (GateUsageError, CompareError, SegmentError) as e:
        return USAGE, f"error: {e}"
    write_outputs(v, out_dir)
    return v["status"], to_markdown(v)
