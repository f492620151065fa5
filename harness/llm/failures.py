"""Why an LLM call failed, in a few named kinds, so a run counts its failures per role and per
kind (the manifest's counts, `harness run`'s last lines). A reply cut at max_tokens is its own
kind: never parsed as valid, even when the cut text happens to parse."""
from __future__ import annotations

CUT = "cut at max_tokens"
KINDS = ("cut at max_tokens", "invalid JSON", "schema violation", "empty choices", "timeout", "HTTP error", "other")
COUNT_PREFIX = "llm_failed."  # a manifest count per role and kind: llm_failed.ROLE.KIND


def cut_error(completion_tokens: int | None, max_tokens: int) -> str:
    """The error of a reply the endpoint stopped at max_tokens (finish_reason `length`); fewer
    tokens than max_tokens mean the server's context window (per slot) ended first."""
    if completion_tokens and completion_tokens < max_tokens:
        return f"{CUT} ({completion_tokens} of {max_tokens} tokens: the server's context window ended first)"
    return f"{CUT} ({completion_tokens or max_tokens} tokens)"


def kind_of(error: str | None) -> str:
    """The kind of a call's recorded error (harness.llm.client writes them)."""
    e = error or ""
    for k in ("cut at max_tokens", "invalid JSON", "schema violation", "empty choices"):
        if e.startswith(k):
            return k
    if "Timeout" in e or "timeout" in e:
        return "timeout"
    if e.startswith(("API", "RateLimit", "InternalServer", "BadRequest", "Authentication", "PermissionDenied",
                     "NotFound", "Conflict", "UnprocessableEntity")):
        return "HTTP error"
    return "other"


def count_key(role: str, kind: str) -> str:
    return f"{COUNT_PREFIX}{role}.{kind.replace(' ', '_')}"


def per_role(counts: dict) -> dict[str, dict[str, int]]:
    """{role: {kind: calls}} from a manifest's counts (llm_failed.ROLE.KIND)."""
    out: dict[str, dict[str, int]] = {}
    for k, n in counts.items():
        if k.startswith(COUNT_PREFIX) and n:
            role, _, kind = k[len(COUNT_PREFIX):].partition(".")
            named = {k.replace(" ", "_"): k for k in KINDS}.get(kind, kind)
            out.setdefault(role, {})[named] = int(n)
    return out


def llm_failures_line(counts: dict) -> str:
    """`rewrite 3 (cut at max_tokens 2, invalid JSON 1); grade 1 (timeout 1)`, or '' without any."""
    return "; ".join(f"{role} {sum(kinds.values())} (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")"
                     for role, kinds in sorted(per_role(counts).items()))
