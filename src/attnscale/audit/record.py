"""One record per audited model: what was built, fed, read, declared and judged of it.

The stages fill a :class:`FamilyAudit` in turn (:mod:`.measure` builds, feeds, reads and declares; :mod:`.verdicts`
judges); :mod:`.composite` then settles composites from finished records into new ones, and :mod:`.pipeline` reports
them.  ``status`` and ``skip`` are enums, so that no stage reads another's reason text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum


class Status(StrEnum):
    AUDITED = "audited"  # built and run: its verdict says what was read
    SKIPPED = "skipped"  # not measured: its reason says why
    COVERED = "covered"  # a composite whose towers are measured as rows of their own


class SkipKind(StrEnum):
    """Why a skipped record has nothing to measure (empty for every other record)."""

    NONE = ""
    NO_ATTENTION = "no attention module"
    NO_SOFTMAX = "no softmax over q.k"


class AuditVerdict(StrEnum):
    """A record's verdict (apart from the claims' labels): see docs/audit.md, "What the verdicts mean"."""

    OK = "ok"                                      # every attention module measured, each as its config declares
    MISMATCH = "mismatch"                          # a factor, cap or temperature the config does not declare
    BACKEND_DISAGREEMENT = "backend disagreement"  # a backend applies another factor, cap or mask than eager
    INCOMPLETE = "incomplete"                      # what was measured matches, but some attention module was not
    NOT_MEASURED = "not measured"
    COVERED = "covered by its towers"              # a composite whose towers are measured as rows of their own


class MechanismKind(StrEnum):
    """What kind of thing an attention module that no row reads is (see :class:`Mechanism`)."""

    NOT_INTERCEPTED = "not intercepted"  # nothing recognised: no reading reached it
    NO_FACTOR = "no factor"              # recognised in its code, with no softmax over q.k: nothing to scale
    UNREAD = "unread"                    # recognised in its code, with a softmax the audit cannot read here


class Mechanism(str):
    """What an attention module no row reads computes, as audit.json says it (a string), with its
    :class:`MechanismKind` as a value: no stage reads the kind from the text."""

    kind: MechanismKind

    def __new__(cls, text: str, kind: MechanismKind):
        mechanism = super().__new__(cls, text)
        mechanism.kind = MechanismKind(kind)
        return mechanism

    def __reduce__(self):  # copies keep the kind
        return (Mechanism, (str(self), self.kind))


NOT_INTERCEPTED = Mechanism("not intercepted", MechanismKind.NOT_INTERCEPTED)
NO_FACTOR = ", so no factor"  # how the text of a mechanism with no softmax over q.k ends, in audit.json


def no_factor(text: str) -> Mechanism:
    """A mechanism with no softmax over q.k (RWKV's recurrence, YOSO's hashing, ...): nothing to scale."""
    return Mechanism(text + NO_FACTOR, MechanismKind.NO_FACTOR)


def kind_of(module: dict) -> MechanismKind | None:
    """The kind of an unread attention module's mechanism (None for a text that carries none)."""
    mechanism = module.get("mechanism")
    return MechanismKind.NOT_INTERCEPTED if mechanism == NOT_INTERCEPTED else getattr(mechanism, "kind", None)


def is_intercepted_nowhere(module: dict) -> bool:
    """An attention module no reading reached and nothing in its code names (its mechanism is
    :data:`NOT_INTERCEPTED`)."""
    return kind_of(module) == MechanismKind.NOT_INTERCEPTED


def mechanism_name(module: dict) -> str:
    """What its mechanism is called: the words before its colon ("WKV recurrence (RWKV)")."""
    return module["mechanism"].split(":")[0]


NOT_MEASURED = AuditVerdict.NOT_MEASURED
COVERED = AuditVerdict.COVERED
FAILING = (AuditVerdict.MISMATCH, AuditVerdict.BACKEND_DISAGREEMENT)  # what an exit code 1 stands for


@dataclass(frozen=True)
class BackendLayer:
    """One layer read under one backend: its attention function's reading (factor, non-linearity, cap, sink), its
    whole path's (None where not read) and the query rows its mask blocks at every key (None where none)."""

    function: dict
    path: dict | None = None
    rows_masked_everywhere: list | None = None

    def to_dict(self) -> dict:
        masked = {"rows_masked_everywhere": self.rows_masked_everywhere} if self.rows_masked_everywhere else {}
        return {"function": self.function, "path": self.path, **masked}


@dataclass(frozen=True)
class LayerReading:
    """One attention layer of a model, read: its name and index, d_k, what its config declares (decided before the
    reading is made, cosine logit and caps included), each backend's :class:`BackendLayer`, where its class is
    defined (none for a layer read from its weights, ``from_weights``), and, where its whole path was not read, why
    (``path_missing``) and its own q and k (``inputs``)."""

    name: str
    layer: int
    d_k: int
    declared: dict
    backends: dict
    source: str | None = None
    path_missing: str | None = None
    inputs: dict | None = None
    from_weights: bool = False  # an inline attention read from its weights (:mod:`.inline`): no class location

    def to_dict(self) -> dict:
        source = {} if self.from_weights else {"source": self.source}
        optional = {key: value for key, value in (("path_missing", self.path_missing), ("inputs", self.inputs))
                    if value is not None}
        return {"name": self.name, "layer": self.layer, "d_k": self.d_k, "declared": self.declared,
                "backends": {backend: entry.to_dict() for backend, entry in self.backends.items()}, **source, **optional}


@dataclass(frozen=True)
class Readings:
    """What reading one model found, before it is judged (:func:`.verdicts.judge`): each backend's pass, the layers
    read (per layer and backend), the source lines that set the factor, and the attention modules no layer read."""

    family: str
    model_class: str
    backends: dict
    layers: list = field(default_factory=list)
    source_lines: list = field(default_factory=list)
    unread_attention: list = field(default_factory=list)


@dataclass(frozen=True)
class FamilyAudit:
    """One model's audit, made once (a stage that settles more makes a new one with :func:`dataclasses.replace`)."""

    family: str
    model_class: str = ""
    status: Status = Status.AUDITED
    reason: str = ""
    seconds: float = 0.0
    backends: dict = field(default_factory=dict)  # backend -> {"accepted", "reason", "parity"}
    layers: list = field(default_factory=list)
    verdict: AuditVerdict = NOT_MEASURED
    findings: list = field(default_factory=list)
    source_lines: list = field(default_factory=list)
    towers: list = field(default_factory=list)        # a composite's towers: name, model type, own family or not
    own_attention: list = field(default_factory=list)  # attention classes a composite runs outside its towers
    tower_of: str = ""  # a tower row: the composite it belongs to (not a family of its own)
    unread_attention: list = field(default_factory=list)  # attention modules no row reads, with what they compute
    # a composite built whole, or audited on token ids its towers never see: the tower rows whose attention it
    # left unread (measured there, or it is not measured)
    relies_on: list = field(default_factory=list)
    skip: SkipKind = SkipKind.NONE  # kept out of audit.json: its reason says it in words
    # a folder of a family whose factor moves with the query's position: that factor at far positions, judged
    # against the folder's own config (:func:`.positions.folder_row`)
    far_positions: dict = field(default_factory=dict)

    def __post_init__(self):  # enums from their values, as replace() and callers may pass them
        for name, kind in (("status", Status), ("skip", SkipKind), ("verdict", AuditVerdict)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    def to_dict(self) -> dict:
        return {f.name: [layer.to_dict() for layer in self.layers] if f.name == "layers" else getattr(self, f.name)
                for f in fields(self) if f.name != "skip"}


def is_measured(record: FamilyAudit) -> bool:
    return record.status == Status.AUDITED and record.verdict != NOT_MEASURED


def unread_here(unread_attention: list[dict]) -> list[dict]:
    """The attention modules of a row "not intercepted" that no row reads: not its own row reading the
    same class, nor a tower's row it relies on (``read_by``; :func:`.composite.settled` keeps the row
    measured only where that row is measured with nothing left)."""
    return [u for u in unread_attention if is_intercepted_nowhere(u) and not u.get("read_by")]


def unmeasured_here(unread_attention: list[dict]) -> list[dict]:
    """The attention modules of a row that no row measures: those :func:`unread_here` names, and those whose code
    shows a softmax over q.k the audit cannot read here (Informer's ProbSparse rows drawn at random)."""
    return [*unread_here(unread_attention),
            *(u for u in unread_attention if kind_of(u) == MechanismKind.UNREAD and not u.get("read_by"))]


def partly_read(record: FamilyAudit) -> bool:
    """A family counted measured that leaves some attention module unmeasured (named in its other mechanisms)."""
    return is_measured(record) and bool(unmeasured_here(record.unread_attention))
