"""The factor any nn.Module applies to q·k, read from the operations it runs.

``probe(module, example_input)`` runs the module once under a dispatch mode that sees every
ATen operation it makes, whatever the code above it (``nn.MultiheadAttention``'s slow path,
einsum, ``@``, ``torch.bmm``, ``F.scaled_dot_product_attention``, a library's own module):

* **an attention call** is either a softmax whose input is a product of two tensors (the logits
  of q·k, after whatever was done to them) or a fused SDPA operation;
* **the factor at the call**: for a softmax, the ratio of its input to the product it came
  from (the same number at every unmasked entry if the step between is a factor; an additive
  term, such as ALiBi's, is named instead); for a fused SDPA operation, measured by calling that
  operation again, with the arguments the module gave it, on one query and two keys whose
  q·k differ by a known gap (log(p_0 / p_1) = factor x gap);
* **what was done to q and k before**: each query (key) vector at the call is matched against the
  outputs of the module's matrix products (its projections, fused or not) cut into pieces of the
  head width; a vector that is c times one of them found, c is a factor folded into q (or k)
  before the product (``nn.MultiheadAttention`` multiplies q by d^-1/2 first).  A c that differs
  from vector to vector is QK-norm (every vector at the call has one length) or a factor that
  moves with the query row (a length or position term);
* **the factor** on the projections' q·k is the factor at the call times c_q times c_k.

What cannot be read is said, with the reason (a rotation between the projection and the call, as
RoPE does, leaves no vector a multiple of a projection's output).

Each call and each attention module is then judged against an expectation (1/sqrt(d_k) unless told otherwise;
:mod:`attnscale.scale_check`): ``ok``, ``mismatch`` or ``not measured``.  The attention modules are the outermost
modules whose class is an attention (by its name, or ``nn.MultiheadAttention``); one that made no call on the
input (a cross-attention given no encoder states, a branch not taken) is named as not measured, so the module's
verdict is ``ok`` only when every attention module in it was measured and matches.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import asdict, dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..observation import Observation
from ..scale_check import Expectation, ModelVerdict, Verdict, expectation, exit_code, judge_cosine_logit, judge_factor, \
    model_verdict

PRODUCTS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default")
SOFTMAX = ("aten._softmax.default", "aten._safe_softmax.default")
BIAS_ADD = "aten.add.Tensor"  # a projection's bias added after its product (F.linear on 3-D input, MHA's in_proj)
SDPA_PREFIX = "aten._scaled_dot_product_"   # the fused kernels F.scaled_dot_product_attention picks
MATCH_COS = 1 - 1e-4       # a vector at the call has a projection's direction
SAME_SCALE = 1e-3          # relative spread under which a set of ratios is one number
MASKED_BELOW = -1e4        # logits this low are a mask, not a factor's work
SAMPLE = 64                # vectors matched per call
GAP = 1.0                  # the q·k gap between the two designed keys of a fused call
NO_CALL = "no attention call: no softmax over a matrix product and no fused attention operation ran"


@dataclass
class AttentionRead:
    module: str                     # the innermost module running when the call was made ("" for the root)
    kind: str                       # "softmax(q·k)" or the fused operation's name
    d_k: int
    factor_at_call: float | None    # what the call itself applies to the q·k it receives
    q_scale: float | None = None    # c_q: q at the call / the projection's output (None: not matched)
    k_scale: float | None = None
    q_from: str = ""                # the module whose product q came from
    k_from: str = ""
    factor: float | None = None     # on the projections' q·k
    # constant | QK-norm | varies per query row | additive term | not finite | uniform | not read
    form: str = "constant"
    detail: str = ""                # a number behind the form (a cosine-1 logit, a range), or why not read
    cosine_logit: float | None = None  # QK-norm: the logit of a cosine-1 pair
    expected: float | None = None      # what the expectation gives at this d_k (QK-norm: the cosine-1 logit)
    verdict: str = ""                  # ok | mismatch | not measured, once judged
    finding: str = ""                  # a mismatch in words, or why not measured

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AttentionModule:
    """One attention module of the probed model (or, for a call outside any, the module that made it)."""

    name: str
    cls: str
    calls: int = 0
    verdict: str = Verdict.NOT_MEASURED
    findings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "class": self.cls, "calls": self.calls, "verdict": str(self.verdict),
                "findings": list(self.findings)}


@dataclass
class ModuleProbe:
    module: str
    calls: list[AttentionRead] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    # with keep_tensors: (module, what the call saw) per call, in order: q and k as the call received them, the
    # logits (factor_at_call x q·k, masked entries -inf) and the probabilities
    tensors: list[tuple[str, Observation]] = field(default_factory=list)
    other_softmax: list[str] = field(default_factory=list)     # softmaxes over x W (routers, classifiers), named
    expect: str = ""                                           # the expectation judged against ("" before judging)
    modules: list[AttentionModule] = field(default_factory=list)  # one verdict per attention module
    verdict: str = ModelVerdict.INCOMPLETE

    @property
    def ok(self) -> bool:
        """Every attention module measured, and each applies the expected factor."""
        return self.verdict == ModelVerdict.OK

    @property
    def measured(self) -> int:
        return sum(m.verdict != Verdict.NOT_MEASURED for m in self.modules)

    def summary(self) -> str:
        """The verdict in one line: "ok: 2 of 2 attention modules measured", "incomplete: 1 of 2 ..."."""
        unread = f", {len(self.unread)} softmax not read" if self.unread and (self.calls or self.modules) else ""
        return f"{self.verdict}: {self.measured} of {len(self.modules)} attention modules measured{unread}"

    def findings(self) -> list[str]:
        """Each module's mismatch or why it was not measured, then what no call could be read for."""
        return [f"{m.name or self.module}: {f}" for m in self.modules if m.verdict != Verdict.OK for f in m.findings] \
            + [f"not read: {reason}" for reason in self.unread]

    def exit_code(self, strict: bool = False) -> int:
        return exit_code(ModelVerdict(self.verdict), strict)

    def to_dict(self) -> dict:
        return {"module": self.module, "expect": self.expect, "verdict": str(self.verdict), "summary": self.summary(),
                "modules": [m.to_dict() for m in self.modules], "calls": [c.to_dict() for c in self.calls],
                "unread": list(self.unread), "other_softmax": list(self.other_softmax)}


class RecordingTooLarge(ValueError):
    """What the recording keeps would not fit in the free memory."""


class _Recorder(TorchDispatchMode):
    """Reads every attention call as the module makes it (:func:`read_softmax`, :func:`read_fused`), keeping only
    what a later call may need: the output of every matrix product (where q and k may have come from), the inputs
    of the latest product alone (the q and k of a softmax right after it), and the reads.  Before each copy and
    each read, what the process has grown by since the recording began (the forward's own tensors included: its
    resident memory; elsewhere what it kept) and what the step will take are held against the free memory at the
    start: past it, RecordingTooLarge, instead of the machine's memory running out."""

    def __init__(self, where, name: str, weights: set[int] = frozenset(), keep_tensors: bool = False):
        super().__init__()
        from ..memory import USABLE_SHARE, available_bytes, resident_bytes

        self.where = where
        self.weights = weights  # the storage of the module's parameters: a product with one is a layer's, not q·k
        self.result = ModuleProbe(name)
        self.keep_tensors = keep_tensors
        self.products: list[tuple[str, torch.Tensor]] = []  # (module, output) of every product, in order
        self.last_product = None  # (module, a, b, output, with a weight) of the latest product, until a softmax reads it
        self.product_storage: dict[int, tuple[int, torch.Tensor]] = {}  # a product's output storage -> (place, copy)
        free = available_bytes("cpu")
        self.budget = None if free is None else int(USABLE_SHARE * free)
        self.resident_at_start = resident_bytes()
        self.kept_bytes = 0

    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` (the module may change the original in place later), counted."""
        self.check_room(tensor.nbytes)
        self.kept_bytes += tensor.nbytes
        return tensor.detach().clone()

    def finished(self) -> ModuleProbe:
        """The reads, once the forward is done; a module that made no attention call says so."""
        if not self.result.calls and not self.result.unread:
            self.result.unread.append(NO_CALL)
        return self.result

    def grown_bytes(self) -> int:
        """What the process holds beyond what it held when the recording began."""
        from ..memory import resident_bytes

        now = resident_bytes() if self.resident_at_start is not None else None
        return max(self.kept_bytes, now - self.resident_at_start) if now is not None else self.kept_bytes

    def check_room(self, working_bytes: int = 0) -> None:
        """RecordingTooLarge unless the process's growth so far and ``working_bytes`` more fit in the free memory."""
        if self.budget is None:
            return
        needed = self.grown_bytes() + working_bytes
        if needed > self.budget:
            from ..memory import USABLE_SHARE, format_bytes

            raise RecordingTooLarge(f"reading this module's attention keeps the output of every matrix product of its "
                                    f"forward pass and reads each call in float64: {format_bytes(needed)} at this "
                                    f"call, but only {format_bytes(self.budget / USABLE_SHARE)} is free; probe it on "
                                    "a smaller input (fewer tokens or a smaller batch)")

    def is_kept_product(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is the output of a product still kept (its storage may since hold another tensor)."""
        place, copy = self.product_storage.get(tensor.data_ptr(), (None, None))
        return place is not None and place < len(self.products) and self.products[place][1] is copy \
            and copy.numel() == tensor.numel()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        where = self.where() or self.result.module
        if name in PRODUCTS:
            a, b = (args[1], args[2]) if name in ("aten.addmm.default", "aten.baddbmm.default") else (args[0], args[1])
            if self.last_product is not None:
                self.kept_bytes -= sum(t.nbytes for t in self.last_product[1:3])
            kept_out = self.keep(out)
            self.product_storage[out.data_ptr()] = (len(self.products), kept_out)
            self.products.append((where, kept_out))
            self.last_product = (where, self.keep(a), self.keep(b), kept_out, b.data_ptr() in self.weights)
        elif name == BIAS_ADD and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor) \
                and self.is_kept_product(args[0]) and args[1].numel() < args[0].numel():
            # a projection's output with its bias added: q or k come from it, not from the product without the bias
            place, unbiased = self.product_storage.pop(args[0].data_ptr())
            self.products[place] = (where, self.keep(out))
            if self.last_product is None or self.last_product[3] is not unbiased:
                self.kept_bytes -= unbiased.nbytes
        elif name in SOFTMAX:
            read_softmax(self, where, args[0].detach())
        elif name.startswith(SDPA_PREFIX):
            first = out[0] if isinstance(out, (tuple, list)) else out
            read_fused(self, where, func, tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args),
                       {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()},
                       bool(torch.isfinite(first).all()))
        return out


def _vectors(tensor: torch.Tensor, width: int) -> torch.Tensor | None:
    """The tensor's last axis cut into pieces of ``width``: (pieces, width), or None if it does not divide."""
    if tensor.dim() == 0 or tensor.shape[-1] % width:
        return None
    return tensor.reshape(-1, width).double()


def _match(vectors: torch.Tensor, products: list[tuple[str, torch.Tensor]]) -> tuple[torch.Tensor | None, str]:
    """Per sampled vector, c with vector = c x a piece of one product's output (one product for all), or
    (None, why)."""
    width = vectors.shape[-1]
    picked = vectors[torch.linspace(0, len(vectors) - 1, min(SAMPLE, len(vectors))).long()]
    picked = picked[picked.norm(dim=-1) > 0]
    if not len(picked):
        return None, "the vectors at the call are zero"
    unit = picked / picked.norm(dim=-1, keepdim=True)
    for source, output in reversed(products):  # the latest product first
        pieces = _vectors(output, width)
        if pieces is None or not len(pieces):
            continue
        norms = pieces.norm(dim=-1)
        usable = norms > 0
        if not usable.any():
            continue
        cos = unit @ (pieces[usable] / norms[usable, None]).T
        best, index = cos.abs().max(dim=-1)
        if bool((best >= MATCH_COS).all()):
            chosen = pieces[usable][index]
            return (picked * chosen).sum(-1) / (chosen * chosen).sum(-1), source
    return None, "no vector at the call is a multiple of a matrix product's output (a rotation, such as RoPE, or a mix in between)"


def _one_number(values: torch.Tensor) -> bool:
    middle = values.median()
    return bool(((values - middle).abs() <= SAME_SCALE * middle.abs().clamp_min(1e-30)).all())


def _scale_form(scales: torch.Tensor | None, vectors: torch.Tensor) -> tuple[float | None, str]:
    """(c, form) for the ratios of one side's vectors to their projection pieces."""
    if scales is None:
        return None, "not read"
    if _one_number(scales):
        return float(scales.median()), "constant"
    lengths = vectors.norm(dim=-1)
    if _one_number(lengths[lengths > 0]):
        return None, "QK-norm"
    return None, "varies per query row"


def _softmax_read(where: str, logits: torch.Tensor, a: torch.Tensor, out: torch.Tensor) -> AttentionRead:
    d_k = a.shape[-1]
    flat_logits, flat_out = logits.reshape(-1).double(), out.reshape(-1).double()
    read = AttentionRead(where, "softmax(q·k)", d_k, None)
    broken = int((torch.isnan(flat_logits) | torch.isposinf(flat_logits)).sum())  # -inf is a mask, NaN and +inf not
    if broken:
        read.form, read.detail = "not finite", f"{broken} of {flat_logits.numel()} logits are NaN or +inf"
        return read
    if bool((flat_out == 0).all()):
        read.form, read.detail = "uniform", "q·k is 0 at every entry (a zero query or key): attention is uniform " \
                                            "whatever the factor"
        return read
    keep = torch.isfinite(flat_logits) & (flat_logits > MASKED_BELOW) & \
        (flat_out.abs() > 1e-6 * flat_out.abs().max().clamp_min(1e-30))
    if not keep.any():
        read.form, read.detail = "not read", "every logit is masked"
        return read
    ratio = flat_logits[keep] / flat_out[keep]
    read.factor_at_call = float(ratio.median())
    if not _one_number(ratio):
        read.form = "additive term"
        read.detail = f"logits / q·k ranges {float(ratio.min()):.4g}-{float(ratio.max()):.4g} (a bias or mask added)"
    return read


def _sdpa_factor(func, args, kwargs) -> float:
    """The fused operation's factor, from one query and two keys at a known q·k gap."""
    q, v = args[0], args[2]
    d_k, d_v = q.shape[-1], v.shape[-1]
    query = torch.zeros(1, 1, 1, d_k, dtype=q.dtype)
    query[..., 0] = 1.0
    keys = torch.zeros(1, 1, 2, d_k, dtype=q.dtype)
    keys[..., 0, 0], keys[..., 1, 0] = GAP / 2, -GAP / 2
    values = torch.zeros(1, 1, 2, d_v, dtype=v.dtype)
    values[..., 0, 0] = values[..., 1, 1 % d_v] = 1.0
    rest = {key: value for key, value in kwargs.items() if key in ("scale",)}
    with torch.no_grad():
        out = func(query, keys, values, **rest)
    out = out[0] if isinstance(out, (tuple, list)) else out
    p0, p1 = float(out[0, 0, 0, 0]), float(out[0, 0, 0, 1 % d_v])
    return math.log(p0 / p1) / GAP


def _sdpa_read(where: str, func, args, kwargs, finite: bool) -> tuple[AttentionRead, torch.Tensor, torch.Tensor]:
    q, k = args[0], args[1]
    read = AttentionRead(where, str(func).removeprefix("aten.").removesuffix(".default"), q.shape[-1],
                         _sdpa_factor(func, args, kwargs))
    if not finite:
        read.form, read.detail = "not finite", "the fused call's output holds NaN or inf"
    return read, q.detach().reshape(-1, q.shape[-1]), k.detach().reshape(-1, k.shape[-1])


def _sdpa_tensors(where: str, factor: float, args, kwargs) -> tuple[str, Observation]:
    """The logits and probabilities a fused call computed, recomputed in float64 from its q, k and mask."""
    q, k = args[0].detach(), args[1].detach()
    if k.shape[-3] != q.shape[-3]:  # grouped keys (enable_gqa): each key head serves several query heads
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    logits = (q.double() @ k.double().transpose(-1, -2)) * factor
    causal = bool(args[4]) if len(args) > 4 else bool(kwargs.get("is_causal", False))
    if causal:
        logits = logits.masked_fill(torch.ones(logits.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor):
        logits = logits.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else logits + mask.double()
    return where, Observation(q, k, logits, torch.softmax(logits, dim=-1), factor)


def _fold(read: AttentionRead, q_vectors, k_vectors, products) -> AttentionRead:
    """c_q, c_k and the factor on the projections' q·k."""
    if read.form != "constant":
        return read
    q_scales, read.q_from = _match(q_vectors.double(), products)
    k_scales, read.k_from = _match(k_vectors.double(), products)
    read.q_scale, q_form = _scale_form(q_scales, q_vectors.double())
    read.k_scale, k_form = _scale_form(k_scales, k_vectors.double())
    forms = {q_form, k_form}
    if forms == {"constant"}:
        read.factor = read.factor_at_call * read.q_scale * read.k_scale
    elif "QK-norm" in forms and forms <= {"QK-norm", "constant"}:
        q_len, k_len = q_vectors.double().norm(dim=-1).median(), k_vectors.double().norm(dim=-1).median()
        read.form = "QK-norm"
        read.cosine_logit = float(read.factor_at_call * q_len * k_len)
        read.detail = f"the logit of a cosine-1 pair is {read.cosine_logit:.4g}"
    elif "varies per query row" in forms:
        read.form = "varies per query row"
        read.detail = "q at the call is not one multiple of its projection: a factor that moves with the row"
    else:
        read.form = "not read"
        read.detail = read.q_from if q_form == "not read" else read.k_from
        read.q_from = read.q_from if q_form != "not read" else ""
        read.k_from = read.k_from if k_form != "not read" else ""
    return read


@contextlib.contextmanager
def recording(module: torch.nn.Module, keep_tensors: bool = False):
    """Inside the block, every attention call ``module`` (or anything) makes is read; yields the recorder, whose
    ``result`` holds the reads."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"probe needs an nn.Module, got {type(module).__name__}")
    names = {id(m): name for name, m in module.named_modules()}
    stack: list[str] = []

    def enter(m, args):
        stack.append(names.get(id(m), type(m).__name__))

    def leave(m, args, out):
        if stack:
            stack.pop()

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave)]
    recorder = _Recorder(lambda: stack[-1] if stack else "", type(module).__name__,
                         {p.data_ptr() for p in module.parameters()}, keep_tensors)
    try:
        with recorder:
            yield recorder
    finally:
        for hook in hooks:
            hook.remove()


def check_example(args: tuple) -> None:
    """Refuse, before any forward, an example input the attention cannot be read from: a meta tensor (no values) or
    an empty one (an axis of length 0: no tokens)."""
    for position, value in enumerate(args):
        if not isinstance(value, torch.Tensor):
            continue
        if value.is_meta:
            raise ValueError(f"example input {position} is a meta tensor of shape {tuple(value.shape)}: it holds no "
                             "values to run; accepted: tensors with values (on cpu or cuda)")
        if value.numel() == 0:
            raise ValueError(f"example input {position} is empty (shape {tuple(value.shape)}); accepted: at least one "
                             "value on every axis (two tokens or more, for attention to have keys to weigh)")


def probe(module: torch.nn.Module, example_input, keep_tensors: bool = False, expect: str | float = "sqrt",
          **forward_kwargs) -> ModuleProbe:
    """Run ``module(example_input, **forward_kwargs)`` once, read every attention call it makes, and judge each
    attention module against ``expect`` (a scale rule or a number; :mod:`attnscale.scale_check`).

    ``example_input`` is a tensor or a tuple of positional arguments.  The result's ``ok`` is true only when every
    attention module was measured and applies the expected factor; ``verdict`` is ok, mismatch or incomplete, and
    ``findings()`` says what is not ok.  With ``keep_tensors`` the result also holds each call's q, k, logits and
    probabilities (:class:`attnscale.observation.Observation`).  Raises TypeError for a module that is not an
    nn.Module, ValueError for an ``expect`` that is not a rule or a number > 0, or if the module's forward fails
    on the input."""
    expected = expectation(expect)
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    check_example(args)
    with recording(module, keep_tensors) as recorder:
        try:
            module(*args, **forward_kwargs)
        except RecordingTooLarge as error:
            raise ValueError(str(error)) from None
        except Exception as error:  # noqa: BLE001 - the user's module on the user's input
            raise ValueError(f"{type(module).__name__} failed on the example input: {type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''}") from None
    return judge(recorder.finished(), module, expected)


def assert_scaled(module: torch.nn.Module, example_input, expect: str | float = "sqrt", strict: bool = True,
                  **forward_kwargs) -> ModuleProbe:
    """For a test: probe ``module`` on ``example_input`` and raise AssertionError, with the findings, unless every
    attention module applies the ``expect``ed factor (with ``strict=False``, an attention module that could not
    be measured passes).  Returns the probe.

    >>> attnscale.assert_scaled(block, torch.randn(2, 16, 64), expect="sqrt")
    """
    read = probe(module, example_input, expect=expect, **forward_kwargs)
    if read.verdict == ModelVerdict.MISMATCH or (strict and not read.ok):
        raise AssertionError(f"{read.module}: {read.summary()}, expected {read.expect}:\n  " +
                             "\n  ".join(read.findings()))
    return read


ATTENTION_CLASS = re.compile("attention|attn", re.IGNORECASE)
NEVER_CALLED = "made no attention call on this input (a cross-attention given no encoder states, or a branch not taken)"
NOT_MEASURED_WHY = {
    "additive term": "an additive term (a bias or position term) beside the factor: {detail}",
    "varies per query row": "the factor moves with the query row: {detail}",
}


def attention_modules(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(name, class) of every module whose class is an attention: by its name, or torch's nn.MultiheadAttention;
    "" is the module itself.  Outer ones come before the ones inside them."""
    return [(name, type(sub).__name__) for name, sub in module.named_modules()
            if isinstance(sub, torch.nn.MultiheadAttention) or ATTENTION_CLASS.search(type(sub).__name__)]


def inside(name: str, outer: str) -> bool:
    return outer == "" or name == outer or name.startswith(outer + ".")


def judge_call(read: AttentionRead, expected: Expectation) -> AttentionRead:
    """The call with its verdict and finding against ``expected`` (a new read)."""
    if read.form == "constant" and read.factor is not None:
        verdict, finding = judge_factor(read.factor, expected, read.d_k)
        return replace(read, expected=expected.factor(read.d_k), verdict=verdict, finding=finding)
    if read.form == "QK-norm" and read.cosine_logit is not None:
        verdict, finding = judge_cosine_logit(read.cosine_logit, expected, read.d_k)
        return replace(read, expected=expected.cosine_logit(read.d_k), verdict=verdict, finding=finding)
    if read.form == "not finite":
        return replace(read, verdict=Verdict.MISMATCH, finding=f"attention is not finite: {read.detail}")
    why = NOT_MEASURED_WHY.get(read.form, "{detail}").format(detail=read.detail or read.form)
    return replace(read, verdict=Verdict.NOT_MEASURED, finding=why)


def judge(result: ModuleProbe, module: torch.nn.Module, expected: Expectation) -> ModuleProbe:
    """One verdict per attention module (a call outside every attention module counts as its own), and the
    module's: ok only when every one was measured and matches.  Returns a new probe; ``result`` is left as read."""
    every = attention_modules(module)
    outermost = [(name, cls) for name, cls in every if not any(other != name and inside(name, other)
                                                               for other, _ in every)]

    def called(name: str) -> bool:
        return any(inside(read.module, name) for read in result.calls)

    # an attention module inside another that made no call (a block's cross-attention never fed) counts on its own,
    # not measured: its sibling's call must not stand for it (the outermost such, inside a module that made calls)
    quiet = [(name, cls) for name, cls in every if (name, cls) not in outermost and not called(name)]
    silent = [(name, cls) for name, cls in quiet if not any(other != name and inside(name, other) for other, _ in quiet)
              and all(called(outer) for outer, _ in outermost if inside(name, outer))]
    classes = {name: type(sub).__name__ for name, sub in module.named_modules()}
    units = {name: cls for name, cls in outermost + silent}
    reads = [judge_call(read, expected) for read in result.calls]
    owners = []
    for read in reads:
        owner = next((name for name, _ in outermost if inside(read.module, name)), None)
        if owner is None:
            owner = read.module
            units.setdefault(owner, classes.get(owner, result.module))
        owners.append(owner)
    modules = [module_judged(name, cls, [read for read, owner in zip(reads, owners) if owner == name])
               for name, cls in units.items()]
    verdicts = [unit.verdict for unit in modules] + [Verdict.NOT_MEASURED] * bool(result.unread)
    return replace(result, expect=expected.spec, calls=reads, modules=modules, verdict=model_verdict(verdicts))


def module_judged(name: str, cls: str, calls: list[AttentionRead]) -> AttentionModule:
    """One attention module's verdict from its judged calls: a mismatch in any, else not measured in any, else ok;
    with the findings of the calls behind it (never called: not measured)."""
    if not calls:
        return AttentionModule(name, cls, 0, Verdict.NOT_MEASURED, [NEVER_CALLED])
    verdicts = {read.verdict for read in calls}
    verdict = (Verdict.MISMATCH if Verdict.MISMATCH in verdicts else
               Verdict.NOT_MEASURED if Verdict.NOT_MEASURED in verdicts else Verdict.OK)
    return AttentionModule(name, cls, len(calls), verdict,
                           list(dict.fromkeys(read.finding for read in calls if read.verdict == verdict and read.finding)))


def read_softmax(recorder: _Recorder, where: str, logits: torch.Tensor) -> None:
    """A softmax: an attention call if its input is the product just before it (and that product is not one with a
    weight of the module: a router's or a classifier's softmax(x W))."""
    result, product = recorder.result, recorder.last_product
    if product is not None and product[4] and product[3].numel() == logits.numel():
        result.other_softmax.append(f"{where}: a softmax over {tuple(logits.shape)} of a product with a weight of the "
                                    "module (a router or a classifier), not q·k")
        recorder.last_product = None
        return
    if product is None or product[3].numel() != logits.numel():
        result.unread.append(f"a softmax in {where} over {tuple(logits.shape)} whose input is no matrix product just "
                             "before it")
        return
    _, a, b, out, _ = product
    # float64 copies of the logits and the product, masks and ratios; then each earlier product matched in float64
    recorder.check_room(READ_BYTES_PER_LOGIT * logits.numel() + largest_match_bytes(recorder.products))
    read = _softmax_read(where, logits, a, out)
    q_vectors = a.reshape(-1, a.shape[-1])
    k_vectors = b.transpose(-1, -2).reshape(-1, b.shape[-2])
    result.calls.append(_fold(read, q_vectors, k_vectors, recorder.products[:-1]))
    dropped = recorder.products.pop()[1]  # the logits' own product: never where a later call's q or k comes from
    recorder.kept_bytes -= dropped.nbytes
    if recorder.keep_tensors:
        lead = logits.shape[:-2]
        q = a.reshape(*lead, a.shape[-2], a.shape[-1])
        k = b.transpose(-1, -2).reshape(*lead, b.shape[-1], b.shape[-2])
        factor = read.factor_at_call if read.factor_at_call is not None else math.nan
        kept_logits = recorder.keep(logits)
        result.tensors.append((read.module, Observation(q, k, kept_logits, torch.softmax(kept_logits.double(), dim=-1),
                                                        factor)))
    recorder.last_product = None


READ_BYTES_PER_LOGIT = 64   # float64 logits and product, masks, ratios and their spread: up to 8 float64 copies
MATCH_BYTES_PER_VALUE = 24  # a product's output in float64 and its vectors' norms and directions


def largest_match_bytes(products: list[tuple[str, torch.Tensor]]) -> int:
    """The working memory of matching a call's q and k against the products before it (one at a time)."""
    return MATCH_BYTES_PER_VALUE * max((output.numel() for _, output in products), default=0)


def read_fused(recorder: _Recorder, where: str, func, args: tuple, kwargs: dict, finite: bool) -> None:
    """A fused SDPA call: its factor measured on designed inputs, what was done to its q and k read from the
    products before it."""
    recorder.check_room(largest_match_bytes(recorder.products))
    read, q_vectors, k_vectors = _sdpa_read(where, func, args, kwargs, finite)
    recorder.result.calls.append(_fold(read, q_vectors, k_vectors, recorder.products))
    if recorder.keep_tensors:
        kept = tuple(recorder.keep(a) if isinstance(a, torch.Tensor) else a for a in args[:2]) + args[2:]
        recorder.result.tensors.append(_sdpa_tensors(read.module, read.factor_at_call, kept, kwargs))
