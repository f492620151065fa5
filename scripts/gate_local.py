"""make gate-local PROMPT=configs/prompts/rewrite.md: gate a rewrite prompt edit on the local model
(`make local-llm`: SmolLM2-135M-Instruct, llama-server) before any API money is spent. Replays
configs/demo-llm/gate-local.yaml on a slice of b2b-shop (SLICE) twice, with the baseline prompt and
with the edited one (temperature 0, a fixed seed, the LLM cache .cache/llm-local: a re-run replays
it), gates the edit with the policy and exits with the gate's code (0 pass, 1 regression, 2 bad
input, 3 infrastructure), naming both prompts' hashes.

    python scripts/gate_local.py [PROMPT] [--baseline PROMPT] [--policy POLICY] [--stamp STAMP] [--out DIR]

A PROMPT is a file (as it is now), `REF:PATH` (the file at a git ref), a git ref alone (DEFAULT_PROMPT
at that ref) or a packaged prompt name (`rewrite.v1`). The default baseline is the edited file as
committed at HEAD, or the packaged PACKAGED when HEAD has no such file. An edit identical to its
baseline is refused (exit 2), as is a PROMPT that names nothing. The endpoint: $HARNESS_LOCAL_LLM_URL
(default http://127.0.0.1:$LLM_PORT/v1, LLM_PORT 8088); no server there: exit 3, naming
`make local-llm`. Run folders runs/gate-local-STAMP-{base,edit}, gate report reports/gate-local-STAMP/."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.analysis.verdict_types import read_verdict  # noqa: E402
from harness.errors import BadInput, Exit  # noqa: E402
from harness.llm.cache import prompt_hash  # noqa: E402
from harness.roles.prompts import PromptError, is_path, load_prompt  # noqa: E402
from harness.store.folder import RunFolder  # noqa: E402
from scripts.demo_llm import URL_ENV, default_url, harness, server_problem, write_slice  # noqa: E402

CONFIG = ROOT / "configs/demo-llm/gate-local.yaml"
POLICY = ROOT / "configs/demo-llm/gate-local-policy.yaml"
DEFAULT_PROMPT = "configs/prompts/rewrite.md"  # the team's rewrite prompt, for a PROMPT that is a git ref alone
PACKAGED = "rewrite.v1"  # the baseline when HEAD holds no file of the edit's path
ROLE = "rewrite"  # the role whose prompt the config's one arm calls
EVAL_SET = ROOT / "eval_sets/b2b-shop"
# the first main-split sessions with a part number or EAN in their first turns, cut to those turns: the
# identifier floor of the policy then has its min_sessions (10) too
SLICE = {"sessions": 10, "turns": 2}


class Refused(Exception):
    """A PROMPT or baseline that cannot be gated (exit 2)."""


@dataclass(frozen=True)
class Source:
    said: str  # how it was named: `configs/prompts/rewrite.md`, `HEAD:configs/prompts/rewrite.md`, `rewrite.v1`
    text: str
    spec: str | None = None  # what the config's prompt: takes (a path or a packaged name); None: written out
    repo_path: str | None = None  # the file's path in the repository, when it is one

    @property
    def hash(self) -> str:
        return prompt_hash(self.text)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _at_ref(ref: str, path: str) -> str | None:
    """The text of `path` at git `ref`, or None when the ref does not hold it."""
    r = _git("show", f"{ref}:{path}")
    return r.stdout if r.returncode == 0 else None


def _is_commit(ref: str) -> bool:
    return not ref.startswith("-") and _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode == 0


def _repo_path(p: Path) -> str | None:
    """`p` relative to the repository's top, when it lies inside it."""
    try:
        return p.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def resolve(given: str, role: str = "PROMPT") -> Source:
    """The prompt `given` names (see the module's help); Refused when it names none."""
    file = Path(given) if Path(given).is_absolute() else Path.cwd() / given
    if file.is_file():
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise Refused(f"{role}={given}: cannot read: {e}") from None
        return Source(given, text, spec=str(file.resolve()), repo_path=_repo_path(file))
    ref, colon, path = given.partition(":")
    if colon and ref and path and (text := _at_ref(ref, path)) is not None:
        return Source(given, text, repo_path=path)
    if not colon and _is_commit(given):
        if (text := _at_ref(given, DEFAULT_PROMPT)) is None:
            raise Refused(f"{role}={given}: the git ref {given} holds no {DEFAULT_PROMPT}")
        return Source(f"{given}:{DEFAULT_PROMPT}", text, repo_path=DEFAULT_PROMPT)
    if not is_path(given):
        try:
            return Source(given, load_prompt(given).text, spec=given)
        except PromptError:
            pass
    raise Refused(f"{role}={given}: no such file, no git ref or REF:PATH that holds one, and no packaged prompt "
                  f"(give a prompt file such as {DEFAULT_PROMPT}, a git ref, REF:PATH or {PACKAGED})")


def default_baseline(edit: Source) -> Source:
    """The edited file as committed at HEAD, else the packaged prompt."""
    if edit.repo_path and (text := _at_ref("HEAD", edit.repo_path)) is not None:
        return Source(f"HEAD:{edit.repo_path}", text, repo_path=edit.repo_path)
    return Source(PACKAGED, load_prompt(PACKAGED).text, spec=PACKAGED)


def spec_of(src: Source, out: Path) -> str:
    """What the config's prompt: gets: the file or packaged name itself, or the text written under
    .cache/gate-local/prompts/HASH/ with the file's own name (so the arm names it as the file)."""
    if src.spec is not None:
        return src.spec
    dest = out / ".cache/gate-local/prompts" / src.hash / Path(src.repo_path or f"{ROLE}.md").name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.is_file() or dest.read_text(encoding="utf-8") != src.text:
        dest.write_text(src.text, encoding="utf-8")
    return str(dest)


def cut_slice(out: Path) -> Path:
    """The slice of b2b-shop (SLICE) as an eval-set folder under out/.cache/gate-local/: the first
    sessions with an identifier in their first turns; the same every time."""
    rows = [json.loads(line) for line in (EVAL_SET / "sessions.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    cut = [{**s, "turns": s["turns"][:SLICE["turns"]]} for s in rows]
    picked = [s for s in cut if any(t["labels"].get("identifiers") for t in s["turns"])][:SLICE["sessions"]]
    return write_slice(EVAL_SET, out / ".cache/gate-local/eval_sets" / EVAL_SET.name, picked)


def replay(which: str, spec: str, es: Path, stamp: str, out: Path, env: dict) -> tuple[int, Path]:
    """One replay of the config with `spec` as the rewrite prompt: (exit code, run folder). Exit 1
    (failed calls above the run's max_error_rate) still gives a folder the gate judges."""
    run = out / "runs" / f"gate-local-{stamp}-{which}"
    code = harness("run", str(CONFIG), "--eval-set", str(es), "--set", f"llm.roles.{ROLE}.prompt={spec}",
                   "--run-id", run.name, "-q", env=env, cwd=out)
    if code == Exit.REGRESSION and RunFolder(run).is_run():
        code = Exit.PASS
    return code, run


def arm_prompt(run: Path) -> str:
    """`name@hash` of the rewrite prompt as the run's arm id names it (the file's text, plus the
    instruction for the fields the config asks for)."""
    arms = RunFolder(run).read_manifest().arms
    return next((a.get("prompts", {}).get(ROLE) for a in arms if a.get("prompts", {}).get(ROLE)), "?")


def verdict_of(report: Path, code: int) -> str:
    """The gate's own word for its verdict (gate.json: REGRESSION or INSUFFICIENT DATA share exit 1)."""
    if not (report / "gate.json").is_file():
        return Exit.said(code)
    try:
        return read_verdict(report / "gate.json").verdict.value
    except BadInput as e:
        return f"{Exit.said(code)} ({e})"


def summary(base: Source, edit: Source, runs: dict[str, Path], code: int, report: Path, seconds: float) -> str:
    """The closing lines: both prompts, their hashes and the verdict."""
    lines = ["", "gate-local: the rewrite prompt, on the local model (numbers of that model, not of LLM rewriting):"]
    for which, src in (("baseline", base), ("edit", edit)):
        ref = arm_prompt(runs["base" if which == "baseline" else "edit"])
        lines.append(f"  {which:<8} {src.said}: prompt hash {src.hash} (the arm id's prompt.{ROLE}={ref})")
    lines.append(f"gate-local: {verdict_of(report, code)} (exit {code}) for the edit {edit.hash} against "
                 f"the baseline {base.hash}; {report / 'gate.md'}; {seconds:.0f} s")
    return "\n".join(lines)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT,
                    help="the edited prompt: a file, REF:PATH, a git ref or a packaged name (default: %(default)s)")
    ap.add_argument("--baseline", help="the baseline prompt, in the same forms (default: the file at HEAD, "
                    f"else {PACKAGED})")
    ap.add_argument("--policy", type=Path, default=POLICY, help="the gate policy (default: %(default)s)")
    ap.add_argument("--stamp", default=time.strftime("%Y%m%d-%H%M%S"), help="run folders runs/gate-local-STAMP-*")
    ap.add_argument("--out", type=Path, default=ROOT, help="where runs/, reports/ and .cache/ go (default: the clone)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    try:
        edit = resolve(a.prompt)
        base = resolve(a.baseline, "BASELINE") if a.baseline else default_baseline(edit)
    except Refused as e:
        print(f"gate-local: {e}", file=sys.stderr)
        return Exit.BAD_INPUT
    if edit.text == base.text:
        print(f"gate-local: {edit.said} is identical to the baseline prompt ({base.said}, prompt hash {base.hash}): "
              "nothing to gate", file=sys.stderr)
        return Exit.BAD_INPUT
    if not a.policy.is_file():
        print(f"gate-local: POLICY={a.policy}: no such file", file=sys.stderr)
        return Exit.BAD_INPUT
    url, out = default_url(), a.out.resolve()
    if (why := server_problem(url)) is not None:
        print(f"gate-local: {why}.\nStart the local model first: make local-llm (or set {URL_ENV} to a running "
              "OpenAI-compatible server serving smollm2-135m-instruct).", file=sys.stderr)
        return Exit.INFRASTRUCTURE
    print(f"gate-local: baseline {base.said} (prompt hash {base.hash}), edit {edit.said} (prompt hash {edit.hash}); "
          f"{SLICE['sessions']} b2b-shop sessions x {SLICE['turns']} turns with identifiers, on the model at {url}\n", flush=True)
    env, t0, es = {**os.environ, URL_ENV: url}, time.perf_counter(), cut_slice(out)
    runs = {}
    for which, src in (("base", base), ("edit", edit)):
        code, runs[which] = replay(which, spec_of(src, out), es, a.stamp, out, env)
        if code:
            print(f"gate-local: the {which} replay exited {code}; nothing was gated", file=sys.stderr)
            return code if code in (Exit.BAD_INPUT, Exit.INFRASTRUCTURE) else Exit.INFRASTRUCTURE
    report = out / "reports" / f"gate-local-{a.stamp}"
    code = harness("gate", "--baseline", str(runs["base"]), "--candidate", str(runs["edit"]),
                   "--policy", str(a.policy.resolve()), "-o", str(report), env=env, cwd=out)
    print(summary(base, edit, runs, code, report, time.perf_counter() - t0))
    return code


if __name__ == "__main__":
    sys.exit(main())
