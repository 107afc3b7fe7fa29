"""The registry of what the audit knows of particular families (audit/known.py): one entry a family, looked up by
its model type, each field read by the stage that needs it."""

from __future__ import annotations

import pytest

from attnscale.audit import families, positions
from attnscale.audit.known import KNOWN, FamilyEntry, Registry
from attnscale.audit.position_rules import PositionFamily


def test_one_entry_a_family_and_an_empty_one_for_a_family_it_does_not_know():
    keys = [entry.key for entry in KNOWN]
    assert len(keys) == len(set(keys)) == len(KNOWN)
    unknown = KNOWN.get("no_such_family")
    assert unknown == FamilyEntry("no_such_family") and "no_such_family" not in KNOWN
    assert not unknown.tiny and not unknown.cannot_build and unknown.far is None


def test_register_refuses_a_second_entry_a_wrong_type_and_a_far_entry_of_another_family():
    registry = Registry([FamilyEntry("llama", tiny={"num_hidden_layers": 4})])
    with pytest.raises(ValueError, match="family 'llama' already has an entry"):
        registry.register(FamilyEntry("llama"))
    with pytest.raises(ValueError, match="a registry entry must be a FamilyEntry, got dict"):
        registry.register({"key": "gpt2"})
    far = positions.family_named("beam")
    with pytest.raises(ValueError, match="family 'gpt2': its far-position entry is for 'beam'"):
        registry.register(FamilyEntry("gpt2", far=far))
    assert registry.register(FamilyEntry("beam", far=far)).far is far
    assert registry.far_families() == (far,)


def test_a_family_s_tiny_sizes_reach_its_config():
    """The build stage reads an entry's tiny fields (GPT-Neo's attention pattern, the default list not fitting
    2 layers) and a composite's whole_tiny fields (SAM 2's video tracker built whole: its vision tower widened)."""
    from transformers import GPTNeoConfig

    assert families.tiny_kwargs(GPTNeoConfig)["attention_types"] == KNOWN.get("gpt_neo").tiny["attention_types"]
    assert families.tiny_config("gpt_neo").attention_layers == ["global", "local"]
    whole = families.whole_config("sam2_video")
    assert whole.vision_config.fpn_hidden_size == KNOWN.get("sam2_video").whole_tiny["vision_config"]["fpn_hidden_size"]


def test_a_backbone_the_audit_cannot_build_is_left_out_of_its_composite(monkeypatch):
    """DETR's backbone spec is a ResNet, built at the tiny sizes; where the registry says a backbone's family cannot
    be built (the timm wrappers: the audit does without timm), the composite's backbone is not built from it."""
    from transformers import DetrConfig

    assert "timm" in KNOWN.get("timm_backbone").cannot_build and "timm" in KNOWN.get("timm_wrapper").cannot_build
    assert families.tiny_backbone(DetrConfig, "backbone_config").model_type == "resnet"
    monkeypatch.setattr(families, "KNOWN", Registry([FamilyEntry("resnet", cannot_build="a test says so")]))
    assert families.tiny_backbone(DetrConfig, "backbone_config") is None


def test_the_far_position_families_are_the_entries_with_a_far_record():
    far = positions.families()
    assert [entry.family for entry in far] == [entry.key for entry in KNOWN if entry.far is not None]
    assert all(isinstance(entry, PositionFamily) for entry in far)
    assert {"llama4_text", "ministral3", "mistral4", "mistral_large4_text", "beam"} <= {e.family for e in far}
    # in the order the report's table has always listed them
    assert [entry.family for entry in far] == ["llama4_text", "ministral3", "mistral4", "mistral_large4_text", "beam",
                                               "inkling_text", "inkling2_text", "inkling2_loop_text"]
    # a learned factor is drawn by a function of its entry (and only a learned one), not by a branch of the measurement
    assert [entry.family for entry in far if entry.learned] == [entry.family for entry in far if entry.draw_learned]
    assert [entry.family for entry in far if entry.learned] == ["mistral_large4_text"]


def test_every_line_the_read_stage_recognises_a_mechanism_or_layout_by_is_in_the_installed_source():
    """The read stage keys some knowledge on a line of code, not on a family's name (a mechanism with no softmax
    over q.k, XLNet's einsum projections, attention softmaxed over the queries, Grounding DINO's two-way
    attention): each such line is in some modeling file of the installed transformers, so none is stale."""
    from pathlib import Path

    import transformers

    from attnscale.audit import inline, measure

    models = Path(transformers.__file__).parent / "models"
    source = "".join(path.read_text(encoding="utf-8") for path in sorted(models.glob("*/modeling_*.py")))
    quotes = [quote for quote, _ in measure.MECHANISMS] + [inline.EINSUM_PROJECTION, inline.OVER_QUERIES,
                                                           inline.BIDIRECTIONAL]
    assert len(quotes) >= 14
    assert [quote for quote in quotes if quote not in source] == []
