"""A composite's logic in one place: its towers' rows, the composite built whole, a folder's towers, and the
composites settled from the finished records.

A composite (LLaVA: a CLIP vision tower and a Llama) is built from sub-configs (:mod:`.families`); which row reads
an attention module of a tower is :mod:`.towers`' (the tower's family, or ``composite.tower``).  Here:

- :func:`family_rows`: a family's row, then its towers with no base model of their own audited as rows of their own
  (:func:`audit_tower`), and a composite they cannot cover built whole and fed the media its ids hold placeholders
  for (:func:`audit_whole`);
- :func:`folder_rows`: a model folder's row, then every tower its pass left unread as a row of its own;
- :func:`compose`: the whole audit's records settled, three rules in this order:

  1. :func:`settled`: a composite measured whole (or on its token ids) that left a tower's attention unread stays
     measured only where the row reading that tower is measured with nothing left; otherwise it is skipped, the
     rows named.
  2. :func:`covered`: a composite skipped as a whole is covered where every tower that runs attention is measured
     with nothing left (a family, a tower row, or a composite covered in turn, as SAM 3's vision model is for
     SAM 3) and it runs no attention class of its own; otherwise its reason names what is left out.
  3. :func:`completed`: a record judged ``ok`` that leaves some attention module unread (no row reads it) is
     ``incomplete``, N of M attention modules measured, each one left named: "ok" means every one was measured.

Every stage returns new records (the inputs are never changed).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import torch

from ..probing.loading import quiet_transformers
from ..threads import torch_threads
from . import families, feed, measure, sizes
from .feed import Feeding, first_inputs
from .measure import audit_family
from .record import (COVERED, NOT_MEASURED, AuditVerdict, FamilyAudit, SkipKind, Status, is_intercepted_nowhere,
                     is_measured, mechanism_name, unmeasured_here)
from .towers import attending, enclosing_parts, row_of, tower_row
from .verdicts import DEFAULT_BACKENDS


# ---------------------------------------------------------------------------------------
# A family's rows and a folder's rows.

def family_rows(name: str, backends=DEFAULT_BACKENDS, seed: int = 0) -> list[FamilyAudit]:
    """A family's row, then the rows of a composite's towers that have no base model of their own.  A composite
    those rows cannot cover (a tower left unmeasured, as a mask decoder with no model class of its own, or attention
    classes of its own) is built and audited whole; where that measures it, its row takes the place of the
    composite's skipped one."""
    result = audit_family(name, backends, seed)
    towers = [t for t in attending(result.towers) if t["model_type"] and not t["own"]
              and (result.status == Status.SKIPPED or f"{name}.{t['name']}" in result.relies_on)]
    rows = [audit_tower(name, tower, backends, seed) for tower in towers]
    # a tower with no model type of its own that runs attention (Fun-ASR-Nano's adaptor: a config class only) has no row
    # to cover it
    typeless = any(not tower["model_type"] for tower in attending(result.towers))
    if result.status == Status.SKIPPED and result.towers and (result.own_attention or typeless
                                                          or not all(map(nothing_left, rows))):
        whole = audit_whole(result, backends, seed)
        by_row = {row.family: row for row in rows}
        unmeasured = [name for name in whole.relies_on if name in by_row and not nothing_left(by_row[name])]
        if is_measured(whole) and not whole.own_attention and not unmeasured:
            # its relies_on are checked again when composed (settled), families of their own only there
            return [whole, *rows]
        why = (whole.reason or "; ".join(whole.findings) if not is_measured(whole)
               else unread_text(whole.own_attention, unmeasured))
        result = replace(result, reason=f"{result.reason}; built whole: {why}")
    return [result, *rows]


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
    read = {type(modules[row.name]).__name__ for row in result.layers if row.name in modules}
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
    marked ``read_by`` that row; the rest stay unread, and leave the folder ``incomplete`` (:func:`completed`)."""
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
    budget = sizes.design_flop_budget()
    if flops <= budget:  # a tower beyond it is named, not measured, and leaves the folder incomplete
        return ""
    return (f"not audited at its own sizes: one designed pass is about {flops / 1e12:.0f} TFLOP ({parameters:,} "
            f"parameters, about {tokens} tokens, {len(DESIGNS)} designs), beyond the {budget / 1e12:g} TFLOP "
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


# ---------------------------------------------------------------------------------------
# The whole audit's records settled.

def compose(records: list[FamilyAudit]) -> list[FamilyAudit]:
    """Every record as the whole audit settles it, in the same order."""
    return completed(covered(settled(records)))


def nothing_left(record: FamilyAudit) -> bool:
    """A row that leaves nothing of its attention unmeasured: measured with every attention module read
    (none left "not intercepted": an inline SAM encoder beside a tower's intercepted encoder), covered,
    without attention, or with no softmax over q.k."""
    unread = any(map(is_intercepted_nowhere, record.unread_attention))
    judged = record.verdict != AuditVerdict.INCOMPLETE  # a layer it could not judge (QK-norm with no declared logit)
    return (is_measured(record) and not unread and judged or record.status == Status.COVERED
            or record.status == Status.SKIPPED and record.skip in (SkipKind.NO_ATTENTION, SkipKind.NO_SOFTMAX))


def tower_state(record: FamilyAudit) -> str:
    return record.verdict if record.status in (Status.AUDITED, Status.COVERED) else families.NO_ATTENTION


def unread_text(own: list[str], towers: list[str]) -> str:
    parts = ([f"its own attention classes {', '.join(own)} are not read"] if own else []) + (
        [f"the attention of {', '.join(towers)} is not read, and that row is not measured"] if towers else [])
    return "; ".join(parts)


def settled(records: list[FamilyAudit]) -> list[FamilyAudit]:
    by_name = {record.family: record for record in records}
    out = []
    for record in records:
        unmeasured = [name for name in record.relies_on if not (by_name.get(name) and nothing_left(by_name[name]))]
        if record.status == Status.AUDITED and unmeasured:
            record = replace(record, status=Status.SKIPPED, verdict=NOT_MEASURED,
                             reason=f"built whole: {unread_text([], unmeasured)}")
        out.append(record)
    return out


def covered(records: list[FamilyAudit]) -> list[FamilyAudit]:
    out = list(records)
    index = {record.family: position for position, record in enumerate(out)}
    row = lambda name: out[index[name]] if name in index else None  # noqa: E731 - the row as settled so far
    composites = [position for position, record in enumerate(out) if record.status == Status.SKIPPED and record.towers]
    newly_covered = True
    while newly_covered:  # a composite covered in turn covers the composites it is a tower of
        newly_covered = False
        for position in composites:
            record = out[position]
            towers = attending(record.towers)
            rows = [row(row_of(record.family, tower)) for tower in towers]
            if record.status == Status.SKIPPED and not record.own_attention and all(r and nothing_left(r) for r in rows):
                reason = "every tower measured: " + ", ".join(
                    [f"{t['name']} = {r.family} ({tower_state(r)})" for t, r in zip(towers, rows)]
                    + [f"{t['name']}: no attention" for t in record.towers if t not in towers])
                out[position] = replace(record, status=Status.COVERED, verdict=COVERED, reason=reason)
                newly_covered = True
    for position in composites:
        record = out[position]
        if record.status != Status.SKIPPED:
            continue
        left_out = [t["name"] for t in attending(record.towers)
                    if not ((r := row(row_of(record.family, t))) and nothing_left(r))]
        if record.own_attention:
            out[position] = replace(record, reason=record.reason + "; its own attention classes are not audited "
                                                                   f"({', '.join(record.own_attention)})")
        elif len(left_out) < len(record.towers):
            out[position] = replace(record, reason=record.reason + f"; not measured here: {', '.join(left_out)}")
    return out


def why_unmeasured(module: dict) -> str:
    if is_intercepted_nowhere(module):
        return str(module["mechanism"])
    return f"its code: {mechanism_name(module)}, not read here"


def completed(records: list[FamilyAudit]) -> list[FamilyAudit]:
    out = []
    for record in records:
        unread = unmeasured_here(record.unread_attention)
        if record.verdict == AuditVerdict.OK and unread:
            measured = len({layer.name for layer in record.layers})
            by_class = Counter((module["class"], why_unmeasured(module)) for module in unread)
            record = replace(record, verdict=AuditVerdict.INCOMPLETE, findings=[
                *record.findings, f"{measured} of {measured + len(unread)} attention modules measured; not measured: "
                + ", ".join(f"{name} x{count} ({why})" for (name, why), count in by_class.items())])
        out.append(record)
    return out
