"""A composite's rows: its towers audited as rows of their own, the composite built whole where they cannot
cover it, what a row relies on another to read, and the report settled from them.

A composite (LLaVA: a CLIP vision tower and a Llama) is covered by its towers where every tower is measured
in the same audit and it runs no attention class of its own (:func:`mark_covered`).  A tower with no base model
of its own is audited as ``composite.tower`` (:func:`audit_tower`).  A composite its towers cannot cover is
built whole and fed the media its ids hold placeholders for (:func:`audit_whole`); a composite audited on its
token ids leaves its towers unrun and relies on their rows (:func:`rely_on_towers`).  Either counts as measured
only where every attention module it leaves is read by a row it relies on (:func:`settle_whole`).
"""

from __future__ import annotations

import time

import torch

from ..probing.loading import quiet_transformers
from ..threads import torch_threads
from . import families, measure, whole_path
from .verdicts import DEFAULT_BACKENDS


def audit_tower(composite: str, tower: dict, backends=DEFAULT_BACKENDS, seed: int = 0) -> measure.FamilyAudit:
    """A composite's tower that has no base model of its own, audited as its own row
    (``composite.tower``), with the declared rules of the tower's model type."""
    start = time.perf_counter()
    name = f"{composite}.{tower['name']}"
    try:
        model = families.build_tower(composite, tower["name"], seed)
        with torch.no_grad(), quiet_transformers(), torch_threads(1):
            model(**measure.first_inputs(model))
    except families.Skip as reason:
        return measure.FamilyAudit(name, status="skipped", reason=str(reason), tower_of=composite,
                           seconds=time.perf_counter() - start)
    except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a reason
        return measure.FamilyAudit(name, status="skipped", reason=f"cannot run a forward pass: {families.first_line(error)}",
                           tower_of=composite, seconds=time.perf_counter() - start)
    try:
        result = measure.audit_model(model, name, backends, seed, model_type=tower["model_type"])
    except Exception as error:  # noqa: BLE001
        result = measure.FamilyAudit(name, type(model).__name__, status="skipped",
                             reason=f"audit failed: {families.first_line(error)}")
    result.tower_of = composite
    result.seconds = time.perf_counter() - start
    return result


def audit_whole(skipped: measure.FamilyAudit, backends=DEFAULT_BACKENDS, seed: int = 0) -> measure.FamilyAudit:
    """A composite its towers cannot cover (``skipped``: its row as a family), built whole at the tiny
    sizes (:func:`families.build_whole`) and fed everything its forward needs (:func:`.measure.first_inputs`: an
    image with a prompt, ids in codebooks, a pair of images) and audited as one model: its own attention
    is measured among its calls.  ``own_attention`` then keeps the composite's own classes no row reads."""
    model_type = skipped.family
    start = time.perf_counter()
    try:
        model = families.build_whole(model_type, seed)
        with torch.no_grad(), quiet_transformers(), torch_threads(1):
            whole_path.MEDIA[model] = placeholder_media(model)
            model(**measure.first_inputs(model))
    except families.Skip as reason:
        return measure.FamilyAudit(model_type, status="skipped", reason=str(reason), seconds=time.perf_counter() - start)
    except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a reason
        return measure.FamilyAudit(model_type, status="skipped", seconds=time.perf_counter() - start,
                           reason=f"cannot run a forward pass: {families.first_line(error)}")
    try:
        result = measure.audit_model(model, model_type, backends, seed)
    except Exception as error:  # noqa: BLE001
        result = measure.FamilyAudit(model_type, type(model).__name__, status="skipped",
                             reason=f"audit failed: {families.first_line(error)}")
    result.towers = skipped.towers
    # an attention class counts as read where a row reads one of its modules (the factor is the class's code)
    modules = dict(model.named_modules())
    read = {type(modules[row["name"]]).__name__ for row in result.layers if row["name"] in modules}
    unread = []
    for module in result.unread_attention:
        if module["mechanism"] != "not intercepted":
            continue
        row = model_type if module["class"] in read else tower_row(model, skipped, module["name"])
        if row:
            module["read_by"] = row  # the row that reads its class (this one, or its tower's)
        if module["class"] not in read:
            unread.append((module["class"], row))
    result.own_attention = sorted({name for name, row in unread if row is None})
    result.relies_on = sorted({row for _, row in unread if row is not None})
    result.seconds = time.perf_counter() - start
    return result


MEDIA_KINDS = (("image", "vision_config"), ("audio", "audio_config"))  # a medium and the sub-config of its tower


def placeholder_media(model) -> list[tuple[int, int, dict]]:
    """The media a composite merges into its ids at placeholder tokens, for :data:`whole_path.MEDIA`: each kind
    whose token the config names (image_token_id, audio_token_id) and whose features the model computes
    (get_<kind>_features), given as its tower runs on them (:func:`.measure.first_inputs` of the module built from the
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
            inputs = {name: value for name, value in measure.first_inputs(tower).items() if whole_path.accepts(model, name)}
            output = features(**inputs)
            pooled = getattr(output, "pooler_output", output)
            found.append((token, pooled.numel() // model.get_input_embeddings().embedding_dim, inputs))
        except Exception:  # noqa: BLE001 - third-party model code: media it cannot compute are not fed (ids alone)
            continue
    return found


def tower_row(model, composite: measure.FamilyAudit, module_name: str) -> str | None:
    """The row that audits the tower an attention module of a composite built whole lies in (the
    innermost part built from a sub-config: a family of its own, or ``composite.tower``); None for
    a module of the composite's own."""
    sub_types = {}
    for tower in composite.towers:
        sub = getattr(model.config, tower["name"], None)
        if sub is not None:
            sub_types.setdefault(type(sub), tower["model_type"] if tower["own"] else f"{composite.family}.{tower['name']}")
    parts = module_name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        config = getattr(model.get_submodule(".".join(parts[:end])), "config", None)  # a tower's model holds its own
        if config is not None and config is not model.config and type(config) in sub_types:
            return sub_types[type(config)]
    return None


def rely_on_towers(model, result: measure.FamilyAudit) -> None:
    """A composite audited on its token ids, whose towers that pass does not run (a vision or audio
    tower, a VQ image tokenizer): each attention module it leaves unread inside a tower relies on the
    row that audits that tower (:func:`tower_row`), which :func:`settle_whole` requires measured with
    nothing left; a module outside every tower stays unread."""
    unread = [u["name"] for u in result.unread_attention if u["mechanism"] == "not intercepted"]
    sub_configs = dict(getattr(type(model.config), "sub_configs", {}) or {})
    if result.status != "audited" or not unread or not sub_configs:
        return
    result.towers = families.tower_types(type(model.config), sub_configs)
    for module in result.unread_attention:
        if module["name"] in unread and (row := own_family(model, module["name"]) or tower_row(model, result, module["name"])):
            module["read_by"] = row
    result.relies_on = sorted({module["read_by"] for module in result.unread_attention if module.get("read_by")})


def own_family(model, module_name: str) -> str | None:
    """The model type of the innermost part holding ``module_name`` built from the config of a family of
    its own, whose row reads the same classes (T5Gemma 2's SigLIP vision model, inside its encoder: a
    composite covered only once the report is settled); None where there is none."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    parts = module_name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        config = getattr(model.get_submodule(".".join(parts[:end])), "config", None)
        if config is not None and config is not model.config and getattr(config, "model_type", None) in MODEL_MAPPING_NAMES:
            return config.model_type
    return None


COVERED = "covered by its towers"


def tower_state(result: measure.FamilyAudit) -> str:
    return result.verdict if result.status in ("audited", "covered") else families.NO_ATTENTION


def nothing_left(result: measure.FamilyAudit) -> bool:
    """A row that leaves nothing of its attention unmeasured: measured with every attention module read
    (none left "not intercepted": an inline SAM encoder beside a tower's intercepted encoder), covered,
    without attention, or with no softmax over q.k."""
    unread = any(u.get("mechanism") == "not intercepted" for u in result.unread_attention)
    return (measure.is_measured(result) and not unread or result.status == "covered"
            or result.status == "skipped" and result.reason.startswith((families.NO_ATTENTION, measure.NO_SOFTMAX)))


def unread_text(own: list[str], towers: list[str]) -> str:
    parts = ([f"its own attention classes {', '.join(own)} are not read"] if own else []) + (
        [f"the attention of {', '.join(towers)} is not read, and that row is not measured"] if towers else [])
    return "; ".join(parts)


def settle_whole(results: list[measure.FamilyAudit]) -> None:
    """A composite measured whole that left a tower's attention unread stays measured only where that
    tower is measured as a family of its own in the same audit; otherwise it is skipped with why."""
    by_name = {r.family: r for r in results}
    for result in results:
        unmeasured = [name for name in result.relies_on if not (by_name.get(name) and nothing_left(by_name[name]))]
        if result.status == "audited" and unmeasured:
            result.status, result.verdict = "skipped", "not measured"
            result.reason = f"built whole: {unread_text([], unmeasured)}"


def attending(towers: list[dict]) -> list[dict]:
    """The towers that run attention (all but the parts families.composite_skip found to run none)."""
    return [tower for tower in towers if tower.get("attention", True)]


def mark_covered(results: list[measure.FamilyAudit]) -> None:
    """A composite skipped as a whole is covered where every tower is measured in the same audit (a
    family, a tower row, or a composite covered in turn, as SAM 3's vision model is for SAM 3) or
    has no attention module, and it runs no attention class of its own: the attention it runs is
    exactly its towers' classes.  Otherwise its reason says which tower or class is left out."""
    row_of = lambda result, t: t["model_type"] if t["own"] else f"{result.family}.{t['name']}"  # noqa: E731
    by_name = {r.family: r for r in results}
    composites = [r for r in results if r.status == "skipped" and r.towers]
    covered_one = True
    while covered_one:  # until no composite is newly covered
        covered_one = False
        for result in composites:
            towers = attending(result.towers)
            rows = [by_name.get(row_of(result, t)) for t in towers]
            if result.status == "skipped" and not result.own_attention and all(r and nothing_left(r) for r in rows):
                result.status, result.verdict, covered_one = "covered", COVERED, True
                result.reason = "every tower measured: " + ", ".join(
                    [f"{t['name']} = {r.family} ({tower_state(r)})" for t, r in zip(towers, rows)]
                    + [f"{t['name']}: no attention" for t in result.towers if t not in towers])
    for result in composites:
        if result.status != "skipped":
            continue
        reason = result.reason.split("; its own attention")[0].split("; not measured here")[0]  # once per report
        left_out = [t["name"] for t in attending(result.towers)
                    if not (by_name.get(row_of(result, t)) and nothing_left(by_name[row_of(result, t)]))]
        if result.own_attention:
            result.reason = reason + f"; its own attention classes are not audited ({', '.join(result.own_attention)})"
        elif len(left_out) < len(result.towers):
            result.reason = reason + f"; not measured here: {', '.join(left_out)}"
