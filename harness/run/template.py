"""The run config `harness init` writes: the keys a new user sets, each with a comment saying what
it means; the arms, roles and embedders as their registries hold them (never a hand-written list)
and the defaults as RunConfig holds them; offline unless an endpoint is given. It validates and
runs as written (tests/cli/test_cli_init_sweep.py)."""
from __future__ import annotations

import json
import re
import sys
import textwrap

import yaml

DEMO_EVAL_SET = "eval_sets/b2b-shop"  # harness init without --eval-set: the bundled demo set, from the working folder
ARMS = ("original", "concat", "rewrite")  # the reference, the history baseline, one offline rewrite
LLM_ROLE = "rewrite"  # the role `harness init --llm URL` gives the endpoint (the only one ARMS call)
WIDTH = 100


def scalar(v) -> str:
    """A value as YAML writes it in a flow: plain when it reads back as itself, else quoted (JSON)."""
    if isinstance(v, str):
        try:
            plain = yaml.safe_load(f"k: {v}") == {"k": v} and "#" not in v and not re.search(r"[,\[\]{}]", v)
        except yaml.YAMLError:
            plain = False
        return v if plain else json.dumps(v)
    return json.dumps(v)


def comment(text: str, indent: str = "# ", rest: str | None = None) -> list[str]:
    """`text` as comment lines within WIDTH columns."""
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=rest or indent,
                         break_on_hyphens=False, break_long_words=False)


def arm_summary(cls) -> str:
    """An arm's first sentence: its class's docstring, else its module's (without the `name(…)`: that
    module docstrings open with)."""
    doc = " ".join((cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").split())
    doc = re.sub(r"^`[^`]*`:\s*", "", doc)
    first = re.split(r"(?<=\.)\s", doc, maxsplit=1)[0]
    return first[:1].upper() + first[1:]


def arm_lines() -> list[str]:
    """Every registered arm: its name, the LLM roles it calls, its first sentence, its parameters' defaults."""
    from harness.arms.catalog import REGISTRY, make_arm

    out = []
    for name, cls in sorted(REGISTRY.items()):
        arm = make_arm(name)
        roles = f" (LLM roles: {', '.join(arm.uses)})" if arm.uses else " (no LLM role)"
        out += comment(f"{name}{roles}: {arm_summary(cls)}", "#   ", "#       ")
        out += comment(" ".join(f"{k}={scalar(v)}" for k, v in arm.params.model_dump().items()), "#       ")
    return out


def head(name: str, eval_set: str, es) -> list[str]:
    """The opening comment, the name, the eval set and its splits."""
    from harness.evalset.load import iter_labelled

    splits = sorted(set(es.split_of.values()))
    turns = sum(1 for _ in iter_labelled(es))
    return [
        *comment("A run config (YAML), written by `harness init`. `harness run THIS_FILE` replays every arm below "
                 "over every labelled turn of the eval set and writes a run folder (manifest, traces, metrics); "
                 "`--set KEY=VALUE` changes one key for one run (arms.rewrite.last_n=2), `harness sweep THIS_FILE "
                 "--grid arms.ARM.PARAMETER=V1,V2` replays one arm per value into one run folder. Every key is "
                 "checked before anything runs. Paths are read from this file's folder."), "",
        "# name: the run's name, the start of its run folders' names (runs/NAME-TIME-RANDOM)",
        f"name: {scalar(name)}",
        *comment(f"eval_set: the eval-set folder, read from this file's folder; this one: {es.name} "
                 f"{es.info.version}, {len(es.docs)} documents, {len(es.sessions)} sessions, {turns} labelled turns, "
                 f"splits {', '.join(splits)}"),
        f"eval_set: {scalar(eval_set)}",
        "# splits: the splits to replay (default: every split)",
        f"# splits: [{splits[0]}]", ""]


def index_lines() -> list[str]:
    """`index:` with the defaults and the embedder kinds the harness has."""
    from harness.config import IndexConfig
    from harness.corpus.embed import EMBEDDERS

    d = IndexConfig()
    return [*comment("index: the corpus cut into passages of at most max_chars characters, searched by a dense "
                     f"lane (embedder.kind: one of {', '.join(EMBEDDERS)}; {d.embedder['kind']} is the bundled "
                     "offline model) and BM25; qdrant_url: a Qdrant server instead of the embedded engine "
                     "(docs/scaling.md)"),
            "index:", f"  embedder: {{kind: {d.embedder['kind']}}}", f"  max_chars: {d.max_chars}", ""]


def arms_part() -> list[str]:
    """`arms:` with every registered arm in its comment."""
    return [*comment("arms: what turns each user turn into retrieval, replayed side by side and compared by label "
                     "(harness compare). Each is a name, or a mapping {name: NAME, PARAMETER: VALUE, label: LABEL}; "
                     "a list of values is a grid, one arm per value ({name: corrective, top_k: [1, 3, 5]}). An arm "
                     "that calls LLM roles runs them offline unless llm.roles gives the role an endpoint. The arms "
                     "the harness has (harness list arms), with their parameters' defaults:"),
            *arm_lines(), "arms:", *[f"  - {a}" for a in ARMS], ""]


def rest_lines(llm_url: str | None, model: str | None) -> list[str]:
    """metrics:, the run's settings and llm:."""
    from harness.config import RunConfig
    from harness.defaults import MetricsConfig
    from harness.roles.base import ROLES

    m, f = MetricsConfig(), RunConfig.model_fields
    out = [*comment("metrics: recall at each cutoff, nDCG and MRR at their k, judged@k (how much of the top k "
                    "people labelled); measures: further ranking measures by name (harness list metrics)"),
           "metrics:", f"  cutoffs: {json.dumps(m.cutoffs)}", f"  ndcg_at: {m.ndcg_at}", f"  mrr_at: {m.mrr_at}", "",
           "# repeats: replay every arm N times with seeds seed..seed+N-1 (for models at a temperature above 0)",
           f"repeats: {f['repeats'].default}", f"seed: {f['seed'].default}",
           "# concurrency: turns in flight at once in each process; workers: processes (default: the machine's cores)",
           f"concurrency: {f['concurrency'].default}",
           "# max_error_rate: harness run exits 1 when an arm's share of failed turns is above it",
           f"max_error_rate: {f['max_error_rate'].default}",
           f"# runs_dir: where run folders go, from the working folder (default: {f['runs_dir'].default})", ""]
    out += comment(f"llm: an endpoint per LLM role ({', '.join(ROLES)}); a role without one runs offline, and "
                   "every trace and report says which. Keys come from the environment only (api_key_env), never "
                   "from this file; replies are cached (llm.cache); docs/llm.md.")
    ep = f"{{kind: openai-compatible, base_url: {scalar(llm_url or 'http://127.0.0.1:8088/v1')}, " \
         f"model: {scalar(model or 'NAME')}}}"
    if llm_url is None:
        return out + ["# None here: nothing is sent anywhere. For a model to write the rewrites:",
                      "# llm:", "#   roles:", f"#     {LLM_ROLE}: {ep}"]
    return out + ["llm:", "  roles:", f"    {LLM_ROLE}: {ep}"]


def config_text(name: str, eval_set: str, es, llm_url: str | None = None, model: str | None = None) -> str:
    """The commented config: `eval_set` as written (a path from the config's folder), `es` the set it names."""
    return "\n".join(head(name, eval_set, es) + index_lines() + arms_part() + rest_lines(llm_url, model)) + "\n"
