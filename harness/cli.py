"""The `harness` command. Thin: parse, call, print. User errors are one clean message and a
non-zero exit (2 for bad input), never a traceback."""
from __future__ import annotations

import os
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
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)


def fail(msg: str, code: int = 2):
    err.print(f"[red]error:[/red] {msg}", highlight=False, markup=True, soft_wrap=True)
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
def import_mtrag(src: Path = typer.Argument(Path("../shared/datasets/mtrag"), help="MTRAG folder"),
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


@app.command()
def run(config: Optional[Path] = typer.Argument(None, help="run config (YAML)"),
        resume: Optional[Path] = typer.Option(None, help="continue an interrupted run folder"),
        run_id: Optional[str] = typer.Option(None, help="name of the run folder (default: NAME-TIME-RANDOM)"),
        no_progress: bool = typer.Option(False, help="no progress bar"),
        repeats: Optional[int] = typer.Option(None, min=1, help="replay every arm N times with seeds seed..seed+N-1"),
        metrics: bool = typer.Option(True, help="score the run when it ends")):
    """Replay every (arm, session, labelled turn) of a config; write a run folder under runs/."""
    from harness.config import ConfigError, load_config, parse_config
    from harness.evalset.load import EvalSetError
    from harness.replay import Replay, resume_config

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
        rp = Replay(cfg, raw, run_dir=run_dir, progress=not no_progress and sys.stderr.isatty(), resume=bool(resume))
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


def _metrics(run_dir: Path, metric_names: list[str] | None = None):
    from harness.manifest import read_manifest
    from harness.metrics.compute import compute_metrics, write_metrics
    from harness.report.table import rich_table

    res = compute_metrics(run_dir)
    path = write_metrics(run_dir, res)
    man = read_manifest(run_dir)
    es = man["eval_set"]
    names = metric_names or [m for m in res.metric_names if m.startswith(("recall@10", "ndcg@", "mrr@"))]
    for m in names:
        console.print(rich_table(res.aggregates, m, res.arms, f"{m} on {es['name']} by turn index ({run_dir.name})"))
    _loop_tables(run_dir, res, man)
    if es.get("pooled_corpus"):
        console.print("[yellow]note:[/yellow] pooled corpus: every document is relevant to some turn, so absolute "
                      "scores are inflated; compare arms, not leaderboard numbers.")
    na = res.aggregates[(res.aggregates["segment"] == "all") & (res.aggregates["n"] == 0)]["arm_id"].unique()
    for a in na:
        console.print(f"[yellow]note:[/yellow] {a} is n/a on every turn of this set", highlight=False)
    console.print(f"metrics: {path}", highlight=False)


def _loop_tables(run_dir: Path, res, man: dict):
    """Abstention by answerability and rounds per turn index, for arms that answer or loop."""
    from rich.table import Table

    from harness.metrics.compute import load_labels
    from harness.metrics.loop import abstention_table

    labels = load_labels(run_dir)
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
        rounds = rounds.assign(t=rounds["turn_index"].clip(upper=4).map(lambda x: "4+" if x >= 4 else str(x)),
                               r=rounds["value"].astype(int))
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
def metrics(run_dir: Path, metric: list[str] = typer.Option([], "--metric", "-m", help="metrics to print")):
    """Score a run folder from its traces and labels alone; write metrics.parquet; print tables."""
    if not (run_dir / "manifest.json").exists():
        fail(f"{run_dir}: not a run folder (no manifest.json)")
    _metrics(run_dir, metric or None)


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
