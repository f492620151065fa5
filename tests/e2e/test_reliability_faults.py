"""Reliability (issue 9), property 1: faults during a run.

A slice of eval_sets/b2b-shop (six test-split sessions, 25 labelled turns) is replayed through
every LLM arm against the scripted OpenAI-compatible test server, once without faults and once
per fault kind injected into 30% of the requests (seeded). Each faulty run must complete; every
turn whose outcome differs from the undisturbed run must say why on its row, naming the fault;
the manifest's counts must match the rows; metrics must count unmeasured turns beside the mean
(no NaN mean, no NaN value without a reason); no error reply may enter the LLM cache.

Retry-After, backoff and timeouts are made short through the endpoint settings and the test
server's settings, never by patching."""
from __future__ import annotations

import json
import math
import sqlite3

import pytest

from harness.config import parse_config
from harness.store.manifest import read_manifest
from harness.metrics.compute import compute_metrics
from harness.run.replay import Replay
from harness.testing import FAULTS, TestServer
from harness.store.traces import read_traces
from tests.reliability_helpers import (LLM_ARMS, ROLES, b2b_slice, endpoint, model_reply, prewarm, schema_name,
                                            slice_index, user_json)
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

TURNS = 25  # labelled turns of the slice's test split
FAULT_NOTE = {"429": "RateLimitError 429", "429_no_retry_after": "RateLimitError 429",
              "500": "InternalServerError 500", "hang": "APITimeoutError", "reset": "APIConnectionError",
              "invalid_json": "invalid JSON", "bad_schema": "schema violation", "empty_choices": "empty choices",
              "length": "cut at max_tokens"}
COMPARED = ["issued_queries", "lanes", "ranking", "answer", "answer_doc_ids", "abstained", "verdict", "applied_filters",
            "proposed_filters", "filter_violations", "must_keep", "clarify", "turn_class"]
KEY = ["arm_id", "repeat", "session_id", "turn_index"]


def _plain(v):
    v = v.tolist() if hasattr(v, "tolist") else v
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def outcomes(t) -> dict:
    """(arm_id, repeat, session_id, turn_index) -> everything a user compares, per round."""
    out = {}
    for key, g in t.groupby(KEY, sort=False):
        g = g.sort_values("round")
        out[key] = [tuple(repr(_plain(r[c])) for c in COMPARED) for _, r in g.iterrows()]
    return out


def failure_notes(g) -> list[str]:
    """What the rows of one turn say about a failure: error, fallback_reason, a failed role in verdict_reason."""
    notes = [x for x in g["error"].dropna()] + [x for x in g["fallback_reason"].dropna()]
    notes += [x for x in g["verdict_reason"].dropna() if "failed" in x]
    return notes


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    root = b2b_slice(tmp / "b2b-slice")
    es, index = slice_index(root)
    prewarm(index, es)
    return {"tmp": tmp, "root": root, "index": index, "runs": {}}


def replay(world, name: str, srv: TestServer, decide_srv: TestServer, timeout: float):
    """Every LLM role on `srv` except decide, which has a server of its own (see the decide test)."""
    roles = {r: endpoint(srv, timeout=timeout) for r in ROLES if r != "decide"}
    roles["decide"] = endpoint(decide_srv, timeout=timeout)
    raw = {"name": "faults", "eval_set": str(world["root"]), "splits": ["test"], "arms": LLM_ARMS,
           "runs_dir": str(world["tmp"] / "runs"), "concurrency": 8,
           "llm": {"cache": {"folder": str(world["tmp"] / f"cache-{name}"), "mode": "readwrite"}, "roles": roles}}
    run = Replay(parse_config(raw), raw, run_dir=world["tmp"] / "runs" / name, progress=False).run(index=world["index"])
    return run, read_traces(run).to_pandas()


def clean_run(world):
    if "clean" not in world["runs"]:
        with TestServer() as srv, TestServer() as dsrv:
            srv.add_rule(model_reply)
            dsrv.add_rule(model_reply)
            world["runs"]["clean"] = replay(world, "clean", srv, dsrv, timeout=30.0)
    return world["runs"]["clean"]


def fault_run(world, kind: str, on: str = "main"):
    """A run with `kind` injected into 30% of the requests of the main server (rewrite, hyde,
    grade, answer) or of the decide server."""
    name = f"{kind}-{on}"
    if name not in world["runs"]:
        clean_run(world)  # first: it also warms the embedding cache, so no faulty run blocks its event loop
        hang = kind == "hang"
        with TestServer(retry_after="0.01", hang_seconds=1.0) as srv, TestServer(retry_after="0.01", hang_seconds=1.0) as dsrv:
            srv.add_rule(model_reply)
            dsrv.add_rule(model_reply)
            (srv if on == "main" else dsrv).set_faults(kind, rate=0.3, seed=9)
            world["runs"][name] = replay(world, name, srv, dsrv, timeout=0.5 if hang else 10.0)
    return world["runs"][name]


def unexplained_differences(clean_t, t) -> list:
    base, now = outcomes(clean_t), outcomes(t)
    assert set(now) == set(base)
    noted = {key for key, g in t.groupby(KEY, sort=False) if failure_notes(g)}
    bad = []
    for key, rounds in now.items():
        if rounds != base[key] and key not in noted:
            diff = [c for c, a, b in zip(COMPARED, rounds[-1], base[key][-1]) if a != b]
            bad.append((key, diff))
    return bad


def test_the_undisturbed_run_records_no_failure(world):
    run, t = clean_run(world)
    assert len(t[t["is_final"]]) == TURNS * len(LLM_ARMS)
    notes = failure_notes(t)
    assert notes == [], notes[:3]
    c = read_manifest(run).counts
    assert c["fallbacks"] == 0 and c["errors"] == 0


@pytest.mark.parametrize("kind", FAULTS)
def test_a_run_with_faults_completes_and_every_affected_row_says_why(world, kind):
    clean, ct = clean_run(world)
    run, t = fault_run(world, kind)
    man = read_manifest(run).dump()
    assert man["status"] == "complete"

    # the run completed: the same turns, each once, as the undisturbed run
    final = t[t["is_final"]]
    assert len(final) == len(final.drop_duplicates(KEY)) == TURNS * len(LLM_ARMS)
    assert set(map(tuple, final[KEY].values.tolist())) == set(map(tuple, ct[ct["is_final"]][KEY].values.tolist()))
    assert (t.groupby(KEY)["is_final"].sum() == 1).all()

    # the faults hit, and were recorded on the rows, naming the fault
    notes = failure_notes(t)
    assert notes, f"no failure recorded with {kind} at 30%"
    assert all(FAULT_NOTE[kind] in n for n in notes), [n for n in notes if FAULT_NOTE[kind] not in n][:3]

    # every turn whose outcome differs from the undisturbed run says why
    bad = unexplained_differences(ct, t)
    assert bad == [], f"{len(bad)} turn(s) changed without a recorded failure: {bad[:3]}"

    # the manifest counts what the rows say
    c = man["counts"]
    assert c["turns"] == len(final) and c["rows"] == len(t)
    assert c["fallbacks"] == int(t["fallback_reason"].notna().sum())
    assert c["errors"] == int(t["error"].notna().sum())

    # metrics: unmeasured turns counted beside the mean, never a NaN mean, never a silent NaN
    res = compute_metrics(run)
    pt, agg = res.per_turn, res.aggregates
    silent = pt[pt["value"].isna() & pt["unmeasured"].isna()]
    assert silent.empty, silent.head(3).to_dict("records")
    assert (agg["mean"].isna() == (agg["n"] == 0)).all()
    allseg = agg[agg["segment"] == "all"].set_index(["arm_id", "metric"])
    for arm in res.arms:
        for m in ("recall@10", "ndcg@10", "mrr@10", "error_rate", "fallback_rate", "zero_results"):
            row = allseg.loc[(arm, m)]
            assert row["n"] + row["n_unmeasured"] == TURNS, (arm, m, row.to_dict())
        fb = final[final["arm_id"] == arm]["fallback_reason"].notna().mean()
        assert allseg.loc[(arm, "fallback_rate"), "mean"] == pytest.approx(fb)

    # no error reply entered the cache (a retry or a later run asks again)
    with sqlite3.connect(world["tmp"] / f"cache-{kind}-main" / "llm_cache.sqlite") as db:
        bodies = [json.loads(b) for (b,) in db.execute("SELECT body FROM replies")]
    assert bodies and all(isinstance(b, dict) and "error" not in b and b.get("choices") for b in bodies)


def test_a_failed_decide_call_is_recorded_on_the_row(world):
    _, ct = clean_run(world)
    _, t = fault_run(world, "500", on="decide")
    bad = unexplained_differences(ct, t)
    assert bad == [], f"{len(bad)} turn(s) changed without a recorded failure: {bad[:3]}"


def test_every_failed_role_call_is_counted_in_the_manifest(world):
    run, t = fault_run(world, "500")
    c = read_manifest(run).counts
    recorded = sum(bool(failure_notes(t.iloc[[i]])) for i in range(len(t)))
    assert c["fallbacks"] + c["errors"] == recorded


def test_a_failed_answer_is_counted_unmeasured_not_dropped(world):
    """The answer requests of some turns (chosen by their content, so whatever the order of the
    requests) fail with a 500 on every try, retries included."""
    def doomed(req):
        return schema_name(req) == "AnswerOutput" and len(json.dumps(user_json(req))) % 2 == 0

    with TestServer() as srv:
        srv.add_rule(model_reply, when=doomed, fault="500")
        srv.add_rule(model_reply)
        raw = {"name": "answer-fails", "eval_set": str(world["root"]), "splits": ["test"],
               "arms": [a for a in LLM_ARMS if a["name"] == "corrective"], "runs_dir": str(world["tmp"] / "runs"),
               "concurrency": 8,
               "llm": {"cache": {"folder": str(world["tmp"] / "cache-answer-fails"), "mode": "readwrite"},
                       "roles": {r: endpoint(srv) for r in ROLES}}}
        run = Replay(parse_config(raw), raw, run_dir=world["tmp"] / "runs" / "answer-fails", progress=False).run(
            index=world["index"])
    t = read_traces(run).to_pandas()
    final = t[t["is_final"]]
    assert final["fallback_reason"].fillna("").str.contains("answer failed").any()  # the case occurs
    assert not final["fallback_reason"].fillna("").str.contains("answer failed").all()
    agg = compute_metrics(run).aggregates
    row = agg[(agg["segment"] == "all") & (agg["metric"] == "answered") & agg["arm_id"].str.startswith("corrective")]
    assert int(row["n"].iloc[0] + row["n_unmeasured"].iloc[0]) == TURNS
