"""`harness run --workers N` against the scripted endpoint (issue 28): the run's `concurrency`
and spend cap hold across its workers, two workers write one LLM cache at once with the replies a
one-process run reads back, and a run whose worker fails (an error, SIGKILL) or whose parent is
SIGKILLed is continued by `--resume` to the run one process makes."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness.store.equality import runs_equal
from harness.store.folder import RunFolder
from harness.run.parallel import WORKERS_DIR
from harness.store.shard import shard_of
from harness.testing import TestServer
from tests.conftest import TINY_DOCS, TINY_SESSIONS, write_set
from tests.reliability_helpers import HARNESS, b2b_slice, embeddings_copy, endpoint, model_reply
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

LEXICAL = [{"name": "original", "lane": "bm25"}, {"name": "concat", "lane": "bm25"}, {"name": "oracle", "lane": "bm25"}]


def harness(*args, cwd, timeout=300):
    r = subprocess.run([str(HARNESS), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    return r


def write(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("workers-llm")
    return tmp, b2b_slice(tmp / "b2b-slice")


def slice_config(tmp: Path, root: Path, srv, cache: Path, **extra) -> dict:
    return {"name": "w", "eval_set": str(root), "splits": ["test"], "runs_dir": str(tmp / "runs"),
            "index": {"embedding_cache": str(embeddings_copy())},
            "arms": LEXICAL + [{"name": "rewrite", "lane": "bm25"}, {"name": "multi_query_rrf", "lane": "bm25"}],
            "llm": {"cache": {"folder": str(cache), "mode": "readwrite"}, "roles": {"rewrite": endpoint(srv, timeout=30.0)}},
            **extra}


def test_two_workers_keep_concurrency_and_write_one_cache_a_one_process_run_reads(world):
    """concurrency 3 over 2 workers (2 + 1 request slots): never more than 3 requests at the
    endpoint; both workers write the cache at once; a one-process run in replay mode then finds
    every reply there and equals the workers' run."""
    tmp, root = world
    cache = tmp / "cache-a"
    with TestServer(latency=0.05) as srv:
        srv.add_rule(model_reply)
        cfg = write(tmp / "a.yaml", slice_config(tmp, root, srv, cache, concurrency=3))
        r = harness("run", cfg, "--workers", 2, "--run-id", "a2", "--no-progress", cwd=tmp)
        assert r.returncode == 0, r.stderr[-3000:]
        asked = {json.dumps(q.json, sort_keys=True) for q in srv.requests}
        assert 0 < srv.peak_in_flight <= 3
    man = RunFolder(tmp / "runs/a2").read_manifest()
    assert man.workers == 2 and all(s["counts"]["http_calls"] > 0 for s in man.merged_from)  # both wrote the cache
    with sqlite3.connect(cache / "llm_cache.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == len(asked)
    # the endpoint is gone: replay mode must find every request of the run in the cache
    r = harness("run", cfg, "--workers", 1, "--run-id", "a1", "--llm-cache", "replay", "--no-progress", cwd=tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    assert RunFolder(tmp / "runs/a1").read_manifest().counts["http_calls"] == 0
    assert runs_equal(tmp / "runs/a1", tmp / "runs/a2") == []


REWRITE = {"standalone": "holiday days", "must_keep": [], "filters": [], "confidence": 0.9, "variants": [],
           "clarify": None}
PER_TOKEN = 1000.0  # USD per million completion tokens: a reply of n tokens costs n/1000 USD


def test_the_spend_cap_holds_for_the_run_across_workers_and_resume_continues_it(tmp_path):
    """A cap of 6.5 calls' cost over 2 workers of one slot each (24 calls to make, at least 8 per
    worker): the run stops with exit 3 having paid for at most the cap plus the 2 requests in flight
    when it was reached, as one process at concurrency 2 may; each worker alone with the whole cap
    would have paid for about 13. `--resume --max-cost-usd` then finishes it, equal to one process."""
    ids = [s["session_id"] for s in sessions16()]
    assert min(sum(2 if i.startswith("s1") else 1 for i in ids if shard_of(i, 2) == w) for w in (0, 1)) >= 8
    es = write_set(tmp_path / "set", docs=TINY_DOCS, sessions=sessions16())
    per_call = len(json.dumps(REWRITE).split()) * PER_TOKEN / 1e6
    (tmp_path / "prices.yaml").write_text(f"scripted: {{input: 0.0, output: {PER_TOKEN}}}\n")
    with TestServer(latency=0.05) as srv:
        srv.add_rule(REWRITE)
        ep = {"kind": "openai-compatible", "base_url": srv.base_url, "model": "scripted", "max_retries": 0}
        raw = {"name": "capped", "eval_set": str(es), "runs_dir": str(tmp_path / "runs"), "concurrency": 2,
               "arms": [{"name": "rewrite", "lane": "bm25"}],
               "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": "readwrite"}, "roles": {"rewrite": ep},
                       "prices": str(tmp_path / "prices.yaml"), "max_cost_usd": 6.5 * per_call}}
        cfg = write(tmp_path / "capped.yaml", raw)
        r = harness("run", cfg, "--workers", 2, "--run-id", "c", "--no-progress", cwd=tmp_path)
        paid = srv.calls
        assert r.returncode == 3, r.stderr[-3000:]
        said = " ".join(r.stderr.split())
        assert "budget exceeded" in said and "across the run's worker processes" in said
        assert f"harness run --resume {tmp_path / 'runs/c'} --max-cost-usd N" in said
        assert 7 <= paid <= 6.5 + 2  # the cap's calls, at most the 2 in flight past it
        man = RunFolder(tmp_path / "runs/c").read_manifest()
        assert man.status == "failed" and "BudgetExceeded" in man.failure and (tmp_path / "runs/c" / WORKERS_DIR).is_dir()

        r = harness("run", "--resume", tmp_path / "runs/c", "--max-cost-usd", 1000, "--no-progress", cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert len({json.dumps(q.json, sort_keys=True) for q in srv.requests}) == 24
    r = harness("run", cfg, "--workers", 1, "--run-id", "one", "--llm-cache", "replay", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    man = RunFolder(tmp_path / "runs/c").read_manifest()
    assert man.status == "complete" and man.workers == 2 and not (tmp_path / "runs/c" / WORKERS_DIR).exists()
    assert runs_equal(tmp_path / "runs/one", tmp_path / "runs/c") == []


def sessions16() -> list[dict]:
    """16 copies of the tiny sessions, each copy's turns worded apart (every request distinct)."""
    return [{**s, "session_id": f"{s['session_id']}-{k}",
             "turns": [{**t, "user": f"{t['user']} (copy {k})"} for t in s["turns"]]}
            for k in range(8) for s in TINY_SESSIONS]


def children(pid: int) -> list[int]:
    """The worker processes of `harness run` (pid): its children, forked or spawned, other than
    multiprocessing's resource tracker."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"resource_tracker" not in cmd:
            out.append(int(stat.parent.name))
    return sorted(out)


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_and_wait_for_a_part(tmp: Path, cfg: Path, run_id: str):
    """`harness run --workers 2` started, once a worker has written its first trace part."""
    proc = subprocess.Popen([str(HARNESS), "run", str(cfg), "--workers", "2", "--run-id", run_id, "--no-progress",
                             "--no-metrics"], cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp / "runs" / run_id / WORKERS_DIR).glob("shard-*/traces/part-*.parquet")):
        assert proc.poll() is None, f"the run ended before its first part: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no trace part after 120 s"
        time.sleep(0.02)
    return proc


@pytest.fixture(scope="module")
def killable(world):
    """A config whose workers take a few seconds (one request slot each, 0.3 s a request, trace
    parts of 3 rows), with its endpoint up."""
    tmp, root = world
    with TestServer(latency=0.3) as srv:
        srv.add_rule(model_reply)
        cfg = write(tmp / "k.yaml", slice_config(tmp, root, srv, tmp / "cache-k", concurrency=2, rows_per_part=3))
        yield tmp, cfg, srv


def resume_and_compare(tmp: Path, cfg: Path, run: Path, srv: TestServer):
    """`--resume` finishes the run (the endpoint at full speed now: its slowness was only there
    to catch the workers mid-run), then equals one process's run of the config."""
    slow, srv.latency = srv.latency, 0.0
    try:
        r = harness("run", "--resume", run, "--no-progress", cwd=tmp)
    finally:
        srv.latency = slow
    assert r.returncode == 0, r.stderr[-3000:]
    man = RunFolder(run).read_manifest()
    assert man.status == "complete" and man.workers == 2 and not (run / WORKERS_DIR).exists()
    one = tmp / "runs/k-one"
    if not one.exists():
        assert harness("run", cfg, "--workers", 1, "--run-id", "k-one", "--no-progress", cwd=tmp).returncode == 0
    assert runs_equal(one, run) == []


def test_a_killed_worker_fails_the_run_and_resume_continues_it(killable):
    tmp, cfg, srv = killable
    proc = start_and_wait_for_a_part(tmp, cfg, "kw")
    try:
        workers = children(proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = " ".join(err.split())
    assert proc.returncode == 3, err[-3000:]
    assert "killed by signal 9" in said and f"harness run --resume {tmp / 'runs/kw'}" in said and "Traceback" not in err
    man = RunFolder(tmp / "runs/kw").read_manifest()
    assert man.status == "failed" and "WorkerDied" in man.failure
    assert not [p for p in workers if alive(p)]  # the other worker was stopped
    resume_and_compare(tmp, cfg, tmp / "runs/kw", srv)


def test_a_killed_run_takes_its_workers_with_it_and_resume_continues_it(killable):
    tmp, cfg, srv = killable
    proc = start_and_wait_for_a_part(tmp, cfg, "kp")
    try:
        workers = children(proc.pid)
        assert len(workers) == 2, workers
        # forked from `harness run` (harness.run.parallel.start_method), not fresh interpreters
        assert not [p for p in workers if b"spawn_main" in (Path("/proc") / str(p) / "cmdline").read_bytes()]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    deadline = time.monotonic() + 30
    while [p for p in workers if alive(p)]:
        assert time.monotonic() < deadline, f"workers outlived their run: {[p for p in workers if alive(p)]}"
        time.sleep(0.05)
    assert RunFolder(tmp / "runs/kp").read_manifest().status == "running"
    # they stopped because their parent died, not because their shard was done (a forked worker
    # still holding its lifeline's sending end would replay on: the lifeline never closed)
    begun = [d for d in (tmp / "runs/kp" / WORKERS_DIR).glob("shard-*") if (d / "manifest.json").is_file()]
    assert begun and all(RunFolder(d).read_manifest().status == "running" for d in begun)
    resume_and_compare(tmp, cfg, tmp / "runs/kp", srv)
