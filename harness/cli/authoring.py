"""Commands that write or vary a run config: init (a commented config for an eval set) and sweep
(a config's arms over a grid of parameter values, replayed into one run folder)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

import typer

from harness.cli import app, fail, say


@app.command()
def init(eval_set: Optional[Path] = typer.Option(None, "--eval-set", help="the eval-set folder the config replays "
                                                 "(default: eval_sets/b2b-shop, the bundled demo set)"),
         out: Path = typer.Option(Path("run.yaml"), "--out", "-o", help="the config file to write; its name "
                                  "(without .yaml) is the run's name"),
         llm: Optional[str] = typer.Option(None, "--llm", help="an OpenAI-compatible base URL for the rewrite role "
                                           "(with --model; default: none, every role offline)"),
         model: Optional[str] = typer.Option(None, "--model", help="with --llm: the model's name"),
         force: bool = typer.Option(False, "--force", help="replace the file when it exists")):
    """Write a commented run config for an eval set that `harness run` replays as written: the offline arms
    original, concat and rewrite on the embedded defaults, every key explained, the arms the harness has listed;
    the eval set's path written from the config's folder. Never replaces a file unless --force."""
    import yaml

    from harness.config import parse_config
    from harness.evalset.folder import CORPUS, INFO, is_eval_set
    from harness.evalset.load import load_eval_set
    from harness.run.template import DEMO_EVAL_SET, config_text

    path = eval_set if eval_set is not None else Path(DEMO_EVAL_SET)
    given = f"--eval-set {path}" if eval_set is not None else f"{path} (the bundled demo set, without --eval-set)"
    if not path.is_dir():
        fail(f"{given}: not a folder")
    if not is_eval_set(path):
        fail(f"{given}: not an eval-set folder (it holds neither {INFO} nor {CORPUS}); "
             "harness import writes one from public data or logs")
    if (llm is None) != (model is None):
        fail("--llm URL and --model NAME go together: the endpoint the rewrite role calls and its model")
    if out.is_dir():
        fail(f"-o {out}: a folder; give the config file to write (-o {out / 'run.yaml'})")
    if out.exists() and not force:
        fail(f"{out} exists: harness init does not replace a file (--force replaces it)")
    es = load_eval_set(path)  # every problem of the set, exit 2
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", out.stem).lstrip("_.-") or es.name
    here, there = out.resolve().parent, path.resolve()  # the set from the config's folder; from / when only / is shared
    written = os.path.relpath(there, here) if os.path.commonpath([here, there]) != os.sep else str(there)
    text = config_text(name, written, es, llm, model)
    parse_config(yaml.safe_load(text), out, text, source_dir=str(out.resolve().parent))  # what it writes validates
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    say(f"init: {out} ({es.name}, {'the rewrite role on ' + llm if llm else 'offline'}); run it: harness run {out}")


@app.command()
def sweep(config: Path = typer.Argument(..., help="run config (YAML)"),
          grids: list[str] = typer.Option(..., "--grid", help="arms.ARM.PARAMETER=V1,V2,…: one arm per value, the "
                                          "arm by label or name, checked as the config's keys are (several on one "
                                          "arm: every combination)"),
          sets: list[str] = typer.Option([], "--set", help="KEY=VALUE over the config, as harness run --set"),
          run_id: Optional[str] = typer.Option(None, help="name of the run folder (default: NAME-TIME-RANDOM)"),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress; the results and last line print"),
          repeats: Optional[int] = typer.Option(None, min=1, help="replay every arm N times with seeds seed..seed+N-1"),
          workers: Optional[int] = typer.Option(None, "--workers", min=1, help="processes (as harness run --workers)"),
          metrics: bool = typer.Option(True, help="score the run when it ends")):
    """Replay a config with arms' parameters over a grid into one run folder, one arm per grid point, as a grid
    written in the config (`top_k: [1, 3, 5]`, `make sweep`) is; the manifest records the config with the grid.
    Compare the points: harness compare RUN --reference LABEL."""
    from harness.cli.run import replay_command

    replay_command(config, None, run_id, quiet, repeats, None, workers, metrics, None, None, None, list(sets),
                   list(grids))
