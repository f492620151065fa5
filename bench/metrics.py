"""All metrics of a large run folder: TURNS synthetic turns x 5 arms (bench/synth_run.py: rankings
of DEPTH documents, a corrective arm with 1-3 rounds, answers, filters, identifiers, n/a turns,
errors) written as a run folder (manifest, labels.parquet, trace parts via rows_to_table).

Each measurement runs in a child process of its own, so its peak memory (ru_maxrss) is its own:
- ranx's first compilation: import ranx and evaluate a 3-query run with an empty numba cache
  (a fresh NUMBA_CACHE_DIR), then again (compiled);
- compute_metrics (harness/metrics: array kernels per family) on the whole run, seconds per stage, then
  write_metrics (metrics.parquet, streamed);
- the reference implementation (tests/oracle_metrics.py) on a REFERENCE_TURNS slice of the same generator (it needs hours at
  100,000 turns: per-turn pandas work), its time per turn, and whether both give identical
  aggregates on that slice.

    .venv/bin/python bench/metrics.py [--turns 100000] [--depth 100] [--reference-turns 1000]
                                      [--out bench/results/metrics.md]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit, machine_note, peak_rss_mb  # noqa: E402


def child(kind: str, path: str) -> dict:
    if kind == "ranx":
        t0 = time.perf_counter()
        from ranx import Qrels, Run, evaluate

        t_import = time.perf_counter() - t0
        names = ["recall@5", "recall@10", "recall@20", "ndcg@10", "mrr@10"]
        q = {"q1": {"a": 1}, "q2": {"b": 2, "c": 1}, "q3": {"d": 1}}
        r = {"q1": {"a": 3.0, "x": 2.0}, "q2": {"c": 1.0, "b": 0.5}, "q3": {"y": 1.0}}
        t0 = time.perf_counter()
        evaluate(Qrels(q), Run(r), names)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        evaluate(Qrels(q), Run(r), names)
        second = time.perf_counter() - t0
        return {"import": t_import, "first": first, "second": second}
    if kind == "fast":
        from harness.metrics.compute import compute_metrics, write_metrics

        timings: dict = {}
        t0 = time.perf_counter()
        res = compute_metrics(Path(path), timings=timings)
        compute_s = time.perf_counter() - t0
        peak_compute = peak_rss_mb()
        t0 = time.perf_counter()
        write_metrics(Path(path), res)
        return {"compute": compute_s, "write": time.perf_counter() - t0, "peak_compute_mb": peak_compute,
                "peak_mb": peak_rss_mb(), "per_turn_rows": len(res.per_turn), "aggregates": len(res.aggregates),
                "timings": {k: v for k, v in timings.items() if not k.startswith("peak")}}
    if kind == "reference":
        import pandas as pd

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from harness.metrics.compute import compute_metrics
        from tests.oracle_metrics import reference_metrics

        t0 = time.perf_counter()
        ref = reference_metrics(Path(path))
        s = time.perf_counter() - t0
        peak = peak_rss_mb()
        fast = compute_metrics(Path(path))
        key = ["arm_id", "repeat", "session_id", "turn_index", "metric"]
        try:
            ak = ["arm_id", "metric", "segment"]
            pd.testing.assert_frame_equal(ref.aggregates.sort_values(ak).reset_index(drop=True),
                                          fast.aggregates.sort_values(ak).reset_index(drop=True), check_exact=True)
            a, b = (x.per_turn.astype({"arm_id": str, "session_id": str, "metric": str}).sort_values(key)
                    for x in (ref, fast))
            same = bool((a["value"].fillna(-1).to_numpy() == b["value"].fillna(-1).to_numpy()).all())
        except AssertionError:
            same = False
        return {"seconds": s, "peak_mb": peak, "identical": same}
    raise SystemExit(f"unknown child {kind}")


def run_child(kind: str, path: Path, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        raise RuntimeError(f"child {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--reference-turns", type=int, default=1000, help="slice for the reference implementation (0: skip)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return {}
    from synth_run import write_synthetic_run

    note = machine_note()
    tmp = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    t0 = time.perf_counter()
    gen = write_synthetic_run(tmp / "run", args.turns, args.depth)
    gen_s = time.perf_counter() - t0
    size_mb = sum(p.stat().st_size for p in (tmp / "run").rglob("*") if p.is_file()) / 1e6
    ranx = run_child("ranx", tmp, {"NUMBA_CACHE_DIR": str(tmp / "numba-cold")})
    fast = run_child("fast", tmp / "run")
    ref = None
    if args.reference_turns:
        write_synthetic_run(tmp / "ref", args.reference_turns, args.depth)
        ref = run_child("reference", tmp / "ref")
    f = {"note": note, "gen": gen, "gen_s": gen_s, "size_mb": size_mb, "ranx": ranx, "fast": fast, "ref": ref,
         "ref_turns": args.reference_turns, "turns": args.turns, "depth": args.depth}
    emit(to_markdown(f), args.out)
    return f


def to_markdown(f: dict) -> str:
    g, fa, rx, ref = f["gen"], f["fast"], f["ranx"], f["ref"]
    lines = ["## Metrics at scale (bench/metrics.py)", "",
             f"Workload: {g['turns']:,} synthetic turns x {g['arms']} arms = {g['rows']:,} trace rows ({g['parts']} parts, "
             f"{f['size_mb']:.0f} MB), rankings of {g['depth']} documents out of 50,000; generated in {f['gen_s']:.0f} s "
             f"(not timed below). Machine: {f['note']}.", "",
             "| what | time | peak memory |", "|---|---|---|",
             f"| ranx first compilation (empty numba cache): import {rx['import']:.1f} s + first evaluate | "
             f"{rx['first']:.1f} s (then {rx['second'] * 1000:.0f} ms) | |",
             f"| **compute_metrics**, all metrics, {fa['per_turn_rows']:,} per-turn values, {fa['aggregates']:,} aggregates "
             f"| **{fa['compute']:.1f} s** | **{fa['peak_compute_mb'] / 1024:.2f} GB** |",
             f"| write_metrics (metrics.parquet, streamed) | {fa['write']:.1f} s "
             f"| {fa['peak_mb'] / 1024:.2f} GB (whole child process) |"]
    if ref:
        per_turn = ref["seconds"] / f["ref_turns"]
        lines.append(f"| reference implementation (tests/oracle_metrics.py) on {f['ref_turns']:,} turns (same generator) | {ref['seconds']:.1f} s "
                     f"({per_turn * 1000:.0f} ms per turn; x{f['turns'] // f['ref_turns']} = about "
                     f"{per_turn * f['turns'] / 60:.0f} min at {f['turns']:,} turns) | {ref['peak_mb'] / 1024:.2f} GB |")
        lines.append(f"| kernels and reference identical on that slice | {'yes' if ref['identical'] else 'NO'} | |")
    lines += ["", "Stages of compute_metrics: " + ", ".join(f"{k} {v:.1f} s" for k, v in fa["timings"].items()) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
