"""Where a key path sits in YAML text, for error messages that name file and line. Light to
import: the gate and the config loader both use it."""
from __future__ import annotations

import yaml


def line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of a config key path in YAML text."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
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


def read_yaml(path, error: type[Exception]) -> tuple[object, str]:
    """A YAML file's parsed content and its text. Unreadable, not UTF-8 or not YAML: `error`
    naming the file (and the line of a YAML error)."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read: {e}") from None
    try:
        return yaml.safe_load(text), text
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise error(f"{path}:{mark.line + 1 if mark else '?'}: invalid YAML: {getattr(e, 'problem', e)}") from None


def located(path, text: str | None, problems) -> str:
    """One `file:line: field.path: message` line per (key path, message); `?` where the line
    is not known (no text, or a key the text does not hold)."""
    return "\n".join(f"{path}:{(line_of(text, loc) if text else None) or '?'}: {'.'.join(map(str, loc))}: {msg}"
                     for loc, msg in problems)


def validation_problems(e) -> list[tuple[tuple, str]]:
    """A pydantic ValidationError as (key path, message) pairs, for `located`."""
    return [(tuple(err["loc"]), err["msg"]) for err in e.errors()]
