"""The system prompt of an LLM role: a prompt packaged in harness/prompts (`grade.v1`,
`rewrite.v1`) or a team's own file (`prompts/grade.md`: anything containing `/` or ending in
`.md`, relative to the run config's folder). A prompt is known by its name and the hash of its
content; both are part of the id of every arm whose role calls an LLM with it, so a prompt change
is an arm change people see when runs are paired."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harness.errors import BadInput
from harness.llm.cache import prompt_hash


class PromptError(BadInput, ValueError):
    """A prompt that cannot be found (exit 2)."""


@dataclass(frozen=True)
class Prompt:
    name: str  # the packaged name, or the file's name without .md
    text: str
    path: str | None = None  # the file, for a prompt outside the package

    @property
    def hash(self) -> str:
        return prompt_hash(self.text)

    @property
    def ref(self) -> str:
        """`name@hash`: how arm ids and manifests name it."""
        return f"{self.name}@{self.hash}"


def is_path(spec: str) -> bool:
    return "/" in spec or spec.endswith(".md")


def packaged() -> list[str]:
    return sorted(p.name[:-3] for p in resources.files("harness.prompts").iterdir() if p.name.endswith(".md"))


def load_prompt(spec: str, base_dir: str | None = None) -> Prompt:
    """A prompt by packaged name or by path (relative to `base_dir`); a file is read again when it
    changed (its modification time or size), so an edited prompt is never served from memory."""
    if is_path(spec):
        p = Path(spec)
        if not p.is_absolute() and base_dir:
            p = Path(base_dir) / p
        try:
            st = p.stat()
            return _read_file(str(p), st.st_mtime_ns, st.st_size)
        except (OSError, UnicodeDecodeError) as e:
            raise PromptError(f"prompt file {spec!r} ({p}): cannot read: {e}") from None
    return _packaged(spec)


@functools.lru_cache(maxsize=256)
def _read_file(path: str, mtime_ns: int, size: int) -> Prompt:
    p = Path(path)
    return Prompt(p.stem, p.read_text(encoding="utf-8"), path)


@functools.lru_cache(maxsize=None)
def _packaged(spec: str) -> Prompt:
    f = resources.files("harness.prompts").joinpath(f"{spec}.md")
    if not f.is_file():
        raise PromptError(f"no packaged prompt {spec!r}; packaged: {', '.join(packaged())} "
                          "(or give a path: anything with a / or ending in .md, relative to the config)")
    return Prompt(spec, f.read_text(encoding="utf-8"))


def prompt_text(name: str) -> str:
    """The text of a packaged prompt (e.g. `rewrite.v1`)."""
    return load_prompt(name).text
