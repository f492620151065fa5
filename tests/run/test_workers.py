"""`harness run --workers N` (issue 28): the sessions split over N processes with the shard
partition, joined into one run folder that equals a one-process run under runs_equal; how many
workers a run gets; one progress display; the embedding cache shared by workers writing at once."""
from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from harness.config import parse_config
from harness.errors import BadInput
from harness.run import parallel
from harness.store.equality import runs_equal
from harness.store.folder import RunFolder
from harness.run.parallel import WORKERS_DIR, workers_for
from harness.store.shard import shard_of
from harness.run.replay import TURNS_PER_REQUEST, Replay
from harness.run.shard_worker import WorkerTask, share_of, worker_replay
from harness.store.traces import read_traces
from tests.conftest import ROOT, TINY_DOCS, TINY_SESSIONS, write_set
from tests.evidence import invoke
from tests.reliability_helpers import HARNESS

ARMS = ["original", "concat", "rewrite", "oracle"]


def sessions(copies: int) -> list[dict]:
    return [{**s, "session_id": f"{s['session_id']}-{k}"} for k in range(copies) for s in TINY_SESSIONS]


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """The tiny set with 8 sessions (copies of the tiny ones under new ids), so both workers get some."""
    root = write_set(tmp_path_factory.mktemp("es") / "eight", docs=TINY_DOCS, sessions=sessions(4))
    assert {shard_of(s["session_id"], 2) for s in sessions(4)} == {0, 1}
    return root


def config(tmp_path, root, **extra) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "eval_set": str(root), "arms": ARMS, "runs_dir": str(tmp_path / "runs"),
                                    **extra}), encoding="utf-8")
    return path


def test_shares_split_a_total_over_workers():
    assert [share_of(16, 2, i) for i in range(2)] == [8, 8]
    assert [share_of(3, 2, i) for i in range(2)] == [2, 1]
    assert [share_of(10, 4, i) for i in range(4)] == [3, 3, 2, 2]
    assert [share_of(1, 3, i) for i in range(3)] == [1, 1, 1]  # at least one each
    for total in range(1, 40):
        for n in range(1, total + 1):
            assert sum(share_of(total, n, i) for i in range(n)) == total


def test_a_worker_has_its_share_of_the_slots_and_a_one_process_runs_turns_in_progress(eight, tmp_path):
    """Request slots split (the run keeps `concurrency` LLM requests in flight in all); the turns in
    progress not: a worker's turns reach the retrieval thread in batches as large as one process's."""
    raw = yaml.safe_load(config(tmp_path, eight, concurrency=5).read_text())
    task = WorkerTask(raw=raw, where="<config>", source_dir=None, index=1, of=2, folder=tmp_path / "shard-1",
                      run_id="r", concurrency=share_of(5, 2, 1), resume=False)
    rp = worker_replay(task)
    assert rp.cfg.concurrency == rp.roles.concurrency == 2
    one = Replay(parse_config(raw), raw, run_dir=tmp_path / "one", progress=False)
    assert rp.lanes == one.lanes == TURNS_PER_REQUEST * 5
    assert rp.shard == (1, 2) and rp.run_id == "r"


def test_two_workers_equal_one_process_on_the_tiny_set(eight, tmp_path):
    cfg = config(tmp_path, eight)
    for n in (2, 1):
        r = invoke("run", cfg, "--run-id", f"w{n}", "--workers", n, "--no-progress")
        assert r.exit_code == 0, r.output
    w1, w2 = tmp_path / "runs/w1", tmp_path / "runs/w2"
    assert runs_equal(w1, w2) == []
    m1, m2 = RunFolder(w1).read_manifest(), RunFolder(w2).read_manifest()
    assert (m1.workers, m2.workers, m2.status, m2.run_id, m2.shard) == (1, 2, "complete", "w2", None)
    assert [s["shard"] for s in m2.merged_from] == [{"index": 0, "of": 2}, {"index": 1, "of": 2}]
    assert all(s["counts"]["turns"] > 0 for s in m2.merged_from)  # each worker replayed some sessions
    assert m2.counts["turns"] == m1.counts["turns"] == 12 * len(ARMS)
    assert m2.config == m1.config  # the config that ran: neither the workers' shares nor their shard
    assert set(read_traces(w2, ["run_id"]).column("run_id").to_pylist()) == {"w2"}  # the run's id on every row
    assert not (w2 / WORKERS_DIR).exists()  # the shard folders are gone once joined
    before = (w2 / "manifest.json").read_bytes()
    r = invoke("run", "--resume", w2, "--no-progress")  # joined already: nothing to resume
    assert r.exit_code == 0 and (w2 / "manifest.json").read_bytes() == before, r.output


def test_an_error_every_worker_meets_before_replaying_is_the_runs_and_leaves_no_folder(eight, tmp_path):
    """Here a spend cap without a price for its model (the roles refuse it as each worker starts):
    exit 2 with the roles' message, and no run folder, as one process leaves none."""
    llm = {"max_cost_usd": 1.0, "roles": {"rewrite": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1",
                                                      "model": "unpriced"}}}
    r = invoke("run", config(tmp_path, eight, llm=llm), "--run-id", "x", "--workers", 2, "--no-progress")
    assert r.exit_code == 2 and "role rewrite model 'unpriced'" in r.output, r.output
    assert not (tmp_path / "runs/x").exists()


def with_one_and_two_workers(raw: dict, tmp_path) -> tuple:
    """The config `raw` run by `harness run` with --workers 2 and --workers 1 (runs w2 and w1 under
    tmp_path/runs), both clean, their folders equal under runs_equal. Returns (w1, w2)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    for n in (2, 1):
        r = subprocess.run([str(HARNESS), "run", str(path), "--workers", str(n), "--run-id", f"w{n}", "--no-progress"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Traceback" not in r.stderr
    w1, w2 = tmp_path / "runs/w1", tmp_path / "runs/w2"
    assert runs_equal(w1, w2) == []
    return w1, w2


def test_a_shipped_config_slice_with_two_workers_equals_one_process(tmp_path):
    """configs/b2b.yaml with four of its arms (dense and lexical lanes, the offline HQE and rules
    rewrites, HyDE's vector feedback) over the shipped embedding cache, as `harness run` runs it."""
    raw = yaml.safe_load((ROOT / "configs/b2b.yaml").read_text(encoding="utf-8"))
    keep = [a for a in raw["arms"] if a in ("original", "rewrite", "rewrite_hyde") or isinstance(a, dict)]
    raw.update(arms=keep, eval_set=str(ROOT / "eval_sets/b2b-shop"), runs_dir=str(tmp_path / "runs"))
    w1, w2 = with_one_and_two_workers(raw, tmp_path)
    m2 = RunFolder(w2).read_manifest()
    assert m2.workers == 2 and m2.counts["turns"] == RunFolder(w1).read_manifest().counts["turns"] == 204 * len(keep)


def test_how_many_workers_a_run_gets(eight, tmp_path, monkeypatch):
    cfg = parse_config(yaml.safe_load(config(tmp_path, eight).read_text()))
    assert workers_for(cfg, 3, None, None) == 3
    assert workers_for(cfg.model_copy(update={"workers": 2}), None, None, None) == 2
    assert workers_for(cfg.model_copy(update={"workers": 2}), 1, None, None) == 1  # the command line wins
    # the default: the machine's cores, one per TURNS_PER_WORKER planned turns (48 here)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert workers_for(cfg, None, None, None) == 1
    monkeypatch.setattr(parallel, "TURNS_PER_WORKER", 10)
    assert workers_for(cfg, None, None, None) == 4
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert workers_for(cfg, None, None, None) == 2
    assert workers_for(cfg, None, (0, 2), None) == 1  # a shard is one process
    for asked, c in ((2, cfg), (None, cfg.model_copy(update={"workers": 2}))):
        with pytest.raises(BadInput, match="a shard is replayed in one process"):
            workers_for(c, asked, (0, 2), None)


def test_what_workers_refuse_is_a_clean_message(eight, tmp_path):
    llm = {"roles": {"rewrite": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "model": "m"}}}
    cfg = config(tmp_path, eight, concurrency=2, llm=llm)
    r = invoke("run", cfg, "--workers", 3, "--no-progress")
    assert r.exit_code == 2 and "more workers than concurrency 2" in " ".join(r.output.split())
    r = invoke("run", config(tmp_path, eight), "--workers", 2, "--shard", "0/2", "--no-progress")
    assert r.exit_code == 2 and "--workers 2 with --shard 0/2: a shard is replayed in one process" in r.output
    assert not (tmp_path / "runs").exists()
    assert invoke("run", config(tmp_path, eight), "--run-id", "one", "--workers", 1, "--no-progress").exit_code == 0
    r = invoke("run", "--resume", tmp_path / "runs/one", "--workers", 2, "--no-progress")
    assert r.exit_code == 2 and "was replayed in one process" in r.output


def test_one_progress_display_from_the_parent(eight, tmp_path):
    """Off a terminal the parent prints progress lines (harness.run.progress: every LINE_EVERY
    seconds, at 25/50/75/100 %); the workers print none of their own."""
    r = subprocess.run([str(HARNESS), "run", str(config(tmp_path, eight)), "--workers", "2", "--no-metrics"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [x for x in r.stderr.splitlines() if "turns" in x and "replay" in x]
    assert lines and lines[-1].startswith(f"replay: {12 * len(ARMS)} of {12 * len(ARMS)} turns (100%), 2 workers, ")
    assert all(x.startswith("replay: ") for x in lines), lines  # no rich bar, no worker's own line
    assert "━" not in r.stderr + r.stdout


def test_workers_writing_new_embeddings_at_once_share_the_cache(eight, tmp_path):
    """Two workers embed the corpus and their queries into one empty cache folder at once: every
    shard is whole (written under a temporary name, then renamed), none is left half-written, and
    a one-process run then finds every vector there and equals the workers' run."""
    cache = tmp_path / "emb"
    cfg = config(tmp_path, eight, index={"embedding_cache": str(cache)})
    assert invoke("run", cfg, "--run-id", "cold", "--workers", 2, "--no-progress").exit_code == 0
    assert RunFolder(tmp_path / "runs/cold").read_manifest().counts["embeddings_cold"] > 0
    files = sorted(p for p in cache.rglob("*") if p.is_file() and p.relative_to(cache).parts[0] != "lexical")
    assert files and all(p.name.startswith("shard-") and p.suffix == ".npz" for p in files), files
    assert [p.name.startswith(".") for p in (cache / "lexical").iterdir()] == [False]  # one entry, no temporary
    import numpy as np

    for p in files:
        with np.load(p) as z:
            assert len(z["keys"]) == len(z["vecs"]) > 0
    assert invoke("run", cfg, "--run-id", "warm", "--workers", 1, "--no-progress").exit_code == 0
    warm = RunFolder(tmp_path / "runs/warm").read_manifest()
    assert warm.counts["embeddings_cold"] == 0
    assert runs_equal(tmp_path / "runs/cold", tmp_path / "runs/warm") == []
