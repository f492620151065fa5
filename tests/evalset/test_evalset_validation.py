"""Every kind of eval-set validation error names file, line and field; the CLI exits 2."""
import json

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.evalset.load import EvalSetError, load_eval_set
from tests.conftest import TINY_DOCS, TINY_SESSIONS, write_set


def problems(path):
    with pytest.raises(EvalSetError) as e:
        load_eval_set(path)
    return [str(p) for p in e.value.problems]


def test_valid_set_loads(tiny_set):
    es = load_eval_set(tiny_set)
    assert len(es.docs) == 4 and len(es.sessions) == 2
    assert len(es.content_hash) == 64


def test_duplicate_doc_id(tmp_path):
    p = write_set(tmp_path / "x", docs=TINY_DOCS + [dict(TINY_DOCS[0])])
    assert problems(p) == ["corpus.jsonl:5: doc_id: duplicate doc_id 'd1'"]


def test_qrels_unknown_doc_and_unknown_filter_field(tmp_path):
    s = json.loads(json.dumps(TINY_SESSIONS))
    s[0]["turns"][1]["labels"]["qrels"]["nope"] = 1
    s[1]["turns"][0]["labels"]["expected_filters"] = [{"field": "colour", "op": "eq", "value": "red"}]
    got = problems(write_set(tmp_path / "x", sessions=s))
    assert "sessions.jsonl:1: turns.1.labels.qrels.nope: qrels name an unknown document" in got
    assert "sessions.jsonl:2: turns.0.labels.expected_filters.0.field: unknown filter field 'colour'" in got


def test_bad_json_wrong_types_and_all_reported_at_once(tmp_path):
    p = write_set(tmp_path / "x")
    lines = (p / "sessions.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    bad["turns"][0]["labels"]["qrels"] = {"d3": "high"}
    (p / "sessions.jsonl").write_text(lines[0][:-5] + "\n" + json.dumps(bad) + "\n")
    got = problems(p)
    assert any(g.startswith("sessions.jsonl:1: (line): invalid JSON") for g in got)
    assert any(g.startswith("sessions.jsonl:2: turns.0.labels.qrels.d3:") for g in got)


def test_empty_corpus_and_missing_files(tmp_path):
    p = write_set(tmp_path / "x", docs=[])
    assert "corpus.jsonl: empty corpus" in problems(p)
    (p / "sessions.jsonl").unlink()
    assert "sessions.jsonl: missing" in problems(p)


def test_non_utf8_and_deep_nesting(tmp_path):
    p = write_set(tmp_path / "x")
    with open(p / "corpus.jsonl", "ab") as f:
        f.write(b'{"doc_id": "d9", "text": "caf\xe9"}\n')
        f.write(b"[" * 100000 + b"]" * 100000 + b"\n")
    got = problems(p)
    assert any(g.startswith("corpus.jsonl:5: (line): not valid UTF-8") for g in got)
    assert any(g.startswith("corpus.jsonl:6: (line):") for g in got)


def test_unknown_key_missing_field_duplicate_session(tmp_path):
    s = json.loads(json.dumps(TINY_SESSIONS))
    s[0]["turns"][0]["labels"]["colour"] = "x"
    del s[1]["turns"][0]["user"]
    s.append(dict(TINY_SESSIONS[0]))
    got = problems(write_set(tmp_path / "x", sessions=s))
    assert any(g.startswith("sessions.jsonl:1: turns.0.labels.colour:") for g in got)
    assert any(g.startswith("sessions.jsonl:2: turns.0.user:") for g in got)
    assert any(g.startswith("sessions.jsonl:3: session_id: duplicate session_id 's1'") for g in got)


def test_bad_yaml_and_unlabelled_session(tmp_path):
    s = json.loads(json.dumps(TINY_SESSIONS))
    s[1]["turns"][0].pop("labels")
    p = write_set(tmp_path / "x", sessions=s)
    (p / "eval_set.yaml").write_text("name: tiny\nversion: [1\n")
    got = problems(p)
    assert any(g.startswith("eval_set.yaml:") and "invalid YAML" in g for g in got)
    assert "sessions.jsonl:2: turns: session has no labelled turn" in got


def test_cli_validate_exit_codes(tiny_set, tmp_path):
    r = CliRunner().invoke(app, ["eval-set", "validate", str(tiny_set)])
    assert r.exit_code == 0, r.output
    bad = write_set(tmp_path / "bad", docs=TINY_DOCS + [dict(TINY_DOCS[1])])
    r = CliRunner().invoke(app, ["eval-set", "validate", str(bad)])
    assert r.exit_code == 2
    assert "corpus.jsonl:5: doc_id: duplicate doc_id 'd2'" in r.output
    assert "Traceback" not in r.output
