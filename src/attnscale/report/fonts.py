"""A subset of a CJK font, embedded in the page, so that its Chinese renders without CJK fonts.

The report quotes the interview answer in Chinese and gives the answer in Chinese too.  On a
machine without CJK fonts (Debian's headless Chromium, many servers) those characters show as
empty boxes.  :func:`font_face` returns a CSS ``@font-face`` rule whose font holds only the CJK
characters the page uses, cut from a freely licensed font installed on this machine
(WenQuanYi Micro Hei, Debian's ``fonts-wqy-microhei``: Apache 2.0, or GPL 3 with the font
exception; Noto Sans CJK, SIL OFL, where that is installed instead), so the page stays one
offline file.  With no such font installed the rule is empty and the page uses the reader's
own fonts.
"""

from __future__ import annotations

import base64
import io
import logging
import re
from pathlib import Path

from .. import environment

FAMILY = "attnscale CJK"
# Debian's packages, most compact first; ATTNSCALE_CJK_FONT names any other font file.
CANDIDATES = ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
              "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
              "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
# CJK symbols and punctuation, CJK ideographs (with extension A), full-width forms
CJK_RANGES = ((0x3000, 0x303F), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xFF00, 0xFFEF))


CJK_PATTERN = re.compile("[" + "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in CJK_RANGES) + "]")


def cjk_characters(text: str) -> str:
    """The distinct CJK characters of ``text``, in code point order (a regular expression: the page
    is megabytes of base64 figures; a Python loop over a 2.4 MB page took 1.5 s)."""
    return "".join(sorted(set(CJK_PATTERN.findall(text))))


def font_path() -> Path | None:
    """The CJK font to cut the subset from: ATTNSCALE_CJK_FONT if set (it must name a file), else
    the first installed candidate, else None."""
    chosen = environment.value(environment.CJK_FONT)
    if chosen:
        return environment.check_font(chosen)
    return next((Path(candidate) for candidate in CANDIDATES if Path(candidate).is_file()), None)


def face_number(path: Path) -> int:
    """The face of a collection to use: the Simplified Chinese one where the collection names one
    (Noto Sans CJK's first face is the Japanese one), else the first."""
    from fontTools.ttLib import TTCollection

    if path.suffix.lower() not in (".ttc", ".otc"):
        return 0
    collection = TTCollection(str(path), lazy=True)
    for number, font in enumerate(collection.fonts):
        name = font["name"].getDebugName(1) or ""
        if name.endswith(" SC") or " SC " in name:
            return number
    return 0


def subset_font(path: Path, characters: str) -> bytes:
    """A TrueType/OpenType font holding only ``characters`` (the first font of a collection)."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    logging.getLogger("fontTools").setLevel(logging.ERROR)  # "FFTM NOT subset": a timestamp table, dropped
    font = TTFont(str(path), fontNumber=face_number(path), lazy=True)  # only the glyphs kept are read: 0.8 s, not 2-10
    options = subset.Options()
    options.hinting = False
    options.layout_features = []
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # keep the copyright and licence entries
    cutter = subset.Subsetter(options)
    cutter.populate(text=characters)
    cutter.subset(font)
    buffer = io.BytesIO()
    font.save(buffer)
    return buffer.getvalue()


def font_face(text: str) -> str:
    """The @font-face rule of a subset holding the CJK characters of ``text`` ('' if it has none,
    or if no CJK font is installed)."""
    characters = cjk_characters(text)
    path = font_path()
    if not characters or path is None:
        return ""
    font = subset_font(path, characters)
    data = base64.b64encode(font).decode("ascii")
    mime, kind = ("font/otf", "opentype") if font[:4] == b"OTTO" else ("font/ttf", "truetype")  # CFF or TrueType outlines
    return (f'@font-face {{ font-family: "{FAMILY}"; src: url(data:{mime};base64,{data}) format("{kind}"); '
            f"unicode-range: {', '.join(f'U+{low:X}-{high:X}' for low, high in CJK_RANGES)}; }}\n")
