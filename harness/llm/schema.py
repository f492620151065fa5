"""Strict JSON schemas from pydantic models for `response_format: json_schema, strict: true`:
every object closed (additionalProperties false) and every property required (optional
values are nullable). `max_string_length` adds maxLength to strings and `max_items` maxItems to
lists, for servers such as llama.cpp that enforce the schema with a grammar (a model that never
stops would otherwise run to max_tokens and cut the JSON)."""
from __future__ import annotations

import copy
import functools

from pydantic import BaseModel


def strict_schema(model: type[BaseModel], max_string_length: int | None = None, max_items: int | None = None) -> dict:
    return copy.deepcopy(_strict_schema(model, max_string_length, max_items))


@functools.lru_cache(maxsize=256)
def _strict_schema(model: type[BaseModel], max_string_length: int | None, max_items: int | None) -> dict:
    schema = copy.deepcopy(model.model_json_schema())

    def walk(node):
        if isinstance(node, dict):
            node.pop("title", None)
            node.pop("default", None)
            if node.get("type") == "object" or "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node.get("properties", {}))
            if node.get("type") == "string" and max_string_length and "enum" not in node:
                node.setdefault("maxLength", max_string_length)
            if node.get("type") == "array" and max_items:
                node.setdefault("maxItems", max_items)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return schema


@functools.lru_cache(maxsize=256)
def response_format(model: type[BaseModel], max_string_length: int | None = None, max_items: int | None = None) -> dict:
    """The request's `response_format` for `model` (json_schema, strict), built once per model
    and limits. Shared by every request: read it, never change it."""
    return {"type": "json_schema", "json_schema": {
        "name": model.__name__, "strict": True, "schema": _strict_schema(model, max_string_length, max_items)}}
