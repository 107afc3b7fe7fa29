"""Images, video clips and image patches: one fixed image in the form the forward asks for (pixels, tiles, a
pre-cut or flattened grid of patches, a clip of frames, Qwen2-VL-style patches with their grid)."""

from __future__ import annotations

import torch

from ..sizes import TINY
from .companions import COMPANION_TOKENS, PROMPT_BOX, PROMPT_PREFIX, beside_image
from .kinds import FLATTENED, GRID_NAMES, IMAGE_NAMES, VIDEO_INPUT, accepts, required_inputs


FRAME_FIELDS = ("num_frames", "frames_per_clip")  # a video model's clip length (its position table's)


def image_name(model) -> str:
    """The keyword an image (or clip) is passed under."""
    if getattr(model, "main_input_name", None) == VIDEO_INPUT:
        return VIDEO_INPUT
    required = required_inputs(model)
    return next((name for name in IMAGE_NAMES if name in required), "pixel_values")


# a detector's image: its backbone downsamples by 32, leaving 4 x 4 feature vectors for the encoder
BACKBONE_IMAGE = 128


def tower_image_size(config):
    """The image size of a composite whose own config states none: its vision tower's, or that tower's
    backbone's (SAM 2's Hiera)."""
    vision = getattr(config, "vision_config", None)
    for part in (vision, getattr(vision, "backbone_config", None)):
        size = getattr(part, "image_size", None)
        if size:
            return size
    return None


def clip_length(config) -> int | None:
    """A video model's frames a clip, as its config states them (FRAME_FIELDS); None for an image model."""
    return next((value for name in FRAME_FIELDS if isinstance(value := getattr(config, name, None), int)), None)


def pixel_values(config, batch: int) -> torch.Tensor:
    """A fixed image batch at the config's size, or a clip of the config's frame count for a video
    model, (batch, frames, channels, height, width) (the path probe overwrites q, k and v, so only
    its shape matters; the kernel probe reads the real call's shapes)."""
    size = (getattr(config, "image_size", None) or getattr(config, "crop_size", None) or tower_image_size(config)
            or (BACKBONE_IMAGE if getattr(config, "backbone_config", None) is not None else 32))
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = getattr(config, "num_channels", 3) or 3
    frames = clip_length(config)
    shape = (channels, height, width) if frames is None else (frames, channels, height, width)
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, *shape, generator=generator).repeat(batch, *([1] * len(shape)))


def patch_side(config, default: int = 14) -> int:
    """The config's patch size, one side (the first of a per-axis pair)."""
    size = getattr(config, "patch_size", None) or default
    return size if isinstance(size, int) else tuple(size)[0]


PATCH_GRID = 4  # a pre-cut image's patches a side (NaFlex: SigLIP 2's vision tower)


def image_inputs(model, batch: int, feeding) -> dict:
    """The image inputs of ``batch`` copies of one fixed image, in the form the model's forward asks
    for: the pixels (with each image's patch grid where it takes ``target_sizes``, as MiniCPM-V's
    tower does); the image already cut into patches with their grid and a patch mask (NaFlex); or
    the image as its tiles with an aspect-ratio id and a tile mask (Mllama)."""
    required = required_inputs(model)
    if accepts(model, FLATTENED) and not accepts(model, "pixel_values"):
        return flattened_image(model.config, batch)
    if "aspect_ratio_ids" in required:
        return tiled_image(model.config, batch)
    if "spatial_shapes" in required:
        return cut_image(model.config, batch, next((name for name in required if name.endswith("_mask")), None))
    positions = next((name for name in required if name.endswith(PATCH_POSITIONS)), None)
    if positions:  # Gemma 4: the patches with each one's (x, y), no grid
        inputs = cut_image(model.config, batch, None)
        del inputs["spatial_shapes"]
        return {**inputs, positions: patch_positions(batch)}
    images = pixel_values(model.config, batch)
    if any(name.startswith(PROMPT_PREFIX) for name in required):  # SegGPT: image and prompt, stacked
        images = images[..., : images.shape[-2] // 2, :].contiguous()
    count = feeding.known("image_axis")
    if count == FOLD_FRAMES and images.dim() == 5:  # X-CLIP's vision tower: the clip's frames along the batch axis
        images = images.flatten(0, 1)
    if count:  # images given per sample (LightGlue's pair): (batch, count, channels, height, width)
        images = torch.stack([images.flip(-1) if i % 2 else images for i in range(count)], dim=1)
    inputs = {image_name(model): images, **beside_image(model, batch, COMPANION_TOKENS, required, images)}
    beside = feeding.known("image_beside") or ()
    if "boxes" in beside:
        inputs["input_boxes"] = torch.tensor([[PROMPT_BOX]] * batch)
    if "text" in beside and "input_ids" not in inputs:
        inputs.update(beside_image(model, batch, COMPANION_TOKENS, ["input_ids"], images))
    if accepts(model, "target_sizes") and images.dim() == 4:
        size = patch_side(model.config)
        inputs["target_sizes"] = torch.tensor([[images.shape[-2] // size, images.shape[-1] // size]] * batch)
    return inputs


IMAGE_COUNTS = (1, 2)  # images per sample to try where one image a sample is refused (a pair: LightGlue)
FOLD_FRAMES = 0  # the image axis of a video model that takes its clip's frames along the batch axis (X-CLIP's tower)

PATCH_POSITIONS = "_position_ids"  # a pre-cut image's per-patch (x, y) (Gemma 4's pixel_position_ids)


def patch_positions(batch: int) -> torch.Tensor:
    """Each patch's (x, y) on the PATCH_GRID x PATCH_GRID grid, row by row: (batch, patches, 2)."""
    index = torch.arange(PATCH_GRID * PATCH_GRID)
    return torch.stack([index % PATCH_GRID, index // PATCH_GRID], dim=-1).repeat(batch, 1, 1)


def clip_frames(config) -> int:
    """The frames of a clip: as the vision config states them (:func:`clip_length`), else the tiny size."""
    return clip_length(getattr(config, "vision_config", None) or config) or TINY["num_frames"]


def tiled_image(config, batch: int) -> dict:
    """One image as its max_num_tiles tiles, all real (the aspect-ratio id only selects a learned embedding)."""
    tiles = config.max_num_tiles
    images = pixel_values(config, batch)[:, None, None].repeat(1, 1, tiles, 1, 1, 1)
    return {"pixel_values": images, "aspect_ratio_ids": torch.ones(batch, 1, dtype=torch.long),
            "aspect_ratio_mask": torch.ones(batch, 1, tiles, dtype=torch.long)}


def flattened_image(config, batch: int) -> dict:
    """PATCH_GRID x PATCH_GRID patches as Pix2Struct's processor flattens them: each patch's row and column
    (from 1; 0 marks padding) and then its patch_embed_hidden_size values (channels x patch x patch)."""
    patches = PATCH_GRID * PATCH_GRID
    width = getattr(config, "patch_embed_hidden_size", None) or (
        (getattr(config, "num_channels", 3) or 3) * patch_side(config) ** 2)
    index = torch.arange(patches)
    places = torch.stack([index // PATCH_GRID + 1, index % PATCH_GRID + 1], dim=-1).float()
    generator = torch.Generator().manual_seed(0)
    one = torch.cat([places, torch.randn(patches, width, generator=generator)], dim=-1).unsqueeze(0)
    return {FLATTENED: one.repeat(batch, 1, 1)}


def cut_image(config, batch: int, mask: str | None) -> dict:
    """PATCH_GRID x PATCH_GRID patches of channels x patch x patch values, their grid, every patch real."""
    size, patches = patch_side(config), PATCH_GRID * PATCH_GRID
    generator = torch.Generator().manual_seed(0)
    one = torch.randn(1, patches, (getattr(config, "num_channels", 3) or 3) * size * size, generator=generator)
    inputs = {"pixel_values": one.repeat(batch, 1, 1), "spatial_shapes": torch.tensor([[PATCH_GRID, PATCH_GRID]] * batch)}
    if mask:
        inputs[mask] = torch.ones(batch, patches, dtype=torch.long)
    return inputs


def merge_size(config) -> int:
    merge = getattr(config, "spatial_merge_size", None) or getattr(config, "merge_size", None) or 1
    return merge if isinstance(merge, int) and merge > 0 else 1


def patch_shapes(config) -> list[tuple[int, ...]]:
    """Shapes of one patch to try: flattened channels x time x height x width (Qwen2-VL), then the
    same unflattened, then without the time axis."""
    size = patch_side(config)
    channels = getattr(config, "in_channels", None) or getattr(config, "num_channels", None) or 3
    frames = getattr(config, "temporal_patch_size", None) or 1
    merge = merge_size(config)
    shapes = [(channels * frames * size * size,), (channels, frames, size, size), (channels * size * size,),
              (channels, size, size), (channels * 2 * size * size,)]  # the last: two frames a patch, unstated
    if merge > 1:  # one merge unit's pixels, channels last (Inkling 2: a row per language-model token)
        shapes.append((merge * size, merge * size, channels))
    shapes.append((BATCH_OF_ONE, channels, size, size))  # the packed patches under a batch axis of one (PaddleOCR-VL)
    return list(dict.fromkeys(shapes))


BATCH_OF_ONE = 0  # a patch shape's first entry: the packed sequence is passed as (1, patches, *shape[1:])


def patch_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    """``batch`` images of 2 merge units a side (4 x 4 patches at merge 2), one grid row each, packed
    one after the other as these towers take them (no batch axis: the designed passes cannot write
    per design, so only the attention function's factor is read)."""
    side = 2 * merge_size(model.config)
    required = required_inputs(model)
    grid = next(name for name in GRID_NAMES if accepts(model, name))
    data = next((name for name in required if name not in (*GRID_NAMES, "merge_sizes")),
                getattr(model, "main_input_name", "pixel_values"))
    generator = torch.Generator().manual_seed(0)
    lead = shape[:1] == (BATCH_OF_ONE,)
    shape = shape[1:] if lead else shape
    one = torch.randn(side * side, *shape, generator=generator)
    packed = one.repeat(batch, *([1] * len(shape)))
    inputs = {data: packed.unsqueeze(0) if lead else packed, grid: torch.tensor([[1, side, side]] * batch)}
    if "merge_sizes" in required:
        inputs["merge_sizes"] = torch.tensor([merge_size(model.config)] * batch)
    return inputs
