"""The test suite's slowest tests, as `make test` runs it (2 processes, pytest-xdist's loadfile,
the files longest first; its --durations=15): runs `make -s test` once (about 6 minutes on 2
cores) and writes the 15 slowest setup/call/teardown times, the suite's total and the machine's
load to bench/results/durations.md (bench/all.py puts the last result into latest.md; `make bench`
does not run it).

    .venv/bin/python bench/durations.py [--out bench/results/durations.md]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, emit, machine_note  # noqa: E402

LINE = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "durations.md")
    args = ap.parse_args(argv)
    note = machine_note()
    t0 = time.perf_counter()
    r = subprocess.run(["make", "-s", "test"], cwd=ROOT, capture_output=True, text=True)  # the Makefile's pytest line
    wall = time.perf_counter() - t0
    rows = [m.groups() for m in map(LINE.match, r.stdout.splitlines()) if m]
    summary = next((x for x in reversed(r.stdout.splitlines()) if " in " in x and ("passed" in x or "failed" in x)), "")
    lines = ["## Test suite durations (bench/durations.py)", "",
             f"`make test` (its pytest line: 2 processes, --durations=15): {summary.strip('= ')}; {wall:.0f} s wall. "
             f"Machine: {note}.", "",
             "| seconds | phase | test |", "|---|---|---|"]
    lines += [f"| {s} | {phase} | `{test}` |" for s, phase, test in rows]
    emit("\n".join(lines + [""]), args.out)
    print(r.stdout[-3000:])
    return r.returncode


if __name__ == "__main__":
    raise SystemExit(main())
