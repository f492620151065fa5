"""The arms of a run as its manifest records them: id, name, label, parameters, models,
capabilities. Light on purpose (no model, index or SDK import), so gate and compare stay fast.

An arm's **label** is what people read and what runs are paired by: the config's `label:`, else
its name when unique in the run, else the name plus only the parameters (and role models) that
differ among the arms of that name (`corrective top_k=1 max_rounds=3`). Labels and settings are
spelled as the arm spells them when it is made (harness/arms/spelling.py), the same way for run
folders whose manifests have none."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.arms import spelling
from harness.arms.capability import Capability

EXTERNAL = frozenset({Capability.RANKING})  # an imported run file: a ranking and nothing else
# the turn labels an arm may declare it reads (BaseArm.reads_labels); an arm reading any is a reference
LABEL_FIELDS = {"reference_rewrite": "the labels' reference rewrite", "expected_filters": "the labels' expected filters"}
# what an arm recorded before manifests carried `reads_labels` read, by the capability it declared
LEGACY_READS = {Capability.ORACLE: frozenset({"reference_rewrite", "expected_filters"})}


@dataclass
class ArmInfo:
    arm_id: str
    name: str
    params: dict = field(default_factory=dict)
    backends: dict = field(default_factory=dict)
    prompts: dict = field(default_factory=dict)  # role -> "name@hash" of the prompts of its LLM roles
    capabilities: frozenset = EXTERNAL
    hits_per_round: int | None = None
    label: str = ""
    given_label: str | None = None  # the label the manifest records (the config's, or derived at run time)
    reads_labels: frozenset = frozenset()  # turn labels the arm reads (LABEL_FIELDS): a reference, not a system

    @property
    def kind(self) -> str:
        """What the arm is, for pairing: its registered name, and `reading LABELS` when it reads labels."""
        return self.name + (f" (reads {', '.join(sorted(self.reads_labels))})" if self.reads_labels else "")

    def settings(self) -> dict[str, str]:
        """Parameters, role models and prompts as strings, in declaration order (models last)."""
        return dict(spelling.spell(self.name, self.params, self.backends, self.prompts).settings)


def _legacy_capabilities(entry: dict) -> tuple[frozenset, int | None]:
    """Capabilities of an arm whose manifest predates them: asked of the registered arm class
    (the only place that declares them), built with the recorded parameters."""
    if entry.get("arm") in (None, "external"):
        return EXTERNAL, None
    from harness.arms.catalog import REGISTRY  # heavy: only for old manifests

    cls = REGISTRY.get(entry["arm"])
    if cls is None:
        return EXTERNAL, None
    fields = cls.Params.model_fields
    params = cls.Params(**{k: v for k, v in (entry.get("params") or {}).items() if k in fields})
    return cls.capabilities_for(params), cls.hits_per_round_for(params)


def arm_info(entry: dict) -> ArmInfo:
    caps, k = (frozenset(entry["capabilities"]), entry.get("hits_per_round")) if "capabilities" in entry \
        else _legacy_capabilities(entry)
    reads = frozenset(entry["reads_labels"]) if "reads_labels" in entry else \
        frozenset().union(*[LEGACY_READS.get(c, frozenset()) for c in caps])
    return ArmInfo(arm_id=entry["arm_id"], name=entry.get("arm") or entry["arm_id"].split("(")[0],
                   params=dict(entry.get("params") or {}), backends=dict(entry.get("backends") or {}),
                   prompts=dict(entry.get("prompts") or {}),
                   capabilities=caps, hits_per_round=k, given_label=entry.get("label"), reads_labels=reads)


def derive_labels(arms: list[ArmInfo]) -> dict[str, str]:
    """arm_id -> label (see the module docstring). Raises BadInput when two arms would share a
    label (two configs' labels alike)."""
    return spelling.derive_labels((a.arm_id, a.name, a.given_label, a.settings()) for a in arms)


def run_arms(manifest: dict) -> list[ArmInfo]:
    """The arms of a run folder, labelled."""
    arms = [arm_info(e) for e in manifest.arms]
    labels = derive_labels(arms)
    for a in arms:
        a.label = labels[a.arm_id]
    return arms


def changes(a: ArmInfo, b: ArmInfo) -> list[str]:
    """What differs from arm `a` to arm `b`: `last_n 4 → 1`, `model offline → gpt-4o-mini`."""
    da, db = a.settings(), b.settings()
    out = []
    if a.kind != b.kind:
        out.append(f"arm {a.kind} → {b.kind}")
    for k in dict.fromkeys([*da, *db]):
        if da.get(k) != db.get(k):
            out.append(f"{k} {da.get(k, '(none)')} → {db.get(k, '(none)')}")
    lost, gained = sorted(set(a.capabilities) - set(b.capabilities)), sorted(set(b.capabilities) - set(a.capabilities))
    if lost or gained:
        out.append("capabilities " + "; ".join(x for x in (f"lost {', '.join(lost)}" if lost else "",
                                                             f"gained {', '.join(gained)}" if gained else "") if x))
    return out
