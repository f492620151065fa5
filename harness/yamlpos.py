"""Where a key path sits in YAML text, for error messages that name file and line, the
suggestion for a name a user mistyped, and the one reader of every YAML file of ours (configs,
policies, scripts, eval-set info, prices): a key written twice in one mapping is an error naming
file and line, never the later value silently kept. Light to import: the gate and the config
loader both use it."""
from __future__ import annotations

import difflib
import types
import typing

import yaml


def line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of a config key path in YAML text; for a key the text lacks (a
    required one left out), the line of the deepest mapping or item on its path that it has."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if node is None:
            break
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    line, nxt = k.start_mark.line + 1, v
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


class WrittenTwice(yaml.YAMLError):
    """A key written twice in one mapping (YAML itself would keep the later value)."""

    def __init__(self, key, line: int, first: int):
        super().__init__(key, line, first)
        self.key, self.line, self.first = key, line, first

    def __str__(self) -> str:
        return f"{self.key}: written twice (first on line {self.first}); write each key once"


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping key written twice (merge keys `<<` aside)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise WrittenTwice(key, key_node.start_mark.line + 1, seen[key])
                seen[key] = key_node.start_mark.line + 1
            except TypeError:  # an unhashable key: the constructor below names it
                continue
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """YAML text parsed safely, a key written twice refused (WrittenTwice, a yaml.YAMLError)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)


def yaml_problem(e: yaml.YAMLError) -> tuple[int | None, str]:
    """(line, message) of a YAML error: `key: written twice …` or `invalid YAML: …`."""
    if isinstance(e, WrittenTwice):
        return e.line, str(e)
    mark = getattr(e, "problem_mark", None)
    return (mark.line + 1 if mark else None), f"invalid YAML: {getattr(e, 'problem', None) or e}"


def read_yaml(path, error: type[Exception]) -> tuple[object, str]:
    """A YAML file's parsed content and its text. Unreadable, not UTF-8, not YAML or a key written
    twice: `error` naming the file and the line (`file:line: key: written twice …`)."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read: {e}") from None
    try:
        return load_yaml(text), text
    except yaml.YAMLError as e:
        line, msg = yaml_problem(e)
        raise error(f"{where(path, line)}: {msg}") from None


def where(path, line: int | None) -> str:
    """`file:line`, or `file` alone where the line is not known: an error never says `file:?:`."""
    return f"{path}:{line}" if line else str(path)


def located(path, text: str | None, problems) -> str:
    """One `file:line: field.path: message` line per (key path, message); `file: field.path:
    message` where the line is not known (no text, or text that is not YAML)."""
    return "\n".join(f"{where(path, line_of(text, loc) if text else None)}: {'.'.join(map(str, loc))}: {msg}"
                     for loc, msg in problems)


def did_you_mean(name: str, choices, cutoff: float = 0.6) -> str:
    """`; did you mean 'x'?` for the choice closest to a name a user wrote, or nothing."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def validation_problems(e, model=None) -> list[tuple[tuple, str]]:
    """A pydantic ValidationError as (key path, message) pairs, for `located`. With the `model`
    validated, a key it does not know comes with the closest key it knows at that place."""
    out = []
    for err in e.errors():
        loc, msg = tuple(err["loc"]), err["msg"]
        if err["type"] == "extra_forbidden" and model is not None and loc and isinstance(loc[-1], str):
            msg += did_you_mean(loc[-1], fields_at(model, loc[:-1]))
        out.append((loc, msg))
    return out


def fields_at(model, path: tuple) -> list[str]:
    """The field names of the pydantic model found at key `path` under `model` (through nested
    models, lists and dicts); none where the path leads elsewhere."""
    from pydantic import BaseModel

    tp = model
    for part in path:
        tp = _step(tp, part)
        if tp is None:
            return []
    models = [t for t in _flat(tp) if isinstance(t, type) and issubclass(t, BaseModel)]
    return [n for m in models for n in m.model_fields]


def _step(tp, part):
    """The type one key (or list index) below type `tp`."""
    from pydantic import BaseModel

    for t in _flat(tp):
        if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str) and part in t.model_fields:
            return t.model_fields[part].annotation
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin in (list, tuple, set) and isinstance(part, int) and args:
            return args[0]
        if origin is dict and isinstance(part, str) and len(args) == 2:
            return args[1]
    return None


def _flat(tp) -> list:
    """The members of a union (Optional included), or the type itself."""
    return list(typing.get_args(tp)) if typing.get_origin(tp) in (typing.Union, types.UnionType) else [tp]
