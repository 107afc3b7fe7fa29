"""The tables of the doctor lab: the rows worth printing (CLI) or tabulating (report)."""

from __future__ import annotations

from .experiment import mean_trajectory, runs_of


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
        "C14: the flag while training from scratch (recall, mean over seeds)": [
            {"rule": rule, "factor": runs_of(result, rule)[0]["factor"], **check}
            for rule in ("sqrt", result["too_strong"]) for check in mean_trajectory(runs_of(result, rule))],
        "counterfactual: the trained model with its factor replaced": [
            {k: row[k] for k in ("scale", "factor", "entropy_change", "over-smoothed_heads", "saturated_heads",
                                 "token_cosine", "pooled_cosine")} for row in pre["counterfactual"]],
        "flagged heads (trained model, own factor)": pre["flagged_heads"],
    }
