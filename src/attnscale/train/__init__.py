"""The training engine: what a run is, one run the plain way, and many runs as one program.

* :mod:`.spec`: :class:`RunSpec`, :func:`run_key`, :func:`group_specs` (runs of one shape);
* :mod:`.single`: :func:`train`, one run on :class:`attnscale.models.Transformer` and torch.optim;
* :mod:`.batched`, :mod:`.optim`, :mod:`.group`: :func:`train_group`, K runs of one shape
  with stacked parameters, one forward and backward per step for all of them.

:mod:`attnscale.runs` (sweeps, the run store) and the labs build on this package; it
imports none of them.
"""

from .group import train_group
from .single import attention_stats, build_model, build_optimiser, build_task, evaluate, lr_factor, train
from .spec import OPTIMISERS, VERSION, RunSpec, as_spec, group_specs, run_key

__all__ = ["OPTIMISERS", "VERSION", "RunSpec", "as_spec", "attention_stats", "build_model", "build_optimiser",
           "build_task", "evaluate", "group_specs", "lr_factor", "run_key", "train", "train_group"]
