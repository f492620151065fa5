"""Scoring's worker processes (harness.metrics.fanout) end with the process that started them: a
killed `harness metrics` left its pool's workers waiting on their queue, each holding a session
group's memory (seen: 2 GB apiece an hour after their parent was killed)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

SCRIPT = ("import sys; from harness.metrics.score import score_run; "
          "score_run(sys.argv[1], group_turns=5, workers=2)")


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", encoding="utf-8") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_workers_of_a_killed_scoring_leave_with_it(tmp_path):
    run = tmp_path / "b2b"
    shutil.copytree(ROOT / "runs/baselines/b2b", run)
    scratch = tmp_path / "tmp"  # a killed parent cannot remove its temporary folders: keep them in the test's
    scratch.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT, str(run)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(scratch)})
    try:
        workers: set[int] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None and len(workers) < 2:
            workers = children(parent.pid)  # its pool's workers (and multiprocessing's resource tracker)
            time.sleep(0.05)
        time.sleep(0.5)
        workers |= children(parent.pid)
        assert parent.poll() is None and workers, "the scoring ended before its workers could be seen"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if alive(w)], "a worker outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for w in children(parent.pid):
            os.kill(w, signal.SIGKILL)


def test_a_scoring_worker_that_dies_is_an_infrastructure_error_naming_the_way_out(tmp_path):
    """A worker killed under it (out of memory) surfaced as BrokenProcessPool: "internal error, a bug
    of the harness". It is infrastructure (exit 3), and the groups not started are not scored."""
    import pytest

    from harness.errors import Infrastructure
    from harness.metrics.fanout import Inputs, ScoringWorkerDied, pool

    with pytest.raises(ScoringWorkerDied, match="--workers 1") as caught:
        with pool(Inputs(tmp_path, None, [], tmp_path, None, None), 2) as ex:
            ex.submit(signal.raise_signal, signal.SIGKILL).result()
    assert isinstance(caught.value, Infrastructure)
