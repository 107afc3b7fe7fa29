"""The training lab: small Transformers trained under sqrt(d_k), d_k, no scaling and a constant.

* :mod:`.experiment`: the config, the runs (grid, deep, t5), the baselines, seeds folded into
  cells, the learning-rate grids that widen;
* :mod:`.verdicts`: the rules for C05, C06, C07, C09, C10, C13, C17, C18, with their thresholds;
* :mod:`.figures`: median-and-band figures;
* :mod:`.tables`: the rows the CLI prints and the report tabulates.
"""

from __future__ import annotations

from .experiment import PRESETS, VERSION, Config, run, stored_key
from .figures import figures
from .tables import tables
from .verdicts import EQUIVALENT_LOGITS, NUMBER_KEYS, judge

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "EQUIVALENT_LOGITS", "NUMBER_KEYS",
           "stored_key"]
