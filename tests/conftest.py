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


# `make test` runs the files on 2 processes, each file whole in one (pytest-xdist's loadfile), handed
# out in collection order (--no-loadscope-reorder keeps it; by default xdist puts the files with the
# most tests first, and a long file of few tests came last, one process idle while the other ran
# it). The longest first, then, so the last files a process takes are short: the seconds per file
# of tests/durations.json (a file's path under tests/ -> seconds), which `make test-durations` writes
# (the suite as `make test` runs it, on a cold numba cache as in a fresh clone: ranx's first compile
# is in metrics/test_trec_measures.py). A file it does not list keeps its place after those it lists;
# without it, the collection order. The order changes no result, only how the files are shared.
TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "durations.json"


def file_key(path) -> str:
    """A test file's key in durations.json: its path under tests/."""
    path = Path(path).resolve()
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)


def pytest_collection_modifyitems(items):
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8")) if DURATIONS.is_file() else {}
    keys = {path: file_key(path) for path in {item.path for item in items}}
    items.sort(key=lambda item: -seconds.get(keys[item.path], 0))  # stable: a file's tests keep their order


def pytest_addoption(parser):
    parser.addoption("--write-durations", action="store_true",
                     help="write tests/durations.json: this session's seconds per test file (make test-durations)")


def pytest_configure(config):
    if config.getoption("write_durations") and not hasattr(config, "workerinput"):  # not in an xdist worker
        config.pluginmanager.register(FileSeconds(config.rootpath), "harness-file-seconds")


class FileSeconds:
    """Setup, call and teardown of every test summed per file, from the reports that reach this
    process (every worker's do), written to tests/durations.json when the session ran to its end."""

    def __init__(self, rootpath: Path):
        self.rootpath, self.seconds, self.said = rootpath, {}, ""

    def pytest_runtest_logreport(self, report):
        key = file_key(self.rootpath / report.nodeid.split("::")[0])
        self.seconds[key] = self.seconds.get(key, 0.0) + report.duration

    def pytest_sessionfinish(self, exitstatus):
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):  # interrupted: keep the old file
            self.said = f"{DURATIONS.relative_to(ROOT)} not written (exit {int(exitstatus)})"
            return
        table = {k: round(s, 1) for k, s in sorted(self.seconds.items())}
        DURATIONS.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
        self.said = f"wrote {DURATIONS.relative_to(ROOT)}: seconds of {len(table)} test files"

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_line(self.said)


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
        "tests/house/test_house.py::test_the_committed_baseline_is_scored_by_this_code says so first)")
    assert not changed, f"tests changed committed files: {changed[:5]}{stale}"
