"""Export for other tools: an arm of a run folder as a TREC run file, an eval set's labels as TREC
qrels; `harness trec-eval` (and trec_eval, ranx) read both. Query ids as `harness import run`
reads them (harness/importers/trec.py: query_ids)."""
from __future__ import annotations

from pathlib import Path

from harness.errors import BadInput
from harness.analysis.pairing import PairingError, find_arm
from harness.importers.trec import query_ids, write_trec_qrels, write_trec_run
from harness.store.folder import RunData
from harness.store.traces import read_traces


class ExportError(BadInput, ValueError):
    """Bad input (exit 2)."""


def export_trec(run_dir: Path, arm: str, out: Path, repeat: int = 0) -> tuple[int, int]:
    """The final ranking of every turn `arm` (a label or id) measured, repeat `repeat`; turns where
    it was n/a or ended in an error are left out. Returns (queries written, turns left out)."""
    from harness.evalset.load import load_eval_set

    run = RunData.load(run_dir, scored=False)
    try:
        a = find_arm(run.arms, arm, run.name)
    except PairingError as e:
        raise ExportError(f"--arm: {e}") from None
    es_path = run.folder.eval_set_path(run.manifest)
    if es_path is None:
        raise ExportError(f"{run.name}: its eval set is not found (the manifest names {run.manifest.eval_set.path})")
    qid = {(s.session_id, tix): q for q, s, _, tix, _ in query_ids(load_eval_set(es_path))}
    t = read_traces(run.path, ["arm_id", "repeat", "session_id", "turn_index", "is_final", "ranking", "not_applicable",
                               "error"]).to_pylist()
    rows = [r for r in t if r["arm_id"] == a.arm_id and r["repeat"] == repeat and r["is_final"]]
    if not rows:
        raise ExportError(f"{run.name}: {a.label} has no row of repeat {repeat}")
    kept = [r for r in rows if not r["not_applicable"] and not r["error"]]
    n = write_trec_run(out, [(qid[(r["session_id"], r["turn_index"])], list(r["ranking"] or [])) for r in kept],
                       a.label.replace(" ", "_"))
    return n, len(rows) - len(kept)


def export_qrels(eval_set: Path, out: Path) -> int:
    from harness.evalset.load import load_eval_set

    return write_trec_qrels(out, load_eval_set(eval_set))
