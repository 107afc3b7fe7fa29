"""The probing code the health check (:mod:`attnscale.diagnosis`) and the scale audit
(:mod:`attnscale.audit`) share:

``loading``     a local Hugging Face model folder, offline, never running code it ships
``intercept``   the interception of a model's attention function, under any backend
``probe``       the scale probe: the factor any attention function applies to QK^T
``thresholds``  the stated thresholds the probe and the health check compare with
"""

from .intercept import (AttentionCall, final_hidden, intercept_attention, model_inputs, registered_backends,
                        run_attention, set_attn_implementation)
from .loading import (check_model_dir, check_weights, default_model_path, load_config, load_model,
                      quiet_transformers, refuse_code)
from .probe import (NO_SCALING, PROBE_TOKENS, ModelProbe, ScaleEstimate, estimate_factor, infer_scale, label_factor,
                    log_ratio, probe_call, probe_model, probe_tensors, summarize_probe)
from .thresholds import THRESHOLDS

__all__ = [
    "AttentionCall", "NO_SCALING", "PROBE_TOKENS", "ModelProbe", "ScaleEstimate", "THRESHOLDS", "check_model_dir",
    "check_weights", "default_model_path", "estimate_factor", "final_hidden", "infer_scale", "intercept_attention",
    "label_factor", "load_config", "load_model", "log_ratio", "model_inputs", "probe_call", "probe_model",
    "probe_tensors", "quiet_transformers", "refuse_code", "registered_backends", "run_attention",
    "set_attn_implementation", "summarize_probe",
]
