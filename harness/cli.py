"""The `harness` command. Thin: parse, call, print. User errors are one clean message and a
non-zero exit (2 for bad input), never a traceback."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from harness import env as _env  # noqa: F401  (sets offline-safe environment variables first)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Offline evaluation harness for retrieval with query rewriting.")
eval_set_app = typer.Typer(no_args_is_help=True, help="Work with eval sets.")
import_app = typer.Typer(no_args_is_help=True, help="Import public data or external runs as eval sets.")
app.add_typer(eval_set_app, name="eval-set")
app.add_typer(import_app, name="import")
list_app = typer.Typer(no_args_is_help=True, help="List what the harness knows: metrics, arms.")
app.add_typer(list_app, name="list")
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)


def fail(msg: str, code: int = 2):
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(msg)}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


@eval_set_app.command("validate")
def eval_set_validate(path: Path):
    """Validate an eval set folder; report every problem (file:line: field: message), exit 2 on any."""
    from harness.evalset.load import EvalSetError, iter_labelled, load_eval_set

    try:
        es = load_eval_set(path)
    except EvalSetError as e:
        for p in e.problems:
            err.print(f"{path}/{p}", highlight=False, markup=False, soft_wrap=True)
        fail(f"{len(e.problems)} problem(s) in {path}")
    n_turns = sum(1 for _ in iter_labelled(es))
    splits = sorted(set(es.split_of.values()))
    console.print(f"{es.name} {es.info.version}: {len(es.docs)} documents, {len(es.sessions)} sessions "
                  f"({', '.join(splits)}), {n_turns} labelled turns; hash {es.content_hash[:16]}", highlight=False)


@import_app.command("mtrag")
def import_mtrag(src: Path = typer.Argument(..., help="raw MTRAG folder (mtragun-human/, derived/)"),
                 out: Path = typer.Option(Path("eval_sets/mtrag-un"), "--out", "-o")):
    """Convert MTRAG-UN (human tasks, qrels, pooled corpus) into an eval set."""
    from harness.evalset.load import EvalSetError
    from harness.importers.mtrag import import_mtrag as run

    if not (src / "mtragun-human").is_dir():
        fail(f"{src}: not an MTRAG folder (no mtragun-human/)")
    try:
        run(src, out)
    except EvalSetError as e:
        fail(str(e))
    eval_set_validate(out)


@import_app.command("trec")
def import_trec(docs: Path = typer.Option(..., help="TREC documents (<DOC><DOCNO>)"),
                topics: Path = typer.Option(..., help="TREC topics (<top><num><title>)"),
                qrels: Path = typer.Option(..., help="qrels: qid iter docno grade"),
                out: Path = typer.Option(..., "--out", "-o"),
                name: str = typer.Option(...), licence: str = typer.Option("see NOTICE"),
                source: str = typer.Option("TREC collection"),
                notice: list[Path] = typer.Option([], help="licence/notice files to keep beside the set")):
    """Convert a TREC collection (documents, topics, qrels) into an eval set."""
    from harness.evalset.load import EvalSetError
    from harness.importers.trec import import_trec as run

    for p in (docs, topics, qrels, *notice):
        if not p.exists():
            fail(f"{p}: no such file")
    try:
        run(docs, topics, qrels, out, name=name, licence=licence, source=source, notices=notice)
    except (EvalSetError, ValueError) as e:
        fail(str(e))
    eval_set_validate(out)


@import_app.command("run")
def import_run_cmd(run_file: Path, eval_set: Path = typer.Option(..., "--eval-set", help="the eval set the run answers"),
                   run_id: Optional[str] = typer.Option(None), runs_dir: Path = typer.Option(Path("runs"))):
    """Turn a TREC run file into a run folder whose arm is named after the file."""
    from harness.evalset.load import EvalSetError
    from harness.importers.run import import_run
    from harness.analysis.trec_eval import RunFileError

    if not run_file.exists():
        fail(f"{run_file}: no such file")
    try:
        out = import_run(run_file, eval_set, runs_dir, run_id)
    except (EvalSetError, RunFileError, FileExistsError) as e:
        fail(str(e))
    from harness.run.manifest import read_manifest

    man = read_manifest(out)
    counts = man["counts"]
    for w in man.get("warnings", []):
        err.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    if counts.get("queries_missing_from_run"):
        err.print(f"[yellow]warning:[/yellow] {counts['queries_missing_from_run']} of {counts['turns']} labelled turns are "
                  "missing from the run file: each is scored as an empty ranking (0), as trec_eval -c does",
                  highlight=False)
    console.print(f"run folder: {out}", highlight=False)
    _metrics(out)


@app.command()
def sample(run_dir: Path, n: int = typer.Option(100, "--n"), seed: int = typer.Option(0),
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="default: reports/review-RUN")):
    """Export a sample of answers stratified by arm, turn index and answerability (CSV + HTML rating sheet)."""
    from harness.analysis.review import sample_answers, write_sample

    if not (run_dir / "manifest.json").exists():
        fail(f"{run_dir}: not a run folder (no manifest.json)")
    df = sample_answers(run_dir, n, seed)
    if df.empty:
        fail(f"{run_dir}: no answers to sample (run arms with answer: true or the corrective arm)")
    csv_path, html_path = write_sample(df, out or Path("reports") / f"review-{run_dir.name}", run_dir.name)
    console.print(f"{len(df)} answers: {csv_path} and {html_path}", highlight=False)


@import_app.command("ratings")
def import_ratings_cmd(run_dir: Path, ratings: Path):
    """Bring people's ratings (the sample CSV, filled in) back as human judgments of a run."""
    from harness.analysis.review import RatingsError, import_ratings, judge_agreement

    if not ratings.exists():
        fail(f"{ratings}: no such file")
    try:
        out = import_ratings(run_dir, ratings)
    except (RatingsError, FileNotFoundError) as e:
        fail(str(e))
    console.print(f"human judgments: {out}; judge agreement: {judge_agreement(run_dir)}", highlight=False)


@import_app.command("log")
def import_log_cmd(log: Path, corpus_from: Path = typer.Option(..., "--corpus-from", help="eval set whose corpus the log used"),
                   out: Path = typer.Option(..., "--out", "-o"), name: str = typer.Option(...)):
    """Build an eval set from logged production sessions (JSONL); e-mails, phone numbers and IBANs redacted first."""
    from harness.evalset.load import EvalSetError
    from harness.importers.log import LogError, import_log

    if not log.exists():
        fail(f"{log}: no such file")
    try:
        import_log(log, corpus_from, out, name)
    except (LogError, EvalSetError) as e:
        fail(str(e))
    eval_set_validate(out)


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
def run(config: Optional[Path] = typer.Argument(None, help="run config (YAML)"),
        resume: Optional[Path] = typer.Option(None, help="continue an interrupted run folder"),
        run_id: Optional[str] = typer.Option(None, help="name of the run folder (default: NAME-TIME-RANDOM)"),
        no_progress: bool = typer.Option(False, help="no progress bar"),
        repeats: Optional[int] = typer.Option(None, min=1, help="replay every arm N times with seeds seed..seed+N-1"),
        shard: Optional[str] = typer.Option(None, help="i/n: replay only the sessions of shard i of n (harness merge joins them)"),
        metrics: bool = typer.Option(True, help="score the run when it ends")):
    """Replay every (arm, session, labelled turn) of a config; write a run folder under runs/."""
    from harness.config import ConfigError, load_config, parse_config
    from harness.evalset.load import EvalSetError
    from harness.run.manifest import read_manifest
    from harness.run.replay import Replay, resume_config

    try:
        if resume:
            raw = resume_config(resume)
            cfg, run_dir = parse_config(raw, resume / "manifest.json"), resume
        else:
            if config is None:
                fail("give a CONFIG or --resume RUN")
            cfg, raw = load_config(config)
            if repeats:
                raw = {**raw, "repeats": repeats}
                cfg = parse_config(raw, config)
            run_dir = Path(cfg.runs_dir) / run_id if run_id else None
        from harness.run.shard import parse_shard

        sh = parse_shard(shard) if shard else None
        if resume and not sh:
            sh_m = (read_manifest(resume).get("shard") or {})
            sh = (sh_m["index"], sh_m["of"]) if sh_m else None
        rp = Replay(cfg, raw, run_dir=run_dir, progress=not no_progress and sys.stderr.isatty(), resume=bool(resume),
                    shard=sh)
    except (ConfigError, EvalSetError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    from harness.llm.transport import ReplayMiss

    try:
        out = rp.run()
    except (FileExistsError, ReplayMiss) as e:
        fail(str(e))
    console.print(f"run folder: {out}", highlight=False)
    if metrics:
        _metrics(out)
    counts = read_manifest(out).get("counts") or {}
    if counts.get("turns") and counts.get("turns_failed", 0) > counts["turns"] / 2:
        err.print(f"[red]infrastructure:[/red] {counts['turns_failed']} of {counts['turns']} replayed turns failed "
                  "(an error, or an LLM call that failed after its retries); the rows record why. Exit 3.",
                  highlight=False)
        raise typer.Exit(3)


def _check_metric_names(names: list[str]) -> None:
    """Unknown metric names exit 2 before anything is computed."""
    from harness.metrics.registry import UnknownMetric, resolve

    for n in names:
        try:
            resolve(n)
        except UnknownMetric as e:
            fail(f"-m/--metric: {e}")


def _metrics(run_dir: Path, metric_names: list[str] | None = None):
    from harness.run.armset import run_arms
    from harness.run.manifest import read_manifest
    from harness.metrics.compute import compute_metrics, write_metrics
    from harness.metrics.registry import resolve
    from harness.report.table import rich_table

    _check_metric_names(metric_names or [])
    res = compute_metrics(run_dir)
    path = write_metrics(run_dir, res)
    man = read_manifest(run_dir)
    es = man["eval_set"]
    for n in metric_names or []:
        m = resolve(n)
        if m.name not in res.metric_names:
            from types import SimpleNamespace

            from harness.analysis.compare import why_missing

            applies = [a.label for a in run_arms(man) if m.applies_to(a.capabilities)]
            why = (f"no arm of this run does what it needs ({', '.join(sorted(m.needs))})" if not applies
                   else why_missing(m, SimpleNamespace(path=run_dir, name=run_dir.name, manifest=man)))
            fail(f"-m/--metric {m.name}: {why}; computed here: {', '.join(res.metric_names)}")
    names = [resolve(n).name for n in metric_names] if metric_names else \
        [m for m in res.metric_names if m.startswith(("recall@10", "ndcg@", "mrr@"))]
    for m in names:
        console.print(rich_table(res.aggregates, m, res.arms, f"{m} on {es['name']} by turn index ({run_dir.name})"))
    _loop_tables(run_dir, res, man)
    _paired(run_dir, res)
    answered = res.per_turn[res.per_turn["metric"] == "answered"]
    if not answered.empty and not (run_dir / "judgments.parquet").exists():
        console.print("faithfulness: not measured (no judgments; run `harness judge RUN` with a judge endpoint)")
    elif "faithfulness" in set(res.per_turn["metric"]):
        console.print(rich_table(res.aggregates, "faithfulness", res.arms, f"faithfulness ({run_dir.name})"))
    if es.get("pooled_corpus"):
        console.print("[yellow]note:[/yellow] pooled corpus: every document is relevant to some turn, so absolute "
                      "scores are inflated; compare arms, not leaderboard numbers.")
    na = res.aggregates[(res.aggregates["segment"] == "all") & (res.aggregates["n"] == 0)]["arm_id"].unique()
    for a in na:
        console.print(f"[yellow]note:[/yellow] {a} is n/a on every turn of this set", highlight=False)
    console.print(f"metrics: {path}", highlight=False)


def _paired(run_dir: Path, res):
    from rich.table import Table

    from harness.analysis.paired import paired_table

    pt = paired_table(res.per_turn, res.labels, res.arm_infos)
    if pt.empty:
        return
    pt.to_parquet(run_dir / "comparisons.parquet", index=False)
    t = Table(title=f"paired vs {pt['reference'].iloc[0]} (session bootstrap 95% CI, randomization p, Holm)")
    for c in ("metric", "segment", "arm", "n_turns", "n_sessions", "diff", "95% CI", "p_holm", "W/T/L", "gap closed"):
        t.add_column(c, overflow="fold")
    for r in pt.itertuples():
        gap = getattr(r, "oracle_gap_closed", None)
        t.add_row(r.metric, r.segment, r.arm, str(r.n_turns), str(r.n_sessions), f"{r.diff:+.3f}",
                  f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]", f"{r.p_holm:.4f}", f"{r.wins}/{r.ties}/{r.losses}",
                  "—" if gap is None or gap != gap else f"{gap:.0%}")
    console.print(t)


def _loop_tables(run_dir: Path, res, man: dict):
    """Abstention by answerability and rounds per turn index, for arms that answer or loop."""
    from rich.table import Table

    from harness.metrics.families.answers import abstention_table
    from harness.report.table import bucket

    labels = res.labels
    ab = abstention_table(res.per_turn, labels)
    if not ab.empty:
        t = Table(title=f"abstention by answerability ({run_dir.name})")
        for c in ab.columns:
            t.add_column(c, overflow="fold")
        for r in ab.itertuples(index=False):
            t.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r])
        console.print(t)
    rounds = res.per_turn[res.per_turn["metric"] == "rounds_used"].merge(labels[["session_id", "turn_index"]])
    if not rounds.empty:
        rounds = rounds.assign(t=rounds["turn_index"].map(bucket), r=rounds["value"].astype(int))
        tab = rounds.pivot_table(index=["arm_id", "t"], columns="r", values="value", aggfunc="count", fill_value=0)
        t = Table(title=f"rounds used per turn index ({run_dir.name})")
        t.add_column("arm"), t.add_column("turn")
        for c in tab.columns:
            t.add_column(f"{c} round(s)")
        for (arm, ti), row in tab.iterrows():
            t.add_row(arm, ti, *[str(int(v)) for v in row])
        console.print(t)
    if man.get("repeats", 1) > 1:
        offline = [a["arm_id"] for a in man["arms"] if a["backends"] and set(a["backends"].values()) == {"offline"}]
        if offline:
            console.print(f"[yellow]note:[/yellow] {len(offline)} arm(s) use offline roles only; they are deterministic, "
                          "so their repeats are identical (spread 0 by construction).")


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
    from harness.report.html import render_report

    for r in runs:
        if not (r / "manifest.json").exists():
            fail(f"{r}: not a run folder (no manifest.json)")
    path = render_report(list(runs), out)
    console.print(f"report: {path}", highlight=False)


@app.command()
def merge(shards: list[Path] = typer.Argument(..., help="the shard run folders of one run"),
          out: Path = typer.Option(..., "--out", "-o", help="the merged run folder (must not exist)")):
    """Join shard run folders (harness run --shard i/n) into one run folder; then score it."""
    from harness.run.shard import ShardError, merge_runs

    try:
        path = merge_runs(list(shards), out)
    except (ShardError, FileExistsError, FileNotFoundError) as e:
        fail(str(e))
    console.print(f"merged: {path}", highlight=False)
    _metrics(path)


@app.command()
def judge(run_dir: Path, refresh: Optional[str] = typer.Option(None, "--refresh", help="'judge': ask the judge again")):
    """Ask the judge role about every answer of a run (Ragas faithfulness) into judgments.parquet; cached.
    The only step after replay that calls a model; without a judge endpoint answers are 'not measured'."""
    from harness.run.judge import judge_command

    if refresh not in (None, "judge"):
        fail("--refresh takes 'judge'")
    code = judge_command(run_dir, refresh == "judge")
    if code:
        raise typer.Exit(code)


@app.command()
def metrics(run_dir: Path, metric: list[str] = typer.Option([], "--metric", "-m", help="metrics to print")):
    """Score a run folder from its traces and labels alone; write metrics.parquet; print tables."""
    from harness.run.traces import TraceError

    if not (run_dir / "manifest.json").exists():
        fail(f"{run_dir}: not a run folder (no manifest.json)")
    try:
        _metrics(run_dir, metric or None)
    except TraceError as e:
        fail(str(e))


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


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
