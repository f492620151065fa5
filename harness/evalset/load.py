"""Load and validate an eval set folder. Every problem is collected (file, line, field) and
reported at once; a set with any problem is refused as a whole."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import yaml
from pydantic import BaseModel, ValidationError

from harness.evalset.folder import CORPUS, INFO, SPLIT_FILES
from harness.errors import BadInput
from harness.evalset.model import Document, EvalSetInfo, Session
from harness.evalset.sessions import Sessions
from harness.yamlpos import WrittenTwice, load_yaml

MAX_DEPTH = 64  # JSON/YAML nesting accepted in an eval set (deeper input would exhaust the stack later)


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field, message = _short(self.field, 200), _short(self.message, 500)  # a hostile id stays readable
        return f"{where}: {field}: {message}" if field else f"{where}: {message}"


def _short(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… ({len(text)} characters)"


class EvalSetError(BadInput):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        head = f"{len(problems)} problem(s) in eval set"
        super().__init__(head + "\n" + "\n".join(f"  {p}" for p in problems))


@dataclass
class EvalSet:
    path: Path
    info: EvalSetInfo
    docs: dict[str, Document]
    sessions: Sessions  # every split, in file order (harness.evalset.sessions: a large set's read per pass)
    split_of: dict[str, str]  # session_id -> split
    content_hash: str
    file_hashes: dict[str, str] = field(default_factory=dict)  # file name -> sha256 of its bytes, as hashed

    @property
    def name(self) -> str:
        return self.info.name

    def sessions_in(self, splits: list[str] | None, keep: Callable[[str], bool] | None = None) -> Iterator[Session]:
        """The sessions of `splits` (every split when none) whose id `keep` accepts (every one when
        None), in file order; a large set's are read from its files (harness.evalset.sessions)."""
        chosen = set(splits or ())
        if not chosen and keep is None:
            return iter(self.sessions)
        return self.sessions.where(lambda sid: (not chosen or self.split_of[sid] in chosen)
                                   and (keep is None or keep(sid)))

    def labelled_turns(self, splits: list[str] | None = None, keep: Callable[[str], bool] | None = None) -> int:
        """How many labelled turns `iter_labelled(self, splits, keep)` yields, without reading a session."""
        chosen = set(splits or ())
        return self.sessions.labelled_turns(None if not chosen and keep is None else (
            lambda sid: (not chosen or self.split_of[sid] in chosen) and (keep is None or keep(sid))))


def _loc(err: dict) -> str:
    return ".".join(str(p) for p in err["loc"]) or "(root)"


def _read_lines(f: BinaryIO, rel: str, problems: list[Problem], h) -> Iterator[tuple[int, int, dict]]:
    """(line number, offset of the line, object) of every line of JSON object of the open file `f`,
    the problems of the others collected; `h` (a hash) is fed every byte read."""
    offset = 0
    for no, bline in enumerate(f, start=1):
        h.update(bline)
        at, offset = offset, offset + len(bline)
        if not bline.strip():
            continue
        try:
            text = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(Problem(rel, no, "(line)", f"not valid UTF-8 at byte {e.start}"))
            continue
        try:
            obj = json.loads(text)
        except RecursionError:
            problems.append(Problem(rel, no, "(line)", "JSON nested too deeply"))
            continue
        except json.JSONDecodeError as e:
            problems.append(Problem(rel, no, "(line)", f"invalid JSON: {e.msg} at column {e.colno}"))
            continue
        except ValueError as e:  # e.g. an integer with more digits than Python converts
            problems.append(Problem(rel, no, "(line)", f"invalid JSON: {e}"))
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(rel, no, "(line)", f"expected a JSON object, got {type(obj).__name__}"))
            continue
        if _depth(obj) > MAX_DEPTH:
            problems.append(Problem(rel, no, "(line)", f"JSON nested too deeply (more than {MAX_DEPTH} levels)"))
            continue
        yield no, at, obj


def _depth(obj) -> int:
    """Nesting depth of parsed JSON/YAML, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def _validate(model: type[BaseModel], obj: dict, rel: str, no: int | None, problems: list[Problem]):
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        for err in e.errors():
            problems.append(Problem(rel, no, _loc(err), err["msg"]))
    except RecursionError:
        problems.append(Problem(rel, no, "(line)", "JSON nested too deeply"))
    return None


def _load_info(root: Path, contents: dict, problems: list[Problem]) -> EvalSetInfo | None:
    """The info file (harness.evalset.folder.INFO), validated; None (with the problems) when it cannot be used."""
    info_path = root / INFO
    if not info_path.exists():
        problems.append(Problem(INFO, None, "", "missing"))
        return None
    data = info_path.read_bytes()
    contents[INFO] = hashlib.sha256(data)
    try:
        raw = load_yaml(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        problems.append(Problem(INFO, data[: e.start].count(b"\n") + 1, "(line)",
                                f"not valid UTF-8 at byte {e.start}"))
        return None
    except WrittenTwice as e:
        problems.append(Problem(INFO, e.line, str(e.key), f"written twice (first on line {e.first}); write each key "
                                "once"))
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problems.append(Problem(INFO, mark.line + 1 if mark else None, "(file)", f"invalid YAML: {e}"))
        return None
    except RecursionError:
        problems.append(Problem(INFO, None, "(file)", "YAML nested too deeply"))
        return None
    if raw is None:
        problems.append(Problem(INFO, None, "(file)", "empty file"))
    elif _depth(raw) > MAX_DEPTH:
        problems.append(Problem(INFO, None, "(file)", f"YAML nested too deeply (more than {MAX_DEPTH} levels)"))
    elif not isinstance(raw, dict):
        problems.append(Problem(INFO, None, "(file)", "expected a mapping"))
    else:
        return _validate(EvalSetInfo, raw, INFO, None, problems)
    return None


def _load_docs(root: Path, contents: dict, problems: list[Problem]) -> dict[str, Document]:
    docs: dict[str, Document] = {}
    corpus_path = root / CORPUS
    if not corpus_path.exists():
        problems.append(Problem(CORPUS, None, "", "missing"))
        return docs
    contents[CORPUS] = hashlib.sha256()
    with open(corpus_path, "rb") as f:
        lines = list(_read_lines(f, CORPUS, problems, contents[CORPUS]))
    for no, _, obj in lines:
        d = _validate(Document, obj, CORPUS, no, problems)
        if d is None:
            continue
        if d.doc_id in docs:
            problems.append(Problem(CORPUS, no, "doc_id", f"duplicate doc_id {d.doc_id!r}"))
            continue
        docs[d.doc_id] = d
    if not docs and not any(p.file == CORPUS for p in problems):
        problems.append(Problem(CORPUS, None, "", "empty corpus"))
    return docs


def _load_sessions(root: Path, contents: dict, docs: dict, info, problems: list[Problem]):
    """The sessions of every split file, and each session's split."""
    sessions = Sessions.of_files(root, [root / f for f in SPLIT_FILES.values() if (root / f).exists()])
    split_of: dict[str, str] = {}
    line_of: dict[str, tuple[str, int]] = {}
    if not (root / SPLIT_FILES["main"]).exists():
        problems.append(Problem(SPLIT_FILES["main"], None, "", "missing"))
    for split, fname in SPLIT_FILES.items():
        p = root / fname
        if not p.exists():
            continue
        n_before = len(sessions)
        contents[fname] = hashlib.sha256()
        with open(p, "rb") as f:
            _split_sessions(f, fname, split, (sessions, split_of, line_of), docs, info, problems, contents[fname])
        if len(sessions) == n_before and not any(x.file == fname for x in problems):
            problems.append(Problem(fname, None, "", "no sessions"))
    return sessions, split_of


def _split_sessions(f: BinaryIO, fname: str, split: str, into: tuple, docs: dict, info, problems: list[Problem],
                    h) -> None:
    """The sessions of one split file, validated and checked one line at a time (`into`: the
    sessions, each session's split and the line of each session id so far)."""
    sessions, split_of, line_of = into
    for no, at, obj in _read_lines(f, fname, problems, h):
        sid = obj.get("session_id")
        if isinstance(sid, str) and sid in line_of:  # checked before validation: a bad twin still counts
            f0, l0 = line_of[sid]
            problems.append(Problem(fname, no, "session_id", f"duplicate session_id {sid!r} (first at {f0}:{l0})"))
            continue
        if isinstance(sid, str):
            line_of[sid] = (fname, no)
        s = _validate(Session, obj, fname, no, problems)
        if s is None:
            continue
        split_of[s.session_id] = split
        sessions.add(fname, at, s)
        _check_session(s, docs, info, fname, no, problems)


def load_eval_set(path: str | Path) -> EvalSet:
    """Load the eval set in folder `path`; raise EvalSetError listing every problem."""
    root = Path(path)
    problems: list[Problem] = []
    if not root.is_dir():
        raise EvalSetError([Problem(str(root), None, "", "not a folder")])
    contents: dict = {}  # file name -> sha256 of its bytes as read, for the content hash
    info = _load_info(root, contents, problems)
    docs = _load_docs(root, contents, problems)
    sessions, split_of = _load_sessions(root, contents, docs, info, problems)
    if problems:
        raise EvalSetError(problems)
    assert info is not None
    return EvalSet(root, info, docs, sessions, split_of, _content_hash(contents),
                   {n: h.hexdigest() for n, h in contents.items()})


def _check_session(s: Session, docs: dict, info: EvalSetInfo | None, fname: str, no: int, problems: list[Problem]):
    prev = 0
    labelled = 0
    for i, t in enumerate(s.turns):
        tix = t.turn_index or (i + 1)
        if tix <= prev:
            problems.append(Problem(fname, no, f"turns.{i}.turn_index", f"{tix} does not increase (previous {prev})"))
        prev = tix
        if t.assistant:
            for j, sh in enumerate(t.assistant.shown):
                if docs and sh.doc_id not in docs:
                    problems.append(Problem(fname, no, f"turns.{i}.assistant.shown.{j}.doc_id", f"unknown document {sh.doc_id!r}"))
        if info is not None:
            for j, f in enumerate(t.state.filters):
                if info.filter_field(f.field) is None:
                    problems.append(Problem(fname, no, f"turns.{i}.state.filters.{j}.field", f"unknown filter field {f.field!r}"))
        if t.labels is None:
            continue
        labelled += 1
        for doc in t.labels.qrels:
            if docs and doc not in docs:
                problems.append(Problem(fname, no, f"turns.{i}.labels.qrels.{doc}", "qrels name an unknown document"))
        if t.labels.surface_doc and docs and t.labels.surface_doc not in docs:
            problems.append(Problem(fname, no, f"turns.{i}.labels.surface_doc", f"unknown document {t.labels.surface_doc!r}"))
        if info is not None:
            for j, f in enumerate(t.labels.expected_filters):
                ff = info.filter_field(f.field)
                if ff is None:
                    problems.append(Problem(fname, no, f"turns.{i}.labels.expected_filters.{j}.field", f"unknown filter field {f.field!r}"))
    if labelled == 0:
        problems.append(Problem(fname, no, "turns", "session has no labelled turn"))


def _content_hash(contents: dict) -> str:
    """sha256 over (name, sha256 of bytes) of each eval set file present, in a fixed order."""
    h = hashlib.sha256()
    for name in [INFO, CORPUS, *SPLIT_FILES.values()]:
        if name in contents:
            h.update(name.encode() + b"\0")
            h.update(contents[name].digest())
    return h.hexdigest()


def iter_labelled(es: EvalSet, splits: list[str] | None = None, keep: Callable[[str], bool] | None = None):
    """(session, position, turn_index, turn) for every labelled turn (of the sessions whose id
    `keep` accepts, when given)."""
    for s in es.sessions_in(splits, keep):
        for i, t in enumerate(s.turns):
            if t.labels is not None:
                yield s, i, (t.turn_index or i + 1), t


def dump_jsonl(rows, path: Path) -> None:
    """Write models or dicts as JSON lines (atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for r in rows:
            obj = r.model_dump(exclude_none=True, exclude_defaults=True) if isinstance(r, BaseModel) else r
            f.write(json.dumps(obj, ensure_ascii=False, sort_keys=False) + "\n")
    tmp.replace(path)
