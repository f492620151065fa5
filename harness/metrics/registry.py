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

from harness.arms.capability import Capability
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
    requested: bool = False  # computes only the metrics a scoring names (ranking measures)


FAMILIES: dict[str, Family] = {}
TEMPLATES: list[Template] = []


def family(name: str, templates: list[Template], order: int, requested: bool = False) -> Callable:
    """Decorator of a family kernel: registers the kernel and its metrics. `order` fixes where
    the family's rows come in the per-turn table. `requested`: the kernel computes only the
    metrics a scoring names (`Scoring.requested`: the run's settings, `harness metrics -m`,
    `harness trec-eval -m`), not every one it could."""

    def deco(fn):
        if name in FAMILIES:
            raise ValueError(f"metric family {name!r} registered twice")
        ts = [Template(**{**t.__dict__, "family": name}) for t in templates]
        for t in ts:
            if any(t.pattern == o.pattern for o in TEMPLATES):
                raise ValueError(f"metric {t.pattern!r} registered twice")
            unknown = set(t.needs) - set(Capability)
            if unknown:
                raise ValueError(f"metric {t.pattern!r} needs unknown capabilities {sorted(unknown)}")
        FAMILIES[name] = Family(name, ts, fn, order, requested)
        TEMPLATES.extend(ts)
        return fn

    return deco


def families() -> list[Family]:
    return sorted(FAMILIES.values(), key=lambda f: f.order)


class UnknownMetric(BadInput, ValueError):
    """A metric name the registry does not know (exit 2)."""


# Other tools' spellings of the ranking measures, in this one place: trec_eval's (P_10,
# map_cut_10, ndcg_cut_10, recall_10, success_10, unj_10, recip_rank, Rprec), ir_measures' (P@10,
# AP, AP@10, Rprec, Bpref, nDCG@10, RR, R@10, Success@10, Judged@10) and ranx's (r-precision,
# hit_rate@10). Matched ignoring case; `_k` and `@k` carry the cutoff. trec_eval's unj_k is the
# share of the top k without a judgment over k, so it is `unjudged@k`, never judged@k.
ALIASES = {
    "p_k": "precision@k", "p@k": "precision@k", "map_cut_k": "map@k", "ap@k": "map@k", "ap": "map",
    "ndcg_cut_k": "ndcg@k", "recall_k": "recall@k", "r@k": "recall@k", "success_k": "success@k",
    "hit_rate@k": "success@k", "unj_k": "unjudged@k", "recip_rank": "mrr", "rr": "mrr", "rr@k": "mrr@k",
    "rprec": "rprec", "r-prec": "rprec", "r-precision": "rprec",
}


def canonical(name: str) -> str:
    """The registered spelling of a name another tool spells its own way (ALIASES), else the
    name as written (stripped)."""
    name = name.strip()
    low = name.lower()
    if any(t.match(low) for t in TEMPLATES):
        return low
    for alias, target in ALIASES.items():
        if alias.endswith(("_k", "@k")):
            m = re.fullmatch(re.escape(alias[:-1]) + r"([1-9]\d*)", low)
            if m:
                return target[:-1] + m.group(1)
        elif low == alias:
            return target
    return name


def lookup(name: str) -> Metric | None:
    """The metric of a name: its canonical spelling, or another tool's (ALIASES)."""
    for candidate in dict.fromkeys([name.strip(), canonical(name)]):
        for t in TEMPLATES:
            m = t.match(candidate)
            if m is not None:
                return m
    return None


def on_request(m: Metric) -> bool:
    """Whether a metric is computed only when named (a ranking measure; Family.requested)."""
    return FAMILIES[m.family].requested


def examples(extra: list[str] = ()) -> list[str]:
    """Concrete names to suggest from: every fixed name, common cutoffs, and `extra` (e.g. the
    names a run computed)."""
    out = list(extra)
    for t in TEMPLATES:
        out += [t.pattern.replace("@k", f"@{k}") for k in (5, 10, 20)] if t.pattern.endswith("@k") else [t.pattern]
    return list(dict.fromkeys(out))


def suggestion(name: str, extra: list[str] = ()) -> str:
    """The closest known name, among the registry's and then (ignoring case) other tools' spellings."""
    spelled = [a[:-1] + str(k) if a.endswith(("_k", "@k")) else a for a in ALIASES for k in (5, 10, 20)]
    return did_you_mean(name, examples(extra)) or did_you_mean(name.strip().lower(), list(dict.fromkeys(spelled)))


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


def ranking_names(settings: dict | None) -> list[str]:
    """The ranking measures a scoring computes: recall at each of the run's cutoffs, nDCG and MRR
    at theirs, judged@, holes@ and holes_relevant_elsewhere@ judged_at (harness.defaults.MetricsConfig), then the settings' `measures`
    (the run config's, and `harness metrics -m`), canonical, each once. Names of other families
    there are left out (they are computed anyway); an unknown name is UnknownMetric."""
    from harness.defaults import metric_settings

    s = metric_settings(settings)
    names = [f"recall@{k}" for k in s["cutoffs"]] + [f"ndcg@{s['ndcg_at']}", f"mrr@{s['mrr_at']}"] + coverage(settings)
    names += [m.name for m in (resolve(n) for n in s["measures"]) if on_request(m)]
    return list(dict.fromkeys(names))


COVERAGE = ("judged", "holes", "holes_relevant_elsewhere")  # what the judgment pool sees: figures, not quality


def coverage(settings: dict | None = None) -> list[str]:
    """The pool coverage figures every scoring computes, at the run's judged_at: judged@k beside
    the ranking metrics, and the hole counts (holes@k, holes_relevant_elsewhere@k)."""
    from harness.defaults import metric_settings

    j = metric_settings(settings)["judged_at"]
    return [f"{c}@{j}" for c in COVERAGE]


def is_coverage(name: str) -> bool:
    """Whether a metric is a coverage figure (compare and the verdict block Holm-adjust them apart)."""
    return name.partition("@")[0] in COVERAGE


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
