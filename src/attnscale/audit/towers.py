"""Which row reads the attention a composite's towers run: the row of the tower an attention module lies in.

A composite (LLaVA: a CLIP vision tower and a Llama) is built from sub-configs; each tower is a family of its own
(its row is that family's) or a tower with no base model of its own (its row is ``composite.tower``).  A composite
audited on its token ids leaves its towers unrun; :func:`rely_on_towers` records, on its record, which rows read
what it left.
"""

from __future__ import annotations

from dataclasses import replace

from . import families
from .record import FamilyAudit, Status, is_intercepted_nowhere


def attending(towers: list[dict]) -> list[dict]:
    """The towers that run attention (all but the parts families.composite_skip found to run none)."""
    return [tower for tower in towers if tower.get("attention", True)]


def row_of(composite: str, tower: dict) -> str:
    """The row that audits ``tower`` of ``composite``: its family's, or ``composite.tower``."""
    return tower["model_type"] if tower["own"] else f"{composite}.{tower['name']}"


def enclosing_parts(model, module_name: str):
    """(prefix, part, config) of each part holding ``module_name`` that has a config of its own (not the model's),
    innermost first: the towers an attention module lies in."""
    parts = module_name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        part = model.get_submodule(prefix)
        config = getattr(part, "config", None)  # a tower's model holds its own
        if config is not None and config is not model.config:
            yield prefix, part, config


def tower_row(model, composite: FamilyAudit, module_name: str) -> str | None:
    """The row that audits the tower an attention module of a composite lies in (the innermost part built from a
    sub-config: a family of its own, or ``composite.tower``); None for a module of the composite's own."""
    sub_types = {}
    for tower in composite.towers:
        sub = getattr(model.config, tower["name"], None)
        if sub is not None:
            sub_types.setdefault(type(sub), row_of(composite.family, tower))
    return next((sub_types[type(config)] for _, _, config in enclosing_parts(model, module_name)
                 if type(config) in sub_types), None)


def own_family(model, module_name: str) -> str | None:
    """The model type of the innermost part holding ``module_name`` built from the config of a family of
    its own, whose row reads the same classes (T5Gemma 2's SigLIP vision model, inside its encoder: a
    composite covered only once the report is settled); None where there is none."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return next((config.model_type for _, _, config in enclosing_parts(model, module_name)
                 if getattr(config, "model_type", None) in MODEL_MAPPING_NAMES), None)


def rely_on_towers(model, record: FamilyAudit) -> FamilyAudit:
    """A composite audited on its token ids, whose towers that pass does not run (a vision or audio
    tower, a VQ image tokenizer): each attention module it leaves unread inside a tower relies on the
    row that audits that tower (:func:`tower_row`), which :func:`.composite.settled` requires measured with
    nothing left; a module outside every tower stays unread.  Returns the record with its towers, the row
    each such module is read by, and what it relies on (the record itself where there is nothing to rely on)."""
    unread = [u["name"] for u in record.unread_attention if is_intercepted_nowhere(u)]
    sub_configs = dict(getattr(type(model.config), "sub_configs", {}) or {})
    if record.status != Status.AUDITED or not unread or not sub_configs:
        return record
    record = replace(record, towers=families.tower_types(type(model.config), sub_configs))
    modules = []
    for module in record.unread_attention:
        row = (own_family(model, module["name"]) or tower_row(model, record, module["name"])) \
            if module["name"] in unread else None
        modules.append({**module, "read_by": row} if row else module)
    return replace(record, unread_attention=modules,
                   relies_on=sorted({module["read_by"] for module in modules if module.get("read_by")}))
