"""The health check: how a real model's attention spreads, per layer and head (``diagnose``).

``health``   the diagnosis of a model's attention on a text, with the scale probe and the
             counterfactual rerun
``figures``  its heatmaps

It is built on the probing code it shares with the scale audit (:mod:`attnscale.probing`,
re-exported here, so ``from attnscale import diagnosis; diagnosis.probe_model(model)`` works); the
audit itself is :mod:`attnscale.audit`.
"""

from ..probing import *  # noqa: F401,F403 - the probing API, part of the health check's
from ..probing import __all__ as _probing
from .figures import FLAG_MARKS, draw_heatmaps, heatmap_names
from .health import (DEFAULT_COUNTERFACTUALS, DEFAULT_TEXT, Diagnosis, clip_max_tokens, counterfactual_runs, diagnose,
                     encode, flag_shares, head_flags, head_stats, layer_heads, position_limit, summarize_heads,
                     valid_keys)

__all__ = [
    *_probing, "DEFAULT_COUNTERFACTUALS", "DEFAULT_TEXT", "Diagnosis", "FLAG_MARKS", "clip_max_tokens",
    "counterfactual_runs", "diagnose", "draw_heatmaps", "encode", "flag_shares", "head_flags", "head_stats",
    "heatmap_names", "layer_heads", "position_limit", "summarize_heads", "valid_keys",
]
