"""Sentence-aware chunking: split a document into chunks of at most `max_chars` characters,
breaking between sentences; a single sentence longer than the limit is split at word borders."""
from __future__ import annotations

import re
from dataclasses import dataclass

_SENT = re.compile(r"(?<=[.!?:;])\s+(?=[\"'(\[A-ZÄÖÜ0-9])|\n\s*\n")
# no sentence ends at an abbreviation a number follows ("Tel. 040 555", "Nr. 5", "ca. 30") nor
# at a German ordinal or date after an article or preposition ("die 2. Klasse", "zum 31. März";
# "a pack of 50." and "in 2024." still end one)
_NUMBERED = re.compile(r"(?:^|[\s(])(?:Tel|Nr|No|ca|Abs|Art|Kap|Fig|Vol|pp?|S)\.$", re.I)
_ORDINAL = re.compile(r"\b(?:der|die|das|den|dem|des|am|im|zum|vom|ab|bis)\s+\d{1,2}\.$", re.I)


@dataclass(frozen=True)
class Chunk:
    chunk_id: str  # doc_id#n
    doc_id: str
    text: str


def split_sentences(text: str) -> list[str]:
    out: list[str] = []
    for piece in (s.strip() for s in _SENT.split(text) if s and s.strip()):
        if out and _joins(out[-1], piece):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _joins(before: str, piece: str) -> bool:
    """Whether `piece` continues the sentence `before` (stripped: both patterns end in a period
    at its very end, so a sentence that does not end in one is not searched from its start)."""
    if not before.endswith("."):
        return False
    return bool((piece[0].isdigit() and _NUMBERED.search(before))
                or (before[-2:-1].isdigit() and _ORDINAL.search(before)))


def _pack(pieces: list[str], max_chars: int) -> list[str]:
    """Join pieces with spaces greedily into strings of at most max_chars (each piece fits)."""
    out, cur = [], ""
    for p in pieces:
        if cur and len(cur) + 1 + len(p) > max_chars:
            out.append(cur)
            cur = p
        else:
            cur = f"{cur} {p}" if cur else p
    if cur:
        out.append(cur)
    return out


def _split_long(sentence: str, max_chars: int) -> list[str]:
    """A sentence longer than the limit, split at word borders (a longer word is cut)."""
    words = []
    for w in sentence.split():
        words.extend(w[i:i + max_chars] for i in range(0, len(w), max_chars))
    return _pack(words, max_chars)


def chunk_text(text: str, max_chars: int) -> list[str]:
    if max_chars < 20:
        raise ValueError("max_chars must be at least 20")
    pieces: list[str] = []
    for s in split_sentences(text):
        pieces.extend([s] if len(s) <= max_chars else _split_long(s, max_chars))
    return _pack(pieces, max_chars)


def chunk_document(doc_id: str, title: str, text: str, max_chars: int) -> list[Chunk]:
    """Chunks of one document; the title prefixes every chunk so that each stands alone."""
    body = chunk_text(text, max_chars) or [title]
    prefix = f"{title}\n" if title else ""
    return [Chunk(f"{doc_id}#{i}", doc_id, prefix + c) for i, c in enumerate(body)]
