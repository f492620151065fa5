"""MTRAG-UN and TREC importers on the real public data in ../shared/datasets."""
import json

import pytest

from harness.evalset.load import iter_labelled, load_eval_set
from harness.importers.mtrag import convert, import_mtrag
from harness.importers.trec import import_trec, read_trec_qrels
from tests.conftest import ROOT, SHARED

MTRAG = SHARED / "mtrag"


@pytest.fixture(scope="module")
def mtrag():
    docs, sessions = convert(MTRAG)
    return docs, {s["session_id"]: s for s in sessions}


def test_every_task_is_one_session_with_history(mtrag):
    docs, sessions = mtrag
    assert len(sessions) == 507 and len(docs) == 1504
    raw = {json.loads(l)["task_id"]: json.loads(l) for l in open(MTRAG / "mtragun-human/generation_tasks/reference.jsonl")}
    for tid, s in sessions.items():
        task = raw[tid]
        turns = s["turns"]
        assert turns[-1]["turn_index"] == int(task["turn"])
        assert [t["turn_index"] for t in turns] == list(range(1, len(turns) + 1))
        assert all("labels" not in t for t in turns[:-1])  # history only
        assert turns[-1]["user"] == task["input"][-1]["text"]
    # a later task: earlier user turns and the agent answers the user saw are kept
    s = sessions["18ef26058d321c5d96ca3ebf8117789e<::>7"]
    assert len(s["turns"]) == 7
    assert s["turns"][0]["user"] == "How to pay with cash when car shopping?"
    assert s["turns"][0]["assistant"]["answer"].startswith("When paying with cash")


def test_unmeasured_tasks_stay_in(mtrag):
    _, sessions = mtrag
    labs = [s["turns"][-1]["labels"] for s in sessions.values()]
    measured = [l for l in labs if l["qrels_measured"]]
    unmeasured = [l for l in labs if not l["qrels_measured"]]
    assert len(measured) == 332 and len(unmeasured) == 175
    assert all(l["qrels"] == {} for l in unmeasured)
    assert {l["answerability"] for l in labs} == {"ANSWERABLE", "UNANSWERABLE", "UNDERSPECIFIED", "PARTIAL"}
    assert {l["multi_turn_type"] for l in labs} == {"Follow-up", "Clarification", "N/A"}
    assert {l["segments"]["collection"] for l in labs} == {"govt", "clapnq", "ibmcloud", "fiqa"}
    assert all("reference_rewrite" not in l for l in labs)


def test_committed_mtrag_set_matches_a_fresh_import(tmp_path):
    out = import_mtrag(MTRAG, tmp_path / "mtrag-un")
    for name in ("eval_set.yaml", "corpus.jsonl", "sessions.jsonl", "LICENSE"):
        assert (out / name).read_bytes() == (ROOT / "eval_sets/mtrag-un" / name).read_bytes(), name
    es = load_eval_set(out)
    assert sum(1 for _ in iter_labelled(es)) == 507


def test_trec_importer_on_vaswani(tmp_path):
    v = SHARED / "vaswani"
    out = import_trec(v / "corpus/doc-text.trec", v / "query-text.trec", v / "qrels", tmp_path / "vaswani",
                      name="vaswani", licence="see TERRIER_LICENSE_head.txt", source="terrier vaswani",
                      notices=[v / "TERRIER_LICENSE_head.txt"])
    es = load_eval_set(out)
    assert len(es.docs) == 11429
    assert len(es.sessions) == 93
    q1 = es.sessions[0].turns[0]
    assert q1.user == "measurement of dielectric constant of liquids by the use of microwave techniques"
    assert q1.labels.qrels["1239"] == 1
    assert sum(len(s.turns[0].labels.qrels) for s in es.sessions) == 2083
    assert (out / "TERRIER_LICENSE_head.txt").exists()


def test_trec_qrels_bad_line_names_file_and_line(tmp_path):
    p = tmp_path / "qrels"
    p.write_text("1 0 d1 1\n1 0 d2\n")
    with pytest.raises(ValueError, match=r"qrels:2: expected"):
        read_trec_qrels(p)
    p.write_text("1 0 d1 1\n1 0 d2 high\n")
    with pytest.raises(ValueError, match=r"qrels:2: grade 'high' is not an integer"):
        read_trec_qrels(p)
