"""K small Transformers of one shape as one program: every parameter gets a leading run axis.

:class:`BatchedTransformer` is built from K :class:`attnscale.models.Transformer` models (so
each run keeps its own seeded initial weights) and computes all K forwards with batched
matmuls: one forward and one backward serve every run.  Each run keeps its own scale rule:
a fixed factor, a learnable temperature (``learned``) or QK-norm with a learnable gain
(``qknorm``), and a length term m(n) on each query row (fixed, or SSMax's learned s per
head); the factor and the term are folded into q before torch's fused attention, so runs
with different factors share one kernel call.  The runs of a batch share their position
scheme (learned, none or RoPE).  Nothing mixes runs: a run whose numbers turn NaN/inf cannot
change its neighbours'.

Heads wider than the model (d_head > d_model) are computed through their bilinear forms:
per head, q k^T = x (W_q^T W_k) x^T and p v W_o^T = p x (W_v^T W_o^T), with two d_model x
d_model matrices instead of projections to d_head (:meth:`BatchedTransformer.bilinear`).  It
is the same function of the same weights (autograd carries the gradients back to W_q, W_k,
W_v and W_o; only rounding differs), for a fraction of the arithmetic: the quick preset's
d_head 256 runs take a third of the time a step.  QK-norm and RoPE, which act on q and k
themselves, keep the projections.

:meth:`BatchedTransformer.unstack` gives run k back as a plain Transformer (checkpoints,
equivalence tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import dense_attention, rotate
from ..errors import UserError
from ..models import IGNORE_INDEX, Transformer, targets_at
from .spec import uses_bilinear


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Per-run nn.Linear: x (K, ..., in), weight (K, out, in), bias (K, out)."""
    runs, inner = x.shape[0], x.shape[-1]
    flat = x.reshape(runs, -1, inner)
    out = torch.bmm(flat, weight.transpose(1, 2))
    if bias is not None:
        out = out.add_(bias.unsqueeze(1))  # on CPU, baddbmm first copies the broadcast bias into the output
    return out.view(*x.shape[:-1], weight.shape[1])


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Per-run LayerNorm: x (K, B, T, D), weight and bias (K, D)."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return torch.addcmul(bias.view(shape), F.layer_norm(x, x.shape[-1:], eps=eps), weight.view(shape))


KERNELS = ("auto", "sdpa", "math")
SDPA_UP_TO_D_HEAD = 32  # CPU, 24 runs of d_model 32: at d_head 64 bmm + softmax took 257 ms a step, the fused kernel 313


def attention_kernel(kernel: str, d_head: int) -> str:
    """``sdpa`` (torch's fused kernel) or ``math`` (bmm, softmax, bmm); ``auto`` picks by d_head."""
    if kernel not in KERNELS:
        raise UserError(f"unknown attention kernel {kernel!r}; accepted: {', '.join(KERNELS)}")
    if kernel == "auto":
        return "sdpa" if d_head <= SDPA_UP_TO_D_HEAD else "math"
    return kernel


def stack_name(name: str) -> str:
    return name.replace(".", "__")


class BatchedTransformer(nn.Module):
    """``forward(idx (K, B, T), targets (K, B, T)) -> (logits (K, B, T, V), per-run losses (K,))``."""

    def __init__(self, models: list[Transformer], kernel: str = "auto", bilinear: bool | None = None):
        """``bilinear``: compute attention through each head's bilinear forms (True), through the
        projections (False), or as :func:`attnscale.train.spec.uses_bilinear` picks (None)."""
        super().__init__()
        if not models:
            raise ValueError("a batch needs at least one model")
        first = models[0].config
        shape = ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "d_head", "mlp_ratio", "pos")
        for m in models:
            if any(getattr(m.config, f) != getattr(first, f) for f in shape):
                raise ValueError(f"models of one batch must share {', '.join(shape)}; got {first} and {m.config}")
        rules = [m.blocks[0].attn.rule for m in models]
        self.config = first
        self.runs = len(models)
        self.rules = [block.attn.rule for block in models[0].blocks]  # per layer, run 0 (used for names only)
        self.params = nn.ParameterDict()
        for name, _ in models[0].named_parameters():
            if name.endswith(("log_factor", "gain", "ssmax_s")):
                continue
            self.params[stack_name(name)] = nn.Parameter(torch.stack([m.get_parameter(name).detach() for m in models]))
        ref = next(models[0].parameters())
        kinds = [r.kind for r in rules]
        fixed = [r.factor(first.d_head) if r.kind == "fixed" else 1.0 for r in rules]
        self.register_buffer("fixed_factor", torch.tensor(fixed, dtype=ref.dtype, device=ref.device))
        self.register_buffer("is_learned", torch.tensor([k == "learned" for k in kinds], device=ref.device))
        self.register_buffer("is_qknorm", torch.tensor([k == "qknorm" for k in kinds], device=ref.device))
        self.any_learned, self.any_qknorm = any(k == "learned" for k in kinds), any(k == "qknorm" for k in kinds)
        self.kinds = kinds
        if bilinear and (first.pos == "rope" or "qknorm" in kinds):
            raise UserError("the bilinear forms need q and k as linear maps of x: not with RoPE or QK-norm; "
                            "use bilinear=None or False")
        self.uses_bilinear = uses_bilinear(first.d_head, first.d_model, kinds, first.pos) if bilinear is None \
            else bool(bilinear)
        self.lengths = [r.length for r in rules]
        self.any_length = any(term is not None for term in self.lengths)
        self.register_buffer("is_ssmax", torch.tensor([t is not None and t.learnable for t in self.lengths],
                                                      device=ref.device))
        self.any_ssmax = bool(self.is_ssmax.any())
        self.kernel = attention_kernel(kernel, first.d_model if self.uses_bilinear else first.d_head)
        for i in range(first.n_layers):
            # Every run gets both slots; a run uses the one its rule names (the other gets no gradient).
            log_factor = [float(m.blocks[i].attn.log_factor.detach()) if k == "learned" else 0.0 for m, k in zip(models, kinds)]
            gain = [float(m.blocks[i].attn.gain.detach()) if k == "qknorm" else 1.0 for m, k in zip(models, kinds)]
            if self.any_learned:
                self.params[f"blocks__{i}__attn__log_factor"] = nn.Parameter(
                    torch.tensor(log_factor, dtype=ref.dtype, device=ref.device))
            if self.any_qknorm:
                self.params[f"blocks__{i}__attn__gain"] = nn.Parameter(
                    torch.tensor(gain, dtype=ref.dtype, device=ref.device))
            if self.any_ssmax:  # SSMax's s per head, (H, 1); a run without it holds ones it never uses
                self.params[f"blocks__{i}__attn__ssmax_s"] = nn.Parameter(torch.stack(
                    [m.blocks[i].attn.ssmax_s.detach() if hasattr(m.blocks[i].attn, "ssmax_s")
                     else torch.ones(first.n_heads, 1, dtype=ref.dtype, device=ref.device) for m in models]))
        self.register_buffer("run_index", torch.arange(self.runs, device=ref.device))

    def p(self, name: str) -> torch.Tensor:
        return self.params[stack_name(name)]

    def factor(self, layer: int) -> torch.Tensor:
        """(K,) the factor each run multiplies q k^T by in ``layer``."""
        factor = self.fixed_factor
        if self.any_learned:
            factor = torch.where(self.is_learned, self.p(f"blocks.{layer}.attn.log_factor").exp(), factor)
        if self.any_qknorm:
            factor = torch.where(self.is_qknorm, self.p(f"blocks.{layer}.attn.gain"), factor)
        return factor

    def length_multiplier(self, layer: int, time: int, rows: slice | None, dtype: torch.dtype) -> torch.Tensor:
        """(K, H or 1, Tq) each run's length term m(n) at each query row (n = its position + 1, the keys a
        causal row sees), ones for runs without one; computed as :func:`attnscale.attention.with_length_term`
        computes it (float32, float64 for float64 models)."""
        device = self.run_index.device
        n_keys = torch.arange(1, time + 1, device=device, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
        fixed = torch.stack([torch.ones_like(n_keys) if term is None or term.learnable else term.multiplier(n_keys)
                             for term in self.lengths]).unsqueeze(1)
        if self.any_ssmax:
            s = self.p(f"blocks.{layer}.attn.ssmax_s").to(n_keys.dtype)
            fixed = torch.where(self.is_ssmax.view(-1, 1, 1), s * torch.log(n_keys), fixed)
        picked = fixed if rows is None else fixed[..., rows]
        return picked.to(dtype)

    def heads(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Per-run, per-head projection: x (K, N, D), weight (K, H*dh, D) -> (K, H, N, dh).

        Head-major from the start, so that (K, H, B, T, dh) -> (K*H*B, T, dh) is a view: no
        copy between the projection and attention, forward or backward."""
        runs, _, d_model = x.shape
        w = weight.view(runs, self.config.n_heads, self.config.d_head, d_model).transpose(2, 3)
        return torch.matmul(x.unsqueeze(1), w)

    def bilinear(self, layer: int, flat_x: torch.Tensor, queries: torch.Tensor):
        """q', k', v' (K, H, N, d_model) with q' k'^T = factor q k^T and p v' = p v W_o^T per head:
        q' = x (W_q^T W_k) factor, k' = x, v' = x (W_v^T W_o^T)."""
        runs, _, d_model = flat_x.shape
        heads, d_head = self.config.n_heads, self.config.d_head
        prefix = f"blocks.{layer}.attn."
        w_q, w_k, w_v = (self.p(prefix + name + ".weight").view(runs, heads, d_head, d_model)
                         for name in ("w_q", "w_k", "w_v"))
        w_o = self.p(prefix + "w_o.weight").view(runs, d_model, heads, d_head).permute(0, 2, 3, 1)
        query_key = torch.matmul(w_q.transpose(2, 3), w_k) * self.factor(layer).view(runs, 1, 1, 1)
        value_out = torch.matmul(w_v.transpose(2, 3), w_o)
        q = torch.matmul(queries.unsqueeze(1), query_key)
        v = torch.matmul(flat_x.unsqueeze(1), value_out)
        return q, flat_x.unsqueeze(1).expand(runs, heads, *flat_x.shape[1:]), v

    def projected(self, layer: int, flat_x: torch.Tensor, queries: torch.Tensor):
        """q (times the factor), k, v (K, H, N, d_head): each head's projections."""
        runs = flat_x.shape[0]
        prefix = f"blocks.{layer}.attn."
        k, v = (self.heads(flat_x, self.p(prefix + name + ".weight")) for name in ("w_k", "w_v"))
        q = self.heads(queries, self.p(prefix + "w_q.weight"))
        if self.any_qknorm:
            normed = self.is_qknorm.view(runs, 1, 1, 1)
            q = torch.where(normed, F.normalize(q, dim=-1), q)
            k = torch.where(normed, F.normalize(k, dim=-1), k)
        return q * self.factor(layer).view(runs, 1, 1, 1), k, v

    def attention(self, layer: int, x: torch.Tensor, observe: list | None, rows: slice | None = None) -> torch.Tensor:
        """The layer's output at every position, or with ``rows`` at those query positions only (keys
        and values from every position): (K, B, T or R, D)."""
        runs, batch, time, d_model = x.shape
        heads = self.config.n_heads
        flat_x = x.reshape(runs, batch * time, d_model)
        queries = flat_x if rows is None else x[:, :, rows].reshape(runs, -1, d_model)
        q, k, v = (self.bilinear if self.uses_bilinear else self.projected)(layer, flat_x, queries)
        width, q_time = q.shape[-1], queries.shape[1] // batch
        if self.config.pos == "rope" or self.any_length:
            q, k = q.view(runs, heads, batch, q_time, width), k.view(runs, heads, batch, time, width)
            if self.config.pos == "rope":
                positions = torch.arange(time, device=x.device)
                q, k = rotate(q, positions if rows is None else positions[rows]), rotate(k, positions)
            if self.any_length:
                q = q * self.length_multiplier(layer, time, rows, q.dtype).unsqueeze(2).unsqueeze(-1)
        q = q.reshape(runs * heads * batch, q_time, width)
        k, v = (t.reshape(runs * heads * batch, time, width) for t in (k, v))
        mask = torch.ones(time, time, dtype=torch.bool, device=x.device).tril()
        if rows is not None:
            if observe is not None:
                raise ValueError("observe reads every row's attention; call without rows")
            logits = torch.bmm(q, k.transpose(1, 2)).masked_fill_(~mask[rows], float("-inf"))
            out = torch.bmm(torch.softmax(logits, dim=-1), v)
        elif observe is not None:
            out, probs = dense_attention(q, k, v, 1.0, mask, "stable")
            logits = torch.bmm(q, k.transpose(1, 2)).masked_fill(~mask, float("nan"))
            observe.append((logits.view(runs, heads, batch, time, time).transpose(1, 2),
                            probs.view(runs, heads, batch, time, time).transpose(1, 2)))
        elif self.kernel == "sdpa":
            out = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=True,
                                                 scale=1.0).squeeze(1)
        else:
            logits = torch.bmm(q, k.transpose(1, 2)).masked_fill_(~mask, float("-inf"))
            out = torch.bmm(torch.softmax(logits, dim=-1), v)
        out = out.view(runs, heads, batch * q_time, width)
        if not self.uses_bilinear:  # W_o per head: (K, H, N, dh) @ (K, H, dh, D), summed over heads
            w_o = self.p(f"blocks.{layer}.attn.w_o.weight").view(runs, d_model, heads, width).permute(0, 2, 3, 1)
            out = torch.matmul(out, w_o)
        mixed = out.squeeze(1) if heads == 1 else out.sum(dim=1)
        return mixed.view(runs, batch, q_time, d_model)

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        prefix = f"blocks.{layer}.mlp."
        hidden = F.gelu(linear(x, self.p(prefix + "fc.weight"), self.p(prefix + "fc.bias")))
        return linear(hidden, self.p(prefix + "proj.weight"), self.p(prefix + "proj.bias"))

    def norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.p(name + ".weight"), self.p(name + ".bias"))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, observe: list | None = None,
                rows: slice | None = None):
        """``observe``: a list that receives (logits, probs) per layer, from the plain (dense) path.
        ``rows``: the last layer runs its queries, MLP and head on those positions alone (as
        :meth:`attnscale.models.Transformer.loss_at` does); the logits are theirs, (K, B, R, V), and
        the loss is the forward pass's when every target lies in ``rows``."""
        runs, _, time = idx.shape
        learned = self.config.pos == "learned"
        if runs != self.runs or (learned and time > self.config.seq_len):
            limit = f"<={self.config.seq_len}" if learned else ""
            raise ValueError(f"expected token ids (K={self.runs}, B, T{limit}), got {tuple(idx.shape)}")
        if rows is not None and targets is not None:
            targets = targets_at(targets, rows)  # checked before the work
        elif rows is not None and not range(time)[rows]:
            raise ValueError(f"rows {rows} select no position of {time}")
        x = self.p("tok_emb.weight")[self.run_index.view(runs, 1, 1), idx]
        if learned:
            x = x + self.p("pos_emb.weight")[:, :time].unsqueeze(1)
        last = self.config.n_layers - 1
        for i in range(self.config.n_layers):
            picked = rows if i == last else None
            attended = self.attention(i, self.norm(f"blocks.{i}.ln_1", x), observe, picked)
            x = (x if picked is None else x[:, :, picked]) + attended
            x = x + self.mlp(i, self.norm(f"blocks.{i}.ln_2", x))
        logits = linear(self.norm("ln_f", x), self.p("head.weight"), self.p("head.bias"))
        if targets is None:
            return logits, None
        return logits, per_run_loss(logits, targets)

    def attention_weights(self, layer: int) -> dict[str, nn.Parameter]:
        return {w: self.p(f"blocks.{layer}.attn.{name}.weight")
                for w, name in (("W_q", "w_q"), ("W_k", "w_k"), ("W_v", "w_v"), ("W_o", "w_o"))}

    @torch.no_grad()
    def unstack(self, run: int, model: Transformer) -> Transformer:
        """Copy run ``run``'s weights into ``model`` (a Transformer of this shape and that run's rule)."""
        for name, param in model.named_parameters():
            param.copy_(self.params[stack_name(name)][run])
        return model


def per_run_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(K,) mean cross-entropy of each run over its scored positions."""
    runs, vocab = logits.shape[0], logits.shape[-1]
    token_loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=IGNORE_INDEX,
                                 reduction="none").view(runs, -1)
    scored = (targets != IGNORE_INDEX).view(runs, -1).sum(dim=1)
    return token_loss.sum(dim=1) / scored
