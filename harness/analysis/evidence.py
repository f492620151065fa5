"""The evidence under a verdict, checked before anything is compared.

Every reader of run folders (gate, compare, report) loads them through `check_run`:
1. the folder and its files can be read (a file that cannot is named: exit 2);
2. the run is complete (harness.run.integrity): every planned (arm, repeat, session, turn) has
   its final row and the manifest says so; otherwise, where a verdict depends on it, the reader
   refuses with what is missing and the `harness run --resume` that finishes it;
3. its tables are fresh (harness.metrics.provenance): computed from the traces, labels and
   judgments the folder holds now, by this scoring code; stale tables are computed again from
   the folder (scoring reads the folder only) and the reader says so. Inputs that cannot be read
   (a truncated trace part) are named instead.
A candidate must also cover what the baseline covers (`coverage`): the baseline's sessions,
splits and repeats for every paired label."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.metrics.provenance import freshness
from harness.run.folder import NotARunFolder, NotScored, RunData, RunFolder, RunFolderError
from harness.run.integrity import Completeness, completeness, final_keys
from harness.run.traces import TraceError

SHOW = 3  # sessions named in a message


class EvidenceError(ValueError):
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

    @property
    def complete(self) -> bool:
        return self.completeness.complete

    def notes(self, run: str) -> list[str]:
        """What a reader should be told, in words: rescoring or stale tables, and a partial run."""
        out = []
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
    data.evidence = Evidence(done, finals, rescored, stale)
    return data


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

    def describe(self) -> str:
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
        gaps.append(Gap(p.label, len(miss), sessions, len(all_sessions), per_split, [int(r) for r in repeats]))
    return gaps


def describe_gaps(gaps: list[Gap], cand: str) -> str:
    """One sentence per distinct gap, labels grouped."""
    by: dict[str, list[str]] = {}
    for g in gaps:
        by.setdefault(g.describe(), []).append(g.label)
    return "; ".join(f"{', '.join(labels)}: {what}" for what, labels in by.items())
