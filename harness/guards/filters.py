"""Filter validation: the eval set's filter schema is the allowlist. Unknown fields are
rejected, types checked, ranges bounded, values normalised (units); an entitlement field
proposed by a model is rejected and counted as a violation. Nothing is dropped silently:
every removal comes back with its reason."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.evalset.model import EvalSetInfo
from harness.guards.units import normalise_value

OPS = ("eq", "gte", "lte", "in")


@dataclass
class Validated:
    applied: list[dict] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # "field: reason"
    violations: list[str] = field(default_factory=list)  # entitlement fields a model tried to set
    malformed: list[str] = field(default_factory=list)  # the removals that break the schema (not entitlements)

    def reject(self, reason: str) -> None:
        self.removed.append(reason)
        self.malformed.append(reason)


def _typed(ftype: str, v):
    if ftype in ("number", "integer"):
        if isinstance(v, bool):
            raise ValueError("expected a number")
        if isinstance(v, str):
            v = float(v.replace(",", "."))
        if not isinstance(v, (int, float)):
            raise ValueError("expected a number")
        if ftype == "integer" and float(v).is_integer():
            v = int(v)
        return v
    if ftype == "boolean":
        if not isinstance(v, bool):
            raise ValueError("expected true or false")
        return v
    if not isinstance(v, str):
        raise ValueError("expected a string")
    return v


def validate_filters(proposed: list[dict], info: EvalSetInfo) -> Validated:
    out = Validated()
    for f in proposed:
        name, op, value = f.get("field"), f.get("op", "eq"), f.get("value")
        spec = info.filter_field(name) if isinstance(name, str) else None
        if spec is None:
            out.reject(f"{name}: unknown field")
            continue
        if spec.kind == "entitlement":
            out.removed.append(f"{name}: entitlement field, set only from the account")
            out.violations.append(name)
            continue
        if op not in OPS:
            out.reject(f"{name}: unknown op {op!r}")
            continue
        if op in ("gte", "lte") and spec.type not in ("number", "integer"):
            out.reject(f"{name}: {op} needs a number field")
            continue
        try:
            vals = value if op == "in" else [value]
            if op == "in" and not isinstance(value, list):
                raise ValueError("'in' needs a list")
            base_type = "string" if spec.type == "string_list" else spec.type
            vals = [_typed(base_type, normalise_value(spec.unit, v)) for v in vals]
            for v in vals:
                if spec.values is not None and base_type == "string" and v not in spec.values:
                    raise ValueError(f"{v!r} is not an allowed value")
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    if spec.min is not None and v < spec.min:
                        raise ValueError(f"{v} below the minimum {spec.min:g}")
                    if spec.max is not None and v > spec.max:
                        raise ValueError(f"{v} above the maximum {spec.max:g}")
        except (ValueError, TypeError) as e:
            out.reject(f"{name}: {e}")
            continue
        out.applied.append({"field": name, "op": op, "value": vals if op == "in" else vals[0]})
    return out
