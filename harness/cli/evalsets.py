"""Commands of the eval-set stage: validate, and import public data, logs, runs and ratings."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli import _App, console, err, fail, import_app, eval_set_app
from harness.importers.registry import catalog


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


@import_app.command("run")
def import_run_cmd(run_file: Path, eval_set: Path = typer.Option(..., "--eval-set", help="the eval set the run answers"),
                   run_id: Optional[str] = typer.Option(None), runs_dir: Path = typer.Option(Path("runs"))):
    """Turn a TREC run file into a run folder whose arm is named after the file."""
    from harness.importers.run import import_run

    if not run_file.exists():
        fail(f"{run_file}: no such file")
    out = import_run(run_file, eval_set, runs_dir, run_id)
    from harness.store.manifest import read_manifest

    man = read_manifest(out)
    counts = man.counts
    for w in man.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False)
    if counts.get("queries_missing_from_run"):
        err.print(f"[yellow]warning:[/yellow] {counts['queries_missing_from_run']} of {counts['turns']} labelled turns are "
                  "missing from the run file: each is scored as an empty ranking (0), as trec_eval -c does",
                  highlight=False)
    console.print(f"run folder: {out}", highlight=False)
    from harness.cli.run import _metrics

    _metrics(out)


@import_app.command("ratings")
def import_ratings_cmd(run_dir: Path, ratings: Path):
    """Bring people's ratings (the sample CSV, filled in) back as human judgments of a run."""
    from harness.analysis.review import import_ratings, judge_agreement

    if not ratings.exists():
        fail(f"{ratings}: no such file")
    out = import_ratings(run_dir, ratings)
    console.print(f"human judgments: {out}; judge agreement: {judge_agreement(run_dir)}", highlight=False)


def _eval_set_importer(command):
    """An importer's command, then the validation of the eval set it wrote."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        eval_set_validate(command(*args, **kwargs))
    return run


def importers() -> typer.Typer:
    """Every importer of harness/importers (one file and its @importer each) as a command, which the
    `import` group adds to its own when they are first asked for (harness.cli._ImportGroup)."""
    group = _App()
    for name, command in catalog().items():
        group.command(name)(_eval_set_importer(command))
    return group
