"""The interview answer, rebuilt from the evidence.

The seed gives a 30-second answer and three follow-ups.  :func:`compose` rewrites them
from a report (report.json): every sentence is chosen by the verdict of the claim it
states and quotes that claim's measured numbers, so a refuted claim is stated as measured
and the text changes when the evidence does; no comparison is written in advance.  A claim
whose lab has not run yet is said to be pending.  English (``en``) or Chinese (``zh``).

:data:`READS` declares every number the answer reads, by claim and lab; each lab declares
the numbers its findings carry in its ``NUMBER_KEYS``, and the tests hold the two together.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from .claims import BY_ID, CLAIMS, NOT_TESTABLE, PARTLY, PENDING, REFUTED, SUPPORTED, VERDICTS, key_declared
from .errors import UserError
from .lab.numerics import KL_CHEAP, MEMORY_SAVED, WRONG_OUTPUT
from .lab.training.verdicts import EQUIVALENT_LOGITS  # the C10 rule's threshold on the trained logit std gap
from .lab.variance import SMALL_TV, SMALL_TV_RATIO
from .lab.saturation import verdicts as saturation_rules  # C06: "around +-100", "gradient near 0"
from .lab.variance import verdicts as variance_rules  # C01: "variance 1"

LANGS = ("en", "zh")

# (claim ID, lab) -> the numbers the answer reads from that lab's finding ("name*": a family of keys).
READS = {
    ("C01", "variance"): ("var[torch-default square]", "var[xavier-uniform square]", "var[xavier-uniform per-head]"),
    ("C02", "variance"): ("max_rel_error", "max_d_k"),
    ("C04", "saturation"): ("max_std_error", "min_share_within_3", "max_saturated_share"),
    ("C05", "saturation"): ("min_normalized_entropy",),
    ("C05", "training"): ("inv_d_progress_*",),
    ("C06", "saturation"): ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt", "dk_logits_reach_100"),
    ("C06", "training"): ("none_progress_*",),
    ("C10", "doctor"): ("t5_factor", "t5_wq_wk_std_ratio", "d_kv", "t5_logit_std"),
    ("C10", "training"): ("final_logit_std_gap_*",),
    ("C11", "numerics"): ("claim_d_k", "claimed_range", "max_abs_logit_unit_std_sqrt", "trained_model", "trained_d_k",
                          "trained_max_abs_logit", "trained_naive_fp16_overflow_rows", "real_code_nonfinite",
                          "real_code_max_error", "fp16_exp_first_inf"),
    ("C12", "numerics"): ("online_nonfinite", "tiled_naive_nonfinite", "clamp_kl_cheapest_fix", "memory_tokens",
                          "dense_peak_mib", "online_peak_mib", "memory_ratio"),
    ("C15", "variance"): ("tv_dk2", "tv_dk_large", "dk_large"),
    ("C16", "saturation"): ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n",
                            "share_p_in_range_large_n", "holds_up_to_n", "possible_up_to_n"),
    ("C17", "training"): ("median_grad_ratio_sqrt_over_none",),
    ("C18", "saturation"): ("zero_slope_exponent", "constant_factor", "constant_entropy_min", "constant_entropy_max"),
    ("C18", "training"): ("cells", "sqrt_near_best_cells"),
}

TEXT_NUMBERS = {("C11", "trained_model")}  # the declared numbers that hold text

VERDICT_ZH = {SUPPORTED: "支持", PARTLY: "部分支持", REFUTED: "不成立", NOT_TESTABLE: "此处无法检验", PENDING: "待测"}
OPTIMISER_NAMES = {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}


class Evidence:
    """Verdicts and numbers of one report, looked up by claim ID; only declared numbers can be read."""

    def __init__(self, report: dict):
        self.claims = {c["id"]: c for c in report["claims"]}

    def verdict(self, claim_id: str) -> str:
        return self.claims[claim_id]["verdict"]

    def lab_verdict(self, claim_id: str, lab: str) -> str:
        return self.claims[claim_id].get("lab_verdicts", {}).get(lab, PENDING)

    def _key(self, claim_id: str, key: str) -> str:
        """The key as report.json carries it (prefixed by its lab on claims tested by several labs)."""
        labs = [lab for (cid, lab), keys in READS.items() if cid == claim_id and key_declared(keys, key)]
        if not labs:
            raise KeyError(f"the answer reads {claim_id}'s {key!r}, which READS does not declare")
        return f"{labs[0]}.{key}" if len(BY_ID[claim_id].labs) > 1 else key

    def number(self, claim_id: str, key: str):
        """A declared number (None where the report has none); a value of another type is a report
        that attnscale did not write: UserError naming it."""
        value = self.claims[claim_id]["numbers"].get(self._key(claim_id, key))
        text_ok = (claim_id, key) in TEXT_NUMBERS
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, str))
                                  or (isinstance(value, str) and not text_ok)):
            raise UserError(f"the report's numbers are not what attnscale writes: {claim_id}'s {key!r} is "
                            f"{value!r}; run `attnscale report` again")
        return value

    def family(self, claim_id: str, prefix: str) -> dict[str, float]:
        """The numeric members of a declared family ``prefix*``, by their suffix."""
        full = self._key(claim_id, prefix + "*")[:-1]
        return {k[len(full):]: v for k, v in self.claims[claim_id]["numbers"].items()
                if k.startswith(full) and isinstance(v, (int, float)) and not isinstance(v, bool)}

    def has(self, claim_id: str, *keys: str) -> bool:
        return all(self.number(claim_id, key) is not None for key in keys)


# Percentages: "at least" rounds down and "at most" rounds up, so that a bound stays true.

def _pct(x: float) -> str:
    if 0 < abs(x) < 0.01 or 0.99 < abs(x) < 1:
        return f"{100 * x:.1f}%"
    return f"{100 * x:.0f}%"


def _at_least(x: float) -> str:
    return f"{math.floor(1000 * x + 1e-9) / 10:g}%"


def _at_most(x: float) -> str:
    return f"{math.ceil(1000 * x - 1e-9) / 10:g}%"


def _and(items: list[str], lang: str) -> str:
    if len(items) < 2:
        return "".join(items)
    if lang == "en":
        return ", ".join(items[:-1]) + " and " + items[-1]
    return "、".join(items[:-1]) + "和" + items[-1]


def _span(values) -> str:
    values = list(values)
    lo, hi = min(values), max(values)
    return _pct(lo) if abs(hi - lo) < 0.005 else f"{_pct(lo)}-{_pct(hi)}"


def _d_heads(family: dict[str, float]) -> str:
    """'64-256' from keys like 'recall_64', 'shakespeare_256'."""
    sizes = sorted({int(k.rsplit("_", 1)[-1]) for k in family if k.rsplit("_", 1)[-1].isdigit()})
    if not sizes:
        return "?"
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def _pending(claim_id: str, lang: str, lab: str | None = None) -> str:
    if lang == "en":
        part = f"{claim_id}'s {lab} half" if lab else claim_id
        return f"({part}: not measured yet; run `attnscale report`.)"
    half = {"training": "训练", "saturation": "初始化"}.get(lab, lab)
    part = f"{claim_id} 的{half}部分" if lab else claim_id
    return f"（{part}：尚未测量，请运行 `attnscale report`。）"


# Each sentence function returns the sentence for one claim (or a pair of claims) in ``lang``.

def variance(ev: Evidence, lang: str) -> str:
    if not ev.has("C02", "max_rel_error", "max_d_k"):
        return _pending("C02", lang)
    err, d_max = ev.number("C02", "max_rel_error"), ev.number("C02", "max_d_k")
    holds = ev.verdict("C02") == SUPPORTED
    if lang == "en":
        return (f"If q and k have independent components of mean 0 and variance 1, q·k is a sum of d_k unit-variance "
                f"terms, so Var(q·k) = d_k and its std is sqrt(d_k)" +
                (f" (measured within {_at_most(err)} for d_k up to {d_max})." if holds else
                 f"; measured, the variance is off by up to {_at_most(err)}, so this holds only roughly."))
    return ("若 q、k 各分量独立、均值为 0、方差为 1，q·k 就是 d_k 个方差为 1 的项之和，所以 Var(q·k) = d_k，标准差为 sqrt(d_k)" +
            (f"（d_k 最大到 {d_max}，实测偏差不超过 {_at_most(err)}）。" if holds else
             f"；实测方差偏差可达 {_at_most(err)}，只是近似成立。"))


INIT_NAMES = {  # key in C01's numbers -> (English, Chinese)
    "var[xavier-uniform square]": ("Xavier on a square matrix", "方阵上的 Xavier 初始化"),
    "var[torch-default square]": ("PyTorch's default nn.Linear", "PyTorch 默认的 nn.Linear 初始化"),
    "var[xavier-uniform per-head]": ("Xavier on a per-head projection", "按单头投影做的 Xavier 初始化"),
}


def init_premise(ev: Evidence, lang: str) -> str:
    if not ev.has("C01", *INIT_NAMES):
        return _pending("C01", lang)
    i = 0 if lang == "en" else 1
    shown = {key: (f"{names[0]} ({ev.number('C01', key):.2f})" if lang == "en" else
                   f"{names[1]}（{ev.number('C01', key):.2f}）") for key, names in INIT_NAMES.items()}
    near = [shown[key] for key in INIT_NAMES if abs(ev.number("C01", key) - 1) <= variance_rules.VAR_NEAR_1]
    off = [shown[key] for key in INIT_NAMES if abs(ev.number("C01", key) - 1) > variance_rules.VAR_NEAR_1]
    if lang == "en":
        if not off:
            return f"Common initialisations do give q and k components of variance about 1: {_and(near, lang)}."
        head = (f"That premise holds for some initialisations, not all: {_and(near, lang)} "
                f"{'gives' if len(near) == 1 else 'give'} q components of variance about 1, but {_and(off, lang)} "
                f"{'does' if len(off) == 1 else 'do'} not" if near else
                f"That premise is an assumption: no initialisation measured gives q components of variance 1 "
                f"({_and(off, lang)})")
        return head + "; the spread still grows as sqrt(d_k), from whatever variance it starts at."
    if not off:
        return f"常见初始化确实让 q、k 分量的方差约为 1：{_and(near, lang)}。"
    head = (f"这个前提只对部分初始化成立：{_and(near, lang)}得到的方差约为 1，但{_and(off, lang)}得到的方差并不是 1" if near
            else f"这个前提只是假设，实测的初始化得到的方差都不是 1：{_and(off, lang)}")
    return head + "；不过无论起点方差是多少，点积的标准差都会随 sqrt(d_k) 变大。"


def sqrt_rule(ev: Evidence, lang: str) -> str:
    if not ev.has("C04", "max_std_error", "min_share_within_3", "max_saturated_share"):
        return _pending("C04", lang)
    err, share, saturated = (ev.number("C04", k) for k in ("max_std_error", "min_share_within_3", "max_saturated_share"))
    if lang == "en":
        rows = "no row saturates" if saturated == 0 else f"at most {_at_most(saturated)} of rows saturate"
        return (f"Dividing by sqrt(d_k) brings the logit std back to 1 at every d_k measured (within {_at_most(err)}), "
                f"so the softmax sees the same input whatever the head size: at least {_at_least(share)} of the logits "
                f"lie in [-3, 3] and {rows}.")
    rows = "没有一行饱和" if saturated == 0 else f"饱和的行不超过 {_at_most(saturated)}"
    return (f"除以 sqrt(d_k) 后，在实测的各个 d_k 下 logit 的标准差都回到 1（偏差不超过 {_at_most(err)}），"
            f"softmax 的输入不再随头维度变化：至少 {_at_least(share)} 的 logit 落在 [-3, 3] 内，{rows}。")


def inv_d_rule(ev: Evidence, lang: str) -> str:
    entropy = ev.number("C05", "min_normalized_entropy")
    if entropy is None:
        return _pending("C05", lang)
    progress = ev.family("C05", "inv_d_progress_")
    trained = ev.lab_verdict("C05", "training")
    uniform = ev.lab_verdict("C05", "saturation") in (SUPPORTED, PARTLY)
    if lang == "en":
        text = (f"Dividing by d_k shrinks the logit std to 1/sqrt(d_k): at initialisation attention is "
                f"{'near uniform' if uniform else 'not near uniform'} (normalised entropy {entropy:.3f} or more at "
                f"d_k = 64 and 128).")
        if trained == PENDING or not progress:
            return text + " " + _pending("C05", lang, "training")
        span = _span(progress.values())
        if trained == REFUTED:
            return text + (f" But it is not 'unusable': trained, each rule at its best learning rate, it learned "
                           f"{span} of what 1/sqrt(d_k) learned.")
        if trained == SUPPORTED:
            return text + f" Trained, it learned only {span} of what 1/sqrt(d_k) learned: unusable."
        return text + (f" Trained, it learned {span} of what 1/sqrt(d_k) learned: worse in places, not everywhere "
                       f"unusable.")
    text = (f"除以 d_k 会把 logit 的标准差压到 1/sqrt(d_k)：初始化时注意力{'接近均匀分布' if uniform else '并不接近均匀分布'}"
            f"（d_k = 64 和 128 时归一化熵不低于 {entropy:.3f}）。")
    if trained == PENDING or not progress:
        return text + _pending("C05", lang, "training")
    span = _span(progress.values())
    if trained == REFUTED:
        return text + f"但它并非“根本不可用”：各自取最佳学习率训练后，它学到的相当于 1/sqrt(d_k) 的 {span}。"
    if trained == SUPPORTED:
        return text + f"训练后它只学到 1/sqrt(d_k) 的 {span}，确实不可用。"
    return text + f"训练后它学到 1/sqrt(d_k) 的 {span}：有些设置更差，但并非处处不可用。"


def no_scaling(ev: Evidence, lang: str) -> str:
    keys = ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt")
    if not ev.has("C06", *keys):
        return _pending("C06", lang)
    max_logit, saturated, grad = (ev.number("C06", k) for k in keys)
    dk100 = ev.number("C06", "dk_logits_reach_100")
    progress = ev.family("C06", "none_progress_")
    trained = ev.lab_verdict("C06", "training")
    if lang == "en":
        if max_logit >= saturation_rules.LOGITS_AROUND_100:
            size = f"about ±{max_logit:.0f}, as extreme as the interview answer's ±100 suggests"
        else:
            reach = f"rows reach that only from d_k ≈ {dk100:.0f}" if dk100 else "no d_k measured reaches it"
            size = f"about ±{max_logit:.0f}, well short of the interview answer's ±100 ({reach})"
        if grad <= saturation_rules.GRADIENT_NEAR_0:
            gradient = f"and the gradient reaching W_q is {grad:.2g}x the sqrt rule's: near zero"
        elif grad >= 1:
            gradient = f"yet the gradient reaching W_q is {grad:.0f}x the sqrt rule's, not near zero"
        else:
            gradient = f"and the gradient reaching W_q is {grad:.2g}x the sqrt rule's, smaller but not near zero"
        text = (f"Without scaling the logit std grows as sqrt(d_k): at d_k = 128 the largest logit of a row is {size}; "
                f"{_at_least(saturated)} or more of the rows are already near one-hot, {gradient}.")
        if trained == PENDING or not progress:
            return text + " " + _pending("C06", lang, "training")
        verb = {REFUTED: "training does not stall", SUPPORTED: "training stalls"}.get(
            trained, "training stalls in some settings or seeds, not in all")
        return text + (f" Trained at d_head {_d_heads(progress)}, {verb}: it learned {_span(progress.values())} of "
                       f"what 1/sqrt(d_k) learned.")
    if max_logit >= saturation_rules.LOGITS_AROUND_100:
        size = f"约 ±{max_logit:.0f}，和原答案说的 ±100 一样极端"
    else:
        reach = f"要到 d_k ≈ {dk100:.0f} 才会到 100" if dk100 else "实测的 d_k 都达不到"
        size = f"约 ±{max_logit:.0f}，远没有原答案说的 ±100（{reach}）"
    if grad <= saturation_rules.GRADIENT_NEAR_0:
        gradient = f"传到 W_q 的梯度只有 sqrt 规则的 {grad:.2g} 倍，接近 0"
    elif grad >= 1:
        gradient = f"但传到 W_q 的梯度是 sqrt 规则的 {grad:.0f} 倍，并不接近 0"
    else:
        gradient = f"传到 W_q 的梯度是 sqrt 规则的 {grad:.2g} 倍，变小了但不接近 0"
    text = (f"不缩放时 logit 的标准差会随 sqrt(d_k) 变大：d_k = 128 时每行最大的 logit {size}；"
            f"至少 {_at_least(saturated)} 的行已经接近 one-hot，{gradient}。")
    if trained == PENDING or not progress:
        return text + _pending("C06", lang, "training")
    verb = {REFUTED: "训练并未停滞", SUPPORTED: "训练确实停滞"}.get(trained, "训练在部分设置或种子下停滞，并非全部")
    return text + f"d_head 为 {_d_heads(progress)} 时，{verb}：学到的相当于 1/sqrt(d_k) 的 {_span(progress.values())}。"


def low_precision(ev: Evidence, lang: str) -> str:
    keys11 = ("claim_d_k", "claimed_range", "max_abs_logit_unit_std_sqrt", "trained_model", "trained_d_k",
              "trained_max_abs_logit", "trained_naive_fp16_overflow_rows", "real_code_nonfinite",
              "real_code_max_error", "fp16_exp_first_inf")
    keys12 = ("online_nonfinite", "tiled_naive_nonfinite", "memory_tokens", "dense_peak_mib", "online_peak_mib",
              "memory_ratio")
    if not ev.has("C11", *keys11) or not ev.has("C12", *keys12):
        return _pending("C11", lang)
    d_k, claimed, unit, model, model_d_k, trained, naive, nonfinite, error, threshold = (
        ev.number("C11", k) for k in keys11)
    online, tiled, tokens, dense_mib, online_mib, ratio = (ev.number("C12", k) for k in keys12)
    clamp_kl = ev.number("C12", "clamp_kl_cheapest_fix")
    unit_reaches, trained_reaches = unit >= claimed / 2, trained >= claimed / 2
    saves_memory = bool(ratio) and ratio >= MEMORY_SAVED
    if lang == "en":
        text = (f"In FP16 and BF16, scaled logits at d_k = {d_k} {'do' if unit_reaches else 'do not'} reach ±{claimed:g} "
                f"for independent unit-variance q and k (the largest was {unit:.1f}), but a trained model's "
                f"{'do' if trained_reaches else 'do not'}: in the pretrained {model} (d_k = {model_d_k}) they reach "
                f"±{trained:.0f}. ")
        if nonfinite > 0:
            text += "Attention computed as models compute it then produced inf or NaN. "
        else:
            text += (f"Still, attention computed as models compute it produced no inf or NaN: exp overflows FP16 past "
                     f"{threshold:.2f}, which a softmax without max subtraction would hit in {_pct(naive)} of that "
                     f"model's rows, but real code subtracts the row max"
                     + (f"; what goes wrong is precision, BF16 attention computed the eager way being off by up to "
                        f"{error:.2f} std of v. " if error > WRONG_OUTPUT else ". "))
        if online == 0 and tiled > 0:
            text += ("FlashAttention's online softmax keeps the max subtraction, so it never overflowed; its tiling "
                     + (f"is what saves memory (one head at T = {tokens}: {dense_mib:.0f} MiB dense, {online_mib:.1f} "
                        f"MiB tiled); " if saves_memory else "does not prevent overflow; "))
            clamp = "clamping"
        else:
            clamp = "Clamping"
        if clamp_kl is None:
            return text + f"{clamp} with the values tried did not remove the overflow."
        if clamp_kl <= KL_CHEAP:
            return text + f"{clamp} removed the overflow at a negligible cost (KL {clamp_kl:.3f} nats)."
        return text + f"{clamp} removed it only at values that distort attention (KL {clamp_kl:.2f} nats)."
    text = (f"在 FP16 和 BF16 下，若 q、k 各分量独立且方差为 1，d_k = {d_k} 缩放后的 logit "
            f"{'确实' if unit_reaches else '并不会'}达到 ±{claimed:g}（实测最大 {unit:.1f}）；训练过的模型"
            f"{'却会' if trained_reaches else '也不会'}：预训练的 {model}（d_k = {model_d_k}）的 logit 达到 ±{trained:.0f}。")
    if nonfinite > 0:
        text += "按模型实际的算法计算注意力时，确实出现了 inf 或 NaN。"
    else:
        text += (f"但按模型实际的算法计算注意力时，没有出现 inf 或 NaN：FP16 的 exp 在输入超过 {threshold:.2f} 时溢出，"
                 f"不减最大值的 softmax 会在该模型 {_pct(naive)} 的行上溢出，而实际代码都会先减去每行的最大值"
                 + (f"；真正的问题是精度：BF16 按 eager 方式计算的输出误差最大可达 v 标准差的 {error:.2f} 倍。"
                    if error > WRONG_OUTPUT else "。"))
    if online == 0 and tiled > 0:
        text += ("FlashAttention 的 online softmax 同样先减去最大值，所以从未溢出；它的分块"
                 + (f"是为了省显存（单个头、T = {tokens} 时，完整矩阵需要 {dense_mib:.0f} MiB，分块只要 {online_mib:.1f} MiB）；"
                    if saves_memory else "并不能防止溢出；"))
    if clamp_kl is None:
        return text + "试过的 clamp 取值都没能消除溢出。"
    if clamp_kl <= KL_CHEAP:
        return text + f"clamp 能以很小的代价消除溢出（KL {clamp_kl:.3f} nats）。"
    return text + f"clamp 只有在明显扭曲注意力的取值下才能消除溢出（KL {clamp_kl:.2f} nats）。"


def balance(ev: Evidence, lang: str) -> str:
    exponent = ev.number("C18", "zero_slope_exponent")
    if exponent is None:
        return _pending("C18", lang)
    constant = ev.number("C18", "constant_factor")
    low, high = ev.number("C18", "constant_entropy_min"), ev.number("C18", "constant_entropy_max")
    cells, best = ev.number("C18", "cells"), ev.number("C18", "sqrt_near_best_cells")
    if lang == "en":
        text = (f"So 1/sqrt(d_k) is the factor that keeps the softmax input the same whatever d_k: measured, the logit "
                f"std stops changing with d_k when the factor is d_k^-{exponent:.3f} (0.5 in theory).")
        if constant is not None:
            text += (f" At initialisation a constant factor fits one d_k only: {constant:g} gives normalised entropy "
                     f"from {low:.2f} to {high:.3f} across d_k.")
        if cells:
            text += f" In training, 1/sqrt(d_k) was near the best rule in {best} of {cells} settings."
        return text
    text = (f"所以 1/sqrt(d_k) 是让 softmax 的输入不随 d_k 变化的因子：实测因子取 d_k^-{exponent:.3f} 时，"
            f"logit 的标准差不再随 d_k 变化（理论值是 0.5）。")
    if constant is not None:
        text += f"在初始化时，固定常数只适合某一个 d_k：常数 {constant:g} 在不同 d_k 下的归一化熵从 {low:.2f} 变到 {high:.3f}。"
    if cells:
        text += f"训练中，1/sqrt(d_k) 在 {cells} 个设置里有 {best} 个接近最好的规则。"
    return text


def small_d_k(ev: Evidence, lang: str) -> str:
    if not ev.has("C15", "tv_dk2", "tv_dk_large", "dk_large"):
        return _pending("C15", lang)
    tv2, tv_large, d_large = (ev.number("C15", k) for k in ("tv_dk2", "tv_dk_large", "dk_large"))
    absolute, relative = tv2 <= SMALL_TV, tv2 <= SMALL_TV_RATIO * tv_large
    if lang == "en":
        size = {(True, True): "a small difference, but not none",
                (False, True): f"small next to d_k = {d_large}, but above {SMALL_TV:g}, so not negligible",
                (True, False): f"small in itself, but not next to d_k = {d_large}",
                (False, False): "not a small difference"}[(absolute, relative)]
        return (f"At d_k = 1 the factor is exactly 1. At d_k = 2 the attention rows with and without 1/sqrt(2) are "
                f"{tv2:.2f} apart in total variation, against {tv_large:.2f} at d_k = {d_large}: {size}.")
    size = {(True, True): "差别小，但不是没有",
            (False, True): f"相对而言小得多，但超过 {SMALL_TV:g}，不能忽略",
            (True, False): f"本身不大，但和 d_k = {d_large} 时相比并不小",
            (False, False): "差别并不小"}[(absolute, relative)]
    return (f"d_k = 1 时因子就是 1。d_k = 2 时，有无 1/sqrt(2) 的注意力分布总变差距离为 {tv2:.2f}，"
            f"而 d_k = {d_large} 时为 {tv_large:.2f}：{size}。")


def gradients(ev: Evidence, lang: str) -> str:
    keys = ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n", "share_p_in_range_large_n",
            "possible_up_to_n")
    if not ev.has("C16", *keys):
        return _pending("C16", lang)
    at100, small_n, large_n, small, large, possible = (ev.number("C16", k) for k in keys)
    up_to = ev.number("C16", "holds_up_to_n")
    ratio = ev.number("C17", "median_grad_ratio_sqrt_over_none")
    near_zero = at100 < 1e-10
    if lang == "en":
        text = (f"The softmax Jacobian is diag(p) - p p^T; with one input at 100 its entries are below {at100:.0e}"
                f"{', near 0' if near_zero else ''}. The interview answer's 'p between 0.05 and 0.95, derivative 0.05-0.25' "
                f"describes a softmax over a few keys: with sqrt-scaled logits {_pct(small)} of p_i lie in [0.05, 0.95] "
                f"for {small_n} keys" + (f", and most do up to {up_to} keys" if up_to and up_to > small_n else "")
                + f", but {_pct(large)} for {large_n} keys, where every p_i is small (the p_i sum to 1, so beyond "
                f"{possible} keys fewer than half of them can reach 0.05).")
        if ratio is not None:
            text += (f" In training, the first layer's W_q, W_k gradient without scaling was {1 / ratio:.2f}x that "
                     f"with scaling (median over matched runs)" +
                     (", more than 10x smaller." if ratio > 10 else ", not 10x smaller."))
        else:
            text += " " + _pending("C17", lang)
        return text
    text = (f"softmax 的雅可比矩阵是 diag(p) - p p^T；某个输入为 100 时，它的元素都小于 {at100:.0e}"
            f"{'，接近 0' if near_zero else ''}。原答案说的“p 在 0.05-0.95、导数 0.05-0.25”只适用于 key 很少的情况："
            f"sqrt 缩放后，{small_n} 个 key 时 {_pct(small)} 的 p_i 落在 [0.05, 0.95]"
            + (f"，到 {up_to} 个 key 时仍有一半以上" if up_to and up_to > small_n else "")
            + f"；{large_n} 个 key 时只有 {_pct(large)}，每个 p_i 都很小（p_i 之和为 1，key 超过 {possible} 个时，"
            f"能达到 0.05 的不到一半）。")
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
    d_kv, logit_std = ev.number("C10", "d_kv"), ev.number("C10", "t5_logit_std")
    gaps = ev.family("C10", "final_logit_std_gap_")
    trained = ev.lab_verdict("C10", "training")
    no_factor = abs(factor - 1) <= 0.02
    if lang == "en":
        text = (f"T5 applies {'no factor' if no_factor else f'a factor {factor:.3g}'} (the installed code, probed: "
                f"{factor:.3g}); W_q is initialised with std {ratio:.3f} times W_k's at d_kv = {d_kv} "
                f"(1/sqrt(d_kv) = {d_kv ** -0.5:.3f}), so only W_q's variance carries the extra 1/d_kv, and the logits "
                f"start with std {logit_std:.2f}.")
        if trained == PENDING or not gaps:
            return text + " " + _pending("C10", lang, "training")
        if trained == SUPPORTED:
            return text + " Trained, the two stay equivalent under every optimiser tried."
        same = [OPTIMISER_NAMES.get(opt, opt) for opt, gap in gaps.items() if gap < EQUIVALENT_LOGITS]
        differ = ", ".join(f"{OPTIMISER_NAMES.get(opt, opt)} by {_pct(gap)}" for opt, gap in gaps.items()
                           if gap >= EQUIVALENT_LOGITS)
        return text + (f" Trained, it stays equivalent under {', '.join(same) or 'no optimiser tried'}"
                       f"{'' if not differ else f', but the per-layer logit std ends apart under {differ}'}: the "
                       f"optimiser sees a different parametrisation, so the folding is equivalent at step 0, not in "
                       f"training.")
    text = (f"T5 {'不做显式缩放' if no_factor else f'的缩放因子是 {factor:.3g}'}（实测已安装代码的因子为 {factor:.3g}）；"
            f"d_kv = {d_kv} 时，W_q 初始化的标准差是 W_k 的 {ratio:.3f} 倍（1/sqrt(d_kv) = {d_kv ** -0.5:.3f}），"
            f"多出的 1/d_kv 只放在 W_q 的方差里，初始 logit 的标准差为 {logit_std:.2f}。")
    if trained == PENDING or not gaps:
        return text + _pending("C10", lang, "training")
    if trained == SUPPORTED:
        return text + "训练后，在所有试过的优化器下两者都保持等价。"
    same = [OPTIMISER_NAMES.get(opt, opt) for opt, gap in gaps.items() if gap < EQUIVALENT_LOGITS]
    differ = "，".join(f"在 {OPTIMISER_NAMES.get(opt, opt)} 下相差 {_pct(gap)}" for opt, gap in gaps.items()
                      if gap >= EQUIVALENT_LOGITS)
    return text + ((f"训练后，在 {'、'.join(same)} 下仍然等价" if same else "训练后，在所试的优化器下都不再等价")
                   + (f"，但各层 logit 标准差{differ}" if differ else "")
                   + "：优化器面对的是另一种参数化，所以这种折叠只在第 0 步等价，训练过程中并不等价。")


FOLLOW_UPS = {
    "en": ("If d_k is very small (1 or 2), is scaling still needed?",
           "Why does softmax saturation hurt training? What are the gradient values?",
           "How does T5 scale, and why?"),
    "zh": ("如果 d_k 很小（比如 1 或 2），还需要缩放吗？",
           "为什么 softmax 的梯度饱和区会导致训练问题？能具体说下梯度值吗？",
           "T5 的缩放方式有什么不同？为什么？"),
}


def _spaced(text: str, lang: str) -> str:
    """Chinese text: a space between Chinese characters and Latin letters or digits, as the rest is set."""
    if lang != "zh":
        return text
    text = re.sub(r"([\u4e00-\u9fff])([A-Za-z0-9±])", r"\1 \2", text)
    return re.sub(r"([A-Za-z0-9%)])([\u4e00-\u9fff])", r"\1 \2", text)


def check_report(report, source: str = "the report") -> dict:
    """``report`` if it has what :func:`compose` reads: a ``claims`` list holding every claim
    C01..C18, each with a known verdict and a ``numbers`` object; else ValueError naming
    what is wrong (``source`` names the report in the message)."""
    if not isinstance(report, dict) or not isinstance(report.get("claims"), list):
        raise UserError(f"{source} is not a report.json (no 'claims' list)")
    found = {}
    for claim in report["claims"]:
        if not isinstance(claim, dict) or not isinstance(claim.get("id"), str):
            raise UserError(f"{source} is not a report.json: an entry of 'claims' is not a claim with an 'id'")
        if (claim.get("verdict") not in (*VERDICTS, PENDING) or not isinstance(claim.get("numbers"), dict)
                or not isinstance(claim.get("lab_verdicts", {}), dict)):
            raise UserError(f"{source} is not a complete report.json: claim {claim['id']!r} lacks a known "
                             "'verdict' or a 'numbers' object")
        found[claim["id"]] = claim
    missing = [claim.id for claim in CLAIMS if claim.id not in found]
    if missing:
        named = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise UserError(f"{source} is not a complete report.json: claim{'s' if len(missing) > 1 else ''} {named} "
                         "missing; run `attnscale report` again")
    return report


# --------------------------------------------------------------------------- the 30-second layer
# Each entry is decided once (which case, which numbers) by a function below, then worded from this
# catalogue, English and Chinese side by side.  The layer must be sayable in half a minute: at most
# SHORT_WORDS English words, SHORT_HANZI Chinese characters.

SHORT_WORDS, SHORT_HANZI = 110, 220
SHORT = {
    "mechanism.holds": {
        "en": "Why sqrt(d_k): with independent unit-variance components q·k has variance d_k (measured within {err} up "
              "to d_k = {d_max}), and dividing by sqrt(d_k) keeps the logit std at 1 (within {std_err}) whatever the "
              "head size.",
        "zh": "为什么是 sqrt(d_k)：分量独立、方差为 1 时，q·k 的方差是 d_k（d_k 到 {d_max}，实测偏差不超过 {err}），"
              "除以 sqrt(d_k) 后 logit 的标准差保持为 1（偏差不超过 {std_err}），与头维度无关。"},
    "mechanism.roughly": {
        "en": "Why sqrt(d_k): q·k's variance grows about as d_k (measured off by up to {err}), and dividing by sqrt(d_k) "
              "keeps the logit std near 1 (within {std_err}) whatever the head size.",
        "zh": "为什么是 sqrt(d_k)：q·k 的方差大约随 d_k 增长（实测偏差可达 {err}），除以 sqrt(d_k) 后 logit 的标准差"
              "接近 1（偏差不超过 {std_err}），与头维度无关。"},
    "inv_d.trains": {
        "en": "Dividing by d_k starts near uniform but is not unusable: trained, it learned {span} of what sqrt(d_k) "
              "learned.",
        "zh": "除以 d_k 起初接近均匀分布，但并非不可用：训练后学到 sqrt(d_k) 的 {span}。"},
    "inv_d.unusable": {
        "en": "Dividing by d_k starts near uniform and stays unusable: trained, it learned {span} of what sqrt(d_k) "
              "learned.",
        "zh": "除以 d_k 起初接近均匀分布，训练后也只学到 sqrt(d_k) 的 {span}，确实不可用。"},
    "inv_d.mixed": {
        "en": "Dividing by d_k starts near uniform and trains worse in places: {span} of what sqrt(d_k) learned.",
        "zh": "除以 d_k 起初接近均匀分布，训练后有些设置更差：学到 sqrt(d_k) 的 {span}。"},
    "none.stalls": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, and training stalls.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，训练停滞。"},
    "none.sometimes": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, and training stalls in some settings "
              "or seeds, not all.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，部分设置或种子下训练停滞。"},
    "none.trains": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, yet training does not stall.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，但训练并未停滞。"},
    "none.not_100": {"en": " (not ±100)", "zh": "（不是 ±100）"},
    "tally": {
        "en": "Of the interview answer's {total} claims, {supported} {hold} in full, {partly} {hold_part} in part and "
              "{refuted} {refuted_be} refuted{untested}.",
        "zh": "原答案的 {total} 条说法中，{supported} 条成立，{partly} 条部分成立，{refuted} 条不成立{untested}。"},
    "tally.untested": {"en": "; {n} cannot be tested here", "zh": "，{n} 条此处无法检验"},
}


def _word(entry: str, lang: str, **numbers) -> str:
    return SHORT[entry][lang].format(**numbers)


def short_mechanism(ev: Evidence, lang: str) -> str:
    if not (ev.has("C02", "max_rel_error", "max_d_k") and ev.has("C04", "max_std_error")):
        return _pending("C02" if not ev.has("C02", "max_rel_error", "max_d_k") else "C04", lang)
    entry = "mechanism.holds" if ev.verdict("C02") == SUPPORTED else "mechanism.roughly"
    return _word(entry, lang, err=_at_most(ev.number("C02", "max_rel_error")), d_max=ev.number("C02", "max_d_k"),
                 std_err=_at_most(ev.number("C04", "max_std_error")))


def short_inv_d(ev: Evidence, lang: str) -> str:
    progress = ev.family("C05", "inv_d_progress_")
    trained = ev.lab_verdict("C05", "training")
    if trained == PENDING or not progress:
        return _pending("C05", lang, "training")
    entry = {REFUTED: "inv_d.trains", SUPPORTED: "inv_d.unusable"}.get(trained, "inv_d.mixed")
    return _word(entry, lang, span=_span(progress.values()))


def short_no_scaling(ev: Evidence, lang: str) -> str:
    logit = ev.number("C06", "max_logit_abs")
    trained = ev.lab_verdict("C06", "training")
    if logit is None or trained == PENDING:
        return _pending("C06", lang, "saturation" if logit is None else "training")
    entry = {SUPPORTED: "none.stalls", REFUTED: "none.trains"}.get(trained, "none.sometimes")
    return _word(entry, lang, logit=f"{logit:.0f}", not_100=SHORT["none.not_100"][lang] if logit < 50 else "")


def short_tally(ev: Evidence, lang: str) -> str:
    counts = {v: sum(c["verdict"] == v for c in ev.claims.values()) for v in (*VERDICTS, PENDING)}
    untested = counts[NOT_TESTABLE]
    return _word("tally", lang, total=len(ev.claims), supported=counts[SUPPORTED], partly=counts[PARTLY],
                 refuted=counts[REFUTED], hold="holds" if counts[SUPPORTED] == 1 else "hold",
                 hold_part="holds" if counts[PARTLY] == 1 else "hold", refuted_be="is" if counts[REFUTED] == 1 else "are",
                 untested=SHORT["tally.untested"][lang].format(n=untested) if untested else "")


SHORT_SENTENCES = (short_mechanism, short_inv_d, short_no_scaling, short_tally)


def _sentence(build, ev: Evidence, lang: str) -> str:
    """One sentence; the numbers it reads are checked as they are read (:meth:`Evidence.number`), so
    an exception here is a bug, and is left to say so."""
    return build(ev, lang)


def compose(report: dict, lang: str = "en") -> dict:
    """The interview answer in three layers, as lists of sentences: ``short`` (the 30-second answer),
    ``answer`` (the full measured answer) and the three ``follow_ups``."""
    if lang not in LANGS:
        raise UserError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
    ev = Evidence(check_report(report))
    short = [_spaced(_sentence(f, ev, lang), lang) for f in SHORT_SENTENCES]
    answer = [_spaced(_sentence(f, ev, lang), lang)
              for f in (variance, init_premise, sqrt_rule, inv_d_rule, no_scaling, low_precision, balance)]
    follow_ups = [{"question": q, "answer": [_spaced(_sentence(f, ev, lang), lang)]}
                  for q, f in zip(FOLLOW_UPS[lang], (small_d_k, gradients, t5))]
    counts = {}
    for claim in report["claims"]:
        counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
    return {"lang": lang, "short": short, "answer": answer, "follow_ups": follow_ups, "verdict_counts": counts,
            "preset": report.get("preset"), "seed": report.get("seed")}


def render_text(composed: dict) -> str:
    zh = composed["lang"] == "zh"
    join = "".join if zh else " ".join
    lines = ["30 秒回答" if zh else "The 30-second answer", "", join(composed["short"]), "",
             "完整回答（逐条实测）" if zh else "The full answer, as measured", "", join(composed["answer"]), ""]
    for i, item in enumerate(composed["follow_ups"], 1):
        lines += [f"追问 {i}：{item['question']}" if zh else f"Follow-up {i}: {item['question']}", join(item["answer"]), ""]
    if zh:
        counts = "，".join(f"{VERDICT_ZH.get(v, v)} {n}" for v, n in composed["verdict_counts"].items())
        lines.append(f"（依据：preset {composed['preset']}、seed {composed['seed']} 的报告；结论统计：{counts}。）")
    else:
        counts = ", ".join(f"{v} {n}" for v, n in composed["verdict_counts"].items())
        lines.append(f"(From the report of preset {composed['preset']}, seed {composed['seed']}; verdicts: {counts}.)")
    return "\n".join(lines)


REPORT_BYTES_LIMIT = 256 * 2**20


def load_report(path: str | Path) -> dict:
    """report.json from a report folder or the file itself; FileNotFoundError / ValueError name what is wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"no report at {str(path)!r}; run `attnscale report` first (or pass --report)")
    if not path.is_file():
        raise UserError(f"{str(path)!r} is a folder, not a report.json")
    if path.stat().st_size > REPORT_BYTES_LIMIT:
        raise UserError(f"{str(path)!r} has {path.stat().st_size / 2**20:.0f} MiB; a report.json has a few, at most "
                        f"{REPORT_BYTES_LIMIT // 2**20} MiB accepted")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{str(path)!r} is not a report.json: {error}") from None
    except RecursionError:
        raise UserError(f"{str(path)!r} is not a report.json: its JSON is nested too deeply to read") from None
    return check_report(report, repr(str(path)))

