"""The real-model smoke (make smoke-llm), collected only when HARNESS_LOCAL_LLM_URL is set."""
