import atexit
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HARNESS_HOME", str(ROOT))
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
# numba compiles ranx's kernels (the tests' reference; the harness runs no numba) without LLVM's
# optimisation passes: on inputs of a few queries they run as fast, and a fresh clone's first compile
# takes 66 s instead of 86 (tests/test_trec_measures.py and test_ir_metrics.py, measured). The
# values are the same: no fast-math at any level, and the tests compare ranx's to the last bit.
os.environ.setdefault("NUMBA_OPT", "0")
os.environ["RAGAS_DO_NOT_TRACK"] = "true"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Output without a terminal is 120 columns wide (the documented default); a COLUMNS the CI machine or a
# developer's shell exports must not rewrap what the tests read. Tests of COLUMNS set it themselves.
os.environ["COLUMNS"] = "120"
# New embeddings of the runs tests make go to a folder of this session: never to eval_sets/ (which
# runs only read) nor to the working folder's .cache/embeddings, whose warm vectors would hide a cold path.
EMBEDDINGS = Path(tempfile.mkdtemp(prefix="harness-test-embeddings-"))
os.environ["HARNESS_EMBEDDING_CACHE"] = str(EMBEDDINGS)
atexit.register(shutil.rmtree, EMBEDDINGS, True)


def write_set(root: Path, info: dict | None = None, docs: list | None = None, sessions: list | None = None,
              test_sessions: list | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    info = info if info is not None else {
        "name": "tiny", "version": "1", "languages": ["en"], "source": "test", "licence": "CC0",
        "filters": [{"field": "material", "type": "string", "kind": "preference"},
                    {"field": "assortment", "type": "string_list", "kind": "entitlement", "account_key": "assortment"}]}
    (root / "eval_set.yaml").write_text(yaml.safe_dump(info), encoding="utf-8")
    docs = docs if docs is not None else TINY_DOCS
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    sessions = sessions if sessions is not None else TINY_SESSIONS
    (root / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions), encoding="utf-8")
    if test_sessions:
        (root / "sessions.test.jsonl").write_text("".join(json.dumps(s) + "\n" for s in test_sessions), encoding="utf-8")
    return root


TINY_DOCS = [
    {"doc_id": "d1", "title": "Holiday", "text": "Employees get 30 days of holiday per calendar year. Leftover days must be taken by 31 March.",
     "metadata": {"material": "none", "assortment": ["A", "B"]}},
    {"doc_id": "d2", "title": "Travel", "text": "Rail travel is second class. Flights only above 600 km. Per diem is 28 EUR.",
     "metadata": {"material": "none", "assortment": ["A"]}},
    {"doc_id": "d3", "title": "Stainless bolt 4711-32", "text": "Hex bolt M8 x 40 stainless steel A2, part number 4711-32.",
     "metadata": {"material": "stainless", "assortment": ["A"]}},
    {"doc_id": "d4", "title": "Galvanised bolt 4711-33", "text": "Hex bolt M8 x 40 galvanised steel, part number 4711-33.",
     "metadata": {"material": "galvanised", "assortment": ["B"]}},
]

TINY_SESSIONS = [
    {"session_id": "s1", "domain": "hr", "turns": [
        {"user": "How many holiday days do I get?", "assistant": {"answer": "30 days.", "shown": [{"doc_id": "d1", "name": "Holiday"}]},
         "labels": {"qrels": {"d1": 2}, "query_type": "direct", "language": "en", "reference_rewrite": "holiday days per year"}},
        {"user": "and for travel by train?",
         "labels": {"qrels": {"d2": 1}, "query_type": "topic_switch", "language": "en", "reference_rewrite": "rail travel class"}}]},
    {"session_id": "s2", "domain": "shop", "account": {"assortment": "A"}, "turns": [
        {"user": "M8 hex bolts", "labels": {"qrels": {"d3": 2, "d4": 1}, "query_type": "self_contained", "language": "en"}}]},
]


@pytest.fixture
def tiny_set(tmp_path):
    return write_set(tmp_path / "tiny")


@pytest.fixture(scope="session", autouse=True)
def loopback_only():
    """Every test, module and session fixture included: any in-process connection to anything
    but the loopback fails the test (tests never leave 127.0.0.1)."""
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and self.family != socket.AF_UNIX:
            raise AssertionError(f"non-loopback connection attempted: {address}")
        return real(self, address)

    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", connect)
    yield
    mp.undo()


@pytest.fixture(scope="session", autouse=True)
def committed_folders_untouched():
    """No test writes into what the repository commits under runs/ and eval_sets/ (a test gating
    the committed baseline must never rescore it in place): `git status` stays clean after the suite."""
    import hashlib

    def state():
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                for d in (ROOT / "runs" / "baselines", ROOT / "eval_sets") for p in sorted(d.rglob("*")) if p.is_file()}

    before = state()
    yield
    after = state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    stale = "" if not any("/runs/baselines/" in k for k in changed) else (
        " (if the committed baseline's metrics were stale, a command rescored them: after changing scoring code, "
        "run `.venv/bin/harness metrics runs/baselines/b2b` and commit its tables; "
        "tests/test_house.py::test_the_committed_baseline_is_scored_by_this_code says so first)")
    assert not changed, f"tests changed committed files: {changed[:5]}{stale}"
