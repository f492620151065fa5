"""Test helpers: a scripted OpenAI-compatible HTTP server (see :mod:`harness.testing.server`)."""
from harness.testing.server import FAULTS, Recorded, Rule, Script, TestServer, prompt_hash

__all__ = ["FAULTS", "Recorded", "Rule", "Script", "TestServer", "prompt_hash"]
