"""The metric registry (ir_measures style): every metric is a value with a canonical name
(`recall@10`), a direction (`higher`, `lower`, or `none` where the segment decides, e.g.
`abstained`), a unit, an aggregation, the columns it reads and the arm capabilities it needs.
Families register their metrics beside their single implementation (one file per family under
harness/metrics); everything that takes a metric name from a user resolves it here, so an
unknown name is an error with a suggestion, never a silent skip."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Literal

from harness.errors import BadInput
from harness.yamlpos import did_you_mean

Direction = Literal["higher", "lower", "none"]
# quality: what a retrieval or answer is worth (a verdict's regressions); operational: what it costs
# to run (latency, tokens, cost, calls), judged by a policy's absolute budgets, never counted as a
# regression between runs timed on different machines or days
Kind = Literal["quality", "operational"]
LIST_COMMAND = "harness list metrics"


@dataclass(frozen=True)
class Metric:
    """One metric; `name` is canonical (parameters included: `recall@10`)."""

    name: str
    family: str
    direction: Direction
    unit: str
    aggregation: str
    reads: tuple[str, ...]
    needs: frozenset[str]
    description: str
    pattern: str = ""  # the registered form (`recall@k`)
    kind: Kind = "quality"

    @property
    def operational(self) -> bool:
        return self.kind == "operational"

    def applies_to(self, capabilities) -> bool:
        return self.needs <= set(capabilities)

    def sign(self, direction: str | None = None) -> float:
        """+1 when higher is better, -1 when lower is: a candidate-minus-baseline difference times
        this is an improvement. `direction` states it for a metric without one."""
        d = direction or self.direction
        if d not in ("higher", "lower"):
            raise ValueError(f"{self.name} has no direction of its own: state one")
        return 1.0 if d == "higher" else -1.0


@dataclass(frozen=True)
class Template:
    """A registered metric form: a fixed name, or a stem with an integer cutoff (`recall@k`)."""

    pattern: str
    direction: Direction
    unit: str
    description: str
    needs: tuple[str, ...] = ("ranking",)
    reads: tuple[str, ...] = ()
    aggregation: str = "mean over turns"
    family: str = ""
    kind: Kind = "quality"

    def match(self, name: str) -> Metric | None:
        if self.pattern.endswith("@k"):
            m = re.fullmatch(re.escape(self.pattern[:-2]) + r"@([1-9]\d*)", name)
            if not m:
                return None
        elif name != self.pattern:
            return None
        return Metric(name, self.family, self.direction, self.unit, self.aggregation, self.reads,
                      frozenset(self.needs), self.description, self.pattern, self.kind)


@dataclass
class Family:
    """A family of metrics computed by one kernel (one file)."""

    name: str
    templates: list[Template]
    kernel: Callable | None = None
    order: int = 0


FAMILIES: dict[str, Family] = {}
TEMPLATES: list[Template] = []


def family(name: str, templates: list[Template], order: int) -> Callable:
    """Decorator of a family kernel: registers the kernel and its metrics. `order` fixes where
    the family's rows come in the per-turn table."""

    from harness.run.armset import CAPABILITIES

    def deco(fn):
        if name in FAMILIES:
            raise ValueError(f"metric family {name!r} registered twice")
        ts = [Template(**{**t.__dict__, "family": name}) for t in templates]
        for t in ts:
            if any(t.pattern == o.pattern for o in TEMPLATES):
                raise ValueError(f"metric {t.pattern!r} registered twice")
            unknown = set(t.needs) - set(CAPABILITIES)
            if unknown:
                raise ValueError(f"metric {t.pattern!r} needs unknown capabilities {sorted(unknown)}")
        FAMILIES[name] = Family(name, ts, fn, order)
        TEMPLATES.extend(ts)
        return fn

    return deco


def families() -> list[Family]:
    return sorted(FAMILIES.values(), key=lambda f: f.order)


class UnknownMetric(BadInput, ValueError):
    """A metric name the registry does not know (exit 2)."""


def lookup(name: str) -> Metric | None:
    for t in TEMPLATES:
        m = t.match(name.strip())
        if m is not None:
            return m
    return None


def examples(extra: list[str] = ()) -> list[str]:
    """Concrete names to suggest from: every fixed name, common cutoffs, and `extra` (e.g. the
    names a run computed)."""
    out = list(extra)
    for t in TEMPLATES:
        out += [t.pattern.replace("@k", f"@{k}") for k in (5, 10, 20)] if t.pattern.endswith("@k") else [t.pattern]
    return list(dict.fromkeys(out))


def suggestion(name: str, extra: list[str] = ()) -> str:
    return did_you_mean(name, examples(extra))


def resolve(name: str, extra: list[str] = ()) -> Metric:
    """The metric of a name a user wrote; UnknownMetric with a suggestion otherwise."""
    m = lookup(name)
    if m is None:
        raise UnknownMetric(f"unknown metric {name!r}{suggestion(name, extra)} (see `{LIST_COMMAND}`)")
    return m


def headline(settings: dict | None = None) -> list[str]:
    """The ranking metrics readers lead with, from a run's metric settings (its manifest's
    `metrics`; the defaults of harness.config.MetricsConfig without): recall at the computed
    cutoff nearest 10, nDCG and MRR at their configured cutoffs. Every command and report section
    asks here, so a run with `cutoffs: [5, 20]` shows recall@5, never an empty recall@10."""
    from harness.defaults import metric_settings

    s = metric_settings(settings)
    k = min(s["cutoffs"], key=lambda c: (abs(c - 10), c))
    return [f"recall@{k}", f"ndcg@{s['ndcg_at']}", f"mrr@{s['mrr_at']}"]


def judged() -> list[str]:
    """The metrics computed from the judge's verdicts (the `judged` family's)."""
    return [t.pattern for f in families() if f.name == "judged" for t in f.templates]


def direction_of(name: str) -> Direction:
    m = lookup(name)
    return m.direction if m else "none"


def listing() -> list[dict]:
    """One row per registered metric form, for `harness list metrics`."""
    return [{"metric": t.pattern, "family": t.family, "kind": t.kind, "direction": t.direction, "unit": t.unit,
             "aggregation": t.aggregation, "applies to arms that": ", ".join(t.needs) or "any",
             "description": t.description} for f in families() for t in f.templates]
