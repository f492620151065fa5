"""make demo-llm: every LLM arm on the local model (`make local-llm`: SmolLM2-135M-Instruct, Q4_1,
llama-server) beside the offline arms, on a slice of each shipped eval set, twice at temperature 0.7
(seeds 1 and 2: the model's own variance); then `harness judge` on the answers and relevance labels
for the holes, and the report. What it shows is one small local model's behaviour, not what LLM
rewriting achieves in general.

    python scripts/demo_llm.py [--stamp STAMP] [--sets b2b handbook mtrag]

The endpoint: $HARNESS_LOCAL_LLM_URL (default http://127.0.0.1:$LLM_PORT/v1, LLM_PORT 8088); no
server there: exit 3, naming `make local-llm`. The slices (SLICES) are cut into .cache/demo-llm/ from
the shipped sets, the same every time; the LLM cache is .cache/llm-demo (a second demo replays it).
Run folders runs/demo-llm-STAMP-SET, report reports/demo-llm-STAMP.html."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.errors import Exit  # noqa: E402
from scripts.demo_llm_summary import MODEL_NAME, summary  # noqa: E402

CONFIGS = ROOT / "configs/demo-llm"
BIN = Path(sys.executable).parent
URL_ENV = "HARNESS_LOCAL_LLM_URL"
# per set: the shipped folder and which main-split sessions the slice keeps (in file order)
SLICES = {
    "handbook": ("handbook-de", {"per_type": {"direct": 1, "misleading": 1, "borderline": 1, "unanswerable": 1}}),
    "mtrag": ("mtrag-un", {"per_domain": 1}),
    "b2b": ("b2b-shop", {"sessions": 3, "turns": 2}),
}
# the eval-set grade of each LLM relevance grade 0-3 where people's grades stop below 2 (harness judge --grade-map)
GRADE_MAPS = {"mtrag": "0,0,1,1"}
NOT_GENERAL = (f"Every LLM number here is one small model's ({MODEL_NAME}: 135M parameters, Q4_1, on this "
               "machine's CPU): it shows the harness's path and this model's behaviour, not what LLM rewriting "
               "achieves in general.")


def default_url() -> str:
    return os.environ.get(URL_ENV) or f"http://127.0.0.1:{os.environ.get('LLM_PORT', '8088')}/v1"


def server_problem(url: str) -> str | None:
    """None when `url` serves a model (its /models lists one: llama-server once loaded, any
    OpenAI-compatible server); else why not."""
    import httpx

    try:
        r = httpx.get(f"{url.rstrip('/')}/models", timeout=5.0)
        if r.status_code != 200:
            return f"{url}/models answered {r.status_code} (not ready)"
        models = [m["id"] for m in r.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        return f"no LLM server answers at {url} ({type(e).__name__})"
    return None if models else f"{url}/models lists no model"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pick(name: str, rows: list[dict]) -> list[dict]:
    """The sessions of a set's slice (SLICES), in file order: deterministic."""
    how = SLICES[name][1]
    if "per_type" in how:
        left = dict(how["per_type"])
        out = []
        for s in rows:
            t = s["turns"][0]["labels"]["query_type"]
            if left.get(t, 0) > 0:
                left[t] -= 1
                out.append(s)
        return out
    if "per_domain" in how:
        seen: dict[str, int] = {}
        out = []
        for s in rows:
            if seen.get(s["domain"], 0) < how["per_domain"]:
                seen[s["domain"]] = seen.get(s["domain"], 0) + 1
                out.append(s)
        return out
    return [{**s, "turns": s["turns"][:how["turns"]]} for s in rows[:how["sessions"]]]


def cut(name: str, dest_root: Path) -> Path:
    """The slice of set `name` as an eval-set folder under dest_root (write_slice)."""
    src = ROOT / "eval_sets" / SLICES[name][0]
    return write_slice(src, dest_root / SLICES[name][0], pick(name, _jsonl(src / "sessions.jsonl")))


def write_slice(src: Path, dest: Path, sessions: list[dict]) -> Path:
    """`dest` as an eval-set folder of `sessions`: its eval_set.yaml, corpus and embeddings linked to
    the shipped set `src` (so its embeddings are the shipped ones), its sessions.jsonl written only
    when it changes."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in ("eval_set.yaml", "corpus.jsonl", "embeddings"):
        link = dest / part
        if link.is_symlink() or link.exists():
            link.unlink() if link.is_symlink() or link.is_file() else shutil.rmtree(link)
        link.symlink_to(src / part)
    text = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in sessions)
    target = dest / "sessions.jsonl"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return dest


def harness(*args: str, env: dict, cwd: Path) -> int:
    print("$ harness " + " ".join(args), flush=True)
    return subprocess.run([str(BIN / "harness"), *args], cwd=cwd, env=env).returncode


def run_set(name: str, stamp: str, out: Path, env: dict) -> str | None:
    """Replay a set's slice (its config), judge its answers, label its holes: the run folder (relative
    to `out`), or None when the run could not finish (its exit code said so on the terminal)."""
    es = cut(name, out / ".cache/demo-llm/eval_sets")
    run = f"runs/demo-llm-{stamp}-{name}"
    code = harness("run", str(CONFIGS / f"{name}.yaml"), "--eval-set", str(es), "--run-id", Path(run).name, "-q",
                   env=env, cwd=out)
    if code not in (Exit.PASS, Exit.REGRESSION) or not (out / run / "manifest.json").is_file():  # 1: failed calls above max_error_rate
        print(f"demo-llm: the {name} run exited {code}", file=sys.stderr)
        return None
    if _has_answers(out / run):  # Ragas faithfulness and response relevancy (exit 3: more than half failed, counted)
        harness("judge", run, env=env, cwd=out)
    grades = ["--grade-map", GRADE_MAPS[name]] if name in GRADE_MAPS else []
    harness("judge", run, "--relevance", "--depth", "1", "--sample", "10", *grades, env=env, cwd=out)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stamp", default=time.strftime("%Y%m%d-%H%M%S"), help="run folders runs/demo-llm-STAMP-*")
    ap.add_argument("--sets", nargs="+", default=list(SLICES), choices=list(SLICES))
    ap.add_argument("--out", type=Path, default=ROOT, help="where runs/, reports/ and .cache/ go (default: the clone)")
    a = ap.parse_args(argv)
    url, out = default_url(), a.out.resolve()
    if (why := server_problem(url)) is not None:
        print(f"demo-llm: {why}.\nStart the local model first: make local-llm (or set {URL_ENV} to a running "
              "OpenAI-compatible server serving smollm2-135m-instruct).", file=sys.stderr)
        return Exit.INFRASTRUCTURE
    env = {**os.environ, URL_ENV: url}
    print(f"demo-llm: every LLM arm on {MODEL_NAME} at {url}, beside the offline arms.\n{NOT_GENERAL}\n", flush=True)
    t0, since = time.perf_counter(), time.time()
    runs, walls = [], {}
    for name in a.sets:
        t = time.perf_counter()
        if (run := run_set(name, a.stamp, out, env)) is None:
            return Exit.INFRASTRUCTURE
        walls[name] = time.perf_counter() - t
        runs.append(run)
    report = f"reports/demo-llm-{a.stamp}.html"
    if harness("report", *runs, "-o", report, env=env, cwd=out) != Exit.PASS:
        return Exit.INFRASTRUCTURE
    print("\n" + summary([out / r for r in runs], walls, since=since, cache=out / ".cache/llm-demo"))
    print(f"\n{NOT_GENERAL}")
    print(f"demo-llm took {time.perf_counter() - t0:.0f} s; report: {out / report}")
    return Exit.PASS


def _has_answers(run: Path) -> bool:
    man = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    return any("answers" in a.get("capabilities", []) for a in man.get("arms", []))


if __name__ == "__main__":
    sys.exit(main())
