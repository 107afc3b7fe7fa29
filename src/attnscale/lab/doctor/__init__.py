"""The doctor lab: claims about real code (C10, C13) and the source's 1/n diagnostic (C14).

Everything here runs the installed ``transformers`` code; nothing is downloaded.

* :mod:`.experiment`: the config, the scale probe of small random-init BERT, GPT-2, T5 and Llama
  models, T5's logits at initialisation, the pretrained model diagnosed at its own factor and with
  it replaced, and two small decoders trained from scratch with the correct and a too-strong factor;
* :mod:`.verdicts`: the rules for C10, C13, C14, with their thresholds;
* :mod:`.figures`: the figures, per claim, and the counterfactual.
"""

from __future__ import annotations

from .experiment import PRESETS, VERSION, Config, random_model, run
from .figures import figures
from .verdicts import NUMBER_KEYS, judge, judge_c10, judge_c13, judge_c14

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "random_model", "judge_c10", "judge_c13", "judge_c14"]


def tables(result: dict) -> dict[str, list[dict]]:
    pre = result["pretrained"]
    return {
        "scale probe (installed transformers, random init)": [
            {k: row[k] for k in ("model", "transformers_class", "layers", "d_k", "factor_min", "factor_max",
                                 "expected", "finding")} for row in result["probe"]],
        "C10: logits at initialisation": [
            {k: row[k] for k in ("model", "factor", "d_k", "logit_std", "logit_max_abs", "wq_wk_std_ratio")}
            for row in result["init"]],
        "C14: near-uniform heads": [
            {k: row[k] for k in ("condition", "factor", "over_smoothed_heads", "saturated_heads", "normalized_entropy")}
            for row in pre["conditions"]],
        "C14: the flag while training from scratch (recall)": [
            {"rule": run["rule"], "factor": run["factor"], **check} for run in result["scratch"]["runs"]
            for check in run["trajectory"]],
        "counterfactual: the trained model with its factor replaced": [
            {k: row[k] for k in ("scale", "factor", "entropy_change", "over-smoothed_heads", "saturated_heads",
                                 "token_cosine", "pooled_cosine")} for row in pre["counterfactual"]],
        "flagged heads (trained model, own factor)": pre["flagged_heads"],
    }
