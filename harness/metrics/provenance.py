"""Where a run folder's tables came from, recorded in the tables themselves.

Scoring writes into the schema metadata of every table it writes (the metrics and the tables beside
them) one stamp: the content hashes of its inputs (trace parts, labels, judgments, ratings,
the manifest's arms and settings, the eval set's hash: harness.store.integrity.inputs), the version
of the scoring code (a hash of the modules that compute the values), whether the run was complete,
which tables it wrote, the content hash of each table's values (`content`, over the data and not
the stamp, the same for any chunking or write of one table), and when it was scored. A reader compares the stamp with the folder as it is now (`freshness`):
tables whose inputs or code changed since, tables from two scorings mixed, or no stamp at all are
stale, and so are tables whose values are not the ones the stamp certifies (a table replaced under
its stamp); every reason is named.

What a stamp is not: a signature. It catches tables that no longer match their folder (traces
edited or added after scoring, a scoring interrupted between two tables, an older harness), not a
deliberate forgery: whoever can write the folder can run the scorer. In CI the gate reads runs the
job itself replayed and scored."""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.store.folder import LABELS, METRICS, TABLES, RunFolder, RunFolderError
from harness.store.integrity import Completeness, inputs

KEY = "harness.scoring"
HASH_BATCH = 1 << 20  # rows of a table read at a time to check its content hash
PACKAGE = Path(__file__).resolve().parents[1]  # harness/
# the code that computes the values scoring writes (tests/analysis/test_evidence.py: every module scoring
# loads is here or in NEUTRAL)
SOURCES = ("metrics", "guards/identifiers.py", "guards/units.py", "store/armset.py", "store/traces.py", "store/folder.py",
           "arms/result.py", "arms/spelling.py", "defaults.py", "store/record.py", "roles/relevance.py", "store/holes.py",
           "store/turns.py", "arms/capability.py", "unmeasured.py", "store/label_segments.py")
# loaded by scoring, and no value it writes depends on them (integrity and shard decide whether the
# run is complete, which every reader checks anew)
NEUTRAL = ("__init__.py", "analysis/__init__.py", "arms/__init__.py", "guards/__init__.py", "store/__init__.py",
           "roles/__init__.py", "strict.py",
           "store/manifest.py", "store/integrity.py", "store/turn_keys.py", "store/shard.py", "yamlpos.py", "errors.py",
           "evalset/__init__.py",
           "evalset/folder.py", "forking.py")


@functools.cache
def code_version() -> str:
    """A hash of the scoring code's sources (file names and contents)."""
    h = hashlib.sha256()
    for rel in SOURCES:
        p = PACKAGE / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1 << 20)  # a month's session ids recur in every block, its documents in every group
def digest8(v: str | None) -> int:
    """A string's own 64-bit digest (null as the empty string)."""
    return int.from_bytes(hashlib.sha256((v or "").encode()).digest()[:8], "little")


class _Column:
    """The content hash of one column fed piece by piece: validity and values as streams, so that
    the same values give the same hash however they are chunked. A string is fed as its own 64-bit
    digest, computed once per distinct value of a piece (its dictionary), so a month's per-turn rows
    cost a gather per row, not a hash of every repeated arm id."""

    def __init__(self):
        self.valid, self.values = hashlib.sha256(), hashlib.sha256()
        self.seen, self.words = pd.Index([], dtype=object), np.zeros(0, np.uint64)  # strings met, their digests

    def _digests(self, dictionary: pa.Array) -> np.ndarray:
        """The digest of each string of a piece's dictionary, each distinct string digested once per
        column (looked up by a hash index, not a call per string per piece)."""
        values = dictionary.to_numpy(zero_copy_only=False).astype(object)
        pos = self.seen.get_indexer(values)
        if (pos < 0).any():
            fresh = pd.unique(values[pos < 0])
            self.seen = self.seen.append(pd.Index(fresh, dtype=object))
            self.words = np.concatenate([self.words, np.array([digest8(v) for v in fresh], np.uint64)])
            pos = self.seen.get_indexer(values)
        return self.words[pos]

    def update(self, arr: pa.Array) -> None:
        text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
        if pa.types.is_dictionary(arr.type):
            text = pa.types.is_string(arr.type.value_type) or pa.types.is_large_string(arr.type.value_type)
            arr = arr if text else arr.dictionary_decode()
        n, nulls = len(arr), arr.null_count
        # a chunk with no null or only nulls (a turn row's aggregate columns) fed its bytes as such
        self.valid.update(b"\x01" * n if not nulls else bytes(n) if nulls == n
                          else pc.is_valid(arr).to_numpy(zero_copy_only=False).tobytes())
        if text and nulls == n:
            self.values.update(np.full(n, digest8(None), "<u8").tobytes())
            return
        if text:
            enc = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
            words = np.append(self._digests(enc.dictionary), np.uint64(digest8(None)))
            self.values.update(words[np.asarray(enc.indices.fill_null(-1), np.int64)].astype("<u8").tobytes())
            return
        if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type):
            if nulls == n:  # what fill_null gives: zeros, a byte per boolean
                self.values.update(bytes(n * (1 if pa.types.is_boolean(arr.type) else arr.type.bit_width // 8)))
                return
            self.values.update((pc.fill_null(arr, False if pa.types.is_boolean(arr.type) else 0) if nulls else arr)
                               .to_numpy(zero_copy_only=False).tobytes())
            return
        # lists, structs, timestamps: their values as JSON, each with its length
        items = [json.dumps(v, sort_keys=True, default=str).encode() for v in arr.to_pylist()]
        self.values.update(b"".join(len(v).to_bytes(8, "little") + v for v in items))

    def digest(self) -> bytes:
        return self.valid.digest() + self.values.digest()


def _type_name(t: pa.DataType) -> str:
    """A type's name without the list's field name (`item` in memory, `element` read from Parquet);
    a dictionary of strings as its value type (how a column is encoded is not its content)."""
    if pa.types.is_dictionary(t):
        return _type_name(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


class ContentHash:
    """The hash of a table's values (column names, types and data; never its schema metadata, so
    the stamp it sits in is left out), fed the table or the pieces it is written in (`add`)."""

    def __init__(self):
        self.cols: dict[str, tuple[str, _Column]] = {}

    def add(self, piece: pa.Table) -> None:
        for name, col in zip(piece.column_names, piece.columns):
            h = self.cols.setdefault(name, (_type_name(col.type), _Column()))[1]
            for chunk in col.chunks:
                h.update(chunk)

    def hexdigest(self) -> str:
        out = hashlib.sha256()
        for name, (typ, h) in self.cols.items():
            out.update(name.encode() + b"\0" + typ.encode() + b"\0" + h.digest())
        return out.hexdigest()[:32]


def content_hash(pieces: Iterable[pa.Table]) -> str:
    """ContentHash of one table or the pieces it is written in."""
    h = ContentHash()
    for piece in pieces:
        h.add(piece)
    return h.hexdigest()


def certify(st: dict, tables: dict[str, Iterable[pa.Table]], hashed: dict[str, str] | None = None) -> dict:
    """The stamp `st` completed with the tables it certifies (name: the table, or the pieces it is
    written in; `metrics` among them, or its ContentHash in `hashed`, taken as it was written):
    which tables beside the metrics were written, and the content hash of each one's values. The
    one way a stamp comes to cover a table."""
    content = {**{name: content_hash(pieces) for name, pieces in tables.items()}, **(hashed or {})}
    return {**st, "tables": sorted(n for n in content if n != "metrics"), "content": content}


def _content_changes(folder: RunFolder, st: dict) -> list[str]:
    """Tables whose values are not the ones their stamp certifies."""
    content = st.get("content")
    if content is None or "metrics" not in content:
        return [f"{METRICS}'s stamp carries no content hash of its values (scored before the harness recorded one)"]
    out = []
    for name, file in {"metrics": METRICS, **TABLES}.items():
        p = folder.path / file
        if name in content and p.is_file():
            try:  # a batch at a time: a month's per-turn rows would not fit in memory at once
                now = content_hash(pa.Table.from_batches([b]) for b in pq.ParquetFile(p).iter_batches(HASH_BATCH))
            except (OSError, pa.ArrowException) as e:
                out.append(f"{file} cannot be read ({e})")
                continue
            if now != content[name]:
                out.append(f"{file}'s values are not the ones its stamp certifies (content hash {content[name][:12]} "
                           f"when scored, {now[:12]} now): the table was edited or replaced after scoring")
    return out


def stamp(folder: RunFolder, manifest: dict, done: Completeness) -> dict:
    """What a scoring of the folder as it is now reads, and how complete the run is."""
    return {"inputs": inputs(folder, manifest), "code": code_version(), "complete": done.complete,
            "incomplete": None if done.complete else done.describe(),
            "scored": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def metadata(st: dict) -> dict[str, str]:
    return {KEY: json.dumps(st, sort_keys=True)}


def read_stamp(folder: RunFolder, name: str = METRICS) -> dict | None:
    """The stamp of one table (None: no table, or a table written before stamps)."""
    raw = folder.parquet_metadata(name).get(KEY)
    return json.loads(raw) if raw else None


@dataclass
class Freshness:
    scored: bool
    reasons: list[str] = field(default_factory=list)  # why the tables are stale, in words
    stamp: dict | None = None

    @property
    def fresh(self) -> bool:
        return self.scored and not self.reasons

    @property
    def partial(self) -> bool:
        """Scored from an incomplete run (the tables say so)."""
        return bool(self.stamp) and not self.stamp.get("complete")


def _changed(what: str, old, new) -> str | None:
    if old == new:
        return None
    if old is None:
        return f"{what} added since scoring"
    return f"{what} removed since scoring" if new is None else f"{what} changed since scoring"


def _trace_changes(old: dict, new: dict) -> str | None:
    changed = [p for p in new if p in old and old[p] != new[p]]
    added, gone = [p for p in new if p not in old], [p for p in old if p not in new]
    parts = [f"{len(x)} {w} ({', '.join(x[:2])}{', …' if len(x) > 2 else ''})"
             for x, w in ((changed, "changed"), (added, "added"), (gone, "gone")) if x]
    return f"the traces changed since scoring: trace parts {'; '.join(parts)}" if parts else None


def input_changes(old: dict, new: dict) -> list[str]:
    out = [_trace_changes(old.get("traces") or {}, new["traces"])]
    out += [_changed(n, old.get(k), new[k]) for k, n in (("labels", LABELS), ("judgments", "judgments"),
                                                         ("human_judgments", "people's ratings"),
                                                         ("relevance_labels", "the LLM relevance labels"))]
    if old.get("manifest") != new["manifest"]:
        out.append("the manifest's arms, repeats, shard or metric settings changed since scoring")
    if old.get("eval_set") != new["eval_set"]:
        out.append("the eval set's hash in the manifest changed since scoring")
    return [x for x in out if x]


def freshness(folder: RunFolder, manifest: dict | None = None) -> Freshness:
    """Whether the folder's tables were computed from its inputs as they are now, by this code."""
    if not folder.has_metrics():
        return Freshness(False, [f"not scored ({METRICS} is missing)"])
    try:
        st = read_stamp(folder)
    except RunFolderError as e:
        return Freshness(False, [str(e)])
    if st is None:
        return Freshness(True, [f"{METRICS} carries no record of what it was computed from (scored before the "
                                "harness recorded it)"])
    man = manifest if manifest is not None else folder.read_manifest()
    reasons = input_changes(st.get("inputs") or {}, inputs(folder, man))
    reasons += _content_changes(folder, st)
    if st.get("code") != code_version():
        reasons.append(f"the scoring code changed since scoring (then {st.get('code')}, now {code_version()})")
    for name in st.get("tables") or []:
        if not folder.has_table(name):
            reasons.append(f"{TABLES[name]} is missing (scoring wrote it)")
    for name, file in TABLES.items():
        if folder.has_table(name):
            try:
                other = read_stamp(folder, file)
            except RunFolderError as e:
                reasons.append(str(e))
                continue
            if other != st:
                reasons.append(f"{file} is from another scoring than {METRICS}")
    return Freshness(True, reasons, st)
