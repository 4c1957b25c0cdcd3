"""Integrations with the tools LLM teams already run (each needs its own extra)."""
