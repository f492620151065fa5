"""The demo's wall time with 1 and 2 worker processes: what `make demo` does (the three demo
configs, each `harness run ... --no-progress`, then `harness report` of the three runs), timed
step by step from outside, with `--workers 1` and as `make demo` runs it (no --workers: the
machine's cores, one worker per 500 planned turns at most; the table says how many each run got).
Every one of these runs is warm: the embeddings come from the shipped caches and the roles are
offline, so a run does no model call; the mtrag-un replay (3,549 turns) is the warm re-run the
workers are measured on (its replay seconds from the run record, without the scoring and the
report around it). The run folders go under runs/ as `bench-demo-*` and are removed after.

    .venv/bin/python bench/demo.py [--out FILE] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, emit, machine_note  # noqa: E402

CONFIGS = ["configs/mtrag.yaml", "configs/handbook.yaml", "configs/b2b.yaml"]
HARNESS = ROOT / ".venv" / "bin" / "harness"


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([str(HARNESS), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"harness {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return time.perf_counter() - t0


def demo(workers: int | None, stamp: str) -> dict:
    """One `make demo` with `--workers workers` (None: as make demo, the default): wall per step,
    replay seconds and turns per run."""
    load = os.getloadavg()[0]
    steps, runs, folders = {}, {}, []
    t0 = time.perf_counter()
    for c in CONFIGS:
        name = Path(c).stem
        run_id = f"bench-demo-{stamp}-w{workers or 'default'}-{name}"
        asked = ["--workers", str(workers)] if workers else []
        steps[name] = timed(["run", c, "--no-progress", *asked, "--run-id", run_id])
        folder = ROOT / "runs" / run_id
        man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        runs[name] = {"replay_s": man["counts"]["seconds"], "turns": man["counts"]["turns"],
                      "workers": man.get("workers") or 1}
        folders.append(folder)
    report = ROOT / "reports" / f"bench-demo-{stamp}-w{workers or 'default'}.html"
    steps["report"] = timed(["report", *map(str, folders), "-o", str(report)])
    wall = time.perf_counter() - t0
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)
    report.unlink(missing_ok=True)
    return {"workers": workers, "wall": wall, "steps": steps, "runs": runs, "load_start": load,
            "load_end": os.getloadavg()[0]}


def markdown(results: list[dict], note: str) -> str:
    one, many = results[0], results[1]
    warm1, warmn = one["runs"]["mtrag"], many["runs"]["mtrag"]
    lines = ["## The demo with one worker and with the default (bench/demo.py)", "",
             f"`make demo` (the three demo configs, then the report), timed per step, once per worker count. "
             f"Machine: {note}.", "",
             "| workers | demo wall (s) | mtrag run (s) | handbook run (s) | b2b run (s) | report (s) | "
             "workers used (mtrag/handbook/b2b) | load average at start / end |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["steps"]
        used = "/".join(str(r["runs"][n]["workers"]) for n in ("mtrag", "handbook", "b2b"))
        lines.append(f"| {r['workers'] or 'default (make demo)'} | **{r['wall']:.1f}** | {s['mtrag']:.1f} | {s['handbook']:.1f} | "
                     f"{s['b2b']:.1f} | {s['report']:.1f} | {used} | {r['load_start']:.2f} / {r['load_end']:.2f} |")
    speed = warm1["replay_s"] / warmn["replay_s"]
    lines += ["", f"Warm re-run (the mtrag-un demo replay, {warm1['turns']:,} turns, every embedding and role "
              f"reply already at hand, replay seconds from the run record): {warm1['replay_s']:.2f} s with "
              f"{one['workers'] or 1} worker ({1000 * warm1['replay_s'] / warm1['turns']:.2f} ms a turn), "
              f"{warmn['replay_s']:.2f} s with {warmn['workers']} ({1000 * warmn['replay_s'] / warmn['turns']:.2f} ms "
              f"a turn): **{speed:.2f}x**. A run's wall time adds the interpreter's start, the eval set, the index "
              "and the scoring, which workers do not split.", ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path, help="write the figures as JSON here (bench/all.py's targets table)")
    a = ap.parse_args(argv)
    note = machine_note()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = [demo(1, stamp), demo(None, stamp)]
    emit(markdown(results, note), a.out)
    one, many = results[0]["runs"]["mtrag"], results[1]["runs"]["mtrag"]
    figures = {"demo_wall_w1": results[0]["wall"], "demo_wall_default": results[1]["wall"],
               "mtrag_workers_default": many["workers"],
               "warm_speedup": one["replay_s"] / many["replay_s"], "load": [r["load_start"] for r in results]}
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return figures


if __name__ == "__main__":
    main()
