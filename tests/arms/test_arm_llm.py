"""Arms that name their own model and prompt (`llm:` per arm, per role, over the run's
llm.roles): the offline HQE rewrite beside an LLM rewrite in one run, paired turn by turn;
their ids name model and prompt hash; one client per role and endpoint; bad keys exit 2."""
import json

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.config import ConfigError, load_config
from harness.testing import TestServer
from tests.conftest import ROOT

B2B = ROOT / "eval_sets/b2b-shop"
REPLY = {"standalone": "stainless hex bolts M8", "must_keep": [], "filters": [], "confidence": 0.9, "variants": [],
         "clarify": None}


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "160"})
    assert "Traceback" not in r.output, r.output
    return r


def config(tmp_path, arms, roles=None, name="mixed"):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "terse.md").write_text("Rewrite the turn as a short standalone query.\n", encoding="utf-8")
    cfg = {"name": name, "eval_set": str(B2B), "runs_dir": str(tmp_path / "runs"), "concurrency": 4,
           "arms": arms, "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": "readwrite"},
                                 "roles": roles or {}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def endpoint(url, model="smol", **kw):
    return {"kind": "openai-compatible", "base_url": url, "model": model, "max_retries": 0, "timeout": 30, **kw}


def test_offline_hqe_and_an_llm_rewrite_pair_turn_by_turn_in_one_run(tmp_path):
    with TestServer() as srv:
        srv.add_rule(REPLY)
        path = config(tmp_path, [
            {"name": "rewrite", "lane": "bm25"},
            {"name": "rewrite", "lane": "bm25", "label": "rewrite-smol",
             "llm": {"rewrite": endpoint(srv.base_url, prompt="prompts/terse.md")}},
            {"name": "rewrite", "lane": "bm25", "label": "rewrite-big",
             "llm": {"rewrite": endpoint(srv.base_url, model="big")}}])
        r = invoke("run", path, "--no-progress", "--run-id", "mixed", "--workers", "1")
        assert r.exit_code == 0, r.output
        models = {json.loads(q.body)["model"] for q in srv.requests} if hasattr(srv.requests[0], "body") else \
            {q.json["model"] for q in srv.requests}
    assert models == {"smol", "big"}
    run = tmp_path / "runs" / "mixed"
    arms = {a["label"]: a for a in json.loads((run / "manifest.json").read_text())["arms"]}
    assert set(arms) == {"rewrite", "rewrite-smol", "rewrite-big"}
    ids = {k: a["arm_id"] for k, a in arms.items()}
    assert len(set(ids.values())) == 3
    assert "model=offline" in ids["rewrite"] and "method=hqe" in ids["rewrite"]
    assert "model=smol" in ids["rewrite-smol"] and "prompt.rewrite=terse@" in ids["rewrite-smol"]
    assert "model=big" in ids["rewrite-big"] and "prompt.rewrite=rewrite.v1@" in ids["rewrite-big"]
    assert arms["rewrite-smol"]["backends"] == {"rewrite": "smol"}
    c = invoke("compare", run, "--reference", "rewrite", "--metric", "recall@10", "-o", tmp_path / "cmp")
    assert c.exit_code == 0, c.output
    assert "rewrite-smol" in c.output and "rewrite-big" in c.output
    assert "model offline → smol" in c.output


def test_two_unlabelled_arms_of_one_name_and_other_models_get_labels_naming_them(tmp_path):
    from harness.arms.catalog import build_arms
    from harness.roles.base import Roles

    cfg, _ = load_config(config(tmp_path, [
        {"name": "rewrite", "llm": {"rewrite": endpoint("http://127.0.0.1:9/v1", model="a")}},
        {"name": "rewrite", "llm": {"rewrite": {"model": "b"}}}],
        roles={"rewrite": endpoint("http://127.0.0.1:9/v1", model="run-model")}))
    roles = Roles(cfg.llm, cfg.concurrency, base_dir=cfg.source_dir)
    arms = build_arms(cfg.configured_arms(), roles)
    assert sorted(a.label for a in arms) == ["rewrite model=a", "rewrite model=b"]
    assert len({a.arm_id for a in arms}) == 2
    merged = arms[1].roles.config.roles["rewrite"]  # over the run's endpoint: its base_url kept, its model replaced
    assert merged.model == "b" and merged.base_url == "http://127.0.0.1:9/v1" and merged.max_retries == 0
    same = build_arms(cfg.model_copy(update={"arms": [{"name": "rewrite"}, {"name": "rewrite", "lane": "bm25"}]})
                      .configured_arms(), Roles(cfg.llm, cfg.concurrency, base_dir=cfg.source_dir))
    assert same[0].roles.clients["rewrite"] is same[1].roles.clients["rewrite"]  # one client per endpoint
    assert len(roles.pool) == 3  # the run's rewrite endpoint and the two arms' own


@pytest.mark.parametrize("llm, where, says", [
    ({"rewirte": {"model": "x"}}, "llm.rewirte", "did you mean 'rewrite'"),
    ({"model": "x"}, "llm.model", "settings go under a role"),
    ({"rewrite": {"model": "x", "temprature": 0.5}}, "llm.rewrite.temprature", "did you mean 'temperature'"),
    ({"grade": {"kind": "openai-compatible", "model": "x", "base_url": "http://127.0.0.1:9/v1"}}, "llm.grade",
     "does not call the grade role"),
    ({"rewrite": {"model": "x", "prompt": "prompts/missing.md"}}, "llm.rewrite.prompt", "missing.md"),
])
def test_a_bad_per_arm_llm_key_exits_2_at_file_and_line(tmp_path, llm, where, says):
    path = config(tmp_path, ["original", {"name": "rewrite", "llm": llm}],
                  roles={"rewrite": endpoint("http://127.0.0.1:9/v1")})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if where.split(".")[-1] + ":" in text)
    assert f"{path}:{line}: arms.1.{where}:" in str(e.value) and says in str(e.value), str(e.value)
    r = invoke("run", path, "--no-progress")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_an_arm_can_run_a_role_offline_that_the_run_gives_an_endpoint(tmp_path):
    from harness.arms.catalog import build_arms
    from harness.roles.base import Roles

    cfg, _ = load_config(config(tmp_path, ["rewrite", {"name": "rewrite", "llm": {"rewrite": "offline"}}],
                                roles={"rewrite": endpoint("http://127.0.0.1:9/v1")}))
    arms = build_arms(cfg.configured_arms(), Roles(cfg.llm, cfg.concurrency, base_dir=cfg.source_dir))
    assert [dict(a.backends) for a in arms] == [{"rewrite": "smol"}, {"rewrite": "offline"}]
    assert "method=hqe" in arms[1].arm_id and "prompt." not in arms[1].arm_id
