"""The Arm protocol, its registry and the canonical id.

An arm is a named, parameterised strategy. Its canonical id is its repr: every parameter,
defaults included, sorted by name, as key=value; the model behind its LLM roles as
`model=NAME` when all use one, else `model.ROLE=NAME` per role (harness/arms/spelling.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import BadInput
from harness.evalset.model import Account, Session, Turn
from harness.arms.spelling import spell
from harness.arms.result import ArmResult  # noqa: F401  (what an arm returns; the trace row is derived from it)
from harness.yamlpos import did_you_mean, validation_problems

REGISTRY: dict[str, type["Arm"]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an arm available under `name` in run configs."""

    def deco(cls):
        if name in REGISTRY:
            raise ValueError(f"arm {name!r} registered twice")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


class Params(BaseModel):
    """An arm's parameters. Every one is part of the arm's id, defaults included; one added after
    an arm was released (`LATE`) enters the id only when set away from its default, so the ids of
    existing runs, baselines and caches stay valid."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    LATE: ClassVar[frozenset[str]] = frozenset()


@dataclass
class TurnContext:
    """What an arm sees of one labelled turn. `labels` is there for the oracle only."""

    session: Session
    position: int  # 0-based position of the turn in the session
    turn_index: int
    turn: Turn
    entitlement_filters: list[dict]
    inherited_filters: list[dict]
    index: Any  # harness.corpus.index.Index
    info: Any  # EvalSetInfo
    repeat: int = 0
    seed: int = 0
    roles: Any = None  # harness.roles.base.Roles
    identifiers: list[str] | None = None  # the turn's identifiers, found once when the context is made
    workers: Any = None  # harness.workers.CpuWorkers: CPU work off the event loop (None: inline)

    def __post_init__(self):
        if self.identifiers is None:
            from harness.guards.identifiers import find_identifiers

            self.identifiers = find_identifiers(self.turn.user)

    @property
    def history(self) -> list[Turn]:
        return self.session.turns[: self.position]

    @property
    def account(self) -> Account:
        return self.turn.state.account or self.session.account


class Arm(Protocol):
    name: ClassVar[str]
    params: Params

    @property
    def arm_id(self) -> str: ...

    def backends(self) -> dict[str, str]: ...

    async def run(self, ctx: TurnContext) -> list[ArmResult]: ...


class BaseArm:
    name: ClassVar[str] = "?"
    Params: ClassVar[type[Params]] = Params
    uses: ClassVar[tuple[str, ...]] = ()  # the LLM roles this arm calls
    # what the arm can do (harness.run.armset.CAPABILITIES); metrics that need more are n/a for it
    base_capabilities: ClassVar[frozenset[str]] = frozenset({"ranking", "queries", "replayed"})
    reads_labels: ClassVar[frozenset[str]] = frozenset()  # turn labels it reads (armset.LABEL_FIELDS): never a system arm

    def __init__(self, roles=None, label: str | None = None, **kwargs):
        """`roles`: the arm's own (the run's, or its own endpoints over them: Roles.for_arm), fixed
        for its life, so its id never changes; `label`: the config's `label:`."""
        self.params = self.Params(**kwargs)
        self.roles = roles
        self.given_label = label
        self.label: str | None = label  # the run's label for it: derived once every arm of the run is known

    @property
    def capabilities(self) -> frozenset[str]:
        answers = {"answers"} if getattr(self.params, "answer", False) else set()
        return self.base_capabilities | answers

    @property
    def hits_per_round(self) -> int | None:
        """Hits judged per round, for arms that loop (the loop metrics look at these)."""
        return None

    def describe(self) -> dict:
        """The arm's entry in the manifest."""
        out = {"arm_id": self.arm_id, "arm": self.name, "label": self.label, "params": self.params.model_dump(),
               "backends": self.backends(), "prompts": self.prompts(), "capabilities": sorted(self.capabilities)}
        out.update({"reads_labels": sorted(self.reads_labels)} if self.reads_labels else {})
        if self.hits_per_round is not None:
            out["hits_per_round"] = self.hits_per_round
        return out

    def backends(self) -> dict[str, str]:
        """LLM role -> model name (or 'offline'); empty for arms that use no LLM role."""
        from harness.roles.base import OFFLINE

        return {r: (self.roles.backend(r) if self.roles is not None else OFFLINE) for r in self.uses}

    def unused_params(self) -> set[str]:
        """Parameters that change nothing as the arm is configured, kept out of its id (the
        manifest keeps them): the offline rewrite's `method` when an LLM writes the rewrite."""
        from harness.roles.base import OFFLINE

        asks_all = getattr(self.roles, "fields", lambda role: None)("rewrite") is None  # else method writes the rest
        if "method" in type(self.params).model_fields and self.backends().get("rewrite", OFFLINE) != OFFLINE and asks_all:
            return {"method"}
        return set()

    def prompts(self) -> dict[str, str]:
        """`name@hash` of the prompt of each LLM role this arm calls (offline roles have none)."""
        return self.roles.prompts(self.uses) if hasattr(self.roles, "prompts") else {}

    @property
    def arm_id(self) -> str:
        fields = type(self.params).model_fields
        late = {k for k in self.params.LATE if getattr(self.params, k) == fields[k].default}
        return spell(self.name, self.params.model_dump(), self.backends(), self.prompts(),
                     self.unused_params() | late).arm_id

    def __repr__(self) -> str:
        return self.arm_id


class ArmSpecError(BadInput, ValueError):
    """A bad arm spec; `problems`: (key path within the spec, message) pairs, for a config loader
    to name file and line (harness/yamlpos.py `located`)."""

    def __init__(self, message: str, problems: list[tuple[tuple, str]] = ()):
        super().__init__(message)
        self.problems = list(problems)


def make_arm(spec: str | dict, roles=None, label: str | None = None) -> BaseArm:
    if isinstance(spec, str):
        spec = {"name": spec}
    spec = dict(spec)
    name = spec.pop("name", None)
    known = ", ".join(sorted(REGISTRY))
    if not isinstance(name, str) or name not in REGISTRY:
        msg = f"unknown arm {name!r}{did_you_mean(name, REGISTRY)} (known: {known})" if isinstance(name, str) else \
            f"an arm needs `name:`, one arm (known: {known})"
        raise ArmSpecError(msg, [(("name",), msg)])
    for own in ("roles", "label"):  # the constructor's own arguments, not parameters
        if own in spec:
            msg = f"not a parameter of {name}{did_you_mean(own, REGISTRY[name].Params.model_fields)}"
            raise ArmSpecError(f"arm {name}: {own}: {msg}", [((own,), msg)])
    try:
        return REGISTRY[name](roles=roles, label=label, **spec)
    except ValidationError as e:
        problems = validation_problems(e, REGISTRY[name].Params)
        raise ArmSpecError(f"arm {name}: " + "; ".join(f"{'.'.join(map(str, loc))}: {m}" for loc, m in problems),
                           problems) from None


def expand_grid(spec: str | dict) -> list[str | dict]:
    """A spec whose parameter values are lists becomes one spec per grid point; an empty list
    would silently drop the arm: ArmSpecError."""
    if isinstance(spec, str):
        return [spec]
    keys = [k for k, v in spec.items() if isinstance(v, list) and k != "name"]
    if empty := [((k,), "an empty grid: give at least one value") for k in keys if not spec[k]]:
        raise ArmSpecError(f"arm {spec.get('name')!r}: " + "; ".join(f"{k}: {m}" for (k,), m in empty), empty)
    points: list[dict] = [dict(spec)]
    for k in keys:
        points = [{**p, k: v} for p in points for v in spec[k]]
    return points
