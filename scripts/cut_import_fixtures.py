"""Cut the small raw fixtures of tests/importers/test_importers.py out of the full public data, in the
same raw formats (whole lines and whole <DOC>/<top> blocks, byte for byte, in their order).

    python scripts/cut_import_fixtures.py --mtrag RAW/mtrag --vaswani RAW/vaswani [-o tests/fixtures/raw]

MTRAG-UN: seven tasks chosen to cover the four collections, the four answerability values, the
three multi-turn types, tasks with and without qrels, and a task with six earlier turns; the
pooled passages their qrels and contexts name plus the first two other passages; the qrels rows
of those tasks. Vaswani: topics 1-3, the qrels lines of topics 1 and 2 (topic 3 stays
unjudged), and documents 1-3 plus the first three judged documents of topics 1 and 2 (their
other judged documents are left out, so the importer's dropping of unknown documents shows)."""
from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

TASKS = (
    "18ef26058d321c5d96ca3ebf8117789e<::>7",  # fiqa, ANSWERABLE, Clarification, 4 qrels, 7 turns
    "a51f309e782dea735f433c8f91dc14cf<::>1",  # govt, measured
    "c4a3e249f847fe15dad10646b9d3d139<::>2",  # clapnq, ANSWERABLE, Follow-up, 2 qrels
    "2d820dd99cf5cb2c50adc361fc587fe6<::>2",  # ibmcloud, PARTIAL, Clarification, 1 qrel
    "eff58f81efb13dc86a1a715faae16b55<::>1",  # govt, UNDERSPECIFIED, N/A, no qrels
    "ca365aa4fa9bd55dd12f7397d919ab0c<::>1",  # clapnq, UNANSWERABLE, N/A, no qrels
    "207f1f32a90bf27fe20a1792c1a03334<::>2",  # ibmcloud, UNANSWERABLE, Follow-up, no qrels
)
TOPICS = ("1", "2", "3")
JUDGED_TOPICS = ("1", "2")
EXTRA_DOCS = ("1", "2", "3")


def cut_mtrag(src: Path, out: Path) -> None:
    ref = "mtragun-human/generation_tasks/reference.jsonl"
    lines = [ln for ln in (src / ref).read_text(encoding="utf-8").splitlines(keepends=True)
             if json.loads(ln)["task_id"] in TASKS]
    assert len(lines) == len(TASKS), "a chosen task is missing from the raw data"
    docs = {c["document_id"] for ln in lines for c in json.loads(ln)["contexts"]}
    qdir = "mtragun-human/retrieval_tasks/qrels"
    for tsv in sorted((src / qdir).glob("*.tsv")):
        head, *rows = tsv.read_text(encoding="utf-8").splitlines(keepends=True)
        rows = [r for r in rows if r.split("\t")[0] in TASKS]
        docs |= {r.split("\t")[1] for r in rows}
        _write(out / qdir / tsv.name, [head, *rows])
    _write(out / ref, lines)
    pool = (src / "derived/pooled_corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    others = [ln for ln in pool if json.loads(ln)["_id"] not in docs][:2]
    _write(out / "derived/pooled_corpus.jsonl", [ln for ln in pool if json.loads(ln)["_id"] in docs or ln in others])
    for name in ("LICENSE", "SOURCE.txt"):
        shutil.copyfile(src / name, out / name)


def cut_vaswani(src: Path, out: Path) -> None:
    qrels = [ln for ln in (src / "qrels").read_text(encoding="utf-8").splitlines(keepends=True)
             if ln.split()[0] in JUDGED_TOPICS]
    keep = set(EXTRA_DOCS)
    for t in JUDGED_TOPICS:
        keep |= set([ln.split()[2] for ln in qrels if ln.split()[0] == t][:3])
    text = (src / "corpus/doc-text.trec").read_text(encoding="utf-8")
    blocks = [m.group(0) + "\n" for m in re.finditer(r"<DOC>\n<DOCNO>(.*?)</DOCNO>.*?</DOC>", text, re.S)
              if m.group(1).strip() in keep]
    _write(out / "corpus/doc-text.trec", blocks)
    tops = [m.group(0) for m in re.finditer(r"<top>\n<num>(.*?)</num>.*?</top>\n",
                                            (src / "query-text.trec").read_text(encoding="utf-8"), re.S)
            if m.group(1).strip() in TOPICS]
    assert len(tops) == len(TOPICS), "a chosen topic is missing from the raw data"
    _write(out / "query-text.trec", tops)
    _write(out / "qrels", qrels)
    for name in ("TERRIER_LICENSE_head.txt", "SOURCE.txt"):
        shutil.copyfile(src / name, out / name)


def _write(path: Path, parts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mtrag", type=Path, required=True, help="raw MTRAG folder (mtragun-human/, derived/)")
    ap.add_argument("--vaswani", type=Path, required=True, help="raw Vaswani folder (corpus/doc-text.trec, query-text.trec, qrels)")
    ap.add_argument("-o", "--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests/fixtures/raw")
    a = ap.parse_args()
    cut_mtrag(a.mtrag, a.out / "mtrag")
    cut_vaswani(a.vaswani, a.out / "vaswani")
    print(f"fixtures written under {a.out}")


if __name__ == "__main__":
    main()
