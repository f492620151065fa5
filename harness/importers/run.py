"""`harness import run`: a TREC run file becomes a run folder whose only arm is named after the
file, so an external system can be scored, compared and gated like any arm. Query ids are the
session id of a single-turn set, or `SESSION::TURN_INDEX`."""
from __future__ import annotations

from pathlib import Path


from harness.arms.base import ArmResult, TurnContext
from harness.evalset.load import iter_labelled, load_eval_set
from harness.store.folder import RunFolder, RunFolderExists
from harness.store.manifest import for_import, now, write_manifest
from harness.defaults import metric_settings
from harness.run.replay import labels_table, new_run_id, result_rows
from harness.store.armset import EXTERNAL
from harness.importers.trec import RunFileError, query_ids, ranked, read_trec_run
from harness.store.traces import PartWriter


class _External:
    def __init__(self, name: str):
        self.name = "external"
        self.arm_id = name
        self.params = type("P", (), {"model_dump": staticmethod(lambda: {"file": name})})()
        self.backends: dict = {}  # an arm's field since arms are frozen (harness/arms/base.py)


def check_ids(run: dict, qids: list[tuple], run_file: Path) -> list[str]:
    """A run file whose query ids name no labelled turn is bad input, naming the expected form;
    the ids that name none in a file that otherwise matches are returned (a warning)."""
    known = {q for q, *_ in qids} | {f"{s.session_id}::{tix}" for _, s, _, tix, _ in qids}
    unknown = [q for q in run if q not in known]
    example = qids[0][0] if qids else "SESSION::TURN"
    form = "SESSION_ID" if "::" not in example else "SESSION_ID::TURN_INDEX"
    if run and len(unknown) == len(run):
        raise RunFileError(f"{run_file}: none of its {len(run)} query ids names a labelled turn of the eval set "
                           f"(e.g. {unknown[0]!r}); expected {form}, e.g. {example!r}")
    if unknown:
        return [f"{len(unknown)} of {len(run)} query ids of {run_file} name no labelled turn and are ignored (e.g. "
                f"{unknown[0]!r}; expected {form}, e.g. {example!r})"]
    return []


def import_run(run_file: Path, eval_set: Path, runs_dir: Path = Path("runs"), run_id: str | None = None) -> Path:
    es = load_eval_set(eval_set)
    run = read_trec_run(run_file)
    qids = query_ids(es)
    warnings = check_ids(run, qids, run_file)
    name = Path(run_file).stem
    run_dir = Path(runs_dir) / (run_id or new_run_id(f"import-{name}"))
    if run_dir.exists():
        raise RunFolderExists(f"{run_dir} exists")
    run_dir.mkdir(parents=True)
    arm = _External(name)
    manifest = for_import(run_dir.name, run_file, es, eval_set,
                          {"arm_id": name, "arm": "external", "label": name, "params": {"file": name}, "backends": {},
                           "capabilities": sorted(map(str, EXTERNAL))}, metric_settings(None))
    write_manifest(run_dir, manifest)
    RunFolder(run_dir).write_labels(labels_table(es, None))
    writer = PartWriter(run_dir)
    missing = 0
    for qid, s, pos, tix, t in qids:
        scores = run.get(qid) if qid in run else run.get(f"{s.session_id}::{tix}")
        missing += scores is None
        ranking = ranked(scores or {})
        ctx = TurnContext(s, pos, tix, t, [], [], None, es.info)
        res = ArmResult(lanes=["external"], candidates=[{"doc_id": d, "score": float(scores[d]), "rank": i + 1, "lane": "external"}
                                    for i, d in enumerate(ranking)], ranking=ranking)
        writer.add(result_rows(run_dir.name, arm, 0, ctx, [res]))
    writer.flush()
    write_manifest(run_dir, manifest.model_copy(update={
        "status": "complete", "ended": now(), "warnings": warnings,
        "counts": {"turns": sum(1 for _ in iter_labelled(es)), "queries_missing_from_run": missing}}))
    return run_dir
