"""No Hugging Face hub at run time: every model comes from a local folder, a config, or a repo the hub cache already
holds (read offline)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path


def offline() -> None:
    """Turn hub access off before transformers is imported (unless the user set HF_HUB_OFFLINE).

    Importing some modeling files (GPT-Neo's, from transformers 5.25 on) asks the hub for a
    flash-attention kernel; offline, the kernels package logs a warning per kernel it skips
    and the import goes on without one, so those lines are silenced."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("kernels").setLevel(logging.ERROR)


REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def hub_cache() -> Path:
    """Where the Hugging Face hub keeps its downloads, as huggingface_hub works it out: HF_HUB_CACHE, else
    HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def is_repo_id(text: str) -> bool:
    return bool(REPO_ID.fullmatch(text)) and ".." not in text and not text.endswith(".")


def cached_snapshot(repo_id: str) -> Path | None:
    """The local snapshot of a model repo downloaded before (``org/name``: the revision its refs/main names, or its
    only snapshot), read from the hub cache offline; None where the cache holds none."""
    if not is_repo_id(repo_id):
        return None
    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        revision = ""
    if revision and (snapshots / revision).is_dir():
        return snapshots / revision
    try:
        found = [entry for entry in snapshots.iterdir() if entry.is_dir()]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None
