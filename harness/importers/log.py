"""`harness import log`: build an eval set from logged production sessions, redacting e-mail
addresses, phone numbers and IBANs before anything is written.

Log format (JSONL, one event per line; documented in docs/eval-sets.md):
  {"session_id": "...", "turn": 1, "user": "...", "assistant": "...", "shown": [{"doc_id", "name"}],
   "filters": [{field, op, value}], "account": {...}, "relevant": ["doc_id", ...]}
Events are grouped by session and ordered by `turn`; the corpus is taken from an existing eval
set (`--corpus-from`). Logged turns have no reference labels; `relevant` (e.g. clicked or
ordered items) becomes grade-1 qrels when present, otherwise the turn is unmeasured for IR."""
from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import typer

from harness.evalset.folder import EMBEDDINGS, INFO
from harness.errors import BadInput
from harness.evalset.load import load_eval_set
from harness.importers.common import write_eval_set
from harness.importers.registry import importer
from harness.yamlpos import read_yaml

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?\b")
PHONE = re.compile(r"(?<![\w-])(?:\+|00)?\d[\d /().-]{6,}\d(?![\w-])")


def redact(text: str) -> str:
    """E-mail addresses, IBANs and phone numbers replaced by placeholders. Identifiers such as
    part numbers (4711-32) and EANs are short or unbroken digit groups and are kept."""
    text = EMAIL.sub("[email]", text)
    text = IBAN.sub("[iban]", text)

    def phone(m: re.Match) -> str:
        digits = re.sub(r"\D", "", m.group(0))
        if len(digits) < 8 or re.fullmatch(r"\d{8}|\d{13}", m.group(0)):  # EAN-8/13 as typed
            return m.group(0)
        if re.fullmatch(r"\d{3,6}-\d{1,4}(?:-\d{1,4})?", m.group(0)):  # a part number
            return m.group(0)
        return "[phone]"

    return PHONE.sub(phone, text)


class LogError(BadInput, ValueError):
    pass


def import_log(log_path: Path, corpus_from: Path, out: Path, name: str) -> Path:
    base = load_eval_set(corpus_from)
    events: dict[str, list] = defaultdict(list)
    problems = []
    for no, line in enumerate(Path(log_path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{log_path}:{no}: (line): invalid JSON: {err.msg}")
            continue
        bad = [f"{log_path}:{no}: {field}: missing" for field in ("session_id", "turn", "user")
               if not isinstance(e, dict) or field not in e]
        if not bad and not isinstance(e["user"], str):
            bad.append(f"{log_path}:{no}: user: expected a string")
        if not bad and not str(e["turn"]).isdigit():
            bad.append(f"{log_path}:{no}: turn: expected a positive integer")
        problems += bad
        if not bad:
            events[str(e["session_id"])].append(e)
    if problems:
        raise LogError("\n".join(problems))
    sessions = []
    for sid, evs in events.items():
        turns = []
        for e in sorted(evs, key=lambda x: int(x["turn"])):
            t = {"user": redact(e["user"]), "turn_index": int(e["turn"]),
                 "state": {"filters": e.get("filters") or []}}
            if e.get("assistant") or e.get("shown"):
                t["assistant"] = {"answer": redact(e.get("assistant") or ""),
                                  "shown": [{"doc_id": s["doc_id"], "name": redact(s.get("name", ""))} for s in e.get("shown") or []]}
            rel = [d for d in e.get("relevant") or [] if d in base.docs]
            t["labels"] = {"qrels": {d: 1 for d in rel}, "qrels_measured": bool(rel), "query_type": "logged"}
            turns.append(t)
        sessions.append({"session_id": f"log-{sid}", "account": evs[0].get("account") or {}, "turns": turns})
    info = {**read_yaml(Path(corpus_from) / INFO, BadInput)[0],
            "name": name, "version": "1", "source": f"production log {Path(log_path).name} (redacted)",
            "written_here": False, "description": f"Logged sessions replayed against the corpus of {base.name}"}
    docs = [d.model_dump() for d in base.docs.values()]
    out = write_eval_set(out, info, docs, sessions)
    emb = Path(corpus_from) / EMBEDDINGS
    if emb.exists() and not (out / EMBEDDINGS).exists():
        shutil.copytree(emb, out / EMBEDDINGS)  # the same corpus: reuse its passage cache
    return out


@importer("log")
def command(log: Path, corpus_from: Path = typer.Option(..., "--corpus-from", help="eval set whose corpus the log used"),
            out: Path = typer.Option(..., "--out", "-o"), name: str = typer.Option(...)) -> Path:
    """Build an eval set from logged production sessions (JSONL); e-mails, phone numbers and IBANs redacted first."""
    if not log.exists():
        raise BadInput(f"{log}: no such file")
    return import_log(log, corpus_from, out, name)
