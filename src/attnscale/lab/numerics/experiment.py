"""The numerics lab's experiment: does FP16/BF16 make attention overflow, and what really prevents it?

Claims C11 ("in FP16/BF16, even after scaling, d_k = 128 gives logits around [-30, 30];
FP16's small range then makes the softmax produce inf") and C12 ("the fixes are
torch.clamp before the softmax, or FlashAttention, which scales by 1/sqrt(d_k) and tiles
the computation so the large matrix never overflows").  Six experiments, in order:

1. **Limits of each dtype.**  exp's overflow threshold, bisected over the representable
   numbers of float16 / bfloat16 / float32, against ln(finfo.max); and how a matmul in that
   dtype accumulates on this device (:mod:`attnscale.numerics`): a wider accumulator means
   QK^T overflows only when a final value exceeds finfo.max, not a partial sum.
2. **Logit ranges.**  q, k drawn N(0, std^2) for each d_k and std, plain or with a few
   outlier features (the same few channels of q and k multiplied by ``outlier_gain``, as the
   massive activations of real LLMs), under scale ``none`` and ``sqrt``: the logits' range,
   where the float16 product QK^T overflows (|q.k| > 65504) with the factor applied to the
   logits after the matmul, or to q before it, and where a softmax without max subtraction
   overflows (a logit > ln 65504 = 11.09).  One draw per (d_k, outliers) is scaled to every
   std, so max|logit| grows exactly as std^2 and the std at which each limit is reached
   follows in closed form from the unit-std draw (table "onsets").
3. **Implementations.**  At d_k = 128, for each scenario (std, outliers; plus the std at
   which the logits reach the claimed +-30), each scale and each dtype: naive (all in the
   dtype), stable (max-subtracted; scores in float32 for half inputs, as SDPA and online)
   and online softmax attention (:mod:`attnscale.attention`), torch's fused SDPA, a tiled softmax
   without max subtraction (``tiled_naive``: tiling alone, everything in the dtype), and
   clamp-then-softmax (``clamp:C``: logits clamped to [-C, C], then exp / sum).  For each:
   the share of non-finite outputs, max and mean error against float64 on the same rounded
   inputs, and flash-attn's acceptance rule: error at most twice that of the plain math
   (``plain``: torch.softmax(q k^T * factor) v, computed in the dtype itself), plus one
   rounding step of the dtype at the output's scale.
4. **What clamping costs.**  In float64: KL(exact || clamped) of the attention
   distributions (its mean over query rows with a 95% interval), the share of logits clamped,
   and the change of the attention output.
5. **A trained model's activations.**  The q and k of every attention layer of a pretrained
   model (the health check's default, all-MiniLM-L6-v2, offline) on a real text, checked
   (:func:`attnscale.numerics.precision_check`) in float16 and bfloat16 at 1/sqrt(d_k), the way a
   model's eager attention computes them: the logit range, non-finite rows, rows where a
   softmax without max subtraction would overflow, and the output error against float64.
   This sets what "realistic" means for C11: logits as large as a trained model's.
6. **Memory.**  The peak bytes of the tensors dense attention (the whole T x T matrix) and
   the tiled online attention create, counted exactly (:mod:`attnscale.peak_memory`), for one
   head at each sequence length: the other reading of C12's "never overflows".

``judge`` (:mod:`.verdicts`) turns these into verdicts; the thresholds are in its evidence text.
Nothing here writes a file or prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ... import checks, intervals, scaling
from ...attention import attention
from ...errors import UserError
from ...peak_memory import peak_tensor_bytes
from ...numerics import DTYPES, WRONG_OUTPUT, precision_check, exp_overflow_threshold, matmul_accumulation
from ...softmax import naive_softmax
from .. import run_in_one_thread
from ...runtime import check_device

VERSION = 6  # 6: the trained model named as prose names it; 2: C11/C12 judged on trained activations and memory; 3: stable attention scores half precision in float32;
# 4: each clamp's mean KL with its 95% interval; 5: row counts (non-finite, wrong, reaching the range) for intervals
SCALES = ("none", "sqrt")
FP16_MAX = float(torch.finfo(torch.float16).max)
LN_FP16_MAX = math.log(FP16_MAX)
BASE_IMPLS = ("plain", "naive", "tiled_naive", "stable", "online", "sdpa")
RANGE_REACHED = 0.5  # a query row's logits "reach +-R" when its largest |logit| is at least this share of R


@dataclass(frozen=True)
class Config:
    d_ks: tuple[int, ...] = (64, 128, 256)
    stds: tuple[float, ...] = (1.0, 4.0, 16.0)
    outlier_features: int = 2            # channels of q and k that carry outliers
    outlier_gain: float = 10.0           # how much larger those channels are
    grid_tokens: int = 256               # queries = keys per draw in the logit-range grid
    claim_d_k: int = 128
    claimed_range: float = 30.0          # the source's "[-30, 30]"
    impl_tokens: int = 256
    impl_heads: int = 2
    impl_scenarios: tuple[tuple[float, bool], ...] = ((1.0, False), (4.0, False), (16.0, False), (1.0, True),
                                                      (16.0, True))
    clamp_values: tuple[float, ...] = (5.0, 10.0, 30.0)
    block_size: int = 64                 # key block of the tiled implementations
    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    model_dir: str | None = None         # trained activations: None is the health check's default model
    trained_tokens: int = 128
    memory_tokens: tuple[int, ...] = (512, 2048)  # sequence lengths of the memory measurement
    memory_d_k: int = 64
    memory_block: int = 128              # the online attention's tile, as FlashAttention's
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        checks.config(self)


PRESETS = {
    "quick": Config(),
    "full": Config(grid_tokens=1024, impl_tokens=1024, impl_heads=4, clamp_values=(2.0, 5.0, 8.0, 10.0, 15.0, 30.0),
                   stds=(0.5, 1.0, 2.0, 4.0, 8.0, 16.0), block_size=128, trained_tokens=256,
                   memory_tokens=(1024, 4096)),
}


def check_config(config: Config) -> Config:
    check_device(config.device)
    for name in config.dtypes:
        if name not in DTYPES:
            raise UserError(f"unknown dtype {name!r}; accepted: {', '.join(DTYPES)}")
    for d_k in (*config.d_ks, config.claim_d_k):
        scaling.check_d_k(d_k)
    if config.claim_d_k not in config.d_ks:
        raise UserError(f"claim_d_k={config.claim_d_k} must be one of d_ks {config.d_ks}")
    if not 0 <= config.outlier_features <= min(config.d_ks):
        raise UserError(f"outlier_features must be in [0, {min(config.d_ks)}], got {config.outlier_features}")
    checks.fields(config, ints=("grid_tokens", "impl_tokens", "impl_heads", "block_size", "memory_d_k", "memory_block"))
    checks.fields(config, ints=("trained_tokens",), minimum=2)
    if not config.memory_tokens or any(t < 1 for t in config.memory_tokens):
        raise UserError(f"memory_tokens must be sequence lengths >= 1, got {config.memory_tokens}")
    if any(s <= 0 for s in config.stds) or any(s <= 0 for s, _ in config.impl_scenarios):
        raise UserError("every std must be > 0")
    if any(c <= 0 for c in config.clamp_values):
        raise UserError(f"clamp values must be > 0, got {config.clamp_values}")
    return config


# ----------------------------------------------------------------------------- drawing

def with_outliers(x: torch.Tensor, config: Config) -> torch.Tensor:
    """Multiply the first ``outlier_features`` channels by ``outlier_gain``."""
    x = x.clone()
    x[..., : config.outlier_features] *= config.outlier_gain
    return x


def scenario_label(std: float, outliers: bool) -> str:
    return f"std {std:.3g}" + (" +outliers" if outliers else "")


# ----------------------------------------------------------------------------- 2. logit ranges

def fp16_overflow_share(q16: torch.Tensor, k16: torch.Tensor) -> float:
    return float((~torch.isfinite(q16 @ k16.transpose(-2, -1))).double().mean())


def grid_cell(z_q, z_k, std: float, scale: str, d_k: int) -> dict:
    """Logit range and float16 overflow for q = std z_q, k = std z_k under one scale."""
    factor = scaling.factor(scale, d_k)
    q, k = std * z_q, std * z_k
    products = q @ k.T
    logits = products * factor
    q16, k16 = q.half(), k.half()
    logits16 = (q16 @ k16.T) * factor
    naive_rows = ~torch.isfinite(naive_softmax(logits16)).all(dim=-1)
    return {
        "logit_min": float(logits.min()), "logit_max": float(logits.max()), "logit_std": float(logits.std()),
        "max_abs_logit": float(logits.abs().max()), "max_abs_product": float(products.abs().max()),
        "fp16_overflow_scale_after": fp16_overflow_share(q16, k16),
        "fp16_overflow_scale_first": fp16_overflow_share(q16 * factor, k16),
        "exact_overflow_scale_after": float((products.abs() > FP16_MAX).double().mean()),
        "exact_overflow_scale_first": float((logits.abs() > FP16_MAX).double().mean()),
        "fp16_naive_overflow_rows": float(naive_rows.double().mean()),
    }


def logit_grid(config: Config, gen: torch.Generator, device) -> tuple[list[dict], list[dict]]:
    """The grid rows and, per (d_k, outliers), the std at which each limit is reached."""
    rows, onsets = [], []
    for d_k in config.d_ks:
        z_q = torch.randn(config.grid_tokens, d_k, generator=gen, dtype=torch.float64).to(device)
        z_k = torch.randn(config.grid_tokens, d_k, generator=gen, dtype=torch.float64).to(device)
        for outliers in (False, True):
            zq, zk = (with_outliers(z_q, config), with_outliers(z_k, config)) if outliers else (z_q, z_k)
            unit_max = float((zq @ zk.T).abs().max())  # max |q.k| at std 1
            sqrt_factor = d_k**-0.5
            # max|logit| = std^2 * unit_max * factor, so a limit L is reached at std = sqrt(L / (unit_max factor)).
            at = lambda limit, factor: math.sqrt(limit / (unit_max * factor))
            onsets.append({
                "d_k": d_k, "outliers": outliers, "max_abs_logit_unit_none": unit_max,
                "max_abs_logit_unit_sqrt": unit_max * sqrt_factor,
                "std_for_claimed_range": at(config.claimed_range, sqrt_factor),
                "std_naive_fp16_overflow_none": at(LN_FP16_MAX, 1.0),
                "std_naive_fp16_overflow_sqrt": at(LN_FP16_MAX, sqrt_factor),
                "std_matmul_overflow_scale_after": at(FP16_MAX, 1.0),
                "std_matmul_overflow_scale_first": at(FP16_MAX, sqrt_factor),
            })
            for std in config.stds:
                for scale in SCALES:
                    rows.append({"d_k": d_k, "std": std, "outliers": outliers, "scale": scale,
                                 **grid_cell(zq, zk, std, scale, d_k)})
    return rows, onsets


# ----------------------------------------------------------------------------- 3. implementations

def scaled_logits(q, k, factor):
    """q k^T times the factor, in the inputs' dtype."""
    return (q @ k.transpose(-2, -1)) * factor


def plain_attention(q, k, v, factor, logits=None):
    """The plain math in the inputs' dtype: flash-attn's low-precision reference.  ``logits``: the
    :func:`scaled_logits` of q and k when already computed (the same numbers, one product fewer)."""
    return torch.softmax(scaled_logits(q, k, factor) if logits is None else logits, dim=-1) @ v


def tiled_naive_attention(q, k, v, factor, block_size: int):
    """Tiled over keys like FlashAttention but without max subtraction, all in the inputs'
    dtype: what tiling alone does to overflow."""
    total = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype, device=q.device)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[-2], block_size):
        block_exp = torch.exp((q @ k[..., start:start + block_size, :].transpose(-2, -1)) * factor)
        total = total + block_exp.sum(dim=-1, keepdim=True)
        out = out + block_exp @ v[..., start:start + block_size, :]
    return out / total


def clamped_attention(q, k, v, factor, limit: float, logits=None):
    """torch.clamp on the logits, then exp / sum (the softmax that overflows without it)."""
    logits = scaled_logits(q, k, factor) if logits is None else logits
    return naive_softmax(logits.clamp(-limit, limit)) @ v


def impl_names(config: Config) -> tuple[str, ...]:
    return BASE_IMPLS + tuple(f"clamp:{c:g}" for c in config.clamp_values)


def attend(impl: str, q, k, v, scale: str, block_size: int, logits=None):
    """One implementation's output (``logits``: the plain and clamped ones may reuse :func:`scaled_logits`)."""
    factor = scaling.factor(scale, q.shape[-1])
    if impl == "plain":
        return plain_attention(q, k, v, factor, logits)
    if impl == "tiled_naive":
        return tiled_naive_attention(q, k, v, factor, block_size)
    if impl.startswith("clamp:"):
        return clamped_attention(q, k, v, factor, float(impl.partition(":")[2]), logits)
    return attention(q, k, v, scale=scale, impl=impl, block_size=block_size)


def exact_attention(q, k, v, factor, limit: float | None = None, logits=None):
    """float64 log-probabilities and output, optionally of clamped logits (``logits``: their
    :func:`scaled_logits`, when already computed)."""
    logits = scaled_logits(q, k, factor) if logits is None else logits
    if limit is not None:
        logits = logits.clamp(-limit, limit)
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs, log_probs.exp() @ v


def error_row(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Non-finite share of the output's entries, max and mean error (None unless all are finite),
    and per query row: how many, how many hold a non-finite entry, how many finite ones are off
    by more than WRONG_OUTPUT somewhere (the counts a rate's interval is built from)."""
    finite = torch.isfinite(out)
    finite_rows = finite.all(dim=-1)
    error = (out.double() - ref).abs()
    row = {"nonfinite_share": float((~finite).double().mean()), "rows": finite_rows.numel(),
           "nonfinite_rows": int((~finite_rows).sum()),
           "wrong_rows": int((error.amax(dim=-1)[finite_rows] > WRONG_OUTPUT).sum())}
    if finite.all():
        row.update(max_err=float(error.max()), mean_err=float(error.mean()))
    else:
        row.update(max_err=None, mean_err=None)
    return row


def accept(row: dict, plain: dict, dtype: torch.dtype, ref: torch.Tensor) -> dict:
    """flash-attn's rule: max error <= 2 x the plain math's max error (+ one rounding step)."""
    if row["max_err"] is None or plain["max_err"] is None:
        return {"ratio_to_plain": None, "accepted": None if plain["max_err"] is None else False}
    atol = torch.finfo(dtype).eps * float(ref.abs().max())
    ratio = row["max_err"] / plain["max_err"] if plain["max_err"] > 0 else (0.0 if row["max_err"] == 0 else math.inf)
    return {"ratio_to_plain": ratio if math.isfinite(ratio) else None,
            "accepted": bool(row["max_err"] <= 2 * plain["max_err"] + atol)}


def impl_scenarios(config: Config, onsets: list[dict]) -> list[tuple[float, bool, str]]:
    """The configured scenarios plus the one whose sqrt-scaled logits reach the claimed range."""
    claimed = next(o for o in onsets if o["d_k"] == config.claim_d_k and not o["outliers"])
    found = [(std, bool(out), scenario_label(std, out)) for std, out in config.impl_scenarios]
    std30 = claimed["std_for_claimed_range"]
    found.append((std30, False, f"std {std30:.3g} (logits +-{config.claimed_range:g})"))
    return sorted(found, key=lambda s: (s[1], s[0]))


def implementation_sweep(config: Config, scenarios, gen, device, progress) -> tuple[list[dict], list[dict]]:
    """Rows per (scenario, scale, dtype, impl) and the float64 clamp-cost rows."""
    shape = (1, config.impl_heads, config.impl_tokens, config.claim_d_k)
    z_q, z_k, v = (torch.randn(*shape, generator=gen, dtype=torch.float64).to(device) for _ in range(3))
    impls, rows, clamp_rows = impl_names(config), [], []
    steps = len(scenarios) * len(SCALES)
    for n, ((std, outliers, label), scale) in enumerate((s, sc) for s in scenarios for sc in SCALES):
        q, k = std * z_q, std * z_k
        if outliers:
            q, k = with_outliers(q, config), with_outliers(k, config)
        clamp_rows += clamp_cost(q, k, v, scale, config.clamp_values, label, std, outliers)
        for name in config.dtypes:
            dtype = DTYPES[name]
            q_low, k_low, v_low = q.to(dtype), k.to(dtype), v.to(dtype)
            factor = scaling.factor(scale, config.claim_d_k)
            ref = exact_attention(q_low.double(), k_low.double(), v_low.double(), factor)[1]
            logits_finite = bool(torch.isfinite(q_low @ k_low.transpose(-2, -1)).all())
            logits = scaled_logits(q_low, k_low, factor)  # the plain and clamped implementations' product, once
            plain = error_row(plain_attention(q_low, k_low, v_low, factor, logits), ref)
            for impl in impls:
                row = error_row(attend(impl, q_low, k_low, v_low, scale, config.block_size, logits), ref)
                rows.append({"scenario": label, "std": std, "outliers": outliers, "scale": scale, "dtype": name,
                             "impl": impl, "logits_finite": logits_finite, **row, **accept(row, plain, dtype, ref)})
        if progress:
            progress(0.3 + 0.6 * (n + 1) / steps, f"implementations: {label}, {scale}")
    return rows, clamp_rows


# ----------------------------------------------------------------------------- 4. clamp cost

def clamp_cost(q, k, v, scale: str, clamp_values, label: str, std: float, outliers: bool) -> list[dict]:
    factor = scaling.factor(scale, q.shape[-1])
    logits = scaled_logits(q, k, factor)
    log_p, out = exact_attention(q, k, v, factor, logits=logits)
    rows = []
    for limit in clamp_values:
        log_c, out_c = exact_attention(q, k, v, factor, limit, logits)
        kl = (log_p.exp() * (log_p - log_c)).sum(dim=-1)
        change = (out_c - out).abs()
        rows.append({"scenario": label, "std": std, "outliers": outliers, "scale": scale, "clamp": limit,
                     "clamped_share": float((logits.abs() > limit).double().mean()),
                     "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
                     # over the query rows (each row's distribution; rows of a head share its keys)
                     "kl_interval": list(intervals.mean_interval(kl)),
                     "output_change_mean": float(change.mean()), "output_change_max": float(change.max()),
                     "output_mean_abs": float(out.abs().mean())})
    return rows


# ----------------------------------------------------------------------------- 5. a trained model

def trained_activations(config: Config) -> dict:
    """Audit the q, k of every attention layer of a pretrained model in float16 and bfloat16.

    The factor is 1/sqrt(d_k), the default model's own (the health check's scale probe measures it)."""
    from ... import diagnosis

    model, tokenizer = diagnosis.load_model(config.model_dir, config.device)
    ids, tokens, _ = diagnosis.encode(tokenizer, diagnosis.DEFAULT_TEXT, config.trained_tokens, config.device)
    with diagnosis.quiet_transformers():
        _, calls = diagnosis.run_attention(model, diagnosis.model_inputs(model, ids))
    rows, factor = [], scaling.factor("sqrt", int(calls[0].query.shape[-1]))
    for layer, call in enumerate(calls):
        q, k = call.query.detach().double(), call.key.detach().double()
        for dtype in ("float16", "bfloat16"):
            q_low, k_low = (x.to(DTYPES[dtype]).double() for x in (q, k))  # the inputs precision_check rounds
            row_max_logit = ((q_low @ k_low.transpose(-2, -1)) * factor).abs().amax(dim=-1)  # per (batch, head, query)
            range_rows = int((row_max_logit >= RANGE_REACHED * config.claimed_range).sum())
            found = precision_check(q, k, scale="sqrt", dtype=dtype, max_locations=0, seed=config.seed)
            rows.append({"layer": layer, "dtype": dtype, "q_std": float(q.std()), "k_std": float(k.std()),
                         "max_abs_logit": found["logits"]["max_abs"], "logit_std": found["logits"]["std"],
                         "max_abs_product": found["max_abs_product"],
                         "matmul_overflow": found["matmul_overflow"]["share"],
                         "nonfinite_row_share": found["nonfinite_rows"]["share"], "rows": found["rows"],
                         "nonfinite_rows": found["nonfinite_rows"]["count"],
                         "wrong_rows": found["wrong_output_rows"]["count"], "range_rows": range_rows,
                         "naive_overflow_rows": found["naive_softmax_overflow_rows"]["share"],
                         "output_error_max": found["output_error"]["max"],
                         "prob_error_max": found["prob_error"]["max"]})
    from ...probing.loading import model_name

    return {"model": model_name(config.model_dir, getattr(model.config, "model_type", type(model).__name__)),
            "d_k": int(calls[0].query.shape[-1]),
            "heads": int(calls[0].query.shape[1]), "tokens": len(tokens), "layers": rows}


# ----------------------------------------------------------------------------- 6. memory

def memory_rows(config: Config) -> list[dict]:
    """Peak bytes created by dense attention as eager code computes it (``plain``: q k^T * factor,
    torch.softmax, @ v) and by the tiled online attention; one head, float32."""
    gen = torch.Generator().manual_seed(config.seed + 6)
    rows = []
    for tokens in config.memory_tokens:
        q, k, v = (torch.randn(1, 1, tokens, config.memory_d_k, generator=gen).to(config.device) for _ in range(3))
        for impl in ("plain", "online"):
            _, peak = peak_tensor_bytes(lambda *qkv: attend(impl, *qkv, "sqrt", config.memory_block), q, k, v)
            rows.append({"tokens": tokens, "impl": impl, "d_k": config.memory_d_k, "block_size": config.memory_block,
                         "peak_bytes": peak, "score_matrix_bytes": tokens * tokens * 4})
    return rows


# ----------------------------------------------------------------------------- run

def run(config: Config, progress=None) -> dict:
    return run_in_one_thread(check_config, measure, config, progress)


def measure(config: Config, progress=None) -> dict:
    device = torch.device(config.device)
    gen = torch.Generator().manual_seed(config.seed)
    thresholds = [exp_overflow_threshold(name, device) for name in config.dtypes]
    accumulation = [matmul_accumulation(name, device, seed=config.seed) for name in config.dtypes]
    if progress:
        progress(0.05, "exp thresholds and matmul accumulation")
    grid, onsets = logit_grid(config, gen, device)
    if progress:
        progress(0.3, "logit ranges")
    scenarios = impl_scenarios(config, onsets)
    impls, clamp = implementation_sweep(config, scenarios, gen, device, progress)
    trained = trained_activations(config)
    if progress:
        progress(0.97, "a trained model's activations")
    memory = memory_rows(config)
    return {"thresholds": thresholds, "accumulation": accumulation, "grid": grid, "onsets": onsets,
            "impls": impls, "clamp": clamp, "grid_pairs": config.grid_tokens**2, "claim_d_k": config.claim_d_k,
            "claimed_range": config.claimed_range, "clamp_values": list(config.clamp_values), "device": config.device,
            "outliers": {"features": config.outlier_features, "gain": config.outlier_gain},
            "trained": trained, "memory": memory}
