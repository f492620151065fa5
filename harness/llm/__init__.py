"""The LLM layer: one async client over the openai SDK, its cache, transport, ledger and schemas."""
