"""What an attention function does to q.k: the factor, a soft cap, dependence on the key count.

Every measurement reads log(p_0 / p_1) for two designed keys (see :mod:`attnscale.probing.probe`), so it
works on any function that takes (q, k, v) and returns the attention output: a
transformers backend called with a recorded module, mask and arguments, or any Python
callable (a port of an attention kernel).

* the factor ``a``: the slope of log(p_0 / p_1) in the gap g between q.k_0 and q.k_1, at a
  gap where a*g = 0.05, small enough that a soft cap of 1 bends it by under 0.1%;
* the soft cap: logits that are ``cap * tanh(a * q.k / cap)`` are linear near 0 and flat far
  from it.  Both keys are moved out to q.k = c (gap g around c): the local slope there is
  ``a * sech^2(a c / cap)``, so its ratio to the slope at 0 gives the cap.  The ratio is
  read where it has fallen below 0.9 and the cap solved from the exact tanh difference; a
  second offset must give the same cap within 5%, or the non-linearity is named but not a
  tanh cap;
* dependence on the number of keys n: the factor at n = 2, 8, 64 (log-n scaling shows);
* attention sinks (learned logits that take probability mass and give no value, as GPT-OSS's
  ``sinks``): with every q.k = 0, value 0 reads key 0 alone and value 1 reads every key, so
  a row's output holds p_0 and the mass m of all real keys.  Without a sink m = 1; with one,
  the sink holds 1 - m, and its logit relative to key 0's is log((1 - m) / p_0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from ..errors import UserError
from ..memory import fits, format_bytes
from ..probing.probe import estimate_factor, log_ratio

FINE_GAP = 0.05  # a * g for the factor's slope
CAP_OFFSETS = tuple(2.0**i for i in range(12))  # a * c, scaled logits where the local slope is read
LINEAR_TOL = 0.02  # the local slope within 2% of the slope at 0 at every offset: linear
CAP_RATIO = 0.9  # read the cap where the local slope has fallen below 90% of the slope at 0
CAP_AGREE = 0.05  # two offsets give the same cap within 5%
KEY_COUNTS = (2, 8, 64)
# query-key pairs (over every head) of one designed call above which the function is probed on its first query rows
# only: every query row is designed alike, so the rest repeat them (a video tower's 4096-token layer: 2e8 pairs)
PROBE_PAIRS = 2**22
MIN_PROBE_ROWS = 8

# Measure([(gap, offset), ...]) -> [log(p_0 / p_1) per row, ...], one tensor per design; the
# designs go through the function as one batch.  Keys at q.k = offset +- gap / 2.
Measure = Callable[[list], list]


def designed(q_shape, k_shape, v_shape, designs, dtype=torch.float64, device="cpu"):
    """One batch entry per (gap, offset) design, stacked on dim 0 (the shapes' batch must be 1):
    q = e_0 on every row; key 0 = (offset + gap/2) e_0, key 1 = (offset - gap/2) e_0, other
    keys 0; v_0 = e_0, v_1 = e_1 (v_1 = 0 when d_v = 1), other values 0."""
    count = len(designs)
    q = torch.zeros((count, *q_shape[1:]), dtype=dtype, device=device)
    q[..., 0] = 1.0
    k = torch.zeros((count, *k_shape[1:]), dtype=dtype, device=device)
    gaps = torch.tensor([g for g, _ in designs], dtype=dtype, device=device)
    offsets = torch.tensor([c for _, c in designs], dtype=dtype, device=device)
    view = (count,) + (1,) * (len(k_shape) - 3)
    k[..., 0, 0] = (offsets + gaps / 2).view(view)
    k[..., 1, 0] = (offsets - gaps / 2).view(view)
    v = torch.zeros((count, *v_shape[1:]), dtype=dtype, device=device)
    v[..., 0, 0] = 1.0
    if v_shape[-1] > 1:
        v[..., 1, 1] = 1.0
    return q, k, v


def at_offset_zero(measure: Measure) -> Callable[[list], list]:
    """The gaps-only form that estimate_factor takes (offset 0)."""
    return lambda gaps: measure([(gap, 0.0) for gap in gaps])


def median_slope(rows_at_gap: torch.Tensor, rows_at_zero: torch.Tensor, gap: float) -> float:
    """Median over rows of (log(p0/p1) at the gap - at gap 0) / gap (NaN: unreadable)."""
    slope = (rows_at_gap.double().flatten() - rows_at_zero.double().flatten()) / gap
    slope = slope[torch.isfinite(slope)]
    return float(slope.median()) if slope.numel() else float("nan")


def tanh_difference(cap: float, centre: float, half_gap: float) -> float:
    return cap * (math.tanh((centre + half_gap) / cap) - math.tanh((centre - half_gap) / cap))


def solve_cap(difference: float, centre: float, half_gap: float) -> float:
    """The cap with cap*(tanh((c+h)/cap) - tanh((c-h)/cap)) = difference (bisection in log cap;
    the left side grows with the cap, from 0 towards 2h)."""
    low, high = math.log(1e-6 * centre), math.log(1e6 * centre)
    if not 0 < difference < 2 * half_gap:
        return float("nan")
    for _ in range(200):
        middle = (low + high) / 2
        if tanh_difference(math.exp(middle), centre, half_gap) < difference:
            low = middle
        else:
            high = middle
    return math.exp((low + high) / 2)


@dataclass
class KernelResult:
    """What one attention function does to q.k (all logits in units of a * q.k)."""

    factor: float
    d_k: int
    linear_small: bool  # log(p0/p1) linear in the gap at offset 0 (gaps G and 2G agree)
    nonlinearity: str  # "linear", "soft cap", "non-linear", "not measurable"
    cap: float | None  # the estimated soft cap, in scaled logits
    cap_spread: float | None  # relative difference of the two cap estimates
    slope_ratios: dict  # a * c -> local slope / slope at 0
    spread: float  # (max - min) / |median| of the per-row factor
    rows: int

    def to_dict(self) -> dict:
        return asdict(self)


def analyse(measure: Measure, d_k: int) -> KernelResult:
    """The factor, linearity and soft cap of the function behind ``measure``."""
    rough = estimate_factor(None, d_k, measure_gaps=at_offset_zero(measure))
    if not math.isfinite(rough.factor) or rough.factor == 0:
        return KernelResult(rough.factor, d_k, rough.linear, "not measurable", None, None, {}, rough.spread, rough.rows)
    scale = abs(rough.factor)
    gap = FINE_GAP / scale
    offsets = (0.0, *CAP_OFFSETS)
    rows = measure([design for scaled in offsets for design in ((gap, scaled / scale), (0.0, scaled / scale))])
    slopes = {scaled: median_slope(rows[2 * i], rows[2 * i + 1], gap) for i, scaled in enumerate(offsets)}
    factor = slopes[0.0] if math.isfinite(slopes[0.0]) and slopes[0.0] != 0 else rough.factor
    ratios, caps = {}, []
    for scaled in CAP_OFFSETS:
        ratios[scaled] = ratio = slopes[scaled] / factor
        if len(caps) < 2 and math.isfinite(ratio) and 1e-6 < ratio < CAP_RATIO:
            caps.append(solve_cap(ratio * FINE_GAP, scaled, FINE_GAP / 2))
    finite = [r for r in ratios.values() if math.isfinite(r)]
    if finite and all(abs(r - 1) <= LINEAR_TOL for r in finite):
        return KernelResult(factor, d_k, rough.linear, "linear", None, None, ratios, rough.spread, rough.rows)
    caps = [c for c in caps if math.isfinite(c)]
    if len(caps) == 2 and abs(caps[0] - caps[1]) <= CAP_AGREE * max(caps):
        spread = abs(caps[0] - caps[1]) / max(caps)
        return KernelResult(factor, d_k, rough.linear, "soft cap", sum(caps) / 2, spread, ratios, rough.spread,
                            rough.rows)
    return KernelResult(factor, d_k, rough.linear, "non-linear" if finite else "not measurable", None, None, ratios,
                        rough.spread, rough.rows)


# The real keys' mass below 1 - this is a sink: eager code takes its softmax in float32 whatever the
# inputs (a float32 sum of probabilities is off by ~1e-7), half types by ~1e-3.  A sink this small
# (its logit ~9 below a key's) changes no attention output measurably.
SINK_MASS_TOL = {torch.float16: 1e-2, torch.bfloat16: 1e-2}
SINK_MASS_TOL_DEFAULT = 1e-4


@dataclass
class SinkResult:
    """The mass the real keys keep at equal logits (1 without a sink) and the sink's logit
    relative to key 0's, over the rows that can read both (None where there is no sink)."""

    present: bool
    min_key_mass: float | None
    sink_logit: float | None
    rows: int

    def to_dict(self) -> dict:
        return asdict(self)


def sink_probe(call, dtype=None) -> SinkResult:
    """Whether a recorded AttentionCall's function gives probability mass to something that is
    not a key (needs d_v >= 2: one value reads key 0, the other every key)."""
    shapes = [(1, *t.shape[1:]) for t in (call.query, call.key, call.value)]
    if shapes[2][-1] < 2 or shapes[1][-2] < 1:
        return SinkResult(False, None, None, 0)
    work = dtype or (torch.float64 if call.query.dtype == torch.float32 else call.query.dtype)
    q = torch.zeros(shapes[0], dtype=work, device=call.query.device)
    q[..., 0] = 1.0
    k = torch.zeros(shapes[1], dtype=work, device=call.query.device)
    v = torch.zeros(shapes[2], dtype=work, device=call.query.device)
    v[..., 0, 0] = 1.0
    v[..., 1] = 1.0
    try:
        out = call.call(q, k, v)
    except RuntimeError:
        if work == call.query.dtype:
            raise
        return sink_probe(call, call.query.dtype)
    out = (out[0] if isinstance(out, (tuple, list)) else out).double()
    first, mass = out[..., 0].flatten(), out[..., 1].flatten()
    readable = torch.isfinite(first) & torch.isfinite(mass) & (first > 0) & (mass > 0)
    first, mass = first[readable], mass[readable]
    if not mass.numel():
        return SinkResult(False, None, None, 0)
    tol = SINK_MASS_TOL.get(work, SINK_MASS_TOL_DEFAULT)
    sunk = mass < 1 - tol
    if not sunk.any():
        return SinkResult(False, float(mass.min()), None, int(mass.numel()))
    logits = torch.log((1 - mass[sunk]) / first[sunk])
    return SinkResult(True, float(mass.min()), float(logits.median()), int(mass.numel()))


def _split(out, count: int) -> list:
    out = out[0] if isinstance(out, (tuple, list)) else out
    return list(out.unbind(0)) if out.shape[0] == count else None


def probe_bytes(shapes, designs: int, dtype) -> int:
    """What the function holds on ``designs`` designed calls at once: per head, the logits, the probabilities and a
    copy of each query-key pair, and q, k, v and the output, in ``dtype``."""
    (*_, heads, queries, width), keys, value_width = shapes[0], shapes[1][-2], shapes[2][-1]
    pairs = 3 * queries * keys + queries * (width + value_width) + keys * (width + value_width)
    return designs * heads * pairs * torch.empty((), dtype=dtype).element_size()


def first_query_rows(call):
    """The call on its first query rows (its mask's with them) where all of them would probe more than PROBE_PAIRS
    query-key pairs: the designed keys sit at tokens 0 and 1, which the first rows see under a causal or a local
    mask alike.  Unchanged where the call is small enough, or its mask is not one row per query."""
    *_, heads, queries, _ = call.query.shape
    rows = max(MIN_PROBE_ROWS, PROBE_PAIRS // max(1, heads * call.key.shape[-2]))
    if queries <= rows:
        return call
    beside = [*call.args, *call.kwargs.values()]
    if any(isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-2] == queries for t in beside):
        return call  # a tensor per query row handed beside q (T5's position_bias): probed whole
    mask = call.mask
    if isinstance(mask, torch.Tensor) and mask.dim() >= 2 and mask.shape[-2] == queries:
        mask = mask[..., :rows, :]
    elif not (mask is None or isinstance(mask, torch.Tensor) and mask.dim() >= 2 and mask.shape[-2] == 1):
        return call  # a mask laid out otherwise, or not a tensor (flex attention's block mask): probed whole
    return dataclasses.replace(call, query=call.query[..., :rows, :], mask=mask)


def call_measure(call, dtype=None) -> Measure:
    """Measure() for a recorded AttentionCall: its function, module, mask and arguments on designed
    tensors (batch 1 per design, on the first query rows of a large call: first_query_rows; designs batched when the function broadcasts the call's mask,
    one by one otherwise; float64 unless the function refuses it next to the call's mask)."""
    if isinstance(call.mask, torch.Tensor) and call.mask.dim() > 0 and call.mask.shape[0] > 1:
        # a mask per batch entry (LightGlue's keypoint mask, one per image of the pair): the first
        # entry's, which the designs' batch of 1 broadcasts (the whole mask would broadcast them to its batch)
        call = dataclasses.replace(call, mask=call.mask[:1])
    call = first_query_rows(call)
    shapes = [(1, *t.shape[1:]) for t in (call.query, call.key, call.value)]
    state = {"batched": True,
             "dtype": dtype or (torch.float64 if call.query.dtype == torch.float32 else call.query.dtype)}

    def run(designs):
        needed = probe_bytes(shapes, len(designs), state["dtype"])
        if not fits(needed, call.query.device):  # one by one, or not at all (a video tower's 4096 keys in float64)
            raise UserError(f"probing the attention function on {len(designs)} designed call(s) of {shapes[0][-2]} "
                            f"queries x {shapes[1][-2]} keys would need about {format_bytes(needed)}, more than the "
                            "free memory holds")
        q, k, v = designed(*shapes, designs, state["dtype"], call.query.device)
        return _split(call.call(q, k, v), len(designs))  # each (T_q, H, d_v): the AttentionInterface contract

    def run_one(design):
        try:
            return run([design])[0]
        except RuntimeError:
            if state["dtype"] == call.query.dtype:
                raise
            state["dtype"] = call.query.dtype
            return run([design])[0]

    def measure(designs):
        outs = None
        if state["batched"] and len(designs) > 1:
            try:
                outs = run(designs)
            except (RuntimeError, ValueError, IndexError):
                outs = None
            state["batched"] = outs is not None
        if outs is None:
            outs = [run_one(design) for design in designs]
        return [log_ratio(out, two_keys_only=False) for out in outs]

    return measure


def callable_measure(attn_fn: Callable, d_k: int, n_keys: int = 2, heads: int = 1, dtype=torch.float64) -> Measure:
    """Measure() for a black-box ``attn_fn(q, k, v, mask=None)`` on (1, heads, n, d_k) tensors per
    design (n queries, n keys; the output may be (B, H, T, d) or a tuple whose first element is)."""
    shape = (1, heads, n_keys, d_k)

    def measure(designs):
        rows = []
        for design in designs:
            q, k, v = designed(shape, shape, shape, [design], dtype)
            out = attn_fn(q, k, v)
            out = out[0] if isinstance(out, (tuple, list)) else out
            rows.append(log_ratio(out.reshape(-1, d_k), two_keys_only=d_k == 1))
        return rows

    return measure


def key_count_factors(attn_fn: Callable, d_k: int, counts=KEY_COUNTS) -> dict[int, float]:
    """The factor of a black-box function at each number of keys (and as many queries)."""
    out = {}
    for n in counts:
        estimate = estimate_factor(None, d_k, measure_gaps=at_offset_zero(callable_measure(attn_fn, d_k, n)))
        out[n] = estimate.factor
    return out
