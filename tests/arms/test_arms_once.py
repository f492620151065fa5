"""Arms are built once and never change: one constructor (harness.arms.build.build_arms) makes
the final arm, with its roles, label, id and settings; the id and settings are spelled by one
function (harness.arms.spelling.spell) for the arm and for the run folder's armset; and the ids
are those the committed baseline was recorded under."""
from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import ValidationError

from harness.arms.catalog import REGISTRY, build_arms, make_arm
from harness.config import load_config, parse_config
from harness.roles.base import Roles
from harness.store.armset import arm_info
from tests.conftest import ROOT

BASELINE = ROOT / "runs/baselines/b2b"


def test_nothing_is_set_on_an_arm_once_it_is_made():
    arm = make_arm({"name": "corrective", "top_k": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        arm.label = "corrective top_k=5"
    with pytest.raises(dataclasses.FrozenInstanceError):
        arm.notes = []  # no attribute of its own either: turns share the arm
    with pytest.raises(ValidationError):
        arm.params.top_k = 5
    with pytest.raises(TypeError):
        arm.backends["grade"] = "gpt-4o-mini"
    with pytest.raises(TypeError):
        arm.settings["top_k"] = "5"
    assert arm.label == "corrective" and arm.hits_per_round == 1 and "top_k=1" in arm.arm_id


def test_a_config_check_makes_no_arm_and_a_run_makes_each_once(monkeypatch):
    made = []
    for cls in set(REGISTRY.values()):
        real = cls.__init__
        monkeypatch.setattr(cls, "__init__", lambda self, *a, _real=real, **k: made.append(k["label"]) or
                            _real(self, *a, **k))
    cfg = parse_config({"name": "x", "eval_set": "e", "arms": ["original", {"name": "corrective", "top_k": [1, 3]},
                                                                {"name": "rewrite", "label": "short", "last_n": 1}]})
    assert made == []  # checking a config reads the specs; it builds no arm
    arms = build_arms(cfg.configured_arms())
    assert made == ["original", "corrective top_k=1", "corrective top_k=3", "short"]  # final labels, at birth
    assert [a.label for a in arms] == made
    again = cfg.model_copy(update={"arms": ["original"]})  # a copy with other arms plans its own
    assert [a.label for a in build_arms(again.configured_arms())] == ["original"]


def test_the_arm_and_the_armset_spell_an_arm_alike():
    class R:  # the rewrite on a model: the offline `method` changes nothing, so the id leaves it out
        def backend(self, role):
            return {"rewrite": "gpt-4o-mini"}.get(role, "offline")

    for arm in [make_arm("rewrite_hyde", R()), make_arm({"name": "corrective", "start": "rewrite"}),
                make_arm({"name": "corrective", "retry_query": "rewriter"})]:
        entry = json.loads(json.dumps(arm.describe()))  # as the manifest keeps it
        assert arm_info(entry).settings() == dict(arm.settings)
        in_id = dict(p.split("=", 1) for p in arm.arm_id[len(arm.name) + 1:-1].split(","))
        assert in_id == {k: v for k, v in arm.settings.items() if k in in_id}
    assert "method" in arm.settings and "method=" not in make_arm("rewrite", R()).arm_id


@pytest.mark.parametrize("source", ["manifest", "configs/b2b.yaml"])
def test_the_baselines_arms_are_what_its_config_builds_now(source):
    """The committed baseline's arms, as its manifest recorded them when it ran, equal what the
    config that ran, and configs/b2b.yaml, build today: ids (the keys of its traces and of LLM
    caches), labels, parameters, models, prompts, capabilities, the labels each arm reads."""
    manifest = json.loads((BASELINE / "manifest.json").read_text())
    if source == "manifest":
        cfg = parse_config(manifest["config"])
    else:
        cfg, _ = load_config(ROOT / source)
    roles = Roles(cfg.llm, cfg.concurrency, base_dir=cfg.source_dir)
    built = [a.describe() for a in build_arms(cfg.configured_arms(), roles)]
    assert [a["arm_id"] for a in built] == [a["arm_id"] for a in manifest["arms"]]
    # read as the run folder's readers read them (the baseline predates `reads_labels`)
    assert [arm_info(a) for a in built] == [arm_info(a) for a in manifest["arms"]]
