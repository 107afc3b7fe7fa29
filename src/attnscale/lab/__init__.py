"""The experiments, one module per lab.  Every lab module provides:

``VERSION``
    an int, raised whenever the lab's code changes what it measures (stored results of an
    older version are not reused).
``Config``
    a frozen dataclass of everything the run depends on, with ``seed`` and ``device``
    fields and defaults that run on 2 CPU cores in seconds.
``PRESETS``
    ``{"quick": Config(...), "full": Config(...)}``.
``run(config, progress=None) -> dict``
    the experiment.  Returns plain JSON-able data (lists of row dicts, numbers); never
    prints or writes files.  ``progress(done_fraction, message)`` may be called as it goes.
``judge(result) -> dict[claim_id, attnscale.claims.Finding]``
    the verdict rules for the claims this lab tests, computed from ``result`` alone; every
    verdict a rule can give must be reachable from a plausible measurement.
``NUMBER_KEYS``
    ``{claim_id: (key, ...)}``: the names of the numbers each finding carries (``name*`` for a
    family of keys with that prefix); the report and :mod:`attnscale.answer` read only these.
``tables(result) -> dict[title, list[dict]]``
    the rows worth printing (CLI) or tabulating (report).
``figures(result, outdir) -> dict[key, list[str]]``
    draws Matplotlib figures into ``outdir`` and returns their paths relative to it,
    keyed by claim ID (or by the lab's name for figures that belong to no single claim).

Data flows one way: config -> run -> result -> judge/tables/figures.

:data:`REGISTRY` names every lab with what the report must know of it before importing it:
whether its ``run`` takes a run store (``run(config, progress, store=RunStore)``: a lab of many
training runs, each kept in runs.sqlite, with worker processes of its own); the claims it judges
are those whose parts name it (:func:`attnscale.claims.claims_of_lab`).  A lab module may also
define ``stored_key() -> str``: what else its stored results depend on (keyed beside VERSION), and
``unrepeatable(result) -> str``: why a result made under a broken environment (a probe that failed) must
not be stored for reuse ("" when it may be).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

from ..errors import UserError

PRESET_NAMES = ("quick", "full")


@dataclasses.dataclass(frozen=True)
class Lab:
    """One lab: its module is ``attnscale.lab.<name>`` (see the protocol above)."""

    name: str
    uses_run_store: bool = False   # run() takes store=RunStore and has worker processes of its own
    probes: tuple[str, ...] = ()   # installed packages whose code it measures: their versions key its stored results

    @property
    def claims(self) -> tuple[str, ...]:
        """The claims its judge() gives findings for: those with a part that names this lab (declared once, on
        the parts in :mod:`attnscale.claims`)."""
        from ..claims import claims_of_lab

        return claims_of_lab(self.name)

    def module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.name}")

    def unrepeatable(self, result: dict) -> str:
        """Why ``result`` must not be stored for reuse ("" when it may be): see the protocol above."""
        module = self.module()
        return module.unrepeatable(result) if hasattr(module, "unrepeatable") else ""

    def stored_version(self) -> int | str:
        """What keys its stored results besides the config: VERSION, plus each probed package's
        version (a result measured on another transformers release is not reused)."""
        from importlib.metadata import version

        module = self.module()
        extra = [f"{package}-{version(package)}" for package in self.probes]
        if hasattr(module, "stored_key"):  # what else it reads (the history lab: which releases the cache holds)
            extra.append(module.stored_key())
        return "+".join([str(module.VERSION), *extra]) if extra else module.VERSION


REGISTRY = {lab.name: lab for lab in (
    Lab("variance"),
    Lab("saturation"),
    Lab("numerics"),
    Lab("training", uses_run_store=True),
    Lab("doctor", probes=("transformers",)),
    Lab("history", probes=("transformers",)),  # released code from a pinned cache, and today's
    Lab("length"),  # statements beyond the source: long contexts
    Lab("audit", probes=("transformers",)),  # no claim: its findings are its tables
)}
LABS = tuple(REGISTRY)


class Ticker:
    """Counts a run's finished steps and reports the fraction done to ``progress`` (if any)."""

    def __init__(self, progress, steps: int):
        self.progress, self.steps, self.done = progress, steps, 0

    def __call__(self, message: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done / self.steps, message)


def run_in_one_thread(check_config, measure, config, progress=None) -> dict:
    """The ``run`` of a lab that measures in this process: ``check_config`` (which returns the config, normalised)
    before any work, then ``measure(config, progress)`` with torch on one thread, so that a side lab beside the
    training lab's workers takes one core (:func:`attnscale.threads.torch_threads`)."""
    from ..threads import torch_threads

    config = check_config(config)
    with torch_threads(1):
        return measure(config, progress)


def load(name: str) -> ModuleType:
    if name not in REGISTRY:
        raise UserError(f"unknown lab {name!r}; accepted: {', '.join(LABS)}")
    return REGISTRY[name].module()


def config_for(name: str, preset: str = "quick", **overrides):
    """The lab's preset config with ``overrides`` (e.g. seed, device) applied."""
    from ..runtime import check_seed

    lab = load(name)
    if preset not in lab.PRESETS:
        raise UserError(f"unknown preset {preset!r} for lab {name}; accepted: {', '.join(lab.PRESETS)}")
    if "seed" in overrides:
        check_seed(overrides["seed"])
    return dataclasses.replace(lab.PRESETS[preset], **overrides)
