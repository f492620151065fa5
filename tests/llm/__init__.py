"""Tests of harness/llm and harness/testing: the LLM client, its cache, and the scripted endpoint."""
