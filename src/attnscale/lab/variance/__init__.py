"""The variance lab: how big is q.k, and what does each scale rule leave of it?

Claims C01, C02, C03, C08 and C15 of the source, by Monte Carlo against closed forms.

* :mod:`.experiment`: the config, Var(q.k) streamed across d_k and distributions against the
  closed forms, what common initialisations give, x * (1/sqrt(d_k)) vs x / sqrt(d_k) bitwise,
  small d_k with and without the factor;
* :mod:`.verdicts`: the rules for C01, C02, C03, C08, C15, with their thresholds;
* :mod:`.figures`: the figures, one set per claim.
"""

from __future__ import annotations

from .experiment import (FAMILIES, PRESETS, VERSION, Z95, Config, Moments, exact_moments, independent_moments,
                         measure_dot, run, samples_for, ulp_distance)
from .figures import figures
from .verdicts import (INDEPENDENT_UNIT, NUMBER_KEYS, SMALL_TV, SMALL_TV_RATIO, judge, judge_c01, judge_c02,
                       judge_c03, judge_c08, judge_c15)

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "FAMILIES", "INDEPENDENT_UNIT", "Z95", "SMALL_TV", "SMALL_TV_RATIO", "Moments", "exact_moments",
           "independent_moments", "measure_dot", "samples_for", "ulp_distance",
           "judge_c01", "judge_c02", "judge_c03", "judge_c08", "judge_c15"]


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
