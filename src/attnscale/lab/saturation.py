"""The saturation lab: what each scale factor does to the softmax, its Jacobian and the gradient.

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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from .. import checks, claims, stats
from ..attention import attention
from ..claims import Finding
from ..threads import torch_threads
from . import Ticker
from ..plotting import pyplot, save
from ..runtime import check_device

VERSION = 2

RULE_EXPONENTS = {"none": 0.0, "sqrt": 0.5, "inv_d": 1.0}
DERIV_NS = (2, 4, 8, 16, 32, 64, 128)  # C16: keys per row for the derivative of sqrt-scaled logits
# C16's ranges: for inputs in [-3, 3], "p_i about 0.05-0.95, derivative about 0.05-0.25"
P_RANGE, DIAG_RANGE = (0.05, 0.95), (0.05, 0.25)

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C04": ("max_std_error", "min_share_within_3", "max_saturated_share"),
    "C05": ("min_normalized_entropy", "min_uniform_share"),
    "C06": ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt", "grad_ratio_probs", "dk_logits_reach_100"),
    "C16": ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n", "share_diag_in_range_small_n",
            "share_p_in_range_large_n", "holds_up_to_n", "possible_up_to_n"),
    "C18": ("zero_slope_exponent", "least_varying_exponent", "sqrt_entropy_spread", "inv_d_entropy_at_max_dk",
            "constant_factor", "constant_entropy_min", "constant_entropy_max"),
}


@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"
    d_ks: tuple[int, ...] = tuple(2**i for i in range(13))
    ns: tuple[int, ...] = (16, 128, 1024)
    exponents: tuple[float, ...] = tuple(i / 8 for i in range(13))  # 0, 0.125, ..., 1.5
    constant: float = 0.125        # the const:C rule (1/sqrt(64): right at d_k = 64 only)
    rows: int = 256                # R rows per (d_k, n)
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
            raise ValueError(f"every d_k must be an integer >= 1, got {d!r}")
    for n in config.ns:
        if not isinstance(n, int) or n < 2:
            raise ValueError(f"every n must be an integer >= 2, got {n!r}")
    for a in config.exponents:
        if not math.isfinite(a):
            raise ValueError(f"every exponent A must be finite, got {a!r}")
    if not (config.qk_std > 0 and config.constant > 0):
        raise ValueError(f"qk_std and constant must be > 0, got {config.qk_std!r}, {config.constant!r}")
    for name in ("rows", "grad_n", "grad_d_model", "grad_d_v", "deriv_points", "deriv_rows"):
        if getattr(config, name) < 2:
            raise ValueError(f"{name} must be >= 2, got {getattr(config, name)!r}")
    if config.grad_batch < 1:
        raise ValueError(f"grad_batch must be >= 1, got {config.grad_batch!r}")
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
    summary = stats.summarize(probs)
    moments = stats.logit_moments(logits)
    summary["logit_std"] = float(logits.pow(2).mean().sqrt())  # RMS about 0, the population std
    summary["logit_max_abs"] = float(moments["max_abs"].mean())
    summary["share_within_3"] = float((logits.abs() <= 3).to(torch.float64).mean())
    return summary


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
        raise ValueError(f"d_k must be an integer >= 1, got {d_k!r}")
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if not (qk_std > 0 and rows >= 1 and math.isfinite(exponent)):
        raise ValueError(f"need qk_std > 0, rows >= 1, a finite exponent; got {qk_std!r}, {rows!r}, {exponent!r}")
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
        diag = stats.jacobian_diagonal(probs).flatten()
        p = probs.flatten()
        jac_sq = stats.jacobian_frobenius(probs).pow(2)
        diag_sq = stats.jacobian_diagonal(probs).pow(2).sum(-1)
        q = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
        out[str(n)] = {
            "n": n, "d_k": d_k,
            "logits_within_3": float((logits.abs() <= 3).to(torch.float64).mean()),
            "share_p_in_5_95": float(((p >= P_RANGE[0]) & (p <= P_RANGE[1])).to(torch.float64).mean()),
            "p_quantiles": torch.quantile(p, q).tolist(),
            "diag_quantiles": torch.quantile(diag, q).tolist(),
            "share_diag_in_5_25": float(((diag >= DIAG_RANGE[0]) & (diag <= DIAG_RANGE[1])).to(torch.float64).mean()),
            "diagonal_share_of_jacobian": float((diag_sq / jac_sq).mean()),
        }
    return out


# ---------------------------------------------------------------------------------------
# run


def run(config: Config, progress=None) -> dict:
    config = check_config(config)
    with torch_threads(1):
        return _run(config, progress)


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


# ---------------------------------------------------------------------------------------
# verdicts


def _pick(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _n_ref(result: dict) -> int:
    ns = result["config"]["ns"]
    return 128 if 128 in ns else ns[len(ns) // 2]


def judge_c04(result: dict) -> Finding:
    """Three parts under sqrt: logit std within 10% of 1 at every d_k (n = 128); >= 95% of logits in
    [-3, 3] at every d_k; saturated rows (max p > 0.99) <= 1% at every d_k and n."""
    n = _n_ref(result)
    rows = _pick(result["sweep"], rule="sqrt", n=n)
    every = _pick(result["sweep"], rule="sqrt")
    if not rows:
        return Finding(claims.NOT_TESTABLE, "the sqrt rule (A = 0.5) is not on the exponent grid.")
    std_err = max(abs(r["logit_std"] - 1) for r in rows)
    within = min(r["share_within_3"] for r in rows)
    saturated = max(r["saturated_share"] for r in every)
    none_sat = _pick(result["sweep"], rule="none", n=n)
    parts = [std_err <= 0.1, within >= 0.95, saturated <= 0.01]
    verdict = claims.SUPPORTED if all(parts) else claims.PARTLY if any(parts) else claims.REFUTED
    big = rows[-1]
    none_text = (f" Without the factor, the same rows at d_k = {none_sat[-1]['d_k']} are saturated in "
                 f"{none_sat[-1]['saturated_share']:.0%} of cases." if none_sat else "")
    evidence = (f"With q and k components of variance {result['config']['qk_std'] ** 2:g} and the 1/sqrt(d_k) factor, "
                f"the logit std stays within {std_err:.1%} of 1 for d_k = {rows[0]['d_k']}..{big['d_k']} (n = {n}); "
                f"at least {within:.1%} of logits lie in [-3, 3] (least at d_k = 1, where q.k is a product of two "
                f"normals); at most {saturated:.1%} of rows are saturated (max p > 0.99) at any d_k and n, and the mean "
                f"Jacobian Frobenius norm is {big['jacobian_frobenius']:.3f} at d_k = {big['d_k']}.{none_text} "
                f"Variance 1 needs unit-variance q and k components, which PyTorch's default init does not give (C01). "
                f"Rule: supported if std within 10% of 1 at every d_k, >= 95% of logits in [-3, 3], and <= 1% "
                f"saturated rows; partly if some of these hold; refuted if none.")
    return Finding(verdict, evidence, {"max_std_error": std_err, "min_share_within_3": within,
                                       "max_saturated_share": saturated})


def judge_c05(result: dict) -> Finding:
    """Saturation half: inv_d at d_k in {64, 128} (n = 128): near uniform if mean normalised entropy
    >= 0.99 and >= 50% of rows within KL 0.01 of uniform (supported); entropy >= 0.95 only: partly."""
    n = _n_ref(result)
    rows = [r for r in _pick(result["sweep"], rule="inv_d", n=n) if r["d_k"] in (64, 128)]
    if not rows:
        return Finding(claims.NOT_TESTABLE, "needs inv_d (A = 1) at d_k = 64 or 128.")
    ent = min(r["normalized_entropy"] for r in rows)
    uni = min(r["uniform_share"] for r in rows)
    if ent >= 0.99 and uni >= 0.5:
        verdict = claims.SUPPORTED
    elif ent >= 0.95:
        verdict = claims.PARTLY
    else:
        verdict = claims.REFUTED
    desc = "; ".join(f"d_k = {r['d_k']}: logit std {r['logit_std']:.3f}, normalised entropy {r['normalized_entropy']:.4f}, "
                     f"max p {r['max_prob']:.4f} (uniform: {1 / n:.4f}), {r['uniform_share']:.0%} of rows within KL 0.01 "
                     f"of uniform" for r in rows)
    sqrt_rows = [r for r in _pick(result["sweep"], rule="sqrt", n=n) if r["d_k"] in (64, 128)]
    sqrt_text = f" Under sqrt the same rows have normalised entropy {sqrt_rows[0]['normalized_entropy']:.3f}." if sqrt_rows else ""
    evidence = (f"At initialisation (unit-variance q, k components), dividing by d_k with n = {n} keys: {desc}.{sqrt_text} "
                f"So the softmax starts near uniform; whether training grows q and k to compensate, and whether the "
                f"model is 'unusable', is the training lab's half. Rule: supported if the mean normalised entropy "
                f">= 0.99 and >= 50% of rows are within KL 0.01 of uniform, partly if only the entropy >= 0.95.")
    return Finding(verdict, evidence, {"min_normalized_entropy": ent, "min_uniform_share": uni})


def _dk_reaching(rows: list[dict], key: str, level: float) -> float | None:
    """The d_k (log-interpolated) where rows[key] first reaches ``level``."""
    pts = sorted((r["d_k"], r[key]) for r in rows)
    for (d0, y0), (d1, y1) in zip(pts, pts[1:]):
        if y0 >= level:
            return d0
        if y1 >= level:
            t = (level - y0) / (y1 - y0)
            return math.exp(math.log(d0) + t * (math.log(d1) - math.log(d0)))
    return None


def judge_c06(result: dict) -> Finding:
    """Saturation half, no scaling at d_k in {64, 128}, n = 128: (i) logits around +-100: mean max |logit|
    >= 50; (ii) near one-hot: >= 50% of rows saturated (max p > 0.99); (iii) gradient to W_q near 0:
    below 1/10 of the sqrt rule's.  All: supported; none: refuted; otherwise partly."""
    n = _n_ref(result)
    rows = [r for r in _pick(result["sweep"], rule="none", n=n) if r["d_k"] in (64, 128)]
    grads = {(r["rule"], r["d_k"]): r for r in result["gradient"] if r["d_k"] in (64, 128)}
    if not rows or ("sqrt", rows[0]["d_k"]) not in grads or ("none", rows[0]["d_k"]) not in grads:
        return Finding(claims.NOT_TESTABLE, "needs none and sqrt at d_k = 64 or 128.")
    max_abs = max(r["logit_max_abs"] for r in rows)
    saturated = min(r["saturated_share"] for r in rows)
    ratio = max(grads[("none", r["d_k"])]["grad_wq_output"] / grads[("sqrt", r["d_k"])]["grad_wq_output"] for r in rows)
    ratio_p = max(grads[("none", r["d_k"])]["grad_wq_probs"] / grads[("sqrt", r["d_k"])]["grad_wq_probs"] for r in rows)
    parts = [max_abs >= 50, saturated >= 0.5, ratio <= 0.1]
    verdict = claims.SUPPORTED if all(parts) else claims.REFUTED if not any(parts) else claims.PARTLY
    all_none = _pick(result["sweep"], rule="none", n=n)
    reach = _dk_reaching(all_none, "logit_max_abs", 100)
    half_sat = _dk_reaching(all_none, "saturated_share", 0.5)
    big_g = [r for r in result["gradient"] if r["rule"] in ("none", "sqrt")]
    big_dk = max(r["d_k"] for r in big_g)
    big_ratio = (_pick(big_g, rule="none", d_k=big_dk)[0]["grad_wq_output"]
                 / _pick(big_g, rule="sqrt", d_k=big_dk)[0]["grad_wq_output"])
    desc = "; ".join(f"d_k = {r['d_k']}: logit std {r['logit_std']:.1f}, mean max |logit| {r['logit_max_abs']:.1f}, "
                     f"max p {r['max_prob']:.3f}, {r['saturated_share']:.0%} of rows saturated" for r in rows)
    evidence = (f"Unscaled, n = {n} keys, unit-variance q and k: {desc}. The gradient reaching W_q is at most "
                f"{ratio:.2f}x the sqrt rule's (loss on the output; {ratio_p:.2f}x for a loss on the probabilities); at "
                f"d_k = {big_dk} it is {big_ratio:.3f}x. The mean max |logit| reaches 100 only at d_k "
                f"{'~ %.0f' % reach if reach else 'beyond the grid'}, and half of the rows are saturated from d_k "
                f"{'~ %.0f' % half_sat if half_sat else 'beyond the grid'}. Rule, at d_k = 64 and 128: (i) 'around "
                f"+-100' if the mean max |logit| >= 50, (ii) 'near one-hot' if >= 50% of rows have max p > 0.99, "
                f"(iii) 'gradient near 0' if below 1/10 of the sqrt rule's; supported if all hold, refuted if none, "
                f"partly otherwise. Whether training stalls is the training lab's half.")
    return Finding(verdict, evidence, {"max_logit_abs": max_abs, "min_saturated_share": saturated,
                                       "grad_ratio_none_sqrt": ratio, "grad_ratio_probs": ratio_p,
                                       "dk_logits_reach_100": reach})


def judge_c16(result: dict) -> Finding:
    """(i) near 0 for an extreme input: every Jacobian entry < 1e-10 at 100, n = 2 and 128.  (ii) the
    claimed ranges, judged where they can hold: for sqrt-scaled logits with the fewest keys measured
    (n = 2, a sigmoid), >= 50% of p_i in [0.05, 0.95] and >= 50% of p_i(1 - p_i) in [0.05, 0.25].
    Both: supported; one: partly; neither: refuted.  Since the p_i sum to 1, at most 20 of them reach
    0.05, so (ii) cannot hold beyond 40 keys: the verdict names the n up to which it was measured to hold."""
    curves, used = result["derivative"], result["derivative_in_use"]
    at100 = max(max(c["at_100"]["diag"], c["at_100"]["max_off_diag"]) for c in curves.values())
    extreme_ok = at100 < 1e-10
    ns = sorted(int(n) for n in used)
    holds = {n: used[str(n)]["share_p_in_5_95"] >= 0.5 and used[str(n)]["share_diag_in_5_25"] >= 0.5 for n in ns}
    small, large = used[str(ns[0])], used[str(ns[-1])]
    range_ok = holds[ns[0]]
    up_to = None
    for n in ns:
        if not holds[n]:
            break
        up_to = n
    possible = round(2 / P_RANGE[0])  # 1 / 0.05 = 20 values can reach 0.05: half of 40 keys
    parts = [extreme_ok, range_ok]
    verdict = claims.SUPPORTED if all(parts) else claims.REFUTED if not any(parts) else claims.PARTLY
    scope = (f"for up to {up_to} keys only; not at {ns[-1]}" if range_ok and up_to is not None and up_to < ns[-1]
             else None)
    c2, c128 = curves["2"], curves["128"]
    by_n = ", ".join(f"n = {n}: {used[str(n)]['share_p_in_5_95']:.0%}" for n in ns)
    evidence = (f"The diagonal of the softmax Jacobian is p_i(1 - p_i) (autograd agrees to "
                f"{max(c['formula_error'] for c in curves.values()):.1e}); the full Jacobian also has off-diagonal "
                f"terms -p_i p_j (for n = {large['n']} the diagonal carries {large['diagonal_share_of_jacobian']:.0%} "
                f"of its squared norm). At an input of 100 every entry is below {max(at100, 1e-300):.1e}: "
                f"{'near 0, as claimed' if extreme_ok else 'not near 0'}. For one logit swept over [-3, 3]: with n = 2 "
                f"(the other logit 0; a sigmoid) p runs {c2['p_range'][0]:.3f}-{c2['p_range'][1]:.3f} and p(1 - p) "
                f"{c2['diag_range'][0]:.3f}-{c2['diag_range'][1]:.3f}, the seed's numbers; with n = 128 (others "
                f"N(0, 1)) p runs only {c128['p_range'][0]:.4f}-{c128['p_range'][1]:.4f} and p(1 - p) "
                f"{c128['diag_range'][0]:.4f}-{c128['diag_range'][1]:.4f}. For logits as the sqrt rule gives them "
                f"(d_k = {small['d_k']}), the share of p_i in [{P_RANGE[0]}, {P_RANGE[1]}] is {by_n}; with "
                f"{small['n']} keys {small['share_diag_in_5_25']:.0%} of p_i(1 - p_i) lie in [{DIAG_RANGE[0]}, "
                f"{DIAG_RANGE[1]}]. The p_i sum to 1, so at most {possible // 2} of them can reach {P_RANGE[0]}: beyond "
                f"{possible} keys fewer than half can, whatever the logits. So the seed's ranges describe a softmax "
                f"over a few keys: measured, they hold "
                + (f"up to n = {up_to}" if up_to is not None else "for no n measured")
                + f" and fail for realistic n (n = {large['n']}: {large['share_p_in_5_95']:.1%} of p_i in range, "
                f"median p_i {large['p_quantiles'][1]:.4f}, 95th percentile of p_i(1 - p_i) "
                f"{large['diag_quantiles'][2]:.4f}). Rule: (i) the derivative at 100 is below 1e-10; (ii) with "
                f"{small['n']} keys, >= 50% of p_i lie in [{P_RANGE[0]}, {P_RANGE[1]}] and >= 50% of p_i(1 - p_i) in "
                f"[{DIAG_RANGE[0]}, {DIAG_RANGE[1]}]; supported if both hold (with the n up to which (ii) holds "
                f"named), partly if one does, refuted if neither.")
    return Finding(verdict, evidence, {
        "max_entry_at_100": at100, "small_n": small["n"], "large_n": large["n"],
        "share_p_in_range_small_n": small["share_p_in_5_95"], "share_diag_in_range_small_n": small["share_diag_in_5_25"],
        "share_p_in_range_large_n": large["share_p_in_5_95"], "holds_up_to_n": up_to, "possible_up_to_n": possible},
        scope=scope)


def judge_c18(result: dict) -> Finding:
    """No-training part: (i) the exponent with zero slope of log(logit std) vs log(d_k) is within 0.05 of
    0.5; (ii) the exponent whose normalised entropy varies least across d_k is within one grid step of
    0.5; (iii) inv_d over-smooths: normalised entropy >= 0.99 at the largest d_k; (iv) a constant cannot
    adapt: its slope is within 0.05 of 0.5 and its entropy spread across d_k >= 0.3.  All: supported;
    neither (i) nor (ii): refuted; otherwise partly."""
    n = _n_ref(result)
    slope_rows = [r for r in result["slopes"] if r["n"] == n]
    powers = [r for r in slope_rows if r["exponent"] is not None]
    const = [r for r in slope_rows if r["exponent"] is None]
    if len(powers) < 2:
        return Finding(claims.NOT_TESTABLE, "needs at least two exponents on the grid.")
    a_star = result["zero_slope_exponent"].get(str(n))
    grid = sorted(r["exponent"] for r in powers)
    step = min(b - a for a, b in zip(grid, grid[1:]))
    best = min(powers, key=lambda r: r["entropy_spread"])
    inv = sorted(_pick(result["sweep"], rule="inv_d", n=n), key=lambda r: r["d_k"])
    oversmooth = bool(inv) and inv[-1]["normalized_entropy"] >= 0.99
    const_fails = bool(const) and abs(const[0]["slope"] - 0.5) <= 0.05 and const[0]["entropy_spread"] >= 0.3
    a_ok = a_star is not None and abs(a_star - 0.5) <= 0.05
    best_ok = abs(best["exponent"] - 0.5) <= step + 1e-9
    parts = [a_ok, best_ok, oversmooth, const_fails]
    verdict = claims.SUPPORTED if all(parts) else claims.REFUTED if not (a_ok or best_ok) else claims.PARTLY
    slope_text = ", ".join(f"A = {r['exponent']:g}: {r['slope']:.3f}" for r in powers if r["exponent"] in (0, 0.5, 1, 1.5))
    sqrt_spread = next((r["entropy_spread"] for r in powers if r["exponent"] == 0.5), float("nan"))
    evidence = (f"The slope of log(logit std) against log(d_k) follows 0.5 - A ({slope_text}); it crosses 0 at "
                f"A = {a_star if a_star is None else round(a_star, 3)}. The normalised entropy (n = {n}) varies least "
                f"across d_k = {inv[0]['d_k'] if inv else '?'}..{inv[-1]['d_k'] if inv else '?'} at A = "
                f"{best['exponent']:g} (spread {best['entropy_spread']:.3f}; sqrt: {sqrt_spread:.3f}). Dividing by d_k "
                f"over-smooths: normalised entropy {inv[-1]['normalized_entropy']:.4f} at d_k = {inv[-1]['d_k']}. "
                + (f"A constant factor {const[0]['spec']} has slope {const[0]['slope']:.3f} and its entropy spans "
                   f"{const[0]['entropy_min']:.3f}-{const[0]['entropy_max']:.3f} across d_k: right for one d_k only. "
                   if const else "")
                + "This is the balance at initialisation with unit-variance q and k; what training prefers is the "
                f"training lab's half. Rule: supported if the zero-slope A is within 0.05 of 0.5, the least-varying A "
                f"is within one grid step of 0.5, inv_d has entropy >= 0.99 at the largest d_k, and the constant has "
                f"slope within 0.05 of 0.5 and entropy spread >= 0.3; refuted if neither of the first two holds; "
                f"partly otherwise.")
    return Finding(verdict, evidence, {"zero_slope_exponent": a_star, "least_varying_exponent": best["exponent"],
                                       "sqrt_entropy_spread": sqrt_spread,
                                       "inv_d_entropy_at_max_dk": inv[-1]["normalized_entropy"] if inv else None,
                                       "constant_factor": result["config"]["constant"] if const else None,
                                       "constant_entropy_min": const[0]["entropy_min"] if const else None,
                                       "constant_entropy_max": const[0]["entropy_max"] if const else None})


def judge(result: dict) -> dict[str, Finding]:
    return {"C04": judge_c04(result), "C05": judge_c05(result), "C06": judge_c06(result),
            "C16": judge_c16(result), "C18": judge_c18(result)}


# ---------------------------------------------------------------------------------------
# tables and figures


def tables(result: dict) -> dict[str, list[dict]]:
    n = _n_ref(result)
    keep = ("normalized_entropy", "max_prob", "effective_support", "jacobian_frobenius", "saturated_share",
            "uniform_share", "logit_std", "logit_max_abs")
    rules = [{"rule": r["rule"] or r["spec"], "d_k": r["d_k"], **{k: r[k] for k in keep}}
             for r in result["sweep"] if r["n"] == n and (r["rule"] or r["exponent"] is None)]
    grads = [{k: r[k] for k in ("spec", "d_k", "grad_wq_output", "grad_wq_probs", "max_prob")}
             for r in result["gradient"] if r["rule"] or r["exponent"] is None]
    deriv = []
    for key, c in result["derivative"].items():
        u = result["derivative_in_use"][key]
        deriv.append({"n": int(key), "p for x in [-3,3]": f"{c['p_range'][0]:.4f}-{c['p_range'][1]:.4f}",
                      "p(1-p) for x in [-3,3]": f"{c['diag_range'][0]:.4f}-{c['diag_range'][1]:.4f}",
                      "p(1-p) at 100": c["at_100"]["diag"], "||J||_F at 100": c["at_100"]["frobenius"],
                      "share p in [0.05,0.95] (sqrt logits)": u["share_p_in_5_95"]})
    return {
        f"softmax statistics by rule, n = {n} (C04, C05, C06)": rules,
        "slope of log(logit std) vs log(d_k) (C18)": result["slopes"],
        "gradient norm reaching W_q (C06, C18)": grads,
        "softmax derivative (C16)": deriv,
    }


def _rule_rows(result: dict, n: int):
    for r in ("none", "sqrt", "inv_d"):
        rows = sorted(_pick(result["sweep"], rule=r, n=n), key=lambda x: x["d_k"])
        if rows:
            yield r, rows
    const = sorted([x for x in result["sweep"] if x["exponent"] is None and x["n"] == n], key=lambda x: x["d_k"])
    if const:
        yield const[0]["spec"], const


def figures(result: dict, outdir) -> dict[str, list[str]]:
    from pathlib import Path

    plt = pyplot()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    n = _n_ref(result)
    out = {}

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in _rule_rows(result, n):
        d = [r["d_k"] for r in rows]
        axes[0].loglog(d, [r["logit_std"] for r in rows], "o-", ms=3, label=name)
        axes[1].semilogx(d, [100 * r["share_within_3"] for r in rows], "o-", ms=3, label=name)
    axes[0].set(xlabel="d_k", ylabel="logit std", title="softmax input std by rule")
    axes[1].set(xlabel="d_k", ylabel="% of logits in [-3, 3]", title=f"n = {n}")
    axes[0].legend(fontsize=8)
    out["C04"] = [save(fig, outdir, "saturation_c04.png")]

    ns = result["config"]["ns"]
    fig, axes = plt.subplots(1, len(ns), figsize=(4 * len(ns), 3.6), squeeze=False)
    for ax, nn_ in zip(axes[0], ns):
        for name, rows in _rule_rows(result, nn_):
            ax.semilogx([r["d_k"] for r in rows], [r["normalized_entropy"] for r in rows], "o-", ms=3, label=name)
        ax.set(xlabel="d_k", ylabel="mean normalised entropy", title=f"n = {nn_}", ylim=(0, 1.02))
    axes[0][0].legend(fontsize=8)
    out["C05"] = [save(fig, outdir, "saturation_c05.png")]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in _rule_rows(result, n):
        axes[0].semilogx([r["d_k"] for r in rows], [r["saturated_share"] for r in rows], "o-", ms=3, label=name)
    axes[0].set(xlabel="d_k", ylabel="share of rows with max p > 0.99", title=f"saturation, n = {n}")
    axes[0].legend(fontsize=8)
    for name in ("none", "sqrt", "inv_d"):
        rows = sorted(_pick(result["gradient"], rule=name), key=lambda r: r["d_k"])
        if rows:
            axes[1].loglog([r["d_k"] for r in rows], [r["grad_wq_output"] for r in rows], "o-", ms=3, label=name)
    axes[1].set(xlabel="d_k", ylabel="||dL/dW_q||_F", title=f"gradient reaching W_q (n = {result['config']['grad_n']})")
    axes[1].legend(fontsize=8)
    out["C06"] = [save(fig, outdir, "saturation_c06.png")]

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for key, c in result["derivative"].items():
        axes[0].plot(c["x"], c["p"], label=f"n = {key}")
        axes[1].plot(c["x"], c["diag"], label=f"n = {key}")
        axes[2].plot(c["x"], c["frobenius"], label=f"n = {key}")
    for ax, (lo, hi) in zip(axes[:2], ((0.05, 0.95), (0.05, 0.25))):
        ax.axhspan(lo, hi, color="grey", alpha=0.15, label="seed's range")
    axes[0].set(xlabel="logit x (others fixed)", ylabel="p_x", title="probability")
    axes[1].set(xlabel="logit x", ylabel="p_x (1 - p_x)", title="diagonal derivative")
    axes[2].set(xlabel="logit x", ylabel="||diag(p) - p p^T||_F", title="full Jacobian")
    axes[0].legend(fontsize=8)
    out["C16"] = [save(fig, outdir, "saturation_c16.png")]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    powers = sorted([r for r in result["slopes"] if r["exponent"] is not None and r["n"] == n],
                    key=lambda r: r["exponent"])
    a = [r["exponent"] for r in powers]
    axes[0].plot(a, [r["slope"] for r in powers], "o", label="measured")
    axes[0].plot(a, [0.5 - x for x in a], "-", label="theory 0.5 - A")
    axes[0].axhline(0, color="k", lw=0.5)
    axes[0].set(xlabel="exponent A in d_k^-A", ylabel="slope of log std vs log d_k", title="which A keeps the std fixed")
    axes[0].legend()
    axes[1].plot(a, [r["entropy_spread"] for r in powers], "o-")
    axes[1].set(xlabel="exponent A", ylabel="max - min normalised entropy over d_k", title=f"n = {n}")
    out["C18"] = [save(fig, outdir, "saturation_c18.png")]
    return out
