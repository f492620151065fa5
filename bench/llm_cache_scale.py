"""The LLM cache (harness/llm/cache.py) at 10^6 entries, for `make bench-scale`: its file size on
disk and the time of a lookup (hit and miss) and of a write, as a replay of a month of turns with
an LLM role would fill and read it. Entries are replies of a rewrite role of about the size a small
model's rewrite takes (a JSON body of ~600 bytes), keyed by the cache's own request key of a
distinct prompt each; written through the cache's batched writer (`put_later`, as a replay does).

    bench/llm_cache_scale.py [--entries 1000000] [--folder DIR] [--out bench/results/llm-cache-scale.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model  # noqa: E402

from harness.llm.cache import LLMCache, request_key  # noqa: E402

BODY = json.dumps({"id": "chatcmpl-x", "object": "chat.completion", "model": "gpt-4o-mini",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(
                       {"query": "hex bolt DIN 933 M8 stainless steel A2 40 mm pack of 100", "filters": [
                           {"field": "material", "op": "eq", "value": "stainless steel A2"}], "confidence": 0.82})}}],
                   "usage": {"prompt_tokens": 412, "completion_tokens": 38, "total_tokens": 450}}).encode()


def key(i: int) -> str:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "Rewrite the last turn."},
                                                 {"role": "user", "content": f"turn {i}: and the other one in A4?"}]}
    return request_key("openai", "/chat/completions", body)


def fill(cache: LLMCache, n: int, start: int = 0) -> float:
    t = time.perf_counter()
    for i in range(start, n):
        cache.put_later(key(i), BODY, 350.0, "openai", "gpt-4o-mini", "rewrite")
    cache.flush()
    return time.perf_counter() - t


def lookups(cache: LLMCache, keys: list[str]) -> float:
    """Median microseconds of one `get` over `keys`, each timed alone."""
    times = []
    for k in keys:
        t = time.perf_counter()
        cache.get(k)
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", default="10000,100000,1000000")
    ap.add_argument("--folder", type=Path, default=Path(os.environ.get("SCALE_DATA", "/tmp/bench-scale")) / "llm-cache")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "llm-cache-scale.json")
    a = ap.parse_args()
    shutil.rmtree(a.folder, ignore_errors=True)
    cache, done, rows = LLMCache(a.folder), 0, []
    rng = random.Random(0)
    for n in (int(x) for x in a.entries.split(",")):
        seconds = fill(cache, n, done)
        done = n
        size = sum(p.stat().st_size for p in a.folder.iterdir() if p.is_file())
        probe = rng.sample(range(n), 2000)
        added = n - (rows[-1]["entries"] if rows else 0)
        rows.append({"entries": n, "file_mb": round(size / 2**20, 1), "write_us_per_entry": round(seconds / added * 1e6, 1),
                     "hit_us_median": round(lookups(cache, [key(i) for i in probe]), 1),
                     "miss_us_median": round(lookups(cache, [key(n + 10 ** 7 + i) for i in probe]), 1),
                     "load": round(os.getloadavg()[0], 2)})
        print(rows[-1], flush=True)
    a.out.write_text(json.dumps({"machine": f"{cpu_model()}, {os.cpu_count()} cores", "rows": rows}, indent=1) + "\n",
                     encoding="utf-8")
    shutil.rmtree(a.folder, ignore_errors=True)


if __name__ == "__main__":
    main()
