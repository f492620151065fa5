"""How the analysis commands end (issue 30): the gate's summary for the terminal and its verdict
line, whatever happened; compare's last line, the arms that differ significantly. The last line
of each is the answer a CI log's tail shows. Rendering only."""
from __future__ import annotations

import pandas as pd
from rich.markup import escape

from harness.analysis.gate_report import changed_pairs, folded
from harness.analysis.verdict_types import CheckKind, CheckResult, CheckStatus, GateVerdict, Verdict
from harness.errors import Exit
from harness.metrics.stats import STATS
from harness.report.fit import Col, Wrapped
from harness.report.terminal import fitted, short_segment


STYLE = {CheckStatus.PASS: "green", CheckStatus.FAIL: "red", CheckStatus.INSUFFICIENT: "red", CheckStatus.NA: "dim"}
ICON = {Verdict.PASS: "[green]pass[/green]", Verdict.REGRESSION: "[red]REGRESSION[/red]",
        Verdict.INSUFFICIENT: "[red]INSUFFICIENT DATA[/red]", Verdict.INFRASTRUCTURE: "[yellow]INFRASTRUCTURE[/yellow]"}


def _check_row(r: CheckResult) -> dict:
    extra = "" if r.kind is not CheckKind.RULE or r.status is CheckStatus.NA else \
        ("; detectable: not estimable" if r.mde is None else f"; detectable: {r.mde:.4f}")
    return {"check": escape(r.name), "result": f"[{STYLE[r.status]}]{r.status.value}[/]",
            "detail": escape(r.detail + extra)}


def gate_summary(v: GateVerdict) -> list:
    """The gate's verdict for the terminal (gate.md holds the full Markdown): what was compared,
    what was not, and every check in a table that fits the console."""
    said = [f"Gate: {ICON[v.verdict]}  baseline {escape(v.baseline)} → candidate {escape(v.candidate)}"
            + (f" ({escape(v.scope)})" if v.scope else "")]
    if v.not_compared:
        said.append(f"[yellow]not compared (coverage: subset):[/yellow] {escape(v.not_compared)}")
    said += [f"[cyan]note:[/cyan] {escape(n)}" for n in v.evidence]
    shown, line = folded(v)
    said += [escape(f"  {p.label}: {changes}") for p, changes in changed_pairs(v)]
    said += [escape(f"  {line}")] if line else []
    said += [f"[yellow]warning:[/yellow] {escape(w)}" for w in v.warnings + v.infrastructure]
    rows = [_check_row(r) for r in shown]
    checks = fitted("checks (n/a: the metric does not apply; smallest detectable change from the baseline's spread)",
                    [Col("check", wrap=True), Col("result"), Col("detail", wrap=True)], rows)
    return [*map(Wrapped, said), *([checks] if rows else [])]


FAILED_SHOWN, NAMED = 10, 3  # failed checks listed before the gate's verdict line; named in it


def gate_ending(code: int, v: GateVerdict | None) -> list:
    """The last lines of `harness gate`: each failed check with its detail (at most FAILED_SHOWN,
    each within three lines), then the verdict line: the verdict, the exit code and its meaning
    (harness.errors.Exit), and the failed checks by name (or why nothing was gated)."""
    meaning = Exit.said(code)
    said = "INSUFFICIENT DATA" if v is not None and v.verdict is Verdict.INSUFFICIENT else "REGRESSION"
    head = f"Gate: {'pass' if code == Exit.PASS else said if code == Exit.REGRESSION else meaning}"
    head += f" (exit {int(code)}: {meaning})"
    if v is None:
        return [f"{head}: nothing was gated; the error above says why"]
    if v.not_compared:  # coverage: subset: the last line says so, with what was compared
        head += f" on a subset ({(v.scope or '').removeprefix('subset: ')})"
    failed = v.failed
    out: list = [Wrapped(f"[red]failed:[/red] {escape(r.name)}: {escape(r.detail)}", max_lines=3)
                 for r in failed[:FAILED_SHOWN]]
    if len(failed) > FAILED_SHOWN:
        out.append(f"… and {len(failed) - FAILED_SHOWN} more failed checks (gate.md lists every check)")
    if v.verdict is Verdict.INFRASTRUCTURE and v.infrastructure:
        head = f"Gate: INFRASTRUCTURE (exit {int(code)}: {meaning}): {v.infrastructure[0]}"
    if not failed:
        return out + [f"{head}; {len(v.results)} checks, none failed"]
    names = "; ".join(r.name for r in failed[:NAMED]) + (f" and {len(failed) - NAMED} more" if len(failed) > NAMED
                                                         else "")
    return out + [f"{head}: {len(failed)} of {len(v.results)} checks failed: {names}"]


def compare_ending(df: pd.DataFrame, against: str, unchanged: dict[str, dict[str, str]] | None = None,
                   alpha: float = STATS.alpha, per_arm: int = 3) -> str:
    """The last line of `harness compare`: the arms (labels; with their run when several runs were
    compared) whose difference is significant (Holm p < alpha) on some metric and segment, with
    those differences (at most `per_arm` each), then those that are not, and how many of all were
    unchanged (`unchanged`: candidate run -> label -> why, harness.analysis.unchanged)."""
    several = df["candidate_run"].nunique() > 1
    same = {(run, label) for run, labels in (unchanged or {}).items() for label in labels}
    sig, not_sig = [], []
    for (run, label), rows in df.groupby(["candidate_run", "label"], sort=False):
        name = f"{label} in {run}" if several else label
        hits = rows[(rows["n_turns"] > 0) & (rows["p_holm"] < alpha)]
        if hits.empty:
            not_sig += [] if (run, label) in same else [name]
            continue
        said = []
        for r in hits.head(per_arm).itertuples():
            seg = "" if r.segment == "all" else f" [{short_segment(r.segment)}]"
            good = r.diff * {"higher": 1, "lower": -1}.get(r.direction, 0)
            said.append(f"{r.metric}{seg} {r.diff:+.3f}" + (" better" if good > 0 else " worse" if good < 0 else ""))
        sig.append(f"{name} ({', '.join(said)}{', …' if len(hits) > per_arm else ''})")
    n, u = len(sig) + len(not_sig) + len(same), len(same)
    tail = "" if not u else f", all {u} unchanged" if u == n else f", {u} of them unchanged"
    if not sig:
        return f"compare: no arm differs significantly from {against} (Holm p < {alpha}); {n} arms compared{tail}"
    return (f"compare: {len(sig)} of {n} arms differ significantly from {against} (Holm p < {alpha}): "
            + "; ".join(sig) + (f"; not significantly: {', '.join(not_sig)}" if not_sig else "")
            + (f"; {u} unchanged" if u else ""))



def report_ending(answers: dict, runs: list) -> list[str]:
    """The lines `harness report` ends with before the report's path: per run (each on its own eval
    set), its best arm against the reference arm on the headline recall and nDCG: the difference,
    95% CI, p and Holm p (over the run's comparisons, as the report's first table adjusts them), and
    whether it leads or is tied. `answers`: harness.analysis.leaders.leaders of `runs`, by resolved
    folder; the numbers are the report's first table's."""
    from pathlib import Path

    from harness.metrics.registry import judged
    from harness.report.sections.leaders import stats, tied

    out = []
    for r in (answers.get(str(Path(p).resolve())) for p in runs):
        if r is None:
            continue
        head = f"answer {r['eval_set']} ({r['run']}" + (f", reference {r['reference']})" if r["reference"] else ")")
        ms = [m for m in r["metrics"] if m["name"] not in judged()][:2]
        if not ms or r["reference"] is None:
            out.append(f"{head}: {r['why'] or 'no arm has a measured headline metric'}")
            continue
        parts = []
        for m in ms:
            status = "leads" if m["leads"] else tied(m) if m["tied"] else "the only ranked arm"
            best = m["best"]["label"]
            if m["best_is_reference"]:
                parts.append(f"{m['name']} {best} (the reference) {m['best']['mean']:.3f}, {status}")
                continue
            c = stats(m["vs_reference"])
            parts.append(f"{m['name']} {best} − {r['reference']} {c['diff']} {c['ci']} p {c['p']} pHolm {c['p_holm']}, "
                         f"{status}")
        out.append(f"{head}: " + "; ".join(parts) + f" (pHolm: Holm over the run's {r['n_tests']} comparisons, the "
                   "best arm against each other ranked arm on each metric)")
    return out
