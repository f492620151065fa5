"""How an arm is spelled: its settings and canonical id, and the label people read. The arm
(harness.arms.build) and the run folder's armset both spell with `spell`, so the id in a manifest,
a trace row and an LLM cache key and the settings a label or a change names are one spelling.

Settings: every parameter in declaration order, then the model behind the arm's LLM roles
(`model=NAME` when all use one, else `model.ROLE=NAME` per role), then `prompt.ROLE=name@hash`.
The id: the name and the settings sorted by key as `key=value`, less those the arm leaves out
(parameters that change nothing as configured, parameters added later still at their default).
A label: the config's `label:`, else the name when unique in the run, else the name plus only the
settings that differ among the arms of that name (`corrective top_k=1 max_rounds=3`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from harness.errors import BadInput


def value(v) -> str:
    """One setting as text: lists and mappings as sorted JSON, booleans and None in lower case."""
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, bool):
        return str(v).lower()
    return "none" if v is None else str(v)


@dataclass(frozen=True)
class Spelling:
    arm_id: str
    settings: Mapping[str, str]  # read-only, in the order of the module docstring


def spell(name: str, params: Mapping, backends: Mapping[str, str], prompts: Mapping[str, str],
          unused: Iterable[str] = ()) -> Spelling:
    """An arm's id and settings (module docstring); `unused`: parameters its id leaves out."""
    settings = {k: value(v) for k, v in params.items()}
    models = set(backends.values())
    if len(models) == 1:
        settings["model"] = str(next(iter(models)))
    else:
        settings.update({f"model.{r}": str(m) for r, m in backends.items()})
    settings.update({f"prompt.{r}": str(ref) for r, ref in prompts.items()})
    left_out = set(unused)
    parts = sorted((k, v) for k, v in settings.items() if k not in left_out)
    arm_id = f"{name}(" + ",".join(f"{k}={v}" for k, v in parts) + ")" if parts else name
    return Spelling(arm_id, MappingProxyType(settings))


def derive_labels(arms: Iterable[tuple[str, str, str | None, Mapping[str, str]]]) -> dict[str, str]:
    """arm_id -> label, from (arm_id, name, the config's label or None, settings) of every arm of a
    run (module docstring). Two arms that would share a label: BadInput."""
    arms = list(arms)
    out: dict[str, str] = {}
    groups: dict[str, list[tuple[str, Mapping[str, str]]]] = {}
    for arm_id, name, given, settings in arms:
        if given:
            out[arm_id] = given
        else:
            groups.setdefault(name, []).append((arm_id, settings))
    for name, members in groups.items():
        if len(members) == 1:
            out[members[0][0]] = name
            continue
        flat = [s for _, s in members]
        keys = list(dict.fromkeys(k for d in flat for k in d if len({x.get(k) for x in flat}) > 1))
        for arm_id, d in members:
            out[arm_id] = " ".join([name] + [f"{k}={d.get(k, 'none')}" for k in keys])
    seen: dict[str, str] = {}
    for arm_id, *_ in arms:
        if out[arm_id] in seen:
            raise BadInput(f"label {out[arm_id]!r} names two arms: {seen[out[arm_id]]} and {arm_id}")
        seen[out[arm_id]] = arm_id
    return out
