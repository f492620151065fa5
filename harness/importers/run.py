"""`harness import run`: a TREC run file becomes a run folder whose only arm is named after the
file, so an external system can be scored, compared and gated like any arm. Query ids are the
session id of a single-turn set, or `SESSION::TURN_INDEX`."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from harness.arms.base import ArmResult, TurnContext
from harness.evalset.load import iter_labelled, load_eval_set
from harness.manifest import git_state, now, versions, write_manifest
from harness.metrics.ir import DEFAULT_SETTINGS
from harness.replay import labels_table, new_run_id, result_rows
from harness.trec_eval import ranked, read_trec_run
from harness.traces import PartWriter


class _External:
    def __init__(self, name: str):
        self.name = "external"
        self.arm_id = name
        self.params = type("P", (), {"model_dump": staticmethod(lambda: {"file": name})})()

    def backends(self):
        return {}


def import_run(run_file: Path, eval_set: Path, runs_dir: Path = Path("runs"), run_id: str | None = None) -> Path:
    es = load_eval_set(eval_set)
    run = read_trec_run(run_file)
    name = Path(run_file).stem
    run_dir = Path(runs_dir) / (run_id or new_run_id(f"import-{name}"))
    if run_dir.exists():
        raise FileExistsError(f"{run_dir} exists")
    run_dir.mkdir(parents=True)
    arm = _External(name)
    manifest = {"run_id": run_dir.name, "status": "running", "config": {"imported_from": str(run_file)},
                "config_hash": None, "eval_set": {"name": es.info.name, "version": es.info.version, "hash": es.content_hash,
                                                  "path": str(eval_set), "splits": sorted(set(es.split_of.values())),
                                                  "pooled_corpus": es.info.pooled_corpus},
                "git": git_state(), "versions": versions(), "embedder": None,
                "arms": [{"arm_id": name, "arm": "external", "params": {"file": name}, "backends": {}}],
                "filter_schema": [f.model_dump() for f in es.info.filters], "prompt_hashes": {}, "seed": 0,
                "repeats": 1, "metrics": DEFAULT_SETTINGS, "started": now()}
    write_manifest(run_dir, manifest)
    pq.write_table(labels_table(es, None), run_dir / "labels.parquet")
    writer = PartWriter(run_dir)
    single = all(sum(1 for t in s.turns if t.labels) == 1 for s in es.sessions)
    missing = 0
    for s, pos, tix, t in iter_labelled(es):
        qid = s.session_id if single and s.session_id in run else f"{s.session_id}::{tix}"
        scores = run.get(qid)
        missing += scores is None
        ranking = ranked(scores or {})
        ctx = TurnContext(s, pos, tix, t, [], [], None, es.info)
        res = ArmResult(issued_queries=[], lanes=["external"], applied_filters=[],
                        candidates=[{"doc_id": d, "score": float(scores[d]), "rank": i + 1, "lane": "external"}
                                    for i, d in enumerate(ranking)], ranking=ranking)
        writer.add(result_rows(run_dir.name, arm, 0, ctx, [res]))
    writer.flush()
    write_manifest(run_dir, {**manifest, "status": "complete", "ended": now(),
                             "counts": {"turns": sum(1 for _ in iter_labelled(es)), "queries_missing_from_run": missing}})
    return run_dir
