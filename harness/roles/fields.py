"""A role asked for fewer fields (`fields: [standalone, must_keep]` on its endpoint): a small
model writes those, the role's offline implementation the rest. The schema sent is the role's
output model cut to those fields (same name, same bounds); the prompt says which fields to
write, so its hash, and every arm id that uses it, names the choice."""
from __future__ import annotations

import functools

from pydantic import BaseModel, create_model

from harness.yamlpos import did_you_mean

ROLE_OUTPUTS = {"rewrite": ("harness.roles.rewrite", "RewriteOutput"), "decide": ("harness.roles.decide", "Decision"),
                "hyde": ("harness.roles.hyde", "HydeOutput"), "grade": ("harness.roles.grade", "GradeOutput"),
                "rerank": ("harness.roles.rerank", "RerankOutput"), "answer": ("harness.roles.answer", "AnswerOutput")}


def output_model(role: str) -> type[BaseModel] | None:
    """The output model of a role that can be asked for fewer fields (None: the judge, relevance)."""
    import importlib

    if role not in ROLE_OUTPUTS:
        return None
    module, name = ROLE_OUTPUTS[role]
    return getattr(importlib.import_module(module), name)


def field_problems(role: str, fields: list[str] | None) -> list[tuple[tuple, str]]:
    """(key path under the role's endpoint, message) per field name the role's output lacks."""
    if fields is None:
        return []
    model = output_model(role)
    if model is None:
        return [(("fields",), f"the {role} role's reply cannot be cut to fields (it takes no `fields:`)")]
    known = list(model.model_fields)
    out = [(("fields", i), f"unknown field {f!r} of the {role} role{did_you_mean(f, known)} (known: {', '.join(known)})")
           for i, f in enumerate(fields) if f not in known]
    if not fields:
        out.append((("fields",), "no field named: leave `fields:` out to ask for all of them"))
    return out


@functools.lru_cache(maxsize=64)
def subset(model: type[BaseModel], fields: tuple[str, ...]) -> type[BaseModel]:
    """`model` cut to `fields`, in its own order, each with its type, bounds and default."""
    kept = {n: (f.annotation, f) for n, f in model.model_fields.items() if n in fields}
    return create_model(model.__name__, __base__=None, **kept)


def instruction(fields: tuple[str, ...]) -> str:
    """The line the prompt of a role asked for fewer fields ends with."""
    return f"\n\nWrite only these fields: {', '.join(fields)}."


def merged(asked: BaseModel, offline: BaseModel, fields: tuple[str, ...]) -> BaseModel:
    """The offline value with the asked fields the model wrote (an instance of the offline's model)."""
    return offline.model_copy(update={f: getattr(asked, f) for f in fields})
