"""The numerics lab: does FP16/BF16 make attention overflow, and what really prevents it? (C11, C12)

* :mod:`.experiment`: the config and the six measurements: each dtype's limits, logit ranges,
  the implementations in low precision against float64, what clamping costs, a trained model's
  q and k, and the memory of dense vs tiled attention;
* :mod:`.verdicts`: the rules for C11 and C12, with their thresholds;
* :mod:`.figures`: the logit range, the non-finite shares per implementation, the error ratios.
* :mod:`.tables`: the rows the CLI prints and the report tabulates.
"""

from __future__ import annotations

from .experiment import (PRESETS, VERSION, Config, accept, attend, clamp_cost, clamped_attention, error_row,
                         exact_attention, impl_names, plain_attention, run, tiled_naive_attention)
from .figures import figures
from .tables import tables
from .verdicts import (CLAMP_COSTS, KL_CHEAP, MEMORY_SAVED, NUMBER_KEYS, RANGE_REACHED, RARE_ROWS, WRONG_OUTPUT, judge, judge_c11,
                       claim_setting_rows, judge_c12, real_code_failures, realistic_scenarios, trained_summary)

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "CLAMP_COSTS", "KL_CHEAP", "MEMORY_SAVED", "RANGE_REACHED", "RARE_ROWS", "WRONG_OUTPUT", "judge_c11", "judge_c12",
           "claim_setting_rows", "real_code_failures", "realistic_scenarios", "trained_summary",
           "accept", "attend", "clamp_cost", "clamped_attention", "error_row", "exact_attention", "impl_names",
           "plain_attention", "tiled_naive_attention"]
