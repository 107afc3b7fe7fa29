"""The claims registry: claim -> its parts -> the labs that read them -> one label by one rule.

The 18 claims come from the source (an interview answer, in Chinese).  Each claim is split into
the parts its sentence makes, and only those (:class:`Part`), each with a role:

* ``assertion``: what the claim says happens (C05's "fundamentally unusable");
* ``premise``: what the claim's argument starts from (C05's "near uniform at initialisation");
* ``side remark``: a remark beside the point (C10's "cheaper on TPUs");
* ``derivation``: a step that follows from arithmetic (a closed form at initialisation, L1-L3):
  shown with its numbers, never a vote, since it could not have come out otherwise.

Each part is read by one lab, at the claim's own setting (its d_k, its premise, its learning
rate), as a rate or a number with its interval against a named threshold: the lab's
``judge(result)`` returns a :class:`Finding` per claim holding one :class:`Reading` per part it
reads (holds, fails, holds in part, undecided, not tested in this preset, not testable here).  A
measurement at another setting is context in the evidence text, never a vote.  :func:`label`
then turns a claim's readings into its label, the same way for every lab:

* supported: every assertion holds (a premise or side remark that fails makes it partly);
* refuted: every assertion fails where it was tested (the label names what held: "refuted (its
  premise holds: ...)");
* partly supported: an assertion holds in some tested settings and fails in others, or one
  assertion holds while another (or a premise, or a side remark) fails; the label names what fails;
* inconclusive: an undecided assertion, or one not tested in this preset, could still turn the label
  either way (the label names it, the reading says what would decide it): untested is not supported;
* not tested in this preset / not testable here: no assertion was tested.

Every reading that compares with a threshold also gives its state with that threshold moved 20%
each way; :func:`margins` says where such a move would change the label.

Each lab module declares the numbers its findings carry in ``NUMBER_KEYS`` (claim ID -> key
names; a name ending in ``*`` stands for a family of keys with that prefix), and
:mod:`attnscale.answer` declares the numbers it reads; :func:`undeclared_numbers` and
:func:`key_declared` let the tests hold the two to each other.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

# labels
SUPPORTED = "supported"
PARTLY = "partly supported"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
NOT_IN_PRESET = "not tested in this preset"
NOT_TESTABLE = "not testable here"
PENDING = "pending"
VERDICTS = (SUPPORTED, PARTLY, REFUTED, INCONCLUSIVE, NOT_IN_PRESET, NOT_TESTABLE)

# roles of a part
ASSERTION, PREMISE, SIDE, DERIVATION = "assertion", "premise", "side remark", "derivation"
ROLES = (ASSERTION, PREMISE, SIDE, DERIVATION)

# states of a part as read
HOLDS, FAILS, MIXED, UNDECIDED = "holds", "fails", "holds in part", "undecided"
STATES = (HOLDS, FAILS, MIXED, UNDECIDED, NOT_IN_PRESET, NOT_TESTABLE, PENDING)
TESTED = (HOLDS, FAILS, MIXED, UNDECIDED)
MOVES = (0.8, 1.2)  # a threshold moved 20% each way: the margin every deciding threshold states


@dataclass(frozen=True)
class Part:
    """One part of a claim's sentence, the lab that reads it and the setting it is read at."""

    key: str
    text: str
    role: str
    lab: str
    setting: str = ""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; accepted: {', '.join(ROLES)}")


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    text: str
    source: str     # the interview answer's own sentence (Chinese); empty for a statement beyond it
    parts: tuple[Part, ...]

    @property
    def labs(self) -> tuple[str, ...]:
        """The labs that read its parts, in the order the parts are declared."""
        return tuple(dict.fromkeys(p.lab for p in self.parts))

    def part(self, key: str) -> Part:
        for p in self.parts:
            if p.key == key:
                return p
        raise KeyError(f"{self.id} has no part {key!r}; its parts: {', '.join(p.key for p in self.parts)}")

    def parts_of(self, lab: str) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.lab == lab)


def state_of(decided: bool | None, negate: bool = False) -> str:
    """A part decided on its interval: True holds, False fails, None undecided; with ``negate`` the
    part is the opposite of what was decided ("never overflows" from "overflows")."""
    if negate and decided is not None:
        decided = not decided
    return HOLDS if decided is True else FAILS if decided is False else UNDECIDED


def over_settings(states) -> str:
    """One state from a part's states at several settings (d_k, cells, models, readings): holds or
    fails where every setting agrees; holds in part where one holds and another fails (or one holds
    in part); undecided otherwise (an undecided setting could still make it either)."""
    states = [s for s in states if s in TESTED]
    if not states:
        return UNDECIDED
    if MIXED in states or (HOLDS in states and FAILS in states):
        return MIXED
    if all(s == HOLDS for s in states):
        return HOLDS
    if all(s == FAILS for s in states):
        return FAILS
    return UNDECIDED


def all_of(states) -> str:
    """One state from the states of the conjuncts of one assertion ("A, and B"): fails where any conjunct fails
    (or holds only in part), holds where every one holds, undecided otherwise.  Unlike :func:`over_settings`, a
    conjunct that fails is not outweighed by one that holds: "A and B" with B false is false, not true in part."""
    states = [s for s in states if s in TESTED]
    if not states:
        return UNDECIDED
    if FAILS in states or MIXED in states:
        return FAILS
    return HOLDS if all(s == HOLDS for s in states) else UNDECIDED


def could_be(states, aggregate=None) -> list[str]:
    """What a part aggregated from ``states`` (by ``aggregate``, :func:`over_settings` by default)
    could still turn out to be, each undecided state turning either way; [] where none is undecided."""
    aggregate = aggregate or over_settings
    states = list(states)
    open_ = [i for i, s in enumerate(states) if s == UNDECIDED]
    if not open_ or len(open_) > 12:
        return []
    found = set()
    for resolution in itertools.product((HOLDS, FAILS), repeat=len(open_)):
        turned = list(states)
        for i, state in zip(open_, resolution):
            turned[i] = state
        found.add(aggregate(turned))
    return [s for s in STATES if s in found]


@dataclass
class Reading:
    """One part as a lab measured it.

    ``measured``: the number with its interval (text); ``threshold``: what it is compared with;
    ``settings``: [{"where", "state", "measured"}] where the part is read at several settings;
    ``moved``: {"0.8": state, "1.2": state}, the part's state with its thresholds moved 20% down
    and up (absent where no threshold decides it, e.g. a recorded fact); ``decide``: for an
    undecided part, what would decide it; ``note``: why a part was not tested; ``could_be``: for an
    undecided part read at several settings, the states it could still turn out to be (by default
    it could hold or fail); ``direction``: which way the measurement lies from what the part says
    ("15x larger, not near 0"), named where the part fails.
    """

    state: str
    measured: str = ""
    threshold: str = ""
    settings: list[dict] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)
    decide: str = ""
    note: str = ""
    could_be: list[str] = field(default_factory=list)
    direction: str = ""

    def __post_init__(self):
        if self.state not in STATES:
            raise ValueError(f"unknown state {self.state!r}; accepted: {', '.join(STATES)}")
        for state in self.moved.values():
            if state not in STATES:
                raise ValueError(f"unknown moved state {state!r}; accepted: {', '.join(STATES)}")

    @classmethod
    def all_of(cls, states, **fields) -> "Reading":
        """A part that asserts several things at once (:func:`all_of`), and what an undecided one could still make it."""
        states = list(states)
        return cls(all_of(states), could_be=could_be(states, all_of), **fields)

    @classmethod
    def over(cls, states, **fields) -> "Reading":
        """A part read at several settings: its state over them (:func:`over_settings`), and what an
        undecided one could still turn out to be."""
        states = list(states)
        return cls(over_settings(states), could_be=could_be(states), **fields)

    def as_dict(self) -> dict:
        out = {"state": self.state, "measured": self.measured, "threshold": self.threshold}
        for name in ("settings", "moved", "decide", "note", "could_be", "direction"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


def measured_at(read, *, moves=MOVES) -> Reading:
    """``read(scale)`` -> Reading, with every threshold it compares with multiplied by ``scale``
    (in the direction each names); the reading at scale 1 with the states at each move kept."""
    reading = read(1.0)
    reading.moved = {f"{m:g}": read(m).state for m in moves}
    return reading


@dataclass(frozen=True)
class Label:
    verdict: str
    line: str   # the verdict with what it rests on, e.g. "refuted (its premise holds: near uniform at initialisation)"


def _base_verdict(states: list[str], others_fail: bool) -> str:
    """The label from decided assertion states (no undecided among them)."""
    holds = any(s in (HOLDS, MIXED) for s in states)
    fails = any(s in (FAILS, MIXED) for s in states)
    if holds and fails:
        return PARTLY
    if holds:
        return PARTLY if others_fail else SUPPORTED
    return REFUTED


def _texts(pairs) -> str:
    return "; ".join(p.text for p, _ in pairs)


def _failing_texts(pairs) -> str:
    """Failing parts with the way each fails, where its reading names it: "gradients near 0 (15x
    larger, not near 0)"."""
    return "; ".join(p.text + (f" ({r.direction})" if r.direction else "") for p, r in pairs)


def untested_notes_of(pairs) -> list[str]:
    """Each part as the verdict line names it: its text and its state."""
    return [f"{p.text}: {'not measured yet' if r.state == PENDING else r.state}" for p, r in pairs]


def leaning(reading: Reading) -> str | None:
    """For an undecided part that can no longer turn out one way: FAILS where it cannot hold in full
    (a setting fails), HOLDS where it cannot fail in full; None otherwise."""
    if not reading.could_be:
        return None
    if HOLDS not in reading.could_be:
        return FAILS
    if FAILS not in reading.could_be:
        return HOLDS
    return None


def label(pairs) -> Label:
    """The one rule from parts to a label (see the module docstring).  ``pairs``: [(Part, Reading)].

    Assertions vote; where a set of parts holds no assertion (one lab's premise alone), its tested
    parts vote.  A derivation never votes (it follows from arithmetic; the parts table shows it).  A label is given only where every way the undecided voting parts could turn out
    (each holding or failing) gives it; otherwise the claim is inconclusive.
    """
    pairs = list(pairs)
    if not all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], Part) and isinstance(x[1], Reading)
               for x in pairs):
        raise TypeError("label needs [(Part, Reading), ...]")
    tested = [(p, r) for p, r in pairs if r.state in TESTED and p.role != DERIVATION]
    assertion_declared = any(p.role == ASSERTION for p, _ in pairs)
    voters = [(p, r) for p, r in tested if p.role == ASSERTION or not assertion_declared]
    others = [(p, r) for p, r in tested if (p, r) not in voters]
    part_notes = untested_notes_of(pairs)
    untested_notes = [note for (p, r), note in zip(pairs, part_notes) if r.state not in TESTED and p.role != DERIVATION]
    if not voters:  # the states of the parts that could vote (a derivation's state says nothing of the label)
        states = {r.state for p, r in pairs if p.role != DERIVATION} or {r.state for _, r in pairs}
        verdict = PENDING if PENDING in states else NOT_IN_PRESET if NOT_IN_PRESET in states else NOT_TESTABLE
        notes = [] if all(r.state == verdict for _, r in pairs) else [
            note for (p, r), note in zip(pairs, part_notes) if r.state != verdict or verdict == PENDING]
        return Label(verdict, verdict + (f" ({'; '.join(notes)})" if notes else ""))
    others_fail = any(r.state in (FAILS, MIXED) for _, r in others)
    # an assertion not tested here could still turn out either way: it leaves the label open as an
    # undecided one does (untested is not supported)
    unread = sum(p.role == ASSERTION and r.state not in TESTED for p, r in pairs)
    slots = [(r.state, r.could_be) for _, r in voters] + [(UNDECIDED, [])] * unread  # (state, could be)
    open_ = [i for i, (state, _) in enumerate(slots) if state == UNDECIDED]
    outcomes = set()
    for turned in itertools.product(*(slots[i][1] or [HOLDS, FAILS] for i in open_)):
        states = [state for state, _ in slots]
        for i, state in zip(open_, turned):
            states[i] = state
        outcomes.add(_base_verdict(states, others_fail))
    verdict = next(iter(outcomes)) if len(outcomes) == 1 else INCONCLUSIVE
    notes = []
    if verdict == INCONCLUSIVE:  # what is open, and between which labels
        notes.append(" or ".join(v for v in VERDICTS if v in outcomes) + ", as the open parts turn out")
    failing = [(p, r) for p, r in voters + others if r.state == FAILS]
    in_part = [(p, r) for p, r in voters + others if r.state == MIXED]
    undecided = [(p, r) for p, r in voters + others if r.state == UNDECIDED and not leaning(r)]
    leans = {lean: [(p, r) for p, r in voters + others if r.state == UNDECIDED and leaning(r) == lean]
             for lean in (HOLDS, FAILS)}
    held = [(p, r) for p, r in voters + others if r.state == HOLDS]
    if verdict == REFUTED:
        premises = [(p, r) for p, r in held if p.role == PREMISE]
        sides = [(p, r) for p, r in held if p.role == SIDE]
        directed = [(p, r) for p, r in failing if r.direction]
        if directed:  # which way it is wrong, where a part says
            notes.append(f"fails: {_failing_texts(directed)}")
        if premises:
            notes.append(f"its premise holds: {_texts(premises)}")
        if sides:
            notes.append(f"holds: {_texts(sides)}")
        if undecided or leans[HOLDS] or leans[FAILS]:
            notes.append(f"undecided: {_texts(undecided + leans[HOLDS] + leans[FAILS])}")
    else:
        if failing:
            notes.append(f"fails: {_failing_texts(failing)}")
        if in_part:
            notes.append(f"holds only in part: {_texts(in_part)}")
        if leans[FAILS]:
            notes.append(f"fails in part or in full (the rest undecided): {_texts(leans[FAILS])}")
        if leans[HOLDS]:
            notes.append(f"holds in part or in full (the rest undecided): {_texts(leans[HOLDS])}")
        if undecided:
            notes.append(f"undecided: {_texts(undecided)}")
        if verdict == INCONCLUSIVE and held:
            notes.append(f"holds: {_texts(held)}")
    # a derivation that fails does not move the label, and is still said: the arithmetic a claim's setting rests on
    # does not hold there
    derived_wrong = [(p, r) for p, r in pairs if p.role == DERIVATION and r.state in (FAILS, MIXED)]
    if derived_wrong:
        notes.append(f"{'a derivation fails' if len(derived_wrong) == 1 else 'derivations fail'}, not counted: "
                     f"{_texts(derived_wrong)}")
    notes += untested_notes
    return Label(verdict, verdict + (f" ({'; '.join(notes)})" if notes else ""))


def margins(pairs) -> list[dict]:
    """Where moving one part's thresholds 20% (see :func:`measured_at`) would change the label:
    [{"part", "text", "move", "state", "verdict"}]."""
    pairs = list(pairs)
    base = label(pairs).verdict
    found = []
    for i, (part, reading) in enumerate(pairs):
        for move, state in reading.moved.items():
            if state == reading.state:
                continue
            moved = pairs[:i] + [(part, Reading(state))] + pairs[i + 1:]
            verdict = label(moved).verdict
            if verdict != base:
                found.append({"part": part.key, "text": part.text, "move": move, "state": state, "verdict": verdict})
    return found


def margin_text(found: list[dict]) -> str:
    """One sentence for the report: which 20% moves would change the label, or that none would."""
    if not found:
        return "No threshold moved 20% either way changes the label."
    return " ".join(f"With the thresholds of '{m['text']}' {'20% lower' if float(m['move']) < 1 else '20% higher'} it "
                    f"would read {m['state']}, and the label would be {m['verdict']}." for m in found)


@dataclass
class Finding:
    """One lab's reading of one claim: a :class:`Reading` for each part the claim declares for that
    lab, the evidence text and the numbers it quotes.  Its ``verdict`` is :func:`label` of those
    parts alone (the claim's own label combines every lab's parts)."""

    claim: str
    lab: str
    evidence: str
    numbers: dict[str, float | int | str | None] = field(default_factory=dict)
    readings: dict[str, Reading] = field(default_factory=dict)

    def __post_init__(self):
        if self.claim not in ANY_BY_ID:
            raise ValueError(f"unknown claim {self.claim!r}; accepted: {', '.join(ANY_BY_ID)}")
        declared = [p.key for p in ANY_BY_ID[self.claim].parts_of(self.lab)]
        if not declared:
            raise ValueError(f"{self.claim} declares no part read by the {self.lab!r} lab; its labs: "
                             f"{', '.join(ANY_BY_ID[self.claim].labs)}")
        if sorted(self.readings) != sorted(declared):
            raise ValueError(f"{self.claim}'s {self.lab} finding reads parts {sorted(self.readings)}; the registry "
                             f"declares {sorted(declared)}")
        if not all(isinstance(r, Reading) for r in self.readings.values()):
            raise TypeError(f"{self.claim}'s readings must be Reading objects")

    def pairs(self) -> list[tuple[Part, Reading]]:
        return [(p, self.readings[p.key]) for p in ANY_BY_ID[self.claim].parts_of(self.lab)]

    @property
    def verdict(self) -> str:
        return label(self.pairs()).verdict

    @property
    def line(self) -> str:
        return label(self.pairs()).line

    def as_dict(self) -> dict:
        return {"claim": self.claim, "lab": self.lab, "verdict": self.verdict, "verdict_line": self.line,
                "parts": part_rows(self.pairs()), "evidence": self.evidence, "numbers": self.numbers}


def untested(claim: str, lab: str, why: str, state: str = NOT_TESTABLE,
             numbers: dict | None = None) -> Finding:
    """A finding whose every part (of this lab) is ``state`` (not testable here, or not tested in this
    preset) for the reason ``why``."""
    readings = {p.key: Reading(state, note=why) for p in ANY_BY_ID[claim].parts_of(lab)}
    return Finding(claim, lab, why, numbers or {}, readings)



def _claim(id_, section, text, seed, *parts) -> Claim:
    return Claim(id_, section, text, seed, tuple(Part(*p) for p in parts))


A, P, S, D = ASSERTION, PREMISE, SIDE, DERIVATION

CLAIMS: tuple[Claim, ...] = (
    _claim("C01", "2.1",
           "Common initialisations (Xavier is named) give q and k components mean 0 and variance 1.",
           "假设 query q 和 key k 是 d_k 维向量，各分量独立且均值为 0、方差为 1（常见初始化，如 Xavier）。",
           ("init", "common initialisations give mean 0, variance 1", A, "variance",
            "each initialisation measured, unit-variance input")),
    _claim("C02", "2.1",
           "If q_i and k_i are independent, mean 0, variance 1, then Var(q·k) = d_k and std = sqrt(d_k).",
           "点积的方差 = d_k * 1 = d_k，标准差 = sqrt(d_k)。",
           ("variance", "Var(q·k) = d_k", A, "variance", "independent mean-0 variance-1 components, every d_k sampled")),
    _claim("C03", "2.1",
           "Unscaled, with d_k = 64 or 128, dot products spread over about [-3 sqrt(d_k), 3 sqrt(d_k)] "
           "and extreme values are likely.",
           "若不缩放，当 d_k 较大（如 64 或 128）时，点积值会分布在 [-3sqrt(d_k), 3sqrt(d_k)] 范围，极端值概率高。",
           ("spread", "q·k spreads over about ±3 sqrt(d_k)", A, "variance", "gaussian components, d_k = 64 and 128"),
           ("extreme", "extreme values are likely", A, "variance",
            "d_k = 64 and 128, as values large for a softmax (|q·k| > 3, the range C04 calls unsaturated)")),
    _claim("C04", "2.2",
           "Dividing by sqrt(d_k) makes the logit variance 1; softmax inputs concentrate in [-3, 3], where the "
           "softmax gradient is not saturated.",
           "除以 sqrt(d_k)：将点积方差归一化为 1，标准差为 1。softmax 输入值集中在 [-3, 3] 区间，梯度在非饱和区。",
           ("variance", "logit variance 1", A, "saturation", "unit-variance q, k; every d_k, n = 128"),
           ("within", "logits concentrate in [-3, 3]", A, "saturation", "every d_k, n = 128"),
           ("unsaturated", "the softmax is not saturated", A, "saturation", "every d_k and n")),
    _claim("C05", "2.2, 5",
           "Dividing by d_k makes the variance 1/d_k: logits sit near 0, softmax is near uniform, attention loses "
           "the ability to focus, and the model is \"fundamentally unusable, not just a bit worse\".",
           "除以 d_k：方差变为 1/d_k……softmax 输出分布过于平滑（接近均匀分布），注意力丧失区分度；"
           "不是“差一点”而是根本不可用。",
           ("uniform", "near uniform at initialisation", P, "saturation", "unit-variance q, k; d_k = 64 and 128, n = 128"),
           ("unusable", "fundamentally unusable", A, "training",
            "1/d_k at its own best learning rate, every cell where sqrt works")),
    _claim("C06", "2.2",
           "With no scaling, logits are extreme (around ±100), softmax is near one-hot, gradients are near 0 and "
           "training stalls.",
           "不缩放：方差为 d_k，softmax 输入值极端（如 100 或 -100），输出接近 one-hot……梯度在 softmax 饱和区几乎为 0，训练停滞。",
           ("logits", "logits around ±100", A, "saturation", "unit-variance q, k; d_k = 64 and 128, n = 128"),
           ("one_hot", "softmax near one-hot", A, "saturation", "d_k = 64 and 128, n = 128"),
           ("gradient", "gradients near 0", A, "saturation", "the gradient reaching W_q, d_k = 64 and 128"),
           ("logits_trained", "logits around ±100 where training stalls", A, "training",
            "no scaling, the largest d_head trained on recall, the model's own logits after 100 steps"),
           ("stalls", "training stalls", A, "training",
            "no scaling at its own best learning rate, d_head >= 64, every cell where sqrt works")),
    _claim("C07", "2.2",
           "Vaswani et al. (2017) verified by experiment that without scaling the gradients vanish and training "
           "does not converge.",
           "Vaswani 等人在原论文中通过实验验证：不缩放时梯度消失，训练无法收敛。",
           ("paper", "the paper ran that experiment", A, "history", "Vaswani et al. (2017) as published")),
    _claim("C08", "2.3",
           "Multiplying by 1/sqrt(d_k) is the same as dividing by sqrt(d_k).",
           "有人会问：为什么不用 1/sqrt(d_k) 乘以点积？本质一样，但除以 sqrt(d_k) 更直观。",
           ("same", "the same result", A, "variance", "every d_k = 1..max, float16 to float64")),
    _claim("C09", "2.3",
           "Raising d_k to 256 while keeping the old factor (dividing by 8 = sqrt(64)) makes the loss oscillate and "
           "not converge in an 8-layer Transformer; dividing by 16 restores stable training.",
           "我在训练一个 8 层 Transformer 时，曾误将 d_k 设为 256 但忘记改缩放因子，结果 loss 震荡不收敛……"
           "改为除以 sqrt(256)=16 后恢复稳定。",
           ("no_converge", "with 1/8 the loss does not converge", A, "training",
            "8 layers, d_head 256, each factor at its own best learning rate"),
           ("oscillates", "with 1/8 the loss oscillates", A, "training", "the same runs, second half of training"),
           ("restores", "1/16 restores stable training", P, "training", "the same model with 1/16")),
    _claim("C10", "2.3, 4.3",
           "T5 has no explicit scaling: it folds the factor into the initialisation of Q/K (the interview answer says both "
           "\"variance 1/sqrt(d_k)\" and \"variance 1/d_k\"); this is mathematically equivalent and cheaper on TPUs.",
           "他们将缩放因子融入 Q 和 K 的初始化：Q 和 K 的权重初始化方差设为 1/d_k，这样点积的方差自动为 1，无需显式缩放……"
           "本质数学等价，只是工程优化。",
           ("no_scale", "T5 applies no explicit factor", A, "doctor", "the installed transformers T5"),
           ("folded", "its initialisation brings the logits to unit scale", A, "doctor", "installed T5 at initialisation"),
           ("released", "T5's released code puts the factor in the initialisation", A, "history",
            "Mesh TensorFlow 0.0.5 and 0.1.21 (T5's code), read"),
           ("variances", "the factor sits in both Q and K (variance 1/d_k)", S, "doctor", "installed T5's W_q and W_k"),
           ("equivalent", "mathematically equivalent", A, "training", "folded init vs sqrt, same seeds, each optimiser"),
           ("tpu", "cheaper on TPUs", S, "doctor", "no TPU here")),
    _claim("C11", "2.4",
           "In FP16/BF16, even after scaling, d_k = 128 gives logits around [-30, 30]; FP16's small range then "
           "makes the softmax produce inf.",
           "例如 d_k=128，点积范围约 [-30, 30]，FP16 动态范围有限，softmax 输入过大导致 inf。",
           ("range", "logits around ±30 at d_k = 128", A, "numerics",
            "d_k = 128 after 1/sqrt(d_k), the interview answer's unit-variance q and k"),
           ("inf", "the softmax produces inf in FP16", A, "numerics",
            "attention as real code computes it (eager, SDPA, online), float16 and bfloat16, d_k = 128, logits up to ±30")),
    _claim("C12", "2.4",
           "The fixes are torch.clamp before the softmax, or FlashAttention, which scales by 1/sqrt(d_k) and tiles "
           "the computation so the large matrix never overflows.",
           "解法：在注意力计算前加 torch.clamp 或使用 FlashAttention……FlashAttention 内部将 QK^T 除以 sqrt(d_k) 后，"
           "再通过 tile 方式避免大矩阵溢出。",
           ("clamp", "torch.clamp fixes the overflow cheaply", A, "numerics",
            "float16, the scenarios where a naive softmax overflows"),
           ("flash", "FlashAttention's softmax never overflows", A, "numerics", "online softmax, every dtype and scenario"),
           ("tiling", "the tiling keeps the large matrix from overflowing", A, "numerics",
            "read two ways: numeric overflow (tiles without max subtraction) and memory")),
    _claim("C13", "2.4",
           "Some implementations (Hugging Face's old BERT is named) wrongly used 1/d_k, which made training "
           "2-3x slower.",
           "某些实现（如 Hugging Face 的旧版 BERT）错误地使用了 1/d_k 缩放，导致训练慢 2-3 倍。",
           ("old_bert", "Hugging Face's old BERT used 1/d_k", A, "history",
            "every release of Hugging Face's BERT in the pinned cache (2018-2020), read and run"),
           ("slower", "1/d_k makes training 2-3x slower", A, "training",
            "1/d_k at the learning rate tuned for 1/sqrt(d_k) (the bug swaps the factor, not the rate), recall")),
    _claim("C14", "2.4",
           "A diagnostic: print the attention weights; if every token gets about 1/n, the scaling is too strong.",
           "验证方法：打印注意力权重分布，若所有 token 权重接近 1/n，说明缩放过大。",
           ("fires", "too-strong scaling shows as weights of about 1/n", A, "doctor",
            "trained models: a pretrained model with its factor replaced, and models trained with it"),
           ("specific", "weights of about 1/n mean the scaling is too strong", A, "doctor",
            "correctly scaled trained models (no flag expected)")),
    _claim("C15", "4.1",
           "For small d_k (1 or 2) scaling matters little; d_k = 2 with or without the factor differs little.",
           "若 d_k=2，点积方差为 2，除以 sqrt(2)≈1.414，效果与不缩放差异不大。",
           ("little", "d_k = 2 with or without the factor differs little (at d_k = 1 the factor is 1)", A, "variance",
            "attention rows at d_k = 2, total variation, against the same rows at the largest d_k measured")),
    _claim("C16", "4.2",
           "The softmax derivative is p_i(1 - p_i): near 0 for extreme inputs (about 100); for inputs in [-3, 3], "
           "p_i is about 0.05-0.95 and the derivative about 0.05-0.25.",
           "softmax 的导数 = p_i * (1 - p_i)……当输入极端时（如 100），p_i≈1，导数≈0……若输入在 [-3, 3] 区间，"
           "p_i 约 0.05-0.95，导数约 0.05-0.25，梯度有效。",
           ("formula", "the derivative is p_i(1 - p_i)", A, "saturation", "the Jacobian's diagonal, against autograd"),
           ("extreme", "near 0 at inputs of about 100", A, "saturation", "every Jacobian entry, n = 2 and 128"),
           ("ranges", "p_i in 0.05-0.95 and p_i(1 - p_i) in 0.05-0.25 for inputs in [-3, 3]", A, "saturation",
            "sqrt-scaled logits, every key count n measured")),
    _claim("C17", "4.2",
           "Without scaling, the gradient norm of the first layers drops by more than 10x and the loss does not "
           "go down.",
           "实验表明，不缩放时前几层梯度范数下降 10 倍以上，训练 loss 不降。",
           ("gradient", "the first layers' gradient drops more than 10x", A, "training",
            "first layer's W_q, W_k, matched seeds at sqrt's learning rate, d_head >= 64"),
           ("loss", "the loss does not go down", A, "training",
            "no scaling at its own best learning rate, d_head >= 64, every task trained")),
    _claim("C18", "summary",
           "sqrt(d_k) is the balance point: d_k over-smooths, and no constant can adapt to different d_k.",
           "除以 sqrt(d_k) 是数学推导（方差归一化）和工程实践（避免梯度饱和、保持区分度）的平衡点。"
           "不是 d_k 是因为会过度平滑，不是常数是因为无法适应不同 d_k。",
           ("balance_init", "sqrt(d_k) is the balance point at initialisation", A, "saturation",
            "the exponent grid, unit-variance q and k"),
           ("oversmooth_init", "d_k over-smooths at initialisation", A, "saturation", "1/d_k at the largest d_k"),
           ("constant_init", "no constant adapts to d_k at initialisation", A, "saturation", "the constant factor across d_k"),
           ("balance_trained", "sqrt(d_k) is near the best rule in training", A, "training",
            "each rule at its own best learning rate, every cell where sqrt works"),
           ("oversmooth_trained", "d_k over-smooths in training", A, "training", "final attention entropy, same cells"),
           ("constant_trained", "a constant fails where it is off sqrt's value", A, "training",
            "each constant factor at its own best learning rate (0.125, and no scaling: the constant 1), every cell "
            "where sqrt works and the constant is off its value")),
)

BY_ID = {claim.id: claim for claim in CLAIMS}

# Statements beyond the source: what an answer must add today (long contexts), judged like the claims
# in a group of their own; never in the source's tally, never C19...  Their "source" text is empty: the
# interview answer does not say them.
STATEMENT_GROUPS = {"L": "long contexts"}

STATEMENTS: tuple[Claim, ...] = (
    _claim("L1", "long contexts",
           "Under 1/sqrt(d_k) alone, the weight of one relevant key fades as the context grows.",
           "",
           ("init", "at initialisation the needle's weight falls with the number of keys n", D, "length",
            "a needle at margin 5 among equal keys (SSMax's Fig. 1), and at margin 3 among keys of iid logits "
            "with std 1; n = 64 and 65536"),
           ("trained", "a trained model's needle weight fades at 16x its training length", A, "length",
            "1/sqrt(d_k) at its own best learning rate, no position embedding, trained at 34 tokens")),
    _claim("L2", "long contexts",
           "Log-n scaling (the factor times log_L n beyond the training length L) or Scalable-Softmax (times s ln n, "
           "s learned) keeps a relevant key's weight as the context grows.",
           "",
           ("init_equal", "at initialisation log-n and SSMax keep the needle among equal keys", D, "length",
            "SSMax's Fig. 1: logits -2 and one +3, s = 0.43 and log_34 n, n = 64 and 65536"),
           ("init_noisy", "at initialisation log-n keeps the needle among noisy keys", D, "length",
            "margin 3 over keys of iid logits with std 1, log_34 n, n = 64 and 65536"),
           ("trained_logn", "a trained model with log-n keeps its needle weight at 16x", A, "length",
            "log_34 n (1 up to the training length: 1/sqrt(d_k)'s weights run under it) and log_16 n (acting from "
            "16 keys on: trained with it), each at its own best learning rate, no position embedding"),
           ("trained_ssmax", "a trained model with SSMax keeps its needle weight at 16x", A, "length",
            "SSMax (s from 0.43, learned per head) at its own best learning rate, no position embedding")),
    _claim("L3", "long contexts",
           "Which law the factor should follow depends on the task: a needle of fixed margin needs growth like "
           "log n, while keeping attention's entropy over n iid logits needs only sqrt(log n).",
           "",
           ("needle_log", "a needle of fixed margin keeps its weight under log n but not under sqrt(log n)", D,
            "length", "SSMax's Fig. 1 needle (margin 5), m = log_34 n against m = 0.5 sqrt(2 ln n), n = 64 to 65536"),
           ("entropy_sqrt_log", "over iid logits, sqrt(log n) keeps the entropy fraction and log n lowers it", D,
            "length", "iid N(0, 1) logits, H / ln n at n = 64 and 65536, m = 0.5 sqrt(2 ln n) against log_34 n"),
           ("trained", "trained on needles, a model under log n keeps its needle's weight at 16x and one under "
            "sqrt(log n) keeps less of it", A, "length", "log_16 n and sqrt(log_16 n), each acting from 16 keys on and "
            "trained with it at its own best learning rate, no position embedding; the two compared seed by seed "
            "(the same initial weights and batches)")),
    _claim("L4", "long contexts",
           "Beyond its training length a model under 1/sqrt(d_k) alone loses accuracy, and a length term keeps it.",
           "",
           ("sqrt_drops", "1/sqrt(d_k) alone loses accuracy at 16x", A, "length",
            "no position embedding, 1/sqrt(d_k) at its own best learning rate"),
           ("logn_keeps", "log-n keeps its accuracy at 16x", A, "length",
            "no position embedding, log_34 n on 1/sqrt(d_k)'s weights and log_16 n trained with it"),
           ("ssmax_keeps", "SSMax keeps its accuracy at 16x", A, "length", "no position embedding, SSMax"),
           ("rope", "with RoPE too, log-n keeps the accuracy that 1/sqrt(d_k) alone loses", A, "length",
            "RoPE positions, both rules at their own best learning rates")),
)
STATEMENT_BY_ID = {statement.id: statement for statement in STATEMENTS}
ANY_BY_ID = {**BY_ID, **STATEMENT_BY_ID}


def claims_of_lab(lab: str) -> tuple[str, ...]:
    return tuple(claim.id for claim in CLAIMS + STATEMENTS if lab in claim.labs)


def key_declared(declared: tuple[str, ...], key: str) -> bool:
    """Whether ``key`` is one of ``declared``: by name, or by a family name ending in ``*``
    (a read of a family, e.g. ``inv_d_progress_*``, must be declared as that family)."""
    return any(key == name or (name.endswith("*") and not key.endswith("*") and key.startswith(name[:-1]))
               for name in declared)


def undeclared_numbers(declared: dict[str, tuple[str, ...]], findings: dict[str, Finding]) -> list[str]:
    """``claim.key`` names that disagree with a lab's ``NUMBER_KEYS``: numbers a finding carries
    that are not declared, and declared names (not families) that a tested finding lacks."""
    wrong = []
    for claim_id, finding in findings.items():
        names = declared.get(claim_id, ())
        wrong += [f"{claim_id}.{key} (not declared)" for key in finding.numbers if not key_declared(names, key)]
        if finding.verdict not in (NOT_TESTABLE, NOT_IN_PRESET):
            wrong += [f"{claim_id}.{name} (declared, missing)" for name in names
                      if not name.endswith("*") and name not in finding.numbers]
    wrong += [f"{claim_id} (declared, no finding)" for claim_id in declared if claim_id not in findings]
    return wrong


def part_rows(pairs) -> list[dict]:
    """The parts as report.json carries them: text, role, lab, setting and the reading."""
    return [{"key": p.key, "text": p.text, "role": p.role, "lab": p.lab, "setting": p.setting, **r.as_dict()}
            for p, r in pairs]


def claim_pairs(claim: Claim, found: dict[str, Finding]) -> list[tuple[Part, Reading]]:
    """Every declared part with its reading; a part whose lab has not reported is pending."""
    return [(p, found[p.lab].readings[p.key] if p.lab in found else Reading(PENDING, note="its lab has not run"))
            for p in claim.parts]


def evaluate(lab_findings: dict[str, dict[str, Finding]], registry: tuple[Claim, ...] = CLAIMS) -> list[dict]:
    """Labels for every claim of ``registry`` (the source's 18, or :data:`STATEMENTS`) from ``{lab: {claim_id: Finding}}``: each claim's parts, its label by
    :func:`label`, the 20% margins, each lab's own label, the evidence and the numbers.  A claim
    whose labs have not all reported is labelled from the parts read so far (the rest pending)."""
    rows = []
    for claim in registry:
        found = {lab: lab_findings[lab][claim.id] for lab in claim.labs if claim.id in lab_findings.get(lab, {})}
        missing = [lab for lab in claim.labs if lab not in found]
        evidence = " ".join(f"[{lab}] {found[lab].evidence}" for lab in found) if len(found) > 1 else (
            next(iter(found.values())).evidence if found else "")
        if missing:
            evidence = (evidence + " " if evidence else "") + (
                f"Pending: the {', '.join(missing)} lab{'s' if len(missing) > 1 else ''} "
                f"will test {'the rest' if found else 'this claim'}.")
        numbers = {}
        for lab, finding in found.items():
            numbers.update({(f"{lab}.{k}" if len(claim.labs) > 1 else k): v for k, v in finding.numbers.items()})
        pairs = claim_pairs(claim, found)
        verdict = label(pairs)
        moved = margins(pairs)
        rows.append({
            "id": claim.id,
            "claim": claim.text,
            "source": claim.source,
            "section": claim.section,
            "verdict": verdict.verdict,
            "verdict_line": verdict.line,
            "complete": not missing,
            "parts": part_rows(pairs),
            "margins": moved,
            "margin_text": margin_text(moved),
            "evidence": evidence,
            "experiments": list(claim.labs),
            "lab_verdicts": {lab: f.verdict for lab, f in found.items()},
            "numbers": numbers,
            "figures": [],
        })
    return rows
