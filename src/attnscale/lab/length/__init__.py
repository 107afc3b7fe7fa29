"""The length lab: how attention fades as the context grows, and what a length term does (L1-L4).

* :mod:`.experiment`: the config and the run: a needle's weight and attention's entropy against the
  number of keys at initialisation (exact, closed form, Monte Carlo), and one-layer models trained on
  needles in a haystack at one length and run at up to 16x it;
* :mod:`.verdicts`: the part readings of the statements beyond the source, with their thresholds;
* :mod:`.tables` and :mod:`.figures`: the trained table (rule x test length) and the fading curves.
"""

from __future__ import annotations

from .experiment import PRESETS, VERSION, Config, run
from .figures import figures
from .tables import tables
from .verdicts import NUMBER_KEYS, judge

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS"]
