"""The interview answer itself, whole: the original (Chinese, as received) and an English rendering,
each with the IDs of the claims it makes where it makes them.

The English rendering carries its IDs as written ("[C06]"); in the original they are placed from the
registry: each claim's own sentence (:attr:`attnscale.claims.Claim.source`, abridged with "……" or
"；" where it joins pieces) is looked up by the opening of each piece, and its ID goes after the
sentence that holds it.
"""

from __future__ import annotations

import re
from pathlib import Path

from .claims import CLAIMS

DATA = Path(__file__).parent / "data"
LANGS = ("zh", "en")
PROBE = 12  # characters of a piece's opening looked up in the original
SENTENCE_END = re.compile(r"[。\n]")


def original() -> str:
    return (DATA / "source-zh.txt").read_text(encoding="utf-8")


def english() -> str:
    return (DATA / "source-en.md").read_text(encoding="utf-8")


def pieces(sentence: str) -> list[str]:
    """A claim's source sentence in the pieces it joins."""
    return [p.strip() for p in re.split(r"……|；", sentence) if p.strip()]


def find_piece(text: str, piece: str) -> tuple[int, int]:
    """Where the longest opening of ``piece`` (at least PROBE characters) starts in ``text``, and where
    it ends; (-1, -1) if none."""
    for length in range(len(piece), PROBE - 1, -1):
        start = text.find(piece[:length])
        if start >= 0:
            return start, start + length
    return -1, -1


def claim_positions(text: str) -> dict[int, list[str]]:
    """Where each claim's ID goes in the original: the end of each sentence holding one of its pieces,
    once per line (the last such sentence of the line)."""
    at: dict[int, list[str]] = {}
    for claim in CLAIMS:
        by_line: dict[int, int] = {}
        for piece in pieces(claim.source):
            start, stop = find_piece(text, piece)
            if start < 0:
                continue
            end = SENTENCE_END.search(text, stop - 1)
            position = end.end() - (end.group() == "\n") if end else len(text)
            line = text.count("\n", 0, start)
            by_line[line] = max(by_line.get(line, 0), position)
        for position in by_line.values():
            at.setdefault(position, []).append(claim.id)
    return at


def marked_original() -> str:
    text = original()
    at = claim_positions(text)
    out, last = [], 0
    for position in sorted(at):
        out += [text[last:position], "".join(f"[{cid}]" for cid in at[position])]
        last = position
    return "".join(out) + text[last:]


def source_text(lang: str) -> str:
    """The whole interview answer in ``lang`` (zh: the original; en: the English rendering), claim IDs marked."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
    return marked_original() if lang == "zh" else english()
