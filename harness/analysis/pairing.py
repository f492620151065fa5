"""Which arm of a candidate run is compared with which arm of a baseline run.

Arms pair by label (harness.store.armset): the same label in both runs is the same arm as people
read it, whatever its parameters or models now are; each pair shows what changed between them
(`last_n 4 → 1`). An arm whose label has no partner pairs with the arm of the same canonical id
in the other run, if there is one. Named pairs (`--pair`, a policy's `pairs:`) come first and
take labels or ids. Whatever stays unpaired is named: callers refuse (gate) or warn (compare).

What an arm is belongs to its identity: two arms of one label but of different kinds (registered
names, or the turn labels they read: `armset.ArmInfo.kind`) are refused, and an arm that reads
reference labels (the oracle) never pairs with one that does not, named or not."""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from harness.errors import BadInput
from harness.store.armset import ArmInfo, changes
from harness.store.integrity import a_kind
from harness.yamlpos import did_you_mean


class PairingError(BadInput, ValueError):
    """A named pair that names no arm (exit 2)."""


@dataclass
class Pair:
    baseline: ArmInfo
    candidate: ArmInfo
    how: str  # label | id | named | reference (arms of one run against one of them)
    changes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The label people read: the shared one, `baseline → candidate` when a named pair joins
        two labels, the candidate's when arms of one run are compared with a reference arm."""
        b, c = self.baseline.label, self.candidate.label
        if self.how == "reference":
            return c
        return b if b == c else f"{b} → {c}"


@dataclass
class Pairing:
    pairs: list[Pair]
    only_baseline: list[str]  # labels without a partner
    only_candidate: list[str]

    def unpaired(self, base_name: str, cand_name: str) -> str:
        """What was left out, in words."""
        parts = []
        if self.only_baseline:
            parts.append(f"{len(self.only_baseline)} baseline label(s) without a partner in {cand_name}: "
                         + ", ".join(self.only_baseline))
        if self.only_candidate:
            parts.append(f"{len(self.only_candidate)} candidate label(s) without a partner in {base_name}: "
                         + ", ".join(self.only_candidate))
        hints = [h for c in self.only_candidate if (h := partner_hint(c, self.only_baseline))]
        return "; ".join(parts + hints)


def _char(c: str) -> str:
    return f"{c!r} U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}"


def partner_hint(cand: str, base_labels: list[str]) -> str | None:
    """For a candidate label without a partner: the baseline label it looks the same as but is not
    (characters that differ by code point, e.g. a Cyrillic е for a Latin e, named), else the
    nearest baseline label; None when none is near."""
    for b in base_labels:
        diff = [(i, x, y) for i, (x, y) in enumerate(zip(cand, b)) if x != y]
        if len(b) == len(cand) and diff and all(not (x.isascii() and y.isascii()) for _, x, y in diff):
            said = "; ".join(f"character {i + 1} is {_char(x)} here, {_char(y)} in the baseline" for i, x, y in diff)
            return f"hint: {cand!r} looks like the baseline's {b!r} but is another label ({said})"
    near = did_you_mean(cand, base_labels)
    return f"hint: for {cand!r}{near.removeprefix(';')}" if near else None


def same_kind(b: ArmInfo, c: ArmInfo, how: str, base_name: str, cand_name: str) -> None:
    """Refuse a pair whose arms are not of one kind: under one label always, and an arm reading
    reference labels against one that does not even when named."""
    if b.reads_labels != c.reads_labels:
        ref = c if c.reads_labels else b
        reads = ", ".join(sorted(ref.reads_labels))
        raise PairingError(f"{b.label!r} of {base_name} is {a_kind(b.kind)} arm and {c.label!r} of {cand_name} "
                           f"{a_kind(c.kind)} arm: {ref.name} reads the turns' reference labels ({reads}), an upper "
                           "bound, never gated as a system arm. Compare it with an arm of its kind")
    if how != "named" and b.kind != c.kind:
        raise PairingError(f"label {b.label!r} names {a_kind(b.kind)} arm in {base_name} and {a_kind(c.kind)} arm in "
                           f"{cand_name}: a change of kind under one label is another arm, not a change of it. "
                           "Give the new arm its own label, or pair them on purpose with --pair BASELINE=CANDIDATE")


def find_arm(arms: list[ArmInfo], name: str, run: str) -> ArmInfo:
    """The arm a user named by label or id."""
    for a in arms:
        if name in (a.label, a.arm_id):
            return a
    hint = did_you_mean(name, [a.label for a in arms], cutoff=0.5)
    raise PairingError(f"{name!r} is not an arm of {run}{hint} (its labels: {', '.join(a.label for a in arms)})")


def split_pair(spec: str, base: list[ArmInfo], cand: list[ArmInfo]) -> tuple[str, str]:
    """`BASELINE=CANDIDATE`, where either side may be a label or an arm id (ids hold '=' inside
    their parentheses): the split whose left side names a baseline arm."""
    if "=" not in spec:
        raise PairingError(f"--pair {spec!r}: expected BASELINE=CANDIDATE (labels or arm ids)")
    names = {a.label for a in base} | {a.arm_id for a in base}
    cuts = [i for i, ch in enumerate(spec) if ch == "="]
    for i in cuts:
        left, right = spec[:i].strip(), spec[i + 1:].strip()
        if left in names:
            return left, right
    i = cuts[0] if ")=" not in spec else spec.index(")=") + 1
    return spec[:i].strip(), spec[i + 1:].strip()


def pair_arms(base: list[ArmInfo], cand: list[ArmInfo], named: dict[str, str] | None = None,
              base_name: str = "baseline", cand_name: str = "candidate") -> Pairing:
    pairs: list[Pair] = []
    used_b, used_c = set(), set()
    for b_name, c_name in (named or {}).items():
        b, c = find_arm(base, b_name, base_name), find_arm(cand, c_name, cand_name)
        if b.arm_id in used_b or c.arm_id in used_c:
            raise PairingError(f"named pair {b_name}={c_name}: {b.label if b.arm_id in used_b else c.label} "
                               "is already in another named pair")
        same_kind(b, c, "named", base_name, cand_name)
        pairs.append(Pair(b, c, "named", changes(b, c)))
        used_b.add(b.arm_id)
        used_c.add(c.arm_id)
    by_label = {a.label: a for a in cand if a.arm_id not in used_c}
    by_id = {a.arm_id: a for a in cand if a.arm_id not in used_c}
    for b in base:
        if b.arm_id in used_b:
            continue
        c = by_label.get(b.label)
        how = "label"
        if c is None or c.arm_id in used_c:
            c, how = by_id.get(b.arm_id), "id"
        if c is None or c.arm_id in used_c:
            continue
        same_kind(b, c, how, base_name, cand_name)
        pairs.append(Pair(b, c, how, changes(b, c)))
        used_b.add(b.arm_id)
        used_c.add(c.arm_id)
    order = {a.arm_id: i for i, a in enumerate(base)}
    pairs.sort(key=lambda p: order[p.baseline.arm_id])
    return Pairing(pairs, [a.label for a in base if a.arm_id not in used_b],
                   [a.label for a in cand if a.arm_id not in used_c])


# settings of a whole run that change what every arm of it retrieves: (name, read from a manifest); the
# dense engine is not one (every engine the harness runs searches exactly: docs/scaling.md)
RUN_SETTINGS = (("embedder", lambda m: m.embedder), ("index max_chars", lambda m: m.index.max_chars),
                ("seed", lambda m: m.seed))


def run_changes(base, cand) -> str | None:
    """`run settings: embedder A → B; index max_chars 2000 → 500` for two run manifests, or None
    when they agree: a change every pair shares, which the arms' own parameters do not show."""
    said = [f"{name} {get(base)} → {get(cand)}" for name, get in RUN_SETTINGS if get(base) != get(cand)]
    return "run settings: " + "; ".join(said) if said else None


def pair_runs(base, cand, specs: list[str] | None = None, named: dict[str, str] | None = None) -> Pairing:
    """Pair two loaded runs (anything with `.arms` and `.name`): named pairs from a policy
    (`named`) and from the command line (`specs`, BASELINE=CANDIDATE), then by label and id. Run
    settings that differ (harness.store.record.Manifest, when the runs have one) lead every pair's
    changes."""
    pairs = {**(named or {}), **dict(split_pair(p, base.arms, cand.arms) for p in specs or [])}
    pairing = pair_arms(base.arms, cand.arms, pairs, base.name, cand.name)
    manifests = getattr(base, "manifest", None), getattr(cand, "manifest", None)
    shared = run_changes(*manifests) if None not in manifests else None
    for p in pairing.pairs if shared else []:
        p.changes.insert(0, shared)
    return pairing
