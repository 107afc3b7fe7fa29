"""The audit at far positions: each installed family's position-dependent factor, measured through its whole
forward pass at positions up to 1,048,576, against the formula written here from the installed source."""

from __future__ import annotations

import dataclasses
import math

import pytest

from attnscale.audit import positions as P
from attnscale.lab import audit as audit_lab


@pytest.fixture(scope="module")
def rows():
    return {row["family"]: row for row in P.audit_positions()}


@pytest.mark.parametrize("entry", P.families(), ids=lambda e: e.family)
def test_every_formula_quotes_a_line_of_the_installed_source(entry):
    line = P.source_line(entry)
    assert line is not None and line.startswith(f"models/{entry.module}:") and entry.quote in line


def test_every_family_applies_what_its_config_declares_at_far_positions(rows):
    assert set(rows) == {e.family for e in P.families()}
    for row in rows.values():
        assert row["verdict"] == "agrees", row
        assert row["max_error"] <= P.TOLERANCE and row["layers_scaled"]


def test_far_factors_against_closed_forms_written_here(rows):
    # Llama 4 (floor_scale 8192, attn_scale 0.1), the query at p counts p + 1 tokens
    llama4 = rows["llama4_text"]["measured"]
    for p in P.POSITIONS:
        assert llama4[str(p)][1] == pytest.approx(1 + 0.1 * math.log(1 + (p + 1) // 8192), rel=1e-6)
    # Ministral 3: beta 0.1, original length 16384, read from position_ids
    ministral = rows["ministral3"]["measured"]
    assert ministral["8192"] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert ministral["1048576"][0] == pytest.approx(1 + 0.1 * math.log(1 + 64), rel=1e-6)
    # Beam: (1 + (p + 1) / 2048)^0.1 over its value at p = 0
    beam = rows["beam"]["measured"]["65536"][1]
    assert beam == pytest.approx((1 + 65537 / 2048) ** 0.1 / (1 + 1 / 2048) ** 0.1, rel=1e-6)


def test_a_threshold_moved_in_the_config_moves_the_measured_factor():
    entry = P.with_sizes(P.family_named("llama4_text"), floor_scale=4, attn_scale=0.3)
    row = P.measure(entry, positions=(2, 3, 7, 40))
    assert row["verdict"] == "agrees"
    for p in (2, 3, 7, 40):
        assert row["measured"][str(p)][1] == pytest.approx(1 + 0.3 * math.log(1 + (p + 1) // 4), rel=1e-6)


def test_the_position_must_come_through_the_input_the_family_reads():
    # Llama 4 counts the tokens in its cache; the same token given only a far position_ids keeps factor 1
    entry = dataclasses.replace(P.family_named("llama4_text"), reads="position_ids")
    row = P.measure(entry, positions=(65536,))
    assert row["verdict"] == "differs"
    assert row["measured"]["65536"] == pytest.approx([1.0, 1.0], abs=1e-6)


def test_a_factor_the_code_does_not_apply_is_caught(monkeypatch):
    import torch
    from transformers.models.ministral3 import modeling_ministral3

    monkeypatch.setattr(modeling_ministral3, "get_llama_4_attn_scale",
                        lambda positions, beta, length: torch.ones_like(positions, dtype=torch.float32)[:, None, :, None])
    row = P.measure(P.family_named("ministral3"), positions=(1, 1_048_576))
    assert row["verdict"] == "differs" and row["max_error"] == pytest.approx(1 - 1 / (1 + 0.1 * math.log(65)), rel=1e-5)


def test_a_learned_factor_is_read_per_head_from_the_layer():
    row = P.measure(P.family_named("mistral_large4_text"), positions=(1, 65536))
    low, high = row["measured"]["65536"]
    assert row["verdict"] == "agrees" and high - low > 0.1  # heads differ: the parameters, not a constant


def test_a_family_not_installed_is_not_measured_with_the_reason():
    entry = dataclasses.replace(P.family_named("beam"), config_class="NoSuchConfig")
    row = P.measure(entry)
    assert row["verdict"] == "not measured" and "NoSuchConfig" in row["reason"]
    assert P.table([row])[0]["p = 8,192"] == ""


def test_unknown_family_names_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: llama4_text"):
        P.family_named("llama")


def test_the_table_and_the_audit_lab_carry_every_family(rows):
    table = P.table(list(rows.values()))
    assert [line["family"] for line in table] == [e.family for e in P.families()]
    assert {f"p = {p:,}" for p in P.POSITIONS} <= set(table[0])
    inkling = next(line for line in table if line["family"] == "inkling_text")
    assert "log_scaling_n_floor = 8192" in inkling["notes"]
    result = {"transformers": "x", "families_audited": [], "rows": [], "families": [], "far_positions": list(rows.values())}
    assert any(name.startswith("factor at far positions") for name in audit_lab.tables(result))


def test_transformers_notes_on_the_tiny_configs_stay_off_the_terminal():
    """Its notes (an eos id beyond a tiny vocabulary, a kernel's fallback) say nothing of the factor, and the
    report's terminal shows none of them.  In a fresh process: transformers says each only once per process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from attnscale.audit import positions as P; "
                           "print(sum(r['verdict'] == 'agrees' for r in P.audit_positions()))"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(len(P.families())) and "[transformers]" not in done.stderr, done.stderr[-2000:]
