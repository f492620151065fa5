"""The Arm protocol, its registry, and the arm as a run uses it: final when made.

An arm is a named, parameterised strategy. Its canonical id is its repr: every parameter,
defaults included, sorted by name, as key=value; the model behind its LLM roles as
`model=NAME` when all use one, else `model.ROLE=NAME` per role (harness/arms/spelling.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Protocol

from pydantic import ConfigDict, ValidationError

from harness.arms.capability import Capability
from harness.errors import BadInput
from harness.evalset.model import Account, Session, Turn
from harness.arms.result import ArmResult  # noqa: F401  (what an arm returns; the trace row is derived from it)
from harness.strict import Strict
from harness.yamlpos import did_you_mean, validation_problems

REGISTRY: dict[str, type["BaseArm"]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an arm available under `name` in run configs."""

    def deco(cls):
        if name in REGISTRY:
            raise ValueError(f"arm {name!r} registered twice")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


class Params(Strict):
    """An arm's parameters. Every one is part of the arm's id, defaults included; one added after
    an arm was released (`LATE`) enters the id only when set away from its default, so the ids of
    existing runs, baselines and caches stay valid."""

    model_config = ConfigDict(frozen=True)  # Strict's config, frozen: an arm is final when made
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
    threads: Any = None  # harness.threads.CpuThreads: CPU work off the event loop (None: inline)

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
    arm_id: str
    label: str

    async def run(self, ctx: TurnContext) -> list[ArmResult]: ...


@dataclass(frozen=True, eq=False, repr=False)
class BaseArm:
    """An arm as a run uses it, final when made (harness.arms.build.build_arms, its one
    constructor): its parameters, the roles it calls (the run's, or its own endpoints over them),
    its label, id and settings, and what follows from them. Every arm class is a frozen dataclass
    (`__init_subclass__`), so nothing is set on an arm once it is made; turns run concurrently on
    one arm and keep their notes to themselves. A class declares what depends on its parameters
    in the `*_for` class methods, which the constructor asks once."""

    name: ClassVar[str] = "?"
    Params: ClassVar[type[Params]] = Params
    # what the arm can do; metrics that need more are n/a for it
    base_capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.RANKING, Capability.QUERIES,
                                                                   Capability.REPLAYED})
    reads_labels: ClassVar[frozenset[str]] = frozenset()  # turn labels it reads (armset.LABEL_FIELDS): never a system arm

    params: Params
    roles: Any  # harness.roles.base.Roles (None: every role offline)
    label: str  # the run's label for it, derived among every arm of the run (harness/arms/spelling.py)
    given_label: str | None  # the config's `label:`
    arm_id: str
    settings: Mapping[str, str]  # parameters, models and prompts as text (harness/arms/spelling.py)
    uses: tuple[str, ...]  # the LLM roles it calls
    backends: Mapping[str, str]  # LLM role -> model name or 'offline'
    prompts: Mapping[str, str]  # LLM role -> `name@hash` of its prompt (offline roles have none)
    capabilities: frozenset[Capability]
    hits_per_round: int | None  # hits judged per round, for arms that loop (the loop metrics read it)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True, eq=False, repr=False)(cls)  # frozen as a whole, not only the fields above

    @classmethod
    def uses_for(cls, p: Params) -> tuple[str, ...]:
        """The LLM roles an arm of these parameters calls."""
        return ()

    @classmethod
    def capabilities_for(cls, p: Params) -> frozenset[Capability]:
        return cls.base_capabilities | ({Capability.ANSWERS} if getattr(p, "answer", False) else set())

    @classmethod
    def hits_per_round_for(cls, p: Params) -> int | None:
        return None

    @classmethod
    def unused_for(cls, p: Params, backends: Mapping[str, str], rewrite_fields: tuple | None) -> set[str]:
        """Parameters that change nothing as the arm is configured, kept out of its id (the
        manifest keeps them): the offline rewrite's `method` when an LLM writes the whole rewrite
        (`rewrite_fields`: the fields its endpoint asks for, None: all)."""
        from harness.roles.base import OFFLINE

        llm_writes_all = backends.get("rewrite", OFFLINE) != OFFLINE and rewrite_fields is None
        return {"method"} if "method" in type(p).model_fields and llm_writes_all else set()

    def describe(self) -> dict:
        """The arm's entry in the manifest."""
        out = {"arm_id": self.arm_id, "arm": self.name, "label": self.label, "params": self.params.model_dump(),
               "backends": dict(self.backends), "prompts": dict(self.prompts), "capabilities":
               sorted(map(str, self.capabilities))}
        out.update({"reads_labels": sorted(self.reads_labels)} if self.reads_labels else {})
        if self.hits_per_round is not None:
            out["hits_per_round"] = self.hits_per_round
        return out

    def __repr__(self) -> str:
        return self.arm_id


class ArmSpecError(BadInput, ValueError):
    """A bad arm spec; `problems`: (key path within the spec, message) pairs, for a config loader
    to name file and line (harness/yamlpos.py `located`)."""

    def __init__(self, message: str, problems: list[tuple[tuple, str]] = ()):
        super().__init__(message)
        self.problems = list(problems)


def parse_spec(spec: str | dict) -> tuple[type[BaseArm], Params]:
    """An arm spec (a name, or a mapping of `name:` and parameters) checked: its class and its
    parameters; else ArmSpecError naming the bad key."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = spec.pop("name", None)
    known = ", ".join(sorted(REGISTRY))
    if not isinstance(name, str) or name not in REGISTRY:
        msg = f"unknown arm {name!r}{did_you_mean(name, REGISTRY)} (known: {known})" if isinstance(name, str) else \
            f"an arm needs `name:`, one arm (known: {known})"
        raise ArmSpecError(msg, [(("name",), msg)])
    cls = REGISTRY[name]
    for own in ("roles", "label"):  # what the constructor takes besides the parameters
        if own in spec:
            msg = f"not a parameter of {name}{did_you_mean(own, cls.Params.model_fields)}"
            raise ArmSpecError(f"arm {name}: {own}: {msg}", [((own,), msg)])
    try:
        return cls, cls.Params(**spec)
    except ValidationError as e:
        problems = validation_problems(e, cls.Params)
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
