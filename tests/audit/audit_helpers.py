"""Helpers and constants the audit's stage tests share (imported as ``from audit_helpers import ...``: pytest's
default "prepend" import mode puts tests/audit on sys.path for the test modules in it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnscale.audit import verdicts

TRANSFORMERS = Path(__import__("transformers").__file__).parent
FACTOR_REL = verdicts.FACTOR_TOL  # "to 0.1%": the tolerance the audit judges with
KEY_SCALE_GEMMA4 = math.log(1 + math.e) / math.log(2)  # modeling_gemma4.py: self.k_scale


def eager_layers(result):
    return [row.backends["eager"] for row in result.layers]


def capped_kernel(factor, cap=None, log_n=False):
    def attn(q, k, v, mask=None):
        logits = (q @ k.transpose(-1, -2)) * factor
        if log_n:
            logits = logits * math.log(k.shape[-2])
        if cap:
            logits = cap * torch.tanh(logits / cap)
        return torch.softmax(logits, dim=-1) @ v

    return attn


def run_cli(args, capsys):
    from attnscale.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def assert_blocks_read_at_their_width(row, model, class_name: str) -> dict:
    """Every ``class_name`` block of ``model`` (1 x 1 Conv2d q and k, one head as wide as its channels) is a
    layer of the audit ``row``, read at int(channels)^-0.5 as its code scales; their channels by name."""
    channels = {name: module.in_channels for name, module in model.named_modules()
                if type(module).__name__ == class_name}
    assert sorted(layer.name for layer in row.layers) == sorted(channels)
    for layer in row.layers:
        assert layer.d_k == channels[layer.name]
        assert verdicts.judged_factor(layer.backends["eager"]) == pytest.approx(channels[layer.name] ** -0.5,
                                                                                  rel=FACTOR_REL)
    return channels
