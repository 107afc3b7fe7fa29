"""Peak tensor memory: exact byte counts on computations whose allocations are known."""

import torch

from attnscale.attention import attention
from attnscale.peak_memory import peak_tensor_bytes


def test_counts_live_tensors_and_frees_them():
    def two_then_one(x):
        a = x * 2           # 1000 floats
        b = torch.cat([a, a])  # 2000 floats, a still alive: 3000 floats at once
        del a
        return b[:10].sum()  # a view of b (no new bytes) and a scalar

    _, peak = peak_tensor_bytes(two_then_one, torch.ones(1000))
    assert peak == 3000 * 4  # the 4-byte sum comes after a is freed


def test_inputs_and_their_views_are_not_counted():
    x = torch.ones(4096, dtype=torch.float64)
    _, peak = peak_tensor_bytes(lambda t: t[100:200].view(10, 10).t(), x)
    assert peak == 0
    _, peak = peak_tensor_bytes(lambda t: t.mul_(2), x)  # in place: no new storage
    assert peak == 0


def test_dense_attention_holds_the_score_matrix_and_online_does_not():
    q, k, v = (torch.randn(1, 1, 512, 16) for _ in range(3))
    _, dense = peak_tensor_bytes(lambda *t: attention(*t, impl="stable"), q, k, v)
    _, online = peak_tensor_bytes(lambda *t: attention(*t, impl="online", block_size=64), q, k, v)
    assert dense >= 512 * 512 * 4 > 8 * online
