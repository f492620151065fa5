"""Reliability (issue 9), property 6: determinism.

The same config, eval set and warm cache give runs that are equal under the run equality rule
(every arm, offline and LLM, each run on a fresh index as in a new process); a third run from the
cache alone (replay mode) is equal too and makes no HTTP call. `canonical_hash` of a config is
the same for YAML texts that differ only in key order and whitespace, and differs when a value
does."""
from __future__ import annotations

import random
from pathlib import Path

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.config import canonical_hash, load_config, parse_config
from harness.store.equality import runs_equal
from harness.store.manifest import read_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.testing import TestServer
from tests.reliability_helpers import LLM_ARMS, ROLES, ROOT, b2b_slice, endpoint, model_reply, prewarm, slice_index
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

ARMS = [{"name": "original"}, {"name": "concat"}, {"name": "oracle"}] + LLM_ARMS


def test_same_config_eval_set_and_warm_cache_give_equal_runs(tmp_path):
    root = b2b_slice(tmp_path / "b2b-slice", sessions=("b2b-t01", "b2b-t04", "b2b-t07"))
    es, index = slice_index(root)
    prewarm(index, es)
    with TestServer() as srv:
        srv.add_rule(model_reply)

        def run(name, mode="readwrite"):
            raw = {"name": "det", "eval_set": str(root), "splits": ["test"], "arms": ARMS, "runs_dir": str(tmp_path),
                   "concurrency": 8, "llm": {"cache": {"folder": str(tmp_path / "cache"), "mode": mode},
                                             "roles": {r: endpoint(srv) for r in ROLES}}}
            _, fresh = slice_index(root)  # a fresh index per run, as in a new process
            out = Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=fresh)
            write_metrics(out, compute_metrics(out))
            return out

        a = run("a")
        calls = srv.calls
        b = run("b")
        c = run("c", mode="replay")
        assert srv.calls == calls  # the warm runs asked nothing
    assert calls > 0 and read_manifest(b).counts["http_calls"] == 0 == read_manifest(c).counts["http_calls"]
    assert read_manifest(a).config_hash == read_manifest(b).config_hash
    assert runs_equal(a, b) == []
    assert runs_equal(a, c) == []


# ---- canonical_hash ----------------------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False), TEXT)
CONFIG = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(TEXT, inner, max_size=5)), max_leaves=25)


def shuffled(v, rng: random.Random):
    """The same value with every mapping's keys in another order."""
    if isinstance(v, dict):
        items = list(v.items())
        rng.shuffle(items)
        return {k: shuffled(x, rng) for k, x in items}
    if isinstance(v, list):
        return [shuffled(x, rng) for x in v]
    return v


STYLE = st.fixed_dictionaries({"default_flow_style": st.sampled_from([False, True, None]),
                               "indent": st.integers(2, 8), "width": st.sampled_from([20, 80, 4096]),
                               "explicit_start": st.booleans()})


@settings(max_examples=150, deadline=None)
@given(cfg=st.dictionaries(TEXT, CONFIG, min_size=1, max_size=6), rng=st.randoms(use_true_random=False),
       style_a=STYLE, style_b=STYLE)
def test_canonical_hash_ignores_key_order_and_whitespace(cfg, rng, style_a, style_b):
    text_a = "# a comment\n" + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True, **style_a) + "\n\n"
    text_b = yaml.safe_dump(shuffled(cfg, rng), sort_keys=False, allow_unicode=False, **style_b)
    a, b = yaml.safe_load(text_a), yaml.safe_load(text_b)
    # PyYAML does not always round-trip folded non-ASCII strings (e.g. '0¡ 0' at width 20):
    # the property is about texts that mean the same config
    assume(a == cfg and b == cfg)
    assert canonical_hash(a) == canonical_hash(b)
    changed = {**a, "__changed__": 1}
    assert canonical_hash(changed) != canonical_hash(a)


def test_canonical_hash_of_a_real_config_file_ignores_order_and_layout(tmp_path):
    cfg, raw = load_config(ROOT / "configs/b2b.yaml")
    flipped = dict(reversed(list(shuffled(raw, random.Random(1)).items())))
    (tmp_path / "configs").mkdir()
    (tmp_path / "eval_sets").symlink_to(ROOT / "eval_sets")  # its eval_set: resolves from its folder, as b2b's
    p = tmp_path / "configs/b2b-flipped.yaml"
    p.write_text("\n# same config, other order and layout\n" + yaml.safe_dump(flipped, sort_keys=False, default_flow_style=True,
                                                                           indent=6, width=30), encoding="utf-8")
    cfg2, raw2 = load_config(p)
    same_set = Path(cfg2.eval_set).resolve() == Path(cfg.eval_set).resolve()
    assert same_set and cfg2.model_dump(exclude={"eval_set"}) == cfg.model_dump(exclude={"eval_set"})
    assert canonical_hash(raw2) == canonical_hash(raw)
    raw2["arms"] = raw2["arms"][::-1]  # list order is meaning: another config
    assert canonical_hash(raw2) != canonical_hash(raw)


def test_canonical_hash_accepts_mixed_key_types():
    """YAML allows `1:` beside `a:` under a free-form mapping (e.g. an endpoint's extra_body)."""
    a = {"llm": {"roles": {"rewrite": {"extra_body": {1: "x", "b": "y"}}}}}
    b = {"llm": {"roles": {"rewrite": {"extra_body": {"b": "y", 1: "x"}}}}}
    assert canonical_hash(a) == canonical_hash(b)
