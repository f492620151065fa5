"""Reliability (issue 9), property 3: hostile eval sets.

Hypothesis damages a small valid eval set (truncated lines, wrong types, huge strings, bytes that
are not UTF-8, duplicate ids, qrels and shown items naming unknown documents, empty files,
deeply nested JSON and YAML). `harness eval-set validate` and `harness run` on a config pointing
at the set must end in a clear error naming the file, the line and the field, with exit code 2,
no traceback, output of bounded size, and nothing created or changed under the runs folder."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from harness.cli import app
from tests.conftest import TINY_DOCS, write_set
from tests.reliability_helpers import HARNESS, all_files
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

CORPUS, SESSIONS, TEST, INFO = "corpus.jsonl", "sessions.jsonl", "sessions.test.jsonl", "eval_set.yaml"
TEST_SESSIONS = [{"session_id": "t1", "domain": "shop", "account": {"assortment": "B"}, "turns": [
    {"user": "galvanised M8 bolts", "labels": {"qrels": {"d4": 2}, "query_type": "self_contained", "language": "en"}}]}]
MAX_OUTPUT = 20_000  # characters: a problem list stays readable whatever the input holds


def base_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        root = write_set(Path(d) / "s", test_sessions=TEST_SESSIONS)
        return {p.name: p.read_bytes() for p in root.iterdir()}


BASE = base_files()


def lines(files, name) -> list[bytes]:
    return files[name].split(b"\n")[:-1]


def put_lines(files, name, ls) -> None:
    files[name] = b"".join(x + b"\n" for x in ls)


def set_path(obj, path, value):
    *head, last = path
    for k in head:
        obj = obj[k]
    obj[last] = value


# (file, line index, path, the value type the field wants) for wrong-type damage
TARGETS = [
    (CORPUS, 0, ("doc_id",), str), (CORPUS, 1, ("text",), str), (CORPUS, 2, ("title",), str),
    (CORPUS, 3, ("metadata",), dict), (SESSIONS, 0, ("session_id",), str), (SESSIONS, 1, ("turns",), list),
    (SESSIONS, 0, ("turns", 0, "user"), str), (SESSIONS, 0, ("turns", 1, "labels"), dict),
    (SESSIONS, 1, ("turns", 0, "labels", "qrels"), dict), (SESSIONS, 0, ("turns", 0, "labels", "qrels", "d1"), int),
    (SESSIONS, 1, ("account",), dict), (SESSIONS, 0, ("turns", 1, "turn_index"), int), (TEST, 0, ("domain",), str),
    (SESSIONS, 0, ("turns", 0, "turn_index"), "positive int"),
]
HUGE = st.integers(100_000, 2_000_000).map(lambda n: "x" * n)
NOT_A_NUMBER = st.text(alphabet="abcdefghijklmnopqrstuvwxyz -", min_size=1, max_size=30)


def wrong_value(want):
    others = {str: st.one_of(st.integers(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
                             st.dictionaries(st.text(max_size=5), st.integers(), max_size=2), HUGE.map(lambda x: [x])),
              int: st.one_of(NOT_A_NUMBER, st.lists(st.integers(), max_size=3),
                             st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not float(x).is_integer()),
                             HUGE),
              "positive int": st.integers(max_value=0),
              dict: st.one_of(st.text(max_size=20), st.integers(), st.lists(st.integers(), max_size=3)),
              list: st.one_of(st.text(max_size=20), st.integers(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))}
    return others[want]


@st.composite
def hostile(draw):
    """(files, expected): the damaged files and (file, line or None, text the problem must contain)."""
    files = dict(BASE)
    kind = draw(st.sampled_from(["truncated", "wrong_type", "huge_id", "not_utf8", "duplicate", "unknown_doc",
                                 "empty", "deep_json", "deep_yaml"]))
    if kind == "truncated":
        name = draw(st.sampled_from([CORPUS, SESSIONS, TEST]))
        ls = lines(files, name)
        i = draw(st.integers(0, len(ls) - 1))
        ls[i] = ls[i][: draw(st.integers(1, len(ls[i]) - 1))]
        put_lines(files, name, ls)
        return files, [(name, i + 1, "(line): invalid JSON")]
    if kind == "wrong_type":
        name, i, path, want = draw(st.sampled_from(TARGETS))
        ls = lines(files, name)
        obj = json.loads(ls[i])
        set_path(obj, path, draw(wrong_value(want)))
        ls[i] = json.dumps(obj).encode()
        put_lines(files, name, ls)
        return files, [(name, i + 1, ".".join(map(str, path)) + ":")]
    if kind == "huge_id":  # a huge unknown document id where ids are checked
        i = draw(st.integers(0, 1))
        ls = lines(files, SESSIONS)
        obj = json.loads(ls[i])
        huge = draw(HUGE)
        where = draw(st.sampled_from(["qrels", "shown"]))
        if where == "qrels":
            obj["turns"][0]["labels"]["qrels"][huge] = 1
        else:
            obj["turns"][0]["assistant"] = {"shown": [{"doc_id": huge}]}
        ls[i] = json.dumps(obj).encode()
        put_lines(files, SESSIONS, ls)
        field = "turns.0.labels.qrels." if where == "qrels" else "turns.0.assistant.shown.0.doc_id: unknown document"
        return files, [(SESSIONS, i + 1, field)]
    if kind == "not_utf8":
        name = draw(st.sampled_from([CORPUS, SESSIONS, TEST, INFO]))
        ls = lines(files, name)
        i = draw(st.integers(0, len(ls) - 1))
        pos = draw(st.integers(0, len(ls[i])))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe9t\xe9"]))
        ls[i] = ls[i][:pos] + bad + ls[i][pos:]
        put_lines(files, name, ls)
        return files, [(name, i + 1, "not valid UTF-8")]
    if kind == "duplicate":
        name = draw(st.sampled_from([CORPUS, SESSIONS, TEST]))
        if name == TEST:  # a main-split session again in the test split
            files[TEST] = files[TEST] + lines(files, SESSIONS)[0] + b"\n"
            return files, [(TEST, len(lines(files, TEST)), "session_id: duplicate session_id 's1' (first at sessions.jsonl:1)")]
        ls = lines(files, name)
        i = draw(st.integers(0, len(ls) - 1))
        j = draw(st.integers(i + 1, len(ls)))
        ls.insert(j, ls[i])
        put_lines(files, name, ls)
        return files, [(name, j + 1, "doc_id: duplicate doc_id" if name == CORPUS else "session_id: duplicate session_id")]
    if kind == "unknown_doc":
        # "[" is left out here: rich markup in an id is test_markup_in_a_hostile_id_is_printed_verbatim's case
        doc = draw(st.text(min_size=1, max_size=40).filter(lambda d: d not in {x["doc_id"] for x in TINY_DOCS} and "[" not in d))
        ls = lines(files, SESSIONS)
        obj = json.loads(ls[0])
        obj["turns"][1]["labels"]["qrels"][doc] = draw(st.integers(0, 3))
        ls[0] = json.dumps(obj).encode()
        put_lines(files, SESSIONS, ls)
        return files, [(SESSIONS, 1, "turns.1.labels.qrels.")]
    if kind == "empty":
        name = draw(st.sampled_from([CORPUS, SESSIONS, TEST, INFO]))
        files[name] = draw(st.sampled_from([b"", b"\n", b"  \n\n"]))
        msg = {CORPUS: "empty corpus", SESSIONS: "no sessions", TEST: "no sessions", INFO: "empty file"}[name]
        return files, [(name, None, msg)]
    if kind == "deep_json":
        depth = draw(st.integers(65, 5000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        name, i, key = draw(st.sampled_from([(CORPUS, 0, "metadata"), (SESSIONS, 1, "domain"), (TEST, 0, "account")]))
        ls = lines(files, name)
        obj = json.loads(ls[i])
        obj[key] = "__DEEP__"
        ls[i] = json.dumps(obj).replace('"__DEEP__"', opener * depth + "1" + closer * depth).encode()
        put_lines(files, name, ls)
        return files, [(name, i + 1, "(line): JSON nested too deeply")]
    depth = draw(st.integers(65, 5000))  # deep_yaml
    info = yaml.safe_load(files[INFO])
    text = yaml.safe_dump(info).replace("source: test", "source: " + "[" * depth + "x" + "]" * depth)
    files[INFO] = text.encode()
    return files, [(INFO, None, "nested too deeply")]


def write(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def mentioned(output: str, root: Path, expected) -> bool:
    """Every expected problem is one output line: `FILE:LINE: FIELD: message` (validate prefixes
    the set's folder, run indents it)."""
    found = [ln.strip().removeprefix(f"{root}/") for ln in output.splitlines()]
    for name, line, text in expected:
        where = f"{name}:{line}: " if line else f"{name}: "
        if not any(ln.startswith(where) and text in ln for ln in found):
            return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=hostile())
def test_hostile_eval_sets_end_in_a_clear_error_and_touch_no_run(case):
    files, expected = case
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        root = write(d / "hostile", files)
        runs = d / "runs"
        (runs / "earlier-run").mkdir(parents=True)
        (runs / "earlier-run" / "manifest.json").write_text('{"status": "complete"}')
        before = all_files(runs)
        cfg = d / "run.yaml"
        cfg.write_text(yaml.safe_dump({"name": "hostile", "eval_set": str(root), "arms": ["original"],
                                       "runs_dir": str(runs)}))
        runner = CliRunner()

        v = runner.invoke(app, ["eval-set", "validate", str(root)])
        assert v.exit_code == 2 and isinstance(v.exception, SystemExit), (v.exit_code, repr(v.exception))
        assert "Traceback" not in v.output and len(v.output) < MAX_OUTPUT, v.output[:2000]
        assert mentioned(v.output, root, expected), (expected, v.output[:3000])

        r = runner.invoke(app, ["run", str(cfg), "--no-progress", "--run-id", "should-not-exist"])
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exit_code, repr(r.exception))
        assert "Traceback" not in r.output and len(r.output) < MAX_OUTPUT, r.output[:2000]
        assert mentioned(r.output, root, expected), (expected, r.output[:3000])
        assert all_files(runs) == before and sorted(p.name for p in runs.iterdir()) == ["earlier-run"]


def test_the_real_command_exits_2_without_a_traceback(tmp_path):
    """The same through the installed `harness` command (exit code and stderr of a real process)."""
    files = dict(BASE)
    files[CORPUS] = files[CORPUS][: len(files[CORPUS]) // 2]  # cut mid-line
    files[SESSIONS] = files[SESSIONS].replace(b"holiday", b"holi\xffday", 1)
    files[INFO] = b""
    root = write(tmp_path / "hostile", files)
    runs = tmp_path / "runs"
    runs.mkdir()
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"name": "hostile", "eval_set": str(root), "arms": ["original"], "runs_dir": str(runs)}))
    n_corpus = files[CORPUS].count(b"\n") + 1
    for args in (["eval-set", "validate", str(root)], ["run", str(cfg), "--no-progress"]):
        p = subprocess.run([str(HARNESS), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "400"})
        assert p.returncode == 2, p.stderr
        out = " ".join((p.stdout + p.stderr).split())
        assert "Traceback" not in out
        assert f"{CORPUS}:{n_corpus}: (line): invalid JSON" in out
        assert f"{SESSIONS}:1: (line): not valid UTF-8" in out
        assert f"{INFO}: (file): empty file" in out
    assert list(runs.iterdir()) == []


def test_markup_in_a_hostile_id_is_printed_verbatim(tmp_path):
    files = dict(BASE)
    obj = json.loads(lines(files, SESSIONS)[0])
    obj["turns"][1]["labels"]["qrels"]["[/bold]"] = 1
    put_lines(files, SESSIONS, [json.dumps(obj).encode(), lines(files, SESSIONS)[1]])
    root = write(tmp_path / "hostile", files)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"name": "hostile", "eval_set": str(root), "arms": ["original"],
                                   "runs_dir": str(tmp_path / "runs")}))
    r = CliRunner().invoke(app, ["run", str(cfg), "--no-progress"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), repr(r.exception)
    assert "turns.1.labels.qrels.[/bold]: qrels name an unknown document" in r.output
