"""A gate policy (YAML), validated once: every field, every metric name (against the registry),
every segment and every direction; each problem as `file:line: field: message`, exit 2.

rules     paired comparisons of candidate against baseline (noninferiority or regression), in
          the metric's good direction; a metric without one (`abstained`) needs `direction:`
floors    absolute bounds on a candidate metric (min, max)
budgets   caps on a lower-is-better metric's mean, p50 or p95 (cost, latency)
limits    error and unmeasured rates past which the runs cannot be gated (exit 3), and the share of
          the turns a baseline arm measured that its candidate may leave unmeasured (max_lost_rate)
pairs     named pairs BASELINE: CANDIDATE (labels or arm ids) before pairing by label
unpaired  error (default: labels without a partner exit 2) or warn (listed, the rest gated)
coverage  full (default: a candidate lacking baseline sessions, splits or repeats exits 2) or
          subset (gated on what both hold; the verdict's first line names what was not compared)
min_sessions  sessions measured in both runs that a rule needs (default 10); fewer is
          "insufficient data", never a pass
A policy without a single rule, floor or budget checks nothing and is refused."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, ValidationError

from harness.errors import BadInput
from harness.strict import Strict
from harness.metrics.registry import Metric, UnknownMetric, resolve
from harness.metrics.segments import SegmentError, parse_segment
from harness.metrics.stats import STATS
from harness.yamlpos import line_of, located, read_yaml, validation_problems, where


class Check(Strict):
    """A rule, floor or budget: the metric it names is resolved once, when the policy loads, into
    the registry's Metric (`m`) that the gate, --explain and the report use from there."""
    _m: Metric | None = PrivateAttr(default=None)

    @property
    def m(self) -> Metric:
        if self._m is None:
            self._m = resolve(self.metric)
        return self._m


class Rule(Check):
    metric: str
    segment: str = "all"
    arm: str = "*"  # a label (or arm id) of the runs, or * for every pair
    max_drop: float = Field(ge=0)  # in the metric's unit, in its bad direction
    alpha: float = Field(default=STATS.alpha, gt=0, lt=1)
    test: Literal["noninferiority", "regression"] = "noninferiority"
    direction: Literal["higher", "lower"] | None = None  # required for metrics without a direction
    min_sessions: int | None = Field(default=None, ge=2)


class Floor(Check):
    metric: str
    segment: str = "all"
    arm: str = "*"
    min: float | None = None
    max: float | None = None


class Budget(Check):
    metric: str  # a lower-is-better metric: cost_usd, latency_total_ms, llm_calls, ...
    stat: Literal["mean", "p50", "p95"] = "mean"
    arm: str = "*"
    max: float


class Limits(Strict):
    max_error_rate: float = Field(default=0.05, ge=0, le=1)  # an arm's failed turns (errors, failed LLM calls)
    max_unmeasured_rate: float = Field(default=0.2, ge=0, le=1)  # a metric unmeasured by infrastructure
    # turns a check's baseline arm measured and its candidate arm left unmeasured (n/a, an error): a
    # check fails past this share, as what is not measured cannot be compared
    max_lost_rate: float = Field(default=0.01, ge=0, le=1)


class Policy(Strict):
    pairs: dict[str, str] = Field(default_factory=dict)
    unpaired: Literal["error", "warn"] = "error"
    coverage: Literal["full", "subset"] = "full"
    min_sessions: int = Field(default=10, ge=2)
    rules: list[Rule] = Field(default_factory=list)
    floors: list[Floor] = Field(default_factory=list)
    budgets: list[Budget] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    n_resamples: int = Field(default=STATS.n_resamples, ge=100)  # STATS': the same CI as compare and the report
    seed: int = STATS.seed
    _where: dict = PrivateAttr(default_factory=dict)  # (section, index) -> "file:line", for later errors

    def where(self, section: str, i: int) -> str:
        """`file:line: section.i` of a rule, floor or budget, for errors found while gating."""
        at = self._where.get((section, i))
        return f"{at}: {section}.{i}" if at else f"{section}.{i}"


class GateUsageError(BadInput):
    """Bad input (exit 2)."""


# the values a metric can take, by its unit (harness list metrics); a unit not here is unbounded
INF = float("inf")
RANGES = {"share": (0.0, 1.0), "0-1": (0.0, 1.0), "0/1": (0.0, 1.0), "rate": (0.0, 1.0), "cosine": (-1.0, 1.0),
          "count": (0.0, INF), "rounds": (0.0, INF), "calls": (0.0, INF), "tokens": (0.0, INF), "ms": (0.0, INF),
          "USD": (0.0, INF)}


def _out_of_range(kind: str, item, m) -> tuple[str, str] | None:
    """(field, why) when a number of a check lies outside what its metric can take, so that the check
    could never fail (a margin as wide as the metric's range) or never pass (a floor beyond its end);
    None when it is in range."""
    lo, hi = RANGES.get(m.unit, (-INF, INF))
    where = f"{m.name} lies in [{lo:g}, {hi:g}]"
    if kind == "rules":
        return None if item.max_drop < hi - lo else \
            ("max_drop", f"{where}: no change can be worse than −{hi - lo:g}, so max_drop {item.max_drop:g} would pass "
                         f"every change; write a margin below {hi - lo:g}")
    for field, v in (("min", getattr(item, "min", None)), ("max", item.max)):
        if v is not None and not lo <= v <= hi:
            never = "pass" if (field == "min") == (v > hi) else "fail"  # a min above the range, a max below it
            return field, f"{where}: {field} {v:g} lies outside it, so the check could never {never}"
    return None


def operational_rule(name: str) -> str:
    """Why a relative rule on an operational metric is refused: it would count noise as a change."""
    return (f"{name} is an operational metric: operational metrics take absolute budgets (`budgets: - {{metric: "
            f"{name}, stat: p95, max: N}}`), never a relative rule (timings, spend and calls depend on the machine, "
            "its load and the day, so a difference between two runs is not a quality regression)")


def _semantic_problems(pol: Policy) -> list[tuple[tuple, str]]:
    """(field path, message) for names and values the schema alone cannot check."""
    out: list[tuple[tuple, str]] = []
    for kind, items in (("rules", pol.rules), ("floors", pol.floors), ("budgets", pol.budgets)):
        for i, item in enumerate(items):
            try:
                m = resolve(item.metric)
            except UnknownMetric as e:
                out.append(((kind, i, "metric"), str(e)))
                continue
            seg = getattr(item, "segment", None)
            if seg is not None:
                try:
                    parse_segment(seg)
                except SegmentError as e:
                    out.append(((kind, i, "segment"), str(e)))
            if kind == "rules" and m.operational:
                out.append(((kind, i, "metric"), operational_rule(m.name)))
                continue
            if kind == "rules" and m.direction == "none" and item.direction is None:
                out.append(((kind, i, "direction"), f"{m.name} has no good direction of its own (it depends on the "
                            "segment): state `direction: higher` or `direction: lower`"))
            if kind == "rules" and m.direction != "none" and item.direction not in (None, m.direction):
                out.append(((kind, i, "direction"), f"{m.name} is {m.direction}-is-better; `direction: "
                            f"{item.direction}` contradicts it"))
            if kind == "budgets" and m.direction != "lower":
                out.append(((kind, i, "metric"), f"a budget caps a lower-is-better metric; {m.name} is "
                            f"{m.direction}: use a floor"))
            if kind == "floors" and item.min is None and item.max is None:
                out.append(((kind, i, "min"), "a floor needs min or max"))
            elif bad := _out_of_range(kind, item, m):
                out.append(((kind, i, bad[0]), bad[1]))
    return out


def load_policy(path: Path) -> Policy:
    raw, text = read_yaml(path, GateUsageError)
    if not isinstance(raw, dict):
        raise GateUsageError(f"{path}: expected a mapping with rules, floors, budgets, limits")
    try:
        pol = Policy.model_validate(raw)
    except ValidationError as e:
        raise GateUsageError(located(path, text, validation_problems(e, Policy))) from None
    problems = _semantic_problems(pol)
    if problems:
        raise GateUsageError(located(path, text, problems))
    for section in ("rules", "floors", "budgets"):
        for i, item in enumerate(getattr(pol, section)):
            item._m = resolve(item.metric)  # resolved once; the canonical name from here on
            item.metric = item._m.name
            pol._where[(section, i)] = where(path, line_of(text, (section, i)))
    if not (pol.rules or pol.floors or pol.budgets):
        raise GateUsageError(f"{path}:{line_of(text, ('rules',)) or 1}: rules: the policy has no check (no rule, floor "
                             "or budget): it would pass any candidate; add the rules a change must meet (docs/gate.md)")
    return pol
