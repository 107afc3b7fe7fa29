"""A model folder whose factor moves with the query's position is judged at far positions against its own config
(its floor_scale and attn_scale, not the defaults), at positions where the declared factor steps, so that a formula
off by one position fails."""

from __future__ import annotations

import dataclasses
import math

import pytest

from attnscale.audit import measure, positions
from attnscale.audit.known import KNOWN


def llama4_folder(tmp_path, **fields):
    import transformers

    entry = KNOWN.get("llama4_text").far
    transformers.Llama4TextConfig(**{**entry.sizes, "attn_temperature_tuning": True, **fields}).save_pretrained(tmp_path)
    return str(tmp_path)


def off_by_one(config, layer: int, p: int, module=None) -> float:
    """Llama 4's temperature with floor(p / F) where its code has floor((p + 1) / F)."""
    if not config.attn_temperature_tuning or config.no_rope_layers[layer]:
        return 1.0
    return 1.0 + config.attn_scale * math.log1p(math.floor(p / config.floor_scale))


def test_the_positions_include_each_step_of_the_declared_factor():
    step = lambda p: math.floor((p + 1) / 16)  # noqa: E731
    found = positions.stepping_positions(step, (1, 8192))
    assert found == [1, 14, 15, 8190, 8191, 8192] and step(14) != step(15) and step(8190) != step(8191)
    assert positions.stepping_positions(lambda p: 1.0, (1, 8192)) == [1, 8192]  # a constant steps nowhere


def test_a_folder_is_judged_against_its_own_temperature(tmp_path):
    result = measure.audit_folder(llama4_folder(tmp_path, floor_scale=16, attn_scale=0.5), ("eager",))
    far = result.far_positions
    assert result.verdict == "ok" and far["verdict"] == "agrees", result.findings
    assert {8190, 8191} <= set(far["positions"])
    # the folder's own attn_scale and floor_scale, not the defaults (0.1 and 8192): at p = 8191 the factor is
    # 1 + 0.5 ln(1 + 512)
    assert far["measured"]["8191"][0] == pytest.approx(1 + 0.5 * math.log1p(512), rel=1e-3)


def test_a_formula_off_by_one_position_is_a_mismatch(tmp_path, monkeypatch):
    entry = dataclasses.replace(KNOWN.get("llama4_text").far, formula=off_by_one)
    folder = llama4_folder(tmp_path, floor_scale=16, attn_scale=0.5)
    monkeypatch.setattr(positions, "far_entry", lambda model_type: entry)
    result = measure.audit_folder(folder, ("eager",))
    assert result.verdict == "mismatch" and "factor at far positions" in result.findings[-1], result.findings
    assert result.far_positions["verdict"] == "differs"
    # at the fixed far positions alone the two formulas agree within the tolerance (p + 1 and p share their floor
    # at each of them): the stepping positions are what shows it
    import transformers

    model = transformers.AutoModel.from_config(transformers.AutoConfig.from_pretrained(folder)).eval()
    assert positions.measure(entry, positions.POSITIONS, model=model)["verdict"] == "agrees"


def test_positions_a_cache_cannot_hold_are_named_and_leave_it_incomplete(tmp_path, monkeypatch):
    monkeypatch.setattr(positions, "CACHE_BUDGET", 10**6)  # about 8,000 masked tokens of the tiny model
    result = measure.audit_folder(llama4_folder(tmp_path, floor_scale=16, attn_scale=0.5), ("eager",))
    assert result.verdict == "incomplete" and 1_048_576 in result.far_positions["not_measured_positions"]
    assert "exceeds" in result.findings[-1]


def test_a_composite_folder_is_judged_at_far_positions_on_its_text_model(tmp_path):
    """A Llama 4 composite (model_type llama4) holds its temperature in the text model's config (llama4_text): the
    far positions are measured on that part, against its own floor_scale and attn_scale."""
    from attnscale.audit import families

    config = families.whole_config("llama4")
    config.text_config.attn_temperature_tuning, config.text_config.floor_scale = True, 16
    config.text_config.attn_scale = 0.5
    config.save_pretrained(tmp_path)
    result = measure.audit_folder(str(tmp_path), ("eager",))
    far = result.far_positions
    assert far["verdict"] == "agrees" and {14, 15} <= set(far["positions"]), far.get("reason")
    assert any(abs(low - 1) > 0.1 for low, _ in far["measured"].values())  # the temperature was on, and read


def phimoe_longrope_folder(tmp_path, short_mscale: float, long_mscale: float) -> str:
    from attnscale.audit import families

    config = families.tiny_config("phimoe")
    half = config.hidden_size // config.num_attention_heads // 2
    config.rope_parameters = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * half,
                              "long_factor": [2.0] * half, "short_mscale": short_mscale, "long_mscale": long_mscale,
                              "original_max_position_embeddings": 1024}
    config.max_position_embeddings = 131072
    config.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("short_mscale", [1.0, 1.1])
def test_a_factor_set_by_the_whole_batch_is_measured_one_position_a_pass(tmp_path, monkeypatch, short_mscale):
    """Phi-MoE's rotary multiplies cos and sin by long_mscale once the batch's largest position id passes
    original_max_position_embeddings, else short_mscale, and discards LongRoPE's attention factor: the far designs
    run in a pass of their own, and the declaration follows the code (short_mscale^2 at position 0), not the RoPE
    type's attention factor (0.425 here)."""
    folder = phimoe_longrope_folder(tmp_path, short_mscale, 1.25)
    result = measure.audit_folder(folder, ("eager",))
    row = result.layers[0]
    path = row.backends["eager"].path
    assert result.verdict == "ok" and "BATCH_MSCALE" in row.declared["rules"], result.findings
    assert path["factor"] == pytest.approx(0.25 * short_mscale**2, rel=1e-4)
    assert path["factor_far"] == pytest.approx(0.25 * 1.25**2, rel=1e-4)
    monkeypatch.setattr(measure, "reads_batch_maximum", lambda model: False)  # the designs in one batch, as before
    mixed = measure.audit_folder(folder, ("eager",))
    assert mixed.layers[0].backends["eager"].path["factor"] == pytest.approx(0.25 * 1.25**2, rel=1e-4)
    assert mixed.verdict == "mismatch"
