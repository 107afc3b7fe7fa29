"""The scale audit: the factor every attention layer of a transformers family or model folder
applies, under each backend, measured and compared with what its config declares.

``measure``             planning and measuring: a family, a folder, a callable; the worker pool
``composite_rows``      a composite's rows: its towers, the composite built whole, what a row relies on
``families``            the installed transformers' model types, as tiny random-init models
``sizes``               the tiny sizes, and the fields some families need beside them (with why)
``companions``          what a model reads beside its main input (boxes, region features, prompts)
``series``              time series and trajectories, fed to forecasters and Decision Transformer
``attention_function``  what an attention function does to q.k: factor, soft cap, sinks
``whole_path``          the whole path, from the q and k projections to the product
``inline``              families that compute attention inline (no function to intercept)
``declared``            what a config declares, with the source lines of each rule
``verdicts``            what disagrees with the config, what differs between backends; table rows

It shares the probing code with the health check (:mod:`attnscale.probing`).
"""

from .measure import CallableAudit, FamilyAudit, audit_callable, audit_family, audit_folder, audit_model

__all__ = ["CallableAudit", "FamilyAudit", "audit_callable", "audit_family", "audit_folder", "audit_model"]
