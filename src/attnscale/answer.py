"""The interview answer, rebuilt from the evidence.

The seed gives a 30-second answer and three follow-ups.  :func:`compose` rewrites them
from a report (report.json): every sentence is chosen by the verdict of the claim it
states and quotes that claim's measured numbers, so a refuted claim is stated as measured
and the text changes when the evidence does.  A claim whose lab has not run yet is said to
be pending.  English (``en``) or Chinese (``zh``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .claims import CLAIMS, PENDING, REFUTED, SUPPORTED, VERDICTS
from .lab.training import EQUIVALENT_LOGITS  # the C10 rule's threshold on the trained logit std gap

LANGS = ("en", "zh")


class Evidence:
    """Verdicts and numbers of one report, looked up by claim ID."""

    def __init__(self, report: dict):
        self.claims = {c["id"]: c for c in report["claims"]}

    def verdict(self, claim_id: str) -> str:
        return self.claims[claim_id]["verdict"]

    def lab_verdict(self, claim_id: str, lab: str) -> str:
        return self.claims[claim_id].get("lab_verdicts", {}).get(lab, PENDING)

    def number(self, claim_id: str, key: str):
        """A number by its name, with or without the lab prefix multi-lab claims carry."""
        numbers = self.claims[claim_id]["numbers"]
        if key in numbers:
            return numbers[key]
        matches = [v for k, v in numbers.items() if k.split(".", 1)[-1] == key]
        return matches[0] if matches else None

    def numbers_like(self, claim_id: str, prefix: str) -> list[float]:
        return [v for k, v in self.claims[claim_id]["numbers"].items()
                if k.split(".", 1)[-1].startswith(prefix) and isinstance(v, (int, float))]

    def has(self, claim_id: str, *keys: str) -> bool:
        return all(self.number(claim_id, key) is not None for key in keys)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _pct(lo) if abs(hi - lo) < 0.005 else f"{_pct(lo)}-{_pct(hi)}"


def _pending(claim_id: str, lang: str, lab: str | None = None) -> str:
    if lang == "en":
        part = f"{claim_id}'s {lab} half" if lab else claim_id
        return f"({part}: not measured yet; run `attnscale report`.)"
    part = f"{claim_id} 的 {lab} 部分" if lab else claim_id
    return f"（{part}：尚未测量，请运行 `attnscale report`。）"


# Each sentence function returns the sentence for one claim (or a pair of claims) in ``lang``.

def variance(ev: Evidence, lang: str) -> str:
    if not ev.has("C02", "max_rel_error"):
        return _pending("C02", lang)
    err = ev.number("C02", "max_rel_error")
    holds = ev.verdict("C02") == SUPPORTED
    if lang == "en":
        return (f"If q and k have independent components of mean 0 and variance 1, q·k is a sum of d_k unit-variance "
                f"terms, so Var(q·k) = d_k and its std is sqrt(d_k)" +
                (f" (measured within {_pct(err)} for d_k up to 4096)." if holds else
                 f"; measured, the variance is off by up to {_pct(err)}, so this holds only roughly."))
    return ("若 q、k 各分量独立、均值为 0、方差为 1，q·k 是 d_k 个单位方差项之和，因此 Var(q·k) = d_k，标准差为 sqrt(d_k)" +
            (f"（d_k 至 4096 实测误差不超过 {_pct(err)}）。" if holds else f"；实测方差偏差可达 {_pct(err)}，只是近似成立。"))


def init_premise(ev: Evidence, lang: str) -> str:
    torch_var = ev.number("C01", "var[torch-default square]")
    head_var = ev.number("C01", "var[xavier-uniform per-head]")
    if torch_var is None or head_var is None:
        return _pending("C01", lang)
    if ev.verdict("C01") == SUPPORTED:
        return ("Common initialisations do give q and k components of variance about 1." if lang == "en"
                else "常见初始化确实让 q、k 分量方差约为 1。")
    if lang == "en":
        return (f"That premise is an assumption, not what common initialisations give: PyTorch's default nn.Linear "
                f"yields q components of variance {torch_var:.2f}, Xavier on a per-head projection {head_var:.2f}; "
                f"the argument is about how the spread grows with d_k, whatever the starting variance.")
    return (f"这个前提只是假设，常见初始化并不给出方差 1：PyTorch 默认 nn.Linear 得到的 q 分量方差为 {torch_var:.2f}，"
            f"按单头投影做 Xavier 初始化为 {head_var:.2f}；论证的关键是方差随 d_k 线性增长，而不是初始方差恰好为 1。")


def sqrt_rule(ev: Evidence, lang: str) -> str:
    if not ev.has("C04", "max_std_error", "min_share_within_3"):
        return _pending("C04", lang)
    err, share = ev.number("C04", "max_std_error"), ev.number("C04", "min_share_within_3")
    if lang == "en":
        return (f"Dividing by sqrt(d_k) brings the logit std back to 1 at every d_k (within {_pct(err)} for d_k = 1 to "
                f"4096), so the softmax sees the same input whatever the head size: at least {_pct(share)} of the "
                f"logits lie in [-3, 3]" + (" and no row saturates." if ev.verdict("C04") == SUPPORTED else "."))
    return (f"除以 sqrt(d_k) 让 logit 标准差在任何 d_k 下都回到 1（d_k 从 1 到 4096 误差不超过 {_pct(err)}），"
            f"softmax 的输入分布与头维度无关：至少 {_pct(share)} 的 logit 落在 [-3, 3]"
            + ("，没有饱和的行。" if ev.verdict("C04") == SUPPORTED else "。"))


def inv_d_rule(ev: Evidence, lang: str) -> str:
    entropy = ev.number("C05", "min_normalized_entropy")
    progress = ev.numbers_like("C05", "inv_d_progress_")
    if entropy is None:
        return _pending("C05", lang)
    trained = ev.lab_verdict("C05", "training")
    if lang == "en":
        text = (f"Dividing by d_k shrinks the logit std to 1/sqrt(d_k): at initialisation attention is near uniform "
                f"(normalised entropy {entropy:.3f} at d_k = 64 and 128).")
        if trained == PENDING or not progress:
            return text + " " + _pending("C05", lang, "training")
        if trained == REFUTED:
            return text + (f" But it is not 'unusable': trained, each rule at its best learning rate, it learned "
                           f"{_span(progress)} of what 1/sqrt(d_k) learned; the weights grow to make up the factor.")
        if trained == SUPPORTED:
            return text + f" Trained, it learned only {_span(progress)} of what 1/sqrt(d_k) learned: it fails."
        return text + (f" Trained, it learned {_span(progress)} of what 1/sqrt(d_k) learned: worse in places, "
                       f"not uniformly unusable.")
    text = f"除以 d_k 会把 logit 标准差压到 1/sqrt(d_k)：初始化时注意力接近均匀（d_k = 64、128 时归一化熵 {entropy:.3f}）。"
    if trained == PENDING or not progress:
        return text + _pending("C05", lang, "training")
    if trained == REFUTED:
        return text + f"但并非“根本不可用”：各自取最佳学习率训练后，它学到的相当于 1/sqrt(d_k) 的 {_span(progress)}，权重会长大来补偿这个因子。"
    if trained == SUPPORTED:
        return text + f"训练后只学到 1/sqrt(d_k) 的 {_span(progress)}，确实不可用。"
    return text + f"训练后学到 1/sqrt(d_k) 的 {_span(progress)}：有的设置变差，但不是处处不可用。"


def no_scaling(ev: Evidence, lang: str) -> str:
    keys = ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt", "dk_logits_reach_100")
    if not ev.has("C06", *keys):
        return _pending("C06", lang)
    max_logit, saturated, grad, dk100 = (ev.number("C06", k) for k in keys)
    progress = ev.numbers_like("C06", "none_progress_")
    trained = ev.lab_verdict("C06", "training")
    if lang == "en":
        text = (f"Without scaling the logit std grows as sqrt(d_k): at d_k = 128 the largest logits are about "
                f"±{max_logit:.0f}, not ±100 (that takes d_k ≈ {dk100:.0f}); {_pct(saturated)} or more of the rows are "
                f"already near one-hot, yet the gradient reaching W_q is {grad:.0f}x the sqrt rule's, not near zero.")
        if trained == PENDING or not progress:
            return text + " " + _pending("C06", lang, "training")
        verb = {REFUTED: "training does not stall", SUPPORTED: "training stalls"}.get(trained, "training is hurt")
        return text + f" Trained at d_head >= 64, {verb}: it learned {_span(progress)} of what 1/sqrt(d_k) learned."
    text = (f"不缩放时 logit 标准差随 sqrt(d_k) 增长：d_k = 128 时最大 logit 约 ±{max_logit:.0f}，而不是 ±100"
            f"（要到 d_k ≈ {dk100:.0f} 才到 100）；至少 {_pct(saturated)} 的行已接近 one-hot，"
            f"但传到 W_q 的梯度是 sqrt 规则的 {grad:.0f} 倍，并不接近 0。")
    if trained == PENDING or not progress:
        return text + _pending("C06", lang, "training")
    verb = {REFUTED: "训练并未停滞", SUPPORTED: "训练确实停滞"}.get(trained, "训练受到损害")
    return text + f"在 d_head >= 64 训练时{verb}：学到的相当于 1/sqrt(d_k) 的 {_span(progress)}。"


def low_precision(ev: Evidence, lang: str) -> str:
    keys11 = ("max_abs_logit_unit_std_sqrt", "std_for_claimed_range", "standard_softmax_nonfinite", "fp16_exp_first_inf")
    if not ev.has("C11", *keys11) or not ev.has("C12", "stable_nonfinite", "online_nonfinite", "tiled_naive_nonfinite"):
        return _pending("C11", lang)
    max_logit, std_needed, nonfinite, threshold = (ev.number("C11", k) for k in keys11)
    tiled_breaks = ev.number("C12", "tiled_naive_nonfinite") > 0
    max_sub_safe = ev.number("C12", "stable_nonfinite") == 0 and ev.number("C12", "online_nonfinite") == 0
    clamp_kl = ev.number("C12", "clamp_kl_cheapest_fix")
    if lang == "en":
        text = (f"In FP16, scaled logits at d_k = 128 are not around ±30 for unit-variance q and k: the largest was "
                f"{max_logit:.1f} (±30 needs q, k std {std_needed:.1f}). ")
        text += ("No max-subtracted softmax produced inf or NaN. " if nonfinite == 0 else
                 f"Even max-subtracted softmax produced non-finite outputs ({_pct(nonfinite)}). ")
        text += f"exp overflows past {threshold:.2f} only when the max is not subtracted"
        if max_sub_safe and tiled_breaks:
            text += ("; the max subtraction, which FlashAttention's online softmax keeps, prevents it, not the "
                     "1/sqrt(d_k) factor and not the tiling (tiling is for memory)")
        if clamp_kl is not None:
            text += f"; clamping helps only at values that distort attention (KL {clamp_kl:.2f} nats)"
        return text + "."
    text = (f"FP16 下，q、k 方差为 1 时，d_k = 128 缩放后的 logit 并不在 ±30 附近：实测最大 {max_logit:.1f}"
            f"（要 q、k 标准差达到 {std_needed:.1f} 才会到 ±30）。")
    text += ("减去最大值的 softmax 从未产生 inf 或 NaN。" if nonfinite == 0 else
             f"即使减去最大值，softmax 仍有 {_pct(nonfinite)} 的非有限输出。")
    text += f"只有不减最大值时 exp 才会在超过 {threshold:.2f} 后溢出"
    if max_sub_safe and tiled_breaks:
        text += "；防止溢出的是减去最大值（FlashAttention 的 online softmax 也这样做），而不是 1/sqrt(d_k) 因子，也不是分块（分块是为了省显存）"
    if clamp_kl is not None:
        text += f"；clamp 只有在明显扭曲注意力的取值下才有用（KL {clamp_kl:.2f} nats）"
    return text + "。"


def balance(ev: Evidence, lang: str) -> str:
    exponent = ev.number("C18", "zero_slope_exponent")
    if exponent is None:
        return _pending("C18", lang)
    cells, best = ev.number("C18", "cells"), ev.number("C18", "sqrt_near_best_cells")
    if lang == "en":
        text = (f"So 1/sqrt(d_k) is the factor that keeps the softmax input independent of d_k (the exponent with zero "
                f"slope measured {exponent:.3f}); any constant is right for one d_k only.")
        if cells:
            text += f" In training, 1/sqrt(d_k) was near the best rule in {best} of {cells} settings."
        return text
    text = f"所以 1/sqrt(d_k) 是让 softmax 输入与 d_k 无关的因子（实测零斜率指数 {exponent:.3f}）；任何常数只对一个 d_k 合适。"
    if cells:
        text += f"训练中，1/sqrt(d_k) 在 {cells} 个设置里有 {best} 个接近最佳。"
    return text


def small_d_k(ev: Evidence, lang: str) -> str:
    if not ev.has("C15", "tv_dk2", "tv_dk128"):
        return _pending("C15", lang)
    tv2, tv128 = ev.number("C15", "tv_dk2"), ev.number("C15", "tv_dk128")
    if lang == "en":
        return (f"At d_k = 1 the factor is exactly 1. At d_k = 2 the attention rows with and without 1/sqrt(2) are "
                f"{tv2:.2f} apart in total variation, against {tv128:.2f} at d_k = 128: a small difference, not none, "
                f"and the factor costs nothing, so keep it.")
    return (f"d_k = 1 时因子就是 1。d_k = 2 时，有无 1/sqrt(2) 的注意力分布总变差距离为 {tv2:.2f}，"
            f"而 d_k = 128 时为 {tv128:.2f}：差别小但不为零，而这个因子几乎没有开销，应当保留。")


def gradients(ev: Evidence, lang: str) -> str:
    if not ev.has("C16", "share_p_in_5_95_n2", "share_p_in_5_95_n128"):
        return _pending("C16", lang)
    n2, n128 = ev.number("C16", "share_p_in_5_95_n2"), ev.number("C16", "share_p_in_5_95_n128")
    ratio = ev.number("C17", "median_grad_ratio_sqrt_over_none")
    if lang == "en":
        text = (f"The softmax Jacobian is diag(p) - p p^T; its diagonal p_i(1 - p_i) is near 0 when one input dominates "
                f"(an input of 100). The seed's 'p between 0.05 and 0.95, derivative 0.05-0.25' is the two-key case: "
                f"with sqrt-scaled logits {_pct(n2)} of p_i lie in [0.05, 0.95] for 2 keys, but {n128 * 100:.1f}% for "
                f"128 keys, where every p_i is small.")
        if ratio is not None:
            text += (f" In training, the first layer's W_q, W_k gradient without scaling was {1 / ratio:.2f}x that "
                     f"with scaling (median over matched runs)" +
                     (", more than 10x smaller." if ratio > 10 else ", not 10x smaller."))
        else:
            text += " " + _pending("C17", lang)
        return text
    text = (f"softmax 的雅可比矩阵是 diag(p) - p p^T，对角项 p_i(1 - p_i) 在某个输入占绝对优势（如 100）时接近 0。"
            f"原答案“p 在 0.05-0.95、导数 0.05-0.25”只适用于两个 key：sqrt 缩放后 2 个 key 时 {_pct(n2)} 的 p_i 落在 "
            f"[0.05, 0.95]，128 个 key 时只有 {n128 * 100:.1f}%，每个 p_i 都很小。")
    if ratio is not None:
        text += (f"训练中，不缩放时第一层 W_q、W_k 的梯度是缩放时的 {1 / ratio:.2f} 倍（匹配运行的中位数）" +
                 ("，确实小了 10 倍以上。" if ratio > 10 else "，并没有小 10 倍。"))
    else:
        text += _pending("C17", lang)
    return text


def t5(ev: Evidence, lang: str) -> str:
    factor, ratio = ev.number("C10", "t5_factor"), ev.number("C10", "t5_wq_wk_std_ratio")
    if factor is None or ratio is None:
        return _pending("C10", lang)
    d_kv = ev.number("C10", "d_kv")
    gaps = {k.split("final_logit_std_gap_", 1)[1]: v for k, v in ev.claims["C10"]["numbers"].items()
            if "final_logit_std_gap_" in k and isinstance(v, (int, float))}
    trained = ev.lab_verdict("C10", "training")
    if lang == "en":
        text = (f"T5 applies no factor (the installed code, probed: {factor:.3g}); instead W_q is initialised "
                f"1/sqrt(d_kv) smaller than W_k (measured std ratio {ratio:.3f} at d_kv = {d_kv}), so only W_q's "
                f"variance carries the extra 1/d_kv, and the logits start with unit std, as with 1/sqrt(d_k).")
        if trained == PENDING or not gaps:
            return text + " " + _pending("C10", lang, "training")
        if trained == SUPPORTED:
            return text + " Trained, the two stay equivalent under every optimiser tried."
        same = [opt for opt, gap in gaps.items() if gap < EQUIVALENT_LOGITS]
        differ = ", ".join(f"{opt} by {_pct(gap)}" for opt, gap in gaps.items() if gap >= EQUIVALENT_LOGITS)
        return text + (f" Trained, it stays equivalent under {', '.join(same) or 'no optimiser tried'}"
                       f"{'' if not differ else f', but the per-layer logit std ends apart under {differ}'}: the "
                       f"optimiser sees a different parametrisation, so the folding is equivalent at step 0, not in training.")
    text = (f"T5 不做显式缩放（实测已安装代码的因子为 {factor:.3g}）；它把 W_q 初始化得比 W_k 小 1/sqrt(d_kv)"
            f"（d_kv = {d_kv} 时实测标准差比 {ratio:.3f}），多出的 1/d_kv 只在 W_q 的方差里，初始 logit 标准差为 1，与 1/sqrt(d_k) 相同。")
    if trained == PENDING or not gaps:
        return text + _pending("C10", lang, "training")
    if trained == SUPPORTED:
        return text + "训练后在所有试过的优化器下都保持等价。"
    same = [opt for opt, gap in gaps.items() if gap < EQUIVALENT_LOGITS]
    differ = "，".join(f"{opt} 相差 {_pct(gap)}" for opt, gap in gaps.items() if gap >= EQUIVALENT_LOGITS)
    return text + (f"训练后在 {'、'.join(same) or '所试的任何优化器'} 下仍等价" + (f"，但在 {differ}（各层 logit 标准差）" if differ else "")
                   + "：优化器面对的是不同的参数化，所以这种折叠只在第 0 步等价，训练中未必。")


FOLLOW_UPS = {
    "en": ("If d_k is very small (1 or 2), is scaling still needed?",
           "Why does softmax saturation hurt training? What are the gradient values?",
           "How does T5 scale, and why?"),
    "zh": ("如果 d_k 很小（比如 1 或 2），还需要缩放吗？",
           "为什么 softmax 的梯度饱和区会导致训练问题？能具体说下梯度值吗？",
           "T5 的缩放方式有什么不同？为什么？"),
}


def check_report(report, source: str = "the report") -> dict:
    """``report`` if it has what :func:`compose` reads: a ``claims`` list holding every claim
    C01..C18, each with a known verdict and a ``numbers`` object; else ValueError naming
    what is wrong (``source`` names the report in the message)."""
    if not isinstance(report, dict) or not isinstance(report.get("claims"), list):
        raise ValueError(f"{source} is not a report.json (no 'claims' list)")
    found = {}
    for claim in report["claims"]:
        if not isinstance(claim, dict) or not isinstance(claim.get("id"), str):
            raise ValueError(f"{source} is not a report.json: an entry of 'claims' is not a claim with an 'id'")
        if (claim.get("verdict") not in (*VERDICTS, PENDING) or not isinstance(claim.get("numbers"), dict)
                or not isinstance(claim.get("lab_verdicts", {}), dict)):
            raise ValueError(f"{source} is not a complete report.json: claim {claim['id']!r} lacks a known "
                             "'verdict' or a 'numbers' object")
        found[claim["id"]] = claim
    missing = [claim.id for claim in CLAIMS if claim.id not in found]
    if missing:
        named = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ValueError(f"{source} is not a complete report.json: claim{'s' if len(missing) > 1 else ''} {named} "
                         "missing; run `attnscale report` again")
    return report


def _sentence(build, ev: Evidence, lang: str) -> str:
    try:
        return build(ev, lang)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as error:
        raise ValueError(f"the report's numbers for {build.__name__} are not what attnscale writes "
                         f"({type(error).__name__}: {str(error)[:80]}); run `attnscale report` again") from None


def compose(report: dict, lang: str = "en") -> dict:
    """The 30-second answer and the three follow-ups, as lists of sentences."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
    ev = Evidence(check_report(report))
    answer = [_sentence(f, ev, lang)
              for f in (variance, init_premise, sqrt_rule, inv_d_rule, no_scaling, low_precision, balance)]
    follow_ups = [{"question": q, "answer": [_sentence(f, ev, lang)]}
                  for q, f in zip(FOLLOW_UPS[lang], (small_d_k, gradients, t5))]
    counts = {}
    for claim in report["claims"]:
        counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
    return {"lang": lang, "answer": answer, "follow_ups": follow_ups, "verdict_counts": counts,
            "preset": report.get("preset"), "seed": report.get("seed")}


def render_text(composed: dict) -> str:
    zh = composed["lang"] == "zh"
    join = "".join if zh else " ".join
    lines = ["30 秒回答" if zh else "The 30-second answer", "", join(composed["answer"]), ""]
    for i, item in enumerate(composed["follow_ups"], 1):
        lines += [f"{'追问' if zh else 'Follow-up'} {i}: {item['question']}", join(item["answer"]), ""]
    counts = ", ".join(f"{v} {n}" for v, n in composed["verdict_counts"].items())
    lines.append((f"（依据：preset {composed['preset']}、seed {composed['seed']} 的报告；结论统计：{counts}）" if zh else
                  f"(From the report of preset {composed['preset']}, seed {composed['seed']}; verdicts: {counts}.)"))
    return "\n".join(lines)


def load_report(path: str | Path) -> dict:
    """report.json from a report folder or the file itself; FileNotFoundError / ValueError name what is wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"no report at {str(path)!r}; run `attnscale report` first (or pass --report)")
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is a folder, not a report.json")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} is not a report.json: {error}") from None
    return check_report(report, repr(str(path)))

