"""The attention doctor: tools that measure what a real model's attention does.

One module per role:

``loading``    a local Hugging Face model folder, offline, never running code it ships
``intercept``  the interception of a model's attention function, under any backend
``probe``      the scale probe: the factor any attention function applies to QK^T
``health``     the health check of a model's attention on a text (``diagnose``)
``figures``    the health check's heatmaps
``audit``      the scale audit of transformers families and model folders, drawing on
               ``families`` (tiny random-init models), ``kernel`` (an attention function's
               factor and soft cap), ``paths`` (the whole path from the projections),
               ``legacy`` (families with inline attention), ``declared`` (what a config
               declares, with its source lines) and ``verdicts``

The names below are the public API (``from attnscale import doctor; doctor.diagnose()``).
"""

from .audit import FamilyAudit, audit_callable, audit_family, audit_folder, audit_model
from .figures import FLAG_MARKS, draw_heatmaps, heatmap_names
from .health import (DEFAULT_COUNTERFACTUALS, DEFAULT_TEXT, Diagnosis, clip_max_tokens, counterfactual_runs, diagnose, encode, position_limit,
                     flag_shares, head_flags, head_stats, layer_heads, summarize_heads, valid_keys)
from .intercept import (AttentionCall, final_hidden, intercept_attention, model_inputs, registered_backends,
                        run_attention, set_attn_implementation)
from .loading import (check_model_dir, check_weights, default_model_path, load_config, load_model,
                      quiet_transformers, refuse_code)
from .probe import (PROBE_TOKENS, ModelProbe, ScaleEstimate, estimate_factor, infer_scale, label_factor, log_ratio,
                    probe_call, probe_model, probe_tensors, summarize_probe)
from .thresholds import THRESHOLDS

__all__ = [
    "AttentionCall", "FamilyAudit", "audit_callable", "audit_family", "audit_folder", "audit_model", "DEFAULT_COUNTERFACTUALS", "DEFAULT_TEXT", "Diagnosis", "FLAG_MARKS", "ModelProbe", "PROBE_TOKENS",
    "ScaleEstimate", "THRESHOLDS", "check_model_dir", "check_weights", "counterfactual_runs", "default_model_path",
    "clip_max_tokens", "diagnose", "draw_heatmaps", "heatmap_names", "encode", "position_limit", "estimate_factor", "final_hidden", "flag_shares", "head_flags", "head_stats",
    "infer_scale", "intercept_attention", "label_factor", "layer_heads", "load_config", "load_model", "log_ratio",
    "model_inputs", "probe_call", "probe_model", "probe_tensors", "quiet_transformers", "refuse_code",
    "registered_backends", "run_attention", "set_attn_implementation", "summarize_heads", "summarize_probe",
    "valid_keys",
]
