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
