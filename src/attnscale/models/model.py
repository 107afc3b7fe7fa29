"""A small pre-LN decoder Transformer built on :class:`attnscale.attention.ScaledAttention`.

As plain as nanoGPT: token + position embeddings (``pos``: learned, or none, or RoPE inside
attention; the last two run at any length), ``n_layers`` blocks of
x + attn(ln(x)) then x + mlp(ln(x)), a final LayerNorm and a linear head.  What differs:
every attention block takes a scale spec (``sqrt``, ``inv_d``, ``none``, ``const:C``, ...),
an init scheme for its q/k/v projections (``torch``, ``unit``, ``t5``, ``mup``), and a head
size ``d_head`` that need not be d_model / n_heads.

Observation points: the attention modules are named ``blocks.{i}.attn``
(:meth:`Transformer.observation_points`); ``with attnscale.capture(model) as seen:``
records their q, k, logits and probabilities, and :meth:`Transformer.attention_weights`
names each layer's W_q, W_k, W_v, W_o for gradient-norm logging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import checks, scaling
from ..attention import ScaledAttention
from ..errors import UserError

IGNORE_INDEX = -100  # target positions that carry no loss
POSITIONS = ("learned", "none", "rope")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    seq_len: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    d_head: int = 32
    scale: str = "sqrt"
    init: str = "unit"
    mlp_ratio: int = 4
    impl: str = "auto"
    pos: str = "learned"   # position information: learned embeddings (up to seq_len), none, or rope

    def __post_init__(self):
        checks.fields(self, ints=("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "d_head", "mlp_ratio"))
        scaling.parse(self.scale)
        scaling.check_init(self.init)
        checks.one_of("pos", self.pos, POSITIONS)
        if self.pos == "rope" and self.d_head % 2:
            raise UserError(f"pos 'rope' needs an even d_head, got {self.d_head}")


def targets_at(targets: torch.Tensor, rows: slice) -> torch.Tensor:
    """``targets[..., rows]`` (positions last), refused unless ``rows`` select a position and no target
    outside them is scored: a loss computed on the rows alone is then the whole pass's loss."""
    time = targets.shape[-1]
    if not range(time)[rows]:
        raise ValueError(f"rows {rows} select no position of {time}: the loss needs rows that select a position")
    outside = torch.ones(time, dtype=torch.bool, device=targets.device)
    outside[rows] = False
    if bool((targets[..., outside] != IGNORE_INDEX).any()):
        raise ValueError(f"the loss is computed on the rows {rows} only, which holds it only if no target outside "
                         "them is scored, and targets outside them carry a loss: use forward() without rows")
    return targets[..., rows]


class MLP(nn.Module):
    def __init__(self, d_model: int, mlp_ratio: int):
        super().__init__()
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.proj = nn.Linear(mlp_ratio * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, generator: torch.Generator):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = ScaledAttention(config.d_model, config.n_heads, config.d_head, scale=config.scale,
                                    init=config.init, impl=config.impl, causal=True, rope=config.pos == "rope",
                                    generator=generator)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config.d_model, config.mlp_ratio)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """Decoder-only language model: ``forward(idx, targets=None) -> (logits, loss)``."""

    def __init__(self, config: ModelConfig, seed: int = 0):
        super().__init__()
        self.config = config
        generator = torch.Generator().manual_seed(seed)
        # nn.Linear and nn.Embedding draw from the global RNG: seed it, and leave the caller's RNG untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
            if config.pos == "learned":
                self.pos_emb = nn.Embedding(config.seq_len, config.d_model)
            self.blocks = nn.ModuleList(Block(config, generator) for _ in range(config.n_layers))
            self.ln_f = nn.LayerNorm(config.d_model)
            self.head = nn.Linear(config.d_model, config.vocab_size)

    def observation_points(self) -> list[str]:
        """Names of the attention modules, as :func:`attnscale.capture` reports them."""
        return [f"blocks.{i}.attn" for i in range(self.config.n_layers)]

    def attention_weights(self) -> list[dict[str, nn.Parameter]]:
        """Per layer: {"W_q": ..., "W_k": ..., "W_v": ..., "W_o": ...}."""
        return [{"W_q": b.attn.w_q.weight, "W_k": b.attn.w_k.weight, "W_v": b.attn.w_v.weight,
                 "W_o": b.attn.w_o.weight} for b in self.blocks]

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        learned = self.config.pos == "learned"
        if idx.dim() != 2 or (learned and idx.shape[1] > self.config.seq_len):
            limit = f" with T <= seq_len={self.config.seq_len} (learned positions; pos 'none' or 'rope' run at any T)" \
                if learned else ""
            raise UserError(f"expected token ids (B, T){limit}, got {tuple(idx.shape)}")
        x = self.tok_emb(idx)
        if learned:
            x = x + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        return x

    @torch.no_grad()
    def logits_at(self, idx: torch.Tensor, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits at the positions ``rows`` only, (B, R, vocab), and the last layer's attention
        probabilities of those rows, (B, H, R, T).  Every block but the last runs on all positions (the
        last one's keys and values need them); the last runs its queries, MLP and head on the rows
        alone, which is what the forward pass computes there (for a one-layer model, R rows of
        attention, not T)."""
        return self._rows_forward(idx, rows)

    def loss_at(self, idx: torch.Tensor, targets: torch.Tensor, rows: slice) -> torch.Tensor:
        """The training loss of ``forward(idx, targets)`` computed on the positions ``rows`` alone, as
        :meth:`logits_at` does, with gradients: the same loss and gradient (up to float rounding)
        when every scored target lies in ``rows``, for a fraction of the work when they are few
        (a task that scores its last tokens only)."""
        targets = targets_at(targets, rows)
        logits, _ = self._rows_forward(idx, rows)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)

    def _rows_forward(self, idx: torch.Tensor, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(idx)
        for block in self.blocks[:-1]:
            x = block(x)
        last = self.blocks[-1]
        attended, probs = last.attn.row_output(last.ln_1(x), rows)
        x = x[:, rows] + attended
        x = x + last.mlp(last.ln_2(x))
        return self.head(self.ln_f(x)), probs

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        return logits, loss
