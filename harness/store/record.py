"""The run record: the manifest of a run folder (its file: harness.store.folder.MANIFEST) as one
typed model, with its `schema_version`.
harness/store/manifest.py builds it for replays, imported runs and merged shards; every reader gets
it from RunFolder.read_manifest and reads its fields. A manifest written before this model (no
`schema_version`) is upgraded by `upgrade`, the one place that knows older layouts."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import BadInput

SCHEMA_VERSION = 2


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")  # a newer harness's fields survive a read and a rewrite


class EvalSetRef(_Part):
    name: str | None = None
    version: str | None = None
    hash: str | None = None
    path: str | None = None
    splits: list[str] = Field(default_factory=list)
    pooled_corpus: bool = False
    written_here: bool = False
    # file name -> sha256 of each eval-set file the hash covers, so a refusal of two hashes can name
    # the files that differ; absent in manifests written before it was recorded
    files: dict[str, str] | None = None


class IndexInfo(_Part):
    max_chars: int | None = None
    qdrant_url: str | None = None  # None: the embedded engine
    dense: str | None = None  # the dense engine, for people to read
    chunks: int | None = None
    embedded_cold: int | None = None


class Machine(_Part):
    """Where and under what load a run was timed."""
    host: str | None = None
    cpu_count: int | None = None
    load_average: list[float] | None = None
    platform: str | None = None
    python: str | None = None


class Shard(_Part):
    index: int
    of: int


class Manifest(_Part):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    status: Literal["running", "complete", "failed"] | None = None
    failure: str | None = None  # why a failed run stopped
    config: dict[str, Any] = Field(default_factory=dict)  # as given (an imported run: where it came from)
    config_hash: str | None = None
    config_dir: str | None = None  # the run config's folder: prompt files are relative to it
    eval_set: EvalSetRef = Field(default_factory=EvalSetRef)
    git: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str | None] = Field(default_factory=dict)
    machine: Machine | None = None
    embedder: str | None = None
    index: IndexInfo = Field(default_factory=IndexInfo)
    arms: list[dict[str, Any]] = Field(default_factory=list)  # harness.store.armset reads each entry
    filter_schema: list[dict[str, Any]] = Field(default_factory=list)
    prompt_hashes: dict[str, str | None] = Field(default_factory=dict)
    seed: int = 0
    llm: dict[str, Any] = Field(default_factory=dict)
    repeats: int = 1
    metrics: dict[str, Any] | None = None  # the ranking metrics' settings (harness.defaults.MetricsConfig)
    started: str | None = None
    ended: str | None = None
    counts: dict[str, int | float] = Field(default_factory=dict)
    shard: Shard | None = None  # one shard of a run (`harness run --shard i/n`)
    merged_from: list[dict[str, Any]] | None = None  # the shards a merged run joins
    # the processes the run was replayed in (`harness run --workers N`: N shards joined into this
    # folder); absent in manifests written before the setting existed (one process)
    workers: int | None = None
    warnings: list[str] = Field(default_factory=list)

    def dump(self) -> dict:
        """The manifest as JSON data (what its file holds)."""
        return self.model_dump(mode="json", exclude_none=True)

    def splits_planned(self) -> list[str]:
        return list(self.eval_set.splits)


def upgrade(raw: dict) -> dict:
    """A manifest of any earlier layout, as this version's: the index's `qdrant` (a URL, or
    ":memory:" for the embedded engine) becomes `qdrant_url`; the version is stamped. Arm entries
    without capabilities are completed where they are read (harness.store.armset)."""
    if raw.get("schema_version", 1) >= SCHEMA_VERSION:
        return raw
    out = dict(raw)
    index = dict(out.get("index") or {})
    if "qdrant" in index:
        url = index.pop("qdrant")
        index["qdrant_url"] = None if url in (None, ":memory:") else url
        index.setdefault("dense", "qdrant-client local mode (in memory)" if url == ":memory:" else "qdrant-client")
    out["index"] = index
    out["schema_version"] = SCHEMA_VERSION
    return out


def parse(raw: Any, where: str) -> Manifest:
    """The model of a manifest's JSON data; BadInput naming the file and the field otherwise."""
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: unreadable (not a JSON object)")
    try:
        return Manifest.model_validate(upgrade(raw))
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(map(str, first["loc"]))
        raise BadInput(f"{where}: unreadable ({field}: {first['msg']})") from None
