"""How the analysis commands end (issue 30): the gate's summary for the terminal and its verdict
line, whatever happened; compare's last line, the arms that differ significantly. The last line
of each is the answer a CI log's tail shows. Rendering only."""
from __future__ import annotations

import pandas as pd
from rich.markup import escape

from harness.metrics.stats import STATS
from harness.report.fit import Col, Wrapped
from harness.report.terminal import fitted, short_segment


def gate_summary(v: dict) -> list:
    """The gate's verdict for the terminal (gate.md holds the full Markdown): what was compared,
    what was not, and every check in a table that fits the console."""
    icon = {"pass": "[green]pass[/green]", "regression": "[red]REGRESSION[/red]",
            "insufficient data": "[red]INSUFFICIENT DATA[/red]",
            "infrastructure": "[yellow]INFRASTRUCTURE[/yellow]"}[v["verdict"]]
    said = [f"Gate: {icon}  baseline {escape(v['baseline'])} → candidate {escape(v['candidate'])}"
            + (f" ({escape(v['scope'])})" if v.get("scope") else "")]
    if v.get("not_compared"):
        said.append(f"[yellow]not compared (coverage: subset):[/yellow] {escape(v['not_compared'])}")
    said += [f"[cyan]note:[/cyan] {escape(n)}" for n in v.get("evidence", [])]
    for p in v["pairs"]:
        said.append(escape(f"  {p['label']}: " + ("; ".join(p["changes"]) if p["changes"] else
                                                  "no change in parameters or models")))
    said += [f"[yellow]warning:[/yellow] {escape(w)}" for w in v.get("warnings", []) + v["infrastructure"]]
    style = {"pass": "green", "fail": "red", "insufficient": "red", "n/a": "dim"}
    rows = []
    for r in v["results"]:
        mde = r.get("mde")
        extra = "" if r["kind"] != "rule" or r["status"] == "n/a" else \
            ("; detectable: not estimable" if mde is None or mde != mde else f"; detectable: {mde:.4f}")
        rows.append({"check": escape(r["name"]), "result": f"[{style[r['status']]}]{r['status']}[/]",
                     "detail": escape(r["detail"] + extra)})
    checks = fitted("checks (n/a: the metric does not apply; smallest detectable change from the baseline's spread)",
                    [Col("check", wrap=True), Col("result"), Col("detail", wrap=True)], rows)
    return [*map(Wrapped, said), checks]


FAILED_SHOWN, NAMED = 10, 3  # failed checks listed before the gate's verdict line; named in it


def gate_ending(code: int, v: dict | None, meaning: dict[int, str]) -> list:
    """The last lines of `harness gate`: each failed check with its detail (at most FAILED_SHOWN,
    each within three lines), then the verdict line: the verdict, the exit code and its meaning,
    and the failed checks by name (or why nothing was gated)."""
    said = "INSUFFICIENT DATA" if v is not None and v["verdict"] == "insufficient data" else "REGRESSION"
    head = f"Gate: {'pass' if code == 0 else said if code == 1 else meaning.get(code, 'error')}"
    head += f" (exit {code}: {meaning.get(code, 'error')})"
    if v is None:
        return [f"{head}: nothing was gated; the error above says why"]
    if v.get("not_compared"):  # coverage: subset: the last line says so, with what was compared
        head += f" on a subset ({(v.get('scope') or '').removeprefix('subset: ')})"
    results = v["results"]
    failed = [r for r in results if not r["ok"]]
    out: list = [Wrapped(f"[red]failed:[/red] {escape(r['name'])}: {escape(r['detail'])}", max_lines=3)
                 for r in failed[:FAILED_SHOWN]]
    if len(failed) > FAILED_SHOWN:
        out.append(f"… and {len(failed) - FAILED_SHOWN} more failed checks (gate.md lists every check)")
    if v["verdict"] == "infrastructure":
        head = f"Gate: INFRASTRUCTURE (exit {code}: {meaning[code]}): {v['infrastructure'][0]}" \
            if v["infrastructure"] else head
    if not failed:
        return out + [f"{head}; {len(results)} checks, none failed"]
    names = "; ".join(r["name"] for r in failed[:NAMED]) + (f" and {len(failed) - NAMED} more" if len(failed) > NAMED
                                                           else "")
    return out + [f"{head}: {len(failed)} of {len(results)} checks failed: {names}"]


def compare_ending(df: pd.DataFrame, against: str, alpha: float = STATS.alpha, per_arm: int = 3) -> str:
    """The last line of `harness compare`: the arms (labels; with their run when several runs were
    compared) whose difference is significant (Holm p < alpha) on some metric and segment, with
    those differences (at most `per_arm` each), then those that are not."""
    several = df["candidate_run"].nunique() > 1 if "candidate_run" in df else False
    sig, not_sig = [], []
    for (run, label), rows in df.groupby(["candidate_run", "label"], sort=False) if several else \
            df.assign(candidate_run="").groupby(["candidate_run", "label"], sort=False):
        name = f"{label} in {run}" if several else label
        hits = rows[(rows["n_turns"] > 0) & (rows["p_holm"] < alpha)]
        if hits.empty:
            not_sig.append(name)
            continue
        said = []
        for r in hits.head(per_arm).itertuples():
            seg = "" if r.segment == "all" else f" [{short_segment(r.segment)}]"
            good = r.diff * {"higher": 1, "lower": -1}.get(r.direction, 0)
            said.append(f"{r.metric}{seg} {r.diff:+.3f}" + (" better" if good > 0 else " worse" if good < 0 else ""))
        sig.append(f"{name} ({', '.join(said)}{', …' if len(hits) > per_arm else ''})")
    n = len(sig) + len(not_sig)
    if not sig:
        return f"compare: no arm differs significantly from {against} (Holm p < {alpha}); {n} arms compared"
    return (f"compare: {len(sig)} of {n} arms differ significantly from {against} (Holm p < {alpha}): "
            + "; ".join(sig) + (f"; not significantly: {', '.join(not_sig)}" if not_sig else ""))

