"""Replies of the scripted endpoint of `make gate-demo` (script.yaml): a model that follows each
prompt, played with the eval set's labels. A demonstration of the gate's mechanics, not of how a
real model behaves: the calibrated grader knows which passages answer a question, the calibrated
rewriter knows where the answer is written once a first search missed it; the strict grader and
the synonym-only rewriter do what their prompts say."""
import json
import re
from pathlib import Path

from harness.evalset.load import iter_labelled, load_eval_set

_ES = load_eval_set(Path(__file__).resolve().parents[2] / "eval_sets" / "handbook-de")
# everyday words only: no term of the eval set's documents is named here
SYNONYMS = {"Wie": "Auf welche Weise", "wie": "auf welche Weise", "Was": "Welche Sache", "Wann": "Zu welchem Zeitpunkt",
            "muss": "sollte", "kann": "darf", "bekomme": "erhalte", "bekommt": "erhält", "gibt": "existiert",
            "How": "In what way", "What": "Which thing", "When": "At what time", "can": "may", "get": "obtain",
            "need": "require", "do": "perform"}


def _asked(question: str) -> str:
    """What a question asks, whichever synonyms it uses: a calibrated grader reads meaning, not words."""
    for word, synonym in SYNONYMS.items():
        question = question.replace(synonym, word)
    return question


_TURNS = [t for _, _, _, t in iter_labelled(_ES)]
RELEVANT = {_asked(t.user): {d for d, g in t.labels.qrels.items() if g >= 1} for t in _TURNS}
TOPIC = {t.user: " ".join(_ES.docs[d].title for d in sorted(RELEVANT[_asked(t.user)])) for t in _TURNS}


def _body(req: dict) -> dict:
    return json.loads(req["messages"][1]["content"])  # the role's first user message (a repair adds more)


def calibrated_grader(req: dict) -> dict:
    """Sufficient when a passage answers the question."""
    b = _body(req)
    ok = bool(RELEVANT.get(_asked(b["question"]), set()) & {p["doc_id"] for p in b["passages"]})
    return {"sufficient": ok, "reason": "a passage answers it" if ok else "no passage answers it", "new_query": ""}


def strict_grader(req: dict) -> dict:
    """'Fully and literally': only a passage that holds the question word for word."""
    b = _body(req)
    ok = any(b["question"].lower() in p["text"].lower() for p in b["passages"])
    return {"sufficient": ok, "reason": "not literally supported" if not ok else "literal", "new_query": ""}


def _rewrite(standalone: str) -> dict:
    return {"standalone": standalone, "must_keep": [], "filters": [], "confidence": 0.9, "variants": [], "clarify": None}


def rewriter(req: dict) -> dict:
    """The question as asked; on a retry, the handbook topic that holds the answer."""
    b = _body(req)
    if b.get("retry"):
        return _rewrite(TOPIC.get(b["turn"]) or b["turn"])
    return _rewrite(b["turn"])


def synonym_rewriter(req: dict) -> dict:
    """Words swapped for synonyms, one more on every retry (the same query once none is left:
    the loop stops); never where the answer is written."""
    b = _body(req)
    words = b["turn"].split()
    n = 1 + len((b.get("retry") or {}).get("previous_queries", []))
    swapped, out = 0, []
    for w in words:
        core = re.sub(r"\W", "", w)
        if core in SYNONYMS and swapped < n:
            out.append(w.replace(core, SYNONYMS[core]))
            swapped += 1
        else:
            out.append(w)
    return _rewrite(" ".join(out))
