"""Tokenizer for the lexical lane: lower-cased words; identifiers such as `4711-32`,
`WX-4711-32` or `M8x40` are kept whole (a default tokenizer splits `4711-32` into `4711` and
`32`, which then match `4711-33`)."""
from __future__ import annotations

import re

_TOKEN = re.compile(r"[0-9A-Za-zÄÖÜäöüß]+(?:[-/.][0-9A-Za-zÄÖÜäöüß]+)*")
_STOP = frozenset(
    "a an and are as at be by for from how i in is it of on or that the this to was what when where which who "
    "will with do does can my me you your we our der die das und ist ein eine einen zu im in den dem des mit "
    "für auf von wie was wann wo ich mir mich wir es sie bei oder nicht auch".split())


def tokenize(text: str) -> list[str]:
    return [t for t in map(str.lower, _TOKEN.findall(text)) if t not in _STOP]  # whole matches: no capturing group
