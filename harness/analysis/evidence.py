"""The evidence under a verdict, checked before anything is compared.

Every reader of run folders (gate, compare, report) loads them through `check_run`:
1. the folder and its files can be read (a file that cannot is named: exit 2);
2. the run is complete (harness.store.integrity): every planned (arm, repeat, session, turn) has
   its final row and the manifest says so; otherwise, where a verdict depends on it, the reader
   refuses with what is missing and the `harness run --resume` that finishes it;
3. its tables are fresh (harness.metrics.provenance): computed from the traces, labels and
   judgments the folder holds now, by this scoring code; stale tables are computed again from
   the folder (scoring reads the folder only) and the reader says so. Inputs that cannot be read
   (a truncated trace part) are named instead.
A candidate must also cover what the baseline covers (`coverage`): the baseline's sessions,
splits and repeats for every paired label."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.pool_warnings import llm_labels_said
from harness.errors import BadInput
from harness.metrics.provenance import freshness
from harness.analysis.label_rows import LabelRows
from harness.store.folder import NotARunFolder, NotScored, RunData, RunFolder, RunFolderError
from harness.store.integrity import Completeness, completeness, inputs
from harness.store.traces import TraceError
from harness.store.turn_keys import final_keys

SHOW = 3  # sessions named in a message


class EvidenceError(BadInput, ValueError):
    """Evidence a reader refuses: unreadable, incomplete, or not covering the baseline (exit 2)."""


class Incomplete(EvidenceError):
    """A run with planned turns missing, where the reader needs every one."""


@dataclass
class Evidence:
    """What was checked of one run folder before it was read."""

    completeness: Completeness
    finals: pd.DataFrame  # arm_id, repeat, session_id, turn_index of every final row
    rescored: list[str] = field(default_factory=list)  # why its tables were computed again on reading
    stale: list[str] = field(default_factory=list)  # why its tables are stale, where they were not rescored
    labels: str | None = None  # the relevance labels it was scored with, when not people's alone

    @property
    def complete(self) -> bool:
        return self.completeness.complete

    def notes(self, run: str) -> list[str]:
        """What a reader should be told, in words: rescoring or stale tables, and a partial run."""
        out = [f"{run}: {self.labels}"] if self.labels else []
        if self.rescored:
            out.append(f"rescored {run} before reading it: " + "; ".join(self.rescored))
        if self.stale:
            out.append(f"stale tables in {run}: " + "; ".join(self.stale) + f" (`harness metrics {run}` scores it "
                       "again)")
        if not self.complete:
            out.append(f"partial: {self.completeness.describe()}")
        return out


def check_run(path: str | Path, complete: bool = True, scored: bool = True, rescore: bool = True) -> RunData:
    """A run folder checked and loaded (RunData with `.evidence`). `complete`: refuse a run with
    turns missing (Incomplete); otherwise it loads, marked partial. Stale tables are scored again
    when `rescore` (the commands: gate, compare, report), else only named (the report's rendering,
    which reads and never computes)."""
    from harness.metrics.score import score_run

    try:
        folder = RunFolder(path).require()
        man = folder.read_manifest()
        labels = folder.labels()
        finals = final_keys(folder)
        done = completeness(folder, man, labels, finals)
        if not done.sound:  # rows outside the plan, or twice: no reader can take it, partial or not
            raise EvidenceError(done.describe())
        if complete and not done.complete:
            raise Incomplete(f"{done.describe()}. A verdict needs every planned turn; nothing was compared")
        fresh = freshness(folder, man)
        rescored, stale = [], []
        if not fresh.fresh and (fresh.scored or folder.parts()):
            if rescore:
                score_run(folder.path)
                rescored = fresh.reasons
            elif fresh.scored:
                stale = fresh.reasons
        data = RunData.load(folder.path, scored=scored)
    except (NotARunFolder, NotScored, RunFolderError, TraceError) as e:
        raise EvidenceError(str(e)) from None
    data.evidence = Evidence(done, finals, rescored, stale, llm_labels_said(data.folder))
    return data


def same_evidence(base: RunData, cand: RunData) -> str | None:
    """Two runs whose evidence is byte for byte one (the same trace parts, labels and judgments by
    content hash) though their manifests differ (in start time: a run id other than the one on the
    rows is refused before, harness.store.integrity), in words; None otherwise. A replay writes its
    run id into every trace row, so two replays never share a trace part: one folder is a copy."""
    ib, ic = inputs(base.folder, base.manifest), inputs(cand.folder, cand.manifest)
    if not ib["traces"] or sorted(ib["traces"].values()) != sorted(ic["traces"].values()):
        return None
    if any(ib.get(k) != ic.get(k) for k in ib if k not in ("traces", "manifest")):
        return None
    return (f"the candidate {cand.name}'s evidence is byte-identical to the baseline {base.name}'s (the same trace "
            f"parts, labels and judgments by content hash) under another manifest (run {cand.manifest.run_id} "
            f"started {cand.manifest.started}, run {base.manifest.run_id} started {base.manifest.started}): one folder "
            "is a copy of the other, and this verdict compares a run with itself")


# --- the labels both runs were scored with ----------------------------------------------------------

def _plain(v):
    return v.tolist() if hasattr(v, "tolist") else v


def eval_set_files_differ(a, b, name_a: str, name_b: str) -> str:
    """Which files of two runs' eval sets (harness.store.record.EvalSetRef) differ, in words ending in
    "; ", from the per-file hashes their manifests record (older manifests: said so); "" when the
    two hashes agree."""
    if a.hash == b.hash:
        return ""
    fa, fb = a.files, b.files
    if not fa or not fb:
        return "the eval-set hash differs (per-file hashes not recorded); "
    said = [f"{n} ({'changed' if n in fa and n in fb else 'only in ' + (name_a if n in fa else name_b)})"
            for n in sorted(set(fa) | set(fb)) if fa.get(n) != fb.get(n)]
    return f"the eval-set files that differ: {', '.join(said)}; "


def label_differences(base: RunData, cand: RunData) -> str | None:
    """Where two runs of one eval set disagree on the labels of the splits both hold (a labels
    snapshot edited, or two copies of the eval set under one hash), in words; None when they agree."""
    b, c = base.labels, cand.labels
    cols = [x for x in b.columns if x in c.columns and not x.startswith("seg.")]
    if "split" in cols:
        splits = set(b["split"]) & set(c["split"])
        b, c = b[b["split"].isin(splits)], c[c["split"].isin(splits)]

    def rows(df: pd.DataFrame) -> pd.Series:
        return pd.Series([json.dumps([_plain(v) for v in r], default=str) for r in df[cols].itertuples(index=False)],
                         index=pd.MultiIndex.from_arrays([df["session_id"], df["turn_index"].astype(int)]))

    rb, rc = rows(b), rows(c)
    only_b, only_c = rb.index.difference(rc.index), rc.index.difference(rb.index)
    both = rb.index.intersection(rc.index)
    differ = [k for k in both if rb[k] != rc[k]]
    if not (len(only_b) or len(only_c) or differ):
        return None
    parts = [f"{len(differ)} turn(s) labelled differently (e.g. session {differ[0][0]} turn {differ[0][1]})"] if differ \
        else []
    parts += [f"{len(x)} turn(s) only in {r} (e.g. session {x[0][0]} turn {x[0][1]})"
              for x, r in ((only_c, cand.name), (only_b, base.name)) if len(x)]
    return (f"{cand.name}'s labels differ from {base.name}'s on the splits both hold, though both name the same eval "
            f"set: {'; '.join(parts)}. A labels snapshot was edited, or the runs read different copies of the eval "
            "set; replay the run whose labels are wrong")


def turns_beyond(base: RunData, cand: RunData) -> str | None:
    """The labelled turns the candidate holds and the baseline does not (splits it ran beside the
    baseline's), in words: no check reads them, since a verdict compares the baseline's turns."""
    key = ["session_id", "turn_index"]
    b = base.labels[key].astype({"turn_index": "int64"}).drop_duplicates()
    c = cand.labels.astype({"turn_index": "int64"}).drop_duplicates(key)
    extra = c.merge(b.assign(_b=True), on=key, how="left")
    extra = extra[extra["_b"].isna()]
    if extra.empty:
        return None
    by = extra.groupby(extra["split"].astype(str) if "split" in extra else pd.Series("?", index=extra.index))
    said = ", ".join(f"split {s} ({g['session_id'].nunique()} sessions, {len(g)} turns)" for s, g in by)
    return (f"not compared: {cand.name} holds {said} that the baseline {base.name} does not hold; every check reads "
            "the baseline's turns only")


# --- turns the candidate left unmeasured ------------------------------------------------------------

@dataclass
class Lost:
    """Turns of a segment the baseline arm measured and the candidate arm left unmeasured (an
    error, a failed call or judgment, n/a): no pairing sees them, so no rule may pass over them
    unsaid."""

    n: int
    of: int  # turns of the segment the baseline measured
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.n / self.of if self.of else 0.0

    def describe(self, cand: str) -> str:
        why = ", ".join(f"{r} ×{k}" for r, k in list(self.reasons.items())[:3])
        return f"{self.n} of {self.of} turns the baseline measured are unmeasured in {cand} ({why})"


def lost_turns(base: RunData, cand: RunData, base_arm: str, cand_arm: str, metric: str, segment: str,
               rows_of: tuple[pd.DataFrame, pd.DataFrame] | None = None, where: LabelRows | None = None) -> Lost:
    """`rows_of`: the per-turn rows of `metric` of the baseline arm and of the candidate arm, and
    `where`: the baseline's labelled turns, when the caller has them at hand
    (harness.analysis.split.Split: its `sides` and `where`). Turns are positions among the labelled
    turns, never a tuple per turn."""
    where = LabelRows(base.labels) if where is None else where
    inside = where.mask(segment)

    def positions(df: pd.DataFrame) -> np.ndarray:
        return where.positions(df["session_id"], df["turn_index"])

    def turns(df: pd.DataFrame) -> np.ndarray:
        """The segment's turns among the rows of `df`, each once."""
        pos = positions(df)
        return np.unique(pos[(pos >= 0) & inside[np.clip(pos, 0, None)]]) if len(pos) else pos

    b, c = rows_of if rows_of is not None else (base.arm_turns(metric, base_arm), cand.arm_turns(metric, cand_arm))
    measured = turns(b[b["value"].notna().to_numpy(bool)])
    if "unmeasured" not in c:
        return Lost(0, len(measured))
    unm = c[(c["value"].isna() & c["unmeasured"].notna()).to_numpy(bool)]
    lost = np.intersect1d(np.setdiff1d(turns(unm), turns(c[c["value"].notna().to_numpy(bool)])), measured) \
        if len(unm) else []
    if not len(lost):
        return Lost(0, len(measured))
    pos = positions(unm)
    why = unm.assign(_at=pos)[np.isin(pos, lost)].drop_duplicates("_at")
    return Lost(len(lost), len(measured), why["unmeasured"].astype(str).value_counts().to_dict())


# --- coverage ------------------------------------------------------------------------------------

@dataclass
class Gap:
    """What a candidate arm lacks of its baseline partner's turns."""

    label: str
    turns: int  # baseline turns (repeat, session, turn) the candidate lacks
    sessions: list[str]  # baseline sessions with a turn the candidate lacks
    n_sessions: int  # the baseline arm's sessions
    splits: dict[str, tuple[int, int]]  # split -> (sessions missing, sessions in the baseline)
    repeats: list[int]  # baseline repeats the candidate lacks entirely
    n_repeats: int = 1  # the baseline arm's repeats
    only_repeats: bool = False  # every missing turn is in a repeat the candidate lacks entirely

    def describe(self) -> str:
        if self.only_repeats:  # the sessions are all there: the runs differ in repeats, not in sessions
            return (f"repeats differ: the baseline has {self.n_repeats} repeat(s), the candidate "
                    f"{self.n_repeats - len(self.repeats)}; it lacks repeat(s) {', '.join(map(str, self.repeats))} "
                    f"({self.turns} turns), and holds every session and turn of the repeats it has")
        parts = [f"{len(self.sessions)} of {self.n_sessions} sessions ({self.turns} turns)"]
        parts += [f"split {s}: {m} of {n} sessions" + (" (the whole split)" if m == n else "")
                  for s, (m, n) in sorted(self.splits.items())]
        if self.repeats:
            parts.append(f"repeats {', '.join(map(str, self.repeats))}")
        return ", ".join(parts) + f"; e.g. {', '.join(self.sessions[:SHOW])}"


def _keys(run: RunData, arm_id: str) -> pd.DataFrame:
    f = run.evidence.finals
    return f.loc[f["arm_id"] == arm_id, ["repeat", "session_id", "turn_index"]].drop_duplicates()


def coverage(base: RunData, cand: RunData, pairs: list) -> list[Gap]:
    """Per paired label whose candidate arm lacks baseline turns: what it lacks."""
    split_of = dict(zip(base.labels["session_id"], base.labels["split"])) if "split" in base.labels else {}
    gaps = []
    for p in pairs:
        b, c = _keys(base, p.baseline.arm_id), _keys(cand, p.candidate.arm_id)
        j = b.merge(c.assign(_c=True), on=["repeat", "session_id", "turn_index"], how="left")
        miss = j[j["_c"].isna()]
        if miss.empty:
            continue
        sessions = sorted(miss["session_id"].unique())
        per_split: dict[str, tuple[int, int]] = {}
        all_sessions = b["session_id"].unique()
        for s in sorted({split_of.get(x) for x in sessions} - {None}):
            inside = [x for x in all_sessions if split_of.get(x) == s]
            per_split[s] = (sum(1 for x in sessions if split_of.get(x) == s), len(inside))
        repeats = sorted(set(b["repeat"]) - set(c["repeat"]))
        gaps.append(Gap(p.label, len(miss), sessions, len(all_sessions), per_split, [int(r) for r in repeats],
                        b["repeat"].nunique(), bool(repeats) and bool(miss["repeat"].isin(repeats).all())))
    return gaps


def describe_gaps(gaps: list[Gap], cand: str) -> str:
    """One sentence per distinct gap, labels grouped."""
    by: dict[str, list[str]] = {}
    for g in gaps:
        by.setdefault(g.describe(), []).append(g.label)
    return "; ".join(f"{', '.join(labels)}: {what}" for what, labels in by.items())


def shard_said(run: RunData, role: str) -> str | None:
    """`the ROLE NAME is shard i/n of its run (x of y sessions)`, or None when the run is whole."""
    sh = run.manifest.shard
    if not sh:
        return None
    return (f"the {role} {run.name} is shard {sh.index}/{sh.of} of its run "
            f"({run.evidence.finals['session_id'].nunique()} of {run.labels['session_id'].nunique()} sessions)")


def coverage_notes(base: RunData, cand: RunData, pairs: list) -> list[str]:
    """What comparing these runs does not cover, in words: a run that is a shard, and the baseline
    turns the candidate lacks (the gate refuses both unless the policy says `coverage: subset`)."""
    out = [f"not compared: {said}; merge its shards (`harness merge`) to compare the whole eval set"
           for said in (shard_said(base, "baseline"), shard_said(cand, "candidate")) if said]
    gaps = coverage(base, cand, pairs)
    if gaps:
        out.append(f"not compared: {cand.name} lacks what the baseline {base.name} has for "
                   f"{describe_gaps(gaps, cand.name)} (the gate refuses this candidate unless the policy says "
                   "`coverage: subset`)")
    return out
