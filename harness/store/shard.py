"""Sharding a replay over processes or machines, and merging the shards' run folders.

A shard keeps the jobs whose session falls to it (`shard_of(session_id, n) == i`), so every turn
of a session stays in one shard and the split depends only on the session ids: the same on any
machine, in any order, for any arm. Each shard process builds its own in-memory index from the
shared embedding cache (or talks to one shared Qdrant at `index.qdrant_url`) and writes its own
run folder; `merge_runs` joins them into one run folder that scores exactly like the unsharded
run (see harness.store.equality)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from harness.errors import BadInput
from harness.store.folder import RunFolder, RunFolderExists
from harness.store.manifest import merged
from harness.store.record import Manifest
from harness.store.traces import KEY, read_part, read_traces


class ShardError(BadInput, ValueError):
    """Shard run folders that cannot be merged (named and explained)."""


def shard_of(key: str, n: int) -> int:
    """The shard (0..n-1) of a key: the first 8 bytes of its sha256, modulo n. Stable across
    processes, machines and Python versions (unlike hash())."""
    if n < 1:
        raise ShardError(f"shard count must be >= 1, got {n}")
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % n


def parse_shard(text: str) -> tuple[int, int]:
    """`i/n` (0 <= i < n), as given to `harness run --shard`."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"--shard {text!r}: expected i/n, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ShardError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


def in_shard(session_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether a session's jobs belong to `shard` (None: no sharding, every session)."""
    return shard is None or shard_of(session_id, shard[1]) == shard[0]


def _sum_counts(counts: list[dict]) -> dict:
    out: dict = {}
    for c in counts:
        for k, v in c.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    if "seconds" in out:  # shards run side by side: the merged run took as long as the slowest
        out["seconds_sum"] = round(out["seconds"], 2)
        out["seconds"] = max(c.get("seconds", 0) for c in counts)
    return out


def _check_manifests(shard_dirs: list[Path], mans: list[Manifest]) -> None:
    """Complete shards of one run (same config, eval set, arms, repeats), each index once."""
    for d, m in zip(shard_dirs, mans):
        if m.status != "complete":
            raise ShardError(f"{d}: status {m.status!r}; finish it with `harness run --resume {d}` first")
    first = mans[0]
    for d, m in zip(shard_dirs[1:], mans[1:]):
        for what, a, b in (("config", _strip(first.config), _strip(m.config)),
                           ("eval set", first.eval_set.hash, m.eval_set.hash),
                           ("arms", [a["arm_id"] for a in first.arms], [a["arm_id"] for a in m.arms]),
                           ("repeats", first.repeats, m.repeats)):
            if a != b:
                raise ShardError(f"{d}: {what} differs from {shard_dirs[0]}; only shards of one run can be merged")
    shards = [m.shard for m in mans]
    if any(s is not None for s in shards):
        if any(s is None for s in shards):
            raise ShardError("some folders are shards and some are not")
        ns = {s.of for s in shards}
        idx = sorted(s.index for s in shards)
        if len(ns) != 1 or idx != list(range(next(iter(ns)))):
            raise ShardError(f"shards {idx} of {sorted(ns)}: need each of 0..n-1 exactly once")


def _strip(cfg: dict) -> dict:
    return {k: v for k, v in (cfg or {}).items() if k != "shard"}


def _check_rows(folders: list[RunFolder]) -> None:
    """The same labels in every shard, and no trace key in two shards. Shards split sessions, so a
    key in two shards is a session in two: only the keys of such sessions are read (a month of
    turns' keys would not fit in memory as Python tuples)."""
    for f in folders[1:]:
        if not _same_labels(f, folders[0]):
            raise ShardError(f"{f.path}: its labels differ from {folders[0].path}'s")
    sessions = [_sessions(f) for f in folders]
    for j, f in enumerate(folders[1:], start=1):
        shared = set().union(*(sessions[i] & sessions[j] for i in range(j)))
        if not shared:
            continue
        earlier = {}
        for i in range(j):
            earlier.update({k: folders[i].path for k in _keys(folders[i], shared) if k not in earlier})
        for key in _keys(f, shared):
            if key in earlier:
                raise ShardError(f"trace key {key} in both {earlier[key]} and {f.path}")


def _same_labels(a: RunFolder, b: RunFolder, batch: int = 65_536) -> bool:
    """Whether two labels snapshots hold the same table (schema and rows), read a batch at a time."""
    fa, fb = a.labels_file(), b.labels_file()
    if not fa.schema_arrow.equals(fb.schema_arrow) or fa.metadata.num_rows != fb.metadata.num_rows:
        return False
    return all(x.equals(y) for x, y in zip(fa.iter_batches(batch), fb.iter_batches(batch)))


def _sessions(folder: RunFolder) -> set[str]:
    """The session ids of a folder's trace rows, read a part at a time."""
    out: set[str] = set()
    for p in folder.parts():
        out.update(pc.unique(read_part(p, ["session_id"]).column("session_id")).to_pylist())
    return out


def _keys(folder: RunFolder, sessions: set[str]) -> list[tuple]:
    """The trace keys of the folder's rows of `sessions`, in key order."""
    t = read_traces(folder.path, list(KEY))
    t = t.filter(pc.is_in(t.column("session_id"), pa.array(sorted(sessions), pa.string())))
    return [tuple(r[c] for c in KEY) for r in t.to_pylist()]


def _copy_rows(folders: list[RunFolder], into: RunFolder) -> None:
    into.copy_labels(folders[0])
    n = 0
    for f in folders:
        for p in f.parts():
            shutil.copyfile(p, into.new_part(n))
            n += 1
    judged = [f for f in folders if f.has_judgments()]
    if judged:
        if len(judged) != len(folders):
            raise ShardError("judgments exist in some shards only; judge every shard or none")
        into.write_judgments(pa.concat_tables([f.judgments_table() for f in judged]))


def merge_runs(shard_dirs: list[Path], out: Path) -> Path:
    """Join shard run folders into one run folder at `out`: trace parts copied (readers see rows
    in key order, harness.store.traces.read_traces, so the part order changes no metric), labels
    checked identical (every shard snapshots the whole eval set), manifest merged with counts
    summed.
    Refuses shards of different configs, eval sets or arms, incomplete shards, a missing or
    repeated shard index, and trace keys present in two shards. Metrics are not computed here
    (`harness metrics OUT` or the merge command does that)."""
    out = Path(out)
    if out.exists():
        raise RunFolderExists(f"{out} exists; choose another output folder")
    folders, mans = _checked(shard_dirs)
    tmp = out.with_name(out.name + ".merging")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    _copy_rows(folders, RunFolder(tmp))
    RunFolder(tmp).write_manifest(merged(out.name, mans, _sum_counts([m.counts for m in mans])))
    tmp.rename(out)
    return out


def join_shards(shard_dirs: list[Path], into: Path, workers: int, **update) -> Manifest:
    """The shards of one `harness run --workers N` joined into their run's own folder `into` (it
    holds their shard folders and a manifest saying running): checked as `merge_runs` checks them,
    rows and labels copied in, then the merged manifest with `workers` and `update` written last,
    so a join that stops half-way leaves the folder running (harness.run.parallel joins it again
    on resume, after removing what the stopped join copied)."""
    folders, mans = _checked(shard_dirs)
    into = RunFolder(into)
    _copy_rows(folders, into)
    man = merged(into.name, mans, _sum_counts([m.counts for m in mans]), workers).model_copy(update=update)
    into.write_manifest(man)
    return man


def _checked(shard_dirs: list[Path]) -> tuple[list[RunFolder], list[Manifest]]:
    """The folders and manifests of complete shards of one run, or ShardError saying why not."""
    folders = [RunFolder(d) for d in shard_dirs]
    if not folders:
        raise ShardError("no shard run folders given")
    mans = [f.read_manifest() for f in folders]
    _check_manifests([f.path for f in folders], mans)
    _check_rows(folders)
    return folders, mans
