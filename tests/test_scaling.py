import math

import pytest
import torch
from torch import nn

from attnscale import scaling


@pytest.mark.parametrize("d_k", [1, 2, 64, 128, 4096])
def test_fixed_rules_give_their_closed_forms(d_k):
    assert scaling.factor("sqrt", d_k) == pytest.approx(1 / math.sqrt(d_k))
    assert scaling.factor("inv_d", d_k) == pytest.approx(1 / d_k)
    assert scaling.factor("none", d_k) == 1.0
    assert scaling.factor("const:0.125", d_k) == 0.125
    assert scaling.factor("power:0.75", d_k) == pytest.approx(d_k**-0.75)
    assert scaling.factor("learned", d_k) == pytest.approx(1 / math.sqrt(d_k))
    assert scaling.factor("qknorm", d_k) == pytest.approx(math.sqrt(d_k))
    assert scaling.factor("qknorm:10", d_k) == 10.0


def test_power_rule_spans_none_sqrt_and_inv_d():
    for d_k in (3, 64, 1000):
        assert scaling.factor("power:0", d_k) == scaling.factor("none", d_k)
        assert scaling.factor("power:0.5", d_k) == pytest.approx(scaling.factor("sqrt", d_k))
        assert scaling.factor("power:1", d_k) == pytest.approx(scaling.factor("inv_d", d_k))


def test_rule_flags():
    assert scaling.parse("learned").learnable and not scaling.parse("sqrt").learnable
    assert scaling.parse("qknorm").normalizes_qk and scaling.parse("qknorm").learnable
    assert str(scaling.parse("power:2")) == "power:2"


@pytest.mark.parametrize("spec", ["", "sqrtt", "const", "const:", "const:0", "const:-1", "const:nan", "const:inf",
                                  "const:abc", "power:", "power:x", "power:nan", "power:inf", "qknorm:0",
                                  "qknorm:-2", "sqrt:2", "inv_d:1", 3, None])
def test_bad_specs_raise_value_error_naming_them(spec):
    with pytest.raises(ValueError) as info:
        scaling.parse(spec)
    assert "accepted" in str(info.value)
    if isinstance(spec, str) and spec:
        assert repr(spec) in str(info.value) or spec in str(info.value)


@pytest.mark.parametrize("d_k", [0, -3, 2.5, "64", True, None])
def test_bad_d_k_raises(d_k):
    with pytest.raises(ValueError, match="d_k"):
        scaling.factor("sqrt", d_k)


def test_unknown_init_scheme_raises():
    with pytest.raises(ValueError, match="accepted: torch, unit, t5, mup"):
        scaling.check_init("xavier")


def _projections(d_model, inner):
    return [nn.Linear(d_model, inner, bias=True) for _ in range(3)]


@pytest.mark.parametrize("scheme, expected", [
    ("unit", lambda dm, dk: (dm**-0.5, dm**-0.5, dm**-0.5)),
    ("t5", lambda dm, dk: ((dm * dk) ** -0.5, dm**-0.5, dm**-0.5)),
    ("mup", lambda dm, dk: (0.0, dm**-0.5, dm**-0.5)),
])
def test_init_schemes_set_the_documented_stds(scheme, expected):
    d_model, d_k = 256, 64
    w_q, w_k, w_v = _projections(d_model, 512)
    scaling.init_qkv(w_q, w_k, w_v, scheme, d_k, generator=torch.Generator().manual_seed(0))
    for layer, std in zip((w_q, w_k, w_v), expected(d_model, d_k)):
        assert layer.weight.std().item() == pytest.approx(std, rel=0.02, abs=1e-12)
        assert layer.weight.mean().abs().item() < 0.01 * max(std, 1e-3)
        assert torch.count_nonzero(layer.bias) == 0


def test_torch_init_leaves_the_default_alone():
    torch.manual_seed(1)
    layers = _projections(64, 64)
    before = [layer.weight.clone() for layer in layers]
    scaling.init_qkv(*layers, "torch", 16)
    assert all(torch.equal(a, layer.weight) for a, layer in zip(before, layers))
