"""One command measured as `make bench-scale` measures a stage: in its own process under
`/usr/bin/time -v` (wall clock, user and system CPU, the largest single process's peak RSS), with
the whole process tree's memory sampled twice a second (the sum of its processes' RSS and PSS: a
replay's workers are processes of their own, and PSS counts the pages a forked worker shares with
its parent once), and the load average before and after."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SAMPLE_S = 0.5


@dataclass
class Measured:
    exit: int
    wall_s: float
    cpu_s: float  # user + system, every process of the tree that was waited for
    max_rss_mb: float  # /usr/bin/time: the largest one process reached
    tree_rss_mb: float  # the largest sum of RSS over the tree, as sampled
    tree_pss_mb: float  # the largest sum of PSS over the tree, as sampled
    load_before: float
    load_after: float

    def dump(self) -> dict:
        return asdict(self)


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="utf-8") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(d))
    return out


def _tree(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _memory(pid: int) -> tuple[float, float]:
    """RSS and PSS of one process in MB (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8")
    except OSError:
        return 0.0, 0.0
    rss = re.search(r"^Rss:\s+(\d+) kB", text, re.M)
    pss = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    return (int(rss.group(1)) / 1024 if rss else 0.0), (int(pss.group(1)) / 1024 if pss else 0.0)


class _Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.rss, self.pss, self.done = pid, 0.0, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            mem = [_memory(p) for p in _tree(self.pid)]
            self.rss = max(self.rss, sum(m[0] for m in mem))
            self.pss = max(self.pss, sum(m[1] for m in mem))
            self.done.wait(SAMPLE_S)


def _seconds(clock: str) -> float:
    return sum(float(x) * 60 ** i for i, x in enumerate(reversed(clock.split(":"))))


def measure(cmd: list[str], log: Path, timeout: int | None = None) -> Measured:
    """Runs `cmd` under /usr/bin/time -v (its output and time's report into `log`)."""
    load_before = os.getloadavg()[0]
    full = ["/usr/bin/time", "-v", *(["timeout", str(timeout)] if timeout else []), *cmd]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT)
        sampler = _Sampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.done.set()
        sampler.join()
    text = log.read_text(encoding="utf-8", errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    user = re.search(r"User time \(seconds\): (\S+)", text)
    system = re.search(r"System time \(seconds\): (\S+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return Measured(exit=code, wall_s=_seconds(wall.group(1)) if wall else float("nan"),
                    cpu_s=float(user.group(1)) + float(system.group(1)) if user and system else float("nan"),
                    max_rss_mb=int(rss.group(1)) / 1024 if rss else float("nan"),
                    tree_rss_mb=sampler.rss, tree_pss_mb=sampler.pss, load_before=load_before,
                    load_after=os.getloadavg()[0])


def wait_a_moment() -> None:
    """A pause between stages, so that one stage's exit does not overlap the next's start."""
    time.sleep(1.0)
