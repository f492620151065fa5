"""Is a run folder whole? What a run planned, what it holds, and what its inputs are now.

- **Planned**: every (arm, repeat, session, turn) the run set out to replay: the labelled turns of
  its labels snapshot (the splits it ran), the sessions of its shard when it is one, times its arms
  and repeats (the manifest).
- **Complete**: the manifest says `complete` and every planned key has its final row. A run killed
  mid-way (status `running` or `failed`) or with trace parts gone is not, whatever tables it holds.
- **Inputs**: content hashes of what scoring reads (trace parts, labels, judgments, ratings, the
  manifest's arms and settings, the eval set's hash); the metrics layer records them in the tables
  it writes and compares them with these (harness/metrics/provenance.py).
- **Sound**: every row is one this run's replay wrote: its final rows inside the plan, once; every
  trace key (with its round) once; the run id on every row the manifest's (or a shard's it merges);
  every row's arm name and parameters those the manifest lists for its arm id.
- **Failures**: the turns whose arm raised or whose LLM calls failed after their retries, per arm.

Reads the run folder only; raises RunFolderError (a file that cannot be read, named) and
TraceError (an unreadable trace part, named)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.store.armset import run_arms
from harness.store.folder import JUDGMENTS, LABELS, RunFolder, RunFolderError
from harness.store.shard import shard_of
from harness.store.traces import KEY, each_part, read_traces, unreadable
from harness.store.turn_keys import TURN_KEY, final_keys, plan_keys

SHOW = 3  # sessions named per arm in a message


@dataclass
class ArmGap:
    """The planned turns of one arm that have no final row."""

    label: str
    arm_id: str
    planned: int
    missing: int
    sessions: int  # sessions planned
    sessions_missing: int  # sessions with at least one turn missing
    first: list[str] = field(default_factory=list)  # the first sessions missing, in id order

    def describe(self) -> str:
        done = self.sessions - self.sessions_missing
        return (f"{self.label}: {self.planned - self.missing} of {self.planned} turns, {done} of {self.sessions} "
                f"sessions complete (missing e.g. {', '.join(_short(s) for s in self.first)})")


@dataclass
class Completeness:
    run: str
    status: str
    planned: int
    done: int
    gaps: list[ArmGap] = field(default_factory=list)
    resume: str = ""  # the command that completes the run
    extra: list[str] = field(default_factory=list)  # final rows outside the plan, described
    duplicates: int = 0  # planned turns with more than one final row

    @property
    def complete(self) -> bool:
        return self.status == "complete" and not self.gaps and self.sound

    @property
    def sound(self) -> bool:
        """Every final row belongs to the plan, once: otherwise no resume mends the folder."""
        return not self.extra and not self.duplicates

    def describe(self) -> str:
        """One paragraph: what is missing or does not belong, and how to finish it."""
        if self.complete:
            return f"{self.run}: complete ({self.done} of {self.planned} planned turns)"
        if not self.sound:
            what = self.extra + ([f"{self.duplicates} turn(s) with more than one final row"] if self.duplicates else [])
            return (f"{self.run} holds trace rows its plan (its manifest's arms and repeats, its labels snapshot) does "
                    f"not account for: {'; '.join(what)}. The folder was edited or mixed with another run; replay it")
        head = f"{self.run} is incomplete: manifest status {self.status}, {self.done} of {self.planned} planned turns " \
               "have their final row"
        arms = "; ".join(g.describe() for g in self.gaps)
        return f"{head}{' (' + arms + ')' if arms else ''}. `{self.resume}` completes it"


def a_kind(kind: str) -> str:
    """`an oracle`, `a rewrite`: an arm's kind with its article, as messages name it."""
    return ("an " if kind[:1].lower() in "aeiou" else "a ") + kind


def _short(text: str, limit: int = 24) -> str:
    """A session id (or any text) cut in its middle to `limit` characters."""
    return text if len(text) <= limit else text[:limit // 2] + "…" + text[-(limit // 4):]


def planned_turns(manifest: dict, labels: pd.DataFrame) -> pd.DataFrame:
    """session_id, turn_index (and split) of every labelled turn the run replays: its labels
    snapshot, narrowed to its shard's sessions when it is a shard."""
    cols = [c for c in ("session_id", "turn_index", "split") if c in labels.columns]
    turns = labels[cols].drop_duplicates(["session_id", "turn_index"])
    shard = manifest.shard
    if shard:
        turns = turns[turns["session_id"].map(lambda s: shard_of(s, shard.of) == shard.index)]
    return turns.assign(turn_index=turns["turn_index"].astype(int)).reset_index(drop=True)


def check_label_keys(folder: RunFolder, labels: pd.DataFrame) -> None:
    """RunFolderError unless the labels snapshot keys its turns as `harness run` writes them (session
    ids as text, turn indices as integers): a snapshot edited by hand is named, never a crash."""
    for col, ok, want in (("session_id", pd.api.types.is_string_dtype, "text"),
                          ("turn_index", pd.api.types.is_integer_dtype, "integers")):
        if col in labels and not ok(labels[col]):
            kind = pd.api.types.infer_dtype(labels[col], skipna=True)
            raise RunFolderError(f"{folder.path / LABELS}: unreadable (column {col} holds {kind} values, not {want}: "
                                 "not a labels snapshot written by `harness run`); replay the run")


def completeness(folder: RunFolder, manifest: dict | None = None, labels: pd.DataFrame | None = None,
                 finals: pd.DataFrame | None = None) -> Completeness:
    man = manifest if manifest is not None else folder.read_manifest()
    labels = labels if labels is not None else folder.labels()
    check_label_keys(folder, labels)
    check_judged_answers(folder)
    finals = finals if finals is not None else final_keys(folder)
    turns = planned_turns(man, labels)
    arms = run_arms(man)
    repeats = man.repeats
    plan, fin = plan_keys(turns, [a.arm_id for a in arms], repeats, finals)
    have, first = np.unique(fin, return_index=True)  # each final key once, at its first row
    missing = ~np.isin(plan, have)
    per_arm = len(turns) * repeats  # the plan holds each arm's keys together: arm, then repeat, then turn
    sids = turns["session_id"].astype(str).to_numpy(object)
    n_sessions = len(set(sids.tolist())) if per_arm else 0
    gaps = []
    for i, a in enumerate(arms):
        m = np.flatnonzero(missing[i * per_arm:(i + 1) * per_arm])
        if not len(m):
            continue
        sessions = sorted(set(sids[m % len(turns)].tolist()))
        gaps.append(ArmGap(a.label, a.arm_id, per_arm, len(m), n_sessions, len(sessions), sessions[:SHOW]))
    outside = finals.iloc[np.sort(first[~np.isin(have, plan)])][TURN_KEY]  # in the order the rows were read
    return Completeness(folder.name, str(man.status), len(plan), len(plan) - int(missing.sum()), gaps,
                        f"harness run --resume {folder.path}", _outside(outside, arms, repeats) + foreign_rows(
                            folder, man, arms), len(fin) - len(have))


def _outside(rows: pd.DataFrame, arms: list, repeats: int) -> list[str]:
    """Final rows no planned key accounts for, in words: an arm the manifest does not list, a
    repeat past its `repeats`, a turn its labels snapshot (and shard) does not hold."""
    if rows.empty:
        return []
    known = {a.arm_id for a in arms}
    out = []
    other = rows[~rows["arm_id"].isin(known)]
    if len(other):
        out.append(f"{len(other)} row(s) of arm(s) the manifest does not list ({', '.join(sorted(set(other['arm_id']))[:2])})")
    rows = rows[rows["arm_id"].isin(known)]
    late = rows[rows["repeat"] >= repeats]
    if len(late):
        out.append(f"{len(late)} row(s) of repeats {int(late['repeat'].min())}–{int(late['repeat'].max())} "
                   f"(the manifest says repeats: {repeats})")
    rest = rows[rows["repeat"] < repeats]
    if len(rest):
        first = rest.iloc[0]
        out.append(f"{len(rest)} row(s) of turns the labels snapshot does not hold (e.g. session {first['session_id']} "
                   f"turn {first['turn_index']})")
    return out


IDENTITY = ("arm_id", "run_id", "arm", "params")  # what every trace row says of the run and arm that wrote it


def _part_rows(folder: RunFolder) -> tuple[np.ndarray, list[dict]]:
    """64-bit hashes of every row's trace key, and the row count per (arm id, run id, arm name,
    parameters), read a part at a time on each thread with the strings as dictionaries (a run of 10^5 turns: a few
    MB where the whole table as strings took hundreds)."""
    def one(p: Path) -> tuple[np.ndarray, list[dict]]:
        try:
            have = set(pq.read_schema(p).names)
            cols = [c for c in dict.fromkeys([*KEY, *IDENTITY]) if c in have]
            t = pq.read_table(p, columns=cols, read_dictionary=[c for c in cols if c not in (
                "repeat", "turn_index", "round")]).unify_dictionaries()  # row groups: a dictionary each
        except (pa.ArrowException, OSError, ValueError) as e:
            raise unreadable(p, e, folder.path) from None
        keys = t.select([k for k in KEY if k in cols]).to_pandas()
        ident = [c for c in IDENTITY if c in cols]
        # a part of several row groups reads each with its own dictionary: group_by needs one
        return (pd.util.hash_pandas_object(keys, index=False).to_numpy(),
                t.select(ident).unify_dictionaries().group_by(ident).aggregate([([], "count_all")]).to_pylist())

    hashes, counts = [], {}
    for h, found in each_part(folder.parts(), one):
        hashes.append(h)
        for g in found:
            k = tuple(g.get(c) for c in IDENTITY)
            counts[k] = counts.get(k, 0) + g["count_all"]
    groups = [{**dict(zip(IDENTITY, k)), "count_all": n} for k, n in counts.items()]
    return (np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)), groups


def foreign_rows(folder: RunFolder, manifest, arms: list) -> list[str]:
    """Rows this run's replay did not write, in words: a trace key (with its round) twice, another
    run's id (neither the manifest's nor that of a shard it merges), an arm name or parameters other
    than those the manifest lists for the row's arm id (an oracle's rows listed as a rewrite arm).
    Columns an older trace part lacks read as nulls and are not checked."""
    hashes, groups = _part_rows(folder)
    out = []
    _, n = np.unique(hashes, return_counts=True)
    if (twice := int((n > 1).sum())):
        out.append(f"{twice} trace key(s) (arm, repeat, session, turn, round) written more than once")
    own = {manifest.run_id, *[m.get("run_id") for m in manifest.merged_from or []]}
    other = [g for g in groups if g["run_id"] is not None and g["run_id"] not in own]
    if other:
        runs = sorted({g["run_id"] for g in other})
        out.append(f"{sum(g['count_all'] for g in other)} row(s) written by run {', '.join(runs[:2])}, not by this run "
                   f"({manifest.run_id}) or a shard it merges")
    for a in arms:
        wrong = [g for g in groups if g["arm_id"] == a.arm_id and not _recorded_as(g, a)]
        if wrong:
            out.append(f"{sum(x['count_all'] for x in wrong)} row(s) of {a.label!r} recorded "
                       f"{_recorded_differently(wrong[0], a)}")
    return out


def _recorded_differently(group: dict, arm) -> str:
    """How rows of one (arm name, parameters) differ from the manifest's entry of their arm id."""
    if group["arm"] is not None and group["arm"] != arm.name:
        return f"as {a_kind(group['arm'])} arm, where the manifest lists {a_kind(arm.name)} arm"
    try:
        row = json.loads(group["params"])
    except ValueError:
        return f"with parameters that are not JSON ({_short(group['params'], 40)})"
    keys = [k for k in dict.fromkeys([*row, *arm.params]) if k not in row or k not in arm.params
            or row[k] != arm.params[k]][:3]
    return f"with {_params_said(row, keys)}, where the manifest lists {_params_said(arm.params, keys)}"


def _params_said(params: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={json.dumps(params[k]) if k in params else '(none)'}" for k in keys)


def _recorded_as(group: dict, arm) -> bool:
    """Whether rows of one (arm name, parameters) say what the manifest says of their arm id."""
    if group["arm"] is not None and group["arm"] != arm.name:
        return False
    try:
        return group["params"] is None or json.loads(group["params"]) == arm.params
    except ValueError:
        return False


def answer_hash(answer) -> str | None:
    """What a judgment records of the answer it judged (harness.steps.judge), so that a reader can tell
    a judgment of this run's answer from one of another's; None for no answer (null, NaN)."""
    return hashlib.sha256(answer.encode("utf-8")).hexdigest()[:16] if isinstance(answer, str) else None


def check_judged_answers(folder: RunFolder) -> None:
    """RunFolderError when judgments name answers the final trace rows do not hold (a judgments file
    copied from another run, or answers replayed after judging); judgments written before they
    recorded the answer's hash are not checked."""
    if not folder.has_judgments():
        return
    j = folder.judgments()
    if "answer_hash" not in j:
        return
    j = j.dropna(subset=["answer_hash"])
    if j.empty:
        return
    t = read_traces(folder.path, [*TURN_KEY, "is_final", "answer"]).to_pandas()
    t = t[t["is_final"].astype(bool)]
    now = t[TURN_KEY].assign(now=t["answer"].map(answer_hash))
    both = j[[*TURN_KEY, "answer_hash"]].astype({"repeat": "int64", "turn_index": "int64"}).merge(
        now.astype({"repeat": "int64", "turn_index": "int64"}), on=TURN_KEY, how="left")
    other = both[both["answer_hash"] != both["now"]].drop_duplicates(TURN_KEY)
    if len(other):
        first = other.iloc[0]
        raise RunFolderError(f"{folder.path / JUDGMENTS}: {len(other)} answer(s) judged are not the answers its traces "
                             f"hold (e.g. session {first['session_id']} turn {first['turn_index']}): the judgments were "
                             f"copied from another run, or the answers replayed after judging; run `harness judge "
                             f"{folder.path}` again")


# --- inputs --------------------------------------------------------------------------------------

MANIFEST_FIELDS = ("arms", "metrics", "filter_schema", "repeats", "shard", "eval_set")  # what scoring reads of it


def file_hash(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def inputs(folder: RunFolder, manifest: dict | None = None) -> dict:
    """Content hashes of everything scoring reads, by name (None: the file is absent)."""
    man = manifest if manifest is not None else folder.read_manifest()
    dumped = man.dump()
    scoring = {k: dumped.get(k) for k in MANIFEST_FIELDS}
    optional = {name: (file_hash(p) if p.is_file() else None) for name, p in folder.scoring_inputs().items()}
    return {"traces": {p.name: file_hash(p) for p in folder.parts()}, **optional,
            "manifest": hashlib.sha256(json.dumps(scoring, sort_keys=True, default=str).encode()).hexdigest()[:16],
            "eval_set": man.eval_set.hash}


# --- failures ------------------------------------------------------------------------------------

@dataclass
class ArmFailures:
    label: str
    failed: int
    turns: int
    first_error: str
    first_session: str
    first_turn: int

    def describe(self) -> str:
        return (f"{self.label}: {self.failed} of {self.turns} turns failed (first: session {self.first_session} "
                f"turn {self.first_turn}: {self.first_error})")

    @property
    def rate(self) -> float:
        return self.failed / self.turns if self.turns else 0.0


def failures(folder: RunFolder, manifest: dict | None = None) -> list[ArmFailures]:
    """Per arm with failed turns (an error on a row, or an LLM call that failed after its retries):
    how many of its turns, and the first one in key order with its error."""
    man = manifest if manifest is not None else folder.read_manifest()
    t = read_traces(folder.path, [*TURN_KEY, "error", "llm_failed", "fallback_reason"]).to_pandas()
    if t.empty:
        return []
    bad = t["error"].notna() | (t["llm_failed"].fillna(0) > 0)
    turns = t.groupby("arm_id")[["session_id", "turn_index", "repeat"]].apply(lambda g: len(g.drop_duplicates()))
    out = []
    for a in run_arms(man):
        rows = t[bad & (t["arm_id"] == a.arm_id)]
        if rows.empty:
            continue
        r = rows.iloc[0]
        why = r["error"] if isinstance(r["error"], str) else f"LLM call failed ({r['fallback_reason']})"
        n = len(rows[TURN_KEY].drop_duplicates())
        out.append(ArmFailures(a.label, n, int(turns.get(a.arm_id, n)), _first_line(why), str(r["session_id"]),
                               int(r["turn_index"])))
    return out


def _first_line(text: str, limit: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1] + "…"
