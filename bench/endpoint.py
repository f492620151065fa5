"""The scripted OpenAI-compatible test server in a process of its own, on 127.0.0.1, for the
benchmarks: the client's CPU (SDK, transport, connection pool) and the server's then run on
different interpreters, as against a real endpoint, instead of sharing one GIL.

    .venv/bin/python bench/endpoint.py --latency 0.1 [--reply rewrite|rewrite_new]

prints one JSON line `{"base_url": ...}`, then answers commands on stdin, one per line:
`stats` (a JSON line: calls, peak_in_flight, cpu: the process's CPU seconds so far), `reset` (clears them; prints `{}`); it stops at
the end of stdin. `Endpoint(latency)` in the benchmarks starts and drives it.

Replies (the rewrite role's contract): `rewrite` gives the masked turn back as the standalone
query; `rewrite_new` gives a query text nobody asked before (the turn with a suffix), so every
turn brings a cold query embedding."""
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


REPLIES = {"rewrite": rewrite_reply, "rewrite_new": rewrite_new_reply}


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
            elif cmd == "reset":
                srv.reset_stats()
                print("{}", flush=True)


if __name__ == "__main__":
    main()
