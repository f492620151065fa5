"""A scripted endpoint from a YAML file, for `harness serve SCRIPT.yaml` (and the tests): rules that
match the role asking and the content of its prompt to replies, a latency and a fault rate.
Rules match prompt *content* (whitespace ignored), not its hash, so a whitespace-only edit of a
prompt gets the same replies and only its hash changes.

    port: 0                      # 0: any free port; the base URL is printed
    latency: 0.02                # seconds per call
    faults: {kinds: ["500"], rate: 0.0, seed: 0}
    rules:                       # the first rule that matches answers
      - role: grade              # the role asking (its reply schema); omit for any
        prompt_contains: fully and literally        # in the system prompt
        user_contains: Urlaub    # in the last user message
        reply: {sufficient: false, reason: "not literally supported", new_query: ""}
      - role: rewrite
        python: replies.py:synonyms                 # a function (request JSON) -> reply; path relative to this file

A reply is JSON content (a mapping), text, or what a `python:` function returns for the request."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Callable

from pydantic import Field, ValidationError

from harness.errors import BadInput
from harness.strict import Strict
from harness.testing.server import FAULTS, TestServer
from harness.yamlpos import did_you_mean, located, read_yaml, validation_problems

ROLE_SCHEMAS = {"rewrite": "RewriteOutput", "decide": "Decision", "hyde": "HydeOutput", "grade": "GradeOutput",
                "rerank": "RerankOutput", "answer": "AnswerOutput", "relevance": "RelevanceOutput"}


class ScriptError(BadInput, ValueError):
    """A script that cannot be served (exit 2)."""


class RuleSpec(Strict):
    role: str | None = None
    prompt_contains: str | None = None
    user_contains: str | None = None
    reply: Any = None
    python: str | None = None
    fault: str | None = None
    fault_rate: float = Field(default=1.0, ge=0, le=1)


class Faults(Strict):
    kinds: list[str] = Field(default_factory=list)
    rate: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0


class ScriptSpec(Strict):
    port: int = Field(default=0, ge=0, le=65535)
    host: str = "127.0.0.1"
    latency: float = Field(default=0.0, ge=0)
    faults: Faults = Field(default_factory=Faults)
    default_reply: Any = "OK"
    rules: list[RuleSpec] = Field(default_factory=list)


def _squash(text: str) -> str:
    return " ".join(text.split())


def role_of(req: dict) -> str | None:
    """The role asking: the name of the reply schema it sends (our roles' structured output)."""
    name = (((req.get("response_format") or {}).get("json_schema")) or {}).get("name")
    return next((r for r, s in ROLE_SCHEMAS.items() if s == name), None)


def _matcher(rule: RuleSpec) -> Callable[[dict], bool]:
    want = _squash(rule.prompt_contains) if rule.prompt_contains else None

    def when(req: dict) -> bool:
        msgs = req.get("messages") or []
        system = _squash(" ".join(str(m.get("content") or "") for m in msgs if m.get("role") in ("system", "developer")))
        users = [str(m.get("content") or "") for m in msgs if m.get("role") == "user"]
        return ((rule.role is None or role_of(req) == rule.role) and (want is None or want in system)
                and (rule.user_contains is None or (bool(users) and rule.user_contains in users[0])))
    return when


def _function(spec: str, base: Path) -> Callable:
    path, _, name = spec.rpartition(":")
    file = (base / path) if not Path(path).is_absolute() else Path(path)
    if not path or not name or not file.is_file():
        raise ScriptError(f"python: {spec!r}: expected FILE.py:FUNCTION, FILE relative to the script ({file})")
    mod_spec = importlib.util.spec_from_file_location(f"harness_script_{file.stem}", file)
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except Exception as e:  # the user's module: say which and why, no traceback
        raise ScriptError(f"python: {spec!r}: {file} cannot be loaded: {type(e).__name__}: {e}") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ScriptError(f"python: {spec!r}: {file} has no function {name!r}")
    return fn


def load_script(path: Path) -> ScriptSpec:
    path = Path(path)
    raw, text = read_yaml(path, ScriptError)
    try:
        spec = ScriptSpec.model_validate(raw or {})
    except ValidationError as e:
        raise ScriptError(located(path, text, validation_problems(e, ScriptSpec))) from None
    problems = [(("faults", "kinds", j), f"unknown fault {k!r}{did_you_mean(k, FAULTS)} (known: {', '.join(FAULTS)})")
                for j, k in enumerate(spec.faults.kinds) if k not in FAULTS]
    for i, r in enumerate(spec.rules):
        if r.role is not None and r.role not in ROLE_SCHEMAS:
            problems.append((("rules", i, "role"), f"unknown role {r.role!r}{did_you_mean(r.role, ROLE_SCHEMAS)} "
                             f"(known: {', '.join(ROLE_SCHEMAS)})"))
        if r.fault is not None and r.fault not in FAULTS:
            problems.append((("rules", i, "fault"), f"unknown fault {r.fault!r}{did_you_mean(r.fault, FAULTS)} "
                             f"(known: {', '.join(FAULTS)})"))
        if (r.reply is None) == (r.python is None):
            problems.append((("rules", i), "a rule needs one of reply: or python:"))
    if problems:
        raise ScriptError(located(path, text, problems))
    return spec


def serve(path: Path, port: int | None = None) -> TestServer:
    """A started TestServer playing the script at `path`."""
    spec = load_script(path)
    srv = TestServer(host=spec.host, port=spec.port if port is None else port, latency=spec.latency,
                     default_reply=spec.default_reply, seed=spec.faults.seed)
    for r in spec.rules:
        reply = _function(r.python, Path(path).parent) if r.python else \
            (r.reply if isinstance(r.reply, str) else json.loads(json.dumps(r.reply)))
        srv.add_rule(reply, when=_matcher(r), fault=r.fault, fault_rate=r.fault_rate)
    if spec.faults.kinds:
        srv.set_faults(*spec.faults.kinds, rate=spec.faults.rate, seed=spec.faults.seed)
    return srv.start()
