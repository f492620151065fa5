"""Headless Chromium for the report's browser tests: the binary (a test fails under CI=true without
it, and is skipped elsewhere), and a page driven over the DevTools protocol on a loopback port
(open a file, evaluate JavaScript, click, type, take a screenshot). The page runs with its own
Content-Security-Policy: what a test evaluates runs beside the page's scripts, never instead of them."""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from websockets.sync.client import connect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--hide-scrollbars"]


def binary() -> str:
    """The Chromium on PATH; pytest.fail under CI=true without one (.ci/run installs it), else skip."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium/chromium-browser on PATH: the browser test must run in CI")
        pytest.skip("chromium not installed (apt-get install chromium); the browser check did not run")
    return found


class Page:
    """One tab of a headless Chromium of its own (profile in `tmp`), at `width` x `height` CSS pixels."""

    def __init__(self, tmp: Path, width: int = 1400, height: int = 900):
        profile = Path(tmp) / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a former browser's port
        self.proc = subprocess.Popen(
            [binary(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(tmp)})
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.stack = ExitStack()
        try:
            self.ws = self.stack.enter_context(
                connect(self._endpoint(profile / "DevToolsActivePort"), max_size=None, open_timeout=30))
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                     session=False)["sessionId"]
            for domain in ("Page", "Runtime"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    def _endpoint(self, active: Path, timeout: float = 30.0) -> str:
        """The browser's WebSocket address, from the file Chromium writes once it listens."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            lines = active.read_text().splitlines() if active.exists() else []
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before listening")
            time.sleep(0.05)
        raise TimeoutError("chromium wrote no DevToolsActivePort")

    def call(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60.0) -> dict:
        """Send one DevTools command and return its result (events that arrive meanwhile are kept)."""
        msg = {"id": next(self.ids), "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        end = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, end - time.monotonic())))
            if reply.get("id") != msg["id"]:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply["result"]

    def open(self, path: Path, fragment: str = "", timeout: float = 60.0) -> None:
        """Load a local file (with `#fragment`) and wait for its load event."""
        self.events.clear()
        url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
        self.call("Page.navigate", {"url": url})
        end = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > end:
                raise TimeoutError(f"{url} did not load")
            self.events.append(json.loads(self.ws.recv(timeout=max(0.1, end - time.monotonic()))))

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 30.0):
        """Poll an expression until it is truthy; its value."""
        end = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value or time.monotonic() > end:
                return value
            time.sleep(0.1)

    def type(self, selector: str, text: str) -> None:
        """Focus the element and type `text` into it as a user would (an input event per insertion)."""
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", {"text": text})

    def screenshot(self, out: Path) -> Path:
        """The viewport as a PNG file."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        Path(out).write_bytes(base64.b64decode(data))
        return Path(out)

    def close(self) -> None:
        self.stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
