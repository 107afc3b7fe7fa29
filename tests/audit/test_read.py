"""The read stage: where the designed q and k are written (a projection's layout) and what reaches the product.

Each case is a config folder of a shape the families' tiny defaults do not take, audited as a user's folder is."""

from __future__ import annotations

import pytest

from attnscale.audit.measure import audit_folder
from attnscale.audit.verdicts import family_row


def eager_paths(result) -> list[dict]:
    return [row["backends"]["eager"]["path"] for row in result.layers]


def test_falcon_new_decoder_reads_the_grouped_fused_layout(tmp_path):
    """Falcon's new decoder architecture packs [q of each head in the group .. | k | v] per key/value group into
    one projection: the audit writes its designs there and reads 1/sqrt(head_dim) on the whole path."""
    from transformers import FalconConfig

    FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                 new_decoder_architecture=True, vocab_size=128).save_pretrained(tmp_path)
    result = audit_folder(str(tmp_path), backends=("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        for backend in ("eager", "sdpa"):
            path = row["backends"][backend]["path"]
            assert path["layout"] == "fused per key/value group [q..|k|v]"
            assert path["form"] == "linear"
            assert path["factor"] == pytest.approx(16 ** -0.5, rel=1e-5)


def olmoe_folder(folder, clip):
    from transformers import OlmoeConfig

    OlmoeConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                intermediate_size=64, vocab_size=128, num_experts=4, num_experts_per_tok=2,
                clip_qkv=clip).save_pretrained(folder)
    return str(folder)


def test_a_clip_after_qk_norm_leaves_the_designs_alone(tmp_path):
    """OLMoE normalises q and k (RMSNorm, weight 1) and then clips them: the designs are spread over every
    coordinate, so the norm leaves each at 1, inside a clip of 1.5, and the cosine-1 pair reads
    head_dim^-0.5 x |q| |k| = 0.25 x 4 x 4 = 4 (the norm's eps moves it by under 0.5% at the designs' size),
    as without a clip; a single coordinate would be normalised to 4 and cut to 1.5 (reading 0.5625)."""
    clipped = audit_folder(olmoe_folder(tmp_path / "clip", 1.5), backends=("eager",))
    unclipped = audit_folder(olmoe_folder(tmp_path / "none", None), backends=("eager",))
    for path, free in zip(eager_paths(clipped), eager_paths(unclipped)):
        assert path["form"] == "q and k normalised"
        assert path["cosine_temperature"] == pytest.approx(4.0, rel=5e-3)
        assert path["cosine_temperature"] == pytest.approx(free["cosine_temperature"], rel=5e-3)
        assert path["designed_rms"] == pytest.approx(1.0, rel=1e-3)
    assert "inside the clip" in family_row(clipped, ("eager",))["other mechanisms"]


def test_a_clip_the_designs_reach_is_named_and_not_judged(tmp_path):
    """A clip below the norm's output (0.8 < 1): every designed coordinate is cut to 0.8, the reading is the
    clip's (0.25 x 16 x 0.8^2 = 2.56), and the row says so instead of judging it."""
    result = audit_folder(olmoe_folder(tmp_path, 0.8), backends=("eager",))
    for path in eager_paths(result):
        assert path["designed_rms"] == pytest.approx(0.8, rel=1e-6)
        assert path["cosine_temperature"] == pytest.approx(0.25 * 16 * 0.8 ** 2, rel=1e-3)
    assert "at the clip, whole path not judged" in family_row(result, ("eager",))["other mechanisms"]
    assert not any("cosine" in finding for finding in result.findings)


def test_dense_designs_read_the_same_factor_as_single_coordinate_ones():
    """q.k is the same along any direction of the same length: the dense designs and the single-coordinate
    ones give one q.k per design (the closed form m x g x unit)."""
    import torch

    from attnscale.audit.whole_path import DESIGNS, head_vectors

    for dense in (False, True):
        q = head_vectors(DESIGNS, 3, 16, 0.5, "q", torch.float64, 0.25, dense)
        k = head_vectors(DESIGNS, 3, 16, 0.5, "k", torch.float64, 0.25, dense)
        products = torch.einsum("btd,bsd->bts", q, k)[:, 0, :2]
        for design, (k0, k1) in zip(DESIGNS, products.tolist()):
            assert k0 - k1 == pytest.approx(design.q_scale * 0.25 * design.gap * 0.5, abs=1e-15)
        if dense:  # every coordinate of a designed vector the same size: no coordinate stands out after a norm
            sizes = torch.cat([q, k], dim=1).abs()
            assert torch.equal(sizes, sizes.amax(dim=-1, keepdim=True).expand_as(sizes))
