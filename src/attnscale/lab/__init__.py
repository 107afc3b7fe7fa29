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
training runs, each kept in runs.sqlite, with worker processes of its own) and the claims it
judges.  A lab module may also define ``stored_key() -> str``: what else its stored results
depend on (keyed beside VERSION).
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
    claims: tuple[str, ...]        # the claims its judge() gives findings for
    uses_run_store: bool = False   # run() takes store=RunStore and has worker processes of its own
    probes: tuple[str, ...] = ()   # installed packages whose code it measures: their versions key its stored results

    def module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.name}")

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
    Lab("variance", ("C01", "C02", "C03", "C08", "C15")),
    Lab("saturation", ("C04", "C05", "C06", "C16", "C18")),
    Lab("numerics", ("C11", "C12")),
    Lab("training", ("C05", "C06", "C09", "C10", "C13", "C17", "C18"), uses_run_store=True),
    Lab("doctor", ("C10", "C14"), probes=("transformers",)),
    Lab("history", ("C07", "C10", "C13"), probes=("transformers",)),  # released code from a pinned cache, and today's
    Lab("length", ("L1", "L2", "L3", "L4")),  # statements beyond the source: long contexts
    Lab("audit", (), probes=("transformers",)),  # no claim: its findings are its tables
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
