"""What one training run is: :class:`RunSpec`, and how runs group into batches.

A run is (task, rule, init, d_head, n_layers, lr, optimiser, steps, seed, ...).  Runs that
share a *shape* (everything but rule, init, lr, optimiser and seed) can train together as
one program (:mod:`attnscale.train.batched`); :func:`group_specs` forms those groups.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass

from .. import checks, scaling
from ..models.tasks import check_task

# Raised whenever the engine changes what a run computes: stored runs of an older version are not reused.
VERSION = 5  # 3: subnormal floats flushed to zero while training (threads.flushed_denormals); 4: a task scored at
# its last positions (recall) trained on the loss computed there alone (the same loss and gradients up to rounding);
# 5: heads wider than the model batched through their bilinear forms, and runs with a length term batched (were
# trained one at a time on the plain model): the same functions, rounding differs
OPTIMISERS = ("adamw", "sgd", "adafactor")

# Fields a run may differ in from the other runs of its group; every other field is the group's shape.
PER_RUN_FIELDS = ("rule", "init", "lr", "optimiser", "seed")


@dataclass(frozen=True)
class RunSpec:
    """One training run."""

    task: str = "recall"
    rule: str = "sqrt"
    init: str = "unit"
    d_head: int = 16
    n_layers: int = 2
    lr: float = 3e-3
    optimiser: str = "adamw"
    steps: int = 300
    seed: int = 0
    d_model: int = 32
    n_heads: int = 1
    batch_size: int = 64
    log_every: int = 10
    warmup: int = 20
    weight_decay: float = 0.0
    n_pairs: int = 4      # recall
    n_queries: int = 4    # recall
    n_keys: int = 16      # recall
    n_values: int = 16    # recall
    context: int = 32     # shakespeare
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        check_task(self.task)
        scaling.parse(self.rule)
        scaling.check_init(self.init)
        checks.one_of("optimiser", self.optimiser, OPTIMISERS)
        checks.fields(self, ints=("d_head", "n_layers", "steps", "d_model", "n_heads", "batch_size", "log_every",
                                  "n_pairs", "n_queries", "n_keys", "n_values", "context"),
                      floats=("lr",), non_negative=("warmup", "weight_decay"))

    def shape(self) -> tuple:
        """The fields a batch of runs must share."""
        return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in PER_RUN_FIELDS)


def as_spec(spec) -> RunSpec:
    """A RunSpec from a RunSpec or a dict of its fields (validated, defaults filled)."""
    return spec if isinstance(spec, RunSpec) else RunSpec(**dict(spec))


def run_key(spec) -> str:
    """The store key of a run: its fields and the engine's VERSION, hashed."""
    text = json.dumps({"version": VERSION, "spec": dataclasses.asdict(as_spec(spec))}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# A group's tensors grow with K; once they outgrow the CPU's caches every op streams them
# from memory, which costs more than the per-op overhead batching saves.  Measured on 2
# cores, one thread, runs x steps per second of K batched runs over one at a time, d_model
# 32: recall d_head 16 best at K 8-12 (1.38x), d_head 64 at K 4 (1.19x; K 24: 0.98x),
# d_head 256 at K 1 (K 24: 0.63x); Shakespeare d_head 16 at K 4 (1.20x), d_head 64 at
# K 1-4 (0.96-0.97x; K 16: 0.77x).  8 MiB of one layer's activations per group fits these.
GROUP_CACHE_BYTES = 8 << 20


def uses_bilinear(d_head: int, d_model: int, kinds, pos: str = "learned") -> bool:
    """Whether the batched engine computes a group's attention through each head's bilinear forms
    (:mod:`attnscale.train.batched`), given its runs' rule kinds and position scheme: heads wider than
    the model, and neither QK-norm nor RoPE (both act on q and k themselves).  A RunSpec's runs have
    learned positions."""
    return d_head > d_model and "qknorm" not in kinds and pos != "rope"


def head_width(spec: RunSpec, kinds=None) -> int:
    """The width a head of ``spec`` is computed at in the batched engine: d_head, or d_model through its
    bilinear forms.  ``kinds``: the group's rule kinds (default: ``spec``'s)."""
    kinds = [scaling.parse(spec.rule).kind] if kinds is None else kinds
    return spec.d_model if uses_bilinear(spec.d_head, spec.d_model, kinds) else spec.d_head


def shape_cap(spec: RunSpec, cache_bytes: int = GROUP_CACHE_BYTES, kinds=None) -> int:
    """Most runs of this shape worth batching on a CPU: as many as keep one layer's activations
    within ``cache_bytes`` (per token: q, k, v and the attention output, 4 x heads x their
    width, d_head or, through the bilinear forms, d_model; and the residual, norm and MLP
    tensors, about 10 x d_model), and at least one.  ``kinds``: the group's rule kinds (default:
    ``spec``'s).  On a GPU no cap: its kernels want the largest batch that fits."""
    if spec.device != "cpu":
        return sys.maxsize
    element = 8 if spec.dtype == "float64" else 4
    per_token = 4 * spec.n_heads * head_width(spec, kinds) + 10 * spec.d_model
    return max(1, cache_bytes // (spec.batch_size * seq_len(spec) * per_token * element))


def group_specs(specs, max_runs: int = 24, cache_bytes: int | None = GROUP_CACHE_BYTES) -> list[list[RunSpec]]:
    """Split ``specs`` into groups of runs that share a shape: at most ``max_runs`` each, and
    at most :func:`shape_cap` of that shape (``cache_bytes=None``: no such cap).

    A shape's runs are split into as few groups as the cap allows, of sizes that differ by at
    most one (the cap is the shape's: one QK-norm run among them caps every group at the projections'
    width) (25 runs with a cap of 24 make groups of 13 and 12, not 24 and 1: a group of one
    would train alone while another worker idles).  Within a group, runs are ordered by
    optimiser (each optimiser's runs are contiguous), then by their order in ``specs``; groups
    come in order of their first spec.  ``max_runs=1`` gives one run per group.
    """
    max_runs = checks.positive_int("max_runs", max_runs)
    by_shape: dict[tuple, list[RunSpec]] = {}
    for spec in map(as_spec, specs):
        by_shape.setdefault(spec.shape(), []).append(spec)
    groups = []
    for members in by_shape.values():
        members = sorted(members, key=lambda s: OPTIMISERS.index(s.optimiser))
        kinds = [scaling.parse(s.rule).kind for s in members]
        cap = max_runs if cache_bytes is None else min(max_runs, shape_cap(members[0], cache_bytes, kinds))
        groups += split_evenly(members, cap)
    return groups


def split_evenly(items: list, most: int) -> list[list]:
    """``items`` in as few consecutive groups of at most ``most`` as can hold them, of sizes that differ
    by at most one (25 with at most 24: 13 and 12)."""
    count = -(-len(items) // most)
    size, larger = divmod(len(items), max(count, 1))
    groups, start = [], 0
    for i in range(count):
        stop = start + size + (i < larger)
        groups.append(items[start:stop])
        start = stop
    return groups


def seq_len(spec: RunSpec) -> int:
    return 2 * spec.n_pairs + spec.n_queries if spec.task == "recall" else spec.context


def memory_estimate(spec: RunSpec, runs: int = 1) -> int:
    """Bytes that training ``runs`` runs of this shape together needs, roughly and from above:
    weights with their gradients and two optimiser states, and the activations a step keeps
    for its backward pass (training batch) or its statistics (validation batch, dense attention)."""
    width = spec.n_heads * spec.d_head
    vocab = spec.n_keys + spec.n_values if spec.task == "recall" else 256
    time = seq_len(spec)
    per_layer = 4 * spec.d_model * width + 8 * spec.d_model * spec.d_model + 10 * spec.d_model
    params = spec.n_layers * per_layer + (vocab + time) * spec.d_model + (spec.d_model + 1) * vocab
    per_token = spec.n_layers * (16 * spec.d_model + 8 * width + 3 * spec.n_heads * time) + 4 * vocab
    tokens = (spec.batch_size + 128) * time
    element = 8 if spec.dtype == "float64" else 4
    return runs * element * (4 * params + tokens * per_token)
