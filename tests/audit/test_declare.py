"""The declare stage for normalised q and k: the logit of a cosine-1 pair a config declares (its factor times the
lengths its norms give a vector times the multipliers its code applies after them), judged like the factor."""

from __future__ import annotations

import pytest
import torch

from attnscale.audit import measure, qk_norm
from attnscale.audit.verdicts import family_row


class ScaledRMSNorm(torch.nn.Module):
    def __init__(self, width: int, weight: float, offset: float = 0.0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((width,), weight))
        self.offset = offset

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * (self.offset + self.weight)


@pytest.mark.parametrize("norm, expected", [
    (ScaledRMSNorm(16, 1.0), 1.0),  # an RMSNorm at init
    (ScaledRMSNorm(16, 2.5), 2.5),  # a learned weight
    (ScaledRMSNorm(16, 0.0, offset=1.0), 1.0),  # Gemma's 1 + w, w = 0 at init
    (torch.nn.LayerNorm(16), 1.0),  # a LayerNorm keeps the mean-0 probe
    (torch.nn.RMSNorm(64), 1.0),  # a norm over every head at once (OLMoE's), as wide as its weight
])
def test_norm_gain_closed_forms(norm, expected):
    assert qk_norm.gain(norm, 16) == pytest.approx(expected, rel=1e-5)


def rows(result):
    return [row for row in result.layers if row["backends"]["eager"]["path"]["form"] == "q and k normalised"]


def test_a_multiplier_after_the_norm_is_declared_and_judged():
    """Muse Spark multiplies the normalised q by qk_scale_factor: the config declares 0.25 x 4 x 4 x 5.473, the
    reading agrees within the norms' eps; at another qk_scale_factor both move together."""
    for factor in (None, 2.0):
        overrides = {} if factor is None else {"qk_scale_factor": factor}
        result = measure.audit_family("muse_spark_text", backends=("eager",), **overrides)
        expected = 0.25 * 16 * (factor or 5.4730064863875)
        assert rows(result), "no layer read as QK-norm"
        for row in rows(result):
            assert row["declared"]["cosine_temperature"] == pytest.approx(expected, rel=1e-4)
            assert "qk_scale_factor" in row["declared"]["cosine_from"]
            assert row["backends"]["eager"]["path"]["cosine_temperature"] == pytest.approx(expected, rel=qk_norm.COSINE_TOL)
        assert result.verdict == "ok", result.findings
        assert "declared" in family_row(result, ("eager",))["non-linearity"]


def test_a_multiplier_the_audit_does_not_know_is_a_mismatch(monkeypatch):
    """Without its entry in the multipliers' data, Muse Spark's qk_scale_factor is a logit the config's factor does
    not declare: the verdict says so, with both numbers."""
    monkeypatch.setattr(qk_norm, "MULTIPLIERS", ())
    result = measure.audit_family("muse_spark_text", backends=("eager",))
    assert result.verdict == "mismatch"
    assert any("logit of a cosine-1 pair 21.85, the config implies 4 (factor 0.25" in finding for finding in result.findings), \
        result.findings


def test_every_multiplier_quotes_a_line_of_the_installed_source():
    from attnscale.audit.declared import ROUNDINGS, family_source

    sources = {"qk_scale_factor": family_source("muse_spark") + family_source("muse_glimmer"),
               "(sqk x sqk_scale)^2": family_source("dory")}
    for multiplier in qk_norm.MULTIPLIERS:
        assert multiplier.quote in sources[multiplier.name]
    for rounding in ROUNDINGS:
        assert rounding.quote in family_source("kolibri1_1")


def test_rounded_keys_are_named_and_their_path_not_judged():
    """Kolibri 1.1's sparse layers round keys to NVFP4 before the product: the cosine-1 logit there reads the
    rounding (about 3% off), named beside the row and not judged; its dense layer is judged."""
    result = measure.audit_family("kolibri1_1", backends=("eager",))
    sparse = [row for row in result.layers if "keys rounded to" in row["declared"]["fields"]]
    dense = [row for row in rows(result) if row not in sparse]
    assert sparse and dense
    assert result.verdict == "ok", result.findings
    assert any(abs(row["backends"]["eager"]["path"]["cosine_temperature"] / row["declared"]["cosine_temperature"] - 1)
               > qk_norm.COSINE_TOL for row in sparse)
    assert "rounded to NVFP4" in family_row(result, ("eager",))["other mechanisms"]


def test_a_learned_multiplier_after_the_norm_is_read_from_the_layer():
    """Dory (nGPT) normalises q and k to length 1 and multiplies q by (sqk x sqk_scale)^2, head_dim at init: the
    config declares 0.25 x 1 x 1 x 16 = 4; a trained sqk (doubled on the first channel) moves both to 16."""
    for first_channel in (1.0, 2.0):
        model = measure.tiny_model("dory", 0, {})
        for module in model.modules():
            if hasattr(module, "sqk"):
                with torch.no_grad():
                    module.sqk.view(-1, module.head_dim)[:, 0] *= first_channel
        result = measure.audit_model(model, "dory", ("eager",))
        for row in rows(result):
            assert row["declared"]["cosine_temperature"] == pytest.approx(4.0 * first_channel ** 2, rel=1e-6)
            assert row["backends"]["eager"]["path"]["cosine_temperature"] == pytest.approx(4.0 * first_channel ** 2,
                                                                                           rel=qk_norm.COSINE_TOL)
        assert rows(result) and result.verdict == "ok", result.findings
