"""No offline rule names the data it is judged on: the source of `harness/roles` and
`harness/arms` contains no document id of a shipped eval set, and no term that occurs only in
one eval set's labels (reference rewrites and answers, expected filters, qrels, surface docs),
that is nowhere in its corpus, schema or conversations and in no other eval set."""
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

SETS = sorted(p for p in (ROOT / "eval_sets").iterdir() if (p / "eval_set.yaml").is_file())
WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def _jsonl(path: Path):
    if path.is_file():
        with path.open(encoding="utf-8") as f:
            yield from (json.loads(line) for line in f if line.strip())


def texts(es: Path) -> tuple[set[str], set[str], set[str]]:
    """(words of the labels, words of everything else in the set, the set's doc ids)."""
    labels, rest, ids = set(), words((es / "eval_set.yaml").read_text(encoding="utf-8")), set()
    for doc in _jsonl(es / "corpus.jsonl"):
        ids.add(doc["doc_id"])
        rest |= words(" ".join([doc.get("title") or "", doc.get("text") or "", json.dumps(doc.get("metadata") or {},
                                                                                           ensure_ascii=False)]))
    for name in ("sessions.jsonl", "sessions.test.jsonl"):
        for s in _jsonl(es / name):
            rest |= words(json.dumps(s.get("account") or {}, ensure_ascii=False))
            for t in s["turns"]:
                labels |= words(json.dumps(t.get("labels") or {}, ensure_ascii=False))
                rest |= words(json.dumps({k: v for k, v in t.items() if k != "labels"}, ensure_ascii=False))
    return labels, rest, ids


@pytest.fixture(scope="module")
def data():
    return {es.name: texts(es) for es in SETS}


def source() -> dict[str, str]:
    files = sorted((ROOT / "harness" / "roles").rglob("*.py")) + sorted((ROOT / "harness" / "arms").rglob("*.py"))
    assert len(files) > 10
    return {str(f.relative_to(ROOT)): f.read_text(encoding="utf-8") for f in files}


def test_no_rule_names_a_document_of_an_eval_set(data):
    # ids of a letter and at least four characters: numeric ids (Vaswani's) cannot be told from numbers
    ids = {i for _, _, s in data.values() for i in s if len(i) >= 4 and re.search(r"[^\W\d_]", i)}
    assert len(ids) > 1000
    token = re.compile(r"[\w.:/#-]+")
    hits = [(f, t) for f, text in source().items() for t in set(token.findall(text)) if t in ids]
    assert not hits, hits


# everyday words that a label happens to use and the offline roles need for their own text (the
# German abstention sentence): reviewed, not data
EVERYDAY = {"nichts"}


def label_only(data) -> dict[str, set[str]]:
    out = {}
    for name, (labels, rest, _) in data.items():
        elsewhere = set().union(*(l | r for other, (l, r, _) in data.items() if other != name))
        out[name] = labels - rest - elsewhere - EVERYDAY
    return out


def leaks(code: dict[str, str], only: dict[str, set[str]]) -> list:
    return [(name, f, sorted(words(text) & terms)) for name, terms in only.items() for f, text in code.items()
            if words(text) & terms]


def test_no_rule_names_a_term_only_the_labels_use(data):
    only = label_only(data)
    assert sum(len(v) for v in only.values()) > 50, {k: len(v) for k, v in only.items()}  # something to find
    assert not leaks(source(), only)


def test_the_scan_finds_a_planted_leak(data):
    only = label_only(data)
    term = sorted(only["handbook-de"])[0]
    found = leaks({"harness/roles/planted.py": f'BOOST = ["{term.capitalize()}"]\n'}, only)
    assert found == [("handbook-de", "harness/roles/planted.py", [term])]
