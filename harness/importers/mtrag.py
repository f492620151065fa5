"""MTRAG-UN importer: every task becomes one session; earlier user and agent turns are kept as
unlabelled history, the last user turn is labelled with turn_index = the task's `turn`."""
from __future__ import annotations

import csv
import hashlib
import json
from collections import defaultdict
from pathlib import Path

import typer

from harness.evalset.folder import SPLIT_FILES
from harness.errors import BadInput
from harness.importers.common import write_eval_set
from harness.importers.registry import importer


def _one(v):
    if isinstance(v, list):
        return v[0] if v else None
    return v


def read_qrels_tsv(paths) -> dict[str, dict[str, int]]:
    q: dict[str, dict[str, int]] = defaultdict(dict)
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                q[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return dict(q)


def convert(src: Path) -> tuple[list[dict], list[dict]]:
    src = Path(src)
    docs = []
    with open(src / "derived" / "pooled_corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append({"doc_id": d["_id"], "title": d.get("title") or "", "text": d["text"],
                         "metadata": {"domain": d.get("domain")}})
    qrels = read_qrels_tsv(sorted((src / "mtragun-human" / "retrieval_tasks" / "qrels").glob("*.tsv")))
    sessions = []
    with open(src / "mtragun-human" / "generation_tasks" / "reference.jsonl", encoding="utf-8") as f:
        for line in f:
            task = json.loads(line)
            sessions.append(_session(task, qrels.get(task["task_id"])))
    return docs, sessions


def _session(task: dict, qrels: dict[str, int] | None) -> dict:
    turns: list[dict] = []
    for msg in task["input"]:
        if msg["speaker"] == "user":
            turns.append({"user": msg["text"], "turn_index": len(turns) + 1})
        elif turns:
            turns[-1]["assistant"] = {"answer": msg["text"]}
    last = turns[-1]
    tix = int(task["turn"])
    if last["turn_index"] != tix:
        raise BadInput(f"task {task['task_id']}: {last['turn_index']} user turns but turn={tix}")
    targets = task.get("targets") or []
    labels = {
        "qrels": qrels or {},
        "qrels_measured": qrels is not None,
        "query_type": _one(task.get("Question Type")),
        "language": "en",
        "answerability": _one(task.get("answerability")),
        "multi_turn_type": _one(task.get("Multi-Turn")),
        "reference_answer": targets[0]["text"] if targets else None,
        "segments": {"collection": task.get("Collection") or "unknown"},
    }
    last["labels"] = {k: v for k, v in labels.items() if v is not None}
    return {"session_id": task["task_id"], "domain": task.get("Collection"), "turns": turns}


INFO = {
    "name": "mtrag-un",
    "version": "1.1",
    "description": "MTRAG-UN human multi-turn RAG tasks (507 tasks from 507 conversations); one session "
    "per task, earlier turns as history, the task's turn labelled. Corpus: the pooled passages that ship "
    "with the tasks (1,504), not the full upstream corpora.",
    "languages": ["en"],
    "source": "IBM/mt-rag-benchmark (MTRAG-UN human tasks), converted by `harness import mtrag`",
    "licence": "Apache-2.0 (see LICENSE and SOURCE.txt)",
    "written_here": False,
    "pooled_corpus": True,
    "notes": "No reference rewrites exist: the oracle arm is n/a on this set. Tasks without qrels are "
    "unmeasured for IR metrics (qrels_measured: false) and stay in for answer metrics. Split: 30% of the "
    f"conversations by the hash of their id are held out ({SPLIT_FILES['test']}); no offline rule or "
    "threshold is tuned on them.",
    "filters": [],
}


HELD_OUT_PERCENT = 30  # of the conversations, by hash: the held-out split, never tuned on


def held_out(session_id: str) -> bool:
    """Whether a task belongs to the held-out split: by the sha256 of its conversation id (the
    part before `<::>`), so every task of one conversation stays on one side and the split is
    the same on every machine and import."""
    conversation = session_id.split("<::>")[0]
    return int(hashlib.sha256(conversation.encode("utf-8")).hexdigest(), 16) % 100 < HELD_OUT_PERCENT


def import_mtrag(src: Path, out: Path) -> Path:
    docs, sessions = convert(src)
    notices = [p for p in (Path(src) / "LICENSE", Path(src) / "SOURCE.txt") if p.exists()]
    main = [s for s in sessions if not held_out(s["session_id"])]
    test = [s for s in sessions if held_out(s["session_id"])]
    return write_eval_set(out, INFO, docs, main, test_sessions=test, notices=notices)


@importer("mtrag")
def command(src: Path = typer.Argument(..., help="raw MTRAG folder (mtragun-human/, derived/)"),
            out: Path = typer.Option(Path("eval_sets/mtrag-un"), "--out", "-o")) -> Path:
    """Convert MTRAG-UN (human tasks, qrels, pooled corpus) into an eval set."""
    if not (src / "mtragun-human").is_dir():
        raise BadInput(f"{src}: not an MTRAG folder (no mtragun-human/)")
    return import_mtrag(src, out)
