"""make gate-demo: a DEMONSTRATION OF THE GATE'S MECHANICS with a scripted endpoint, not of any
model. From the command line only, as a CI job would: `harness serve` plays a model that follows
each prompt (configs/gate-demo/script.yaml), `harness run` replays the corrective loop on
handbook-de with a baseline and three candidate prompt edits, `harness gate` judges each against
the baseline with configs/gate-demo/policy.yaml. Prints the four verdicts; exits 0 when all four
are as expected, 1 when one is not, 3 when a step could not run.

    python scripts/gate_demo.py [--stamp STAMP] [--keep/--no-keep]

Run folders: runs/gate-demo-STAMP-{base,strict,synonyms,whitespace}; gate reports:
reports/gate-demo-STAMP/<candidate>/; LLM replies cached in .cache/gate-demo-llm (a second
demo replays them without calling the endpoint)."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.analysis.verdict_types import read_verdict
from harness.errors import BadInput, Exit

ROOT = Path(__file__).resolve().parents[1]
DEMO = Path("configs/gate-demo")
BIN = Path(sys.executable).parent
# candidate: (what changed, expected exit, metrics the gate must name failing, role whose prompt changed)
EXPECTED = {
    "base": ("the baseline against itself", Exit.PASS, set(), None),
    "strict": ("a too-strict grader prompt", Exit.REGRESSION, {"answered", "abstained"}, "grade"),
    "synonyms": ("a synonym-only rewriter, writing the loop's retries", Exit.REGRESSION, {"rescued", "recall@10"},
                 "rewrite"),
    "whitespace": ("a whitespace-only edit of the grader prompt", Exit.PASS, set(), "grade"),
}


def harness(*args: str, env: dict | None = None, quiet: bool = False) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "harness"), *args]
    print("$ harness " + " ".join(args), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=quiet)


def start_endpoint(env: dict) -> tuple[subprocess.Popen, str]:
    """`harness serve` on a free port; its first line is the base URL."""
    print(f"$ harness serve {DEMO / 'script.yaml'} --port 0", flush=True)
    srv = subprocess.Popen([str(BIN / "harness"), "serve", str(DEMO / "script.yaml"), "--port", "0"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = srv.stdout.readline().strip()
    if not url.startswith("http"):
        srv.kill()
        raise RuntimeError(f"harness serve did not start: {url}{srv.stderr.read()}")
    return srv, url


def verdict(name: str, code: int, gate_json: Path) -> tuple[bool, str]:
    """Whether a gate came out as expected, and a line that says what it compared and found."""
    what, want, must_fail, role = EXPECTED[name]
    v = read_verdict(gate_json) if gate_json.is_file() else None  # another schema_version: BadInput, exit 2
    failed = {r.metric.name for r in v.failed} if v else set()  # a regression, or insufficient data
    changes = [c for p in v.pairs for c in p.changes] if v else []
    shown = [c for c in changes if role and c.startswith(f"prompt.{role} ")]
    ok = code == want and must_fail <= failed and (role is None or bool(shown)) and (want == 1 or not failed)
    said = "REGRESSION" if code == Exit.REGRESSION else Exit.said(code)
    line = (f"{'ok  ' if ok else 'FAIL'} {name:<10} {what}: {said} (exit {code}, expected {int(want)})"
            + (f"; failing: {', '.join(sorted(failed))}" if failed else "")
            + (f"; {'; '.join(shown)}" if shown else ""))
    return ok, line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stamp", default=time.strftime("%Y%m%d-%H%M%S"), help="run folders runs/gate-demo-STAMP-*")
    ap.add_argument("--keep", action=argparse.BooleanOptionalAction, default=True,
                    help="keep the run folders and gate reports (default) or remove them at the end")
    a = ap.parse_args(argv)
    print("gate-demo: a demonstration of the gate's mechanics with a scripted endpoint (harness serve), "
          "not of any model's behaviour\n", flush=True)
    t0, env = time.perf_counter(), dict(os.environ)
    runs = {c: Path("runs") / f"gate-demo-{a.stamp}-{c}" for c in EXPECTED}
    out = Path("reports") / f"gate-demo-{a.stamp}"
    try:
        srv, env["HARNESS_SERVE_URL"] = start_endpoint(env)
    except (RuntimeError, OSError) as e:
        print(f"infrastructure: {e}", file=sys.stderr)
        return Exit.INFRASTRUCTURE
    try:
        for c in EXPECTED:
            r = harness("run", str(DEMO / f"{c}.yaml"), "--no-progress", "--run-id", runs[c].name, env=env, quiet=True)
            if r.returncode:
                print(r.stdout + r.stderr, file=sys.stderr)
                print(f"infrastructure: the {c} run exited {r.returncode}", file=sys.stderr)
                return Exit.INFRASTRUCTURE
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    lines, all_ok = [], True
    for c in EXPECTED:
        r = harness("gate", "--baseline", str(runs["base"]), "--candidate", str(runs[c]),
                    "--policy", str(DEMO / "policy.yaml"), "-o", str(out / c), env=env)
        try:
            ok, line = verdict(c, r.returncode, ROOT / out / c / "gate.json")
        except BadInput as e:
            print(f"gate-demo: {e}", file=sys.stderr)
            return e.exit_code
        all_ok &= ok
        lines.append(line)
        print(flush=True)
    print("gate-demo verdicts (a demonstration with a scripted endpoint):")
    print("\n".join("  " + x for x in lines))
    print(f"gate-demo: {'all four as expected' if all_ok else 'NOT as expected'} "
          f"({time.perf_counter() - t0:.0f} s; runs/gate-demo-{a.stamp}-*, {out}/)")
    if not a.keep:
        for p in [*runs.values(), out]:
            shutil.rmtree(ROOT / p, ignore_errors=True)
    return Exit.PASS if all_ok else Exit.REGRESSION


if __name__ == "__main__":
    sys.exit(main())
