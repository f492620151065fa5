"""How the HTML report writes values: numbers (3 decimals, an em dash when missing), texts from
traces and labels, JSON cells, filters, the metric cell every table of aggregates shows, and
paths (never an absolute path of the machine that built the report). Formatting only: nothing
here computes a number."""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pandas as pd


def missing(v) -> bool:
    if v is None or v is pd.NA:
        return True
    try:
        return bool(isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def fmt(v, digits: int = 3) -> str:
    """The report's number format (3 decimals); an em dash for a missing value."""
    return "—" if missing(v) else f"{float(v):.{digits}f}"


def text(v) -> str | None:
    """A trace/label string or None (NaN, None and '' are None)."""
    return None if missing(v) or v == "" else str(v)


def as_list(v) -> list:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    return list(v)


def loads(v, default):
    try:
        return json.loads(v) if text(v) else default
    except (TypeError, ValueError):
        return default


def filter_text(f: dict) -> str:
    v = f.get("value")
    v = json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v)
    return f"{f.get('field')} {f.get('op', 'eq')} {v}"


def count(v) -> int:
    """A count read from a table (0 when missing)."""
    return 0 if missing(v) else int(v)


def cell(run_key: str, arm: str, metric: str, segment: str, row) -> dict:
    """One aggregate of the metrics table as the templates' `num` macro shows it (mean, n,
    unmeasured); {present: False} when the run has no such aggregate."""
    if row is None:
        return {"present": False}
    n, nu = count(row["n"]), count(row["n_unmeasured"])
    return {"present": True, "run": run_key, "arm": arm, "metric": metric, "segment": segment,
            "mean": fmt(row["mean"]) if n else "n/a", "n": n, "n_unmeasured": nu}


def _roots() -> list[Path]:
    """Folders the report names paths relative to: the working folder, then $HARNESS_HOME."""
    out = [Path.cwd()]
    if os.environ.get("HARNESS_HOME"):
        out.append(Path(os.environ["HARNESS_HOME"]))
    return [r.resolve() for r in out]


def shown_path(p) -> str:
    """A path as the report shows it, never an absolute path of the machine that built it:
    relative to the working folder (or $HARNESS_HOME) when inside it, else `…/` and its last two
    parts."""
    s = str(p)
    path = Path(s)
    if not path.is_absolute():
        return s
    for root in _roots():
        try:
            return str(path.resolve().relative_to(root)) or "."
        except ValueError:
            continue
    return "…/" + "/".join(path.parts[-2:])


ABSOLUTE = re.compile(r"(?<![\w.~/-])/[^\s`'\"()\[\],;]+")


def scrub(v):
    """A manifest, config or message with every absolute path in it shown as `shown_path` does
    (dicts and lists walked; other values unchanged)."""
    if isinstance(v, str):
        return ABSOLUTE.sub(lambda m: shown_path(m.group(0)), v) if "/" in v else v
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [scrub(x) for x in v]
    return v
