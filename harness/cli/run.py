"""Commands of the run stage: run, merge, judge, and the scoring step (metrics)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli import app, console, err, fail, say
from harness.errors import Exit
from harness.store.folder import RunFolder


@app.command()
def run(config: Optional[Path] = typer.Argument(None, help="run config (YAML)"),
        resume: Optional[Path] = typer.Option(None, help="continue an interrupted run folder"),
        run_id: Optional[str] = typer.Option(None, help="name of the run folder (default: NAME-TIME-RANDOM)"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress: neither the bar (on a terminal) nor "
                                   "the progress lines (otherwise); the results and the last line still print"),
        progress: bool = typer.Option(True, "--progress/--no-progress", hidden=True, help="--no-progress: --quiet"),
        repeats: Optional[int] = typer.Option(None, min=1, help="replay every arm N times with seeds seed..seed+N-1"),
        shard: Optional[str] = typer.Option(None, help="i/n: replay only the sessions of shard i of n (harness merge joins them)"),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="processes to split the sessions over, "
                                              "joined into one run folder (default: the config's workers:, else the "
                                              "machine's cores, fewer for a small run; 1: one process)"),
        metrics: bool = typer.Option(True, help="score the run when it ends"),
        llm_cache: Optional[str] = typer.Option(None, "--llm-cache", help="the LLM cache mode for this run, over the "
                                                "config's llm.cache.mode: readwrite | replay | refresh | off"),
        max_cost_usd: Optional[float] = typer.Option(None, "--max-cost-usd", min=0, help="what this run may spend on "
                                                     "requests the cache does not answer, over llm.max_cost_usd"),
        eval_set: Optional[Path] = typer.Option(None, "--eval-set", help="the eval-set folder to replay, over the "
                                                "config's eval_set (recorded in the manifest's config)"),
        sets: list[str] = typer.Option([], "--set", help="KEY=VALUE over the config, checked as its keys are and "
                                       "recorded in the manifest's config: dotted keys, arms by label or name "
                                       "(arms.corrective.top_k=5, repeats=2, index.max_chars=1500)")):
    """Replay every (arm, session, labelled turn) of a config; write a run folder under runs/."""
    replay_command(config, resume, run_id, quiet or not progress, repeats, shard, workers, metrics, llm_cache,
                   max_cost_usd, eval_set, list(sets))


def replay_command(config: Path | None, resume: Path | None, run_id: str | None, quiet: bool, repeats: int | None,
                   shard: str | None, workers: int | None, metrics: bool, llm_cache: str | None,
                   max_cost_usd: float | None, eval_set: Path | None, sets: list[str], grids: list[str] = ()):
    """`harness run` (and `harness sweep`, with its `grids`): the replay, its scores, its last line and exit."""
    from harness.evalset.load import load_eval_set
    from harness.llm.ledger import BudgetExceeded
    from harness.store.manifest import read_manifest
    from harness.run.parallel import replay, workers_for
    from harness.run.replay import new_run_id
    from harness.store.shard import parse_shard

    cfg, raw, run_dir = _config(config, resume, run_id, repeats, llm_cache, max_cost_usd, eval_set, sets, list(grids))
    sh = parse_shard(shard) if shard else None
    if resume and not sh:
        sh_m = read_manifest(resume).shard
        sh = (sh_m.index, sh_m.of) if sh_m else None
    es = load_eval_set(cfg.eval_set)  # once: the default worker count's, the run's (a forked worker starts with it)
    n = workers_for(cfg, workers, sh, resume, es)
    run_dir = run_dir or Path(cfg.runs_dir) / new_run_id(cfg.name)
    mode = "off" if quiet else "bar" if sys.stderr.isatty() else "lines"
    try:
        out = replay(cfg, raw, run_dir, resume=bool(resume), shard=sh, workers=n, progress=mode, es=es)
    except BudgetExceeded as e:  # infrastructure, not bad input: the rows so far are kept
        err.print(f"[red]infrastructure:[/red] {escape(str(e))}. The run stopped with the turns it finished; the "
                  "replies paid for are in the LLM cache, a new run does not pay for them again; `harness run --resume "
                  f"{run_dir} --max-cost-usd N` continues it under a new cap. Exit 3.", highlight=False)
        raise typer.Exit(Exit.INFRASTRUCTURE)
    if metrics:
        _metrics(out, steps=not quiet)
    raise typer.Exit(_end_of_run(out, cfg.max_error_rate))


def _end_of_run(out: Path, max_error_rate: float) -> Exit:
    """The failed turns per arm (or that there were none), then the run in one line; the exit code:
    3 when more than half of the turns replayed now failed (infrastructure), 1 when an arm's share
    of failed turns is above the config's max_error_rate, else 0."""
    from harness.store.integrity import failures
    from harness.llm.failures import llm_failures_line

    folder = RunFolder(out)
    man = folder.read_manifest()
    counts = man.counts
    fails = failures(folder, man)
    for f in fails:
        err.print(f"[yellow]failed turns:[/yellow] {escape(f.describe())}", highlight=False, soft_wrap=True)
    over = [f for f in fails if f.rate > max_error_rate]
    code = Exit.PASS
    if counts.get("turns") and counts.get("turns_failed", 0) > counts["turns"] / 2:
        err.print(f"[red]infrastructure:[/red] {counts['turns_failed']} of {counts['turns']} replayed turns failed "
                  "(an error, or an LLM call that failed after its retries); the rows record why. Exit 3.",
                  highlight=False)
        code = Exit.INFRASTRUCTURE
    elif over:
        err.print(f"[red]failed turns above max_error_rate {max_error_rate}:[/red] "
                  + escape(", ".join(f"{f.label} {f.rate:.1%}" for f in over))
                  + " (the run config's max_error_rate; the traces record every error). Exit 1.", highlight=False)
        code = Exit.REGRESSION
    if line := llm_failures_line(counts):
        err.print(f"[yellow]failed LLM calls:[/yellow] {escape(line)}", highlight=False, soft_wrap=True)
    failed = sum(f.failed for f in fails)
    console.print(f"run: {counts.get('turns', 0)} turns replayed, "
                  + (f"{failed} failed" if fails else "no failed turn")
                  + f", {counts.get('seconds', 0)} s: {out}", highlight=False, soft_wrap=True)  # one line: tail -1
    return code


def _config(config: Path | None, resume: Path | None, run_id: str | None, repeats: int | None,
            llm_cache: str | None, max_cost_usd: float | None = None, eval_set: Path | None = None,
            sets: list[str] = (), grids: list[str] = ()):
    """(config, raw config, run folder or None) of `harness run`: from the file, or the manifest of
    the run to resume; --set, --grid (harness sweep), --repeats, --llm-cache, --max-cost-usd and
    --eval-set written into the raw config (the manifest says what ran)."""
    from harness.config import command_line_sets, load_config, missing_eval_set, parse_config, with_overrides
    from harness.evalset.folder import CORPUS, INFO, is_eval_set
    from harness.llm.cache import MODES
    from harness.run.replay import resume_config

    if llm_cache is not None and llm_cache not in MODES:
        fail(f"--llm-cache {llm_cache!r}: expected one of {', '.join(MODES)}")
    if sets and resume:
        fail("--set: a resumed run replays the config its manifest records; leave --set out")
    if eval_set is not None and resume:
        fail("--eval-set: a resumed run replays the eval set its manifest records; leave --eval-set out")
    if eval_set is not None and not is_eval_set(eval_set):
        fail(f"--eval-set {eval_set}: not an eval-set folder (it holds neither {INFO} nor {CORPUS})")
    if resume:
        raw, source, where = resume_config(resume), RunFolder(resume).read_manifest().config_dir, \
            RunFolder(resume).manifest_path
    elif config is None:
        fail("give a CONFIG or --resume RUN")
    else:
        _, raw = load_config(config)
        source, where = None, config
    # --eval-set is a path from the working folder; the config says it from its own folder
    given = None if not eval_set else str(eval_set) if eval_set.is_absolute() or not config else \
        os.path.relpath(eval_set.resolve(), config.resolve().parent)
    raw = command_line_sets(command_line_sets(raw, list(sets)), list(grids), grid=True)
    raw = with_overrides(raw, {"repeats": repeats or None, "llm.cache.mode": llm_cache or None,
                               "llm.max_cost_usd": max_cost_usd, "eval_set": given})
    text = Path(where).read_text(encoding="utf-8") if not resume else None
    cfg = parse_config(raw, where, text, source_dir=source)
    if (e := missing_eval_set(cfg, where, text)) is not None:
        raise e
    if cfg.eval_set_note:
        say(f"note: {cfg.eval_set_note}", stderr=True)
    _check_measures(cfg.metrics.measures, where, text)
    return cfg, raw, resume or (Path(cfg.runs_dir) / run_id if run_id else None)


def _check_measures(names: list[str], where, text: str | None) -> None:
    """A config's metrics.measures are names the registry knows (the config layer sits below it)."""
    from harness.config import ConfigError
    from harness.metrics.registry import UnknownMetric, resolve
    from harness.yamlpos import located

    problems = []
    for i, n in enumerate(names):
        try:
            resolve(n)
        except UnknownMetric as e:
            problems.append((("metrics", "measures", i), str(e)))
    if problems:
        raise ConfigError(located(where, text, problems))


def _check_metric_names(names: list[str]) -> None:
    """Unknown metric names exit 2 before anything is computed."""
    from harness.metrics.registry import UnknownMetric, resolve

    for n in names:
        try:
            resolve(n)
        except UnknownMetric as e:
            fail(f"-m/--metric: {e}")


def _missing(m, run_dir: Path, res) -> str:
    """Why a metric asked for with -m has no value in a scored run."""
    from harness.analysis.compare import why_missing
    from harness.store.folder import RunData

    run = RunData.load(run_dir)
    if not any(m.applies_to(a.capabilities) for a in run.arms):
        return f"no arm of this run does what it needs ({', '.join(sorted(m.needs))})"
    return why_missing(m, run)


def _metrics(run_dir: Path, metric_names: list[str] | None = None, quiet: bool = False, steps: bool = True,
             qrels: str | None = None, workers: int | None = None):
    """Score a run folder (every table into the folder), then print them (or where they are);
    `steps`: say on stderr what it does first."""
    from harness.analysis.pool_warnings import agreement_said, holes_summary, qrels_note
    from harness.metrics.registry import coverage, headline, judged, resolve
    from harness.metrics.score import score_run
    from harness.report import terminal
    from harness.store.folder import RunFolder

    _check_metric_names(metric_names or [])
    if steps:
        say(f"scoring: {Path(run_dir).name}: every metric per turn and segment, paired comparisons", stderr=True)
    scored = score_run(run_dir, metric_names or [], qrels, workers=workers)  # a ranking measure named here is computed too
    done = scored.completeness
    if done is not None and not done.complete:
        err.print(f"[yellow]warning: partial:[/yellow] {escape(done.describe())}. These tables are partial (they say "
                  "so, and every report shows it); `harness gate` refuses the run until it is complete.",
                  highlight=False, soft_wrap=True)
    if quiet:
        say(f"metrics: {scored.path}")
        return
    res, folder = scored.result, RunFolder(run_dir)
    man = folder.read_manifest()
    for n in metric_names or []:
        m = resolve(n)
        if m.name not in res.metric_names:
            fail(f"-m/--metric {m.name}: {_missing(m, run_dir, res)}; computed here: {', '.join(res.metric_names)}")
    default = headline(man.metrics) + coverage(man.metrics)[:1] + judged()  # headline, judged@k beside, faithfulness
    names = [resolve(n).name for n in metric_names] if metric_names else [m for m in default if m in res.metric_names]
    labels = {a.arm_id: a.label for a in res.arm_infos}
    tables = terminal.metric_tables(res, names, labels, man.eval_set.name, folder.name)
    tables += [terminal.abstention(scored.abstention, labels, folder.name),
               terminal.rounds(res.per_turn, res.labels, labels, folder.name),
               terminal.paired(scored.comparisons, labels, folder.name)]
    tables = [t for t in tables if t is not None]
    for t in tables:
        console.print(t)
    said = terminal.coinciding(scored.coinciding, labels) + terminal.notes(res, man, labels, folder.has_judgments())
    holes = holes_summary(scored.holes or {}, labels)
    said += [f"[yellow]note:[/yellow] {escape(holes)}"] if holes else []
    said += [f"note: {escape(x)}" for x in (qrels_note(folder), agreement_said(folder)) if x]
    for note in terminal.under(tables, said):
        console.print(note, highlight=False)
    say(f"metrics: {scored.path}")


@app.command()
def merge(shards: list[Path] = typer.Argument(..., help="the shard run folders of one run"),
          out: Path = typer.Option(..., "--out", "-o", help="the merged run folder (must not exist)")):
    """Join shard run folders (harness run --shard i/n) into one run folder; then score it."""
    from harness.store.shard import merge_runs

    path = merge_runs(list(shards), out)
    console.print(f"merged: {path}", highlight=False)
    _metrics(path)


@app.command()
def judge(run_dir: Path, refresh: Optional[str] = typer.Option(None, "--refresh", help="'judge': ask the judge again"),
          endpoint: Optional[str] = typer.Option(None, "--endpoint", help="the judge's base URL (else the run config's "
                                                                          "llm.roles.judge)"),
          model: Optional[str] = typer.Option(None, "--model", help="the judge model (with --endpoint)"),
          kind: str = typer.Option("openai-compatible", "--kind", help="openai | azure | openai-compatible"),
          judge_config: Optional[Path] = typer.Option(None, "--config", help="a YAML file with the judge endpoint "
                                                                            "(the fields of llm.roles.judge)"),
          relevance: bool = typer.Option(False, "--relevance", help="grade the documents no person labelled in "
                                         "every arm's top --depth (0-3, UMBRELA-style) into the run folder's "
                                         "relevance labels, and a sample of labelled pairs for agreement; then "
                                         "`harness metrics RUN --qrels human+llm` scores with them (docs/metrics.md)"),
          depth: int = typer.Option(10, "--depth", min=1, help="--relevance: the top k graded"),
          sample: int = typer.Option(100, "--sample", min=0, help="--relevance: labelled pairs graded for agreement"),
          prompt: Optional[str] = typer.Option(None, "--prompt", help="--relevance: the prompt (a file; else the "
                                               "role's prompt, else relevance.v1)"),
          grade_map: str = typer.Option("0,0,1,2", "--grade-map", help="--relevance: the eval-set grade of each LLM "
                                        "grade 0,1,2,3"),
          llm_cache: Optional[str] = typer.Option(None, "--llm-cache", help="the LLM cache mode over the run config's "
                                                  "llm.cache.mode: readwrite | replay (send nothing) | refresh | off"),
          metric: Optional[list[str]] = typer.Option(None, "--metric", help="a judged metric to compute: faithfulness "
                                                     "| response_relevancy (repeatable; default both; the other's "
                                                     "rows are kept)")):
    """Ask the judge role about every answer of a run (Ragas faithfulness and response relevancy) into the run
    folder's judgments; cached; then score the run again, so `harness gate` sees the judgments. The only step after replay that calls a model;
    without a judge endpoint answers are 'not measured'. With --relevance: grade the unjudged documents instead.
    Exit 3 when more than half of the judgments failed."""
    from harness.steps.judge import judge_command, judge_endpoint

    from harness.llm.cache import MODES

    if refresh not in (None, "judge"):
        fail("--refresh takes 'judge'")
    if llm_cache is not None and llm_cache not in MODES:
        fail(f"--llm-cache {llm_cache!r}: expected one of {', '.join(MODES)}")
    ep = judge_endpoint(endpoint, model, kind, judge_config)
    if relevance:
        return _relevance(run_dir, ep, refresh == "judge", depth=depth, sample=sample, prompt=prompt,
                          grade_map=grade_map, cache_mode=llm_cache)
    summary = judge_command(run_dir, refresh == "judge", ep, llm_cache, metric)
    console.print(f"judge: {summary.line()}", highlight=False, markup=False)
    if RunFolder(run_dir).parts():
        _metrics(run_dir, quiet=True)
    if summary.mostly_failed:
        failed, asked = summary.counts.get("error", 0), summary.counts.get("ok", 0) + summary.counts.get("error", 0)
        err.print(f"[red]infrastructure:[/red] {failed} of {asked} judgments failed (see the status column of "
                  f"{escape(str(summary.path))}); exit 3", highlight=False)
        raise typer.Exit(Exit.INFRASTRUCTURE)


def _relevance(run_dir: Path, ep, refresh: bool, grade_map: str, **kw) -> None:
    """`harness judge RUN --relevance`: label the holes, score again (with the qrels the run was scored
    with), say what to run next; exit 3 when most calls failed or the step stopped."""
    from harness.roles.relevance import parse_grade_map
    from harness.steps.relevance import relevance_command

    try:
        gmap = parse_grade_map(grade_map)
    except ValueError as e:
        fail(str(e))
    summary = relevance_command(run_dir, ep, refresh=refresh, grade_map=gmap, **kw)
    console.print(summary.line(), highlight=False, markup=False)
    if summary.model is not None:
        from harness.metrics.qrels import agreement, agreement_table

        said = agreement(agreement_table(RunFolder(run_dir)))
        console.print(f"relevance: {said.line() if said else 'agreement with people: no labelled pair was graded'}",
                      highlight=False, markup=False)
    if RunFolder(run_dir).parts():
        _metrics(run_dir, quiet=True, steps=False)
    if summary.model is not None:
        say(f"score with them: harness metrics {run_dir} --qrels human+llm")
    if summary.stopped:
        err.print(f"[red]infrastructure:[/red] stopped: {escape(summary.stopped)}; the pairs neither asked nor "
                  f"graded before are marked in {escape(str(summary.path))}; exit 3", highlight=False)
        raise typer.Exit(Exit.INFRASTRUCTURE)
    if summary.mostly_failed:
        err.print(f"[red]infrastructure:[/red] most relevance calls failed (see the status column of "
                  f"{escape(str(summary.path))}); exit 3", highlight=False)
        raise typer.Exit(Exit.INFRASTRUCTURE)


@app.command()
def metrics(run_dir: Path, metric: list[str] = typer.Option([], "--metric", "-m", help="metrics to print; a ranking "
                                                         "measure the run's settings do not compute (map, bpref, P_10) "
                                                         "is computed as well"),
            qrels: Optional[str] = typer.Option(None, "--qrels", help="human (people's labels) | human+llm (and an "
                                                "LLM's for the holes: harness judge --relevance); default: what the "
                                                "run was scored with, else human"),
            workers: Optional[int] = typer.Option(None, "--workers", min=1, help="processes that score the run's "
                                                  "session groups (default: one per core this process may use; docs/scaling.md)")):
    """Score a run folder from its traces and labels alone; write its metrics and tables into it; print them. An
    unfinished run is scored all the same and its tables are marked partial."""

    if not RunFolder(run_dir).is_run():
        fail(f"{run_dir}: not a run folder")
    _metrics(run_dir, metric or None, qrels=qrels, workers=workers)


@app.command()
def serve(script: Path, port: Optional[int] = typer.Option(None, "--port", help="the port (else the script's; 0: any)")):
    """Serve a scripted OpenAI-compatible endpoint on 127.0.0.1 from SCRIPT.yaml (rules matching the role and the
    content of its prompt to replies, latency, faults; docs/gate.md) until interrupted. Prints its base URL first."""
    import signal
    import threading

    from harness.testing.script import ScriptError, serve as start

    try:
        srv = start(script, port)
    except (ScriptError, OSError) as e:
        fail(str(e))
    print(srv.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
