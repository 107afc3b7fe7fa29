"""Low-precision numerics of attention: measured limits of a dtype, and a precision check of real q, k.

Three measurements, shared by the numerics lab (:mod:`attnscale.lab.numerics`) and by
``attnscale numerics --from-file``:

* :func:`exp_overflow_threshold`: the largest x whose exp(x) is finite in a dtype, found by
  bisection over the dtype's own representable numbers (their bit patterns are ordered like
  the numbers), to compare with ln(finfo.max): 11.09 in float16, 88.7 in bfloat16/float32.
* :func:`matmul_accumulation`: whether a matmul in a dtype accumulates in that dtype or in a
  wider one on this device (torch's CPU kernels widen half types; that decides whether
  QK^T overflows as soon as a partial sum passes finfo.max, or only if the final value does).
* :func:`precision_check`: for a user's q and k, what a given dtype and scale rule do to them: QK^T
  overflow (where), the naive softmax's exp overflow, probabilities that underflow to exactly
  0 or round to exactly 1, and the error of the probabilities and of the attention output
  against float64.  It returns numbers and a list of plain-language risks.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from . import memory, scaling
from .errors import UserError
from .runtime import check_seed, torch_device
from .softmax import check_float, naive_softmax

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
BITS_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
WRONG_OUTPUT = 0.1  # an output off by more than 0.1 std of v (against float64) is a wrong result


def parse_dtype(dtype) -> torch.dtype:
    """A torch dtype or its name ("float16", "fp16", "bfloat16", "bf16", "float32", "fp32")."""
    aliases = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and aliases.get(dtype, dtype) in DTYPES:
        return DTYPES[aliases.get(dtype, dtype)]
    raise UserError(f"unknown dtype {dtype!r}; accepted: float16 (fp16), bfloat16 (bf16), float32 (fp32)")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _from_bits(bits: int, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.tensor([bits], dtype=BITS_VIEW[dtype], device=device).view(dtype)


def exp_overflow_threshold(dtype, device="cpu") -> dict:
    """Bisect exp in ``dtype`` over its positive representable numbers.

    Returns ``last_finite`` (the largest x with exp(x) finite), ``first_inf`` (the next
    representable number, whose exp is inf), ``ln_max`` = ln(finfo.max), ``max`` and the
    spacing of the dtype at the threshold (``resolution``).
    """
    dtype = parse_dtype(dtype)
    device = torch_device(device)
    finite = lambda bits: bool(torch.isfinite(torch.exp(_from_bits(bits, dtype, device))).item())
    max_bits = int(torch.tensor([torch.finfo(dtype).max], dtype=dtype).view(BITS_VIEW[dtype]).item())
    low, high = 0, max_bits  # exp(0) = 1 is finite, exp(finfo.max) is inf
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if finite(middle) else (low, middle)
    last_finite = float(_from_bits(low, dtype, device).item())
    first_inf = float(_from_bits(high, dtype, device).item())
    return {"dtype": dtype_name(dtype), "last_finite": last_finite, "first_inf": first_inf,
            "ln_max": math.log(torch.finfo(dtype).max), "max": float(torch.finfo(dtype).max),
            "resolution": first_inf - last_finite}


def matmul_accumulation(dtype, device="cpu", length: int = 4096, seed: int = 0) -> dict:
    """Probe how a matmul in ``dtype`` accumulates on ``device``.

    * rounding probe: 8x8 dot products of ``length`` uniform [0, 1) numbers; the error
      against float64, in units of eps * |result|.  Accumulating in the dtype itself leaves
      an error of many eps (float16 stops adding numbers below 1 once the sum passes 2048);
      accumulating wider and rounding once leaves at most about half an eps.
    * cancellation probe: [b, b, b, -b, -b, -b] . [b] * 6 with b^2 = 0.75 finfo.max: the
      exact answer 0 survives only if partial sums may exceed finfo.max.
    """
    dtype = parse_dtype(dtype)
    device = torch_device(device)
    seed = check_seed(seed)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise UserError(f"length must be an integer >= 1, got {length!r}")
    memory.require_memory(4 * memory.tensor_bytes((8, length), torch.float64), f"the matmul probe of length {length}",
                          "use a shorter length")
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(8, length, generator=gen, dtype=torch.float64).to(dtype)
    b = torch.rand(length, 8, generator=gen, dtype=torch.float64).to(dtype)
    exact = a.double() @ b.double()
    got = (a.to(device) @ b.to(device)).double().cpu()
    error_eps = float(((got - exact).abs() / (exact.abs() * torch.finfo(dtype).eps)).max())
    big = math.sqrt(0.75 * torch.finfo(dtype).max)
    row = torch.tensor([[big] * 3 + [-big] * 3], dtype=dtype, device=device)
    column = torch.full((6, 1), big, dtype=dtype, device=device)
    cancel = float((row @ column).item())
    return {"dtype": dtype_name(dtype), "device": str(device), "rounding_error_eps": error_eps,
            "cancellation_result": cancel if math.isfinite(cancel) else str(cancel),
            "accumulates_wider": bool(error_eps <= 1.0 and cancel == 0.0)}


# ----------------------------------------------------------------------------- the precision check

def _check_qk(q, k) -> torch.Size:
    for name, t in (("q", q), ("k", k)):
        check_float(t, name)
        if t.dim() < 2:
            raise UserError(f"{name} must have shape (..., T, d_k), got {tuple(t.shape)}")
        if t.shape[-1] < 1 or t.shape[-2] < 1:
            raise UserError(f"{name} must have T >= 1 and d_k >= 1, got shape {tuple(t.shape)}")
        if not torch.isfinite(t).all():
            raise UserError(f"{name} contains NaN or inf; the precision check needs finite activations")
    if q.shape[-1] != k.shape[-1]:
        raise UserError(f"q and k must share d_k (last dimension), got {q.shape[-1]} and {k.shape[-1]}")
    try:
        return torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise UserError(f"leading dimensions of q {tuple(q.shape[:-2])} and k {tuple(k.shape[:-2])} "
                         "do not broadcast") from None


def _count(mask: torch.Tensor) -> int:
    return int(mask.sum())


class _Tally:
    """Sums and extremes accumulated over the (batch, head) slices of a precision check."""

    def __init__(self):
        self.counts, self.maxima, self.sums, self.minima = {}, {}, {}, {}

    def add(self, name: str, value: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def high(self, name: str, value: float) -> None:
        self.maxima[name] = max(self.maxima.get(name, -math.inf), value)

    def low(self, name: str, value: float) -> None:
        self.minima[name] = min(self.minima.get(name, math.inf), value)

    def total(self, name: str, value: float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + value


AUDIT_MATRICES = 16  # (rows, T_k) float64-sized matrices alive at once in _check_rows, temporaries included
BLOCK_BYTES = 256 * 2**20  # what one block of query rows may take; larger T_q is checked in more blocks


def _check_rows(q64, k64, v64, factor, dtype, tally: _Tally, index: tuple, first_row: int, locations: list,
                max_locations: int):
    """Query rows ``first_row:`` of one (T_q, d) x (T_k, d) slice: exact float64 vs the same math in ``dtype``.

    Every quantity is per row (a softmax runs over the keys of its row), so a slice can be
    checked one block of rows at a time with the same totals."""
    products = q64 @ k64.T
    logits = products * factor
    q_low, k_low, v_low = q64.to(dtype), k64.to(dtype), v64.to(dtype)

    products_low = q_low @ k_low.T
    overflow = ~torch.isfinite(products_low)
    tally.add("matmul_overflow", _count(overflow))
    tally.add("matmul_overflow_positive", _count(products_low == math.inf))
    tally.add("matmul_overflow_predicted", _count(products.abs() > torch.finfo(dtype).max))
    tally.add("matmul_overflow_scaled_first", _count(~torch.isfinite((q_low * factor) @ k_low.T)))
    for i, j in overflow.nonzero().tolist()[: max(0, max_locations - len(locations))]:
        locations.append([*index, first_row + i, j])

    logits_low = products_low * factor
    del products_low, overflow
    naive = naive_softmax(logits_low)
    tally.add("naive_overflow_rows", _count(~torch.isfinite(naive).all(dim=-1)))
    del naive

    probs = torch.softmax(logits, dim=-1)
    probs_low = torch.softmax(logits_low, dim=-1)  # what a model's eager attention computes
    finite_rows = torch.isfinite(probs_low).all(dim=-1)
    tally.add("nonfinite_rows", _count(~finite_rows))
    tally.add("underflow_to_zero", _count((probs_low == 0) & (probs > 0)))
    tally.add("round_to_one", _count((probs_low == 1) & (probs < 1)))
    tally.add("saturated_rows", _count((probs_low == 1).any(dim=-1)))

    outputs = probs @ v64
    outputs_low = (probs_low @ v_low).double()
    prob_error = (probs_low.double() - probs).abs()[finite_rows]
    output_error = (outputs_low - outputs).abs()[finite_rows]
    if prob_error.numel():
        tally.high("prob_error_max", float(prob_error.max()))
        tally.total("prob_error_sum", float(prob_error.sum()))
        tally.high("output_error_max", float(output_error.max()))
        tally.total("output_error_sum", float(output_error.sum()))
        tally.add("wrong_output_rows", _count(output_error.amax(dim=-1) > WRONG_OUTPUT))
    tally.add("finite_probs", prob_error.numel())
    tally.add("finite_outputs", output_error.numel())
    tally.high("max_abs_product", float(products.abs().max()))
    tally.high("logit_max", float(logits.max()))
    tally.low("logit_min", float(logits.min()))
    tally.total("logit_sum", float(logits.sum()))
    tally.total("logit_sq_sum", float((logits**2).sum()))


def _rounded(x: torch.Tensor, dtype: torch.dtype, normalize: bool) -> torch.Tensor:
    """One slice in float64 (L2-normalised for qknorm), rounded to ``dtype`` once so that float64
    and the dtype see the same numbers; values beyond the dtype's range are clipped to it."""
    x = x.double()
    if normalize:
        x = F.normalize(x, dim=-1)
    top = torch.finfo(dtype).max
    return torch.nan_to_num(x.to(dtype).double(), posinf=top, neginf=-top)


def check_block_rows(t_q: int, t_k: int, d_k: int) -> int:
    """How many query rows the precision check takes at a time; ValueError if even one row would not fit."""
    row_bytes = AUDIT_MATRICES * t_k * 8
    slice_bytes = 3 * (t_q + 2 * t_k) * d_k * 8  # one (batch, head) slice of q, k, v in float64 and dtype
    free = memory.available_bytes()
    budget = BLOCK_BYTES if free is None else min(BLOCK_BYTES, memory.USABLE_SHARE * free - slice_bytes)
    rows = max(1, min(t_q, int(budget // row_bytes)))
    memory.require_memory(slice_bytes + rows * row_bytes, f"the precision check of {t_q} queries x {t_k} keys (d_k = {d_k})",
                          "check fewer tokens")
    return rows


def precision_check(q: torch.Tensor, k: torch.Tensor, *, scale="sqrt", dtype=torch.float16, max_locations: int = 20,
          seed: int = 0) -> dict:
    """What computing softmax(q k^T * factor) in ``dtype`` does to these activations.

    ``q`` has shape (..., T_q, d_k) and ``k`` (..., T_k, d_k), any float dtype, leading
    dimensions that broadcast (e.g. (batch, heads, T, d_k) or (T, d_k)).  ``scale`` is a
    scale spec (:mod:`attnscale.scaling`; qknorm normalises q and k first).  In ``dtype`` the
    logits are (q k^T) * factor and the probabilities torch.softmax of them, as a model's
    eager attention computes them; everything is compared with the same math in float64 on
    the same (dtype-rounded) inputs.

    Returns a dict with, among others: ``matmul_overflow`` (count, share, and the indices
    ``at`` = [..., i, j] of up to ``max_locations`` entries of q k^T that are not finite in
    ``dtype``), ``matmul_overflow_scaled_first`` (the same when the factor multiplies q
    before the matmul), ``naive_softmax_overflow_rows`` (rows where exp without max
    subtraction overflows), ``probs_underflow_to_zero`` and ``probs_round_to_one``
    (probabilities positive / below 1 in float64 that become exactly 0 / 1),
    ``prob_error`` and ``output_error`` (max and mean absolute error against float64; the
    output uses values v drawn N(0, 1) with ``seed``), ``wrong_output_rows`` (finite rows whose
    output is off by more than ``WRONG_OUTPUT`` std of v somewhere), and ``risks``: plain sentences.
    """
    dtype = parse_dtype(dtype)
    rule = scaling.parse(scale)
    batch_shape = _check_qk(q, k)
    if isinstance(max_locations, bool) or not isinstance(max_locations, int) or max_locations < 0:
        raise UserError(f"max_locations must be an integer >= 0, got {max_locations!r}")
    seed = check_seed(seed)
    d_k, t_q, t_k = q.shape[-1], q.shape[-2], k.shape[-2]
    factor = float(rule.factor(d_k))
    block_rows = check_block_rows(t_q, t_k, d_k)
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(t_k, d_k, generator=gen, dtype=torch.float64)
    v64 = v.to(dtype).double().to(q.device)
    q_all = q.detach().expand(*batch_shape, t_q, d_k)  # views: a broadcast batch is not copied
    k_all = k.detach().expand(*batch_shape, t_k, d_k)

    tally, locations, slices = _Tally(), [], 0
    for index in itertools.product(*(range(n) for n in batch_shape)):
        k64 = _rounded(k_all[index], dtype, rule.normalizes_qk)
        for start in range(0, t_q, block_rows):
            q64 = _rounded(q_all[index][start:start + block_rows], dtype, rule.normalizes_qk)
            _check_rows(q64, k64, v64, factor, dtype, tally, index, start, locations, max_locations)
        slices += 1
    tally.counts["input_overflow"] = _count(torch.isinf(q.detach().to(dtype))) + _count(torch.isinf(k.detach().to(dtype)))
    rows = slices * t_q
    return _summary(tally, locations, dtype, rule, factor, d_k, q, k, rows, rows * t_k)


def _share(count: int, total: int) -> dict:
    return {"count": count, "share": count / total if total else 0.0}


def _summary(tally: _Tally, locations, dtype, rule, factor, d_k, q, k, rows: int, entries: int) -> dict:
    c, hi = tally.counts, tally.maxima
    finfo_max = float(torch.finfo(dtype).max)
    mean = tally.sums["logit_sum"] / entries
    std = math.sqrt(max(tally.sums["logit_sq_sum"] / entries - mean**2, 0.0))
    finite_probs, finite_outputs = c["finite_probs"], c["finite_outputs"]
    result = {
        "dtype": dtype_name(dtype), "scale": rule.spec, "factor": factor, "d_k": d_k,
        "shape_q": list(q.shape), "shape_k": list(k.shape), "rows": rows, "entries": entries,
        "logits": {"min": tally.minima["logit_min"], "max": hi["logit_max"], "mean": mean, "std": std,
                   "max_abs": max(-tally.minima["logit_min"], hi["logit_max"])},
        "max_abs_product": hi["max_abs_product"],
        "dtype_max": finfo_max,
        "exp_overflow_at": math.log(finfo_max),
        "input_overflow": c["input_overflow"],
        "matmul_overflow": {**_share(c["matmul_overflow"], entries), "positive": c["matmul_overflow_positive"],
                            "at": locations},
        "matmul_overflow_predicted": _share(c["matmul_overflow_predicted"], entries),
        "matmul_overflow_scaled_first": _share(c["matmul_overflow_scaled_first"], entries),
        "naive_softmax_overflow_rows": _share(c["naive_overflow_rows"], rows),
        "nonfinite_rows": _share(c["nonfinite_rows"], rows),
        "wrong_output_rows": {**_share(c.get("wrong_output_rows", 0), rows), "threshold": WRONG_OUTPUT},
        "probs_underflow_to_zero": _share(c["underflow_to_zero"], entries),
        "probs_round_to_one": _share(c["round_to_one"], entries),
        "saturated_rows": _share(c["saturated_rows"], rows),
        "prob_error": {"max": hi.get("prob_error_max"),
                       "mean": tally.sums["prob_error_sum"] / finite_probs if finite_probs else None},
        "output_error": {"max": hi.get("output_error_max"),
                         "mean": tally.sums["output_error_sum"] / finite_outputs if finite_outputs else None},
    }
    result["risks"] = risks(result)
    return result


def risks(report: dict) -> list[str]:
    """Plain-language findings of an :func:`precision_check` result, worst first."""
    name, top, lines = report["dtype"], report["dtype_max"], []
    if report["input_overflow"]:
        lines.append(f"{report['input_overflow']} entries of q/k exceed {name}'s range ({top:g}) and become inf "
                     f"when cast.")
    over = report["matmul_overflow"]
    if over["count"]:
        first = over["at"][0] if over["at"] else None
        lines.append(
            f"q k^T overflows {name} in {over['count']} of {report['entries']} entries ({over['share']:.3g}); "
            f"largest |q.k| = {report['max_abs_product']:.4g} > {top:g}; first at index {first}. "
            f"{over['positive']} of them are +inf, which makes their softmax rows NaN "
            f"({report['nonfinite_rows']['count']} rows); -inf ones silently get probability 0. "
            + (f"Multiplying q by the factor {report['factor']:.4g} before the matmul leaves "
               f"{report['matmul_overflow_scaled_first']['count']} overflowing."
               if report["factor"] != 1 else ""))
    naive = report["naive_softmax_overflow_rows"]
    if naive["count"]:
        lines.append(
            f"A softmax without max subtraction (exp / sum) overflows in {naive['count']} of {report['rows']} rows: "
            f"the largest logit {report['logits']['max']:.4g} passes ln({top:g}) = {report['exp_overflow_at']:.4g}. "
            "A max-subtracted softmax (torch.softmax, SDPA, FlashAttention) does not.")
    one = report["saturated_rows"]
    if one["count"]:
        lines.append(f"{one['count']} of {report['rows']} rows ({one['share']:.3g}) have a probability that is "
                     f"exactly 1 in {name}: one-hot rows, whose softmax gradient is 0.")
    zero = report["probs_underflow_to_zero"]
    if zero["count"]:
        lines.append(f"{zero['count']} of {report['entries']} probabilities ({zero['share']:.3g}) underflow to "
                     f"exactly 0 in {name} (positive in float64); they get no gradient.")
    if not lines:
        lines.append(f"No overflow in {name}: largest |q.k| {report['max_abs_product']:.4g} <= {top:g}, "
                     f"largest logit {report['logits']['max']:.4g}.")
    error = report["output_error"]
    if error["max"] is not None:
        lines.append(f"Expected error in {name} against float64 (finite rows, values drawn N(0, 1)): probabilities "
                     f"max {report['prob_error']['max']:.3g}, mean {report['prob_error']['mean']:.3g}; "
                     f"output max {error['max']:.3g}, mean {error['mean']:.3g}.")
    return lines
