"""The scripted OpenAI-compatible test server in a process of its own, on 127.0.0.1, for the
benchmarks: the client's CPU (SDK, transport, connection pool) and the server's then run on
different interpreters, as against a real endpoint, instead of sharing one GIL.

    .venv/bin/python bench/endpoint.py --latency 0.1 [--reply rewrite|rewrite_new|ragas]

prints one JSON line `{"base_url": ...}`, then answers commands on stdin, one per line:
`stats` (a JSON line: calls, peak_in_flight, cpu: the process's CPU seconds so far), `reset`
(clears them; prints `{}`), `shapes` (the chat requests since the last reset, counted by shape:
prompt kind, message roles, the fields besides the messages); it stops at the end of stdin.
`Endpoint(latency)` in the benchmarks starts and drives it.

Replies (the rewrite role's contract): `rewrite` gives the masked turn back as the standalone
query; `rewrite_new` gives a query text nobody asked before (the turn with a suffix), so every
turn brings a cold query embedding; `ragas` answers Ragas's two faithfulness prompts (statement
extraction: the first two sentences of the answer, padded to two; NLI: every statement given,
verdict 1), so a sample costs exactly 2 calls and scores 1.0, and every other request as `rewrite`
does, so one endpoint process serves both tools of bench/ragas_side.py."""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rewrite_reply(req: dict) -> dict:
    """The masked turn as the standalone query (a valid RewriteOutput)."""
    turn = json.loads(req["messages"][-1]["content"])["turn"]
    return {"standalone": turn, "must_keep": [], "filters": [], "confidence": 0.9, "variants": [], "clarify": None}


def rewrite_new_reply(req: dict) -> dict:
    """A standalone query no run has embedded yet: the turn plus a word of the reply's own."""
    return {**rewrite_reply(req), "standalone": rewrite_reply(req)["standalone"] + " explained"}


RAGAS_INPUT = "Now perform the same with the following input\ninput: "  # ragas PydanticPrompt.to_string


def prompt_kind(req: dict) -> str:
    """Which Ragas faithfulness prompt this is (its output schema's title is in the first message)."""
    first = req["messages"][0].get("content") or ""
    return ("ragas NLI verdicts" if "NLIStatementOutput" in first else
            "ragas statement extraction" if "StatementGeneratorOutput" in first else "other")


def _ragas_input(req: dict) -> dict:
    """The input object of a Ragas PydanticPrompt (after its examples), or {} if it is not found."""
    text = "\n".join(m["content"] for m in req["messages"] if isinstance(m.get("content"), str))
    try:
        value = json.loads(text.rsplit(RAGAS_INPUT, 1)[-1].rsplit("\nOutput:", 1)[0])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def ragas_reply(req: dict):
    """Ragas faithfulness: StatementGeneratorOutput (two statements) and NLIStatementOutput (each
    statement supported); any other request as the rewrite role."""
    kind = prompt_kind(req)
    if kind == "ragas NLI verdicts":
        statements = _ragas_input(req).get("statements") or ["The answer is supported."]
        return {"statements": [{"statement": s, "reason": "stated in the context", "verdict": 1} for s in statements]}
    if kind == "ragas statement extraction":
        answer = str(_ragas_input(req).get("answer", "")) or "The answer."
        sentences = [s.strip() + "." for s in answer.split(".") if s.strip()]
        return {"statements": (sentences + [answer, answer])[:2]}
    return rewrite_reply(req)


def shapes(requests) -> dict:
    """Chat requests counted by shape: {json of (kind, roles, fields besides messages): count}."""
    out: dict[str, int] = {}
    for r in requests:
        if isinstance(r.json, dict) and r.path.endswith("/chat/completions"):
            shape = {"kind": prompt_kind(r.json), "roles": [m.get("role") for m in r.json.get("messages", [])],
                     "fields": {k: v for k, v in sorted(r.json.items()) if k != "messages"}}
            key = json.dumps(shape, sort_keys=True)
            out[key] = out.get(key, 0) + 1
    return out


REPLIES = {"rewrite": rewrite_reply, "rewrite_new": rewrite_new_reply, "ragas": ragas_reply}


class Endpoint:
    """`bench/endpoint.py` as a child process: `with Endpoint(0.1) as ep: ep.base_url`."""

    def __init__(self, latency: float, reply: str = "rewrite"):
        self.latency, self.reply = latency, reply
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> "Endpoint":
        self.proc = subprocess.Popen([sys.executable, str(HERE / "endpoint.py"), "--latency", str(self.latency),
                                      "--reply", self.reply], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.base_url = json.loads(self.proc.stdout.readline())["base_url"]
        return self

    def _ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stats(self) -> dict:
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def shapes(self) -> dict:
        return self._ask("shapes")

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per call")
    ap.add_argument("--reply", choices=sorted(REPLIES), default="rewrite")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    from harness.testing import TestServer

    with TestServer(latency=args.latency) as srv:
        srv.add_rule(REPLIES[args.reply])
        print(json.dumps({"base_url": srv.base_url}), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "stats":
                r = resource.getrusage(resource.RUSAGE_SELF)
                print(json.dumps({"calls": srv.calls, "peak_in_flight": srv.peak_in_flight,
                                  "cpu": r.ru_utime + r.ru_stime}), flush=True)
            elif cmd == "shapes":
                print(json.dumps(shapes(srv.requests)), flush=True)
            elif cmd == "reset":
                srv.reset_stats()
                print("{}", flush=True)


if __name__ == "__main__":
    main()
