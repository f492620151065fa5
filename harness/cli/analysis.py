"""Commands of the analysis stage: compare, gate, report, TREC scoring, human review, lists."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli import export_app, app, console, err, fail, list_app, say
from harness.report.limits import DRILL_SESSIONS
from harness.store.folder import RunFolder


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
                  measure: list[str] = typer.Option([], "-m", help="ranking measures, as the registry or trec_eval "
                                                    "spells them (P_10, P.5,10, map, recip_rank, ndcg_cut_10, all_trec: "
                                                    "those of trec_eval's all_trec it has; default: those "
                                                    "of the default metric settings, recall@5/10/20, ndcg@10, mrr@10, "
                                                    "judged@10, holes@10, holes_relevant_elsewhere@10)"),
                  per_query: bool = typer.Option(False, "-q", help="print every query's values as well as the means "
                                                 "(trec_eval's -q)"),
                  judged_only: bool = typer.Option(False, "-J", "--judged-only", help="condensed scoring (trec_eval's "
                                                   "-J): documents without a judgment removed before the cutoff")):
    """Score a TREC run against TREC qrels with the harness's metric code, in trec_eval's layout and under trec_eval's
    measure names where trec_eval has the measure (P_10, recip_rank), so the output diffs with trec_eval's."""
    from harness.analysis.trec_eval import NUM_Q, coverage_note, expand, format_trec, trec_eval
    from harness.metrics.registry import ranking_names

    for p in (qrels, run_file):
        if not p.exists():
            fail(f"{p}: no such file")
    names, lacking = expand(list(measure))
    df = trec_eval(qrels, run_file, names or ranking_names(None), complete, judged_only)
    print(format_trec(df, per_query, num_q=not names or NUM_Q in names))
    if lacking:
        say(f"note: all_trec: not computed here: {', '.join(lacking)}", stderr=True)
    if (note := coverage_note(df)) is not None:
        err.print(f"note: {note}", highlight=False, markup=False)


@app.command()
def compare(runs: list[Path] = typer.Argument(..., help="run folders; each is compared with the first (or one run "
                                                         "with --reference)"),
            reference: Optional[str] = typer.Option(None, "--reference", help="one run: compare its arms with this "
                                                                              "arm (a label or id)"),
            arm: list[str] = typer.Option([], "--arm", help="only these arms (labels or ids)"),
            pair: list[str] = typer.Option([], "--pair", help="BASELINE=CANDIDATE (labels or arm ids)"),
            metric: list[str] = typer.Option([], "--metric", "-m", help="metrics (default: the first run's headline "
                                             "ranking metrics, recall@10, ndcg@10 and mrr@10 unless its cutoffs differ, "
                                             "and judged@10 beside them)"),
            segment: list[str] = typer.Option(["all", "turn_index>=2"], "--segment", "-s"),
            allow_different_evalsets: bool = typer.Option(False, "--allow-different-evalsets"),
            allow_partial: bool = typer.Option(False, "--allow-partial", help="compare runs with planned turns "
                                               "missing (killed, unfinished), marked partial"),
            out: Optional[Path] = typer.Option(None, "--out", "-o", help="folder for compare.md and compare.csv "
                                               "(default: reports/compare/ and a folder named for the runs)"),
            show_all: bool = typer.Option(False, "--all", help="the rows of unchanged arms too (an arm whose every "
                                          "quality metric is equal to its partner's on every turn is one line)")):
    """Per-metric, per-segment paired differences with CIs, Holm-corrected p-values, wins/ties/losses by each
    metric's direction. Runs pair arms by label; labels without a partner are named; arms a change left alone
    (identical rankings, or every difference exactly zero) are one line unless --all. Runs must be complete (unless
    --allow-partial); stale tables are scored again first, and it says so. compare.csv holds every row."""
    from harness.analysis.compare import COLUMNS, compare_runs, compare_within, families, to_markdown
    from harness.analysis.unchanged import kept, said as unchanged_said
    from harness.metrics.registry import coverage, headline
    from harness.report.endings import compare_ending
    from harness.report.terminal import compare_tables, under

    settings = RunFolder(runs[0]).read_manifest().metrics
    metric = list(metric) or headline(settings) + coverage(settings)[:1]  # judged@k beside them
    if reference is not None:
        if len(runs) != 1:
            fail("--reference compares the arms of one run: give one run folder")
        c = compare_within(runs[0], reference, list(metric), list(segment), list(arm) or None,
                           allow_partial=allow_partial)
    else:
        c = compare_runs(runs, list(metric), list(segment), list(arm) or None, list(pair) or None,
                         allow_different_evalsets, allow_partial=allow_partial)
    df = c.table
    out = out or _compare_folder(runs, reference)
    replaced = (out / "compare.md").exists()
    out.mkdir(parents=True, exist_ok=True)
    df.reindex(columns=[x for x in COLUMNS if x in df.columns]).to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text(to_markdown(c, runs[0].name, show_all), encoding="utf-8")
    what = f"(its arms) against {reference}" if reference else f"against {runs[0].name}"
    hidden = {} if show_all else c.unchanged
    tables = compare_tables(kept(df, hidden), what, families(df))
    for t in tables:
        console.print(t)
    said = [escape(f"{run} {what}: {unchanged_said(labels)}; --all shows their rows (counted in pHolm's family)")
            for run, labels in hidden.items()]
    said += [escape(f"changed in {label}: {changes}")
             for label, changes in df.drop_duplicates("label")[["label", "changes"]].itertuples(index=False) if changes]
    said += [f"[yellow]warning:[/yellow] {escape(note)}" for note in c.notes]
    said += [f"[yellow]warning: segment {escape(repr(seg))} matches no measured turn of {escape(runs[0].name)}[/yellow]"
             for seg in sorted(set(df.loc[df["n_turns"] == 0, "segment"]))]
    for line in under(tables, said):
        console.print(line)
    say(f"{'replaced' if replaced else 'saved'}: {out / 'compare.md'}, {out / 'compare.csv'}")
    console.print(compare_ending(df, reference or runs[0].name, c.unchanged), highlight=False, markup=False,
                  soft_wrap=True)  # one line: the tail of a CI log


def _compare_folder(runs: list[Path], reference: str | None) -> Path:
    """reports/compare/ and a folder named for what is compared (`A_vs_B`, `A_arms_vs_REF`), so
    one comparison never replaces another's tables."""
    import re

    names = [Path(r).resolve().name for r in runs] + ([f"arms_vs_{reference}"] if reference else [])
    return Path("reports/compare") / re.sub(r"[^A-Za-z0-9._=-]+", "-", ("_" if reference else "_vs_").join(names))


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
    from harness.analysis.gate import evaluate_to
    from harness.errors import HarnessError
    from harness.report.endings import gate_ending, gate_summary

    if explain:
        return _explain(baseline, candidate, policy, list(pair))
    try:
        code, v, text = evaluate_to(baseline, candidate, policy, list(pair), out)
    except HarnessError as e:  # refused (evidence, inputs) or infrastructure: still the verdict line last
        code, v, text = e.exit_code, None, str(e)
    if v is None:
        err.print(f"[red]error:[/red] {escape(text.removeprefix('error: '))}", highlight=False, soft_wrap=True)
    else:
        for part in gate_summary(v):
            console.print(part, highlight=False)
        say(f"written: {out / 'gate.md'}, {out / 'gate.junit.xml'}, {out / 'gate.json'}")
    *failed, verdict = gate_ending(code, v)
    for line in failed:
        console.print(line)
    console.print(verdict, highlight=False, markup=False, soft_wrap=True)  # one line: the tail of a CI log
    raise typer.Exit(code)


def _explain(baseline: Path, candidate: Path, policy: Path, pairs: list[str]) -> None:
    from harness.analysis.explain import explain
    from harness.analysis.policy import load_policy
    from harness.report.terminal import explain_tables

    x = explain(baseline, candidate, load_policy(policy), pairs)
    for n in ([f"not compared (coverage: subset): {x['not_compared']}"] if x["not_compared"] else []) + \
            x["evidence"] + x["warnings"]:
        say(f"note: {n}")
    say(f"{policy.name} on {x['baseline']} → {x['candidate']}: the sessions each check would see, and the smallest drop "
        "each rule can show (from the baseline's spread between sessions); a table per check")
    for t in explain_tables(x):
        console.print(t)
    console.print(f"{len(x['rows'])} check(s); nothing was gated (--explain)", highlight=False)


def _checked(runs: list[Path]) -> dict:
    """Each run checked (its stale tables scored again, once, here) and its notes said; returns the
    runs whose tables were fresh, by resolved folder: leaders and the report read these instead of
    checking and loading the folders again."""
    from harness.analysis.evidence import check_run

    checked = {}
    for r in dict.fromkeys(runs):
        data = check_run(r, complete=False, scored=False)
        for note in data.evidence.notes(data.name):
            say(f"note: {note}")
        if not data.evidence.rescored:
            checked[str(Path(r).resolve())] = data
    return checked


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
    from harness.report.endings import report_ending
    from harness.report.plotting import elsewhere
    from harness.report.render import render_report

    for r in [*runs, *([baseline] if baseline else [])]:
        if not RunFolder(r).is_run():
            fail(f"{r}: not a run folder")
    if policy is not None and not policy.is_file():
        fail(f"{policy}: no such policy file")
    with elsewhere():  # the plots are drawn in a process of their own, which starts loading matplotlib now
        checked = _checked([*([baseline] if baseline else []), *runs])
        p = plan(list(runs), baseline)
        err.print(f"report: comparing and plotting {len(p.runs)} run(s)", highlight=False, markup=False)
        v = verdicts(p, policy, list(metric), list(arm) or None, list(pair) or None)
        answers: dict = {}  # each run's best arm, computed once for the report's first table and the last lines
        path = render_report(p.runs, out, verdicts=v, leaders=lambda: answers.update(leaders(p.runs, checked=checked))
                             or answers, drill_sessions=drill_sessions, checked=checked)
    for b in v["blocks"]:
        gate = f"; gate: {b['gate'].verdict.value}" if b["gate"] else ""
        say(f"{b['candidate']} against {b['baseline']}: {len(b['regressions'])} regression(s), "
            f"{len(b['improvements'])} improvement(s) (Holm p < {b['alpha']}){gate}")
    for why in v["why_not"]:
        say(f"no verdict block: {why}")
    for line in report_ending(answers, p.runs):  # one line a run: the tail of a log answers
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    say(f"report: {path}")


@app.command()
def show(run_dir: Path, session: str, turn: Optional[int] = typer.Argument(None, help="the turn index (default: the "
                                                                                   "session's first labelled turn)"),
         arms: Optional[str] = typer.Option(None, "--arms", help="only these arms, comma-separated (labels or ids)")):
    """One turn of a run, arm by arm: the queries each issued (per round), its filters, its top 5 with their
    relevance grades, its answer or abstention, what failed, its headline metric values. The drill-down of the
    report, in a terminal."""
    from harness.report.fit import Wrapped
    from harness.report.show import lines, turn_view

    if not RunFolder(run_dir).is_run():
        fail(f"{run_dir}: not a run folder")
    view = turn_view(run_dir, session, turn, [a.strip() for a in arms.split(",") if a.strip()] if arms else None)
    for line in lines(view):
        console.print(Wrapped(line), highlight=False)


@list_app.command("metrics")
def list_metrics():
    """Every registered metric: name (k is any cutoff), kind, direction, unit, the arms it applies to, and what it
    measures (with its aggregation when it is not the mean over turns)."""
    from harness.metrics.registry import listing
    from harness.report.fit import Col
    from harness.report.terminal import fitted

    rows = [{"metric": r["metric"], "kind": r["kind"], "direction": r["direction"], "unit": r["unit"],
             "applies to": r["applies to arms that"],
             "description": r["description"] + ("" if r["aggregation"] == "mean over turns" else f" ({r['aggregation']})")}
            for r in listing()]
    console.print(fitted("metrics (harness/metrics/families): direction is which way is better; applies to arms that "
                         "declare the capability (harness list arms)",
                         [Col("metric"), Col("kind", wrap=True, drop=2), Col("direction"), Col("unit", wrap=True, drop=1),
                          Col("applies to", wrap=True), Col("description", wrap=True)], rows))


@list_app.command("arms")
def list_arms():
    """Every registered arm with its capabilities (what metrics can apply to it)."""
    from harness.arms.catalog import REGISTRY, make_arm
    from harness.report.fit import Col
    from harness.report.terminal import fitted

    rows = [{"arm": name, "capabilities": ", ".join(sorted(a.capabilities)),
             "parameters": ", ".join(f"{k}={v}" for k, v in a.params.model_dump().items())}
            for name, a in ((name, make_arm(name)) for name in sorted(REGISTRY))]
    console.print(fitted("arms (harness/arms; capabilities with default parameters)",
                         [Col(c, wrap=True) for c in ("arm", "capabilities", "parameters")], rows))


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
