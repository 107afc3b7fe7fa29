"""The judge stage: verdicts and findings from the factors read and declared (verdicts.py), on constructed
results and on audited families."""

from __future__ import annotations

import pytest

from attnscale.audit import verdicts
from attnscale.audit import measure as audit
from attnscale.audit.record import BackendLayer, LayerReading, Readings

from audit_helpers import FACTOR_REL, capped_kernel, eager_layers


def test_gpt_neo_applies_no_factor_and_is_a_mismatch():
    """GPT-Neo computes attention inline, with no factor: read from its attention weights."""
    result = audit.audit_family("gpt_neo", ("eager",))
    assert result.verdict == "mismatch"
    for entry in eager_layers(result):
        assert entry.path["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
    assert any("config implies 0.25" in finding for finding in result.findings)


def test_callable_checked_against_a_family():
    reference = audit.audit_family("gemma2", ("eager",))
    same = audit.audit_callable(capped_kernel(256**-0.5, cap=50.0), 16, reference=reference)
    assert same.verdict == "ok", same.findings
    no_cap = audit.audit_callable(capped_kernel(256**-0.5), 16, reference=reference)
    assert no_cap.verdict == "mismatch" and "soft cap" in no_cap.findings[0]
    wrong = audit.audit_callable(capped_kernel(16**-0.5, cap=50.0), 16, reference=reference)
    assert wrong.verdict == "mismatch" and "factor" in wrong.findings[0]


def constructed(function_factor=0.25, path_factor=0.25, sdpa_factor=0.25, parity=1e-7, cap=None, declared_cap=None,
                outputs=(), declared=None, paths=True, inputs=None) -> Readings:
    """One layer's readings under eager and sdpa, as the read stage makes them: ``outputs`` names the backends whose
    output is not finite, ``declared`` adds to the declaration, ``paths=False`` leaves the whole paths unread."""
    def entry(factor, path):
        return BackendLayer({"factor": factor, "cap": cap, "nonlinearity": "soft cap" if cap else "linear"},
                            {"factor": path, "factor_last": path, "form": "linear", "per_query": [float("nan"), path],
                             "query_spread": 0.0, "factor_far": path, "factor_longer": path} if paths else None)

    passes = {"eager": {"accepted": True, "parity": None}, "sdpa": {"accepted": True, "parity": parity}}
    passes = {backend: {**info, "output": verdicts.NOT_FINITE} if backend in outputs else info
              for backend, info in passes.items()}
    layer = LayerReading(name="layers.0", layer=0, d_k=16,
                         declared={"function": 0.25, "path_first": 0.25, "path_last": 0.25, "cap": declared_cap,
                                   **(declared or {})},
                         backends={"eager": entry(function_factor, path_factor), "sdpa": entry(sdpa_factor, sdpa_factor)},
                         inputs=inputs)
    return Readings("constructed", "Model", passes, [layer])


@pytest.mark.parametrize("changes, verdict", [
    ({}, "ok"),
    ({"function_factor": 1 / 16, "path_factor": 1 / 16, "sdpa_factor": 1 / 16}, "mismatch"),
    ({"path_factor": 0.2501}, "ok"),  # within 0.1%
    ({"path_factor": 0.2504, "function_factor": 0.2504, "sdpa_factor": 0.2504}, "mismatch"),
    ({"sdpa_factor": 1.0}, "backend disagreement"),
    ({"parity": 0.01}, "backend disagreement"),
    ({"cap": 50.0, "declared_cap": 50.0}, "ok"),
    ({"cap": 50.0, "declared_cap": 30.0}, "mismatch"),
    ({"function_factor": float("nan"), "path_factor": float("nan")}, "not measured"),
])
def test_verdict_rules(changes, verdict):
    judgement = verdicts.judge(constructed(**changes))
    assert judgement.verdict == verdict, judgement.findings


def test_an_output_that_is_not_finite_is_never_ok():
    """The factor read on designed inputs can be right while the model's own pass is NaN (an odd position config):
    under eager that fails the family; under another backend alone it is one disagreement, not a factor of 0 and
    a mask that differs read off the NaN pass."""
    both = verdicts.judge(constructed(outputs=("eager", "sdpa")))
    assert both.verdict == "mismatch" and both.findings[-1].startswith("eager output is not finite"), both.findings
    sdpa_only = verdicts.judge(constructed(sdpa_factor=0.0, outputs=("sdpa",)))
    assert sdpa_only.verdict == "backend disagreement"
    assert sdpa_only.findings == [f for f in sdpa_only.findings if "not finite" in f] and len(sdpa_only.findings) == 1


def test_qk_norm_read_from_a_layers_own_q_and_k_is_held_to_its_declared_logit():
    """Where the whole path cannot be driven, QK-norm is found from the layer's own q and k; the logit of a cosine-1
    pair (the function's factor times their lengths) is then judged against the one its norms declare, and a layer
    with no norm module to declare one leaves the family incomplete, never ok."""
    def qk_normed(read: float, declared):
        return verdicts.judge(constructed(paths=False, inputs={"normalised": ["q", "k"], "cosine_temperature": read},
                                          declared={"cosine_temperature": declared,
                                                    "cosine_from": "factor 0.25 x |q| 4 x |k| 4"}))

    assert qk_normed(4.0, 4.0).verdict == "ok"
    wrong = qk_normed(8.0, 4.0)
    assert wrong.verdict == "mismatch" and "logit of a cosine-1 pair 8" in wrong.findings[0]
    unknown = qk_normed(4.0, None)
    assert unknown.verdict == "incomplete" and "no norm module found" in unknown.findings[0]


@pytest.mark.parametrize("family, layers", [("deepseek_v4", 2), ("gemma3n_text", 2)])
def test_qk_norm_layers_without_a_whole_path_get_a_declared_logit(family, layers):
    """DeepSeek V4's q_b_norm and kv_norm; Gemma 3n's kv-shared layers, whose keys (and k norm) are the storing
    layer's: each read from the layer's own q and k, and declared."""
    result = audit.audit_family(family, ("eager",))
    read = [row for row in result.layers if (row.inputs or {}).get("cosine_temperature") is not None]
    assert len(read) == layers and result.verdict == "ok", result.findings
    for row in read:
        assert row.inputs["cosine_temperature"] == pytest.approx(row.declared["cosine_temperature"], rel=1e-2)


def test_a_factor_of_zero_is_never_ok_even_where_declared():
    """A key multiplier of 0 (every logit 0, attention uniform) agrees with a config that declares it, and is still
    a finding: such attention cannot focus."""
    zero = verdicts.judge(constructed(function_factor=0.0, path_factor=0.0, sdpa_factor=0.0,
                                      declared={"function": 0.0, "path_first": 0.0, "path_last": 0.0}))
    assert zero.verdict == "mismatch" and "attention is uniform" in zero.findings[0]
