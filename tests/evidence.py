"""Run folders made from the committed b2b baseline the way a CI engineer would break them: split
into parts and cut short as a killed run leaves it, traces edited after scoring, a shard or one
split only. Shared by the evidence tests."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from harness.cli import app
from harness.store.shard import shard_of
from harness.store.traces import SCHEMA
from tests.conftest import ROOT

BASELINE = ROOT / "runs/baselines/b2b"
POLICY = ROOT / "configs/gate.yaml"


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def gate(out: Path, base, cand, policy=POLICY, *extra):
    return invoke("gate", "--baseline", base, "--candidate", cand, "--policy", policy, "-o", out, *extra)


def copy_run(dst: Path, src: Path = BASELINE) -> Path:
    shutil.copytree(src, dst)
    return dst


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text(encoding="utf-8"))


def write_manifest(run: Path, man: dict) -> None:
    (run / "manifest.json").write_text(json.dumps(man, indent=2), encoding="utf-8")


def traces(run: Path) -> pd.DataFrame:
    """Every row, in the order the replay queues its jobs (arm by arm in the manifest's order)."""
    t = pd.concat([pq.read_table(p, schema=SCHEMA).to_pandas() for p in sorted((run / "traces").glob("part-*.parquet"))],
                  ignore_index=True)
    order = {a["arm_id"]: i for i, a in enumerate(manifest(run)["arms"])}
    t["_arm"] = t["arm_id"].map(order)
    return t.sort_values(["_arm", "repeat", "session_id", "turn_index", "round"]).drop(columns="_arm") \
        .reset_index(drop=True)


def write_traces(run: Path, t: pd.DataFrame, parts: int = 1) -> list[Path]:
    """The rows as `parts` parts of about equal size, a turn never split, in the given order."""
    for p in (run / "traces").glob("part-*"):
        p.unlink()
    turn = t[["arm_id", "repeat", "session_id", "turn_index"]].astype(str).agg("|".join, axis=1)
    ids = pd.factorize(turn)[0]
    n = ids.max() + 1
    out = []
    for i in range(parts):
        rows = t[(ids * parts // n) == i]
        path = run / "traces" / f"part-{i:05d}-test{i:04d}.parquet"
        pq.write_table(pa.Table.from_pandas(rows, schema=SCHEMA, preserve_index=False), path)
        out.append(path)
    return out


def killed(dst: Path, parts: int = 17, kept: int = 16) -> Path:
    """The baseline as a run killed with kill -9 after `kept` of `parts` trace parts: the part in
    flight lost, the manifest still `running` (as written at the start)."""
    run = copy_run(dst)
    paths = write_traces(run, traces(run), parts)
    for p in paths[kept:]:
        p.unlink()
    man = manifest(run)
    man.update(status="running", ended=None, counts={})
    write_manifest(run, man)
    return run


def labels(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "labels.parquet")


def sharded(dst: Path, i: int = 0, n: int = 2) -> Path:
    """The baseline as `harness run --shard i/n` writes it (labels of the whole set, the traces of
    the shard's sessions), scored."""
    run = copy_run(dst)
    t = traces(run)
    write_traces(run, t[t["session_id"].map(lambda s: shard_of(s, n) == i)])
    man = manifest(run)
    man["shard"] = {"index": i, "of": n}
    write_manifest(run, man)
    assert invoke("metrics", run).exit_code == 0
    return run


def one_split(dst: Path, split: str = "main") -> Path:
    """The baseline as a run with `splits: [SPLIT]` writes it, scored."""
    run = copy_run(dst)
    lab = labels(run)
    keep = lab[lab["split"] == split]
    pq.write_table(pa.Table.from_pandas(keep, preserve_index=False).cast(pq.read_schema(run / "labels.parquet")),
                   run / "labels.parquet")
    t = traces(run)
    write_traces(run, t[t["session_id"].isin(set(keep["session_id"]))])
    man = manifest(run)
    man["config"]["splits"] = [split]
    man["eval_set"]["splits"] = [split]
    write_manifest(run, man)
    assert invoke("metrics", run).exit_code == 0
    return run


def seal(run: Path, llm_failed: float = 0.0) -> Path:
    """A constructed run folder (its metrics written by hand, tests.analysis.test_compare_gate.make_run)
    made whole as the replay and the scorer would leave it: a final trace row for every labelled
    turn of every arm and repeat (with an error where its `error_rate` value is 1, an LLM call that
    failed on the first `llm_failed` share of each arm's rows), status complete, and its tables
    stamped as computed from the folder as it is now. Call it again after editing the folder by hand."""
    from harness.metrics.provenance import certify, metadata, stamp
    from harness.store.folder import METRICS, TABLES, RunFolder
    from harness.store.integrity import completeness
    from harness.store.traces import rows_to_table

    man = manifest(run)
    man.update(status="complete", repeats=man.get("repeats") or 1)
    write_manifest(run, man)
    lab = labels(run)
    m = pd.read_parquet(run / "metrics.parquet")
    errs = m[(m["metric"] == "error_rate") & (m["value"] == 1)] if "kind" in m else m.iloc[:0]
    errs = set(zip(errs["arm_id"], errs["session_id"], errs["turn_index"].astype(int)))
    keys = list(zip(lab["session_id"], lab["turn_index"].astype(int)))
    rows = [{"run_id": run.name, "arm_id": a["arm_id"], "arm": a.get("arm"), "repeat": r, "session_id": s,
             "turn_index": t, "round": 1, "is_final": True,
             "error": "RuntimeError: constructed" if (a["arm_id"], s, t) in errs else None,
             "llm_failed": int(i < llm_failed * len(keys)),
             "fallback_reason": "rewrite failed: constructed" if i < llm_failed * len(keys) else None}
            for a in man["arms"] for r in range(man["repeats"]) for i, (s, t) in enumerate(keys)]
    (run / "traces").mkdir(exist_ok=True)
    for p in (run / "traces").glob("part-*"):
        p.unlink()
    pq.write_table(rows_to_table(rows), run / "traces" / "part-00000-sealed00.parquet")
    folder = RunFolder(run)
    man = folder.read_manifest()
    files = {"metrics": run / METRICS, **{name: run / f for name, f in TABLES.items()}}
    tables = {name: pq.read_table(p) for name, p in files.items() if p.is_file()}
    # the stamp certifies the values written by hand, as scoring's certifies those it computes
    meta = metadata(certify(stamp(folder, man, completeness(folder, man)), {n: [t] for n, t in tables.items()}))
    extra = {k.encode(): v.encode() for k, v in meta.items()}
    for name, t in tables.items():
        pq.write_table(t.replace_schema_metadata({**(t.schema.metadata or {}), **extra}), files[name])
    return run
