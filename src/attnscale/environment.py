"""The environment is input too: every variable attnscale reads is checked here, before any work, and a bad
value is one line naming the variable and what is accepted."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from .errors import UserError

MEMORY_LIMIT = "ATTNSCALE_MEMORY_LIMIT"      # a cap on the memory attnscale plans for (memory.available_bytes)
CJK_FONT = "ATTNSCALE_CJK_FONT"              # the font the report page's Chinese is cut from (report.fonts)
HISTORY_CACHE = "ATTNSCALE_HISTORY_CACHE"    # where the history lab keeps the released code it reads
DESIGN_TFLOP = "ATTNSCALE_DESIGN_TFLOP"      # what the audit spends on one model's designed passes (sizes)
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
FONT_MAGIC = (b"\x00\x01\x00\x00", b"OTTO", b"ttcf", b"true")  # TrueType, OpenType, a collection, old Mac TrueType


def value(name: str) -> str | None:
    """The variable's value, None when unset or empty (``VAR=`` in a shell means unset)."""
    text = os.environ.get(name)
    return text if text and text.strip() else None


def parse_bytes(text: str, name: str = MEMORY_LIMIT) -> int:
    """'2G' -> 2147483648, '512M', '1000' (bytes); UserError naming ``name`` for anything else, 0, or a size
    beyond any machine."""
    accepted = "accepted: bytes, or a number with K, M, G or T (e.g. 2G)"
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise UserError(f"{name}={text!r} is not a size; {accepted}")
    size = float(match.group(1)) * UNITS[match.group(2).upper()]
    if not math.isfinite(size) or size >= 2**63:
        raise UserError(f"{name}={text!r} is beyond any machine's memory; {accepted}")
    if int(size) < 1:
        raise UserError(f"{name}={text!r} leaves no memory at all; {accepted}, at least 1 byte")
    return int(size)


def check_font(text: str) -> Path:
    path = Path(text).expanduser()
    accepted = "accepted: the path of a .ttf, .otf or .ttc file, or unset it to use an installed CJK font"
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "missing" if not path.exists() else "not a regular file"
        raise UserError(f"{CJK_FONT}={text!r} is {kind}; {accepted}")
    try:
        with path.open("rb") as file:
            head = file.read(4)
    except OSError as error:
        raise UserError(f"{CJK_FONT}={text!r} cannot be read ({error.strerror}); {accepted}") from None
    if head not in FONT_MAGIC:
        raise UserError(f"{CJK_FONT}={text!r} is not a TrueType or OpenType font; {accepted}")
    return path


def check_history_cache(text: str) -> Path:
    path = Path(text.strip()).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"{HISTORY_CACHE}={text!r} is a file; accepted: a folder (made if missing), or unset it for "
                        "~/.cache/attnscale/history")
    return path


def parse_tflop(text: str) -> float:
    """'20' -> 2e13 floating-point operations; UserError naming the variable for anything but a positive number."""
    accepted = "accepted: a positive number of TFLOP (e.g. 20; about a minute a 5 on 2 CPU cores)"
    try:
        tflop = float(text)
    except ValueError:
        raise UserError(f"{DESIGN_TFLOP}={text!r} is not a number; {accepted}") from None
    if not (math.isfinite(tflop) and tflop > 0):
        raise UserError(f"{DESIGN_TFLOP}={text!r} is not a positive number; {accepted}")
    return tflop * 1e12


def check_environment() -> None:
    """Every variable attnscale reads, checked (each only when set)."""
    if (limit := value(MEMORY_LIMIT)) is not None:
        parse_bytes(limit)
    if (font := value(CJK_FONT)) is not None:
        check_font(font)
    if (cache := value(HISTORY_CACHE)) is not None:
        check_history_cache(cache)
    if (tflop := value(DESIGN_TFLOP)) is not None:
        parse_tflop(tflop)
