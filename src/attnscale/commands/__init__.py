"""CLI commands with options of their own; each module has ``register(app)``."""
