"""The demo's wall time with 1 and 2 worker processes: what `make demo` does (the three demo
configs, each `harness run ... --no-progress`, then `harness report` of the three runs), timed
step by step from outside, with `--workers 1` and as `make demo` runs it (no --workers: the
machine's cores, one worker per 500 planned turns at most; the table says how many each run got).
Every one of these runs is warm: the embeddings come from the shipped caches and the roles are
offline, so a run does no model call. The warm re-run the workers are measured on is the mtrag-un
replay (3,549 turns), run again REPEATS times with each worker count, the two alternating (each
first in every other pair; `harness run configs/mtrag.yaml --no-metrics`): its replay seconds from
the run record (without the scoring), the speed-up the ratio of the medians. One pair of runs is not enough here: the same
replay's seconds moved by a third between runs minutes apart on this machine. The run folders go
under runs/ as `bench-demo-*` and are removed after.

    .venv/bin/python bench/demo.py [--out FILE] [--json FILE] [--repeats N]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, emit, machine_note  # noqa: E402

CONFIGS = ["configs/mtrag.yaml", "configs/handbook.yaml", "configs/b2b.yaml"]
REPEATS = 5  # warm re-runs per worker count
HARNESS = ROOT / ".venv" / "bin" / "harness"


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([str(HARNESS), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"harness {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return time.perf_counter() - t0


def replay_record(folder: Path) -> dict:
    """What a run folder's manifest says of its replay: seconds, turns, workers used."""
    man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    return {"replay_s": man["counts"]["seconds"], "turns": man["counts"]["turns"], "workers": man.get("workers") or 1}


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
        runs[name] = replay_record(folder)
        folders.append(folder)
    report = ROOT / "reports" / f"bench-demo-{stamp}-w{workers or 'default'}.html"
    steps["report"] = timed(["report", *map(str, folders), "-o", str(report)])
    wall = time.perf_counter() - t0
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)
    report.unlink(missing_ok=True)
    return {"workers": workers, "wall": wall, "steps": steps, "runs": runs, "load_start": load,
            "load_end": os.getloadavg()[0]}


def warm_reruns(stamp: str, repeats: int) -> dict:
    """The mtrag-un replay `repeats` times with --workers 1 and as make demo runs it, alternating:
    the replay seconds of each, turns, workers used, load average at the start."""
    out = {"1": [], "default": [], "load": os.getloadavg()[0]}
    for k in range(repeats):
        for w in ("1", "default") if k % 2 == 0 else ("default", "1"):  # neither always first
            run_id = f"bench-demo-{stamp}-warm{k}-w{w}"
            timed(["run", CONFIGS[0], "--no-progress", "--no-metrics", "--run-id", run_id,
                   *(["--workers", w] if w == "1" else [])])
            folder = ROOT / "runs" / run_id
            rec = replay_record(folder)
            out[w].append(rec["replay_s"])
            out["turns"], out[f"workers_{w}"] = rec["turns"], rec["workers"]
            shutil.rmtree(folder, ignore_errors=True)
    out["load_end"] = os.getloadavg()[0]
    return out


def markdown(results: list[dict], note: str, warm: dict) -> str:
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
    m1, mn = statistics.median(warm["1"]), statistics.median(warm["default"])
    lines += ["", f"In the demos above, the mtrag-un replay took {warm1['replay_s']:.2f} s with 1 worker and "
              f"{warmn['replay_s']:.2f} s with {warmn['workers']} (replay seconds from the run record).", "",
              f"Warm re-run (the mtrag-un demo replay, {warm['turns']:,} turns, every embedding and role reply "
              f"already at hand; {len(warm['1'])} runs with each worker count, alternating, load average "
              f"{warm['load']:.2f} at the start and {warm['load_end']:.2f} at the end): with 1 worker "
              f"{', '.join(f'{x:.2f}' for x in warm['1'])} s (median {m1:.2f}, {1000 * m1 / warm['turns']:.2f} ms a "
              f"turn); with {warm['workers_default']} {', '.join(f'{x:.2f}' for x in warm['default'])} s (median "
              f"{mn:.2f}, {1000 * mn / warm['turns']:.2f} ms a turn): **{m1 / mn:.2f}x** (medians; the best of each "
              f"{min(warm['1']) / min(warm['default']):.2f}x). A run's wall time adds the interpreter's start, the "
              "eval set, the index and the scoring, which workers do not split.", ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path, help="write the figures as JSON here (bench/all.py's targets table)")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="warm re-runs per worker count")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats: at least 1")
    note = machine_note()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = [demo(1, stamp), demo(None, stamp)]
    warm = warm_reruns(stamp, a.repeats)
    emit(markdown(results, note, warm), a.out)
    figures = {"demo_wall_w1": results[0]["wall"], "demo_wall_default": results[1]["wall"],
               "mtrag_workers_default": warm["workers_default"],
               "warm_speedup": statistics.median(warm["1"]) / statistics.median(warm["default"]),
               "warm_reruns": warm, "load": [r["load_start"] for r in results]}
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return figures


if __name__ == "__main__":
    main()
