"""Scoring a run a session group at a time (issue 45): the run's sessions in sorted order cut into
groups of about GROUP_TURNS labelled turns, the trace parts split once into one temporary file per
group, and every metric family's per-turn rows computed over one group's traces and labels. A
session's turns never span two groups, so what the statistics resample (sessions) is whole in
one group, and the memory of a group's arrays does not grow with the run."""
from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.metrics.kernel import Long, Scoring, Traces, scoring, to_frame
from harness.metrics.registry import families, lookup
from harness.store.record import Manifest
from harness.store.traces import KEY, RANKING, SCHEMA, STREAM, has_rows, read_trace_file

GROUP_TURNS = 5_000  # labelled turns per session group: bounds the memory of one group's arrays (a worker's)


@dataclass
class Group:
    """One session group's labels (the run's label rows of its sessions, their index kept), its
    per-turn rows of every metric (compute_metrics' columns) and names of the metrics with rows."""

    labels: pd.DataFrame
    per_turn: pd.DataFrame
    metrics: list[str]
    parts: list[Path]  # the group's trace rows (a temporary file, or the run's parts for one group)
    arm_infos: list


def session_groups(labels: pd.DataFrame, group_turns: int = GROUP_TURNS) -> list[list[str]]:
    """The labels' sessions in sorted order, cut into groups of at least `group_turns` labelled turns
    (the last may hold fewer); one group when the run is smaller."""
    counts = labels.groupby(labels["session_id"].astype(str), sort=True).size()
    groups, current, n = [], [], 0
    for sid, k in counts.items():
        current.append(sid)
        n += int(k)
        if n >= group_turns:
            groups.append(current)
            current, n = [], 0
    return groups + [current] if current or not groups else groups


def split_into(parts: list[Path], groups: list[list[str]], out: Path, tag: str) -> list[Path | None]:
    """The trace rows of `parts` of each group in a file of its own (`out`/group-i-`tag`, an Arrow
    stream, the rankings' ids as the parts' dictionary codes: no id is encoded again), read part by
    part once; each group's file (None: no row). Rows of a session no label names go with the first
    group (where scoring refuses them, as for one group)."""
    index = pd.Index([s for g in groups for s in g])
    group_of = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    paths = [out / f"group-{i:05d}-{tag}{STREAM}" for i in range(len(groups))]
    files: dict[int, pa.NativeFile] = {}
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    try:
        for p in parts:
            t = read_trace_file(p)
            pos = index.get_indexer(pd.Index(t.column("session_id").to_numpy(zero_copy_only=False)))
            g = np.where(pos >= 0, group_of[np.clip(pos, 0, None)], 0)
            for i in np.unique(g).tolist():
                if i not in writers:  # compressed: a month's group files take a third of the space
                    files[i] = pa.OSFile(str(paths[i]), "wb")
                    writers[i] = pa.ipc.new_stream(files[i], t.schema, options=pa.ipc.IpcWriteOptions(compression="lz4"))
                mine = t.filter(pa.array(g == i))
                writers[i].write_table(mine.set_column(mine.schema.get_field_index("ranking"), "ranking",
                                                       compact(mine.column("ranking"))))
    finally:
        for w in writers.values():
            w.close()
        for f in files.values():  # a stream writer leaves the file it was given open
            f.close()
    return [paths[i] if i in writers else None for i in range(len(groups))]


def compact(ranking: pa.ChunkedArray) -> pa.ChunkedArray:
    """Rankings of dictionary codes (RANKING), each chunk's dictionary cut to the ids its rows list: a
    part's row group's dictionary would otherwise travel whole into every group its rows feed."""
    out = []
    for ch in ranking.chunks:
        off = np.asarray(ch.offsets, np.int64)
        vals = ch.values.slice(off[0], off[-1] - off[0])
        idx = np.asarray(vals.indices.fill_null(-1), np.int64)
        used = np.zeros(len(vals.dictionary) + 1, bool)
        used[idx] = True  # a null id marks the last slot, which is no id
        keep = np.flatnonzero(used[:-1])
        new = np.full(len(vals.dictionary) + 1, -1, np.int64)
        new[keep] = np.arange(len(keep))
        codes = new[idx]
        ids = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), mask=codes < 0),
                                             vals.dictionary.take(pa.array(keep, pa.int64())))
        out.append(pa.ListArray.from_arrays(pa.array(off - off[0], pa.int32()), ids, mask=ch.is_null()))
    return pa.chunked_array(out, RANKING)


def split_parts(parts: list[Path], groups: list[list[str]], out: Path, pool: Executor | None = None, n: int = 1
                ) -> list[list[Path]]:
    """The files holding each group's trace rows: the run's parts for one group, else temporary files
    under `out`, the parts read in `n` consecutive runs on `pool` (None: here) (each group's files in
    the parts' order, so its rows are in the order one reader gives)."""
    if len(groups) == 1:
        return [list(parts)]
    runs = [c.tolist() for c in np.array_split(np.arange(len(parts)), max(1, min(n, len(parts)))) if len(c)]
    calls = [([parts[k] for k in r], groups, out, f"{j:03d}") for j, r in enumerate(runs)]
    got = list(pool.map(split_into, *zip(*calls))) if pool is not None else [split_into(*c) for c in calls]
    return [[r[i] for r in got if r[i] is not None] for i in range(len(groups))]


def read_rounds(parts: list[Path], columns: list[str], reduced: dict[str, Callable] | None = None) -> pa.Table:
    """`columns` of the trace rows in `parts`, in key order (harness.store.traces.read_traces' order).
    `reduced`: columns replaced, part by part, by what a function makes of each (an array of as many
    rows) before the rows are put in order, so a wide column (the rankings: 100 ids a row) is never
    reordered."""
    read = list(dict.fromkeys([*columns, *KEY]))
    tables = [read_trace_file(p, read) for p in parts] or [SCHEMA.empty_table().select(read)]
    for name, f in (reduced or {}).items():
        tables = [t.set_column(t.column_names.index(name), name, pa.array(f(t.column(name)))) for t in tables]
    t = pa.concat_tables(tables)
    return t.sort_by([(k, "ascending") for k in KEY]).select(columns)


def applicable(s: Scoring, long: Long) -> Long:
    """Only the rows of metrics whose arm has the capabilities the metric needs: the one place
    that decides which metric applies to which arm (kernels compute for every arm)."""
    codes, arms = long.cols["metric"], long.cols["arm"]
    keep = np.ones(len(long), bool)
    for code in np.unique(codes).tolist():
        m = lookup(s.codes.names[code])
        if m is None or not m.needs:
            continue
        ok = np.array([m.applies_to(s.capabilities(a)) for a in s.arm_names], bool)
        sel = codes == code
        keep[sel] = ok[arms[sel]]
    return long if keep.all() else Long(**{f: v[keep] for f, v in long.cols.items()})


def family_rows(s: Scoring, stage=lambda name: None) -> list[Long]:
    """Every family's rows that apply, in family order."""
    out: list[Long] = []
    for fam in families():
        got = fam.kernel(s)
        out += [x for x in (applicable(s, y) for y in (got if isinstance(got, list) else [got]) if y is not None)
                if len(x)]
        stage(f"{fam.name} metrics")
    return out


def label_groups(labels: pd.DataFrame, groups: list[list[str]]) -> np.ndarray:
    """The session group of each label row (by its session id), computed once for every group."""
    of = pd.Index([s for g in groups for s in g]).get_indexer(labels["session_id"].astype(str))
    return np.repeat(np.arange(len(groups)), [len(g) for g in groups])[of]


def score_group(run_dir: Path, man: Manifest, labels: pd.DataFrame, sessions: list[str], parts: list[Path],
                measures: list[str], first: bool, mine: np.ndarray | None = None, known: set[str] | None = None
                ) -> Group | None:
    """Every family's per-turn rows over one group's traces (None: the group has no trace row).
    `first`: the group that also takes judgments of sessions no label names. `mine` (the group's label
    rows) and `known` (every session id the labels name): taken from the labels unless given."""
    mine = labels["session_id"].astype(str).isin(set(sessions)).to_numpy() if mine is None else mine
    lab = labels[mine]
    if not any(has_rows(p) for p in parts):
        return None
    s = scoring(run_dir, man, lab.reset_index(drop=True), Traces.read(run_dir, parts))
    known = set(labels["session_id"].astype(str)) if known is None else known
    s.judged_sessions = lambda ids: ids.astype(str).isin(set(sessions)) | (first & ~ids.astype(str).isin(known))
    s.settings["measures"] = [*s.settings["measures"], *measures]
    found = family_rows(s)
    if not found:
        return Group(lab, None, [], parts, list(s.arms.values()))
    long = Long.concat(found)
    names = [s.codes.names[i] for i in sorted(set(np.unique(long.cols["metric"]).tolist()))]
    return Group(lab, to_frame(long, s.arm_names, s.session_names, s.codes.names), names, parts,
                 list(s.arms.values()))

