"""The variance lab: how big is q.k, and what does each scale rule leave of it?

Claims C01, C02, C03, C08 and C15 of the source, by Monte Carlo against closed forms.

* :mod:`.experiment`: the config, Var(q.k) streamed across d_k and distributions against the
  closed forms, what common initialisations give, x * (1/sqrt(d_k)) vs x / sqrt(d_k) bitwise,
  small d_k with and without the factor;
* :mod:`.verdicts`: the rules for C01, C02, C03, C08, C15, with their thresholds;
* :mod:`.figures`: the figures, one set per claim.
* :mod:`.tables`: the rows the CLI prints and the report tabulates.
"""

from __future__ import annotations

from .experiment import (FAMILIES, PRESETS, VERSION, Z95, Config, Moments, exact_moments, independent_moments,
                         measure_dot, run, samples_for, ulp_distance)
from .figures import figures
from .tables import tables
from .verdicts import (INDEPENDENT_UNIT, NUMBER_KEYS, SMALL_TV_RATIO, judge, judge_c01, judge_c02,
                       judge_c03, judge_c08, judge_c15)

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "FAMILIES", "INDEPENDENT_UNIT", "Z95", "SMALL_TV_RATIO", "Moments", "exact_moments",
           "independent_moments", "measure_dot", "samples_for", "ulp_distance",
           "judge_c01", "judge_c02", "judge_c03", "judge_c08", "judge_c15"]
