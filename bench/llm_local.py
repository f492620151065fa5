"""Every LLM role the replay uses against a real local model (llama-server with SmolLM2, run in
its own process: `make local-llm`), on slices of the shipped eval sets: per role the calls, the
share of valid replies, the share cut at max_tokens, latency p50/p95 and completion tokens/s,
at temperature 0 and 0.7 over a few seeds. Writes bench/results/llm-local.md.

    python bench/llm_local.py http://127.0.0.1:8088/v1 [--per-set 4] [--concurrency 2]

The role prompts and strict schemas are the harness's (harness/prompts, the roles' output
models); the user messages are built as the arms build them, from the sets' turns and passages.
The LLM cache is off (every call is measured); nothing is written to the repo's cache."""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.failures import kind_of
from harness.roles.answer import abstention
from harness.roles.fields import instruction, output_model, subset
from harness.roles.prompts import load_prompt
from harness.roles.state import CompactState, PastTurn, ShownItem

ROOT = Path(__file__).resolve().parent.parent
SETS = ("b2b-shop", "handbook-de", "mtrag-un")
ROLES = ("rewrite", "rewrite[standalone,must_keep]", "decide", "hyde", "grade", "answer", "rerank")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def items(per_set: int) -> list[dict]:
    """Per set, the last turn of its first `per_set` sessions with more than one turn (else the
    first turn): its state, the question and the passages its labels call relevant (or the first docs)."""
    out = []
    for name in SETS:
        folder = ROOT / "eval_sets" / name
        docs = {d["doc_id"]: d for d in _jsonl(folder / "corpus.jsonl")}
        sessions = _jsonl(folder / "sessions.jsonl")
        sessions = sorted(sessions, key=lambda s: -min(len(s["turns"]), 2))[:per_set]
        for s in sessions:
            *past, turn = s["turns"]
            hist = [PastTurn(t["user"], (t.get("assistant") or {}).get("answer", ""),
                             [ShownItem(x["doc_id"], x.get("name", "")) for x in (t.get("assistant") or {}).get("shown", [])])
                    for t in past[-3:]]
            state = CompactState(turn["user"], hist, (turn.get("state") or {}).get("filters", []), s.get("account", {}), [])
            qrels = list(((turn.get("labels") or {}).get("qrels") or {}))
            ids = [d for d in qrels if d in docs][:3] or list(docs)[:3]
            out.append({"set": name, "state": state, "question": turn["user"],
                        "language": (turn.get("labels") or {}).get("language") or "en",
                        "passages": [{"doc_id": d, "text": docs[d]["text"][:600]} for d in ids]})
    return out


def message(role: str, it: dict) -> str:
    """The user message of `role` for an item, as the arms write it."""
    q, ps = it["question"], it["passages"]
    if role.startswith("rewrite") or role == "decide":
        return it["state"].to_prompt()
    if role == "hyde":
        return json.dumps({"question": q}, ensure_ascii=False)
    if role == "grade":
        return json.dumps({"question": q, "passages": ps, "previous_queries": []}, ensure_ascii=False)
    if role == "answer":
        return json.dumps({"question": q, "language": it["language"], "abstention_text": abstention(it["language"]),
                           "passages": ps}, ensure_ascii=False)
    return json.dumps({"question": q, "candidates": ps}, ensure_ascii=False)


def prompt_and_schema(role: str):
    base, _, fields = role.partition("[")
    text, model = load_prompt(f"{base}.v1").text, output_model(base)
    if fields:
        asked = tuple(fields.rstrip("]").split(","))
        return text + instruction(asked), subset(model, asked)
    return text, model


async def measure(url: str, per_set: int, concurrency: int, max_tokens: int, runs: list[tuple[float, int]],
                  roles: tuple[str, ...] = ROLES):
    its = items(per_set)
    rows: list[dict] = []
    sem = asyncio.Semaphore(concurrency)
    clients = {t: LLMClient(EndpointConfig(kind="openai-compatible", base_url=url, model="smollm2-135m-instruct",
                                           temperature=t, max_tokens=max_tokens, timeout=120, max_retries=1),
                            None, sem, connections=concurrency) for t in {t for t, _ in runs}}

    async def one(role, it, temp, seed):
        system, schema = prompt_and_schema(role)
        res = await clients[temp].structured(role.partition("[")[0], system, message(role, it), schema, seed=seed,
                                             repair=False)
        rec = res.record
        rows.append({"role": role, "set": it["set"], "temp": temp, "ok": res.value is not None,
                     "kind": None if res.value is not None else kind_of(rec.error), "ms": rec.latency_ms,
                     "tokens": rec.completion_tokens, "raw": res.raw})

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(one(r, it, t, s) for t, s in runs for r in roles for it in its))
    finally:
        for c in clients.values():
            await c.aclose()
    return rows, time.perf_counter() - t0, len(its)


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def report(rows: list[dict], wall: float, n_items: int, args, load_before: str, load_after: str,
           runs: list[tuple[float, int]]) -> str:
    lines = ["# Every LLM role on a real small model (SmolLM2-135M-Instruct Q4_1, llama-server)", "",
             f"Written by `bench/llm_local.py {args.url} --per-set {args.per_set} --concurrency {args.concurrency} "
             f"--max-tokens {args.max_tokens} --runs {args.runs} --roles {args.roles}`. Machine: {platform.node()}, {platform.machine()}, "
             f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
             f"load before: `{load_before}`, after: `{load_after}` (shared by other processes).",
             f"Items: {n_items} ({args.per_set} per set of {', '.join(SETS)}: the last turn of sessions with history); "
             f"runs: {', '.join(f'temperature {t} seed {s}' for t, s in runs)}; wall {wall:.0f} s for {len(rows)} calls; "
             "no repair attempt (what the first reply is), no LLM cache.", "",
             "| role | calls | valid % | cut at max_tokens % | other failures | p50 ms | p95 ms | completion tokens/s |",
             "|---|---|---|---|---|---|---|---|"]
    for role in dict.fromkeys(r["role"] for r in rows):
        for temp in sorted({r["temp"] for r in rows}):
            rs = [r for r in rows if r["role"] == role and r["temp"] == temp]
            if not rs:
                continue
            ok = sum(r["ok"] for r in rs)
            cut = sum(r["kind"] == "cut at max_tokens" for r in rs)
            other = {}
            for r in rs:
                if r["kind"] and r["kind"] != "cut at max_tokens":
                    other[r["kind"]] = other.get(r["kind"], 0) + 1
            ms = [r["ms"] for r in rs]
            tps = sum(r["tokens"] for r in rs) / (sum(ms) / 1000) if sum(ms) else float("nan")
            lines.append(f"| {role} (t={temp}) | {len(rs)} | {100 * ok / len(rs):.0f} | {100 * cut / len(rs):.0f} | "
                         f"{', '.join(f'{k} {n}' for k, n in other.items()) or '0'} | {statistics.median(ms):.0f} | "
                         f"{_pct(ms, 0.95):.0f} | {tps:.0f} |")
    lines += ["", "A reply per role at temperature 0 (the first item of each set):", ""]
    for role in dict.fromkeys(r["role"] for r in rows):
        for r in [r for r in rows if r["role"] == role and r["temp"] == 0][:1]:
            lines.append(f"- {role} ({r['set']}): `{(r['raw'] or '')[:200]}`")
    return "\n".join(lines) + "\n"




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--per-set", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--runs", default="0:1,0.7:1,0.7:2", help="temperature:seed, comma-separated")
    ap.add_argument("--roles", default=",".join(ROLES).replace(",must_keep", "+must_keep"),
                    help="comma-separated; a role asked for fewer fields as rewrite[standalone+must_keep]")
    ap.add_argument("-o", "--out", default=str(ROOT / "bench" / "results" / "llm-local.md"))
    args = ap.parse_args()
    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    runs = [(float(t), int(s)) for t, s in (x.split(":") for x in args.runs.split(","))]
    roles = tuple(r.replace("+", ",") for r in args.roles.split(","))
    rows, wall, n = asyncio.run(measure(args.url, args.per_set, args.concurrency, args.max_tokens, runs, roles))
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    Path(args.out).write_text(report(rows, wall, n, args, before, after, runs), encoding="utf-8")
    print(Path(args.out).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
