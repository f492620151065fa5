"""Evidence, the report's first section: for each run, whether it is complete (every planned turn
has its final row) or partial, whether its tables were scored again on reading and why, the turns
that failed per arm (an error, or an LLM call that failed after its retries), and the machine its
timings come from. Everything below rests on it."""
from __future__ import annotations

from harness.report.load import ReportRun
from harness.store.integrity import failures
from harness.store.record import Manifest


def _machine(man: Manifest) -> str:
    m = man.machine
    if m is None:
        return "not recorded (a run written before the manifest recorded it)"
    load = "/".join(f"{x:g}" for x in m.load_average or []) or "unknown"
    return f"{m.host}, {m.cpu_count} CPUs, load {load} at the start ({man.started or '?'})"


def _shard(r: ReportRun) -> str | None:
    """A shard's part of its eval set and what the gate does with it, or None for a whole run."""
    sh = r.manifest.shard
    if not sh:
        return None
    held = r.data.evidence.finals["session_id"].nunique()
    return (f"shard {sh.index}/{sh.of} of its run ({held} of {r.labels['session_id'].nunique()} sessions): the gate "
            "refuses it as a baseline until its shards are merged (`harness merge`), and as a candidate that does not "
            "cover its baseline unless the policy says `coverage: subset`")


def build(runs: list[ReportRun]) -> list[dict]:
    out = []
    for r in runs:
        ev = r.data.evidence
        fails = failures(r.folder, r.manifest)
        out.append({"key": r.key, "complete": ev.complete, "completeness": ev.completeness.describe(),
                    "rescored": list(ev.rescored), "stale": list(ev.stale), "failures": [f.describe() for f in fails],
                    "n_failed": sum(f.failed for f in fails), "machine": _machine(r.manifest),
                    "shard": _shard(r)})
    return out
