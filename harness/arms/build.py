"""From a run config's `arms:` to the arms of the run. `configure_arms` reads the arm specs (the
one place they are read) into checked plans, one `ArmPlan` per arm and grid point; `build_arms`,
the one constructor of arms, makes each arm from its plan once and final (a frozen
harness.arms.base.BaseArm): its roles, id, settings, capabilities and label, each computed once, so
what the manifest, the trace rows and the LLM cache name an arm by never changes."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Sequence

from pydantic import ValidationError

from harness.arms.base import ArmSpecError, BaseArm, expand_grid, parse_spec
from harness.arms.spelling import derive_labels, spell
from harness.errors import BadInput
from harness.roles.base import OFFLINE, ROLES, RoleEndpoint
from harness.yamlpos import did_you_mean, validation_problems


@dataclass(frozen=True)
class ArmPlan:
    """One arm of a run as its config gives it, checked: a grid point's spec (name and
    parameters), the config's label for it, and its own endpoints per role (None: offline),
    merged over the run's `llm.roles`, their ${VARIABLES} expanded. Made by configure_arms, read
    by build_arms."""

    spec: dict
    label: str | None = None
    llm: dict = field(default_factory=dict)  # role -> RoleEndpoint | None
    at: int = 0  # its spec's place in `arms:` (where its problems are found)


def configure_arms(arms: list, run_roles: dict | None = None) -> tuple[list[ArmPlan], list[tuple[tuple, str]]]:
    """Every arm spec checked, each grid point: ([ArmPlan], problems at their key paths: unknown
    arm names, parameters or roles, invalid values). A `label:` given to a grid is suffixed with
    the point's values; an arm's `llm:` is merged over `run_roles` (llm.roles)."""
    out: list[tuple[tuple, str]] = []
    plans = []
    for i, spec in enumerate(arms):
        if not isinstance(spec, (str, dict)):
            out.append((("arms", i), f"an arm is a name or a mapping with `name:`, not {spec!r}"))
            continue
        given = spec.get("label") if isinstance(spec, dict) else None
        own, problems = _arm_llm(spec.get("llm") if isinstance(spec, dict) else None, run_roles or {})
        spec = {k: v for k, v in spec.items() if k not in ("label", "llm")} if isinstance(spec, dict) else spec
        grid = [k for k, v in spec.items() if isinstance(v, list) and k != "name"] if isinstance(spec, dict) else []
        try:
            points = expand_grid(spec)
        except ArmSpecError as e:
            points, problems = [], problems + e.problems
        for point in points:
            try:
                cls, params = parse_spec(point)
            except ArmSpecError as e:
                problems += [x for x in e.problems if x not in problems]
                continue
            problems += [x for x in _unused_roles(cls, cls.uses_for(params), own) if x not in problems]
            label = " ".join([str(given)] + [f"{k}={point[k]}" for k in grid]) if given else None
            plans.append(ArmPlan({"name": point} if isinstance(point, str) else point, label, own, i))
        out += [(("arms", i) + loc, m) for loc, m in problems]
    return plans, out


def _arm_llm(given, run_roles: dict) -> tuple[dict, list[tuple[tuple, str]]]:
    """An arm's `llm:` (role -> endpoint settings, or `offline`), each merged over the run's
    endpoint of that role: ({role: RoleEndpoint | None}, problems at llm.ROLE.FIELD)."""
    if given is None:
        return {}, []
    if not isinstance(given, dict):
        return {}, [(("llm",), "per role: llm: {ROLE: {kind: …, model: …, prompt: …}} or llm: {ROLE: offline}")]
    own, problems = {}, []
    fields = list(RoleEndpoint.model_fields)
    for role, ep in given.items():
        if role not in ROLES:
            hint = did_you_mean(str(role), ROLES) or (
                f"; settings go under a role: llm: {{rewrite: {{{role}: …}}}}" if role in fields else "")
            problems.append((("llm", str(role)), f"unknown role {role!r}{hint} (known: {', '.join(ROLES)})"))
        elif ep == OFFLINE or ep is None:
            own[role] = None
        elif not isinstance(ep, dict):
            problems.append((("llm", role), f"{ep!r}: the role's endpoint settings (a mapping) or `offline`"))
        else:
            base = run_roles[role].model_dump(exclude_unset=True) if role in run_roles else {}
            try:
                merged = RoleEndpoint.model_validate({**base, **ep})
            except ValidationError as e:
                problems += [(("llm", role) + loc, m) for loc, m in validation_problems(e, RoleEndpoint)]
                continue
            url = merged.base_url and os.path.expandvars(merged.base_url)
            own[role] = merged.model_copy(update={"base_url": url}) if url != merged.base_url else merged
    return own, problems


def _unused_roles(cls, uses: tuple[str, ...], own: dict) -> list[tuple[tuple, str]]:
    """A role an arm's `llm:` names that the arm never calls would change nothing, unseen."""
    return [(("llm", r), f"{cls.name} does not call the {r} role as configured (it calls: "
             f"{', '.join(uses) or 'none'})") for r in own if r not in uses]


def build_arms(plans: Sequence[ArmPlan], roles=None) -> tuple[BaseArm, ...]:
    """The arms of `plans` (configure_arms), each with the run's `roles` or its own endpoints over
    them (Roles.for_arm); `roles` None: every role offline. Labels need every arm's settings, so
    each arm's fields are computed first and the arm made last. An arm listed twice: BadInput."""
    fields = [_fields(plan, roles) for plan in plans]
    twice = [arm_id for arm_id, n in Counter(f["arm_id"] for _, f in fields).items() if n > 1]
    if twice:
        raise BadInput(f"arm {twice[0]} listed twice")
    labels = derive_labels((f["arm_id"], cls.name, f["given_label"], f["settings"]) for cls, f in fields)
    return tuple(cls(label=labels[f["arm_id"]], **f) for cls, f in fields)


def make_arm(spec: str | dict, roles=None, label: str | None = None) -> BaseArm:
    """One arm alone (a listing, a test): labelled `label`, else its name."""
    return build_arms([ArmPlan({"name": spec} if isinstance(spec, str) else dict(spec), label)], roles)[0]


def _fields(plan: ArmPlan, roles) -> tuple[type[BaseArm], dict]:
    """An arm's class and every field of it but its label: what its parameters and roles fix (the
    roles it calls, their models and prompts, its id and settings, capabilities, hits per round)."""
    cls, params = parse_spec(plan.spec)
    own = roles.for_arm(plan.llm) if roles is not None and plan.llm else roles
    uses = cls.uses_for(params)
    backends = {r: (own.backend(r) if own is not None else OFFLINE) for r in uses}
    prompts = own.prompts(uses) if hasattr(own, "prompts") else {}
    rewrite_fields = getattr(own, "fields", lambda role: None)("rewrite")
    declared = type(params).model_fields
    late = {k for k in params.LATE if getattr(params, k) == declared[k].default}
    spelled = spell(cls.name, params.model_dump(), backends, prompts,
                    cls.unused_for(params, backends, rewrite_fields) | late)
    return cls, {"params": params, "roles": own, "given_label": plan.label, "arm_id": spelled.arm_id,
                 "settings": spelled.settings, "uses": uses, "backends": MappingProxyType(backends),
                 "prompts": MappingProxyType(prompts), "capabilities": cls.capabilities_for(params),
                 "hits_per_round": cls.hits_per_round_for(params)}
