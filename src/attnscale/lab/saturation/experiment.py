"""The saturation lab's experiment: what each scale factor does to the softmax, its Jacobian and the gradient.

Claims C04, C05 and C06 (their saturation half: the training lab has the rest), C16, and the
part of C18 that needs no training.

1. **Softmax rows across the factor d_k^-A (C04, C05, C06, C18).**  For every d_k, number
   of keys n and exponent A on a grid over [0, 1.5] (A = 0 is ``none``, 0.5 ``sqrt``, 1
   ``inv_d``), plus one constant factor (``const:C``), R rows are sampled exactly as
   :func:`softmax_row_stats` documents, and the mean normalised entropy, max probability,
   effective support exp(H), Jacobian Frobenius norm, the share of saturated rows
   (max p > 0.99) and of near-uniform rows (KL to uniform < 0.01) are measured with
   :func:`attnscale.stats.summarize`.  The same draws serve every factor at a given (d_k, n),
   so differences between rules come from the factor alone.

   The logit std is factor * qk_std^2 * sqrt(d_k), so log(std) against log(d_k) has slope
   0.5 - A: only A = 0.5 keeps the softmax input independent of d_k.  A constant factor
   has slope 0.5 whatever its value.

2. **The gradient that reaches W_q (C06, C18).**  Unit-variance tokens x (d_model) through
   W_q, W_k (d_model -> d_k, std d_model^-1/2, so q and k have unit-variance components)
   and W_v; attention over n tokens with factor d_k^-A; loss = a fixed random linear
   function of the attention output (and, separately, of the probabilities); autograd to
   W_q.  The chain rule includes the factor itself.

3. **The softmax derivative (C16).**  For n = 2 and n = 128: one logit x swept over
   [-3, 3] and set to 100, the others fixed (0 for n = 2; a N(0, 1) sample for n = 128);
   p_x, the diagonal p(1 - p), the full Jacobian diag(p) - p p^T (Frobenius norm, largest
   off-diagonal entry).  And for logits as the sqrt rule gives them (std 1): the share of
   p_i in [0.05, 0.95] and the range of p_i(1 - p_i).

Nothing here writes a file or prints.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ... import checks, intervals, stats
from ...attention import attention
from ...errors import UserError
from ...runtime import check_device
from .. import run_in_one_thread
from .. import Ticker

VERSION = 5  # 3: 95% intervals of the voting numbers (row_intervals); 4: and of C16's shares; 5: intervals reduced in float64 torch

RULE_EXPONENTS = {"none": 0.0, "sqrt": 0.5, "inv_d": 1.0}
DERIV_NS = (2, 4, 8, 16, 32, 64, 128)  # C16: keys per row for the derivative of sqrt-scaled logits
# C16's ranges: for inputs in [-3, 3], "p_i about 0.05-0.95, derivative about 0.05-0.25"
P_RANGE, DIAG_RANGE = (0.05, 0.95), (0.05, 0.25)


@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"
    d_ks: tuple[int, ...] = tuple(2**i for i in range(13))
    ns: tuple[int, ...] = (16, 128, 1024)
    exponents: tuple[float, ...] = tuple(i / 8 for i in range(13))  # 0, 0.125, ..., 1.5
    constant: float = 0.125        # the const:C rule (1/sqrt(64): right at d_k = 64 only)
    rows: int = 1024               # R rows per (d_k, n): enough that a 1% share of saturated rows is decided
    qk_std: float = 1.0            # std of each q and k component
    grad_n: int = 128              # tokens in the gradient experiment
    grad_batch: int = 2
    grad_d_model: int = 64
    grad_d_v: int = 64
    deriv_points: int = 61         # x grid over [-3, 3] for C16
    deriv_rows: int = 256

    def __post_init__(self):
        checks.config(self)


PRESETS = {
    "quick": Config(),
    "full": Config(rows=2048, grad_batch=8, deriv_rows=4096),
}


def check_config(config: Config) -> Config:
    for d in config.d_ks:
        if not isinstance(d, int) or d < 1:
            raise UserError(f"every d_k must be an integer >= 1, got {d!r}")
    for n in config.ns:
        if not isinstance(n, int) or n < 2:
            raise UserError(f"every n must be an integer >= 2, got {n!r}")
    for a in config.exponents:
        if not math.isfinite(a):
            raise UserError(f"every exponent A must be finite, got {a!r}")
    if not (config.qk_std > 0 and config.constant > 0):
        raise UserError(f"qk_std and constant must be > 0, got {config.qk_std!r}, {config.constant!r}")
    checks.fields(config, ints=("rows", "grad_n", "grad_d_model", "grad_d_v", "deriv_points", "deriv_rows"), minimum=2)
    checks.fields(config, ints=("grad_batch",))
    check_device(config.device)
    return config


# ---------------------------------------------------------------------------------------
# 1. softmax rows


def sample_rows(d_k: int, n: int, qk_std: float = 1.0, rows: int = 256, seed: int = 0, device: str = "cpu"):
    """The raw (unscaled) logits q.k_j of ``rows`` query rows over n keys, shape (rows, n), float32.

    q and the keys k_j have independent N(0, qk_std^2) components.  Given q, the q.k_j are
    independent N(0, qk_std^2 |q|^2), so a row is drawn exactly as qk_std * |q| * z_j:
    first z (rows x n standard normals), then q (rows x d_k normals times qk_std), both from
    one torch.Generator seeded with ``seed``.  Cost rows * (n + d_k), not rows * n * d_k.
    """
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    z = torch.randn(rows, n, generator=g, device=device)
    q = torch.randn(rows, d_k, generator=g, device=device) * qk_std
    return qk_std * q.norm(dim=-1, keepdim=True) * z


def row_stats(logits: torch.Tensor) -> dict:
    """Everything the lab reports about a batch of softmax inputs (rows, n)."""
    probs = torch.softmax(logits, dim=-1)
    table = stats.row_table(probs)
    summary = stats.summarize(probs, table=table)
    moments = stats.logit_moments(logits)
    summary["logit_std"] = float(logits.pow(2).mean().sqrt())  # RMS about 0, the population std
    summary["logit_max_abs"] = float(moments["max_abs"].mean())
    summary["share_within_3"] = float((logits.abs() <= 3).to(torch.float64).mean())
    summary.update(row_intervals(logits, table["normalized_entropy"], moments["max_abs"], summary))
    return summary


def row_intervals(logits: torch.Tensor, normalized_entropy: torch.Tensor, max_abs: torch.Tensor,
                  summary: dict) -> dict:
    """95% intervals of the numbers the verdicts compare with a threshold, with the row as the
    independent unit (the logits of one row share |q|): the normal interval of a mean over rows,
    and Wilson intervals of the shares of saturated and near-uniform rows (counted from
    ``summary``, stats.summarize's shares of its ``rows``)."""
    rows = summary["rows"]
    square_lo, square_hi = intervals.mean_interval(logits.double().pow(2).mean(dim=-1))
    saturated, uniform = (round(summary[key] * rows) for key in ("saturated_share", "uniform_share"))
    return {
        "logit_std_ci": [math.sqrt(max(square_lo, 0.0)), math.sqrt(square_hi)],
        "logit_max_abs_ci": list(intervals.mean_interval(max_abs.double())),
        "share_within_3_ci": list(intervals.mean_interval((logits.abs() <= 3).double().mean(dim=-1))),
        "normalized_entropy_ci": list(intervals.mean_interval(normalized_entropy.double())),
        "saturated_share_ci": list(intervals.wilson(saturated, rows)),
        "uniform_share_ci": list(intervals.wilson(uniform, rows)),
    }


def softmax_row_stats(d_k: int, exponent: float = 0.5, n: int = 128, qk_std: float = 1.0, seed: int = 0,
                      rows: int = 256, coef: float = 1.0) -> dict:
    """Stats of softmax(coef * d_k^-exponent * q.k_j) for one setting, averaged over ``rows`` rows.

    The rows are drawn by :func:`sample_rows` (see there, exactly).  Returns
    ``normalized_entropy``, ``max_prob``, ``jacobian_frobenius``, ``effective_support``,
    ``kl_to_uniform``, ``saturated_share`` (max p > 0.99), ``uniform_share`` (KL < 0.01),
    ``logit_std``, ``logit_max_abs`` and ``share_within_3``: the numbers the lab reports for
    this (d_k, exponent, n) with the lab's seed and rows.
    """
    if not isinstance(d_k, int) or d_k < 1:
        raise UserError(f"d_k must be an integer >= 1, got {d_k!r}")
    if not isinstance(n, int) or n < 2:
        raise UserError(f"n must be an integer >= 2, got {n!r}")
    if not (qk_std > 0 and rows >= 1 and math.isfinite(exponent)):
        raise UserError(f"need qk_std > 0, rows >= 1, a finite exponent; got {qk_std!r}, {rows!r}, {exponent!r}")
    return row_stats(coef * d_k**-exponent * sample_rows(d_k, n, qk_std, rows, seed))


def factors(config: Config) -> list[tuple[str, float | None, float]]:
    """(spec, exponent or None, factor coefficient) for every factor the sweep measures."""
    specs = [(f"power:{a:g}", a, 1.0) for a in config.exponents]
    return specs + [(f"const:{config.constant:g}", None, config.constant)]


def rule_name(exponent: float | None) -> str | None:
    for name, a in RULE_EXPONENTS.items():
        if exponent is not None and abs(exponent - a) < 1e-12:
            return name
    return None


def sweep_setting(d_k: int, n: int, config: Config) -> list[dict]:
    raw = sample_rows(d_k, n, config.qk_std, config.rows, config.seed, config.device)
    out = []
    for spec, exponent, coef in factors(config):
        factor = coef * (d_k**-exponent if exponent is not None else 1.0)
        out.append({"spec": spec, "rule": rule_name(exponent), "exponent": exponent, "d_k": d_k, "n": n,
                    "factor": factor, **row_stats(factor * raw)})
    return out


def fit_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx = torch.tensor(xs, dtype=torch.float64).log()
    ly = torch.tensor(ys, dtype=torch.float64).log()
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())


def slopes(rows: list[dict], n: int) -> list[dict]:
    """Per factor: the slope of log(logit std) vs log(d_k), theory 0.5 - A, and the spread of the
    normalised entropy across d_k (max - min) at n keys."""
    out = []
    for spec in dict.fromkeys(r["spec"] for r in rows):
        sel = [r for r in rows if r["spec"] == spec and r["n"] == n]
        if len(sel) < 2:
            continue
        exponent = sel[0]["exponent"]
        ent = [r["normalized_entropy"] for r in sel]
        out.append({"spec": spec, "exponent": exponent, "n": n,
                    "slope": fit_slope([r["d_k"] for r in sel], [r["logit_std"] for r in sel]),
                    "theory": 0.5 - (exponent if exponent is not None else 0.0),
                    "entropy_spread": max(ent) - min(ent), "entropy_min": min(ent), "entropy_max": max(ent)})
    return out


def zero_slope_exponent(slope_rows: list[dict]) -> float | None:
    """The A where the measured slope crosses 0 (linear interpolation over the A grid)."""
    pts = sorted((r["exponent"], r["slope"]) for r in slope_rows if r["exponent"] is not None)
    for (a0, s0), (a1, s1) in zip(pts, pts[1:]):
        if s0 == 0:
            return a0
        if s0 > 0 >= s1:
            return a0 + (a1 - a0) * s0 / (s0 - s1)
    return None


# ---------------------------------------------------------------------------------------
# 2. the gradient that reaches W_q


def gradient_to_wq(d_k: int, config: Config) -> list[dict]:
    """||dL/dW_q||_F for every factor, same tokens and weights (seeded by d_k)."""
    g = torch.Generator(device=config.device)
    g.manual_seed(config.seed * 100_003 + d_k)
    b, n, d, dv, dev = config.grad_batch, config.grad_n, config.grad_d_model, config.grad_d_v, config.device
    x = torch.randn(b, n, d, generator=g, device=dev)
    w_q = (torch.randn(d_k, d, generator=g, device=dev) * d**-0.5).requires_grad_(True)
    w_k = torch.randn(d_k, d, generator=g, device=dev) * d**-0.5
    w_v = torch.randn(dv, d, generator=g, device=dev) * d**-0.5
    out_weights = torch.randn(b, n, dv, generator=g, device=dev)
    prob_weights = torch.randn(b, n, n, generator=g, device=dev)
    rows = []
    for spec, exponent, coef in factors(config):
        scale = f"power:{exponent!r}" if exponent is not None else f"const:{coef!r}"
        q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
        out, probs = attention(q, k, v, scale=scale, impl="stable", return_weights=True)
        loss_out = (out * out_weights).sum(-1).mean()
        loss_probs = (probs * prob_weights).sum(-1).mean()
        grad_out, = torch.autograd.grad(loss_out, w_q, retain_graph=True)
        grad_probs, = torch.autograd.grad(loss_probs, w_q)
        rows.append({"spec": spec, "rule": rule_name(exponent), "exponent": exponent, "d_k": d_k, "n": n,
                     "grad_wq_output": float(grad_out.norm()), "grad_wq_probs": float(grad_probs.norm()),
                     "max_prob": float(stats.max_prob(probs.detach()).mean())})
    return rows


# ---------------------------------------------------------------------------------------
# 3. the softmax derivative


def derivative_at(logits: torch.Tensor) -> dict:
    """For rows (..., n) whose logit 0 is the one swept: p_0, p_0(1 - p_0), ||J||_F, max |off-diagonal|."""
    probs = torch.softmax(logits, dim=-1)
    jac = stats.softmax_jacobian(probs)
    off = jac - torch.diag_embed(torch.diagonal(jac, dim1=-2, dim2=-1))
    return {"p": probs[..., 0], "diag": stats.jacobian_diagonal(probs)[..., 0],
            "frobenius": stats.jacobian_frobenius(probs), "max_off_diag": off.abs().amax(dim=(-2, -1))}


def derivative_curves(config: Config) -> dict:
    g = torch.Generator().manual_seed(config.seed + 16)
    xs = torch.linspace(-3, 3, config.deriv_points, dtype=torch.float64)
    curves = {}
    for n in (2, 128):
        others = torch.zeros(n - 1, dtype=torch.float64) if n == 2 else torch.randn(n - 1, generator=g, dtype=torch.float64)
        grid = torch.cat([torch.cat([xs, torch.tensor([100.0], dtype=torch.float64)]).unsqueeze(-1),
                          others.expand(len(xs) + 1, n - 1)], dim=-1)
        d = derivative_at(grid)
        # the diagonal of autograd's Jacobian must be p(1 - p): a check of the formula itself
        auto = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), grid[len(xs) // 2])
        formula_error = float((torch.diagonal(auto) - stats.jacobian_diagonal(torch.softmax(grid[len(xs) // 2], -1)))
                              .abs().max())
        curves[str(n)] = {
            "x": xs.tolist(), "p": d["p"][:-1].tolist(), "diag": d["diag"][:-1].tolist(),
            "frobenius": d["frobenius"][:-1].tolist(), "max_off_diag": d["max_off_diag"][:-1].tolist(),
            "at_100": {"p": float(d["p"][-1]), "diag": float(d["diag"][-1]), "frobenius": float(d["frobenius"][-1]),
                       "max_off_diag": float(d["max_off_diag"][-1])},
            "p_range": [min(d["p"][:-1].tolist()), max(d["p"][:-1].tolist())],
            "diag_range": [min(d["diag"][:-1].tolist()), max(d["diag"][:-1].tolist())],
            "formula_error": formula_error,
        }
    return curves


def derivative_in_use(config: Config, d_k: int = 64) -> dict:
    """p_i and p_i(1 - p_i) for logits as the sqrt rule gives them (std qk_std^2), n in DERIV_NS."""
    out = {}
    for n in DERIV_NS:
        logits = sample_rows(d_k, n, config.qk_std, config.deriv_rows, config.seed, config.device) * d_k**-0.5
        probs = torch.softmax(logits.double(), dim=-1)
        row_diag = stats.jacobian_diagonal(probs)  # (rows, n)
        diag = row_diag.flatten()
        p = probs.flatten()
        jac_sq = stats.jacobian_frobenius(probs).pow(2)
        diag_sq = row_diag.pow(2).sum(-1)
        q = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
        out[str(n)] = {
            "n": n, "d_k": d_k,
            "logits_within_3": float((logits.abs() <= 3).to(torch.float64).mean()),
            "share_p_in_5_95": float(((p >= P_RANGE[0]) & (p <= P_RANGE[1])).to(torch.float64).mean()),
            "p_quantiles": torch.quantile(p, q).tolist(),
            "diag_quantiles": torch.quantile(diag, q).tolist(),
            "share_diag_in_5_25": float(((diag >= DIAG_RANGE[0]) & (diag <= DIAG_RANGE[1])).to(torch.float64).mean()),
            # over rows, the independent unit (the p_i of a row sum to 1)
            "share_p_in_5_95_ci": list(intervals.mean_interval(
                ((probs >= P_RANGE[0]) & (probs <= P_RANGE[1])).double().mean(dim=-1))),
            "share_diag_in_5_25_ci": list(intervals.mean_interval(
                ((row_diag >= DIAG_RANGE[0]) & (row_diag <= DIAG_RANGE[1])).double().mean(dim=-1))),
            "diagonal_share_of_jacobian": float((diag_sq / jac_sq).mean()),
        }
    return out


# ---------------------------------------------------------------------------------------
# run


def run(config: Config, progress=None) -> dict:
    return run_in_one_thread(check_config, _run, config, progress)


def _run(config: Config, progress=None) -> dict:
    tick = Ticker(progress, steps=len(config.d_ks) * 2 + 1)

    sweep = []
    for d_k in config.d_ks:
        for n in config.ns:
            sweep.extend(sweep_setting(d_k, n, config))
        tick(f"softmax rows d_k={d_k}")
    grads = []
    for d_k in config.d_ks:
        grads.extend(gradient_to_wq(d_k, config))
        tick(f"gradient d_k={d_k}")
    slope_rows = [row for n in config.ns for row in slopes(sweep, n)]
    result = {
        "config": dataclasses.asdict(config),
        "sweep": sweep,
        "slopes": slope_rows,
        "zero_slope_exponent": {str(n): zero_slope_exponent([r for r in slope_rows if r["n"] == n]) for n in config.ns},
        "gradient": grads,
        "derivative": derivative_curves(config),
        "derivative_in_use": derivative_in_use(config),
    }
    tick("derivatives")
    return result
