"""Intercepting the attention function of a transformers model, under any backend.

transformers 5 attention modules compute q, k, v and hand them to one function: the
module file's own ``eager_attention_forward`` under ``eager``, or the function that
``ALL_ATTENTION_FUNCTIONS`` (an ``AttentionInterface``) registers for the backend
(``sdpa``, ``flex_attention``, ...).  :func:`intercept_attention` swaps that function for
a wrapper for the length of a ``with`` block: every call is recorded as an
:class:`AttentionCall` (the module, the real q, k, v, mask and keyword arguments, and the
function itself, so that a probe can call it again on designed tensors), and the wrapper
can change the factor or the tensors before the real call.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import scaling
from ..errors import UserError


class NoEagerFunction(UserError):
    """The model's modeling files hold no eager_attention_forward to intercept: its attention is computed inline."""


@dataclass
class AttentionCall:
    """One attention call seen inside a model: the real tensors and the function that ran."""

    name: str
    module: torch.nn.Module
    function: Callable
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: object
    kwargs: dict
    backend: str = "eager"
    args: tuple = ()
    weights: torch.Tensor | None = None
    output: torch.Tensor | None = field(default=None, repr=False)

    @property
    def eager(self) -> Callable:
        return self.function

    def call(self, query, key, value, **overrides):
        """The same attention function on other tensors, with this call's mask and arguments."""
        return self.function(self.module, query, key, value, self.mask, *self.args, **{**self.kwargs, **overrides})


def _eager_modules(model: torch.nn.Module):
    """The Python modules that define the model's attention classes and an eager_attention_forward."""
    found = {}
    for sub in model.modules():
        py_module = sys.modules.get(type(sub).__module__)
        if py_module is not None and callable(getattr(py_module, "eager_attention_forward", None)):
            found[py_module.__name__] = py_module
    return list(found.values())


def _interfaces(model: torch.nn.Module):
    """Every AttentionInterface the model's modules look functions up in (the global one and local ones)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    found = {id(ALL_ATTENTION_FUNCTIONS): ALL_ATTENTION_FUNCTIONS}
    for sub in model.modules():
        local = getattr(sys.modules.get(type(sub).__module__), "ALL_ATTENTION_FUNCTIONS", None)
        if local is not None and hasattr(local, "_local_mapping"):
            found[id(local)] = local
    return list(found.values())


def registered_backends() -> list[str]:
    """The attention implementations the installed transformers registers, plus eager."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ["eager", *sorted(k for k in ALL_ATTENTION_FUNCTIONS.valid_keys() if k != "paged|eager")]


def attn_implementation(model) -> str | None:
    return getattr(model.config, "_attn_implementation", None)


BACKBONE = "backbone_config"  # a detector's image backbone (ResNet, HGNetV2, Swin)


def set_attn_implementation(model, implementation: str) -> None:
    """Switch the model to ``implementation``; raises ValueError when the family does not accept it."""
    if attn_implementation(model) == implementation:
        return
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation(implementation)
        except (ValueError, ImportError, KeyError) as error:
            # A detector whose convolutional backbone has no attention refuses every backend but
            # eager for the whole model: the backbone keeps its own, the attention layers switch.
            backbone = getattr(model.config, BACKBONE, None)
            try:
                if backbone is None or implementation == "eager":
                    raise error
                model.set_attn_implementation({"": implementation, BACKBONE: backbone._attn_implementation})
            except (ValueError, ImportError, KeyError):
                text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise UserError(f"{type(model).__name__} does not accept attn_implementation={implementation!r}: "
                                f"{text}") from None
    else:
        model.config._attn_implementation = implementation
    if attn_implementation(model) != implementation:
        raise UserError(f"{type(model).__name__} kept attn_implementation={attn_implementation(model)!r} when asked "
                         f"for {implementation!r}")


Rewrite = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], tuple]


@contextlib.contextmanager
def intercept_attention(model: torch.nn.Module, on_call: Callable[[AttentionCall], None] | None = None,
                        scale: str | None = None, backend: str = "eager", rewrite: Rewrite | None = None,
                        keep_weights: bool = True):
    """Route every attention call of ``model`` under ``backend`` through a wrapper; yields the
    list of recorded calls.

    ``on_call(call)`` runs after the real call (it can read the weights); ``scale``, a fixed
    rule spec, replaces the factor the model passes by the rule's factor for the head
    dimension; ``rewrite(module, q, k, v) -> (q, k, v)`` replaces the tensors before the
    real call (the call records the tensors the model computed); ``keep_weights=False``: the calls keep no
    attention weights (what reads only q, k and the output holds one logits-sized tensor a call less).
    """
    rule = None if scale is None else scaling.parse(scale)
    if rule is not None and rule.kind != "fixed":
        raise UserError(f"a counterfactual scale must be a fixed rule (sqrt, inv_d, none, const:C, power:A), got {scale!r}")
    names = {id(m): name for name, m in model.named_modules()}
    calls: list[AttentionCall] = []

    def make_wrapper(function):
        def wrapper(module, query, key, value, attention_mask, *args, **kwargs):
            if rule is not None:
                kwargs = {**kwargs, "scaling": rule.factor(query.shape[-1])}
            real = (query, key, value) if rewrite is None else rewrite(module, query, key, value)
            output = function(module, *real, attention_mask, *args, **kwargs)
            first = output[0] if isinstance(output, tuple) else output
            call = AttentionCall(names.get(id(module), type(module).__name__), module, function, query, key, value,
                                 attention_mask, dict(kwargs), backend, tuple(args),
                                 weights=output[1] if keep_weights and isinstance(output, tuple) and len(output) > 1
                                 else None,
                                 output=first)
            calls.append(call)
            if on_call is not None:
                on_call(call)
            return output

        return wrapper

    previous = attn_implementation(model)
    set_attn_implementation(model, backend)
    patched: list[tuple[object, str, object, bool]] = []  # (owner, key, original, was_local)
    try:
        if backend == "eager":
            modules = _eager_modules(model)
            if not modules:
                raise NoEagerFunction(
                    f"{type(model).__name__} has no transformers eager_attention_forward to probe; supported: models "
                    "whose attention goes through it (BERT, GPT-2, T5, Llama and most others in transformers 5)")
            for py_module in modules:
                original = py_module.eager_attention_forward
                patched.append((py_module, "eager_attention_forward", original, False))
                py_module.eager_attention_forward = make_wrapper(original)
        else:
            for interface in _interfaces(model):
                if backend not in interface:
                    raise UserError(f"unknown attention backend {backend!r}; accepted: {', '.join(registered_backends())}")
                was_local = backend in interface._local_mapping
                original = interface[backend]
                patched.append((interface, backend, original, was_local))
                interface[backend] = make_wrapper(original)
        yield calls
    finally:
        for owner, key, original, was_local in reversed(patched):
            if isinstance(owner, type(sys)):
                setattr(owner, key, original)
            elif was_local:
                owner[key] = original
            else:
                del owner[key]
        if previous is not None:
            set_attn_implementation(model, previous)


def model_inputs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **extra) -> dict:
    inputs = {"input_ids": input_ids, **extra}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask
    if getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = input_ids
    return inputs


def run_attention(model, inputs: dict, scale: str | None = None, on_call=None, backend: str = "eager",
                  rewrite: Rewrite | None = None, keep_weights: bool = True):
    """One forward pass with every attention call recorded; returns (outputs, calls)."""
    with torch.no_grad(), intercept_attention(model, on_call=on_call, scale=scale, backend=backend,
                                              rewrite=rewrite, keep_weights=keep_weights) as calls:
        outputs = model(**inputs)
    if not calls:
        raise UserError(f"{type(model).__name__} ran no {backend} attention call; its attention cannot be probed")
    return outputs, calls


def final_hidden(outputs) -> torch.Tensor:
    hidden = getattr(outputs, "last_hidden_state", None)
    if hidden is None and isinstance(outputs, dict):  # its first tensor (a video tracker's first field is its ids)
        hidden = next((value for value in outputs.values() if isinstance(value, torch.Tensor)), None)
    return hidden if hidden is not None else outputs[0]


@contextlib.contextmanager
def uncompiled_flex():
    """Run transformers' flex_attention path through torch's flex_attention without torch.compile.

    transformers compiles flex attention and its block masks on first use: on a CPU that
    takes about 35 s per new shape, longer than the whole audit may; even torch's own
    uncompiled path traces each new score_mod with dynamo (seconds each).  torch's debug
    switch runs the flex operator's dense reference directly instead.  The audit measures
    what transformers passes to flex (scale, score_mod, masks), which the reference
    computes by the same definition (its parity with eager is checked like any backend's)."""
    try:
        from torch.nn.attention import flex_attention as torch_flex
        from transformers import masking_utils
        from transformers.integrations import flex_attention as hf_flex
    except ImportError:
        yield
        return

    def uncompiled(query, key, value, training=False, **kwargs):
        return torch_flex.flex_attention(query, key, value, **kwargs)

    def uncompiled_mask(*args, _compile=False, **kwargs):
        return torch_flex.create_block_mask(*args, **kwargs)

    saved = (hf_flex.compile_friendly_flex_attention, getattr(masking_utils, "create_block_mask", None),
             torch_flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG)
    hf_flex.compile_friendly_flex_attention = uncompiled
    torch_flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    if saved[1] is not None:
        masking_utils.create_block_mask = uncompiled_mask
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_flex.compile_friendly_flex_attention = saved[0]
        torch_flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = saved[2]
        if saved[1] is not None:
            masking_utils.create_block_mask = saved[1]
