"""A training step with ScaledAttention (sqrt rule, SDPA path) against the same model whose
attention calls torch.nn.functional.scaled_dot_product_attention directly.

Both models share one set of weights and run in the same process, interleaved, so machine
load hits both alike.  Prints the median step time of each and their ratio (target: within
5%, i.e. ratio <= 1.05).

    python bench/train_step.py [--size small|medium] [--repeats 30] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from attnscale.models import ModelConfig, Transformer

SIZES = {
    "small": dict(d_model=32, n_heads=1, d_head=16, n_layers=2, seq_len=32, batch=64, vocab=84),
    "medium": dict(d_model=128, n_heads=4, d_head=32, n_layers=2, seq_len=128, batch=16, vocab=84),
}


class DirectSDPA(nn.Module):
    """Causal multi-head attention written straight on F.scaled_dot_product_attention,
    reusing a ScaledAttention's projections."""

    def __init__(self, attn):
        super().__init__()
        self.w_q, self.w_k, self.w_v, self.w_o = attn.w_q, attn.w_k, attn.w_v, attn.w_o
        self.n_heads, self.d_head = attn.n_heads, attn.d_head

    def forward(self, x):
        batch, time_, _ = x.shape
        q, k, v = (w(x).view(batch, time_, self.n_heads, self.d_head).transpose(1, 2)
                   for w in (self.w_q, self.w_k, self.w_v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.w_o(out.transpose(1, 2).reshape(batch, time_, self.n_heads * self.d_head))


def build(size: str):
    s = SIZES[size]
    config = ModelConfig(vocab_size=s["vocab"], seq_len=s["seq_len"], d_model=s["d_model"], n_layers=s["n_layers"],
                         n_heads=s["n_heads"], d_head=s["d_head"], scale="sqrt", impl="sdpa")
    ours = Transformer(config, seed=0)
    direct = copy.deepcopy(ours)
    for block in direct.blocks:
        block.attn = DirectSDPA(block.attn)
    return ours, direct, s


def step_time(model, optimiser, x, y) -> float:
    start = time.perf_counter()
    _, loss = model(x, y)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="medium")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ours, direct, s = build(args.size)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), generator=g)
    y = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), generator=g)
    with torch.no_grad():
        assert torch.allclose(ours(x)[0], direct(x)[0], atol=1e-4), "the two models must compute the same function"
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    opt_direct = torch.optim.AdamW(direct.parameters(), lr=1e-4)
    for _ in range(5):  # warm up both
        step_time(ours, opt_ours, x, y)
        step_time(direct, opt_direct, x, y)
    times_ours, times_direct = [], []
    for i in range(args.repeats):
        pair = [(ours, opt_ours, times_ours), (direct, opt_direct, times_direct)]
        for model, opt, out in (pair if i % 2 == 0 else pair[::-1]):
            out.append(step_time(model, opt, x, y))
    a, b = statistics.median(times_ours), statistics.median(times_direct)
    print(f"size {args.size} {s}, torch threads {torch.get_num_threads()}, {args.repeats} steps each")
    print(f"ScaledAttention (sqrt, sdpa): {a * 1e3:.2f} ms/step (median)")
    print(f"direct F.scaled_dot_product_attention: {b * 1e3:.2f} ms/step (median)")
    print(f"ratio ScaledAttention / direct: {a / b:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
