"""The history lab: claims about what others wrote (C07, C10, C13), checked against their released code.

The old releases come from a hash-pinned cache of the project's own (:mod:`attnscale.history`,
filled by ``attnscale history --fetch``, which set-up runs); nothing is installed.

* :mod:`.experiment`: the config and the run: every release's scale statement read by pattern,
  and the PyTorch ones run in a subprocess at two head sizes;
* :mod:`.verdicts`: the part readings of C07, C10 and C13, with their thresholds;
* :mod:`.tables`: the factor through history, one row per release.
"""

from __future__ import annotations

from .experiment import PRESETS, VERSION, Config, run, stored_key, unrepeatable
from .tables import tables
from .verdicts import NUMBER_KEYS, VASWANI_2017, judge, judge_c07, judge_c10, judge_c13


def figures(result: dict, outdir) -> dict[str, list[str]]:
    """No figures: the history is a table (:func:`tables`)."""
    return {}


__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS", "stored_key", "unrepeatable",
           "VASWANI_2017", "judge_c07", "judge_c10", "judge_c13"]
