"""The sessions of an eval set as a read-only sequence (file order, every split): held as models
when the split files are small, else read again from the files on each pass, a session at a time,
so that a month of logs (millions of turns, whose models would take gigabytes) costs a replay a
file offset per session, not its models (issue 45). `load_eval_set` validates every session once;
a pass reads only sessions that validated, and refuses a file changed since."""
from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Callable, Iterator, Sequence

from harness.errors import BadInput
from harness.evalset.model import Session

KEEP_BYTES = 64 << 20  # session files up to this size in all are held as models; larger ones are read per pass


class ChangedOnDisk(BadInput):
    """A session file written over after the eval set was loaded (exit 2)."""


def stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


class Sessions(Sequence[Session]):
    """`add` each validated session (its file, the offset of its line, the session); `kept`:
    hold the models (else only where each line starts). Iterating yields sessions in file order;
    `where(keep)` only those whose id `keep` accepts (the others are skipped unread)."""

    def __init__(self, root: Path, kept: bool):
        self.root = Path(root)
        self.files: list[str] = []
        self.stamps: list[tuple[int, int]] = []
        self.file_of, self.offset_of = array("i"), array("q")
        self.ids: list[str] = []
        self.labelled = array("i")  # labelled turns per session
        self.models: list[Session] | None = [] if kept else None

    @classmethod
    def of_files(cls, root: Path, files: list[Path]) -> "Sessions":
        """Empty, to be filled from `files`: held as models when they are KEEP_BYTES or less in all."""
        return cls(root, kept=sum(p.stat().st_size for p in files) <= KEEP_BYTES)

    def add(self, fname: str, offset: int, s: Session) -> None:
        if not self.files or self.files[-1] != fname:
            self.files.append(fname)
            self.stamps.append(stamp(self.root / fname))
        self.file_of.append(len(self.files) - 1)
        self.offset_of.append(offset)
        self.ids.append(s.session_id)
        self.labelled.append(sum(1 for t in s.turns if t.labels is not None))
        if self.models is not None:
            self.models.append(s)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self.models is not None:
            return self.models[i]
        return next(self._read([range(len(self))[i]]))

    def __iter__(self) -> Iterator[Session]:
        return self.where(None)

    def where(self, keep: Callable[[str], bool] | None) -> Iterator[Session]:
        """The sessions whose id `keep` accepts (every one when None), in file order."""
        chosen = range(len(self)) if keep is None else (i for i, sid in enumerate(self.ids) if keep(sid))
        if self.models is not None:
            return (self.models[i] for i in chosen)
        return self._read(chosen)

    def labelled_turns(self, keep: Callable[[str], bool] | None = None) -> int:
        """Labelled turns of the sessions `keep` accepts, counted at load (nothing read)."""
        if keep is None:
            return sum(self.labelled)
        return sum(n for sid, n in zip(self.ids, self.labelled) if keep(sid))

    def _read(self, positions) -> Iterator[Session]:
        """The sessions at `positions` (ascending), read from their files."""
        handles: dict[int, object] = {}
        try:
            for i in positions:
                fno = self.file_of[i]
                if fno not in handles:
                    path = self.root / self.files[fno]
                    if stamp(path) != self.stamps[fno]:
                        raise ChangedOnDisk(f"{path}: changed since the eval set was loaded; load it again")
                    handles[fno] = open(path, "rb")
                f = handles[fno]
                f.seek(self.offset_of[i])
                yield Session.model_validate(json.loads(f.readline()))
        finally:
            for f in handles.values():
                f.close()
