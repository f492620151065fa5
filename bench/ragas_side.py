"""Ragas 0.4.3's own `ragas.evaluate` side by side with this harness's replay, against the same
scripted endpoint (bench/endpoint.py --reply ragas: the test server in a process of its own on
127.0.0.1, a fixed latency per call), in one process and one window.

Workload per point (latency, concurrency, CALLS): both tools make CALLS LLM calls.
- Ragas: CALLS / 2 generated samples (question, a two-sentence answer, two contexts),
  `ragas.evaluate(dataset, metrics=[faithfulness], llm=LangchainLLMWrapper(ChatOpenAI(...),
  cache=DiskCacheBackend(...)), run_config=RunConfig(max_workers=concurrency, max_retries=1),
  show_progress=False)`: the legacy metric, two calls per sample (statement extraction, then
  NLI verdicts). Cold with an empty Ragas disk cache (which it fills), then a warm re-run: a new
  wrapper on the same cache folder.
- harness: bench/replay.py's `replay_once` on CALLS / 4 generated sessions x 4 turns, 2,000
  documents, arm `rewrite(lane=bm25)` (one LLM call per turn), cold then warm (same LLM cache).

Efficiency: ceil(CALLS / concurrency) x latency / wall, where wall is `evaluate` for Ragas and
the run after the index for the harness (as in bench/replay.py). Both tools' caches and runs go
to a temp folder under the project's .cache (removed at the end); Ragas's own files to
.cache/ragas (RAGAS_CACHE_HOME, bench/common.py). Exits 1 when a check fails: a tool made other
calls than expected (counted by prompt kind at the endpoint), a warm re-run called the
endpoint, a Ragas sample scored other than 1.0, a harness turn failed.

    .venv/bin/python bench/ragas_side.py [--points 0.1:16:800,0.1:64:3200] [--out FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import random
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cpu_seconds, emit, load_note, machine_note, peak_rss_mb, vocabulary  # noqa: E402
from endpoint import Endpoint  # noqa: E402
from replay import generated_workload, replay_once  # noqa: E402

DEFAULT_POINTS = "0.1:16:800,0.1:64:3200"
RAGAS_KINDS = ("ragas statement extraction", "ragas NLI verdicts")  # bench/endpoint.py's prompt_kind


def ragas_samples(n: int, seed: int = 0) -> list[dict]:
    """n distinct samples in Ragas's single-turn columns: a question, a two-sentence answer, two contexts."""
    rng, vocab = random.Random(seed), vocabulary(3000, seed)
    out = []
    for i in range(n):
        a, b = " ".join(rng.sample(vocab, 6)), " ".join(rng.sample(vocab, 6))
        out.append({"user_input": f"what about {' '.join(rng.sample(vocab, 3))} (sample {i})?",
                    "response": f"The {a} holds. The {b} follows.",
                    "retrieved_contexts": [f"The {a} holds, as {' '.join(rng.choices(vocab, k=40))}.",
                                           f"The {b} follows from {' '.join(rng.choices(vocab, k=40))}."]})
    return out


def ragas_llm(base_url: str, cache_dir: Path, run_config):
    """Ragas's LangChain wrapper around ChatOpenAI, with Ragas's own disk cache (`ragas.cache`)."""
    from langchain_openai import ChatOpenAI
    from ragas.cache import DiskCacheBackend
    from ragas.llms import LangchainLLMWrapper

    chat = ChatOpenAI(base_url=base_url, api_key="x", model="test-model", max_retries=0, timeout=60)
    return LangchainLLMWrapper(chat, run_config=run_config, cache=DiskCacheBackend(str(cache_dir)))


def kinds(shapes: dict) -> dict[str, int]:
    """The endpoint's request shapes (Endpoint.shapes) counted by prompt kind alone."""
    out: dict[str, int] = {}
    for shape, n in shapes.items():
        kind = json.loads(shape)["kind"]
        out[kind] = out.get(kind, 0) + n
    return out


def ragas_once(ep: Endpoint, samples: list[dict], concurrency: int, cache_dir: Path) -> dict:
    """One `ragas.evaluate` of faithfulness over `samples`; the wall and CPU of evaluate alone."""
    with warnings.catch_warnings():  # evaluate(), ragas.metrics and LangchainLLMWrapper are deprecated in 0.4
        warnings.simplefilter("ignore", DeprecationWarning)
        from ragas import EvaluationDataset, RunConfig, evaluate
        from ragas.metrics import faithfulness

        run_config = RunConfig(max_workers=concurrency, max_retries=1, timeout=120)
        dataset = EvaluationDataset.from_list(samples)
        llm = ragas_llm(ep.base_url, cache_dir, run_config)
        ep.reset()
        server_cpu0 = ep.stats()["cpu"]
        gc.collect()
        c0, t0 = cpu_seconds(), time.perf_counter()
        result = evaluate(dataset, metrics=[faithfulness], llm=llm, run_config=run_config, show_progress=False)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stats = ep.stats()
    scores = [s["faithfulness"] for s in result.scores]
    return {"wall": wall, "cpu": cpu, "server_calls": stats["calls"], "peak_in_flight": stats["peak_in_flight"],
            "server_cpu": stats["cpu"] - server_cpu0, "samples": len(scores),
            "scored_one": sum(1 for s in scores if s == 1.0), "shapes": ep.shapes()}


def harness_once(es_root: Path, index, ep: Endpoint, conc: int, cache: Path, run_dir: Path) -> dict:
    """bench/replay.py's `replay_once` after a collection (as before `evaluate`), with the shapes it sent."""
    gc.collect()
    return {**replay_once(es_root, index, ep, conc, cache, run_dir), "shapes": ep.shapes()}


def measure_point(tmp: Path, latency: float, conc: int, calls: int, docs: int = 2000) -> dict:
    """Ragas cold, Ragas warm, the harness cold, the harness warm: CALLS LLM calls each when cold,
    against one endpoint process; the harness's index built before, not timed."""
    es_root, _, index = generated_workload(tmp, calls, docs)
    samples = ragas_samples(calls // 2)
    name = f"{latency}-{conc}-{calls}"
    # an endpoint (a port) per point: langchain_openai keeps one httpx client per base_url for the process, and
    # each evaluate() runs its own event loop, so a second cold evaluate on one port meets dead connections
    with Endpoint(latency, reply="ragas") as ep:
        ragas = {run: ragas_once(ep, samples, conc, tmp / f"ragas-cache-{name}") for run in ("cold", "warm")}
        ours = {run: harness_once(es_root, index, ep, conc, tmp / f"llm-{name}", tmp / "runs" / f"{run}-{name}")
                for run in ("cold", "warm")}
    bound = math.ceil(calls / conc) * latency
    sample_bound = math.ceil(calls // 2 / conc) * 2 * latency  # Ragas: a slot holds a sample, two calls in a row
    for tool in (ragas, ours):
        for run in tool.values():
            run["efficiency"] = bound / run["wall"]
            run["ms_per_call"] = run["wall"] / calls * 1000
    return {"latency": latency, "concurrency": conc, "calls": calls, "bound": bound, "sample_bound": sample_bound,
            "ragas": ragas, "harness": ours, "checks": checks(calls, ragas, ours)}


def checks(calls: int, ragas: dict, ours: dict) -> list[str]:
    """What is wrong with a point's runs (empty when nothing): the calls each tool made cold, by
    prompt kind, none warm, every Ragas sample scored 1.0 and no harness turn failed."""
    want_ragas = {k: calls // 2 for k in RAGAS_KINDS}
    wrong = []
    if kinds(ragas["cold"]["shapes"]) != want_ragas:
        wrong.append(f"Ragas cold sent {kinds(ragas['cold']['shapes'])}, not {want_ragas}")
    if kinds(ours["cold"]["shapes"]) != {"other": calls}:
        wrong.append(f"the harness cold sent {kinds(ours['cold']['shapes'])}, not {{'other': {calls}}}")
    for tool, runs in (("Ragas", ragas), ("the harness", ours)):
        if runs["warm"]["server_calls"]:
            wrong.append(f"{tool} warm made {runs['warm']['server_calls']} calls")
    if any(r["scored_one"] != calls // 2 for r in ragas.values()):
        wrong.append("a Ragas sample did not score 1.0")
    if any(r["errors"] or r["fallbacks"] for r in ours.values()):
        wrong.append("a harness turn failed or fell back")
    return wrong


def parse_points(text: str) -> list[tuple[float, int, int]]:
    points = []
    for p in text.split(","):
        a, b, c = p.split(":")
        if int(c) % 4:
            raise SystemExit(f"--points: {p}: CALLS must be a multiple of 4 (sessions of 4 turns; 2 calls per Ragas sample)")
        points.append((float(a), int(b), int(c)))
    return points


def measure(points: list[tuple[float, int, int]], docs: int = 2000) -> dict:
    """Every point, one after the other, in a temp folder under the project's .cache (removed after)."""
    note, t0 = machine_note(), time.perf_counter()
    import ragas  # imported before any timing (a few seconds: LangChain, datasets)

    (ROOT / ".cache").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ragas-", dir=ROOT / ".cache"))
    try:
        results = [measure_point(tmp, *p, docs=docs) for p in points]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"note": note, "load_end": load_note("at the end"), "points": results, "ragas_version": ragas.__version__,
            "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default=DEFAULT_POINTS, help="latency_s:concurrency:calls,...")
    ap.add_argument("--out", type=Path, help="write the figures as a markdown section here")
    args = ap.parse_args(argv)
    figures = measure(parse_points(args.points))
    emit(to_markdown(figures), args.out)
    if any(p["checks"] for p in figures["points"]):
        raise SystemExit("ragas_side: " + "; ".join(c for p in figures["points"] for c in p["checks"]))
    return figures


TARGETS = {16: 0.90, 64: 0.60}  # issue 28: the harness's efficiency at 100 ms x 16 and x 64
WARM_TARGET_MS = 0.5  # issue 28: a warm re-run, per turn


def _row(tool: str, p: dict, cold: dict, warm: dict) -> str:
    n = p["calls"]
    return (f"| {tool} | {p['latency'] * 1000:.0f} ms | {p['concurrency']} | {cold['server_calls']} | "
            f"{p['bound']:.2f} | {cold['wall']:.2f} | **{cold['efficiency']:.2f}** | {cold['peak_in_flight']} | "
            f"{cold['cpu'] / n * 1000:.2f} | {cold['server_cpu'] / n * 1000:.2f} | {warm['wall']:.2f} | "
            f"**{warm['ms_per_call']:.2f}** | {warm['server_calls']} |")


def target_lines(points: list[dict]) -> list[str]:
    """The issue's targets against the harness's figures here (the points at 100 ms that have one)."""
    out = []
    for p in points:
        h = p["harness"]
        goal = TARGETS.get(p["concurrency"]) if p["latency"] == 0.1 else None
        if goal is not None:
            e = h["cold"]["efficiency"]
            out.append(f"- harness efficiency at 100 ms x {p['concurrency']} >= {goal:.2f}: **{e:.2f}**, "
                       f"{'met' if e >= goal else 'not met'} (Ragas {p['ragas']['cold']['efficiency']:.2f})")
        w = h["warm"]["ms_per_call"]
        out.append(f"- harness warm re-run <= {WARM_TARGET_MS} ms a turn, {p['calls']} turns at x {p['concurrency']}: "
                   f"**{w:.2f} ms**, {'met' if w <= WARM_TARGET_MS else 'not met'} "
                   f"(Ragas {p['ragas']['warm']['ms_per_call']:.2f} ms a call)")
    return out


def to_markdown(f: dict) -> str:
    lines = ["## Ragas's evaluate side by side with the harness's replay (bench/ragas_side.py)", "",
             f"Ragas {f['ragas_version']}, `ragas.evaluate(metrics=[faithfulness])` through `LangchainLLMWrapper(ChatOpenAI)` "
             "with Ragas's disk cache, CALLS / 2 samples (2 calls each); the harness's replay (bench/replay.py's `replay_once`) "
             "on CALLS / 4 sessions x 4 turns, arm `rewrite(lane=bm25)` (1 call per turn). Both against the same "
             "bench/endpoint.py process per point (`--reply ragas`, 127.0.0.1), the same number of LLM calls, one after the "
             f"other in one process. Machine: {f['note']}; {f['load_end']} (a shared machine: wall times carry its "
             f"load). Measured in {f['seconds']:.0f} s (after the imports).", "",
             "| tool | latency | concurrency | LLM calls at the endpoint | bound (s) | wall (s) | **efficiency** | peak in flight | "
             "client CPU per call (ms) | endpoint CPU per call (ms) | warm re-run wall (s) | **warm per call (ms)** | "
             "warm calls at the endpoint |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in f["points"]:
        lines.append(_row("Ragas evaluate", p, p["ragas"]["cold"], p["ragas"]["warm"]))
        lines.append(_row("harness replay", p, p["harness"]["cold"], p["harness"]["warm"]))
    lines += ["", "Targets (issue 28, item 5):", ""] + target_lines(f["points"]) + ["", "Checks per point:", ""]
    for p in f["points"]:
        r, h = p["ragas"], p["harness"]
        lines.append(f"- {p['latency'] * 1000:.0f} ms x {p['concurrency']}: "
                     + ("; ".join(p["checks"]) if p["checks"] else "calls by prompt kind as expected, none warm")
                     + f"; Ragas {r['cold']['scored_one']}/{r['cold']['samples']} samples scored 1.0 cold, "
                     f"{r['warm']['scored_one']} warm; harness before the index {h['cold']['before_index']:.2f} s, "
                     f"warm cache hits {h['warm']['cache_hits']}"
                     + (f"; Ragas's own bound {p['sample_bound']:.2f} s" if p["sample_bound"] != p["bound"] else ""))
    lines += ["", "wall: Ragas, `evaluate()` alone (the wrapper built before; the dataset an EvaluationDataset); the "
              "harness, the run after the index (bench/replay.py's definition: job loop, trace parts, manifest; the index "
              "given, the time before it in the checks). Bound: ceil(calls / concurrency) x latency; efficiency: bound / wall. "
              "Ragas's executor holds a worker slot per sample, whose two calls run one after the other, so its own "
              "bound is ceil(samples / concurrency) x 2 x latency (the same when concurrency divides the samples). "
              "Client CPU per call: this process's CPU over the wall (the harness: the whole run) per call; endpoint CPU "
              "per call: bench/endpoint.py's process over the same run (both on the same cores). Warm re-run: Ragas, a "
              "new LangchainLLMWrapper on the same `DiskCacheBackend` folder (`ragas.cache.cacher` wraps "
              "`agenerate_text`); the harness, the same LLM cache folder (its wall measured as cold's). Per call: warm "
              "wall / the calls made cold (a harness turn is one call).",
              "", "What Ragas sent, cold, at the first point (the endpoint's request log counted by shape; legacy "
              "`Faithfulness` through LangchainLLMWrapper: a sample's two calls go one after the other, each one user "
              "message holding the whole PydanticPrompt: instruction, the output's JSON schema, examples, the input "
              "as JSON; the reply is parsed from the message text):", ""]
    lines += [f"- {n} x `{shape}`" for shape, n in sorted(f["points"][0]["ragas"]["cold"]["shapes"].items())]
    lines += ["", f"Peak memory (ru_maxrss of the benchmark process): {f['peak_rss_mb']:.0f} MB.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
