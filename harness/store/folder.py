"""The run folder and its one owner: every file name of a run folder is spelled here and nowhere
else (tests/house/test_house.py checks), with the readers and writers of each file, and the one rule
from a manifest to its eval set.

    manifest.json            the run's definition and counts (store/manifest.py builds it)
    labels.parquet           a snapshot of the eval set's labels, so the folder alone can be scored
    traces/part-*.parquet    the trace rows (store/traces.py declares them), written in parts
    judgments.parquet        the judge's verdicts (steps/judge.py)
    human_judgments.parquet  people's ratings (analysis/review.py)
    relevance_labels.parquet an LLM's relevance grades for unjudged documents (steps/relevance.py)
    metrics.parquet          aggregates and per-turn values (metrics/)
    comparisons.parquet, abstention.parquet, filter_fields.parquet, coinciding.parquet, spread.parquet,
    relevance_agreement.parquet
                             the tables scoring produces

Every file is written under a temporary name and renamed, so a reader never sees half a file."""
from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from harness.evalset.folder import is_eval_set
from harness.errors import BadInput
from harness.store.record import Manifest, parse

if TYPE_CHECKING:  # pandas is imported where a DataFrame is read (_read_frame): a replay's processes never need it
    import pandas as pd

MANIFEST = "manifest.json"
LABELS = "labels.parquet"
TRACES = "traces"
PART_GLOB = "part-*.parquet"
JUDGMENTS = "judgments.parquet"
HUMAN_JUDGMENTS = "human_judgments.parquet"
RELEVANCE_LABELS = "relevance_labels.parquet"
METRICS = "metrics.parquet"
LABEL_KEYS = ("session_id", "turn_index", "qrels", "qrels_measured")  # what scoring reads of every snapshot
TABLES = {"comparisons": "comparisons.parquet", "abstention": "abstention.parquet",
          "filter_fields": "filter_fields.parquet", "coinciding": "coinciding.parquet", "spread": "spread.parquet",
          "agreement": "relevance_agreement.parquet"}


class NotARunFolder(BadInput, FileNotFoundError):
    """A path without a manifest (exit 2)."""


class RunFolderExists(BadInput, FileExistsError):
    """A run folder that would be written over (exit 2)."""


class RunFolderError(BadInput, ValueError):
    """A file of a run folder that cannot be read, named with why (exit 2)."""


def _readable(path: Path, read):
    """`read(path)`, or RunFolderError naming the file and why it cannot be read."""
    try:
        return read(path)
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing (not a complete run folder)") from None
    except (OSError, ValueError, pa.ArrowException) as e:  # truncated, not JSON, not Parquet
        why = " ".join(str(e).split())
        raise RunFolderError(f"{path}: unreadable ({type(e).__name__}: {why})") from None


def _read_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    return pd.read_parquet(path)


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def name(self) -> str:
        return self.path.name

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # --- writing ----------------------------------------------------------------------------
    @contextmanager
    def atomic(self, name: str) -> Iterator[Path]:
        """A temporary path to write `name` to; renamed into place when the block ends."""
        final = self.path / name
        tmp = final.with_name(final.name + ".tmp")
        yield tmp
        tmp.replace(final)

    def write_parquet(self, name: str, data: pa.Table | pd.DataFrame, metadata: dict[str, str] | None = None) -> Path:
        """`metadata`: key-value pairs added to the file's schema (scoring's provenance)."""
        pandas = sys.modules.get("pandas")  # no DataFrame exists before pandas is imported
        table = pa.Table.from_pandas(data, preserve_index=False) if pandas and isinstance(data, pandas.DataFrame) else data
        if metadata:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   **{k.encode(): v.encode() for k, v in metadata.items()}})
        with self.atomic(name) as tmp:
            pq.write_table(table, tmp)
        return self.path / name

    def parquet_metadata(self, name: str) -> dict[str, str]:
        """The schema's key-value metadata of a Parquet file of the folder ({} when absent)."""
        p = self.path / name
        if not p.is_file():
            return {}
        meta = _readable(p, pq.read_metadata).metadata or {}  # the file's: the schema's and any added after
        return {k.decode(): v.decode() for k, v in meta.items() if k != b"ARROW:schema"}

    # --- manifest -------------------------------------------------------------------------
    def is_run(self) -> bool:
        return (self.path / MANIFEST).is_file()

    def require(self) -> "RunFolder":
        if not self.is_run():
            raise NotARunFolder(f"{self.path}: not a run folder (no {MANIFEST})")
        return self

    def read_manifest(self) -> Manifest:
        """The run record (harness.store.record, an older layout upgraded); RunFolderError naming the
        file when it is not a readable manifest."""
        self.require()
        raw = _readable(self.path / MANIFEST, lambda p: json.loads(p.read_text(encoding="utf-8")))
        try:
            return parse(raw, str(self.path / MANIFEST))
        except BadInput as e:
            raise RunFolderError(str(e)) from None

    def write_manifest(self, manifest: Manifest) -> None:
        with self.atomic(MANIFEST) as tmp:
            tmp.write_text(json.dumps(manifest.dump(), indent=2, sort_keys=True, ensure_ascii=False, default=str),
                           encoding="utf-8")

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    # --- labels ---------------------------------------------------------------------------
    def write_labels(self, labels: pa.Table | Iterable[pa.RecordBatch]) -> None:
        """The labels snapshot, from a table or written a batch at a time (a month of turns)."""
        if isinstance(labels, pa.Table):
            labels = labels.to_batches() or [pa.RecordBatch.from_pylist([], schema=labels.schema)]
        with self.atomic(LABELS) as tmp:
            writer = None
            try:
                for batch in labels:
                    writer = writer or pq.ParquetWriter(tmp, batch.schema)
                    writer.write_batch(batch)
            finally:
                if writer is not None:
                    writer.close()

    def labels_file(self) -> pq.ParquetFile:  # read a batch at a time
        return _readable(self.path / LABELS, pq.ParquetFile)

    def copy_labels(self, other: "RunFolder") -> None:
        """Another run folder's labels snapshot, copied as it is."""
        with self.atomic(LABELS) as tmp:
            shutil.copyfile(other.path / LABELS, tmp)

    def has_labels(self) -> bool:
        return (self.path / LABELS).is_file()

    def labels_table(self) -> pa.Table:
        return _readable(self.path / LABELS, pq.read_table)

    def labels(self) -> pd.DataFrame:
        """labels.parquet with a `seg.KEY` column per key of the turns' extra segment labels."""
        labels = self.labels_table().to_pandas()
        lack = [c for c in LABEL_KEYS if c not in labels.columns]
        if lack:
            raise RunFolderError(f"{self.path / LABELS}: unreadable (no column {', '.join(lack)}: not a labels snapshot "
                                 "written by `harness run`)")
        from harness.store.label_segments import with_segments

        return with_segments(labels) if "segments" in labels else labels

    # --- traces ---------------------------------------------------------------------------
    @property
    def traces_dir(self) -> Path:
        return self.path / TRACES

    def parts(self) -> list[Path]:
        """The complete trace parts, in name order (a part in flight has a .tmp name)."""
        return sorted(self.traces_dir.glob(PART_GLOB))

    def new_part(self, number: int) -> Path:
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        return self.traces_dir / f"part-{number:05d}-{uuid.uuid4().hex[:8]}.parquet"

    def parts_in_flight(self) -> list[Path]:
        return sorted(self.traces_dir.glob(PART_GLOB + ".tmp"))

    @staticmethod
    def quarantine(part: Path) -> None:
        """Set an unreadable part aside (its turns are replayed on resume)."""
        part.replace(part.with_name(part.name + ".corrupt"))

    # --- judgments ------------------------------------------------------------------------
    def has_judgments(self) -> bool:
        return (self.path / JUDGMENTS).is_file()

    def judgments(self) -> pd.DataFrame:
        return _readable(self.path / JUDGMENTS, _read_frame)

    def judgments_table(self) -> pa.Table:
        return _readable(self.path / JUDGMENTS, pq.read_table)

    def write_judgments(self, table: pa.Table) -> Path:
        return self.write_parquet(JUDGMENTS, table)

    def has_human_judgments(self) -> bool:
        return (self.path / HUMAN_JUDGMENTS).is_file()

    def human_judgments(self) -> pd.DataFrame:
        return _readable(self.path / HUMAN_JUDGMENTS, _read_frame)

    def has_relevance_labels(self) -> bool:
        return (self.path / RELEVANCE_LABELS).is_file()

    def relevance_labels(self) -> pd.DataFrame:
        return _readable(self.path / RELEVANCE_LABELS, _read_frame)

    def write_relevance_labels(self, table: pa.Table) -> Path:
        return self.write_parquet(RELEVANCE_LABELS, table)

    def scoring_inputs(self) -> dict[str, Path]:
        """The files besides the traces that scoring reads (present or not)."""
        return {"labels": self.path / LABELS, "judgments": self.path / JUDGMENTS,
                "human_judgments": self.path / HUMAN_JUDGMENTS, "relevance_labels": self.path / RELEVANCE_LABELS}

    def write_human_judgments(self, df: pd.DataFrame) -> Path:
        return self.write_parquet(HUMAN_JUDGMENTS, df)

    # --- metrics and the tables scoring produces ---------------------------------------------
    def has_metrics(self) -> bool:
        return (self.path / METRICS).is_file()

    def metrics(self) -> pd.DataFrame:
        return _readable(self.path / METRICS, _read_frame)

    def metrics_file(self, read_dictionary: list[str] | None = None) -> pq.ParquetFile:  # harness.store.turns
        return _readable(self.path / METRICS, lambda p: pq.ParquetFile(p, read_dictionary=read_dictionary))

    @contextmanager
    def metrics_writer(self) -> Iterator[Path]:
        """A temporary path for metrics.parquet (written in pieces), renamed when the block ends."""
        with self.atomic(METRICS) as tmp:
            yield tmp

    def has_table(self, name: str) -> bool:
        return (self.path / TABLES[name]).is_file()

    def table(self, name: str) -> pd.DataFrame | None:
        """A table scoring wrote (comparisons, abstention, filter_fields), or None."""
        p = self.path / TABLES[name]
        return _readable(p, _read_frame) if p.is_file() else None

    def table_metadata(self, name: str) -> dict[str, str]:
        return self.parquet_metadata(TABLES[name])

    def write_table(self, name: str, df: pd.DataFrame, metadata: dict[str, str] | None = None) -> Path:
        return self.write_parquet(TABLES[name], df, metadata)

    def remove_table(self, name: str) -> None:
        (self.path / TABLES[name]).unlink(missing_ok=True)

    # --- the eval set -----------------------------------------------------------------------
    def eval_set_path(self, manifest: Manifest | None = None) -> Path | None:
        """The eval set a run answers: the manifest's path as given (absolute, or relative to the
        working folder, to $HARNESS_HOME, or to a folder above the run folder: the project the
        run belongs to); None when none of these holds an eval set."""
        m = manifest if manifest is not None else self.read_manifest()
        p = m.eval_set.path or m.config.get("eval_set")
        if not p:
            return None
        p = Path(p)
        if p.is_absolute():
            cands = [p]
        else:
            home = os.environ.get("HARNESS_HOME")
            above = list(self.path.resolve().parents)
            cands = [Path.cwd() / p] + ([Path(home) / p] if home else []) + [a / p for a in above]
        return next((c for c in cands if is_eval_set(c)), None)

    def require_eval_set(self, manifest: Manifest | None = None, why: str = "") -> Path:
        """eval_set_path, or a BadInput naming what was looked for and where (`why`: what needs it)."""
        m = manifest if manifest is not None else self.read_manifest()
        found = self.eval_set_path(m)
        if found is not None:
            return found
        named = m.eval_set.path or m.config.get("eval_set")
        if not named:
            raise RunFolderError(f"{self.path / MANIFEST}: names no eval set{why}")
        raise RunFolderError(f"{self.path / MANIFEST}: its eval set {named} is not found in the working folder, "
                             f"$HARNESS_HOME or a folder above the run{why}: run from the project's folder or set "
                             "HARNESS_HOME to it")


def run_folder(path: str | Path | RunFolder) -> RunFolder:
    return path if isinstance(path, RunFolder) else RunFolder(path)


class NotScored(BadInput, ValueError):
    """A run folder without metrics where they are needed (exit 2)."""


@dataclass
class RunData:
    """A run folder, loaded for reading: manifest, labels, its arms (labels, capabilities) and,
    when scored, the aggregates of its metrics; per-turn values are read a metric at a time when
    asked for (`turns`, harness.store.turns), since a month's run holds a hundred million of them.
    Compare, gate and report read runs through it."""

    folder: RunFolder
    manifest: Manifest
    labels: pd.DataFrame
    arms: list = field(default_factory=list)  # harness.store.armset.ArmInfo
    aggregates: pd.DataFrame | None = None  # arm_id, metric, segment, mean, p50, p95, n, n_unmeasured, ...
    evidence: object = None  # harness.analysis.evidence.Evidence, when the folder was checked before reading
    scored: bool = False
    _turns: dict = field(default_factory=dict, repr=False)  # metric -> its per-turn rows, as read
    _metrics: set | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def metrics(self) -> set[str]:
        """The metrics with per-turn values (read from the file's row-group statistics once)."""
        if self._metrics is None:
            from harness.store.turns import turn_metrics

            self._metrics = turn_metrics(self.folder) if self.scored else set()
        return self._metrics

    def turns(self, metrics) -> pd.DataFrame | None:
        """The per-turn rows (TURN_COLUMNS) of `metrics`, the last few read kept
        (harness.store.turns.kept_rows); None when the run is not scored."""
        from harness.store.turns import kept_rows

        wanted = [m for m in metrics if m in self.metrics]
        return kept_rows(self.folder, self._turns, wanted, TURN_COLUMNS) if self.scored else None

    def arm_turns(self, metric: str, arm_id: str) -> pd.DataFrame:
        """The per-turn rows (TURN_COLUMNS) of one metric of one arm, read from its own row groups."""
        from harness.store.turns import arm_rows

        return arm_rows(self.folder, self._turns, metric if metric in self.metrics else None, arm_id, TURN_COLUMNS)

    @property
    def per_turn(self) -> pd.DataFrame | None:
        """Every metric's per-turn rows (small runs; a large run's readers ask `turns`)."""
        return self.turns(sorted(self.metrics)) if self.scored else None

    @classmethod
    def load(cls, path: str | Path, scored: bool = True) -> "RunData":
        """Raises NotARunFolder, NotScored (when `scored` and there are no metrics) or ValueError
        (two arms under one label)."""
        from harness.store.armset import run_arms
        from harness.store.turns import aggregates as read_aggregates

        folder = RunFolder(path).require()
        man = folder.read_manifest()
        aggregates = None
        if folder.has_metrics():
            aggregates = read_aggregates(folder)
        elif scored:
            raise NotScored(f"{folder.path}: not scored yet (run `harness metrics {folder.path}` first)")
        return cls(folder, man, folder.labels(), run_arms(man), aggregates, scored=folder.has_metrics())


# the metrics file's columns, declared once: a per-turn row (kind=turn), an aggregate row (kind=aggregate)
TURN_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"]
AGG_COLUMNS = ["arm_id", "metric", "segment", "mean", "p50", "p95", "n", "n_unmeasured", "n_sessions", "repeat_sd"]
METRICS_COLUMNS = ["kind", *dict.fromkeys(AGG_COLUMNS + TURN_COLUMNS)]
