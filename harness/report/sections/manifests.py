"""Run manifests side by side (the report's last section): what defines each run (run, eval set,
git, retrieval, models and prompts per role, arms, versions, counts), rows that differ between
runs highlighted; per run its arms with their labels and backends, and its config. Paths are
shown relative to the working folder (format.scrub), never as absolute paths of the machine."""
from __future__ import annotations

import json

from harness.report.format import scrub
from harness.report.load import ReportRun


def _s(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_s(x)}" for k, x in sorted(v.items()))
    if isinstance(v, list):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def arm_params(a: dict) -> str:
    """The parameter part of an arm id: `depth=100,lane=hybrid` of `original(depth=100,lane=hybrid)`."""
    aid, name = a.get("arm_id", ""), a.get("arm", "")
    if name and aid.startswith(name + "(") and aid.endswith(")"):
        return aid[len(name) + 1:-1]
    return _s(a.get("params") or {})


def manifest_rows(manifests: list[dict]) -> list[dict]:
    """Rows {section, key, values (one string per run), differs} of what defines a run."""
    rows: list[dict] = []

    def add(section: str, key: str, get):
        vals = []
        for m in manifests:
            try:
                vals.append(_s(get(m)))
            except (KeyError, TypeError, AttributeError):
                vals.append("—")
        rows.append({"section": section, "key": key, "vals": vals, "differs": len(set(vals)) > 1})

    add("run", "run_id", lambda m: m.get("run_id"))
    add("run", "status", lambda m: m.get("status"))
    add("run", "config_hash", lambda m: m.get("config_hash"))
    add("run", "started", lambda m: m.get("started"))
    add("run", "ended", lambda m: m.get("ended"))
    add("run", "seed", lambda m: m.get("seed"))
    add("run", "repeats", lambda m: m.get("repeats"))
    for k in ("name", "version", "hash", "path", "splits", "pooled_corpus", "written_here"):
        add("eval set", k, lambda m, k=k: (m.get("eval_set") or {}).get(k))
    add("git", "commit", lambda m: (m.get("git") or {}).get("commit"))
    add("git", "dirty", lambda m: (m.get("git") or {}).get("dirty"))
    add("retrieval", "embedder", lambda m: m.get("embedder"))
    for k in ("max_chars", "chunks", "dense", "qdrant_url"):
        add("retrieval", f"index.{k}", lambda m, k=k: (m.get("index") or {}).get(k))
    add("retrieval", "metrics config", lambda m: m.get("metrics"))
    roles = sorted({r for m in manifests for r in ((m.get("llm") or {}).get("roles") or {})}
                   | {r for m in manifests for a in m.get("arms", []) for r in (a.get("backends") or {})}
                   | {r for m in manifests for r in (m.get("prompt_hashes") or {})})
    for r in roles:
        def model(m, r=r):
            ep = ((m.get("llm") or {}).get("roles") or {}).get(r)
            if ep:
                return f"{ep.get('kind')}: {ep.get('model')}"
            used = {(a.get("backends") or {}).get(r) for a in m.get("arms", [])} - {None}
            return ", ".join(sorted(map(str, used))) if used else None
        add("models per role", r, model)
    for r in roles:  # prompts are recorded for roles with an endpoint; offline roles use none
        def prompt(m, r=r):
            ep = ((m.get("llm") or {}).get("roles") or {}).get(r) or {}
            h = (m.get("prompt_hashes") or {}).get(r)
            return f"{ep.get('prompt') or r + '.v1'} sha {h}" if (ep or h) else None
        add("prompts (name and hash)", r, prompt)
    if all(v == "—" for r in rows if r["section"].startswith("prompts") for v in r["vals"]):
        rows = [r for r in rows if not r["section"].startswith("prompts")]
        add("prompts (name and hash)", "all roles", lambda m: "none recorded: no role has an endpoint (offline rules)")
    add("llm", "cache", lambda m: (m.get("llm") or {}).get("cache"))
    names = list(dict.fromkeys(a.get("arm") or a["arm_id"] for m in manifests for a in m.get("arms", [])))
    for name in names:
        add("arms (parameters, one line per arm)", name, lambda m, name=name: "\n".join(
            arm_params(a) for a in m.get("arms", []) if (a.get("arm") or a["arm_id"]) == name) or None)
    pkgs = list(dict.fromkeys(k for m in manifests for k in (m.get("versions") or {})))
    for p in pkgs:
        add("versions", p, lambda m, p=p: (m.get("versions") or {}).get(p))
    for k in ("turns", "rows", "errors", "fallbacks", "not_applicable", "llm_calls", "cache_hits", "http_calls", "seconds"):
        add("counts", k, lambda m, k=k: (m.get("counts") or {}).get(k))
    return rows


def differing(rows: list[dict], max_keys: int = 8) -> list[dict]:
    """Per section, the keys whose values differ between runs (only a count past max_keys)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r["differs"]:
            out.setdefault(r["section"], []).append(r["key"])
    return [{"section": s, "names": k if len(k) <= max_keys else [], "count": len(k)} for s, k in out.items()]


def group_rows(rows: list[dict]) -> list[dict]:
    out: list[dict] = []
    for r in rows:
        if not out or out[-1]["section"] != r["section"]:
            out.append({"section": r["section"], "rows": []})
        out[-1]["rows"].append(r)
    return out


def run_details(run: ReportRun) -> dict:
    """The arms of one run (label, id, backends) and its config as given."""
    return {"key": run.key,
            "arms": [{"arm": a, "label": run.label[a],
                      "backends": json.dumps(next((x.get("backends") for x in run.manifest.arms
                                                  if x["arm_id"] == a), {}) or {}, sort_keys=True)}
                     for a in run.arms],
            "config": json.dumps(scrub(run.manifest.config), indent=2, sort_keys=True, ensure_ascii=False,
                                 default=str)}


def build(runs: list[ReportRun]) -> dict:
    rows = manifest_rows([scrub(r.manifest.dump()) for r in runs])
    return {"groups": group_rows(rows), "differing": differing(rows), "runs": [run_details(r) for r in runs]}
