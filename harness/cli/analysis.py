"""Commands of the analysis stage: compare, gate, report, TREC scoring, human review, lists."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli import export_app, app, console, fail, list_app
from harness.report.limits import DRILL_SESSIONS
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
                  measure: list[str] = typer.Option([], "-m", help="ranking metrics (default: every ranking metric "
                                                    "of the default metric settings, recall@5/10/20, ndcg@10, mrr@10)"),
                  per_query: bool = typer.Option(False, "-q", help="print every query's values as well as the means "
                                                 "(trec_eval's -q)")):
    """Score a TREC run against TREC qrels with the harness's metric code, in trec_eval's layout."""
    from harness.analysis.trec_eval import format_trec, trec_eval

    from harness.metrics.families.ir import names_of

    for p in (qrels, run_file):
        if not p.exists():
            fail(f"{p}: no such file")
    df = trec_eval(qrels, run_file, list(measure) or names_of(None), complete)
    print(format_trec(df, per_query))


@app.command()
def compare(runs: list[Path] = typer.Argument(..., help="run folders; each is compared with the first (or one run "
                                                         "with --reference)"),
            reference: Optional[str] = typer.Option(None, "--reference", help="one run: compare its arms with this "
                                                                              "arm (a label or id)"),
            arm: list[str] = typer.Option([], "--arm", help="only these arms (labels or ids)"),
            pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
            metric: list[str] = typer.Option([], "--metric", "-m", help="metrics (default: the first run's headline "
                                             "ranking metrics, recall@10, ndcg@10 and mrr@10 unless its cutoffs differ)"),
            segment: list[str] = typer.Option(["all", "turn_index>=2"], "--segment", "-s"),
            allow_different_evalsets: bool = typer.Option(False, "--allow-different-evalsets"),
            allow_partial: bool = typer.Option(False, "--allow-partial", help="compare runs with planned turns "
                                               "missing (killed, unfinished), marked partial"),
            out: Path = typer.Option(Path("reports/compare"), "--out", "-o", help="folder for compare.md and compare.csv")):
    """Per-metric, per-segment paired differences with CIs, Holm-corrected p-values, wins/ties/losses by each
    metric's direction. Runs pair arms by label; labels without a partner are named. Runs must be complete (unless
    --allow-partial); stale tables are scored again first, and it says so."""
    from harness.analysis.compare import COLUMNS, compare_runs, compare_within, to_markdown
    from harness.metrics.registry import headline
    from harness.report.terminal import compare_table

    metric = list(metric) or headline(RunFolder(runs[0]).read_manifest().metrics)
    if reference is not None:
        if len(runs) != 1:
            fail("--reference compares the arms of one run: give one run folder")
        c = compare_within(runs[0], reference, list(metric), list(segment), list(arm) or None,
                           allow_partial=allow_partial)
    else:
        c = compare_runs(runs, list(metric), list(segment), list(arm) or None, list(pair) or None,
                         allow_different_evalsets, allow_partial=allow_partial)
    df = c.table
    out.mkdir(parents=True, exist_ok=True)
    df.reindex(columns=[x for x in COLUMNS if x in df.columns]).to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text(to_markdown(c, runs[0].name), encoding="utf-8")
    what = f"{runs[0].name}'s arms against {reference}" if reference else f"against {runs[0].name}"
    console.print(compare_table(df, f"compared {what} (W/T/L by each metric's direction)"))
    for label, changes in df.drop_duplicates("label")[["label", "changes"]].itertuples(index=False):
        if changes:
            console.print(f"changed in {label}: {changes}", highlight=False, markup=False)
    for note in c.notes:
        console.print(f"[yellow]warning:[/yellow] {escape(note)}", highlight=False)
    for seg in sorted(set(df.loc[df["n_turns"] == 0, "segment"])):
        console.print(f"[yellow]warning: segment {seg!r} matches no measured turn of {runs[0].name}[/yellow]")
    console.print(f"saved: {out / 'compare.md'}, {out / 'compare.csv'}", highlight=False)


@app.command()
def gate(baseline: Path = typer.Option(..., "--baseline"), candidate: Path = typer.Option(..., "--candidate"),
         policy: Path = typer.Option(..., "--policy"),
         pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
         explain: bool = typer.Option(False, "--explain", help="print every check with the sessions it would see, "
                                      "and gate nothing"),
         out: Path = typer.Option(Path("reports/gate"), "--out", "-o")):
    """Gate a candidate run against a baseline with a policy. Exit 0 pass, 1 regression, 2 bad input, 3 infrastructure.
    Both runs must be complete and their tables fresh (stale tables are scored again, and it says so); the candidate
    must cover the baseline's sessions, splits and repeats. Arms pair by label; writes gate.md (also to
    $GITHUB_STEP_SUMMARY), gate.junit.xml and gate.json; the last line is the verdict."""
    from harness.analysis.gate import MEANING, USAGE, evaluate_to
    from harness.report.terminal import gate_summary

    if explain:
        return _explain(baseline, candidate, policy, list(pair))
    code, v, text = evaluate_to(baseline, candidate, policy, list(pair), out)
    if code == USAGE:
        fail(text.removeprefix("error: "), 2)
    for part in gate_summary(v):
        console.print(part, highlight=False)
    console.print(f"written: {out / 'gate.md'}, {out / 'gate.junit.xml'}, {out / 'gate.json'}", highlight=False)
    failing = sorted({r["metric"] for r in v["results"] if not r["ok"]})
    console.print(f"Gate: {v['verdict']} (exit {code}: {MEANING[code]})"
                  + (f"; failing: {', '.join(failing)}" if failing else ""), highlight=False, markup=False)
    raise typer.Exit(code)


def _explain(baseline: Path, candidate: Path, policy: Path, pairs: list[str]) -> None:
    from rich.table import Table

    from harness.analysis.explain import explain
    from harness.analysis.policy import load_policy

    x = explain(baseline, candidate, load_policy(policy), pairs)
    t = Table(title=f"{policy.name} on {x['baseline']} → {x['candidate']}: the sessions each check would see",
              title_justify="left", pad_edge=False)
    for c in ("check", "metric", "label", "segment", "baseline", "candidate", "both", "would be"):
        t.add_column(c, overflow="fold", no_wrap=c in ("check", "metric", "segment"))
    for r in x["rows"]:
        cells = ["—" if r[k] is None else str(r[k]) for k in ("check", "metric", "label", "segment", "baseline",
                                                               "candidate", "both")]
        t.add_row(*map(escape, cells), escape(f"{r['will']} (needs {r['need']} sessions)"))
    for n in ([f"not compared (coverage: subset): {x['not_compared']}"] if x["not_compared"] else []) + \
            x["evidence"] + x["warnings"]:
        console.print(f"note: {n}", highlight=False, markup=False)
    console.print(t)
    console.print(f"{len(x['rows'])} check(s); nothing was gated (--explain)", highlight=False)


@app.command()
def report(runs: list[Path] = typer.Argument(..., help="run folders: BASELINE CANDIDATE, or candidates with --baseline, "
                                                        "or any runs side by side"),
           baseline: Optional[Path] = typer.Option(None, "--baseline", help="the baseline run: the report opens with each "
                                                   "run given against it"),
           policy: Optional[Path] = typer.Option(None, "--policy", help="a gate policy: its verdict heads each block"),
           metric: list[str] = typer.Option([], "--metric", "-m", help="more metrics for the verdict block"),
           arm: list[str] = typer.Option([], "--arm", help="only these labels (or arm ids) in the verdict block"),
           pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
           drill_sessions: int = typer.Option(DRILL_SESSIONS, "--drill-sessions", min=0,
                                              help="sessions per run the drill-down shows turn by turn, the most "
                                                   "disagreement first (and every one where a candidate regressed); "
                                                   "the others are listed by id. 0: every session"),
           out: Path = typer.Option(Path("reports/review.html"), "--out", "-o")):
    """One self-contained HTML review report (plots embedded, no network at view time) from run folders. Given
    BASELINE CANDIDATE (or --baseline RUN and candidates) it opens with candidate − baseline per label, metric and
    turn index (95% CI, Holm p, regressions marked), and with --policy the gate's verdict; runs on different eval
    sets are shown side by side. Exit 0 whatever the verdict; 2 for bad input."""
    from harness.analysis.leaders import leaders
    from harness.analysis.verdict import plan, verdicts
    from harness.report.render import render_report

    from harness.analysis.evidence import check_run

    for r in [*runs, *([baseline] if baseline else [])]:
        if not RunFolder(r).is_run():
            fail(f"{r}: not a run folder")
    if policy is not None and not policy.is_file():
        fail(f"{policy}: no such policy file")
    for r in dict.fromkeys([*([baseline] if baseline else []), *runs]):
        data = check_run(r, complete=False, scored=False)  # stale tables are scored again, once, here
        for note in data.evidence.notes(data.name):
            console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    p = plan(list(runs), baseline)
    v = verdicts(p, policy, list(metric), list(arm) or None, list(pair) or None)
    path = render_report(p.runs, out, verdicts=v, leaders=leaders(p.runs), drill_sessions=drill_sessions)
    for b in v["blocks"]:
        gate = f"; gate: {b['gate']['verdict']}" if b["gate"] else ""
        console.print(f"{b['candidate']} against {b['baseline']}: {len(b['regressions'])} regression(s), "
                      f"{len(b['improvements'])} improvement(s) (Holm p < {b['alpha']}){gate}", highlight=False,
                      markup=False)
    for why in v["why_not"]:
        console.print(f"no verdict block: {why}", highlight=False, markup=False)
    console.print(f"report: {path}", highlight=False)


@list_app.command("metrics")
def list_metrics():
    """Every registered metric: name (k is any cutoff), kind, direction, unit, the arms it applies to, and what it
    measures (with its aggregation when it is not the mean over turns)."""
    from rich.table import Table

    from harness.metrics.registry import listing

    t = Table(title="metrics (harness/metrics/families): direction is which way is better; applies to arms that "
                    "declare the capability (harness list arms)", title_justify="left")
    for c in ("metric", "kind", "direction", "unit", "applies to", "description"):
        t.add_column(c, no_wrap=c in ("metric", "direction"), overflow="fold")
    for r in listing():
        desc = r["description"] + ("" if r["aggregation"] == "mean over turns" else f" ({r['aggregation']})")
        t.add_row(r["metric"], r["kind"], r["direction"], r["unit"], r["applies to arms that"], desc)
    console.print(t)


@list_app.command("arms")
def list_arms():
    """Every registered arm with its capabilities (what metrics can apply to it)."""
    from rich.table import Table

    from harness.arms.catalog import REGISTRY

    t = Table(title="arms (harness/arms; capabilities with default parameters)")
    for c in ("arm", "capabilities", "parameters"):
        t.add_column(c, overflow="fold")
    for name, cls in sorted(REGISTRY.items()):
        a = cls()
        t.add_row(name, ", ".join(sorted(a.capabilities)), ", ".join(f"{k}={v}" for k, v in a.params.model_dump().items()))
    console.print(t)


@export_app.command("trec")
def export_trec_cmd(run_dir: Path, arm: str = typer.Option(..., "--arm", help="the arm's label (or id)"),
                    out: Path = typer.Option(..., "--out", "-o", help="the TREC run file to write"),
                    repeat: int = typer.Option(0, help="which repeat, for runs with repeats")):
    """An arm of a run as a TREC run file (qid Q0 docno rank score tag; score = -rank, so ties cannot
    reorder); turns where the arm was n/a or failed are left out. Score it with `harness trec-eval`."""
    from harness.analysis.export import export_trec

    if not RunFolder(run_dir).is_run():
        fail(f"{run_dir}: not a run folder")
    n, left = export_trec(run_dir, arm, out, repeat)
    console.print(f"{out}: {n} queries" + (f" ({left} n/a or failed turns left out)" if left else ""), highlight=False)


@export_app.command("qrels")
def export_qrels_cmd(eval_set: Path, out: Path = typer.Option(..., "--out", "-o", help="the qrels file to write")):
    """An eval set's relevance labels as TREC qrels (qid 0 docno grade); turns without labels are left out."""
    from harness.analysis.export import export_qrels

    n = export_qrels(eval_set, out)
    console.print(f"{out}: {n} queries", highlight=False)
