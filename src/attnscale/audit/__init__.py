"""The scale audit: the factor every attention layer of a transformers family or model folder
applies, under each backend, measured and compared with what its config declares.

``pipeline``            from a target to its report: plan, audit each item (in order or over workers), compose, report
``record``              one record per audited model (FamilyAudit); its status, skip kind and mechanisms as values
``measure``             one model: build, read and declare (a family, a folder, a callable)
``feed``                the inputs that run one model, found once and kept on its Feeding record (what it reads
                        beside its main input, time series and trajectories included)
``composite``           a composite's logic: its towers as rows, the composite built whole, a folder's towers, and
                        composites settled from finished records, as new records (covered, or skipped with why)
``towers``              which row reads the attention a composite's towers run
``qk_norm``             the logit of a cosine-1 pair a config declares under QK-norm (multipliers as data)
``families``            the installed transformers' model types, as tiny random-init models
``sizes``               the tiny sizes by standard field name, the fallbacks and retries
``known``               what the audit knows of particular families: one FamilyEntry a family, in one registry
``attention_function``  what an attention function does to q.k: factor, soft cap, sinks
``whole_path``          the whole path, from the q and k projections to the product
``inline``              families that compute attention inline (no function to intercept)
``declared``            what a config declares, with the source lines of each rule (FACTOR_RULES, MODIFIERS)
``positions``           the families whose factor grows with the query's position, measured at far positions
``position_rules``      their formulas, read from the configs, and the record of one such family
``verdicts``            what disagrees with the config, what differs between backends; table rows

It shares the probing code with the health check (:mod:`attnscale.probing`).
"""

from .measure import CallableAudit, audit_callable, audit_family, audit_folder, audit_model
from .record import FamilyAudit

__all__ = ["CallableAudit", "FamilyAudit", "audit_callable", "audit_family", "audit_folder", "audit_model"]
