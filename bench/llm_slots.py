"""How many parallel slots llama-server should have on this machine: the same batch of the
harness's LLM role calls (bench/llm_local.py's items and prompts, strict schemas) sent at a fixed
concurrency to a llama-server started with each slot count in turn (scripts/local_llm.sh start,
LLM_SLOTS, a free port, stopped after), its wall time and aggregate completion tokens/s.
Writes bench/results/llm-slots.md.

    python bench/llm_slots.py [--slots 1 2 4] [--concurrency 4] [--per-set 4]

Needs the llama-server build and the model `make local-llm` installs (it starts its own servers);
the LLM cache is off, so every call is measured."""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import emit, load_note, machine_note  # noqa: E402
from bench.llm_local import measure  # noqa: E402

ROLES = ("rewrite[standalone,must_keep]", "decide", "grade", "answer")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_server(slots: int, run):
    """run(url) against a llama-server with `slots` slots of its own, stopped afterwards."""
    env = {**os.environ, "LLM_PORT": str(free_port()), "LLM_SLOTS": str(slots), "LLAMA_BUILD": "never"}
    script = ["bash", str(ROOT / "scripts/local_llm.sh")]
    subprocess.run([*script, "start"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        return run(f"http://127.0.0.1:{env['LLM_PORT']}/v1")
    finally:
        subprocess.run([*script, "stop"], env=env, check=False, stdout=subprocess.DEVNULL)


def one(slots: int, a) -> dict:
    runs = [(0.0, 1), (0.7, 1)]
    rows, wall, _ = with_server(slots, lambda url: asyncio.run(
        measure(url, a.per_set, a.concurrency, a.max_tokens, runs, ROLES)))
    tokens = sum(r["tokens"] or 0 for r in rows)
    ms = sorted(r["ms"] for r in rows)
    return {"slots": slots, "calls": len(rows), "valid": sum(r["ok"] for r in rows), "wall": wall,
            "tokens": tokens, "p50": ms[len(ms) // 2] if ms else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight (the demo configs' concurrency)")
    ap.add_argument("--per-set", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "bench/results/llm-slots.md")
    a = ap.parse_args()
    if any(s < 1 for s in a.slots) or a.concurrency < 1 or a.per_set < 1:
        ap.error("--slots, --concurrency and --per-set must be at least 1")
    start = machine_note()
    rows = [one(s, a) for s in a.slots]
    lines = ["# llama-server slots on this machine (SmolLM2-135M-Instruct Q4_1)", "",
             f"`bench/llm_slots.py --slots {' '.join(map(str, a.slots))} --concurrency {a.concurrency} "
             f"--per-set {a.per_set} --max-tokens {a.max_tokens}`: the roles {', '.join(ROLES)} on {a.per_set} "
             f"items per shipped set, at temperature 0 and 0.7 (seed 1), {a.concurrency} requests in flight, no "
             f"LLM cache; each slot count against a llama-server of its own (`-c 16384 -t "
             f"{os.environ.get('LLM_THREADS', '2')}`). Machine: {start}; {load_note('at the end')}.", "",
             "| slots | calls | valid | wall s | completion tokens | tokens/s, all slots | p50 ms per call |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['slots']} | {r['calls']} | {r['valid']} | {r['wall']:.1f} | {r['tokens']} | "
              f"{r['tokens'] / r['wall']:.1f} | {r['p50']:.0f} |" for r in rows]
    emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
