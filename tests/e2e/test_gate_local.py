"""make gate-local (scripts/gate_local.py, configs/demo-llm/gate-local*.yaml), offline: a PROMPT that
names nothing, or one identical to its baseline, is refused (exit 2); without a server it exits 3
naming `make local-llm`; against a scripted endpoint serving the local model's alias
(harness.testing.server) it replays both prompts, passes the gate's exit code through (0 when the
edit changes no reply, 1 when it makes the rewrites worse) and names both prompt hashes. Never the
real model."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from harness.config import load_config
from harness.testing.server import TestServer, prompt_hash
from scripts.demo_llm_summary import MODEL
from tests.conftest import ROOT
from tests.e2e.test_demo_llm import reply_from_schema

SCRIPT = ROOT / "scripts/gate_local.py"
URL_ENV = "HARNESS_LOCAL_LLM_URL"
MARK = "- Write the standalone query as the letters zzz."  # the edit's one line: the scripted model obeys it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path, url: str) -> dict:
    return {"PATH": "/usr/bin:/bin", URL_ENV: url, "HARNESS_HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "RAGAS_DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1", "MPLCONFIGDIR": str(tmp_path / "mpl"),
            "NUMBA_CACHE_DIR": str(ROOT / ".cache/numba")}


def _gate_local(tmp_path, *args: str, url: str | None = None) -> subprocess.CompletedProcess:
    url = url or f"http://127.0.0.1:{_free_port()}/v1"
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(tmp_path / "out")],
                          env=_env(tmp_path, url), capture_output=True, text=True, timeout=900, cwd=ROOT)


def _edit(tmp_path, line: str) -> tuple:
    """The committed rewrite prompt (HEAD's) as a file, and that file with `line` appended: (base, edit)."""
    text = subprocess.run(["git", "show", "HEAD:configs/prompts/rewrite.md"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    base, edit = tmp_path / "base" / "rewrite.md", tmp_path / "edit" / "rewrite.md"
    for p, t in ((base, text), (edit, text + line + "\n")):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(t, encoding="utf-8")
    return base, edit


def test_the_config_replays_the_rewrite_role_on_the_local_model_at_temperature_0(monkeypatch):
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9/v1")
    cfg, _ = load_config(ROOT / "configs/demo-llm/gate-local.yaml")
    ep = cfg.llm.roles["rewrite"]
    assert (ep.model, ep.temperature, ep.base_url) == (MODEL, 0.0, "http://127.0.0.1:9/v1")
    assert cfg.llm.cache.folder.startswith(".cache/")
    assert [p.spec["name"] for p in cfg.configured_arms()] == ["rewrite"]


@pytest.mark.parametrize("given", ["HEAD:configs/prompts/rewrite.md", "HEAD"])
def test_an_edit_identical_to_its_baseline_is_refused(tmp_path, given):
    r = _gate_local(tmp_path, given)  # the default baseline: the same file at HEAD
    assert r.returncode == 2, r.stdout + r.stderr
    assert "identical to the baseline prompt" in r.stderr and "nothing to gate" in r.stderr
    head = subprocess.run(["git", "show", "HEAD:configs/prompts/rewrite.md"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    assert f"prompt hash {prompt_hash(head)}" in r.stderr
    assert not (tmp_path / "out/runs").exists()


def test_two_files_with_one_text_are_identical_too(tmp_path):
    base, _ = _edit(tmp_path, "")
    r = _gate_local(tmp_path, str(base), "--baseline", "HEAD:configs/prompts/rewrite.md")
    assert r.returncode == 2 and "nothing to gate" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("given, flag", [("configs/prompts/no-such.md", None), ("no-such-ref", None),
                                         ("HEAD:configs/prompts/no-such.md", None),
                                         ("configs/prompts/rewrite.md", "--baseline")])
def test_a_prompt_that_names_nothing_is_refused_naming_it(tmp_path, given, flag):
    args = ("configs/prompts/rewrite.md", flag, "nothing-here.md") if flag else (given,)
    r = _gate_local(tmp_path, *args)
    said = r.stdout + r.stderr
    assert r.returncode == 2, said
    assert ("BASELINE=nothing-here.md" if flag else f"PROMPT={given}") in r.stderr and "Traceback" not in said


def test_without_a_server_it_exits_3_naming_make_local_llm(tmp_path):
    base, edit = _edit(tmp_path, "- Keep it short.")
    r = _gate_local(tmp_path, str(edit), "--baseline", str(base))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "make local-llm" in r.stderr and "no LLM server answers" in r.stderr
    assert not (tmp_path / "out/runs").exists()


def _scripted(req: dict):
    """The model of the test: the standalone query is the turn with the user's earlier turns (a fair
    rewrite), or "zzz" when the system prompt says MARK; the rest valid for the schema."""
    out = reply_from_schema(req)
    system = req["messages"][0]["content"]
    state = json.loads(req["messages"][-1]["content"])
    if isinstance(out, dict) and "standalone" in out:
        said = " ".join([*(t["user"] for t in state.get("last_turns", [])), state["turn"]])
        out["standalone"] = "zzz" if MARK in system else said[:150]
    return out


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """Two gates on one scripted endpoint and one output folder: a harmless edit (a line the model
    ignores) against HEAD's prompt named as a git REF:PATH, then a harmful one (MARK) against the same
    text as a file; the second replays the baseline from the LLM cache."""
    tmp = tmp_path_factory.mktemp("gate-local")
    out = {}
    with TestServer(models=(MODEL,)) as srv:
        srv.add_rule(_scripted)
        for name, line in (("harmless", "- Keep it short."), ("harmful", MARK)):
            base, edit = _edit(tmp / name, line)
            calls = srv.calls
            given = "HEAD:configs/prompts/rewrite.md" if name == "harmless" else str(base)
            r = _gate_local(tmp, str(edit), "--baseline", given, "--stamp", name, url=srv.base_url)
            out[name] = (r, base, edit, srv.calls - calls)
    return tmp, out


def test_a_harmless_edit_passes_and_both_prompt_hashes_are_named(gated):
    tmp, out = gated
    r, base, edit, calls = out["harmless"]
    said = r.stdout + r.stderr
    assert r.returncode == 0, said[-3000:]
    assert "Traceback" not in said and calls > 0
    hb, he = (prompt_hash(p.read_text(encoding="utf-8")) for p in (base, edit))
    assert hb != he and f"HEAD:configs/prompts/rewrite.md: prompt hash {hb}" in r.stdout
    assert f"{edit}: prompt hash {he}" in r.stdout
    assert f"pass (exit 0) for the edit {he} against the baseline {hb}" in r.stdout
    # the arm ids' prompt refs, as the gate's pair line shows them
    gate = json.loads((tmp / "out/reports/gate-local-harmless/gate.json").read_text(encoding="utf-8"))
    change = next(c for p in gate["pairs"] for c in p["changes"] if c.startswith("prompt.rewrite "))
    before, after = change.split(" ", 1)[1].split(" → ")
    assert before != after and f"prompt.rewrite={before}" in r.stdout and f"prompt.rewrite={after}" in r.stdout


def test_a_harmful_edit_does_not_pass_and_its_exit_code_is_passed_through(gated):
    """Every rewrite "zzz": rule 1 fails, as a regression or (10 sessions: the set's smallest
    detectable drop may exceed the bound) as insufficient data; both exit 1, and the closing line
    says the gate's own verdict, not a word of its own."""
    tmp, out = gated
    r, base, edit, calls = out["harmful"]
    said = r.stdout + r.stderr
    assert r.returncode == 1, said[-3000:]
    verdict = json.loads((tmp / "out/reports/gate-local-harmful/gate.json").read_text(encoding="utf-8"))["verdict"]
    assert verdict in ("regression", "insufficient data")
    assert "failed: rule 1: noninferiority recall@10 [all]" in r.stdout, r.stdout[-3000:]
    assert f"{verdict} (exit 1) for the edit {prompt_hash(edit.read_text(encoding='utf-8'))}" in r.stdout
    assert 0 < calls <= out["harmless"][3] // 2 + 1  # the baseline came from the LLM cache, the edit was asked
