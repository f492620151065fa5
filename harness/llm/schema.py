"""Strict JSON schemas from pydantic models for `response_format: json_schema, strict: true`:
every object closed (additionalProperties false) and every property required (optional
values are nullable). A role's output model bounds what a model is asked to write, field by
field (`bound`: maxLength, maxItems, the items' maxLength), tighter than what the field
accepts, so a server that enforces the schema with a grammar (llama.cpp's json-schema-to-grammar
turns maxLength into `char{0,N}` and maxItems into a bounded repetition) stops a small model
before it runs to max_tokens. An endpoint's `max_string_length` / `max_items` bound what no
field bounds (an override for an unbounded model of one's own)."""
from __future__ import annotations

import copy
import functools

from pydantic import BaseModel


def bound(max_length: int | None = None, max_items: int | None = None, item_max_length: int | None = None):
    """A field's `json_schema_extra`: what a model is asked for (maxLength of a string; maxItems
    of a list and maxLength of its string items), declared beside the field it bounds."""

    def extra(schema: dict) -> None:
        if max_length is not None:
            schema["maxLength"] = max_length
        if max_items is not None:
            schema["maxItems"] = max_items
        if item_max_length is not None and isinstance(schema.get("items"), dict):
            schema["items"]["maxLength"] = item_max_length

    return extra


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
