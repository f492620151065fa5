"""The arrays every metric family computes from: all trace rows of a run in key order (scalar
columns as Arrow, arm and session as integer codes, rankings as CSR over one document
dictionary), the labels as integer lookups, turns as groups of rounds, and per-turn rows as
code columns (`Long`). Why arrays: the per-turn Python loops over pandas groups cost hours at
100,000s of turns (bench/results/metrics.md); these cost seconds.

Trace columns are encoded as integer codes in first-appearance order; rankings are read
dictionary-encoded from Parquet straight into one int code per document; relevance is a
sorted-array lookup of (label row, document code)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.defaults import metric_settings
from harness.metrics.registry import lookup, ranking_names
from harness.store.armset import run_arms
from harness.store.record import Manifest
from harness.store.traces import KEY
from harness.unmeasured import Unmeasured

LATENCY = ("ms_rewrite", "ms_retrieve", "ms_grade", "ms_answer", "ms_decide", "ms_rerank", "ms_support", "ms_total")
SCALAR = ["arm_id", "params", "repeat", "session_id", "turn_index", "round", "is_final", "not_applicable", "error",
          "fallback_reason", "abstained", "answer", "clarify", "applied_filters", "llm_calls", "prompt_tokens",
          "completion_tokens", "cost_usd", "cache_hits", *LATENCY]


def encode(col) -> tuple[np.ndarray, list]:
    """Integer codes in first-appearance order (-1 for null) and the distinct values."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    enc = pc.dictionary_encode(arr)
    codes = np.asarray(enc.indices.fill_null(-1), dtype=np.int64)
    return codes, enc.dictionary.to_pylist()


def present(col) -> np.ndarray:
    """Over an Arrow string column: a non-empty string (not null, not "")."""
    return np.asarray(pc.fill_null(pc.and_(pc.is_valid(col), pc.not_equal(col, "")), False), dtype=bool)


class Traces:
    """All trace rows of a run in key order: scalar columns as Arrow, arm and session as codes,
    rankings as CSR (offsets into one int32 code array) over one document dictionary.
    `Traces.read(run_dir)` reads the Parquet parts; `Traces.from_rows` builds one in memory."""

    def __init__(self, tables: list[pa.Table], column=None):
        """`tables`: the scalar columns plus `ranking` as list<dictionary<string>>, in trace
        order; `column(name)`: that column's chunks in the same order (read on demand)."""
        if not tables:
            raise ValueError("no trace rows")
        self._column = column or (lambda name: [c for t in tables for c in t.column(name).chunks])
        t, offsets, codes, base = self._rankings(tables)
        # rows in key order, as harness.store.traces.read_traces returns them (stable for equal keys)
        order = np.asarray(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in KEY]), dtype=np.int64)
        self.t = t.take(pa.array(order))
        lengths = np.diff(offsets)[order]
        self.offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        self.lengths = lengths
        self.order = order  # key-order row -> trace-order row
        self.codes = np.empty_like(codes)  # key order, gathered in blocks of rows
        starts_old = offsets[:-1][order]
        for a in range(0, len(order), 65536):
            b = min(a + 65536, len(order))
            lens, lo, hi = lengths[a:b], self.offsets[a], self.offsets[b]
            self.codes[lo:hi] = codes[np.repeat(starts_old[a:b] - (self.offsets[a:b] - lo), lens) + np.arange(hi - lo)]
        del codes
        self.arm, self.arms = encode(self.t.column("arm_id"))
        self.sess, self.sessions = encode(self.t.column("session_id"))
        self.rep = np.asarray(self.t.column("repeat"), dtype=np.int64)
        self.tix = np.asarray(self.t.column("turn_index"), dtype=np.int64)
        self.round = np.asarray(self.t.column("round"), dtype=np.int64)
        self._issued = None

    def _rankings(self, tables: list[pa.Table]):
        """The scalar table, CSR offsets and one global document code per listed document (trace
        order); sets self.docs."""
        scalars, offsets, pieces, dicts = [], [np.zeros(1, np.int64)], [], []
        base = 0
        for t in tables:
            scalars.append(t.drop_columns(["ranking"]))
            for chunk in t.column("ranking").chunks:
                off = np.asarray(chunk.offsets, dtype=np.int64)
                vals = chunk.values  # a DictionaryArray; offsets index into it
                dicts.append(vals.dictionary)
                idx = np.asarray(vals.indices.fill_null(-1), dtype=np.int32)[off[0]:off[-1]]
                pieces.append((idx, len(dicts) - 1))
                offsets.append(off[1:] - off[0] + base)
                base += int(off[-1] - off[0])
        allv = pa.chunked_array(dicts, type=pa.string()).combine_chunks()
        enc = pc.dictionary_encode(allv)
        glob = np.asarray(enc.indices, dtype=np.int32)
        self.docs = enc.dictionary.to_pylist()
        starts = np.cumsum([0] + [len(d) for d in dicts])
        codes = np.empty(base, np.int32)
        pos = 0
        for idx, d in pieces:
            m = glob[starts[d]:starts[d + 1]]
            codes[pos:pos + len(idx)] = np.where(idx >= 0, m[np.clip(idx, 0, None)] if len(m) else -1, -1)
            pos += len(idx)
        return pa.concat_tables(scalars).combine_chunks(), np.concatenate(offsets), codes, base

    @classmethod
    def read(cls, run_dir: Path, parts: list[Path] | None = None) -> "Traces":
        """The run's trace parts, or the trace files `parts` (one session group's)."""
        from harness.store.folder import RunFolder

        parts = RunFolder(run_dir).parts() if parts is None else parts
        from harness.store.traces import STREAM, read_trace_file

        whole = {p: read_trace_file(p) for p in parts if Path(p).suffix == STREAM}  # a group's own file: read once

        def read(p, columns):
            return whole[p].select(columns) if p in whole else read_trace_file(p, columns)

        tables = [read(p, [*SCALAR, "ranking"]) for p in parts]  # rankings as dictionary codes
        if not tables:
            raise ValueError(f"{run_dir}: no trace parts")
        return cls(tables, lambda name: [c for p in parts for c in read(p, [name]).column(0).chunks])

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "Traces":
        """Trace rows in memory (e.g. a TREC run file being scored); missing columns are null."""
        from harness.store.traces import SCHEMA

        cols = {c: [r.get(c) for r in rows] for c in SCALAR + ["issued_queries", "filter_violations"]}
        t = pa.table({c: pa.array(v, SCHEMA.field(c).type) for c, v in cols.items()})
        ranking = pa.array([r.get("ranking") or [] for r in rows], pa.list_(pa.string()))
        ranking = pa.ListArray.from_arrays(ranking.offsets, pc.dictionary_encode(ranking.values))
        return cls([t.append_column("ranking", ranking)])

    def __len__(self) -> int:
        return self.t.num_rows

    def ranking(self, row: int) -> np.ndarray:
        return self.codes[self.offsets[row]:self.offsets[row + 1]]

    def prefix(self, rows: np.ndarray, width: int) -> np.ndarray:
        """Codes of the first `width` documents of each row, padded with -1."""
        out = np.full((len(rows), width), -1, np.int64)
        if width == 0 or len(rows) == 0:
            return out
        lens = np.minimum(self.lengths[rows], width)
        r = np.repeat(np.arange(len(rows)), lens)
        c = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        out[r, c] = self.codes[np.repeat(self.offsets[rows], lens) + c]
        return out

    def issued_queries(self, rows: np.ndarray) -> list:
        if self._issued is None:
            self._issued = pa.chunked_array(self._column("issued_queries"))
        return self._issued.take(pa.array(self.order[rows], pa.int64())).to_pylist() if len(rows) else []

    def list_lengths(self, column: str) -> np.ndarray:
        arrs = [pc.fill_null(pc.list_value_length(c), 0) for c in self._column(column)]
        return np.concatenate([np.asarray(a, np.int64) for a in arrs])[self.order]


class Labels:
    """The run's labels with integer lookups: trace (session, turn) -> label row, and each label
    row's relevant documents (grade >= 1) as codes of the traces' document dictionary."""

    def __init__(self, labels: pd.DataFrame, tr: Traces):
        self.df = labels
        self.n = len(labels)
        self.stride = int(max(labels["turn_index"].max() if self.n else 0, tr.tix.max(initial=0))) + 1
        self.usess = pd.Index(pd.unique(labels["session_id"].astype(object)), dtype=object)
        lab_key = self.usess.get_indexer(labels["session_id"].astype(object)) * self.stride \
            + labels["turn_index"].to_numpy(np.int64)
        self.lookup = pd.Index(lab_key)
        self.trace_sess = self.usess.get_indexer(pd.Index(tr.sessions, dtype=object))  # trace session code -> label's
        judged = [{d: int(g) for d, g in json.loads(q).items()} for q in labels["qrels"].tolist()]
        self.qrels = [{d: g for d, g in q.items() if g >= 1} for q in judged]
        self.measured = labels["qrels_measured"].to_numpy(bool)
        self.n_rel = np.array([len(q) for q in self.qrels], np.int64)
        self.n_nonrel = np.array([sum(1 for g in q.values() if 0 <= g < 1) for q in judged], np.int64)  # judged 0
        self._docs = pd.Index(tr.docs, dtype=object)
        self.D = max(len(tr.docs), 1)
        self.key, self.grade, lab, code = self._keyed(self.qrels)
        self.rel_codes: list[set] = [set() for _ in range(self.n)]
        for li, c in zip(lab.tolist(), code.tolist()):
            self.rel_codes[li].add(c)
        self.jkey, self.jgrade = self._keyed(judged)[:2]  # every judgment: 0 and negative grades too

    def _keyed(self, qrels: list[dict]):
        """Sorted keys (label row * D + document code) and grades of the documents of `qrels` that
        some ranking holds (one that none holds is never hit), with their label rows and codes."""
        lab = np.array([i for i, q in enumerate(qrels) for _ in q], np.int64)
        docs = [d for q in qrels for d in q]
        grade = np.array([g for q in qrels for g in q.values()], np.float64)
        code = self._docs.get_indexer(pd.Index(docs, dtype=object)) if docs else np.zeros(0, np.int64)
        keep = code >= 0
        key = lab[keep] * self.D + code[keep]
        o = np.argsort(key, kind="stable")
        return key[o], grade[keep][o], lab[keep], code[keep]

    def rows_of(self, sess: np.ndarray, tix: np.ndarray, table: list | None = None) -> np.ndarray:
        """Label row of each (session code, turn index); -1 where the turn has no label.
        Session codes index the traces' sessions, or `table` when given."""
        to_lab = self.trace_sess if table is None else self.usess.get_indexer(pd.Index(table, dtype=object))
        ls = to_lab[sess] if len(sess) else np.zeros(0, np.int64)
        ok = (ls >= 0) & (tix >= 0) & (tix < self.stride)
        return np.where(ok, self.lookup.get_indexer(np.where(ok, ls * self.stride + tix, -1)), -1)

    def grades(self, label_rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Grade of each code of a 2-D block (one row per label row); 0 where not relevant."""
        return self._find(self.key, self.grade, label_rows, codes, 0.0)

    def judgments(self, label_rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The judgment of each code of a 2-D block, any grade (0 and negative too); NaN where the
        document has none (or there is no document: code -1)."""
        return self._find(self.jkey, self.jgrade, label_rows, codes, np.nan)

    def _find(self, keys, grades, label_rows, codes, missing: float) -> np.ndarray:
        if not len(keys):
            return np.full(codes.shape, missing)
        key = label_rows[:, None] * self.D + codes
        pos = np.clip(np.searchsorted(keys, key), 0, len(keys) - 1)
        hit = (codes >= 0) & (label_rows[:, None] >= 0) & (keys[pos] == key)
        return np.where(hit, grades[pos], missing)


class Long:
    """Per-turn rows as code columns (arm, session and metric as codes into tables)."""

    FIELDS = ("arm", "rep", "sess", "tix", "metric", "value", "unm")

    def __init__(self, **cols):
        self.cols = cols

    @classmethod
    def from_rows(cls, rows: list[tuple]) -> "Long":
        if not rows:
            return cls(**{f: np.zeros(0, np.float64 if f == "value" else object if f == "unm" else np.int64)
                          for f in cls.FIELDS})
        cols = list(zip(*rows))
        return cls(arm=np.asarray(cols[0], np.int64), rep=np.asarray(cols[1], np.int64), sess=np.asarray(cols[2], np.int64),
                   tix=np.asarray(cols[3], np.int64), metric=np.asarray(cols[4], np.int64),
                   value=np.asarray(cols[5], np.float64), unm=np.asarray(cols[6], dtype=object))

    def __len__(self) -> int:
        return len(self.cols["value"])

    @staticmethod
    def concat(parts: list["Long"]) -> "Long":
        return Long(**{f: np.concatenate([p.cols[f] for p in parts]) for f in Long.FIELDS})


class Codes:
    """Metric names as codes, in the order they are first produced."""

    def __init__(self):
        self.names: list[str] = []
        self.code: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        if name not in self.code:
            self.code[name] = len(self.names)
            self.names.append(name)
        return self.code[name]




class Groups:
    """Turns (arm, repeat, session, turn) over all trace rows: a group id per row in
    first-appearance order, rows sorted by (group, round), each group's bounds and final row."""

    def __init__(self, tr: Traces, lab: Labels):
        self.li = lab.rows_of(tr.sess, tr.tix)
        turn = tr.sess * lab.stride + tr.tix
        key = (tr.arm * (int(tr.rep.max(initial=0)) + 1) + tr.rep) * (int(turn.max(initial=0)) + 1) + turn
        self.gid = pd.factorize(key)[0]
        self.order = np.lexsort((tr.round, self.gid))
        self.bounds = np.r_[0, np.nonzero(np.diff(self.gid[self.order]))[0] + 1, len(self.order)]
        self.final = self.order[self.bounds[1:] - 1]

    def rows(self, g: int) -> np.ndarray:
        return self.order[self.bounds[g]:self.bounds[g + 1]]

    def __len__(self) -> int:
        return len(self.bounds) - 1



def decoded(codes: np.ndarray, table: list, chunk_rows: int = 1_000_000) -> pa.ChunkedArray:
    """The strings of `table` at `codes`, as 64-bit-offset strings decoded `chunk_rows` rows at a
    time: one 32-bit string array holds at most 2 GB of text, which an arm id repeated over every
    per-turn row of 200,000 turns x 5 arms exceeds (issue 45: Take overflowed)."""
    dictionary = pa.array(table, pa.large_string())
    chunks = [pa.DictionaryArray.from_arrays(pa.array(codes[a:a + chunk_rows], pa.int32()), dictionary)
              .dictionary_decode() for a in range(0, len(codes), chunk_rows)]
    return pa.chunked_array(chunks, pa.large_string())


def to_frame(long: Long, arms: list, sessions: list, metrics: list, chunk_rows: int = 1_000_000) -> pd.DataFrame:
    """The per-turn DataFrame of compute_metrics (str columns decoded by Arrow from the codes,
    `decoded`'s chunks of `chunk_rows` rows). Consumes `long`: its columns are released as the
    frame's are built."""
    c = long.cols

    def strings(name, table):
        arr = decoded(c.pop(name), table, chunk_rows)
        return pd.array(arr, dtype=pd.StringDtype("pyarrow", na_value=np.nan))

    cols = {"arm_id": strings("arm", arms), "repeat": c.pop("rep"), "session_id": strings("sess", sessions),
            "turn_index": c.pop("tix"), "metric": strings("metric", metrics), "value": c.pop("value")}
    unm = c.pop("unm")
    unm[pd.isna(unm)] = None
    cols["unmeasured"] = pd.Series(unm, dtype=object, copy=False)
    return pd.DataFrame(cols, copy=False)



class Final:
    """The final row of every turn (trace order of keys) and what the outcome families read."""

    def __init__(self, tr: Traces, lab: Labels):
        self.rows = np.nonzero(np.asarray(pc.fill_null(tr.t.column("is_final"), False), dtype=bool))[0]
        ft = tr.t.take(pa.array(self.rows, pa.int64()))
        self.arm, self.rep, self.sess, self.tix = tr.arm[self.rows], tr.rep[self.rows], tr.sess[self.rows], tr.tix[self.rows]
        self.na, self.err = present(ft.column("not_applicable")), present(ft.column("error"))
        self.fb = present(ft.column("fallback_reason"))
        self.li = lab.rows_of(self.sess, self.tix)
        if (self.li < 0).any():
            i = int(np.nonzero(self.li < 0)[0][0])
            raise KeyError((tr.sessions[self.sess[i]], int(self.tix[i])))  # a turn without labels
        na_codes, na_values = encode(ft.column("not_applicable"))
        self.na_text = np.array([Unmeasured.NOT_APPLICABLE.said(v) for v in na_values] + [None], dtype=object)[np.where(self.na, na_codes, -1)]

    def __len__(self) -> int:
        return len(self.rows)

    def long(self, codes: list[int], values: np.ndarray, why: np.ndarray) -> Long:
        """Rows of several metrics per final row: `values` and `why` are (rows, metrics)."""
        m, n = len(codes), len(self.rows)
        return Long(arm=np.repeat(self.arm, m), rep=np.repeat(self.rep, m), sess=np.repeat(self.sess, m),
                    tix=np.repeat(self.tix, m), metric=np.tile(np.asarray(codes, np.int64), n),
                    value=values.reshape(-1), unm=why.reshape(-1))


@dataclass
class Scoring:
    """Everything a family kernel reads: traces, labels, turns, the run's arms (capabilities)
    and settings. Kernels return `Long` rows; `codes` names their metrics."""

    tr: Traces
    lab: Labels
    groups: Groups
    final: Final
    codes: Codes
    settings: dict
    schema: list[dict]
    arms: dict  # arm_id -> harness.store.armset.ArmInfo
    run_dir: Path | None = None
    judged_sessions: object = None  # a session group's: Series of session ids -> which to score (None: all)

    def __post_init__(self):
        # the code tables of the per-turn rows: the traces' arms and sessions, and any that only
        # a judgment names (appended by that family)
        self.arm_names, self.session_names = list(self.tr.arms), list(self.tr.sessions)

    def requested(self, family: str) -> list[str]:
        """The metrics of a family that computes what is asked (registry.family's `requested`):
        the settings' `names` (rankings scored in memory: trec-eval) or the run's ranking
        measures (registry.ranking_names)."""
        names = self.settings.get("names") or ranking_names(self.settings)
        return [n for n in names if lookup(n).family == family]

    def capabilities(self, arm_id: str) -> frozenset:
        """What an arm declares; an arm the manifest does not list (a judgment of an unknown arm)
        is taken as replayed by the harness."""
        info = self.arms.get(arm_id)
        return info.capabilities if info is not None else frozenset({"ranking", "queries", "replayed"})

    def hits_per_round(self) -> list:
        return [self.arms[a].hits_per_round if a in self.arms else None for a in self.tr.arms]


def scoring(run_dir: Path | None, manifest: Manifest, labels: pd.DataFrame, tr: Traces) -> Scoring:
    """What every family kernel reads, for a run (its folder, manifest, labels and traces)."""
    lab = Labels(labels, tr)
    return Scoring(tr=tr, lab=lab, groups=Groups(tr, lab), final=Final(tr, lab), codes=Codes(),
                   settings=metric_settings(manifest.metrics), schema=manifest.filter_schema,
                   arms={a.arm_id: a for a in run_arms(manifest)}, run_dir=Path(run_dir) if run_dir else None)
