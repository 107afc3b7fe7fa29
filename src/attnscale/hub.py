"""No Hugging Face hub at run time: every model comes from a local folder or a config."""

from __future__ import annotations

import logging
import os


def offline() -> None:
    """Turn hub access off before transformers is imported (unless the user set HF_HUB_OFFLINE).

    Importing some modeling files (GPT-Neo's, from transformers 5.25 on) asks the hub for a
    flash-attention kernel; offline, the kernels package logs a warning per kernel it skips
    and the import goes on without one, so those lines are silenced."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("kernels").setLevel(logging.ERROR)
