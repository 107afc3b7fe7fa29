"""The scale audit: the factor every attention layer applies, measured, against the config.

For one model (a tiny random-init member of a transformers family, or a local folder), fed as
:mod:`.feed` finds it runs (its :class:`.feed.Feeding` record goes with it through every pass),
under each attention backend it accepts, per attention call:

* the attention function's factor on q.k, its soft cap (:mod:`.attention_function`), measured by
  calling the backend's own function with the module's mask and arguments on designed
  q, k, v (two keys, never one);
* the whole path from the q and k projections (:mod:`.whole_path`): its factor along the head's
  first and last coordinate, whether it is linear in q and k or normalises them (QK-norm),
  and whether it moves with the query index, the position ids or the sequence length;
* what the config declares (:mod:`.declared`), and whether the two agree;
* backend parity: the model's output under each backend against eager.

A family's verdict: ``ok``; ``mismatch`` (eager measures a factor or cap the config does not
declare); ``backend disagreement`` (a backend applies another factor or cap than eager, or
its output differs beyond the dtype's tolerance); ``not measured`` (no attention call could
be read).  :func:`audit_callable` measures any Python attention function the same way.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import UserError
from ..memory import fits, format_bytes, require_memory
from ..scale_check import Verdict, expectation, judge_factor
from ..probing.intercept import (NoEagerFunction, final_hidden, intercept_attention, run_attention, set_attn_implementation,
                                 uncompiled_flex)
from ..probing.loading import (BUILD_ERRORS, check_model_dir, check_weights, estimated_bytes, load_config,
                               quiet_transformers, read_json)
from ..threads import torch_threads
from . import attention_function, families, feed, inline, positions, qk_norm, sizes, whole_path
from . import declared as declared_rules
from .feed import FED_TEXT, INPUT_KINDS, LONGER_TOKENS, TOKENS, Feeding, box_refused, first_inputs, is_fed
from .record import (NOT_INTERCEPTED, NOT_MEASURED, BackendLayer, FamilyAudit, LayerReading, Mechanism, MechanismKind,
                     Readings, SkipKind, Status, is_intercepted_nowhere, kind_of, no_factor)
from .sizes import RUN_RETRIES
from .source_lines import class_source_lines
from .towers import rely_on_towers
from .verdicts import DEFAULT_BACKENDS, DEPENDENCE_TOL, NOT_FINITE, PARITY_TOL, agree, caps_differ, judge, judged_far

NO_CALL = "no attention function was called"  # attention computed inline: read from its weights instead


class NoAttentionCall(UserError):
    """A pass under a backend called no attention function: its attention is computed inline."""


FAR_POSITION = 65536  # past the original context of YaRN / Llama-4-style position temperatures


# ---------------------------------------------------------------------------------------
# One backend: the attention function and the whole path of every attention call.

def call_key(call) -> tuple:
    """Calls with the same module class, arguments and shapes apply the same function."""
    scalars = tuple(sorted((k, v) for k, v in call.kwargs.items() if isinstance(v, (int, float, str, bool, type(None)))))
    mask = tuple(call.mask.shape) if isinstance(call.mask, torch.Tensor) else type(call.mask).__name__
    return type(call.module).__name__, scalars, mask, tuple(call.query.shape), tuple(call.key.shape)


def function_results(calls) -> list[dict]:
    cache: dict = {}
    out = []
    for call in calls:
        key = call_key(call)
        if key not in cache:
            try:
                cache[key] = attention_function.analyse(attention_function.call_measure(call), call.query.shape[-1]).to_dict()
            except (RuntimeError, ValueError, TypeError, IndexError) as error:
                cache[key] = {"factor": float("nan"), "nonlinearity": "not measurable", "cap": None,
                              "error": families.first_line(error)}
        # per call, not per key: sinks reach the function as tensors (GPT-OSS's s_aux), which the key leaves out
        try:
            sink = attention_function.sink_probe(call).to_dict()
        except (RuntimeError, ValueError, TypeError, IndexError):
            sink = None
        out.append({**cache[key], "sink": sink})
    return out


def probe_tokens(model, calls) -> int:
    """The sequence length of the designed passes: TOKENS for token ids; for images, the length the
    first attention call sees (patches, and a class token where the family has one)."""
    return TOKENS if feed.main_input(model) == "input_ids" else int(calls[0].query.shape[-2])


def choose_layouts(model, feeding: Feeding, backend: str, calls, units: dict) -> tuple[dict, list | None]:
    """The first candidate layout per attention module that passes the check on what reaches
    the attention function (modules with none are left out), and the designed calls of the
    trial where every module passed at once (None otherwise)."""
    if feed.main_input(model) == feed.PATCHES:  # one packed sequence: no batch axis for the designs
        return {}, None
    candidates = {id(c.module): whole_path.candidate_layouts(c.module, c.query.shape, c.key.shape) for c in calls}
    chosen, pending = {}, {key: list(options) for key, options in candidates.items() if options}
    vocab = getattr(model.config, "vocab_size", None) or 100
    first_run = None
    trials = 0
    while pending:
        trial = {key: options.pop(0) for key, options in pending.items()}
        try:
            designed = designed_calls(model, feeding, backend, trial, units, whole_path.DESIGNS, probe_tokens(model, calls),
                                      vocab)
        except (RuntimeError, ValueError, IndexError, TypeError):
            designed = []
        checked = {}
        for call in designed:
            checked.setdefault(id(call.module), []).append(
                whole_path.layout_holds(call.query, call.key, len(whole_path.DESIGNS)))
        for key, layout in trial.items():
            if checked.get(key) and all(checked[key]):
                chosen[key] = layout
                pending.pop(key)
        if trials == 0 and len(chosen) == len(trial):
            first_run = designed
        trials += 1
        pending = {key: options for key, options in pending.items() if options}
    return chosen, first_run


def far_position(config, tokens: int) -> int:
    """FAR_POSITION for RoPE models; learned position tables stop at max_position_embeddings."""
    if getattr(config, "rope_parameters", None):
        return FAR_POSITION
    maximum = getattr(config, "max_position_embeddings", None)
    return min(FAR_POSITION, maximum - 8) if isinstance(maximum, int) and maximum > 16 else 2


def designed_calls(model, feeding: Feeding, backend: str, layouts: dict, units: dict, designs, tokens: int, vocab: int):
    """The calls of one forward pass of the designs with the projections overwritten (each call's ``output``
    computed with the designed values).  Where the model's rotary embedding reads the largest position id of the
    whole batch (Phi-MoE's long or short mscale), the designs at the far position run in a pass of their own, so
    that they do not set the factor of the designs at position 0; the calls come back as one pass would give them."""
    far_rows = [index for index, design in enumerate(designs) if design.position < 0]
    groups = [list(range(len(designs)))]
    if far_rows and len(far_rows) < len(designs) and reads_batch_maximum(model):
        groups = [[index for index in range(len(designs)) if index not in far_rows], far_rows]
    size = feeding.designs_per_pass or len(designs)  # a model too large for every design at once runs them in parts
    groups = [group[start:start + size] for group in groups for start in range(0, len(group), size)]
    if len(groups) == 1:
        return one_designed_pass(model, feeding, backend, layouts, units, designs, tokens, vocab)
    parts = [(rows, one_designed_pass(model, feeding, backend, layouts, units, [designs[i] for i in rows], tokens, vocab))
             for rows in groups]
    return merged_calls(parts, len(designs))


BATCH_MAXIMUM = "torch.max(position_ids)"  # modeling_phimoe.py: seq_len = torch.max(position_ids) + 1, then its mscale


def reads_batch_maximum(model) -> bool:
    """Whether a rotary embedding of the model sets its factor from the largest position id of the whole batch."""
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            try:
                code = inspect.getsource(type(module).forward)  # a decorated forward is read unwrapped
            except (OSError, TypeError):
                continue
            if BATCH_MAXIMUM in code:
                return True
    return False


def merged_calls(parts: list[tuple[list[int], list]], designs: int) -> list:
    """The calls of passes over parts of the designs ((design indices, calls) each), as one pass over all the
    designs would give them: each tensor's batch axis (designs x windows, design first) in the designs' order."""
    counts = {len(calls) for _, calls in parts}
    if len(counts) != 1:
        raise ValueError(f"the passes over parts of the designs made different numbers of attention calls: {counts}")
    merged = []
    for calls in zip(*(calls for _, calls in parts)):
        tensors = {}
        for name in ("query", "key", "value", "output"):
            pieces = [getattr(call, name) for call in calls]
            if any(piece is None for piece in pieces):
                tensors[name] = None
                continue
            blocks = [None] * designs
            for (rows, _), piece in zip(parts, pieces):
                size = piece.shape[0] // len(rows)
                if size * len(rows) != piece.shape[0]:  # a tensor that does not grow with the designs: no order
                    raise ValueError(f"{calls[0].name}: a {name} of batch {piece.shape[0]} for {len(rows)} designs")
                for order, row in enumerate(rows):
                    blocks[row] = piece[order * size:(order + 1) * size]
            tensors[name] = torch.cat(blocks)
        merged.append(dataclasses.replace(calls[0], **tensors))
    return merged


def one_designed_pass(model, feeding: Feeding, backend: str, layouts: dict, units: dict, designs, tokens: int,
                      vocab: int):
    far = far_position(model.config, tokens)
    handles = whole_path.install(layouts, units, designs, tokens, next(model.parameters()).dtype)
    handles += whole_path.pin_beside_positions(model, designs, far) + watch_rotaries(model, feeding)
    try:
        inputs = feed.path_inputs(model, feeding, designs, tokens, far, vocab)
        rewrite = lambda module, q, k, v: (q, k, whole_path.designed_values(v))  # noqa: E731
        _, calls = run_attention(model, inputs, backend=backend, rewrite=rewrite, keep_weights=False)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def rotary_unpinned(model, feeding: Feeding, module=None) -> bool:
    """RoPE that the designed passes cannot pin: the model rotates q and k by positions it does not
    take as position_ids (an audio encoder counts its frames), so the designed keys at positions
    0 and 1 and a query at position t differ by a rotation of t, not by the factor alone.  The
    attention ``module``'s own config is read beside the model's: a composite's part rotates under
    its sub-config (SAM 3's ViT inside its tracker)."""
    configs = [model.config, getattr(module, "config", None)]
    rope = any(declared_rules.rope_parameters_for(config, None) for config in configs if config is not None)
    if not rope:
        return False
    if feed.main_input(model) != "input_ids" and not feed.accepts(model, "position_ids"):
        return True
    return numbers_own_positions(feeding, module)


def numbers_own_positions(feeding: Feeding, module) -> bool:
    """An attention ``module`` whose RoPE the designed passes did not pin: a rotary embedding built from the
    same config as the module was handed positions that vary over the tokens in a designed pass (where
    every token of a design is at one position), so that part numbers its positions itself (Dots3-Note's
    audio tower, BLT's global transformer; not BLT's byte encoder, which takes the position_ids given)."""
    own = getattr(module, "config", None)
    return own is not None and id(own) in feeding.unpinned


def watch_rotaries(model, feeding: Feeding) -> list:
    """Hooks on the model's rotary embeddings that record (in ``feeding.unpinned``) the config of each
    one handed positions that vary over the tokens; their handles."""
    seen = feeding.unpinned

    def watch(module, args, kwargs):
        positions = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
        if (isinstance(positions, torch.Tensor) and not positions.is_floating_point() and positions.dim() >= 2
                and positions.shape[-1] > 1 and bool((positions != positions[..., :1]).any())):
            seen.add(id(getattr(module, "config", None)))
    return [module.register_forward_pre_hook(watch, with_kwargs=True) for module in model.modules()
            if type(module).__name__.endswith("RotaryEmbedding") and getattr(module, "config", None) is not None]


def path_results(model, feeding: Feeding, backend: str, calls, layouts: dict, units: dict, main=None) -> list[dict | None]:
    """The whole path's numbers per attention call (None where no layout was found); ``main``:
    the designed calls of :data:`whole_path.DESIGNS` when already run."""
    if not layouts or rotary_unpinned(model, feeding):
        return [None] * len(calls)
    vocab = getattr(model.config, "vocab_size", None) or 100
    runs = {"main": main}
    plan = [("main", whole_path.DESIGNS, probe_tokens(model, calls))]
    if feed.main_input(model) == "input_ids":  # an image has one length at its size
        plan.append(("longer", whole_path.LENGTH_DESIGNS, LONGER_TOKENS))
    for name, designs, tokens in plan:
        if runs.get(name) is not None:
            continue
        try:
            runs[name] = designed_calls(model, feeding, backend, layouts, units, designs, tokens, vocab)
        except (RuntimeError, ValueError, IndexError, TypeError):
            runs[name] = None
    positions = feed.accepts(model, "position_ids")
    counts = {"main": len(whole_path.DESIGNS), "longer": len(whole_path.LENGTH_DESIGNS)}

    def rows_of(name, index, key):
        run = runs.get(name)
        ok = run is not None and index < len(run) and id(run[index].module) == key
        return whole_path.design_rows(run[index].output, counts[name]) if ok else None

    out = []
    for index, call in enumerate(calls):
        key = id(call.module)
        rows = rows_of("main", index, key) if key in layouts and not rotary_unpinned(model, feeding, call.module) else None
        if rows is None:
            out.append(None)
            continue
        summary = whole_path.summarize(rows, whole_path.logit_unit(units, key), rows_of("longer", index, key), positions)
        summary["layout"] = layouts[key].name
        if "clip" in units:
            summary["designed_rms"] = designed_rms(runs["main"][index])
        out.append(summary)
    return out


def designed_rms(call) -> float:
    """The largest root-mean-square coordinate of a designed q or k vector at the product: what a clip of q and k
    saw of the dense designs (:func:`.whole_path.head_vectors`, even over the coordinates: each coordinate is
    this size before RoPE turns their pairs, which leaves the vector's length alone)."""
    return float(max((tensor.detach().double().norm(dim=-1) / tensor.shape[-1] ** 0.5).max()
                     for tensor in (call.query, call.key)))


def parity_of(hidden: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest |difference| of two final hidden states over the largest |reference| entry."""
    return float((hidden - reference).abs().max() / reference.abs().max().clamp_min(1e-30))


def differing_positions(hidden: torch.Tensor, reference: torch.Tensor, tol: float) -> list[int]:
    """The token positions (of the first batch entry) whose output differs from the reference
    beyond ``tol`` relative to the largest |reference| entry: where a reproduction should look."""
    if hidden.shape != reference.shape or hidden.dim() < 2:
        return []
    scale = reference.abs().max().clamp_min(1e-30)
    per_position = ((hidden - reference).abs() / scale).reshape(hidden.shape[0], hidden.shape[1], -1).amax(dim=-1)[0]
    return [int(t) for t in torch.nonzero(per_position > tol).flatten()]


def backend_pass(model, feeding: Feeding, backend: str, reference_hidden, inputs, units: dict, layouts: dict | None):
    """Everything measured under one backend; raises ValueError if the family refuses it."""
    with torch.no_grad(), intercept_attention(model, backend=backend, keep_weights=False) as calls:
        outputs = model(**inputs)
    hidden = final_hidden(outputs)
    parity = None
    if reference_hidden is not None:
        parity = parity_of(hidden, reference_hidden)
    if not calls:
        raise NoAttentionCall(f"{NO_CALL} under {backend}")
    functions = function_results(calls)
    main = None
    if layouts is None:
        for call, result in zip(calls, functions):
            factor = result.get("factor")
            scale = abs(factor) if factor and math.isfinite(factor) else call.query.shape[-1] ** -0.5
            units.setdefault(id(call.module), min(0.1 / scale, units.get("clip", math.inf) / 4))
        feeding.designs_per_pass = designs_per_pass(calls)
        too_large = designs_too_large(calls) if not feeding.designs_per_pass else ""
        packed = feed.main_input(model) == feed.PATCHES  # no designed pass runs: said as packed, not as a cost
        feeding.too_large = too_large or ("" if packed else designs_too_costly(model, calls))
        layouts, main = ({}, None) if feeding.too_large else choose_layouts(model, feeding, backend, calls, units)
    return calls, hidden, parity, functions, path_results(model, feeding, backend, calls, layouts, units, main), layouts


def designed_pass_bytes(calls, designs: int, at_once: int | None = None) -> int:
    """What the designed passes of ``designs`` inputs hold at their peak, ``at_once`` of them a pass (default: all),
    from the plain pass's attention calls: every call's q, k, v and output, which the intercept keeps for every design
    (twice where passes in parts are merged into one), and beside them the largest call's logits, probabilities and
    a copy (float32, per head and query-key pair) for the designs of one pass; each for every entry of the call's own
    batch (a video tower folds its frames into the batch: each design runs them all)."""
    at_once = at_once or designs
    kept, largest = 0, 0
    for call in calls:
        heads, queries, width = call.query.shape[-3], call.query.shape[-2], call.query.shape[-1]
        keys = call.key.shape[-2]
        batch = math.prod(call.query.shape[:-3])
        kept += batch * heads * 2 * (queries + 2 * keys) * width * 4
        largest = max(largest, batch * heads * 3 * queries * keys * 4)
    return (1 if at_once >= designs else 2) * designs * kept + at_once * largest


def designs_per_pass(calls) -> int:
    """The most designs one designed pass can run within the free memory (0: not even one): all of
    :data:`whole_path.DESIGNS` at once where they fit, else as many as fit, the passes run one after another."""
    designs = len(whole_path.DESIGNS)
    at_once = designs
    while at_once and not fits(designed_pass_bytes(calls, designs, at_once)):
        at_once -= 1
    return at_once


def designs_too_large(calls) -> str:
    """Why the whole path is not driven on this model: not even one design a pass fits in the free memory."""
    needed = designed_pass_bytes(calls, len(whole_path.DESIGNS), 1)
    return (f"the designed passes would need about {format_bytes(needed)} ({calls_text(calls)}, "
            f"{len(whole_path.DESIGNS)} designs, one a pass), more than the free memory holds: the whole path is not "
            "measured")


def calls_text(calls) -> str:
    return f"{len(calls)} attention calls of up to {max(call.query.shape[-2] for call in calls)} queries"


def designed_pass_flop(model, calls, designs: int) -> float:
    """About what ``designs`` designed inputs cost the model: 2 x parameters per token for its linear maps, at the most
    tokens any attention call ran at once (its batch x queries: a video tower's 16 frames of 256 patches), and each
    call's two products (q.k and p.v), 4 x queries x keys x width per head and batch entry."""
    tokens = max(math.prod(call.query.shape[:-3]) * call.query.shape[-2] for call in calls)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    products = sum(4 * math.prod(call.query.shape[:-1]) * call.key.shape[-2] * call.query.shape[-1] for call in calls)
    return designs * (2 * parameters * tokens + products)


def designs_too_costly(model, calls) -> str:
    """Why the whole path is not driven on this model under one backend: its designed passes cost more than
    :data:`.sizes.DESIGN_FLOP_BUDGET` ("" where they do not), said before any of them runs."""
    designs = len(whole_path.DESIGNS) + (len(whole_path.LENGTH_DESIGNS) if feed.main_input(model) == "input_ids" else 0)
    flop, budget = designed_pass_flop(model, calls, designs), sizes.design_flop_budget()
    if flop <= budget:
        return ""
    return (f"the designed passes would cost about {flop / 1e12:.0f} TFLOP ({calls_text(calls)}, {designs} designs), "
            f"beyond the {budget / 1e12:g} TFLOP the audit spends on a model's designed passes "
            f"(ATTNSCALE_DESIGN_TFLOP={math.ceil(flop / 1e12)} runs them): the whole path is not measured")


# ---------------------------------------------------------------------------------------
# One model.

def layer_index(module, fallback: int) -> int:
    value = getattr(module, "layer_idx", None)
    return value if isinstance(value, int) else fallback


def declared_of(model, call, fallback_index: int, model_type: str) -> declared_rules.Declared:
    config = config_of(model, call)
    index = layer_index(call.module, fallback_index)
    per_layer = getattr(config, "per_layer_config", None)
    if per_layer is not None:
        try:
            config = per_layer[index]
        except (IndexError, KeyError, TypeError, ValueError, AttributeError):  # a config with no layer count
            pass
    layer_type = getattr(call.module, "layer_type", None) or getattr(call.module, "attention_type", None)
    if layer_type is None:
        types = getattr(config, "layer_types", None)
        layer_type = types[index] if isinstance(types, (list, tuple)) and index < len(types) else None
    return declared_rules.declared_for(config, model_type, index, layer_type if isinstance(layer_type, str) else None,
                                       int(call.query.shape[-1]), declared_rules.source_for(call.module),
                                       module=call.module)




def audit_model(model, family: str, backends=DEFAULT_BACKENDS, seed: int = 0,
                model_type: str | None = None, feeding: Feeding | None = None) -> FamilyAudit:
    """Audit one model (eval mode, CPU) under ``backends`` (eager always runs first); ``family``
    names it in the result, ``model_type`` (default: the config's) selects the declared rules; ``feeding``:
    what feeding it has found so far (a composite's media; a first pass's findings), else found here.

    Read (every backend's pass, the layers, what no layer read), then judge, then the record, made once."""
    feeding = feeding if feeding is not None else Feeding()
    start = time.perf_counter()
    model_type = model_type or getattr(model.config, "model_type", family)
    readings = read_model(model, family, backends, seed, model_type, feeding)
    judgement = judge(readings)
    status, skip, reason, findings = Status.AUDITED, SkipKind.NONE, "", list(judgement.findings)
    mechanisms = list(dict.fromkeys(u["mechanism"] for u in readings.unread_attention if not is_intercepted_nowhere(u)))
    if has_no_factor(judgement.verdict, readings.unread_attention):
        status, skip, reason = Status.SKIPPED, SkipKind.NO_SOFTMAX, f"{NO_SOFTMAX} ({'; '.join(mechanisms)})"
    elif judgement.verdict == NOT_MEASURED and mechanisms:  # what the code shows it computes, said beside why
        findings += [f"its attention, read from the code: {mechanism}" for mechanism in mechanisms]
    if judgement.verdict == NOT_MEASURED and not reason:  # a record never says "not measured" without why
        reason = not_measured_because(findings, readings.backends)
    return FamilyAudit(family, readings.model_class, status=status, reason=reason, seconds=time.perf_counter() - start,
                       backends=readings.backends, layers=readings.layers, verdict=judgement.verdict, findings=findings,
                       source_lines=readings.source_lines, unread_attention=readings.unread_attention, skip=skip)


def read_model(model, family: str, backends, seed: int, model_type: str, feeding: Feeding) -> Readings:
    """Every backend's pass over the first inputs and the designed ones, the layers read from them (from the
    attention weights where no attention function is called), and the attention modules no layer read."""
    model_class = type(model).__name__
    takes = feed.main_input(model)
    if not is_fed(takes):
        # a time-series or other model: say what it takes instead of failing on token ids
        return Readings(family, model_class, {"eager": {
            "accepted": False, "parity": None,
            "reason": f"takes {takes} ({INPUT_KINDS.get(takes, 'not token ids')}); the audit feeds {FED_TEXT} only"}})
    order = ["eager", *[b for b in backends if b != "eager"]]
    inputs = first_inputs(model, feeding)
    units = whole_path.inside_clip({}, declared_rules.clip_of(model.config))
    layouts, reference, measured, passes, layers = None, None, {}, {}, []
    with quiet_transformers(), torch_threads(1), torch.random.fork_rng(devices=[]), uncompiled_flex():
        for backend in order:
            torch.manual_seed(seed)  # every backend sees the same random draws (ViT-MAE masks patches at random)
            try:
                calls, hidden, parity, functions, wholes, layouts = backend_pass(model, feeding, backend, reference,
                                                                              inputs, units, layouts)
            except (ValueError, RuntimeError, TypeError, KeyError, AttributeError, IndexError, ImportError) as error:
                if backend == "eager" and (isinstance(error, (NoAttentionCall, NoEagerFunction))):
                    layers, inline_passes = inline_attention(model, feeding, model_type, order, inputs, units)
                    passes.update(inline_passes)
                    break
                passes[backend] = {"accepted": False, "reason": families.first_line(error), "parity": None}
                if backend == "eager":
                    break
                continue
            if backend == "eager":
                reference = hidden
            not_finite = isinstance(hidden, torch.Tensor) and not bool(torch.isfinite(hidden).all())
            passes[backend] = {"accepted": True, "reason": "", "parity": parity, "calls": len(calls),
                               **({"output": NOT_FINITE} if not_finite else {}),
                               **({"positions": differing_positions(hidden, reference, PARITY_TOL[torch.float32])}
                                  if reference is not None and backend != "eager" else {})}
            measured[backend] = (calls, functions, wholes)
    if "eager" in measured:
        layers = layer_rows(model, feeding, model_type, measured)
    source_lines = declared_rules.scaling_lines(model) if layers else []
    unread = unread_attention(model, layers)
    if layers:
        with quiet_transformers(), torch_threads(1), torch.random.fork_rng(devices=[]), uncompiled_flex():
            torch.manual_seed(seed)
            layers, unread = inline_beside(model, feeding, model_type, layers, unread)
    return Readings(family, model_class, passes, layers, source_lines, box_refused(feeding, unread))


def not_measured_because(findings: list[str], backends: dict) -> str:
    """Why an audited model has no reading: what its judge found (the eager pass's refusal first), or eager's reason."""
    eager = backends.get("eager") or {}
    return "; ".join(findings) or eager.get("reason") or "no attention layer was read"


def inline_declared(model, family: str):
    """What the config declares for a module whose attention is read from its weights."""
    def declared(module, index, d_k):
        config = getattr(module, "config", None) or model.config
        width = getattr(module, "embed_dim", None)
        return declared_rules.declared_for(config, family, layer_index(module, index), None, d_k,
                                           declared_rules.source_for(module), width if isinstance(width, int) else None,
                                           module)
    return declared


def inline_beside(model, feeding: Feeding, family: str, layers: list, unread: list) -> tuple[list, list]:
    """Attention modules left unread beside the intercepted calls (a pooling head's torch
    nn.MultiheadAttention, an inline encoder inside a composite) read from their weights where they can
    be: the layers with their rows added, and the modules still unread."""
    names = [u["name"] for u in unread if is_intercepted_nowhere(u)]
    if not names:
        return layers, unread
    try:
        rows = inline.inline_rows(model, feeding, inline_declared(model, family), TOKENS, LONGER_TOKENS,
                                  far_position(model.config, TOKENS), only=names)
    except (ValueError, RuntimeError, TypeError, KeyError, AttributeError, IndexError):
        return layers, unread
    layers = layers + rows
    return layers, unread_attention(model, layers)


def inline_attention(model, feeding: Feeding, family: str, order, inputs, units: dict) -> tuple[list, dict]:
    """A family whose eager pass calls no attention function: the whole path read from its attention weights
    (:mod:`.inline`).  A backend that does call one (GPT-2 with reorder_and_upcast_attn computes eager inline and
    hands sdpa to the function) is measured there as any family's, beside the weights' reading; a backend that
    computes inline too gets its output compared with eager's.  Returns the layers and each backend's pass."""
    try:
        layers = inline.inline_rows(model, feeding, inline_declared(model, family), TOKENS, LONGER_TOKENS,
                                    far_position(model.config, TOKENS))
    except (ValueError, RuntimeError, TypeError, KeyError, AttributeError, IndexError) as error:
        return [], {"eager": {"accepted": False, "reason": f"inline attention: {families.first_line(error)}",
                              "parity": None, "inline": True}}
    passes = {"eager": {"accepted": True, "reason": "inline attention: weights read", "parity": None, "inline": True}}
    with torch.no_grad():
        reference = final_hidden(model(**inputs))
    index_of = {row.name: index for index, row in enumerate(layers)}
    for backend in order[1:]:
        try:
            calls, hidden, parity, functions, wholes, _ = backend_pass(model, feeding, backend, reference, inputs, units,
                                                                       None)
        except (ValueError, RuntimeError, TypeError, KeyError, AttributeError, IndexError, ImportError) as error:
            passes[backend] = (output_compared(model, backend, inputs, reference) if isinstance(error, NoAttentionCall)
                               else {"accepted": False, "reason": families.first_line(error), "parity": None})
            continue
        for call, function, whole in zip(calls, functions, wholes):
            index = index_of.get(call.name)
            if index is not None and backend not in layers[index].backends:
                layers[index] = dataclasses.replace(layers[index], backends={**layers[index].backends,
                                                                             backend: BackendLayer(function, whole)})
        passes[backend] = {"accepted": True, "reason": "", "parity": parity, "calls": len(calls),
                           "positions": differing_positions(hidden, reference, PARITY_TOL[torch.float32])}
    return layers, passes


def output_compared(model, backend: str, inputs, reference) -> dict:
    """A backend that computes attention inline as eager does: its final hidden states against eager's."""
    previous = model.config._attn_implementation
    try:
        set_attn_implementation(model, backend)
        with torch.no_grad():
            hidden = final_hidden(model(**inputs))
        return {"accepted": True, "reason": "inline attention: output compared only", "parity": parity_of(hidden, reference),
                "inline": True}
    except (ValueError, RuntimeError, TypeError, KeyError, AttributeError, IndexError, ImportError) as error:
        return {"accepted": False, "reason": families.first_line(error), "parity": None}
    finally:
        set_attn_implementation(model, previous)


NO_SOFTMAX = SkipKind.NO_SOFTMAX.value  # how the reason of a family whose attention has none begins
DEFORMABLE_PARTS = ("sampling_offsets", "attention_weights")  # Deformable DETR's linear maps of the query
DEFORMABLE = no_factor("deformable attention: weights from a linear map of the query, a softmax over sampling "
                       "points; no q.k product")
# What an attention module computes where its class's code shows it: (a line it contains, the mechanism)
MECHANISMS = (("torch.fft.rfft(query_states", no_factor("autocorrelation (Autoformer): q and k correlated over time delays "
                                                         "by FFT, the top delays' values averaged; no softmax over q.k")),
              ("sparsity_measurement", Mechanism("ProbSparse attention (Informer): only the top u = factor ln(L) queries, "
                                                 "ranked on keys drawn at random, attend; the other rows take the mean "
                                                 "of the values, so the rows read depend on the draw",
                                                 MechanismKind.UNREAD)),
              ("rwkv_linear_attention(", no_factor("WKV recurrence (RWKV): each channel's output a running exp(k)-weighted "
                                                   "average of v with a learned time decay and a bonus for the current "
                                                   "token; no query, no softmax over q.k")),
              ("YosoCumulation.apply(", no_factor("LSH collision expectation (YOSO): q and k normalised, weights "
                                                  "(1 - arccos(q.k) / pi)^hash_code_len, not normalised over the keys; "
                                                  "no softmax over q.k")),
              ("query_weight = query @ self.w_g", no_factor("efficient additive attention (SwiftFormer): q pooled over "
                                                            "tokens by a softmax of q.w_g (a learned vector), times k "
                                                            "elementwise; no q.k between tokens")),
              ("context_scores = torch.nn.functional.softmax(query, dim=-1)",
               no_factor("separable self-attention (MobileViTV2): a one-channel query softmaxed over patches alone "
                         "weights the keys; no q.k product")),
              *((call, no_factor("gated delta rule (GatedDeltaNet, Kimi delta attention): q reads a recurrent state "
                                 "that k and v update under a decay gate; no softmax over q.k"))
                for call in ("chunk_gated_delta_rule(", "recurrent_kimi_delta_attention(")),
              ("attn_weights_intra * current_diagonal_decay",
               no_factor("lightning attention (MiniMax): linear attention, (q.k) times a per-head exponential decay "
                         "over distance within a block, a decayed k^T v state across blocks; no softmax over q.k")),
              ("attn_weight = self.attn_softmax(self.attn_layer(inputs))",
               no_factor("gated attention (PatchTSMixer): a softmax over the features of a linear map of each token "
                         "gates that token elementwise; no q.k")),
              ("mra2_attention(", Mechanism("multi-resolution attention (MRA): exp(q.k / sqrt(head_dim)) over blocks, "
                                            "computed only by its CUDA kernel (its CPU path returns zeros); heads "
                                            "narrower than 32 are zero-padded to 32 first, so its code divides by "
                                            "sqrt(32), not sqrt(d_k)", MechanismKind.UNREAD)))


def mechanism_of(module) -> Mechanism:
    """What an attention module no row reads computes, where that is recognised in its code or its
    parts' (YOSO's YosoAttention holds the YosoSelfAttention that computes it); "not intercepted" otherwise."""
    for part in module.modules():
        if all(isinstance(getattr(part, name, None), torch.nn.Linear) for name in DEFORMABLE_PARTS):
            return DEFORMABLE
        code = declared_rules.source_for(part) or ""
        found = next((mechanism for line, mechanism in MECHANISMS if line in code), None)
        if found:
            return found
    return NOT_INTERCEPTED


def has_no_factor(verdict: str, unread: list[dict]) -> bool:
    """A model none of whose attention could be read (``verdict`` not measured) because none of it has a softmax
    over q.k: every attention module is named by a mechanism with no factor (RWKV, YOSO, SwiftFormer, Autoformer)."""
    return (verdict == NOT_MEASURED and bool(unread)
            and all(kind_of(u) == MechanismKind.NO_FACTOR for u in unread))


def unread_attention(model, layers: list[LayerReading]) -> list[dict]:
    """The model's attention modules (by class name) that no measured row reads: neither a row's
    module, inside one, nor holding one; each named with what it computes where that is recognised
    (deformable attention, autocorrelation, ProbSparse), "not intercepted" otherwise."""
    read = [row.name for row in layers]
    found = []
    for name, module in model.named_modules():
        if not name or not families.is_attention_class(type(module).__name__):
            continue
        if any(r == name or r.startswith(name + ".") or name.startswith(r + ".") for r in read):
            continue
        if any(name.startswith(outer["name"] + ".") for outer in found):  # inside a module already named
            continue
        found.append({"name": name, "class": type(module).__name__, "mechanism": mechanism_of(module)})
    return found


def class_location(module) -> str | None:
    """``transformers/models/<family>/modeling_<family>.py:<line>`` of the module's class (None if unknown)."""
    try:
        path, line = inspect.getsourcefile(type(module)), class_source_lines(type(module))[1]
    except (OSError, TypeError):
        return None
    parts = Path(path).parts
    start = max((i for i, part in enumerate(parts) if part == "transformers"), default=None)
    return f"{'/'.join(parts[start:]) if start is not None else path}:{line}"


ROTARY_UNPINNED = ("RoPE rotates q and k by positions the model does not take as position_ids, so the designed keys "
                   "cannot be put at the query's position")


PACKED = ("the tower takes its images packed into one sequence of patches (no batch axis), so the designed q and k "
          "cannot be written one design per batch entry; the attention function's factor is read from the real call")


def why_no_path(module) -> str:
    """Why the whole path of an attention module could not be driven, as far as its children say."""
    convolutions = [name for name, child in module.named_modules() if isinstance(child, torch.nn.Conv1d)]
    if convolutions:
        return (f"a convolution over positions ({convolutions[0]}) sits between the projections and the product, "
                "so designed keys do not reach it as written")
    return "no q/k projection layout passed the check on what reaches the attention function"


NORMALISED_SPREAD = 1e-3  # per-vector norms of q (or k) this close across tokens: normalised
DISTINCT_VECTORS = 1e-2  # ... where the vectors themselves lie at least this far apart (relative to their norm)


def input_norms(call) -> dict:
    """What the layer's own q and k show where the whole path cannot be driven: whether every
    q (and k) vector has one norm per head (QK-norm), as the spread of the norms over tokens."""
    out, distinct = {}, {}
    for role, tensor in (("q", call.query), ("k", call.key)):
        vectors = tensor.detach().double()
        norms = vectors.norm(dim=-1)  # (B, H, T)
        centre = norms.median(dim=-1).values.clamp_min(1e-300)
        out[f"{role}_norm_spread"] = float(((norms.amax(dim=-1) - norms.amin(dim=-1)) / centre).max())
        out[f"{role}_norm"] = float(norms.median())  # under QK-norm: the length every vector has
        # how far the tokens' vectors lie apart, in every head: vectors alike (a deep layer of a tiny random
        # model, EfficientLoFTR's pooled features) have one norm whatever the layer does
        apart = (vectors - vectors.mean(dim=-2, keepdim=True)).norm(dim=-1).amax(dim=-1) / centre
        distinct[role] = float(apart.min()) >= DISTINCT_VECTORS
    # one vector a head (a single token) has one norm whatever the layer does: nothing to read
    tokens = min(call.query.shape[-2], call.key.shape[-2])
    out["normalised"] = [role for role in ("q", "k") if tokens > 1 and distinct[role]
                         and out[f"{role}_norm_spread"] <= NORMALISED_SPREAD]
    return out


def rows_masked_everywhere(mask) -> list[int] | None:
    """[rows, of rows]: the query rows (first batch entry, every head) in which the mask an attention call
    received masks every key (False, or -inf, at each), whose softmax is NaN; None where it masks no row whole."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or mask.shape[-1] == 0:
        return None
    first = mask[0] if mask.dim() > 2 else mask
    blocked = ~first if first.dtype == torch.bool else torch.isneginf(first)
    whole = blocked.all(dim=-1)
    return [int(whole.sum()), whole.numel()] if bool(whole.any()) else None


def layer_rows(model, feeding: Feeding, family: str, measured: dict) -> list[LayerReading]:
    """Each eager attention call as a :class:`LayerReading`, made once its declaration is complete: the cosine-1
    logit where q and k are read normalised, and the layers that apply a cap some other layer leaves unapplied."""
    calls, eager_functions, eager_wholes = measured["eager"]
    configs = [config_of(model, call) for call in calls]
    inputs = [None if whole is not None else inputs_read(call, function)
              for call, function, whole in zip(calls, eager_functions, eager_wholes)]
    declared = [declared_with_cosine(model, call, declared_of(model, call, index, family).to_dict(),
                                     eager_wholes[index] or cosine_inputs(inputs[index]))
                for index, call in enumerate(calls)]
    declared = caps_skipped_by_design([call.name for call in calls], declared, configs)
    return [LayerReading(name=call.name, layer=layer_index(call.module, index), d_k=int(call.query.shape[-1]),
                         declared=declared[index], backends=backends_of(call, index, measured),
                         source=class_location(call.module),
                         path_missing=None if eager_wholes[index] is not None else path_missing(model, feeding, call),
                         inputs=inputs[index])
            for index, call in enumerate(calls)]


def backends_of(call, index: int, measured: dict) -> dict:
    """Each backend's reading of the eager call ``index`` (a backend whose calls differ there has none)."""
    found = {}
    for backend, (b_calls, functions, wholes) in measured.items():
        if index < len(b_calls) and b_calls[index].module is call.module:
            found[backend] = BackendLayer(functions[index], wholes[index], rows_masked_everywhere(b_calls[index].mask))
    return found


def path_missing(model, feeding: Feeding, call) -> str:
    """Why the whole path of a layer was not read."""
    return feeding.too_large or (PACKED if feed.main_input(model) == feed.PATCHES else
                                 ROTARY_UNPINNED if rotary_unpinned(model, feeding, call.module) else
                                 why_no_path(call.module))


def config_of(model, call):
    return getattr(call.module, "config", None) or model.config


def caps_skipped_by_design(names: list[str], declared: list[dict], configs: list) -> list[dict]:
    """A config's soft cap that some layers built from it apply and another's code never applies (VideoPrism's
    pooling head beside its encoder layers, one vision config) is skipped by that layer by design, not a field the
    code ignores (Gemma 3, whose layers all skip it): its declaration names the layers that apply it (new dicts)."""
    out = []
    for own, config in zip(declared, configs):
        cap = own.get("cap_unapplied")
        applying = [] if cap is None else [name for name, other, other_config in zip(names, declared, configs)
                                           if other_config is config and other["cap"] == cap]
        if applying:
            more = f"{len(applying)} layer(s) of the same config ({applying[0]}, ...)"
            own = {**own, "cap_applied_by": more if len(applying) > 1 else f"{applying[0]}, of the same config"}
        out.append(own)
    return out


def inputs_read(call, function: dict) -> dict:
    """The layer's own q and k where the whole path was not read: QK-norm found from their lengths, and then the
    logit of a cosine-1 pair, the attention function's factor times those lengths."""
    inputs = input_norms(call)
    factor = function.get("factor")
    if inputs["normalised"] == ["q", "k"] and factor is not None and math.isfinite(factor):
        inputs["cosine_temperature"] = factor * inputs["q_norm"] * inputs["k_norm"]
    return inputs


def cosine_inputs(inputs: dict | None) -> dict | None:
    """A layer's own q and k read normalised stand, for its declaration, where a normalised whole path would."""
    return {"form": "q and k normalised"} if inputs and "cosine_temperature" in inputs else None


def declared_with_cosine(model, call, declared: dict, eager_path: dict | None) -> dict:
    """Where q and k are read normalised (the whole path, or the layer's own q and k) and the config declares no
    temperature of its own (Swin V2's logit_scale), the declaration with the cosine-1 logit its factor, norms and
    multipliers declare (:mod:`.qk_norm`); else the declaration as it is."""
    if not eager_path or eager_path["form"] != "q and k normalised" or declared["cosine_temperature"] is not None:
        return declared
    found = qk_norm.declared_cosine(call.module, config_of(model, call), declared_rules.source_for(call.module) or "",
                                    declared["path_first"], int(call.query.shape[-1]), model)
    if found is None:
        return declared
    return {**declared, "cosine_temperature": found.value, "cosine_from": found.text,
            "rules": [*declared["rules"], "QK_NORM_LENGTHS"], "fields": {**declared["fields"], **found.fields}}


# ---------------------------------------------------------------------------------------
# Families and callables.

def audit_family(model_type: str, backends=DEFAULT_BACKENDS, seed: int = 0, **overrides) -> FamilyAudit:
    """Build the family's tiny random-init model (``overrides`` set config fields) and audit it."""
    start = time.perf_counter()
    try:
        model, feeding = tiny_model_fed(model_type, seed, overrides)
    except families.CannotAudit as reason:
        return FamilyAudit(model_type, status=Status.SKIPPED, reason=str(reason), skip=reason.kind,
                           seconds=time.perf_counter() - start,
                           towers=reason.towers, own_attention=reason.own_attention)
    try:
        result = audit_model(model, model_type, backends, seed, feeding=feeding)
    except Exception as error:  # noqa: BLE001 - third-party model code: its failure is a result, not a crash
        result = FamilyAudit(model_type, type(model).__name__, status="skipped",
                             reason=f"audit failed: {families.first_line(error)}")
    return dataclasses.replace(rely_on_towers(model, result), seconds=time.perf_counter() - start)


def tiny_model(model_type: str, seed: int, overrides: dict):
    """The tiny model (see :func:`tiny_model_fed`)."""
    return tiny_model_fed(model_type, seed, overrides)[0]


def tiny_model_fed(model_type: str, seed: int, overrides: dict) -> tuple[torch.nn.Module, Feeding]:
    """The tiny model, checked with one forward pass (configs that build but cannot run are
    retried with the fallback sizes, then skipped), and what feeding it found."""
    refusal = None
    for change in RUN_RETRIES:
        try:
            config = families.tiny_config(model_type, **{**change, **overrides})
            model = families.build(config, seed)
            main_input = feed.main_input(model)
            if not is_fed(main_input):
                raise families.CannotAudit(f"takes {main_input} ({INPUT_KINDS.get(main_input, 'not token ids')}); the "
                                           f"audit feeds {FED_TEXT} only", final=True)
            feeding = Feeding()
            with torch.no_grad(), quiet_transformers(), torch_threads(1):
                model(**first_inputs(model, feeding))
            return model, feeding
        except families.CannotAudit as reason:
            refusal = refusal or reason
            if reason.final:
                raise
        except Exception as error:  # noqa: BLE001 - a model that cannot run is skipped with the reason
            refusal = refusal or families.CannotAudit(f"cannot run a forward pass: {families.first_line(error)}")
    raise refusal


@dataclass(frozen=True)
class CallableAudit:
    target: str
    d_k: int
    function: dict
    key_counts: dict
    verdict: Verdict = Verdict.NOT_MEASURED
    findings: list = field(default_factory=list)
    expect: str = ""                # the expected scale rule it was judged against ("": the reference family's)
    expected: float | None = None   # its factor at d_k

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def audit_callable(attn_fn, d_k: int, name: str = "callable", reference: FamilyAudit | None = None,
                   expect=None) -> CallableAudit:
    """Factor, soft cap and key-count dependence of ``attn_fn(q, k, v, mask=None)``, judged against ``expect`` (a
    scale rule or a number; :mod:`attnscale.scale_check`; default 1/sqrt(d_k) where no ``reference`` is given) and,
    with a ``reference`` family audit, against what eager measured in its first layer.  ``ok`` only where the
    factor was measured and matches each."""
    if expect is None and reference is None:
        expect = "sqrt"
    expected = expectation(expect) if expect is not None else None
    if not callable(attn_fn):
        raise UserError(f"{name} is not callable; accepted: a function attn_fn(q, k, v, mask=None)")
    try:
        with torch_threads(1), torch.no_grad():
            result = attention_function.analyse(attention_function.callable_measure(attn_fn, d_k, n_keys=4), d_k).to_dict()
            counts = attention_function.key_count_factors(attn_fn, d_k)
    except Exception as error:  # noqa: BLE001 - the user's function failed on one of the designed inputs
        raise UserError(f"{name} failed on the audit's inputs (d_k {d_k}): {families.first_line(error)}") from None
    key_counts = {str(n): f for n, f in counts.items()}
    judged = {"expect": expected.spec, "expected": expected.factor(d_k)} if expected is not None else {}
    factor = result.get("factor")
    if factor is None or not math.isfinite(factor):
        return CallableAudit(name, d_k, result, key_counts, Verdict.NOT_MEASURED,
                             [f"no finite factor was read ({factor})"])
    findings = callable_findings(result, counts, expected, d_k, reference)
    return CallableAudit(name, d_k, result, key_counts, Verdict.MISMATCH if findings else Verdict.OK, findings,
                         **judged)


def callable_findings(result: dict, counts: dict, expected, d_k: int, reference: FamilyAudit | None) -> list[str]:
    """What disagrees in a callable's reading: a factor that moves with the number of keys, a factor other than the
    expected one, and a factor or cap other than the reference family's eager first layer."""
    findings = []
    finite = [f for f in counts.values() if math.isfinite(f)]
    if len(finite) > 1 and (max(finite) - min(finite)) > DEPENDENCE_TOL * abs(finite[0]):
        findings.append(f"the factor depends on the number of keys: {counts}")
    if expected is not None:
        verdict, finding = judge_factor(result["factor"], expected, d_k)
        findings += [finding] if verdict != Verdict.OK else []
    if reference is not None and reference.layers:
        eager = reference.layers[0].backends["eager"].function
        if not agree(result["factor"], eager["factor"]):
            findings.append(f"factor {result['factor']:.6g}, {reference.family} eager {eager['factor']:.6g}")
        if caps_differ(result["cap"], eager["cap"]):
            findings.append(f"soft cap {result['cap']}, {reference.family} eager {eager['cap']}")
    return findings


def load_callable(spec: str):
    """The function named by ``module:function`` (the module imported from the current folder or
    the Python path)."""
    from ..runtime import import_target

    accepted = "accepted: an attention function f(q, k, v, mask=None) -> out"
    function = import_target(spec, "--callable", "module:function", accepted + ", e.g. my_kernels:attention")
    if inspect.isclass(function):
        raise UserError(f"--callable {spec!r} names a class ({function.__module__}.{function.__qualname__}), not a "
                        f"function; {accepted} (wrap a module: def f(q, k, v, mask=None): return my_module(q, k, v))")
    if inspect.ismodule(function):
        raise UserError(f"--callable {spec!r} names a module ({function.__name__}), not a function; {accepted}")
    if not callable(function):
        raise UserError(f"--callable {spec!r} names a {type(function).__name__}, not a function; {accepted}")
    return function


def check_callable(attn_fn, spec: str, d_k: int) -> None:
    """Before any family is audited: ``attn_fn`` takes (q, k, v), and one call on a tiny input
    returns a finite tensor of q's shape (or a tuple that starts with one)."""
    import inspect

    try:
        inspect.signature(attn_fn).bind(None, None, None)
    except TypeError as error:
        raise UserError(f"--callable {spec!r} cannot be called as f(q, k, v): {error}") from None
    except ValueError:
        pass  # a builtin without a signature: the call below decides
    q, k, v = (torch.randn(1, 1, 2, d_k, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    shape = tuple(q.shape)
    try:
        with torch.no_grad():
            out = attn_fn(q, k, v)
    except Exception as error:  # noqa: BLE001 - the user's function, whatever it raises
        raise UserError(f"--callable {spec!r} raised {families.first_line(error)} on q, k, v of shape {shape}") from None
    out = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(out, torch.Tensor):
        raise UserError(f"--callable {spec!r} returned {type(out).__name__} on q, k, v of shape {shape}; accepted: "
                        "a tensor of q's shape (or a tuple that starts with one)")
    if tuple(out.shape) != shape:
        raise UserError(f"--callable {spec!r} returned shape {tuple(out.shape)} for q, k, v of shape {shape}; "
                        "accepted: the output of attention, of q's shape")
    if not torch.isfinite(out).all():
        raise UserError(f"--callable {spec!r} returned NaN or inf on finite q, k, v of shape {shape}")


# ---------------------------------------------------------------------------------------
# A whole audit: families or a folder.

def far_part(model):
    """(far-position entry, the part it is measured on): the model itself, or the part built from a sub-config of a
    far-position family (a Llama 4 composite's text model, llama4_text); (None, None) where there is none."""
    for part in model.modules():  # the model first
        far = positions.far_entry(getattr(getattr(part, "config", None), "model_type", None) or "")
        if far is not None:
            return far, part
    return None, None


def folder_name(path: Path) -> str:
    """The folder's name, or a hub cache snapshot's repo id (``models--org--name/snapshots/REV`` -> org/name)."""
    repo = path.parent.parent.name
    if path.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    return path.name


def audit_folder(folder: str, backends=DEFAULT_BACKENDS, seed: int = 0, keep_model: bool = False):
    """A local model folder: its safetensors weights if it has them, else random init from its config (with
    ``keep_model``: the record and the model it was read from; its towers: :func:`.composite.folder_rows`)."""
    from transformers import AutoModel

    start = time.perf_counter()
    path = check_model_dir(folder)
    require_memory(estimated_bytes(read_json(path / "config.json")), f"building the model of {str(path)!r} from its "
                   "config.json", "audit a config with fewer or smaller layers")
    config = load_config(path)
    try:
        parameters = families.count_parameters(config)
    except families.CannotAudit as reason:  # no attention module at all
        raise UserError(f"{str(path)!r}: {reason}") from None
    except ImportError as error:  # a part built from a package that is not installed (timm's backbones)
        raise UserError(f"the model in {str(path)!r} needs a package that is not installed: "
                        f"{families.first_line(error)}") from None
    except BUILD_ERRORS as error:
        raise UserError(f"the config in {str(path)!r} cannot be built by the installed transformers: "
                        f"{families.first_line(error)}") from None
    require_memory(parameters * 4 * 3, f"auditing {str(path)!r} ({parameters:,} parameters)",
                   "audit a smaller model or a config with fewer layers")
    with quiet_transformers():
        if check_weights(path, required=False):
            try:
                model = AutoModel.from_pretrained(str(path), attn_implementation="eager", local_files_only=True,
                                                  trust_remote_code=False, use_safetensors=True).eval()
            except BUILD_ERRORS as error:
                raise UserError(f"could not load the model in {str(path)!r}: {families.first_line(error)}") from None
            label = f"{folder_name(path)} ({config.model_type}, weights)"
        else:
            try:
                model = families.build(config, seed, max_parameters=parameters, max_composite=parameters)
            except families.CannotAudit as reason:
                raise UserError(f"{str(path)!r}: {reason}") from None
            label = f"{folder_name(path)} ({config.model_type}, random init)"
    try:
        result = audit_model(model.float(), label, backends, seed)
    except Exception as error:  # noqa: BLE001 - third-party model code that cannot be fed or run: a reason, not a crash
        result = FamilyAudit(label, type(model).__name__, status=Status.SKIPPED,
                             reason=f"audit failed: {families.first_line(error)}")
    far, part = far_part(model)
    if far is not None and result.status == Status.AUDITED:
        with quiet_transformers(), torch_threads(1):
            try:
                row = positions.folder_row(far, part)
            except Exception as error:  # noqa: BLE001 - third-party model code at far positions: its failure is a reason
                row = {"family": far.family, "verdict": positions.FarVerdict.NOT_MEASURED,
                       "reason": families.first_line(error)[:200]}
            result = judged_far(result, row)
    result = dataclasses.replace(result, seconds=time.perf_counter() - start)
    return (result, model) if keep_model else result


