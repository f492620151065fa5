"""Commands of the analysis stage: compare, gate, report, TREC scoring, human review, lists."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli import app, console, fail, list_app
from harness.run.folder import RunFolder


@app.command()
def sample(run_dir: Path, n: int = typer.Option(100, "--n"), seed: int = typer.Option(0),
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="default: reports/review-RUN")):
    """Export a sample of answers stratified by arm, turn index and answerability (CSV + HTML rating sheet)."""
    from harness.analysis.review import sample_answers, write_sample

    if not RunFolder(run_dir).is_run():
        fail(f"{run_dir}: not a run folder")
    df = sample_answers(run_dir, n, seed)
    if df.empty:
        fail(f"{run_dir}: no answers to sample (run arms with answer: true or the corrective arm)")
    csv_path, html_path = write_sample(df, out or Path("reports") / f"review-{run_dir.name}", run_dir.name)
    console.print(f"{len(df)} answers: {csv_path} and {html_path}", highlight=False)


@app.command("trec-eval")
def trec_eval_cmd(qrels: Path, run_file: Path,
                  complete: bool = typer.Option(False, "-c", help="score queries missing from the run as 0"),
                  measure: list[str] = typer.Option(["recall@5", "recall@10", "recall@20", "ndcg@10", "mrr@10"], "-m"),
                  per_query: bool = typer.Option(True, "-q/--means-only", help="print per-query values too")):
    """Score a TREC run against TREC qrels with the harness's metric code, in trec_eval's layout."""
    from harness.analysis.trec_eval import RunFileError, format_trec, trec_eval

    for p in (qrels, run_file):
        if not p.exists():
            fail(f"{p}: no such file")
    try:
        df = trec_eval(qrels, run_file, list(measure), complete)
    except (RunFileError, ValueError) as e:
        fail(str(e))
    print(format_trec(df, per_query))


@app.command()
def compare(runs: list[Path] = typer.Argument(..., help="run folders; each is compared with the first"),
            arm: list[str] = typer.Option([], "--arm", help="only these arms (labels or ids)"),
            pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
            metric: list[str] = typer.Option(["recall@10", "ndcg@10", "mrr@10"], "--metric", "-m"),
            segment: list[str] = typer.Option(["all", "turn_index>=2"], "--segment", "-s"),
            allow_different_evalsets: bool = typer.Option(False, "--allow-different-evalsets"),
            out: Path = typer.Option(Path("reports/compare"), "--out", "-o", help="folder for compare.md and compare.csv")):
    """Per-metric, per-segment paired differences of runs with CIs, Holm-corrected p-values, wins/ties/losses.
    Arms pair by label; labels without a partner are named."""
    from rich.table import Table

    from harness.analysis.compare import COLUMNS, CompareError, compare_runs, to_markdown, wtl_header
    from harness.metrics.segments import SegmentError

    try:
        c = compare_runs(runs, list(metric), list(segment), list(arm) or None, list(pair) or None,
                         allow_different_evalsets)
    except (CompareError, SegmentError) as e:
        fail(str(e))
    df = c.table
    out.mkdir(parents=True, exist_ok=True)
    df.reindex(columns=[x for x in COLUMNS if x in df.columns]).to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text(to_markdown(c, runs[0].name), encoding="utf-8")
    t = Table(title=f"compared with {runs[0].name} (W/T/L by each metric's direction)")
    for col in ("run", "arm", "metric", "segment", "n", "diff", "95% CI", "p_holm", "W/T/L"):
        t.add_column(col, overflow="fold")
    for r in df.itertuples():
        arrow = {"higher": " ↑", "lower": " ↓"}.get(r.direction, "")
        wtl = f"{r.wins}/{r.ties}/{r.losses}" + ("" if r.direction != "none" else f" ({wtl_header(r.direction)})")
        t.add_row(r.candidate_run, r.label, r.metric + arrow, r.segment, str(r.n_turns), f"{r.diff:+.3f}",
                  f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]", f"{r.p_holm:.4f}", wtl)
    console.print(t)
    for label, changes in df.drop_duplicates("label")[["label", "changes"]].itertuples(index=False):
        if changes:
            console.print(f"changed in {label}: {changes}", highlight=False, markup=False)
    for note in c.notes:
        console.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
    for seg in sorted(set(df.loc[df["n_turns"] == 0, "segment"])) if not df.empty else []:
        console.print(f"[yellow]warning: segment {seg!r} matches no measured turn of {runs[0].name}[/yellow]")
    console.print(f"saved: {out / 'compare.md'}, {out / 'compare.csv'}", highlight=False)


@app.command()
def gate(baseline: Path = typer.Option(..., "--baseline"), candidate: Path = typer.Option(..., "--candidate"),
         policy: Path = typer.Option(..., "--policy"),
         pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
         out: Path = typer.Option(Path("reports/gate"), "--out", "-o")):
    """Gate a candidate run against a baseline with a policy. Exit 0 pass, 1 regression, 2 bad input, 3 infrastructure.
    Arms pair by label; writes gate.md (also to $GITHUB_STEP_SUMMARY), gate.junit.xml and gate.json."""
    from harness.analysis.gate import gate as run_gate

    code, text = run_gate(baseline, candidate, policy, list(pair), out)
    if code == 2:
        fail(text.removeprefix("error: "), 2)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def report(runs: list[Path] = typer.Argument(..., help="run folders, side by side"),
           out: Path = typer.Option(Path("reports/review.html"), "--out", "-o")):
    """One self-contained HTML review report (plots embedded, no network at view time) from run folders."""
    from harness.report.render import render_report

    for r in runs:
        if not RunFolder(r).is_run():
            fail(f"{r}: not a run folder")
    path = render_report(list(runs), out)
    console.print(f"report: {path}", highlight=False)


@list_app.command("metrics")
def list_metrics():
    """Every registered metric: name (k is any cutoff), direction, unit, aggregation, the arms it applies to."""
    from rich.table import Table

    from harness.metrics.registry import listing

    rows = listing()
    t = Table(title="metrics (harness/metrics/families; direction: which way is better)")
    for c in rows[0]:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(v) for v in r.values()])
    console.print(t)


@list_app.command("arms")
def list_arms():
    """Every registered arm with its capabilities (what metrics can apply to it)."""
    from rich.table import Table

    from harness.arms import REGISTRY

    t = Table(title="arms (harness/arms; capabilities with default parameters)")
    for c in ("arm", "capabilities", "parameters"):
        t.add_column(c, overflow="fold")
    for name, cls in sorted(REGISTRY.items()):
        a = cls()
        t.add_row(name, ", ".join(sorted(a.capabilities)), ", ".join(f"{k}={v}" for k, v in a.params.model_dump().items()))
    console.print(t)
