"""The tables of the saturation lab: the rows worth printing (CLI) or tabulating (report)."""

from __future__ import annotations

from .verdicts import reference_n


def tables(result: dict) -> dict[str, list[dict]]:
    n = reference_n(result)
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
