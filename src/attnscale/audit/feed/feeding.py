"""The :class:`Feeding` record: what feeding one model found, each field unknown until the first pass looks for it."""

from __future__ import annotations

from dataclasses import dataclass, field


UNKNOWN = "unknown"  # a field no pass has found yet


@dataclass
class Feeding:
    """What feeding one model found: each field stays :data:`UNKNOWN` until the first pass looks for it."""

    image_axis: object = UNKNOWN  # images per sample it ran on (None: one a sample; FOLD_FRAMES: along the batch)
    # what a promptable image model's image runs with: "boxes" (a box prompt, wherever it runs with one: SAM's mask
    # decoder reads it as two more tokens) and "text" (token ids, only where the image alone is refused: SAM 3)
    image_beside: object = UNKNOWN
    box_refusal: str | None = None  # why its last box prompt was refused, where it runs without one (SAM 3)
    beside: object = UNKNOWN  # True where its token ids alone did not run and they run with what it takes beside
    beside_frames: int | None = None  # the frames of the clip it takes beside its ids (X-CLIP)
    signal_shape: object = UNKNOWN  # the audio shape it ran on
    id_layout: object = UNKNOWN  # how its token ids are laid out, where not (batch, tokens): id_layouts
    # [(placeholder token id, placeholders a sequence, the media inputs of one sequence)]: the media a composite built
    # whole merges into its ids at placeholder tokens (Aria's image, Fun-ASR-Nano's audio; composite.audit_whole)
    media: list = field(default_factory=list)
    unpinned: set = field(default_factory=set)  # ids of the configs whose RoPE numbered its own positions in a pass
    too_large: str = ""  # why the designed passes were not run: the memory or the cost they would need
    designs_per_pass: int | None = None  # the designs one pass runs (fewer than all where all at once do not fit)

    def known(self, name: str):
        """The field's value, None where it is still :data:`UNKNOWN`."""
        value = getattr(self, name)
        return None if value is UNKNOWN else value
