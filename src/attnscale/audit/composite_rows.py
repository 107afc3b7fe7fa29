"""A composite's own rows: its towers audited as rows of their own, and the composite built whole where they
cannot cover it.

A tower with no base model of its own is audited as ``composite.tower`` (:func:`audit_tower`).  A composite its
towers cannot cover is built whole and fed the media its ids hold placeholders for (:func:`audit_whole`).  Whether
the composite is then covered or measured is settled from the finished records (:mod:`.compose`); which row reads
a module of a tower is :mod:`.towers`'.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..probing.loading import quiet_transformers
from ..threads import torch_threads
from . import families, feed, measure, sizes
from .compose import nothing_left
from .feed import Feeding, first_inputs
from .record import FamilyAudit, Status, is_intercepted_nowhere
from .towers import enclosing_parts, tower_row
from .verdicts import DEFAULT_BACKENDS


def audit_tower(composite: str, tower: dict, backends=DEFAULT_BACKENDS, seed: int = 0) -> FamilyAudit:
    """A composite's tower that has no base model of its own, audited as its own row
    (``composite.tower``), with the declared rules of the tower's model type."""
    start = time.perf_counter()
    name = f"{composite}.{tower['name']}"
    try:
        model, feeding = families.build_tower(composite, tower["name"], seed), Feeding()
        with torch.no_grad(), quiet_transformers(), torch_threads(1):
            model(**first_inputs(model, feeding))
    except families.CannotAudit as reason:
        return FamilyAudit(name, status=Status.SKIPPED, reason=str(reason), skip=reason.kind, tower_of=composite,
                           seconds=time.perf_counter() - start)
    except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a reason
        return FamilyAudit(name, status=Status.SKIPPED, reason=f"cannot run a forward pass: {families.first_line(error)}",
                           tower_of=composite, seconds=time.perf_counter() - start)
    try:
        result = measure.audit_model(model, name, backends, seed, model_type=tower["model_type"], feeding=feeding)
    except Exception as error:  # noqa: BLE001
        result = FamilyAudit(name, type(model).__name__, status=Status.SKIPPED,
                             reason=f"audit failed: {families.first_line(error)}")
    return replace(result, tower_of=composite, seconds=time.perf_counter() - start)


def audit_whole(skipped: FamilyAudit, backends=DEFAULT_BACKENDS, seed: int = 0) -> FamilyAudit:
    """A composite its towers cannot cover (``skipped``: its row as a family), built whole at the tiny
    sizes (:func:`families.build_whole`) and fed everything its forward needs (:func:`.feed.first_inputs`: an
    image with a prompt, ids in codebooks, a pair of images) and audited as one model: its own attention
    is measured among its calls.  ``own_attention`` then keeps the composite's own classes no row reads."""
    model_type = skipped.family
    start = time.perf_counter()
    try:
        model = families.build_whole(model_type, seed)
        with torch.no_grad(), quiet_transformers(), torch_threads(1):
            feeding = Feeding(media=placeholder_media(model))
            model(**first_inputs(model, feeding))
    except families.CannotAudit as reason:
        return FamilyAudit(model_type, status=Status.SKIPPED, reason=str(reason), skip=reason.kind,
                           seconds=time.perf_counter() - start)
    except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a reason
        return FamilyAudit(model_type, status=Status.SKIPPED, seconds=time.perf_counter() - start,
                           reason=f"cannot run a forward pass: {families.first_line(error)}")
    try:
        result = measure.audit_model(model, model_type, backends, seed, feeding=feeding)
    except Exception as error:  # noqa: BLE001
        result = FamilyAudit(model_type, type(model).__name__, status=Status.SKIPPED,
                             reason=f"audit failed: {families.first_line(error)}")
    # an attention class counts as read where a row reads one of its modules (the factor is the class's code)
    modules = dict(model.named_modules())
    read = {type(modules[row["name"]]).__name__ for row in result.layers if row["name"] in modules}
    unread, entries = [], []
    for module in result.unread_attention:
        row = None
        if is_intercepted_nowhere(module):
            row = model_type if module["class"] in read else tower_row(model, skipped, module["name"])
            if module["class"] not in read:
                unread.append((module["class"], row))
        entries.append({**module, "read_by": row} if row else module)  # the row that reads its class (this, or a tower's)
    return replace(result, towers=skipped.towers, unread_attention=entries,
                   own_attention=sorted({name for name, row in unread if row is None}),
                   relies_on=sorted({row for _, row in unread if row is not None}), seconds=time.perf_counter() - start)


MEDIA_KINDS = (("image", "vision_config"), ("audio", "audio_config"))  # a medium and the sub-config of its tower


def placeholder_media(model) -> list[tuple[int, int, dict]]:
    """The media a composite merges into its ids at placeholder tokens, for ``Feeding.media``: each kind
    whose token the config names (image_token_id, audio_token_id) and whose features the model computes
    (get_<kind>_features), given as its tower runs on them (:func:`.feed.first_inputs` of the module built from the
    tower's sub-config, under the names the composite takes), with as many placeholders as those features hold
    vectors of the text's width; without them the ids alone run and the towers' media path never does."""
    found = []
    for kind, sub_name in MEDIA_KINDS:
        token, sub = getattr(model.config, f"{kind}_token_id", None), getattr(model.config, sub_name, None)
        features = getattr(model, f"get_{kind}_features", None)
        tower = next((m for m in model.modules() if m is not model and getattr(m, "config", None) is sub), None)
        if not isinstance(token, int) or features is None or tower is None:
            continue
        try:
            inputs = {name: value for name, value in first_inputs(tower, Feeding()).items()
                      if feed.accepts(model, name)}
            output = features(**inputs)
            pooled = getattr(output, "pooler_output", output)
            found.append((token, pooled.numel() // model.get_input_embeddings().embedding_dim, inputs))
        except Exception:  # noqa: BLE001 - third-party model code: media it cannot compute are not fed (ids alone)
            continue
    return found


def folder_rows(folder: str, backends=DEFAULT_BACKENDS, seed: int = 0) -> list[FamilyAudit]:
    """A model folder's row (:func:`.measure.audit_folder`), then a row for each tower of it (a part built from a
    sub-config of its own: LLaVA's vision tower) that holds attention the folder's pass left unread, audited as its
    own model on the input it takes, with the folder's weights.  A module of a tower measured with nothing left is
    marked ``read_by`` that row; the rest stay unread, and leave the folder ``incomplete`` (:mod:`.compose`)."""
    start = time.perf_counter()
    record, model = measure.audit_folder(folder, backends, seed, keep_model=True)
    rows = []
    for prefix, tower in unread_towers(model, record).items():
        name = f"{record.family}.{prefix}"
        tower_start = time.perf_counter()
        too_costly = tower_cost(tower)
        try:
            row = FamilyAudit(name, type(tower).__name__, status=Status.SKIPPED, reason=too_costly) if too_costly \
                else measure.audit_model(tower, name, backends, seed, model_type=getattr(tower.config, "model_type", None))
        except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a reason
            row = FamilyAudit(name, type(tower).__name__, status=Status.SKIPPED,
                              reason=f"audit failed: {families.first_line(error)}")
        row = replace(row, tower_of=record.family, seconds=time.perf_counter() - tower_start)
        rows.append(row)
        if nothing_left(row):
            record = replace(record, unread_attention=[
                {**module, "read_by": name} if is_intercepted_nowhere(module) and module["name"].startswith(prefix + ".")
                else module for module in record.unread_attention])
    return [replace(record, seconds=time.perf_counter() - start), *rows]


UNKNOWN_TOKENS = 256  # a tower whose config names no image and patch size: its tokens guessed at this


def tower_cost(tower: torch.nn.Module) -> str:
    """Why a tower is too costly to audit at its own sizes here ("" where it is not): one designed pass is about
    2 x parameters x tokens x designs floating-point operations, its tokens (image_size / patch_size)^2 + 1 where
    its config says so."""
    from .whole_path import DESIGNS

    config = tower.config
    image, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    image = image[0] if isinstance(image, (list, tuple)) else image
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    tokens = (image // patch) ** 2 + 1 if isinstance(image, int) and isinstance(patch, int) and patch else UNKNOWN_TOKENS
    parameters = sum(p.numel() for p in tower.parameters())
    flops = 2 * parameters * tokens * len(DESIGNS)
    if flops <= sizes.DESIGN_FLOP_BUDGET:  # a tower beyond it is named, not measured, and leaves the folder incomplete
        return ""
    return (f"not audited at its own sizes: one designed pass is about {flops / 1e12:.0f} TFLOP ({parameters:,} "
            f"parameters, about {tokens} tokens, {len(DESIGNS)} designs), beyond the {sizes.DESIGN_FLOP_BUDGET / 1e12:g} TFLOP "
            "the audit spends on a tower; its family's row (attnscale audit MODEL_TYPE) reads its code at tiny sizes")


def unread_towers(model, record: FamilyAudit) -> dict[str, torch.nn.Module]:
    """Name -> module of the innermost parts with a config of their own (a tower) that hold an attention module
    the record left unread ("not intercepted")."""
    from transformers import PreTrainedModel

    found: dict[str, torch.nn.Module] = {}
    for module in record.unread_attention:
        if not is_intercepted_nowhere(module) or module.get("read_by"):
            continue
        tower = next(((prefix, part) for prefix, part, _ in enclosing_parts(model, module["name"])
                      if isinstance(part, PreTrainedModel)), None)
        if tower is not None and not any(tower[0].startswith(other + ".") for other in found):
            found.setdefault(*tower)
    return found
