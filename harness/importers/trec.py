"""TREC importer: <DOC><DOCNO> documents, <top><num><title> topics, and qrels
(`qid iter docno grade`). Each topic becomes a session of one labelled turn. Also TREC run files
(`qid Q0 docno rank score tag`), for `harness import run` and `harness trec-eval`."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import typer

from harness.errors import BadInput
from harness.corpus.fusion import order
from harness.importers.common import write_eval_set
from harness.importers.registry import importer

_DOC = re.compile(r"<DOC>(.*?)</DOC>", re.S)
_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S)
_TOP = re.compile(r"<top>(.*?)</top>", re.S)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(.*?)\s*(?:</num>|\n)", re.S)
_TITLE = re.compile(r"<title>\s*(.*?)\s*(?:</title>|<desc>|</top>|$)", re.S)


def read_trec_docs(path: Path):
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for block in _DOC.findall(text):
        m = _DOCNO.search(block)
        if not m:
            continue
        body = _DOCNO.sub("", block)
        body = re.sub(r"</?TEXT>", "", body)
        yield m.group(1), " ".join(body.split())


def read_trec_topics(path: Path) -> dict[str, str]:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    out = {}
    for block in _TOP.findall(text):
        num, title = _NUM.search(block), _TITLE.search(block)
        if num and title:
            out[num.group(1).strip()] = " ".join(title.group(1).split())
    return out


class RunFileError(BadInput, ValueError):
    pass


def read_columns(path: Path, layout: str, error: type[ValueError] = RunFileError):
    """(line number, fields) of each line of a whitespace-separated TREC file (qrels, runs)
    whose fields are named by `layout`; blank lines are skipped, any other field count raises
    `error` naming the file and line."""
    n = len(layout.split())
    for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != n:
            raise error(f"{path}:{no}: expected '{layout}', got {len(parts)} fields: {line!r}")
        yield no, parts


def read_trec_qrels(path: Path) -> dict[str, dict[str, int]]:
    q: dict[str, dict[str, int]] = {}
    for no, (qid, _, doc, grade) in read_columns(path, "qid iter docno grade"):
        try:
            q.setdefault(qid, {})[doc] = int(grade)
        except ValueError:
            raise RunFileError(f"{path}:{no}: grade {grade!r} is not an integer") from None
    return q


def import_trec(docs_path: Path, topics_path: Path, qrels_path: Path, out: Path, name: str,
                licence: str, source: str, notices=(), lowercase_topics: bool = True) -> Path:
    docs = [{"doc_id": d, "text": t} for d, t in read_trec_docs(docs_path) if t]
    known = {d["doc_id"] for d in docs}
    topics = read_trec_topics(topics_path)
    qrels = read_trec_qrels(qrels_path)
    sessions = []
    for qid, title in topics.items():
        rel = {d: g for d, g in qrels.get(qid, {}).items() if d in known}
        q = title.lower() if lowercase_topics else title
        sessions.append({"session_id": qid, "turns": [{"user": q, "labels": {
            "qrels": rel, "qrels_measured": qid in qrels, "language": "en", "query_type": "topic",
            "reference_rewrite": q}}]})
    info = {"name": name, "version": "1.0", "description": f"{name}: TREC collection converted by `harness import trec`",
            "languages": ["en"], "source": source, "licence": licence, "written_here": False,
            "pooled_corpus": False, "filters": []}
    return write_eval_set(out, info, docs, sessions, notices=notices)


def read_trec_run(path: Path) -> dict[str, dict[str, float]]:
    """qid Q0 docno rank score tag -> {qid: {docno: score}}; bad lines name file and line."""
    run: dict[str, dict[str, float]] = defaultdict(dict)
    for no, (qid, _, doc, _, score, _) in read_columns(path, "qid Q0 docno rank score tag", RunFileError):
        try:
            run[qid][doc] = float(score)
        except ValueError:
            raise RunFileError(f"{path}:{no}: score {score!r} is not a number") from None
    return dict(run)


def ranked(scores: dict[str, float]) -> list[str]:
    return [d for d, _ in order(scores)]


def query_ids(es) -> list[tuple]:
    """(query id, session, position, turn index, turn) of every labelled turn: the session id in a
    single-turn set, else SESSION::TURN_INDEX (what `import run` reads and `export` writes)."""
    from harness.evalset.load import iter_labelled

    single = all(sum(1 for t in s.turns if t.labels) == 1 for s in es.sessions)
    return [(s.session_id if single else f"{s.session_id}::{tix}", s, pos, tix, t) for s, pos, tix, t in iter_labelled(es)]


def write_trec_run(path: Path, rankings: list[tuple[str, list[str]]], tag: str) -> int:
    """`qid Q0 docno rank score tag` lines, score = -rank (distinct, so no tie can reorder a
    ranking); returns the number of queries written."""
    with open(path, "w", encoding="utf-8") as f:
        for qid, ranking in rankings:
            for i, d in enumerate(ranking, start=1):
                f.write(f"{qid} Q0 {d} {i} {-i} {tag}\n")
    return len(rankings)


def write_trec_qrels(path: Path, es) -> int:
    """`qid 0 docno grade` lines of every labelled turn with relevance labels; returns the number
    of queries written."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for qid, _, _, _, t in query_ids(es):
            if not t.labels.qrels_measured:
                continue
            n += 1
            for d, g in sorted(t.labels.qrels.items()):
                f.write(f"{qid} 0 {d} {int(g)}\n")
    return n


@importer("trec")
def command(docs: Path = typer.Option(..., help="TREC documents (<DOC><DOCNO>)"),
            topics: Path = typer.Option(..., help="TREC topics (<top><num><title>)"),
            qrels: Path = typer.Option(..., help="qrels: qid iter docno grade"),
            out: Path = typer.Option(..., "--out", "-o"),
            name: str = typer.Option(...), licence: str = typer.Option("see NOTICE"),
            source: str = typer.Option("TREC collection"),
            notice: list[Path] = typer.Option([], help="licence/notice files to keep beside the set")) -> Path:
    """Convert a TREC collection (documents, topics, qrels) into an eval set."""
    for p in (docs, topics, qrels, *notice):
        if not p.exists():
            raise BadInput(f"{p}: no such file")
    return import_trec(docs, topics, qrels, out, name=name, licence=licence, source=source, notices=notice)
