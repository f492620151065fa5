"""Reliability (issue 9), property 2: kill and resume.

`harness run CONFIG --run-id X` is started as a subprocess (an LLM arm against the test server
with a small latency, plus offline arms; small trace parts through the config's `rows_per_part`)
and SIGKILLed at a random point after its first trace part exists; `harness run --resume` then
finishes it. The resumed run has the same trace keys as an uninterrupted run, none twice, none
missing, and is equal to it under the run equality rule, with a warm cache. A part that was in
flight (`.parquet.tmp`) or truncated (renamed to `.parquet` anyway) is detected by the resume,
set aside and its turns replayed."""
from __future__ import annotations

import random
import signal
import subprocess
import time

import pytest
import yaml
from typer.testing import CliRunner

from harness.config import parse_config
from harness.store.equality import runs_equal
from harness.store.manifest import read_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.testing import TestServer
from harness.store.traces import KEY, read_traces
from tests.reliability_helpers import HARNESS, b2b_slice, embeddings_copy, endpoint, model_reply, slice_index
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

TURNS = 25
# Lexical lanes: the dense lane's scores drift with the in-memory index's search history (see
# DENSE_DRIFT below), a gap of its own that would make this file's equality checks flaky.
OFFLINE = [{"name": "original", "lane": "bm25"}, {"name": "concat", "lane": "bm25"}, {"name": "oracle", "lane": "bm25"}]


def keys(run) -> list[tuple]:
    t = read_traces(run, list(KEY)).to_pandas()
    return [tuple(r) for r in t[list(KEY)].itertuples(index=False)]


def harness(*args, cwd, timeout=120):
    r = subprocess.run([str(HARNESS), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    return r


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    root = b2b_slice(tmp / "b2b-slice")
    return tmp, root


def test_sigkill_at_a_random_point_then_resume_equals_an_uninterrupted_run(world):
    tmp, root = world
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    with TestServer(latency=0.25) as srv:
        srv.add_rule(model_reply)
        cfg = {"name": "resume", "eval_set": str(root), "splits": ["test"], "runs_dir": str(tmp / "runs"),
               "index": {"embedding_cache": str(embeddings_copy())}, "rows_per_part": 3, "concurrency": 2,
               "arms": OFFLINE + [{"name": "rewrite", "lane": "bm25"}],
               "llm": {"cache": {"folder": str(tmp / "llm-cache"), "mode": "readwrite"},
                       "roles": {"rewrite": endpoint(srv, timeout=30.0)}}}
        path = tmp / "resume.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        run_x = tmp / "runs" / "X"

        proc = subprocess.Popen([str(HARNESS), "run", str(path), "--run-id", "X", "--no-progress", "--no-metrics"],
                                cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while not list((run_x / "traces").glob("part-*.parquet")):
                assert proc.poll() is None, f"the run ended before its first part: {proc.stderr.read()[-2000:]}"
                assert time.monotonic() < deadline, "no trace part after 90 s"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 2.0))
            assert proc.poll() is None, f"the run finished before the kill (seed {seed}): make it longer"
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()

        killed = keys(run_x)
        assert 0 < len(set(killed)), f"seed {seed}"
        assert read_manifest(run_x).status == "running"

        r = harness("run", "--resume", run_x, "--no-progress", cwd=tmp)
        assert r.returncode == 0, f"seed {seed}: {r.stderr[-2000:]}"
        # uninterrupted, warm cache, a fresh index (as `harness run` would, in this process to save a start-up)
        _, index = slice_index(root)
        run_y = Replay(parse_config(cfg), cfg, run_dir=tmp / "runs" / "Y", progress=False).run(index=index)
        write_metrics(run_y, compute_metrics(run_y))

    kx, ky = keys(run_x), keys(run_y)
    assert len(ky) == len(set(ky)) == TURNS * 4
    assert len(kx) == len(set(kx)), f"seed {seed}: duplicate trace keys after resume"
    assert set(kx) == set(ky), f"seed {seed}: missing {set(ky) - set(kx)}, extra {set(kx) - set(ky)}"
    man_x, man_y = read_manifest(run_x).dump(), read_manifest(run_y).dump()
    assert man_x["status"] == "complete"
    c = man_x["counts"]
    assert c["turns_skipped_resume"] == len(set(killed)), f"seed {seed}: {c}"  # one row per turn for these arms
    assert c["turns"] + c["turns_skipped_resume"] == TURNS * 4, f"seed {seed}: {c}"
    assert man_y["counts"]["http_calls"] == 0  # everything the killed and the resumed run asked was cached
    assert runs_equal(run_x, run_y) == [], f"seed {seed}"


@pytest.fixture
def offline_run(world):
    """An uninterrupted in-process run of the offline arms with parts of 4 rows, and a factory
    for more runs of the same config."""
    tmp, root = world

    def make(name, resume=False, arms=OFFLINE):
        if name == "ref" and (tmp / "parts" / "ref" / "metrics.parquet").exists():
            return tmp / "parts" / "ref"  # one uninterrupted reference per module
        _, index = slice_index(root)  # a fresh index per run, as in a new process
        raw = {"name": "parts", "eval_set": str(root), "splits": ["test"], "arms": arms,
               "runs_dir": str(tmp / "parts"), "rows_per_part": 4}
        out = Replay(parse_config(raw), raw, run_dir=tmp / "parts" / name, progress=False, resume=resume).run(index=index)
        write_metrics(out, compute_metrics(out))
        return out

    return make


def test_a_part_in_flight_is_removed_and_its_turns_replayed(offline_run, capsys):
    ref = offline_run("ref")
    run = offline_run("tmp-part")
    parts = sorted((run / "traces").glob("part-*.parquet"))
    assert len(parts) >= 3
    lost = parts[-1]  # the last part was being written when the run was killed
    data = lost.read_bytes()
    lost.unlink()
    (lost.parent / (lost.name + ".tmp")).write_bytes(data[: len(data) // 3])
    assert len(set(keys(run))) < TURNS * len(OFFLINE)

    offline_run("tmp-part", resume=True)
    assert not list((run / "traces").glob("*.tmp"))
    assert f"removed part(s) in flight when the run stopped: {lost.name}.tmp; their turns are replayed" in capsys.readouterr().err
    k = keys(run)
    assert len(k) == len(set(k)) == TURNS * len(OFFLINE)
    assert read_manifest(run).counts["trace_parts_tmp_removed"] == 1
    assert runs_equal(ref, run) == []


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_part_is_set_aside_and_its_turns_replayed(offline_run, capsys, damage):
    ref = offline_run("ref")
    run = offline_run(damage)
    part = sorted((run / "traces").glob("part-*.parquet"))[1]
    data = part.read_bytes()
    part.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"PAR1" + b"\0" * 64 + b"PAR1"}[damage])

    offline_run(damage, resume=True)
    err = capsys.readouterr().err
    assert f"moved unreadable part(s) aside as *.corrupt: {part.name}; their turns are replayed" in err
    assert (part.parent / (part.name + ".corrupt")).exists() and not part.exists()
    k = keys(run)
    assert len(k) == len(set(k)) == TURNS * len(OFFLINE)
    assert read_manifest(run).counts["trace_parts_quarantined"] == 1
    assert runs_equal(ref, run) == []


def test_metrics_on_a_damaged_run_folder_is_a_clear_error(offline_run):
    from harness.cli import app

    run = offline_run("metrics-damaged")
    part = sorted((run / "traces").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    r = CliRunner().invoke(app, ["metrics", str(run)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.exception
    assert part.name in r.output and "--resume" in r.output


DENSE_DRIFT = ("qdrant-client's local mode renormalises the stored vectors in place on every cosine search, so "
               "dense scores drift by ~1e-7 with the in-memory index's search history: the same query gets other "
               "candidate scores depending on when it runs, and a resumed hybrid run can differ from an "
               "uninterrupted one. Fix in harness/corpus/index.py; see docs/reliability.md, known gaps")


def test_the_same_query_gets_the_same_candidates_wherever_it_runs_in_a_hybrid_run(offline_run):
    """On a session's first turn `original` and `concat` issue the same query with the same
    filters; the very first search of the run is one of them."""
    run = offline_run("hybrid", arms=["original", "concat"])
    t = read_traces(run).to_pandas()
    first = t[t["turn_index"] == 1]
    by_arm = {a: g.set_index("session_id")["candidates"] for a, g in first.groupby("arm")}
    assert (first.groupby("session_id")["issued_queries"].agg(lambda q: len({tuple(x) for x in q})) == 1).all()
    differ = [s for s in by_arm["original"].index if list(by_arm["original"][s]) != list(by_arm["concat"][s])]
    assert differ == []


def test_the_same_dense_query_scores_the_same_every_time(world):
    _, root = world
    _, index = slice_index(root)
    runs = [index.dense(["stainless steel hex bolt M10 x 40"], 100)[0] for _ in range(4)]
    assert all([(h.doc_id, h.score) for h in r] == [(h.doc_id, h.score) for h in runs[0]] for r in runs)
