"""AdamW, SGD with momentum and Adafactor for parameters with a leading run axis.

Each run (a slice ``param[k]``) is updated exactly as torch.optim would update that run's
own parameter, with its own learning rate: the element-wise rules are the same arithmetic
with a per-run lr, and Adafactor's whole-tensor quantities (the parameter RMS that scales
its step, the update RMS it clips, the row/column factoring of matrices) are taken per run.
Runs of one optimiser are a contiguous range of the run axis (see
:func:`attnscale.train.spec.group_specs`); runs that are not ``active`` (diverged) are left
untouched.
"""

from __future__ import annotations

import math

import torch

from .single import ADAMW_BETAS, SGD_MOMENTUM

ADAMW_EPS = 1e-8
ADAFACTOR_BETA2_DECAY, ADAFACTOR_EPS2, ADAFACTOR_D = -0.8, 1e-3, 1.0  # torch.optim.Adafactor's defaults


def per_run(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(K,) values shaped to broadcast against a (K, ...) tensor."""
    return values.view(-1, *([1] * (like.dim() - 1)))


def rms(t: torch.Tensor) -> torch.Tensor:
    """(K,) root mean square of each run's slice."""
    return t.reshape(t.shape[0], -1).norm(dim=1) / math.sqrt(t[0].numel())


class BatchedOptimiser:
    """One optimiser per contiguous range of runs: ``ranges`` is [(kind, start, stop)]."""

    def __init__(self, params: list[torch.nn.Parameter], ranges: list[tuple[str, int, int]], weight_decay: float):
        self.params, self.ranges, self.weight_decay = params, ranges, weight_decay
        self.state: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self.steps = 0

    @torch.no_grad()
    def step(self, lr: torch.Tensor, active: torch.Tensor) -> None:
        """One update with per-run learning rates ``lr`` (K,); runs where ``active`` is False keep their values."""
        self.steps += 1
        all_active = bool(active.all())
        for i, param in enumerate(self.params):
            for kind, start, stop in self.ranges:
                rows = slice(start, stop)
                value, grad = param[rows], param.grad[rows]
                state = self.state.setdefault((i, start), {})
                new = UPDATES[kind](value.clone() if not all_active else value, grad, state, lr[rows],
                                    self.steps, self.weight_decay)
                if not all_active:
                    keep = per_run(active[rows], value)
                    value.copy_(torch.where(keep, new, value))


def adamw(param, grad, state, lr, step, weight_decay):
    beta1, beta2 = ADAMW_BETAS
    lr_b = per_run(lr, param)
    if weight_decay:
        param.mul_(1 - lr_b * weight_decay)
    if not state:
        state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(param), torch.zeros_like(param)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr_b / (1 - beta1**step)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(ADAMW_EPS)
    param.sub_(step_size * exp_avg / denom)
    return param


def sgd(param, grad, state, lr, step, weight_decay):
    if weight_decay:
        grad = grad.add(param, alpha=weight_decay)
    if "momentum" not in state:
        state["momentum"] = grad.clone()
    else:
        state["momentum"].mul_(SGD_MOMENTUM).add_(grad)
    param.sub_(per_run(lr, param) * state["momentum"])
    return param


def adafactor(param, grad, state, lr, step, weight_decay):
    eps1 = torch.finfo(param.dtype).eps
    one_minus_beta2 = step**ADAFACTOR_BETA2_DECAY
    rho = torch.clamp(lr, max=1 / math.sqrt(step))
    alpha = torch.clamp(rms(param), min=ADAFACTOR_EPS2) * rho
    if weight_decay:
        param.mul_(1 - per_run(lr, param) * weight_decay)
    if param.dim() > 2:  # a matrix per run: factored second moments
        if not state:
            state["row"] = torch.zeros_like(grad[..., :1])
            state["col"] = torch.zeros_like(grad[..., :1, :])
        state["row"].lerp_(grad.square().mean(dim=-1, keepdim=True), one_minus_beta2)
        state["col"].lerp_(grad.square().mean(dim=-2, keepdim=True), one_minus_beta2)
        estimate = state["row"] @ state["col"]
        estimate.div_(state["row"].mean(dim=-2, keepdim=True).clamp_(min=eps1))
    else:
        if not state:
            state["variance"] = torch.zeros_like(grad)
        state["variance"].lerp_(grad * grad, one_minus_beta2)
        estimate = state["variance"].clone()
    update = estimate.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
    denom = torch.clamp(rms(update) / ADAFACTOR_D, min=1.0)
    param.sub_(per_run(alpha / denom, param) * update)
    return param


UPDATES = {"adamw": adamw, "sgd": sgd, "adafactor": adafactor}
