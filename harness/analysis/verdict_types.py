"""The gate's verdict as typed, versioned values (inspect_ai's `EvalLog(version=2)` style): a
GateVerdict of CheckResults, each with its status, kind and reason as enums, its Metric, segment
and numbers. It is serialised once, to gate.json with `schema_version`; gate.md, the JUnit file,
the terminal's lines and the report's verdict block are rendered from it and from nothing else.
docs/gate.schema.json is generated from these models (`python -m harness.analysis.verdict_types`)
and tests/analysis/test_verdict_types.py checks it is up to date and that a real gate.json validates."""
from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, PlainValidator, ValidationError, WithJsonSchema, \
    model_validator

from harness.errors import BadInput, Exit
from harness.metrics.registry import Direction, Metric, resolve
from harness.strict import Strict

SCHEMA_VERSION = 1  # raise it when a field changes meaning or goes; readers refuse any other
SCHEMA_PATH = Path("docs/gate.schema.json")  # under the repository, committed


class CheckKind(str, Enum):
    RULE = "rule"
    FLOOR = "floor"
    BUDGET = "budget"


class CheckStatus(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    INSUFFICIENT = "insufficient"  # a failed check that lacked the data to judge it
    NA = "n/a"  # shown, neither passed nor failed

    @property
    def ok(self) -> bool:
        return self in (CheckStatus.PASS, CheckStatus.NA)


class Reason(str, Enum):
    """Why a check has its status; `detail` says it in words with the numbers."""

    WITHIN = "within"  # pass: within the rule's margin or the bound
    NOT_SHOWN_NONINFERIOR = "not_shown_noninferior"  # the CI's worst end lies beyond -max_drop
    SIGNIFICANT_DROP = "significant_drop"  # worse than -max_drop and significant at alpha
    OUT_OF_BOUNDS = "out_of_bounds"  # a floor's or budget's statistic outside its bounds
    NOT_APPLICABLE = "not_applicable"  # the metric needs capabilities the arm does not declare
    IMPORTED_RUN = "imported_run"  # an imported run file records rankings only
    NOT_IN_EVAL_SET = "not_in_eval_set"  # no turn of the eval set measures the metric in the segment
    CAPABILITY_DROPPED = "capability_dropped"  # the candidate's arm no longer declares what the metric needs
    TURNS_LOST = "turns_lost"  # the candidate left unmeasured more of the baseline's turns than allowed
    VALUES_MISSING = "values_missing"  # values missing or not finite in the candidate
    COST_UNKNOWN = "cost_unknown"  # no price for a model of the candidate
    TOO_FEW_SESSIONS = "too_few_sessions"  # fewer measured sessions than min_sessions
    UNDERPOWERED = "underpowered"  # the set cannot show a drop of max_drop


class Verdict(str, Enum):
    PASS = "pass"
    REGRESSION = "regression"
    INSUFFICIENT = "insufficient data"  # exit 1, every failed check lacked the data to judge it
    INFRASTRUCTURE = "infrastructure"


def _finite(v):
    """NaN and infinities are `null` in gate.json and None here: one spelling of `no number`."""
    try:
        return None if v is None or not math.isfinite(float(v)) else float(v)
    except (TypeError, ValueError):
        return v  # not a number: the field's own validation says so


Number = Annotated[float | None, BeforeValidator(_finite)]


def _value(v) -> float:
    """A turn's value: finite or infinite (an infinite latency is a value, and named), never NaN."""
    f = float(v)
    if math.isnan(f):
        raise ValueError("a turn's value is a number or an infinity, not NaN")
    return f


def _spelled(f: float) -> float | str:
    return f if math.isfinite(f) else ("Infinity" if f > 0 else "-Infinity")


# in gate.json an infinity is the string "Infinity" or "-Infinity" (JSON has no number for it)
TurnValue = Annotated[float, PlainValidator(_value), PlainSerializer(_spelled, when_used="json"),
                      WithJsonSchema({"anyOf": [{"type": "number"}, {"enum": ["Infinity", "-Infinity"]}]})]


def _metric(v) -> Metric:
    return v if isinstance(v, Metric) else resolve(str(v))


# the Metric itself in memory (direction, unit, kind); its canonical name in gate.json
MetricField = Annotated[Metric, PlainValidator(_metric), PlainSerializer(lambda m: m.name, return_type=str),
                        WithJsonSchema({"type": "string", "description": "the metric's canonical name"})]


class _Frozen(Strict):
    model_config = ConfigDict(frozen=True)  # Strict's config, frozen: a verdict is not edited, only `but`


class MovedTurn(_Frozen):
    """A turn of a failed check whose value moved most in the bad direction."""

    session_id: str
    turn_index: int
    baseline: TurnValue
    candidate: TurnValue


class CheckResult(_Frozen):
    """One check of the policy on one arm pair: a rule (candidate − baseline), a floor or a budget."""

    kind: CheckKind
    name: str
    status: CheckStatus
    ok: bool  # status is pass or n/a (what CI scripts read)
    label: str
    metric: MetricField
    segment: str
    direction: Direction  # the rule's own direction when it states one, else the metric's
    detail: str
    reason: Reason | None = None
    diff: Number = None  # candidate − baseline (rules)
    ci: tuple[Number, Number] | None = None  # its CI (rules)
    p: Number = None
    p_floor: Number = None  # the test's resolution when no draw was as extreme
    p_exact: bool | None = None
    mde: Number = None  # the smallest detectable difference from the baseline's spread (rules)
    n_sessions: int | None = None
    n_turns: int | None = None
    changes: list[str] | None = None  # what changed between the paired arms (rules)
    value: Number = None  # the statistic a floor or budget judged
    lost: int | None = None  # baseline turns the candidate left unmeasured
    moved: list[MovedTurn] | None = None  # failed checks: the turns that moved most

    @model_validator(mode="before")
    @classmethod
    def _ok_from_status(cls, data):
        if isinstance(data, dict) and "ok" not in data and "status" in data:
            return {**data, "ok": CheckStatus(data["status"]).ok}
        return data

    @model_validator(mode="after")
    def _ok_agrees(self) -> CheckResult:
        if self.ok != self.status.ok:
            raise ValueError(f"ok is {self.ok} but status is {self.status.value}")
        return self

    def but(self, **changes) -> CheckResult:
        """This check with some fields changed (`ok` follows `status`), validated again."""
        data = {**self.model_dump(exclude={"ok"}), "metric": self.metric, **changes}
        return CheckResult.model_validate(data)


class Statistics(_Frozen):
    """How every rule's CI and p were computed (harness.metrics.stats.STATS with the policy's counts)."""

    n_resamples: int
    n_permutations: int
    exact_max_sessions: int
    alpha: float
    seed: int
    normal_from_sessions: int
    said: str


class PairSaid(_Frozen):
    label: str
    baseline_arm: str
    candidate_arm: str
    how: str  # label | id | named
    changes: list[str]


class GateVerdict(_Frozen):
    """The gate's verdict: what it compared, every check, and the exit code."""

    schema_version: int = SCHEMA_VERSION
    status: Exit  # the exit code
    verdict: Verdict
    baseline: str
    candidate: str
    statistics: Statistics
    pairs: list[PairSaid]
    not_compared: str | None = None  # coverage: subset: what was not compared
    evidence: list[str] = Field(default_factory=list)  # notes on the runs (partial, rescored, failed turns)
    scope: str | None = None  # what the verdict covers, in words
    warnings: list[str] = Field(default_factory=list)
    infrastructure: list[str] = Field(default_factory=list)  # why the runs cannot be gated (exit 3)
    results: list[CheckResult]
    unchanged: dict[str, str] = Field(default_factory=dict)  # label -> why its pair is unchanged

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def json_schema() -> dict:
    """gate.json's JSON schema, from the models."""
    schema = GateVerdict.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def read_verdict(path: Path) -> GateVerdict:
    """A gate.json read back; one of another schema_version, or not a verdict, is bad input (exit 2)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable gate verdict: {e}") from None
    found = data.get("schema_version") if isinstance(data, dict) else None
    if found != SCHEMA_VERSION:
        raise BadInput(f"{path}: schema_version: {found!r}, but this harness reads gate.json of schema_version "
                       f"{SCHEMA_VERSION} only ({SCHEMA_PATH}); run `harness gate` again with this harness to write it")
    try:
        return GateVerdict.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        raise BadInput(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']} ({e.error_count()} error(s) "
                       "against the gate.json schema)") from None


if __name__ == "__main__":  # regenerate the committed schema
    SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
    print(f"written: {SCHEMA_PATH}")
