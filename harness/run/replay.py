"""Replay: runs arms x repeats x sessions x labelled turns concurrently, streams trace rows to
Parquet parts, writes the labels and the manifest, and resumes an interrupted run."""
from __future__ import annotations

import asyncio
import functools
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from harness.arms.catalog import BaseArm, build_arms
from harness.arms.base import ArmResult, TurnContext
from harness.config import RunConfig, canonical_hash
from harness.llm.ledger import StopRun
from harness.store.shard import in_shard
from harness.evalset.load import EvalSet, iter_labelled, load_eval_set
from harness.corpus.memo import Memo
from harness.store.folder import RunFolder, RunFolderExists
from harness.store.manifest import (for_replay, git_state, machine, now, read_manifest, run_id_of, versions,
                                   write_manifest)
from harness.run.progress import Display
from harness.store.traces import PartWriter, TurnKey, read_traces, repair_parts, row, to_json
from harness.threads import CpuThreads

LABEL_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("turn_index", pa.int32()), ("split", pa.string()), ("domain", pa.string()),
    ("query_type", pa.string()), ("language", pa.string()), ("answerability", pa.string()),
    ("multi_turn_type", pa.string()), ("qrels", pa.string()), ("qrels_measured", pa.bool_()),
    ("identifiers", pa.list_(pa.string())), ("expected_filters", pa.string()),
    ("reference_rewrite", pa.string()), ("reference_answer", pa.string()), ("surface_doc", pa.string()),
    ("user", pa.string()), ("segments", pa.string()),
])


# Turns in progress per request slot: a turn spends CPU before and after its requests, so with
# twice as many turns as slots the next request is ready when a slot frees (a worker of a parallel
# run keeps as many as one process: harness.run.shard_worker.worker_replay).
TURNS_PER_REQUEST = 2


LABEL_BATCH = 50_000  # label rows converted to Arrow at a time (a month of turns would not fit as dicts)


def labels_batches(es: EvalSet, splits) -> Iterator[pa.RecordBatch]:
    """The labels snapshot of the eval set's labelled turns (`splits`), LABEL_BATCH rows at a time."""
    rows, sent = [], False
    for s, _, tix, t in iter_labelled(es, splits):
        lab = t.labels
        rows.append({
            "session_id": s.session_id, "turn_index": tix, "split": es.split_of[s.session_id],
            "domain": s.domain, "query_type": lab.query_type, "language": lab.language,
            "answerability": lab.answerability, "multi_turn_type": lab.multi_turn_type,
            "qrels": to_json(lab.qrels), "qrels_measured": lab.qrels_measured,
            "identifiers": lab.identifiers, "expected_filters": to_json([f.model_dump() for f in lab.expected_filters]),
            "reference_rewrite": lab.reference_rewrite, "reference_answer": lab.reference_answer,
            "surface_doc": lab.surface_doc, "user": t.user, "segments": to_json(lab.segments),
        })
        if len(rows) == LABEL_BATCH:
            yield pa.RecordBatch.from_pylist(rows, schema=LABEL_SCHEMA)
            rows, sent = [], True
    if rows or not sent:  # an empty snapshot is a file too
        yield pa.RecordBatch.from_pylist(rows, schema=LABEL_SCHEMA)


def labels_table(es: EvalSet, splits) -> pa.Table:
    return pa.Table.from_batches(list(labels_batches(es, splits)), schema=LABEL_SCHEMA)


def entitlement_filters(info, account) -> list[dict]:
    """Entitlement filters come from the account, never from a model."""
    out = []
    for f in info.filters:
        if f.kind == "entitlement" and f.account_key:
            v = getattr(account, f.account_key, None)
            if v is not None:
                out.append({"field": f.field, "op": "eq", "value": v})
    return out


def new_run_id(name: str) -> str:
    return f"{name}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass
class Job:
    arm: BaseArm
    repeat: int
    ctx: TurnContext


def arm_identity(arm: BaseArm) -> tuple[str, str, dict, dict]:
    """What every trace row of an arm repeats: its id, name, parameters and backends, as the dicts
    a row holds. A run takes it once per arm (a row serialises each dict once: run.traces)."""
    return arm.arm_id, arm.name, arm.params.model_dump(), dict(arm.backends)


def result_rows(run_id: str, arm: BaseArm, repeat: int, ctx: TurnContext, results: list[ArmResult],
                identity: tuple[str, str, dict, dict] | None = None) -> list[dict]:
    """The trace rows of one turn: the replay's key of each round and the arm's report of it.
    `identity`: the arm's `arm_identity`, when the caller has it already."""
    lab = ctx.turn.labels
    arm_id, name, params, backend = identity or arm_identity(arm)
    return [row(TurnKey(run_id=run_id, arm_id=arm_id, arm=name, params=params, repeat=repeat,
                        session_id=ctx.session.session_id, turn_index=ctx.turn_index, query_type=lab.query_type,
                        language=lab.language, domain=ctx.session.domain, round=rnd, is_final=rnd == len(results),
                        original_query=ctx.turn.user, backend=backend), r)
            for rnd, r in enumerate(results, start=1)]


class Replay:
    def __init__(self, cfg: RunConfig, raw_cfg: dict, run_dir: Path | None = None, progress: bool | Display = True,
                 resume: bool = False, shard: tuple[int, int] | None = None, es: EvalSet | None = None):
        """`es`: the config's eval set when the caller has loaded it already (else loaded here)."""
        self.cfg, self.raw = cfg, raw_cfg
        from harness.roles.base import Roles

        self.es = es if es is not None else load_eval_set(cfg.eval_set)
        self.roles = Roles(cfg.llm, cfg.concurrency, threads=CpuThreads(), base_dir=cfg.source_dir)
        self.arms = build_arms(cfg.configured_arms(), self.roles)
        self._identity = {id(a): arm_identity(a) for a in self.arms}  # what each arm's rows repeat
        # what it shows while it works (harness.run.progress): True a bar, False nothing, or a display
        self.display = progress if isinstance(progress, Display) else Display("bar" if progress else "off")
        if run_dir is None:
            run_dir = Path(cfg.runs_dir) / new_run_id(cfg.name)
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.shard = shard  # (i, n): only the sessions with shard_of(session_id, n) == i
        self.run_id = run_id_of(self.run_dir, resume)
        self.lanes = TURNS_PER_REQUEST * cfg.concurrency  # turns in progress at once

    def _arm_identity(self, arm: BaseArm) -> tuple[str, str, dict, dict]:
        return self._identity.get(id(arm)) or arm_identity(arm)

    def _progress_display(self, total: int):
        """What counts the `total` turns of this replay as they end: its display (a worker of a
        parallel run reports to its parent instead: harness.run.shard_worker)."""
        self.display.total(total)
        return self.display

    def _manifest(self, status: str, index=None, counts=None, started=None):
        return for_replay(self, status, index, counts, started)

    @property
    def config_hash(self) -> str:
        return canonical_hash(self.raw)

    @functools.cached_property
    def environment(self) -> tuple[dict, dict, dict]:
        """The git state, package versions and the machine with its load at the start, asked once per
        run (both manifests record them)."""
        return git_state(), versions(), machine()  # noqa: the manifest's (harness.store.manifest.for_replay)

    def _mine(self, session_id: str) -> bool:
        return in_shard(session_id, self.shard)

    def planned(self) -> int:
        """How many jobs `jobs` yields (counted at the eval set's load, nothing read)."""
        return self.es.labelled_turns(self.cfg.splits, self._mine) * self.cfg.repeats * len(self.arms)

    def jobs(self, index) -> Iterator[Job]:
        """Turn-major: a turn's arms and repeats next to each other, so they run at about the same
        time and share what they search alike (the run's memo, harness/corpus/memo.py). Made as the
        replay takes them: a job holds its turn's context, and a month of turns would not fit."""
        for s, pos, tix, t in iter_labelled(self.es, self.cfg.splits, self._mine):
            account = t.state.account or s.account
            entitled = entitlement_filters(self.es.info, account)
            for rep in range(self.cfg.repeats):
                for arm in self.arms:
                    ctx = TurnContext(session=s, position=pos, turn_index=tix, turn=t,
                                      entitlement_filters=list(entitled),
                                      inherited_filters=[f.model_dump() for f in t.state.filters],
                                      index=index, info=self.es.info, repeat=rep, seed=self.cfg.seed + rep,
                                      roles=arm.roles or self.roles, threads=self.roles.threads)
                    yield Job(arm, rep, ctx)

    def run(self, index=None) -> Path:
        from harness.corpus.index import build_index

        started = now()
        if not self.resume and self.run_dir.exists():
            raise RunFolderExists(f"{self.run_dir} exists; use --resume or another run id")
        t0 = time.perf_counter()
        if index is None:  # first: a bad `index:` leaves no folder behind
            self.display.step(f"index: {self.es.name}, {len(self.es.docs)} documents, embedder "
                              f"{self.cfg.index.embedder.get('kind')}")
            index = build_index(self.es, self.cfg.index)
        if self.resume:
            old = read_manifest(self.run_dir)
            started = old.started or started
            repaired = repair_parts(self.run_dir)  # a part in flight or truncated when the run was killed
            what = {"removed_tmp": "removed part(s) in flight when the run stopped",
                    "quarantined": "moved unreadable part(s) aside as *.corrupt"}
            for kind, names in repaired.items():
                if names:
                    print(f"warning: {self.run_dir}/traces: {what[kind]}: {', '.join(names)}; their turns are replayed",
                          file=sys.stderr)
            done = _done_keys(self.run_dir)
        else:
            self.run_dir.mkdir(parents=True)
            done, repaired = set(), {}
        write_manifest(self.run_dir, self._manifest("running", index=index, started=started))
        self.display.step(f"run folder: {self.run_dir}")
        self._write_labels()
        jobs = (j for j in self.jobs(index) if (self._arm_identity(j.arm)[0], j.repeat, j.ctx.session.session_id,
                                                j.ctx.turn_index) not in done)
        writer = PartWriter(self.run_dir, self.cfg.rows_per_part)
        index.memo = Memo()  # the arms of a turn share its searches and offline rewrites (this run only)
        try:
            counts = asyncio.run(self._run_jobs(jobs, self.planned() - len(done), writer))
            writer.flush()  # the last part complete: a trace write that failed fails the run
        except BaseException as e:  # the folder says why it stopped; --resume continues it
            write_manifest(self.run_dir, self._manifest("failed", index=index, started=started).model_copy(
                update={"failure": f"{type(e).__name__}: {e}"}))
            raise
        finally:
            shared, done_work = index.memo.hits, index.memo.misses
            index.memo = None  # the run's searches are not kept past it
            writer.flush(raise_error=False)  # a stopped run keeps its finished turns' rows; its own error stands
            index.cache.flush()
        counts.update({"turns_skipped_resume": len(done), "seconds": round(time.perf_counter() - t0, 2),
                       "trace_parts_quarantined": len(repaired.get("quarantined", [])),
                       "trace_parts_tmp_removed": len(repaired.get("removed_tmp", [])),
                       "embeddings_cold": index.cache.misses, "embeddings_cached": index.cache.hits,
                       "work_shared": shared, "work_done": done_work})
        write_manifest(self.run_dir, self._manifest("complete", index=index, counts=counts, started=started))
        return self.run_dir

    def _write_labels(self) -> None:
        """The labels snapshot of the eval set (every split the config runs, whatever the shard)."""
        RunFolder(self.run_dir).write_labels(labels_batches(self.es, self.cfg.splits))

    async def _run_jobs(self, jobs: Iterator[Job], total: int, writer: PartWriter) -> dict:
        counts = {"turns": 0, "rows": 0, "errors": 0, "fallbacks": 0, "not_applicable": 0, "llm_calls": 0, "cache_hits": 0,
                  "turns_failed": 0}
        prog = self._progress_display(total)

        async def one(job: Job):
            try:
                results = await job.arm.run(job.ctx)
            except StopRun:  # not a failed call: the cache does not cover this run, or the spend cap
                raise
            except Exception as e:  # a run never dies because one turn failed: the row records it
                results = [ArmResult(error=f"{type(e).__name__}: {e}")]
            rows = result_rows(self.run_id, job.arm, job.repeat, job.ctx, results, self._arm_identity(job.arm))
            writer.add(rows)
            counts["turns"] += 1
            counts["rows"] += len(rows)
            counts["errors"] += sum(1 for r in results if r.error)
            counts["fallbacks"] += sum(1 for r in results if r.fallback_reason)
            counts["not_applicable"] += bool(results[-1].not_applicable)
            counts["llm_calls"] += sum(r.llm.calls for r in results)
            counts["cache_hits"] += sum(r.llm.cache_hits for r in results)
            # infrastructure: the turn errored or an LLM call of it failed (the exit code counts these)
            failed = any(r.error or r.llm.failed for r in results)
            counts["turns_failed"] += failed
            prog.advance(1, int(failed))

        # TURNS_PER_REQUEST * concurrency lanes, each taking the next job when its turn ends: the turns
        # start in the jobs' order, as many at once as before, without a task and a semaphore wait per turn
        queue = iter(jobs)

        async def lane():
            for job in queue:
                await one(job)

        try:
            with prog:
                await asyncio.gather(*(lane() for _ in range(min(self.lanes, total))))
        finally:
            counts["http_calls"] = self.roles.http_calls()
            counts.update(self.roles.failures)  # llm_failed.ROLE.KIND: failed LLM calls per role and kind
            if self.roles.spend is not None:
                counts["llm_spent_usd"] = round(self.roles.spend.spent, 6)
            await self.roles.aclose()
            if self.roles.threads is not None:
                self.roles.threads.close()
        return counts


def _done_keys(run_dir: Path) -> set:
    t = read_traces(run_dir, ["arm_id", "repeat", "session_id", "turn_index", "is_final"])
    d = t.to_pydict()
    return {(a, r, s, ti) for a, r, s, ti, f in zip(d["arm_id"], d["repeat"], d["session_id"], d["turn_index"], d["is_final"]) if f}


def resume_config(run_dir: Path) -> dict:
    return read_manifest(run_dir).config

