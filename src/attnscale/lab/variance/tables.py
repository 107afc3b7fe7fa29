"""The tables of the variance lab: the rows worth printing (CLI) or tabulating (report)."""

from __future__ import annotations




def tables(result: dict) -> dict[str, list[dict]]:
    dot = [{k: r[k] for k in ("family", "d_k", "samples", "mean", "exact_mean", "var", "var_lo", "var_hi", "exact_var",
                              "std", "std_sqrt", "std_inv_d", "beyond_3std", "beyond_abs3")} for r in result["dot"]]
    ulp = [{"dtype": name, "way": way, **{k: w[k] for k in ("share_differ", "max_ulp", "dks_with_difference",
                                                              "identical_dks_count", "mul_exact_share", "div_exact_share")}}
           for name, d in result["ulp"].items() for way, w in d.items()]
    return {
        "q.k moments vs closed form (C02, C03)": dot,
        "q component variance by initialisation (C01)": result["init"],
        "x * (1/sqrt(d_k)) vs x / sqrt(d_k) (C08)": ulp,
        "small d_k with and without the factor (C15)": result["small_dk"],
    }
