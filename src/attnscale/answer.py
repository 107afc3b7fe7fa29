"""The interview answer, rebuilt from the evidence.

The source (the interview answer) gives a 30-second answer and three follow-ups.
:func:`compose` rewrites them from a report (report.json) in three layers: the 30-second
answer, the full measured answer and the follow-ups.  Every sentence is chosen by the
verdict of the claim it states and quotes that claim's measured numbers, so a refuted claim
is stated as measured and the text changes when the evidence does; no comparison is written
in advance.  A claim whose lab has not run yet is said to be pending.

Each sentence function here decides once (which catalogue entry, which numbers, with the
thresholds the verdict modules own); :mod:`attnscale.answer_catalogue` words it, English
(``en``) and Chinese (``zh``) side by side.

:data:`READS` declares every number the answer reads, by claim and lab; each lab declares
the numbers its findings carry in its ``NUMBER_KEYS``, and the tests hold the two together.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from .answer_catalogue import GAP, Listing, Seq, Word, render
from .claims import (ANY_BY_ID, BY_ID, CLAIMS, HOLDS, INCONCLUSIVE, MIXED, NOT_IN_PRESET, NOT_TESTABLE, PARTLY,
                     PENDING, REFUTED, SUPPORTED, UNDECIDED, VERDICTS, key_declared)
from .probing.probe import NO_SCALING  # C10: the probe's label of T5's factor
from . import jsonfile
from .errors import UserError
from .paths import what_is
from .lab.numerics import CLAMP_COSTS, KL_CHEAP, MEMORY_SAVED, RANGE_REACHED, WRONG_OUTPUT
from .lab.saturation import verdicts as saturation_rules  # C06: "around +-100", "gradient near 0"; C16: "near 0"
from .lab.training.verdicts import EQUIVALENT_LOGITS, GRAD_DROP  # C10's trained logit std gap, C17's "10x"
from .lab.variance import SMALL_TV_RATIO
from .lab.length import verdicts as length_rules  # L1-L3: the key counts compared
from .lab.variance import verdicts as variance_rules  # C01: "variance 1"

LANGS = ("en", "zh")

# (claim ID, lab) -> the numbers the answer reads from that lab's finding ("name*": a family of keys).
READS = {
    ("C01", "variance"): ("var[torch-default square]", "var[xavier-uniform square]", "var[xavier-uniform per-head]"),
    ("C02", "variance"): ("max_rel_error", "max_d_k"),
    ("C04", "saturation"): ("max_std_error", "min_share_within_3", "max_saturated_share"),
    ("C05", "saturation"): ("min_normalized_entropy",),
    ("C05", "training"): ("inv_d_progress_*", "n_layers", "d_model"),
    ("C06", "saturation"): ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt", "dk_logits_reach_100"),
    ("C06", "training"): ("none_progress_*", "none_stalled_*", "none_seeds_*", "n_layers", "d_model"),
    ("C10", "doctor"): ("t5_factor", "t5_finding", "t5_wq_wk_std_ratio", "d_kv", "t5_logit_std"),
    ("C10", "training"): ("final_logit_std_gap_*",),
    ("C11", "numerics"): ("claim_d_k", "claimed_range", "max_abs_logit_unit_std_sqrt", "trained_model", "trained_d_k",
                          "trained_max_abs_logit", "trained_naive_fp16_overflow_rows", "real_code_nonfinite",
                          "real_code_max_error", "fp16_exp_first_inf"),
    ("C12", "numerics"): ("online_overflow", "tiled_naive_nonfinite", "clamp_cost", "clamp_kl_cheapest_fix",
                          "clamp_kl_cheapest_fix_low", "clamp_kl_cheapest_fix_high", "memory_tokens",
                          "dense_peak_mib", "online_peak_mib", "memory_ratio"),
    ("C15", "variance"): ("tv_dk2", "tv_dk_large", "dk_large"),
    ("C16", "saturation"): ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n",
                            "share_p_in_range_large_n", "holds_up_to_n", "possible_up_to_n"),
    ("C17", "training"): ("median_grad_ratio_sqrt_over_none",),
    ("C18", "saturation"): ("zero_slope_exponent", "constant_factor", "constant_entropy_min", "constant_entropy_max"),
    ("C18", "training"): ("cells", "sqrt_near_best_cells"),
    ("L1", "length"): ("sqrt_weight_equal_*",),
    ("L2", "length"): ("logn_weight_equal_*",),
    ("L3", "length"): ("sqrt_log_entropy_*", "log_entropy_*", "sqrt_log_trained_kept", "logn_trained_kept",
                       "sqrt_log_trained_fading", "sqrt_log_trained_seeds"),
    ("L4", "length"): ("train_length", "test_length", "sqrt_dropping", "sqrt_drop_seeds", "logn_dropping",
                       "logn_drop_seeds", "logn_trained_dropping", "logn_trained_drop_seeds"),
}

TEXT_NUMBERS = {("C11", "trained_model"), ("C10", "t5_finding"), ("C12", "clamp_cost"), ("C12", "online_overflow")}  # the declared numbers that hold text

OPTIMISER_NAMES = {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}


class Evidence:
    """Verdicts and numbers of one report, looked up by claim ID; only declared numbers can be read."""

    def __init__(self, report: dict):
        self.claims = {c["id"]: c for c in report["claims"] + list(report.get("statements") or [])}

    def verdict(self, claim_id: str) -> str:
        return self.claims[claim_id]["verdict"]

    def lab_verdict(self, claim_id: str, lab: str) -> str:
        return self.claims[claim_id].get("lab_verdicts", {}).get(lab, PENDING)

    def trained_outcome(self, claim_id: str) -> str:
        """The training lab's verdict of a claim, or LEANS_HOLDS where it is inconclusive only because a
        part could still hold in full or hold in part (it holds at least in part either way, and no part
        of the lab fails)."""
        verdict = self.lab_verdict(claim_id, "training")
        parts = [p for p in self.claims[claim_id].get("parts", []) if isinstance(p, dict) and p.get("lab") == "training"]
        open_ = [p for p in parts if p.get("state") == UNDECIDED]
        if (verdict == INCONCLUSIVE and open_ and all(p.get("state") in (HOLDS, MIXED, UNDECIDED) for p in parts)
                and all(set(p.get("could_be") or ()) <= {HOLDS, MIXED} and p.get("could_be") for p in open_)):
            return LEANS_HOLDS
        return verdict

    def _key(self, claim_id: str, key: str) -> str:
        """The key as report.json carries it (prefixed by its lab on claims tested by several labs)."""
        labs = [lab for (cid, lab), keys in READS.items() if cid == claim_id and key_declared(keys, key)]
        if not labs:
            raise KeyError(f"the answer reads {claim_id}'s {key!r}, which READS does not declare")
        return f"{labs[0]}.{key}" if len(ANY_BY_ID[claim_id].labs) > 1 else key

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
        return claim_id in self.claims and all(self.number(claim_id, key) is not None for key in keys)


# Percentages: "at least" rounds down and "at most" rounds up, so that a bound stays true.

def _pct(x: float) -> str:
    if 0 < abs(x) < 0.01 or 0.99 < abs(x) < 1:
        return f"{100 * x:.1f}%"
    return f"{100 * x:.0f}%"


def _at_least(x: float) -> str:
    return f"{math.floor(1000 * x + 1e-9) / 10:g}%"


def _at_most(x: float) -> str:
    return f"{math.ceil(1000 * x - 1e-9) / 10:g}%"


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


def _trained_scale(ev: Evidence, claim_id: str, progress: dict[str, float]) -> Word:
    """How small the trained models behind a sentence are: layers, width and head sizes."""
    if not ev.has(claim_id, "n_layers", "d_model"):  # a report from before the size was recorded
        return Word("scale.d_heads", d_heads=_d_heads(progress))
    return Word("scale.trained", layers=ev.number(claim_id, "n_layers"), width=ev.number(claim_id, "d_model"),
                d_heads=_d_heads(progress))


def _pending(claim_id: str, lab: str | None = None) -> Word:
    return Word("pending", part=Word("pending.half", claim=claim_id, lab=Word(f"lab.{lab}")) if lab else claim_id)


def _then(text, sentence) -> Seq:
    """A sentence after another in one paragraph."""
    return Seq(text, GAP, sentence)


# Each sentence function decides the sentence for one claim (or a pair of claims): which
# catalogue entries, with which numbers.  The catalogue (answer_catalogue) words it.

def variance(ev: Evidence) -> Word:
    if not ev.has("C02", "max_rel_error", "max_d_k"):
        return _pending("C02")
    entry = "variance.holds" if ev.verdict("C02") == SUPPORTED else "variance.roughly"
    return Word(entry, premise=Word("variance.premise"), err=_at_most(ev.number("C02", "max_rel_error")),
                d_max=ev.number("C02", "max_d_k"))


INIT_KEYS = ("var[xavier-uniform square]", "var[torch-default square]", "var[xavier-uniform per-head]")  # C01's numbers


def init_premise(ev: Evidence) -> Word:
    if not ev.has("C01", *INIT_KEYS):
        return _pending("C01")
    shown = {key: Word("init.shown", name=Word(f"init.{key}"), value=f"{ev.number('C01', key):.2f}") for key in INIT_KEYS}
    near = [shown[key] for key in INIT_KEYS if abs(ev.number("C01", key) - 1) <= variance_rules.VAR_NEAR_1]
    off = [shown[key] for key in INIT_KEYS if abs(ev.number("C01", key) - 1) > variance_rules.VAR_NEAR_1]
    if not off:
        return Word("init.all_near", near=Listing(near, last="list.and"))
    if not near:
        return Word("init.none_near", off=Listing(off, last="list.and"), tail=Word("init.tail"))
    return Word("init.some_off", near=Listing(near, last="list.and"), off=Listing(off, last="list.and"),
                gives="gives" if len(near) == 1 else "give", does="does" if len(off) == 1 else "do",
                tail=Word("init.tail"))


def sqrt_rule(ev: Evidence) -> Word:
    if not ev.has("C04", "max_std_error", "min_share_within_3", "max_saturated_share"):
        return _pending("C04")
    err, share, saturated = (ev.number("C04", k) for k in ("max_std_error", "min_share_within_3", "max_saturated_share"))
    rows = Word("sqrt.no_row") if saturated == 0 else Word("sqrt.some_rows", share=_at_most(saturated))
    return Word("sqrt.rule", err=_at_most(err), share=_at_least(share), rows=rows)


LEANS_HOLDS = "holds at least in part"  # Evidence.trained_outcome: inconclusive between holding in full and in part
TRAINED_ENTRY = {REFUTED: "refuted", SUPPORTED: "supported", INCONCLUSIVE: "inconclusive",
                 LEANS_HOLDS: "leans"}  # any other: "partly"


def inv_d_rule(ev: Evidence) -> Seq | Word:
    entropy = ev.number("C05", "min_normalized_entropy")
    if entropy is None:
        return _pending("C05")
    progress = ev.family("C05", "inv_d_progress_")
    trained = ev.lab_verdict("C05", "training")
    uniform = ev.lab_verdict("C05", "saturation") in (SUPPORTED, PARTLY)
    text = Word("inv_d.init", uniform=Word("inv_d.uniform" if uniform else "inv_d.not_uniform"), entropy=f"{entropy:.3f}")
    if trained == PENDING or not progress:
        return _then(text, _pending("C05", "training"))
    return Seq(text, Word(f"inv_d.trained.{TRAINED_ENTRY.get(trained, 'partly')}", span=_span(progress.values()),
                          scale=_trained_scale(ev, "C05", progress)))


def no_scaling(ev: Evidence) -> Seq | Word:
    keys = ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt")
    if not ev.has("C06", *keys):
        return _pending("C06")
    max_logit, saturated, grad = (ev.number("C06", k) for k in keys)
    dk100 = ev.number("C06", "dk_logits_reach_100")
    progress = ev.family("C06", "none_progress_")
    trained = ev.trained_outcome("C06")
    if max_logit >= saturation_rules.LOGITS_AROUND_100:
        size = Word("none.size.extreme", logit=f"{max_logit:.0f}")
    else:
        reach = Word("none.reach.from", d_k=f"{dk100:.0f}") if dk100 else Word("none.reach.never")
        size = Word("none.size.short", logit=f"{max_logit:.0f}", reach=reach)
    if grad <= saturation_rules.GRADIENT_NEAR_0:
        gradient = Word("none.gradient.near_0", ratio=f"{grad:.2g}")
    elif grad >= 1:
        gradient = Word("none.gradient.larger", ratio=f"{grad:.0f}")
    else:
        gradient = Word("none.gradient.smaller", ratio=f"{grad:.2g}")
    text = Word("none.init", size=size, saturated=_at_least(saturated), gradient=gradient)
    if trained == PENDING or not progress:
        return _then(text, _pending("C06", "training"))
    verb = Word(f"none.verb.{TRAINED_ENTRY.get(trained, 'partly')}")
    stalled, seeds = ev.family("C06", "none_stalled_"), ev.family("C06", "none_seeds_")
    count = (Word("none.trained.count", stalled=int(sum(stalled.values())), seeds=int(sum(seeds.values())))
             if seeds else "")
    return Seq(text, Word("none.trained", scale=_trained_scale(ev, "C06", progress), verb=verb,
                          span=_span(progress.values()), count=count))


def low_precision(ev: Evidence) -> Seq | Word:
    keys11 = ("claim_d_k", "claimed_range", "max_abs_logit_unit_std_sqrt", "trained_model", "trained_d_k",
              "trained_max_abs_logit", "trained_naive_fp16_overflow_rows", "real_code_nonfinite",
              "real_code_max_error", "fp16_exp_first_inf")
    keys12 = ("online_overflow", "tiled_naive_nonfinite", "memory_tokens", "dense_peak_mib", "online_peak_mib",
              "memory_ratio")
    if not ev.has("C11", *keys11) or not ev.has("C12", *keys12):
        return _pending("C11")
    d_k, claimed, unit, model, model_d_k, trained, naive, nonfinite, error, threshold = (
        ev.number("C11", k) for k in keys11)
    online, tiled, tokens, dense_mib, online_mib, ratio = (ev.number("C12", k) for k in keys12)
    clamp_cost, clamp_kl = ev.number("C12", "clamp_cost"), ev.number("C12", "clamp_kl_cheapest_fix")
    clamp_kl_low, clamp_kl_high = ev.number("C12", "clamp_kl_cheapest_fix_low"), ev.number("C12", "clamp_kl_cheapest_fix_high")
    reached = claimed * RANGE_REACHED
    parts = [Word("fp16.range", d_k=d_k, claimed=f"{claimed:g}", unit=f"{unit:.1f}", model=model, model_d_k=model_d_k,
                  trained=f"{trained:.0f}", unit_do=Word("fp16.unit_do." + ("yes" if unit >= reached else "no")),
                  trained_do=Word("fp16.trained_do." + ("yes" if trained >= reached else "no")))]
    if nonfinite > 0:
        parts.append(Word("fp16.nonfinite"))
    else:
        precision = Word("fp16.imprecise", error=f"{error:.2f}") if error > WRONG_OUTPUT else Word("fp16.precise")
        parts.append(Word("fp16.finite", threshold=f"{threshold:.2f}", naive=_pct(naive), precision=precision))
    if online == "never" and tiled > 0:  # the C12 rule's decision: online softmax never overflows
        saves_memory = bool(ratio) and ratio >= MEMORY_SAVED
        tiling = (Word("flash.saves_memory", tokens=tokens, dense=f"{dense_mib:.0f}", online=f"{online_mib:.1f}")
                  if saves_memory else Word("flash.no_overflow_fix"))
        parts.append(Word("flash.online", tiling=tiling))
        clamp = Word("clamp.after")
    else:
        clamp = Word("clamp.first")
    if clamp_kl is None:
        parts.append(Word("clamp.none_works", clamp=clamp))
    elif clamp_cost in CLAMP_COSTS.values():  # the C12 rule's own decision on its cost
        parts.append(Word(f"clamp.{clamp_cost}", clamp=clamp, kl=f"{clamp_kl:.3g}",
                          low=f"{clamp_kl_low:.3g}", high=f"{clamp_kl_high:.3g}", cheap=f"{KL_CHEAP:g}"))
    else:
        parts.append(_pending("C12"))
    return Seq(*parts)


def balance(ev: Evidence) -> Seq | Word:
    exponent = ev.number("C18", "zero_slope_exponent")
    if exponent is None:
        return _pending("C18")
    constant = ev.number("C18", "constant_factor")
    low, high = ev.number("C18", "constant_entropy_min"), ev.number("C18", "constant_entropy_max")
    cells, best = ev.number("C18", "cells"), ev.number("C18", "sqrt_near_best_cells")
    parts = [Word("balance.exponent", exponent=f"{exponent:.3f}")]
    if constant is not None:
        parts.append(Word("balance.constant", constant=f"{constant:g}", low=f"{low:.2f}", high=f"{high:.3f}"))
    if cells:
        parts.append(Word("balance.trained", best=best, cells=cells))
    return Seq(*parts)


def small_d_k(ev: Evidence) -> Word:
    if not ev.has("C15", "tv_dk2", "tv_dk_large", "dk_large"):
        return _pending("C15")
    tv2, tv_large, d_large = (ev.number("C15", k) for k in ("tv_dk2", "tv_dk_large", "dk_large"))
    # the label decides (it reads the intervals); a report of another shape falls back on the point estimates
    size = {SUPPORTED: "small", REFUTED: "large", INCONCLUSIVE: "open"}.get(
        ev.verdict("C15"), "small" if tv2 <= SMALL_TV_RATIO * tv_large else "large")
    return Word("small.tv", tv2=f"{tv2:.2f}", tv_large=f"{tv_large:.2f}", d_large=d_large,
                size=Word(f"small.size.{size}", share=_pct(tv2 / tv_large)))


def gradients(ev: Evidence) -> Seq | Word:
    keys = ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n", "share_p_in_range_large_n",
            "possible_up_to_n")
    if not ev.has("C16", *keys):
        return _pending("C16")
    at100, small_n, large_n, small, large, possible = (ev.number("C16", k) for k in keys)
    up_to = ev.number("C16", "holds_up_to_n")
    ratio = ev.number("C17", "median_grad_ratio_sqrt_over_none")
    text = Word("gradients.jacobian", at100=f"{at100:.0e}", small=_pct(small), small_n=small_n, large=_pct(large),
                large_n=large_n, possible=possible,
                near_0=Word("gradients.near_0") if at100 < saturation_rules.EXTREME_NEAR_0 else "",
                up_to=Word("gradients.up_to", up_to=up_to) if up_to and up_to > small_n else "")
    if ratio is None:
        return _then(text, _pending("C17"))
    drop = Word("gradients.drop." + ("large" if ratio > GRAD_DROP else "small"), times=f"{GRAD_DROP:g}")
    return Seq(text, Word("gradients.trained", ratio=f"{1 / ratio:.2f}", drop=drop))


def t5(ev: Evidence) -> Seq | Word:
    factor, ratio = ev.number("C10", "t5_factor"), ev.number("C10", "t5_wq_wk_std_ratio")
    if factor is None or ratio is None:
        return _pending("C10")
    d_kv, logit_std = ev.number("C10", "d_kv"), ev.number("C10", "t5_logit_std")
    gaps = ev.family("C10", "final_logit_std_gap_")
    trained = ev.lab_verdict("C10", "training")
    applies = (Word("t5.applies.none") if ev.number("C10", "t5_finding") == NO_SCALING
               else Word("t5.applies.factor", factor=f"{factor:.3g}"))
    text = Word("t5.init", applies=applies, factor=f"{factor:.3g}", ratio=f"{ratio:.3f}", d_kv=d_kv,
                inv_sqrt=f"{d_kv ** -0.5:.3f}", logit_std=f"{logit_std:.2f}")
    if trained == PENDING or not gaps:
        return _then(text, _pending("C10", "training"))
    if trained == SUPPORTED:
        return Seq(text, Word("t5.trained.equivalent"))
    name = lambda key: OPTIMISER_NAMES.get(key.rsplit("_", 1)[-1], key)  # keys are <task>_<optimiser>
    same = [name(opt) for opt, gap in gaps.items() if gap < EQUIVALENT_LOGITS]
    apart = [Word("t5.apart", optimiser=name(opt), gap=_pct(gap)) for opt, gap in gaps.items()
             if gap >= EQUIVALENT_LOGITS]
    differ = Word("t5.differ", apart=Listing(apart, sep="list.clause")) if apart else ""
    if same:
        return Seq(text, Word("t5.trained.some_same", same=Listing(same), differ=differ, tail=Word("t5.tail")))
    return Seq(text, Word("t5.trained.none_same", differ=differ, tail=Word("t5.tail")))


def long_contexts(ev: Evidence) -> Seq | Word:
    """The statements beyond the source (L1-L4): what the factor does as the number of keys grows."""
    if not all(s in ev.claims for s in ("L1", "L2", "L3", "L4")):
        return _pending("L1-L4")
    plain, logn = ev.family("L1", "sqrt_weight_equal_"), ev.family("L2", "logn_weight_equal_")
    sqrt_log, log = ev.family("L3", "sqrt_log_entropy_"), ev.family("L3", "log_entropy_")
    small, large = (str(n) for n in (length_rules.N_FROM, length_rules.N_TO))
    if not all(small in f and large in f for f in (plain, logn, sqrt_log, log)):
        return _pending("L1-L3")
    label = lambda sid: Word(f"verdict.{ev.verdict(sid)}")
    text = Word("long.fade", small=small, large=f"{int(large):,}", w_small=f"{plain[small]:.2f}",
                w_large=f"{plain[large]:.3f}", l1=label("L1"), logn_large=f"{logn[large]:.2f}", l2=label("L2"))
    kept_keys = ("sqrt_log_trained_kept", "logn_trained_kept", "sqrt_log_trained_fading", "sqrt_log_trained_seeds")
    law_trained = (Word("long.law.trained", sq_kept=f"{ev.number('L3', kept_keys[0]):.2f}",
                        log_kept=f"{ev.number('L3', kept_keys[1]):.2f}", k=ev.number("L3", kept_keys[2]),
                        n=ev.number("L3", kept_keys[3]))
                   if ev.has("L3", *kept_keys) else "")
    law = Word("long.law", log_small=f"{log[small]:.2f}", log_large=f"{log[large]:.2f}",
               sq_small=f"{sqrt_log[small]:.2f}", sq_large=f"{sqrt_log[large]:.2f}", l3=label("L3"), trained=law_trained)
    counts = ("sqrt_dropping", "sqrt_drop_seeds", "logn_dropping", "logn_drop_seeds")
    if not ev.has("L4", "train_length", "test_length", *counts):
        return Seq(text, GAP, law, GAP, _pending("L4"))
    sqrt_k, sqrt_n, logn_k, logn_n = (ev.number("L4", key) for key in counts)
    from_start = (Word("long.trained_from_start", k=ev.number("L4", "logn_trained_dropping"),
                       n=ev.number("L4", "logn_trained_drop_seeds"))
                  if ev.has("L4", "logn_trained_dropping", "logn_trained_drop_seeds") else "")
    trained = Word("long.trained", train=ev.number("L4", "train_length"), test=ev.number("L4", "test_length"),
                   sqrt_k=sqrt_k, sqrt_n=sqrt_n, logn_k=logn_k, logn_n=logn_n, l4=label("L4"), from_start=from_start)
    return Seq(text, GAP, trained, GAP, law)


FOLLOW_UPS = (("follow_up.small_d_k", small_d_k), ("follow_up.gradients", gradients), ("follow_up.t5", t5),
              ("follow_up.long_contexts", long_contexts))


def _spaced(text: str, lang: str) -> str:
    """Chinese text: a space between Chinese characters and Latin letters or digits, as the rest is set."""
    if lang != "zh":
        return text
    text = re.sub(r"([\u4e00-\u9fff])([A-Za-z0-9±])", r"\1 \2", text)
    return re.sub(r"([A-Za-z0-9%)])([\u4e00-\u9fff])", r"\1 \2", text)


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # terminal control: escape sequences, bells, clears


def scrubbed(value):
    """``value`` with every control character in its strings (keys too) replaced by U+FFFD: a report is read
    as untrusted input, and its strings reach the terminal."""
    if isinstance(value, str):
        return CONTROL.sub("\ufffd", value)
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {scrubbed(k) if isinstance(k, str) else k: scrubbed(v) for k, v in value.items()}
    return value


ENTRY_IDS = {"claims": re.compile(r"C\d{2}"), "statements": re.compile(r"L\d+")}


def _check_entry(entry, kind: str, source: str) -> None:
    """One entry of ``claims`` or ``statements`` as :func:`compose` and ``explain`` read it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise UserError(f"{source} is not a report.json: an entry of {kind!r} is not a claim with an 'id'")
    name = entry["id"]
    if not ENTRY_IDS[kind].fullmatch(name):
        raise UserError(f"{source} is not a report.json: {kind!r} holds an entry with id {name!r}; accepted: "
                        f"{'C01..C18' if kind == 'claims' else 'L1, L2, ...'}")
    if (entry.get("verdict") not in (*VERDICTS, PENDING) or not isinstance(entry.get("numbers"), dict)
            or not isinstance(entry.get("lab_verdicts", {}), dict)):
        raise UserError(f"{source} is not a complete report.json: {name!r} lacks a known 'verdict' or a 'numbers' "
                        "object")
    for field in ("claim", "evidence", "verdict_line", "source", "section", "margin_text"):
        if field in entry and not isinstance(entry[field], str):
            raise UserError(f"{source} is not a report.json: {name!r}'s {field!r} is a "
                            f"{type(entry[field]).__name__}; accepted: a string")
    for lab, label in entry.get("lab_verdicts", {}).items():
        if label not in (*VERDICTS, PENDING):
            raise UserError(f"{source} is not a report.json: {name!r}'s verdict from the {lab!r} lab is {label!r}; "
                            f"accepted: {', '.join((*VERDICTS, PENDING))}")
    for field in ("figures", "experiments", "commands"):
        if field in entry and not (isinstance(entry[field], list) and all(isinstance(v, str) for v in entry[field])):
            raise UserError(f"{source} is not a report.json: {name!r}'s {field!r} is not a list of strings")
    parts = entry.get("parts", [])
    if not isinstance(parts, list) or not all(
            isinstance(p, dict) and all(isinstance(p.get(k, ""), str) for k in ("key", "text", "role", "lab", "state",
                                                                                "measured", "threshold", "setting"))
            for p in parts):
        raise UserError(f"{source} is not a report.json: {name!r}'s 'parts' is not a list of parts with text fields")
    for number, value in entry["numbers"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str, type(None))):
            raise UserError(f"{source} is not a report.json: {name!r} number {number!r} is a "
                            f"{type(value).__name__}; accepted: a number, a string or null")


def check_report(report, source: str = "the report") -> dict:
    """``report`` (its strings scrubbed of control characters) if it has what :func:`compose` and ``explain``
    read: a ``claims`` list holding every claim C01..C18 and an optional ``statements`` list (L1, L2, ...),
    each with a known verdict and a ``numbers`` object; else ValueError naming what is wrong (``source`` names
    the report in the message)."""
    if not isinstance(report, dict) or not isinstance(report.get("claims"), list):
        raise UserError(f"{source} is not a report.json (no 'claims' list)")
    statements = report.get("statements", [])
    if not isinstance(statements, list):
        raise UserError(f"{source} is not a report.json: its 'statements' is a {type(statements).__name__}; "
                        "accepted: a list")
    found = {}
    for kind, entries in (("claims", report["claims"]), ("statements", statements)):
        for entry in entries:
            _check_entry(entry, kind, source)
            if entry["id"] in found:
                raise UserError(f"{source} is not a report.json: {entry['id']!r} appears twice")
            found[entry["id"]] = entry
    for field, kinds in (("preset", (str,)), ("seed", (int,)), ("seconds", (int, float))):
        if field in report and (isinstance(report[field], bool) or not isinstance(report[field], kinds)):
            raise UserError(f"{source} is not a report.json: its {field!r} is a {type(report[field]).__name__}")
    missing = [claim.id for claim in CLAIMS if claim.id not in found]
    if missing:
        named = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise UserError(f"{source} is not a complete report.json: claim{'s' if len(missing) > 1 else ''} {named} "
                         "missing; run `attnscale report` again")
    return scrubbed(report)


# --------------------------------------------------------------------------- the 30-second layer
# It must be sayable in half a minute: at most SHORT_WORDS English words, SHORT_HANZI Chinese characters.

SHORT_WORDS, SHORT_HANZI = 110, 220


def short_mechanism(ev: Evidence) -> Word:
    if not (ev.has("C02", "max_rel_error", "max_d_k") and ev.has("C04", "max_std_error")):
        return _pending("C02" if not ev.has("C02", "max_rel_error", "max_d_k") else "C04")
    entry = "short.mechanism.holds" if ev.verdict("C02") == SUPPORTED else "short.mechanism.roughly"
    return Word(entry, err=_at_most(ev.number("C02", "max_rel_error")), d_max=ev.number("C02", "max_d_k"),
                std_err=_at_most(ev.number("C04", "max_std_error")))


def short_inv_d(ev: Evidence) -> Word:
    progress = ev.family("C05", "inv_d_progress_")
    trained = ev.lab_verdict("C05", "training")
    if trained == PENDING or not progress:
        return _pending("C05", "training")
    entry = {REFUTED: "short.inv_d.trains", SUPPORTED: "short.inv_d.unusable",
             INCONCLUSIVE: "short.inv_d.open"}.get(trained, "short.inv_d.mixed")
    return Word(entry, span=_span(progress.values()))


def short_no_scaling(ev: Evidence) -> Word:
    logit = ev.number("C06", "max_logit_abs")
    trained = ev.trained_outcome("C06")
    if logit is None or trained == PENDING:
        return _pending("C06", "saturation" if logit is None else "training")
    entry = {SUPPORTED: "short.none.stalls", REFUTED: "short.none.trains", INCONCLUSIVE: "short.none.open",
             LEANS_HOLDS: "short.none.leans"}.get(trained, "short.none.sometimes")
    not_100 = Word("short.none.not_100") if logit < saturation_rules.LOGITS_AROUND_100 else ""
    stalled, seeds = ev.family("C06", "none_stalled_"), ev.family("C06", "none_seeds_")
    where = (Word("short.none.where", layers=ev.number("C06", "n_layers"),
                  stalled=int(sum(stalled.values())), seeds=int(sum(seeds.values())))
             if seeds and ev.has("C06", "n_layers") else "")  # the scale of the evidence, where the report has it
    return Word(entry, logit=f"{logit:.0f}", not_100=not_100, where=where)


def short_tally(ev: Evidence) -> Word:
    """The interview answer's own claims counted by label; our statements (L1-L4) are not among them."""
    source = [c for cid, c in ev.claims.items() if cid in BY_ID]
    counts = {v: sum(c["verdict"] == v for c in source) for v in (*VERDICTS, PENDING)}
    refuted = [c for c in source if c["verdict"] == REFUTED]
    items = [Word("short.tally.item", id=c["id"]) for c in refuted]  # ids: what each got wrong is in the full answer
    rest = [Word(f"short.tally.{key}", n=counts[verdict], be="is" if counts[verdict] == 1 else "are")
            for key, verdict in (("inconclusive", INCONCLUSIVE), ("not_in_preset", NOT_IN_PRESET),
                                 ("untested", NOT_TESTABLE)) if counts[verdict]]
    return Word("short.tally", total=len(source), supported=counts[SUPPORTED], partly=counts[PARTLY],
                refuted=counts[REFUTED], hold="holds" if counts[SUPPORTED] == 1 else "hold",
                hold_part="holds" if counts[PARTLY] == 1 else "hold", refuted_be="is" if counts[REFUTED] == 1 else "are",
                refuted_list=Word("short.tally.refuted", items=Listing(items, sep="list.clause")) if items else "",
                rest=Seq(*rest) if rest else "")


SHORT_SENTENCES = (short_mechanism, short_inv_d, short_no_scaling, short_tally)
FULL_SENTENCES = (variance, init_premise, sqrt_rule, inv_d_rule, no_scaling, low_precision, balance)


def _sentence(build, ev: Evidence, lang: str) -> str:
    """One sentence, decided by ``build`` and worded in ``lang``.  The numbers it reads are checked as
    they are read (:meth:`Evidence.number`), so an exception here is a bug, and is left to say so."""
    return _spaced(render(build(ev), lang), lang)


def compose(report: dict, lang: str = "en") -> dict:
    """The interview answer in three layers, as lists of sentences: ``short`` (the 30-second answer),
    ``answer`` (the full measured answer) and the four ``follow_ups``."""
    if lang not in LANGS:
        raise UserError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
    ev = Evidence(check_report(report))
    counts = {}
    for claim in report["claims"]:
        counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
    return {"lang": lang, "short": [_sentence(f, ev, lang) for f in SHORT_SENTENCES],
            "answer": [_sentence(f, ev, lang) for f in FULL_SENTENCES],
            "follow_ups": [{"question": render(Word(question), lang), "answer": [_sentence(f, ev, lang)]}
                           for question, f in FOLLOW_UPS],
            "verdict_counts": counts, "preset": report.get("preset"), "seed": report.get("seed")}


def render_text(composed: dict) -> str:
    lang = composed["lang"]
    join = render(GAP, lang).join
    lines = [render(Word("heading.short"), lang), "", join(composed["short"]), "",
             render(Word("heading.full"), lang), "", join(composed["answer"]), ""]
    for i, item in enumerate(composed["follow_ups"], 1):
        lines += [render(Word("heading.follow_up", i=i, question=item["question"]), lang), join(item["answer"]), ""]
    counts = Listing([Word("footer.count", verdict=Word(f"verdict.{v}"), n=n) for v, n in composed["verdict_counts"].items()],
                     sep="list.clause")
    lines.append(render(Word("footer", preset=composed["preset"], seed=composed["seed"], counts=counts), lang))
    return "\n".join(lines)


REPORT_BYTES_LIMIT = 256 * 2**20


def load_report(path: str | Path) -> dict:
    """report.json from a report folder or the file itself; FileNotFoundError / ValueError name what is wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    kind = what_is(path)
    if kind == "missing":
        raise FileNotFoundError(f"no report at {str(path)!r}; run `attnscale report` first (or pass --report)")
    if kind != "a file":
        raise UserError(f"{str(path)!r} is {kind}, not a report.json")
    if path.stat().st_size > REPORT_BYTES_LIMIT:
        raise UserError(f"{str(path)!r} has {path.stat().st_size / 2**20:.0f} MiB; a report.json has a few, at most "
                        f"{REPORT_BYTES_LIMIT // 2**20} MiB accepted")
    try:
        report = jsonfile.read(path, repr(str(path)))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{str(path)!r} is not a report.json: {error}") from None
    except RecursionError:
        raise UserError(f"{str(path)!r} is not a report.json: its JSON is nested too deeply to read") from None
    return check_report(report, repr(str(path)))

