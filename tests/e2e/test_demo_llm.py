"""make demo-llm (scripts/demo_llm.py, configs/demo-llm/{b2b,handbook,mtrag}.yaml), offline: the configs
are valid and every LLM arm names the local model; without a server the demo exits 3 naming
`make local-llm`; against the scripted endpoint (harness.testing.server, serving the local model's
alias) the handbook slice runs end to end and its tables name the model of every number. Never the
real model (tests/llm_smoke is the place for that)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from harness.config import load_config
from harness.store.folder import RunFolder
from harness.testing.server import TestServer
from scripts.demo_llm import NOT_GENERAL, SLICES, cut, pick, _jsonl
from scripts.demo_llm_summary import MODEL, MODEL_NAME, summary
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts/demo_llm.py"
URL_ENV = "HARNESS_LOCAL_LLM_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", list(SLICES))
def test_each_config_is_valid_and_its_llm_arms_name_the_local_model(name, monkeypatch):
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9/v1")
    cfg, _ = load_config(ROOT / f"configs/demo-llm/{name}.yaml")
    plans = cfg.configured_arms()
    llm = [p for p in plans if p.llm]
    assert llm and len(llm) < len(plans)  # LLM arms beside offline ones
    assert cfg.repeats >= 2
    for p in llm:
        assert MODEL_NAME in p.label, p.label
        assert all(ep.model == MODEL and ep.temperature > 0 for ep in p.llm.values()), p.label
    assert all(MODEL_NAME not in (p.label or "") for p in plans if not p.llm)
    assert {r: ep.model for r, ep in cfg.llm.roles.items()} == {"judge": MODEL, "relevance": MODEL}


def test_every_llm_role_of_the_arms_is_in_some_config(monkeypatch):
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9/v1")
    roles = {r for name in SLICES for p in load_config(ROOT / f"configs/demo-llm/{name}.yaml")[0].configured_arms()
             for r in p.llm}
    assert roles == {"rewrite", "decide", "hyde", "grade", "answer"}


def test_the_handbook_slice_has_every_question_type():
    rows = pick("handbook", _jsonl(ROOT / "eval_sets/handbook-de/sessions.jsonl"))
    kinds = {s["turns"][0]["labels"]["query_type"] for s in rows}
    assert kinds == {"direct", "misleading", "borderline", "unanswerable"}


def test_a_slice_is_the_same_every_time(tmp_path):
    one = (cut("b2b", tmp_path / "a") / "sessions.jsonl").read_text(encoding="utf-8")
    two = (cut("b2b", tmp_path / "b") / "sessions.jsonl").read_text(encoding="utf-8")
    assert one == two and one.count("\n") == SLICES["b2b"][1]["sessions"]


def test_without_a_server_it_exits_3_naming_make_local_llm(tmp_path):
    env = {"PATH": "/usr/bin:/bin", URL_ENV: f"http://127.0.0.1:{_free_port()}/v1", "HARNESS_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "make local-llm" in r.stderr and "no LLM server answers" in r.stderr
    assert not (tmp_path / "runs").exists()


def reply_from_schema(req: dict):
    """A valid reply to any strict json_schema request: the first enum value, a short string, false, 0.5, []."""
    schema = ((req.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if not schema:
        return "OK"
    defs = schema.get("$defs", {})

    def value(node: dict):
        if "$ref" in node:
            return value(defs[node["$ref"].split("/")[-1]])
        if "anyOf" in node:
            return value(next(n for n in node["anyOf"] if n.get("type") == "null") if any(
                n.get("type") == "null" for n in node["anyOf"]) else node["anyOf"][0])
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        return {"object": lambda: {k: value(v) for k, v in node.get("properties", {}).items()},
                "string": lambda: "Urlaub Anspruch", "boolean": lambda: False, "number": lambda: 0.5,
                "integer": lambda: 0, "array": lambda: [], "null": lambda: None}[kind]()

    return value(schema)


def test_the_demo_on_the_scripted_endpoint_names_the_model_of_every_number(tmp_path):
    with TestServer(models=(MODEL,)) as srv:
        srv.add_rule(reply_from_schema)
        env = {"PATH": "/usr/bin:/bin", URL_ENV: srv.base_url, "HARNESS_HOME": str(tmp_path),
               "RAGAS_DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
               "MPLCONFIGDIR": str(tmp_path / "mpl"), "NUMBA_CACHE_DIR": str(ROOT / ".cache/numba")}
        r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--sets", "handbook", "--stamp", "t"],
                           env=env, capture_output=True, text=True, timeout=900)
        assert srv.calls > 0
    said = r.stdout + r.stderr
    assert r.returncode == 0, said[-3000:]
    assert "Traceback" not in said
    assert (tmp_path / "reports/demo-llm-t.html").is_file() and "reports/demo-llm-t.html" in r.stdout
    assert NOT_GENERAL in r.stdout
    arms = [line for line in r.stdout.splitlines() if line.startswith("| ") and " | offline | " in line
            or f" | {MODEL_NAME} | " in line]
    assert any(f"corrective ({MODEL_NAME}) | {MODEL_NAME} |" in line for line in arms), r.stdout
    assert any(line.startswith("| original | offline |") for line in arms), r.stdout
    roles = {line.split(" | ")[0][2:] for line in r.stdout.split("per role")[1].splitlines() if line.startswith("| ")}
    assert {"rewrite", "grade", "answer"} <= roles, r.stdout
    assert (tmp_path / ".cache/llm-demo/llm_cache.sqlite").is_file()
    assert f"relevance labels ({MODEL_NAME}) against people's" in r.stdout  # Cohen's kappa per run
    # a warm demo sends no replay call: the summary of a role none was sent for has no row
    warm = summary([tmp_path / "runs/demo-llm-t-handbook"], since=time.time() + 60, cache=tmp_path / ".cache/llm-demo")
    roles_warm = warm.split("per role")[1]
    assert "| rewrite |" not in roles_warm and "| answer |" not in roles_warm, warm  # none sent: no row (it divided by 0)
    assert "demo-llm-t-handbook: agreement with people's labels on" in r.stdout, r.stdout
    # the steps after the replay reached the endpoint: harness judge reads the recorded config, whose
    # ${HARNESS_LOCAL_LLM_URL} is not expanded (every judgment failed with a connection error)
    folder = RunFolder(tmp_path / "runs/demo-llm-t-handbook")
    for frame in (folder.judgments(), folder.relevance_labels()):
        assert len(frame) and not frame["status"].str.contains("Connection error").any(), frame["status"].unique()
