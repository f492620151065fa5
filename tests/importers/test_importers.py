"""MTRAG-UN and TREC importers on small raw fixtures cut from the public data, in the raw formats
(tests/fixtures/raw, cut by scripts/cut_import_fixtures.py). Whether the committed
eval_sets/mtrag-un equals a fresh import of the full raw data is `make check-import RAW=...`;
here, every session and document the fixture converts to must be a line of the committed set."""
import csv
import json
from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.evalset.load import iter_labelled, load_eval_set
from harness.importers.mtrag import convert, import_mtrag
from harness.importers.trec import import_trec, read_trec_qrels
from tests.conftest import ROOT

RAW = ROOT / "tests" / "fixtures" / "raw"
MTRAG = RAW / "mtrag"
VASWANI = RAW / "vaswani"
LONG = "18ef26058d321c5d96ca3ebf8117789e<::>7"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def raw_tasks():
    return {t["task_id"]: t for t in jsonl(MTRAG / "mtragun-human/generation_tasks/reference.jsonl")}


@pytest.fixture(scope="module")
def mtrag():
    docs, sessions = convert(MTRAG)
    return docs, {s["session_id"]: s for s in sessions}


def test_every_task_is_one_session_with_history(mtrag, raw_tasks):
    _, sessions = mtrag
    assert list(sessions) == list(raw_tasks) and len(sessions) == 7
    for tid, s in sessions.items():
        task, turns = raw_tasks[tid], s["turns"]
        said = [(m["speaker"], m["text"]) for m in task["input"]]
        assert [t["user"] for t in turns] == [x for who, x in said if who == "user"]
        assert [t["assistant"]["answer"] for t in turns[:-1]] == [x for who, x in said if who == "agent"]
        assert "assistant" not in turns[-1]  # the reference answer is a label, not history
        assert [t["turn_index"] for t in turns] == list(range(1, int(task["turn"]) + 1))
        assert all("labels" not in t for t in turns[:-1])  # history only
        assert s["domain"] == task["Collection"]
    s = sessions[LONG]  # a later task: earlier user turns and the agent answers the user saw are kept
    assert len(s["turns"]) == 7
    assert s["turns"][0]["user"] == "How to pay with cash when car shopping?"
    assert s["turns"][0]["assistant"]["answer"].startswith("When paying with cash")


def test_labels_come_from_the_task_and_the_qrels(mtrag, raw_tasks):
    _, sessions = mtrag
    qrels: dict[str, dict[str, int]] = {}
    for tsv in (MTRAG / "mtragun-human/retrieval_tasks/qrels").glob("*.tsv"):
        for row in csv.DictReader(tsv.open(encoding="utf-8"), delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    for tid, s in sessions.items():
        task, lab = raw_tasks[tid], s["turns"][-1]["labels"]
        assert lab["qrels"] == qrels.get(tid, {}) and lab["qrels_measured"] == (tid in qrels)
        assert lab["answerability"] == task["answerability"][0]
        assert lab["query_type"] == task["Question Type"][0]
        assert lab["multi_turn_type"] == task["Multi-Turn"][0]
        assert lab["reference_answer"] == task["targets"][0]["text"]
        assert lab["segments"] == {"collection": task["Collection"]} and lab["language"] == "en"
        assert "reference_rewrite" not in lab  # MTRAG has none: the oracle arm is n/a
    assert sessions[LONG]["turns"][-1]["labels"]["qrels"] == {
        "162428-0-349": 1, "181880-0-671": 1, "295295-0-526": 1, "485187-0-819": 1}
    labs = [s["turns"][-1]["labels"] for s in sessions.values()]
    assert sum(lab["qrels_measured"] for lab in labs) == 4  # the unmeasured tasks stay in
    assert {lab["answerability"] for lab in labs} == {"ANSWERABLE", "UNANSWERABLE", "UNDERSPECIFIED", "PARTIAL"}
    assert {lab["multi_turn_type"] for lab in labs} == {"Follow-up", "Clarification", "N/A"}
    assert {lab["segments"]["collection"] for lab in labs} == {"govt", "clapnq", "ibmcloud", "fiqa"}


def test_pooled_passages_become_documents(mtrag):
    docs, _ = mtrag
    raw = jsonl(MTRAG / "derived/pooled_corpus.jsonl")
    assert [d["doc_id"] for d in docs] == [r["_id"] for r in raw]
    for d, r in zip(docs, raw):
        assert d["text"] == r["text"] and d["title"] == (r.get("title") or "")
        assert d["metadata"] == {"domain": r["domain"]}


def test_import_agrees_line_by_line_with_the_committed_set(tmp_path):
    out = import_mtrag(MTRAG, tmp_path / "mtrag-un")
    es = load_eval_set(out)
    assert len(es.docs) == len(jsonl(MTRAG / "derived/pooled_corpus.jsonl")) == 10
    assert sum(1 for _ in iter_labelled(es)) == 7
    committed = ROOT / "eval_sets/mtrag-un"
    for name in ("eval_set.yaml", "LICENSE", "SOURCE.txt"):
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name
    for name in ("corpus.jsonl", "sessions.jsonl", "sessions.test.jsonl"):
        if not (out / name).exists():
            continue
        lines = set((committed / name).read_text(encoding="utf-8").splitlines())
        new = (out / name).read_text(encoding="utf-8").splitlines()
        assert new and not [ln[:80] for ln in new if ln not in lines], f"{name}: a line the committed set lacks"


def test_a_held_out_split_by_the_hash_of_the_conversation():
    """30% of MTRAG-UN's conversations are held out by hash: the committed split is that rule's,
    tasks of one conversation never straddle it, and both sides are large enough to report."""
    from harness.importers.mtrag import held_out

    es = load_eval_set(ROOT / "eval_sets/mtrag-un")
    sides = {}
    for s in es.sessions:
        assert (es.split_of[s.session_id] == "test") == held_out(s.session_id), s.session_id
        sides.setdefault(s.session_id.split("<::>")[0], set()).add(es.split_of[s.session_id])
    assert all(len(v) == 1 for v in sides.values())
    share = sum(1 for s in es.sessions if es.split_of[s.session_id] == "test") / len(es.sessions)
    assert 0.25 <= share <= 0.40, share


def test_a_task_whose_turn_disagrees_with_its_history_is_refused(tmp_path, raw_tasks):
    bad = tmp_path / "mtrag"
    for p in MTRAG.rglob("*"):
        if p.is_file():
            (bad / p.relative_to(MTRAG)).parent.mkdir(parents=True, exist_ok=True)
            (bad / p.relative_to(MTRAG)).write_bytes(p.read_bytes())
    task = {**raw_tasks[LONG], "turn": "6"}
    (bad / "mtragun-human/generation_tasks/reference.jsonl").write_text(json.dumps(task) + "\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"7 user turns but turn=6"):
        convert(bad)


def test_trec_importer_on_vaswani(tmp_path):
    out = import_trec(VASWANI / "corpus/doc-text.trec", VASWANI / "query-text.trec", VASWANI / "qrels", tmp_path / "vaswani",
                      name="vaswani", licence="see TERRIER_LICENSE_head.txt", source="terrier vaswani",
                      notices=[VASWANI / "TERRIER_LICENSE_head.txt"])
    es = load_eval_set(out)
    assert sorted(es.docs, key=int) == ["1", "2", "3", "414", "1239", "1502", "1894", "3785", "4462"]
    assert es.docs["2"].text.startswith("an electronic analogue computer for solving systems of linear equations "
                                        "mathematical derivation")  # lines joined by single spaces
    assert [s.session_id for s in es.sessions] == ["1", "2", "3"]
    q1, q2, q3 = (s.turns[0] for s in es.sessions)
    assert q1.user == "measurement of dielectric constant of liquids by the use of microwave techniques"
    # judged documents outside the corpus are dropped; the judged topics stay measured
    assert q1.labels.qrels == {"1239": 1, "1502": 1, "4462": 1} and q2.labels.qrels == {"414": 1, "1894": 1, "3785": 1}
    assert q1.labels.qrels_measured and not q3.labels.qrels_measured and q3.labels.qrels == {}
    assert (out / "TERRIER_LICENSE_head.txt").read_bytes() == (VASWANI / "TERRIER_LICENSE_head.txt").read_bytes()
    committed = {json.loads(ln)["doc_id"]: ln for ln in (ROOT / "eval_sets/vaswani/corpus.jsonl").read_text().splitlines()}
    assert all(committed[json.loads(ln)["doc_id"]] == ln for ln in (out / "corpus.jsonl").read_text().splitlines())


def test_trec_qrels_bad_line_names_file_and_line(tmp_path):
    p = tmp_path / "qrels"
    p.write_text("1 0 d1 1\n1 0 d2\n")
    with pytest.raises(ValueError, match=r"qrels:2: expected"):
        read_trec_qrels(p)
    p.write_text("1 0 d1 1\n1 0 d2 high\n")
    with pytest.raises(ValueError, match=r"qrels:2: grade 'high' is not an integer"):
        read_trec_qrels(p)


def test_every_registered_importer_is_a_command_of_harness_import():
    """An eval-set importer is one file under harness/importers with its @importer: the CLI's
    `harness import` commands are read from the registry, nothing is listed by hand."""
    import typer

    from harness.cli import app
    from harness.importers.registry import catalog

    group = typer.main.get_command(app).commands["import"]
    names = set(catalog())
    assert {"mtrag", "trec", "log"} <= names and names <= set(group.commands)
    for name in names:  # the importer's docstring is the command's help
        assert group.commands[name].help.split("\n")[0] == catalog()[name].__doc__.split("\n")[0]
