"""The attention implementations the audit compares by default (a module of its own so that the command line's
help reads it without importing torch)."""

DEFAULT_BACKENDS = ("eager", "sdpa", "flex_attention")
