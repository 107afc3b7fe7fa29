"""The saturation lab: what each scale factor does to the softmax, its Jacobian and the gradient.

Claims C04, C05 and C06 (their saturation half: the training lab has the rest), C16, and the
part of C18 that needs no training.

* :mod:`.experiment`: the config, softmax rows across the factor d_k^-A (and one constant),
  the gradient that reaches W_q, the softmax derivative;
* :mod:`.verdicts`: the rules for C04, C05, C06, C16, C18, with their thresholds;
* :mod:`.figures`: the figures, one set per claim.
* :mod:`.tables`: the rows the CLI prints and the report tabulates.
"""

from __future__ import annotations

from .experiment import (PRESETS, VERSION, Config, derivative_at, fit_slope, gradient_to_wq, row_stats, run,
                         sample_rows, softmax_row_stats, zero_slope_exponent)
from .figures import figures
from .tables import tables
from .verdicts import NUMBER_KEYS, judge, judge_c04, judge_c05, judge_c06, judge_c16, judge_c18

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "derivative_at", "fit_slope", "gradient_to_wq", "row_stats", "sample_rows", "softmax_row_stats",
           "zero_slope_exponent", "judge_c04", "judge_c05", "judge_c06", "judge_c16", "judge_c18"]
