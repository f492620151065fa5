"""Filter validation: the eval set's filter schema is the allowlist. Unknown fields are
rejected, types checked, ranges bounded, values normalised (units); an entitlement field
proposed by a model, or a field whose name is near one (`price_list_id` for `price_list`), is
rejected and counted as a violation while the rest of the proposal is kept. Nothing is dropped
silently: every removal comes back with its reason."""
from __future__ import annotations

import re
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


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


GENERIC = {"id", "ids", "code", "codes", "key", "keys", "no", "nr", "number", "ref"}


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


def _tokens(name: str) -> list[str]:
    """Words of a field name (snake, kebab or camel case), singular, without generic suffixes:
    `ShipCountries_ID` -> [ship, country]."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    words = [_singular(w) for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]
    return [w for w in words if w not in GENERIC] or words


def _alike(a: str, b: str) -> bool:
    """Two words alike: equal, one a prefix of the other (4 letters at least: ship/shipping), or
    one edit apart (5 letters at least)."""
    short, long_ = sorted((a, b), key=len)
    return a == b or (len(short) >= 4 and long_.startswith(short)) or (len(short) >= 5 and _edit_distance(a, b) <= 1)


def _near(name: str, field: str) -> bool:
    """`name` stands for `field`: the same words (all of one name's words found in the other's), or
    within edit distance 2 once written without case, separators and generic suffixes."""
    plain = [re.sub(r"[^a-z0-9]", "", n.lower()) for n in (name, field)]
    a, b = _tokens(name), _tokens(field)
    if min(_edit_distance(*plain), _edit_distance("".join(a), "".join(b))) <= 2:
        return True
    return all(any(_alike(x, y) for y in b) for x in a) or all(any(_alike(y, x) for x in a) for y in b)


def entitlement_like(name: str, info: EvalSetInfo) -> str | None:
    """The entitlement field an unknown proposed field stands for (`price_list_id`, `ShipCountry`,
    `shipping_country`, `country` for `ship_countries`), or None: a model must not set
    entitlements under a near name."""
    for f in info.filters:
        if f.kind == "entitlement" and _near(name, f.field):
            return f.field
    return None


def validate_filters(proposed: list[dict], info: EvalSetInfo) -> Validated:
    out = Validated()
    for f in proposed:
        name, op, value = f.get("field"), f.get("op", "eq"), f.get("value")
        spec = info.filter_field(name) if isinstance(name, str) else None
        near = entitlement_like(name, info) if spec is None and isinstance(name, str) else None
        if near is not None:  # rejected and counted like the entitlement itself; the rest is kept
            out.removed.append(f"{name}: near the entitlement field {near}, set only from the account")
            out.violations.append(name)
            continue
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
