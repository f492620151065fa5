"""`make bench-scale` (not part of `make bench`, never run by CI): peak memory and wall time of
`harness metrics RUN` on synthetic runs of N labelled turns x 5 arms (bench/synth_run.py), each
scored in its own process under `/usr/bin/time -v`, with the machine and its load stated. Writes
the table to bench/results/scale.md (the measurements of issue 45 are kept there as written)."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import cpu_model  # noqa: E402
from synth_run import write_synthetic_run  # noqa: E402

HARNESS = Path(sys.executable).with_name("harness")


def measure(run: Path, timeout: int) -> dict:
    """Exit code, wall seconds and peak RSS (MB) of `harness metrics run` in its own process."""
    load = os.getloadavg()[0]
    r = subprocess.run(["/usr/bin/time", "-v", "timeout", str(timeout), str(HARNESS), "metrics", str(run)],
                       capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", r.stderr).group(1)
    secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    return {"exit": r.returncode, "wall": secs, "rss": rss, "load": load}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", default="10000,100000,200000", help="labelled turns per run, comma-separated")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per measurement")
    ap.add_argument("--out", type=Path, default=HERE / "results/scale-latest.md")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for n in (int(x) for x in a.turns.split(",")):
            run = Path(tmp) / f"r{n}"
            info = write_synthetic_run(run, n)
            m = measure(run, a.timeout)
            rows.append(f"| {n:,} | {info['rows']:,} | {m['exit']} | {m['wall']:.0f} | {m['rss']:,.0f} | {m['load']:.1f} |")
            print(rows[-1], flush=True)
    head = [f"# harness metrics at scale ({cpu_model()}, {os.cpu_count()} cores)", "",
            "| turns x 5 arms | trace rows | exit | wall s | peak RSS MB | load (1 min) at start |",
            "|---|---|---|---|---|---|"]
    a.out.write_text("\n".join(head + rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
