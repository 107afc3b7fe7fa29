"""The audit's verdicts: what disagrees with the config, and what differs between backends.

Per layer and backend the measured factor (the whole path's when it is one factor, else
the attention function's) is compared with what the config declares (:mod:`.declared`),
and every backend with eager.  A family is ``ok``, ``mismatch`` (eager applies a factor or
cap the config does not declare), ``backend disagreement`` (a backend applies another
factor, cap or mask than eager, or its output differs beyond the dtype's tolerance) or
``not measured``.  :func:`family_row` is the one-line summary the table prints.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..backends import DEFAULT_BACKENDS  # noqa: E402,F401 - the attention implementations compared
from ..scale_check import FACTOR_TOL  # measured and declared factors agree within 0.1%, as a module's expectation
from .declared import cap_never_applied
from .positions import FarVerdict
from .qk_norm import COSINE_TOL
from .record import (AuditVerdict, BackendLayer, FamilyAudit, LayerReading, Status, is_intercepted_nowhere,
                     mechanism_name)
from .whole_path import moves_beyond

NOT_FINITE = "not finite"  # a backend's final hidden states hold NaN or inf

CAP_TOL = 0.05  # soft caps agree within 5%
PARITY_TOL = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 2e-3}  # max |diff| / max |eager|
DEPENDENCE_TOL = 1e-3  # the factor moves by more than 0.1% across queries, positions or lengths
ZERO_FACTOR = 1e-12  # a factor this small leaves every logit equal: uniform attention
AUDIT_VERDICTS = tuple(v.value for v in AuditVerdict if v != AuditVerdict.COVERED)


def relative(a: float | None, b: float | None) -> float:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return float("nan")
    return abs(a - b) / max(abs(b), 1e-300)


def caps_differ(a: float | None, b: float | None) -> bool:
    """A soft cap on one side only, or two caps more than CAP_TOL apart."""
    if a is None or b is None:
        return (a is None) != (b is None)
    return not relative(a, b) <= CAP_TOL


def agree(a, b, tol=FACTOR_TOL) -> bool:
    return relative(a, b) <= tol


# ---------------------------------------------------------------------------------------
# Verdicts.

def layer_findings(row: LayerReading, backend: str) -> list[str]:
    """What disagrees with the config in one layer under one backend."""
    entry, declared = row.backends[backend], row.declared
    found = []
    applied = judged_factor(entry)
    if applied is not None and abs(applied) <= ZERO_FACTOR:  # as declared or not: such attention cannot focus
        found.append(f"{row.name}: the factor on q.k is {applied:.3g}: every logit is equal and attention is "
                     "uniform whatever q and k (a key or query multiplier of 0?)")
    function_factor = entry.function.get("factor")
    path = None if clipped(row, backend) or "ROUNDED_KEYS" in declared.get("rules", ()) else entry.path
    if path and (path["form"] == "linear" or last_only(path)):
        for last, key in ((False, "factor"), (True, "factor_last")):
            expected = declared["path_last" if last else "path_first"]
            if (path.get("form_last", "linear") if last else path["form"]) != "linear":
                continue  # not one factor there (a norm on the RoPE part, unpinned RoPE): shown, not judged
            if expected is not None and not agree(path[key], expected):
                found.append(f"{row.name}: whole path {path[key]:.6g} along the {'last' if last else 'first'} "
                             f"coordinate, config implies {expected:.6g}")
    elif path and path["form"] == "q and k normalised" and declared.get("cosine_temperature") is not None:
        made = declared.get("cosine_from")  # QK-norm: factor x the norms' lengths x multipliers; else logit_scale
        if not agree(path["cosine_temperature"], declared["cosine_temperature"], COSINE_TOL if made else FACTOR_TOL):
            digits = ".4g" if made else ".6g"  # QK-norm: the norms' eps moves the fifth digit
            source = f"the config implies {declared['cosine_temperature']:{digits}} ({made})" if made else \
                f"the layer's logit_scale implies {declared['cosine_temperature']:{digits}}"
            found.append(f"{row.name}: logit of a cosine-1 pair {path['cosine_temperature']:{digits}}, {source}")
    elif declared["function"] is not None and function_factor is not None and not agree(function_factor, declared["function"]):
        found.append(f"{row.name}: attention function applies {function_factor:.6g}, config implies "
                     f"{declared['function']:.6g}")
    inputs = row.inputs or {}
    if not path and inputs.get("cosine_temperature") is not None and declared.get("cosine_temperature") is not None:
        # QK-norm read from the layer's own q and k: their lengths times the function's factor, as declared
        if not agree(inputs["cosine_temperature"], declared["cosine_temperature"], COSINE_TOL):
            found.append(f"{row.name}: logit of a cosine-1 pair {inputs['cosine_temperature']:.4g} (the layer's own "
                         f"q and k), the config implies {declared['cosine_temperature']:.4g} ({declared.get('cosine_from')})")
    if declared.get("cap_unapplied") is not None and not declared.get("cap_applied_by"):
        found.append(f"{row.name}: {cap_never_applied(declared['cap_unapplied'])}")
    cap = entry.function.get("cap")
    if entry.function.get("nonlinearity") in ("linear", "soft cap") and caps_differ(cap, declared["cap"]):
        found.append(f"{row.name}: soft cap {cap if cap is None else round(cap, 4)}, config "
                     f"{declared['cap']}")
    return found


def clipped(row: LayerReading, backend: str) -> bool:
    """The designs reached the layer's clip of q and k (clip_qkv): the whole path read is the clip's, not the
    factor's, and is not judged."""
    clip = row.declared.get("fields", {}).get("clip_qkv")
    path = row.backends[backend].path or {}
    return clip is not None and path.get("designed_rms", 0.0) >= clip * (1 - 1e-6)


def clip_text(rows: list[LayerReading]) -> list[str]:
    """Where the designs stood against the clip, read at the product (:func:`.measure.designed_rms`)."""
    peaks = [(row.backends["eager"].path or {}).get("designed_rms") for row in rows
             if row.declared.get("fields", {}).get("clip_qkv") is not None]
    peaks = [peak for peak in peaks if peak is not None]
    if not peaks:
        return []
    reached = any(clipped(row, "eager") for row in rows)
    return [f"the designs' coordinates at the product {max(peaks):.3g} (root mean square): "
            + ("at the clip, whole path not judged" if reached else "inside the clip")]


def backend_findings(row: LayerReading, backend: str) -> list[str]:
    """How a backend differs from eager in one layer."""
    eager, other = row.backends["eager"], row.backends[backend]
    found = []
    pairs = [("attention function", eager.function.get("factor"), other.function.get("factor"))]
    if eager.path and other.path:
        pairs.append(("whole path", eager.path["factor"], other.path["factor"]))
    for what, reference, value in pairs:
        if reference is not None and math.isfinite(reference) and not agree(value, reference):
            found.append(f"{row.name}: {backend} {what} factor {value:.6g}, eager {reference:.6g}")
    if caps_differ(other.function.get("cap"), eager.function.get("cap")):
        found.append(f"{row.name}: {backend} soft cap {other.function.get('cap')}, eager {eager.function.get('cap')}")
    sinks = [entry.function.get("sink") for entry in (eager, other)]
    if all(sinks) and sinks[0]["rows"] and sinks[1]["rows"] and sinks[0]["present"] != sinks[1]["present"]:
        has, lacks = (backend, "eager") if sinks[1]["present"] else ("eager", backend)
        found.append(f"{row.name}: {has} gives attention mass to a sink, {lacks} does not (the keys' mass at equal "
                     f"logits: {backend} {fmt(sinks[1]['min_key_mass'])}, eager {fmt(sinks[0]['min_key_mass'])})")
    if eager.path and other.path:
        seen = [i for i, (a, b) in enumerate(zip(eager.path["per_query"], other.path["per_query"]))
                if (a == a) != (b == b)]
        if seen:
            found.append(f"{row.name}: under {backend} queries {seen} see a different set of the two designed keys "
                         "than under eager (a mask differs)")
    return found


def attention_source(result) -> str:
    """Where the family's attention layers are defined: file and line of their class."""
    found = next((row.source for row in result.layers if row.source), None)
    return found or "attention class source unknown"


def is_readable(entry: BackendLayer) -> bool:
    """A layer with a factor to judge: the attention function's, or a whole path that is one factor."""
    factor = entry.function.get("factor")
    path = entry.path
    return (factor is not None and math.isfinite(factor)) or (path is not None and path["form"] == "linear"
                                                              and math.isfinite(path["factor"])) or (
        path is not None and last_only(path) and math.isfinite(path["factor_last"]))


def last_only(path: dict) -> bool:
    """A whole path that is one factor along the head's last coordinate only: the first moves with the
    query position (RoPE by the token index, which the designs cannot pin: RoFormer), the last does not
    (its pair turns slowest)."""
    return path["form"] == "varies with the query position" and path.get("form_last") == "linear"


def cosine_read(row: LayerReading) -> bool:
    """A cosine-attention layer whose temperature was measured and is declared (Swin V2's logit_scale)."""
    path = row.backends["eager"].path
    return (path is not None and path["form"] == "q and k normalised" and path.get("cosine_temperature") is not None
            and math.isfinite(path["cosine_temperature"]) and row.declared.get("cosine_temperature") is not None)


def stand_in(result) -> str | None:
    """The backend the layers are judged on where eager's output is not finite and another's is and reads
    as a factor (Nemotron ASR streaming: eager's calls get a mask that blocks every key); None otherwise."""
    if result.backends.get("eager", {}).get("output") != NOT_FINITE:
        return None
    return next((backend for backend, info in result.backends.items()
                 if backend != "eager" and info.get("accepted") and info.get("output") != NOT_FINITE
                 and all(backend in row.backends for row in result.layers)
                 and any(is_readable(row.backends[backend]) for row in result.layers)), None)


def masked_rows_text(result, backend: str) -> str:
    """How many query rows a backend's attention calls mask at every key, over the layers."""
    counts = [row.backends[backend].rows_masked_everywhere or [0, 0] for row in result.layers
              if backend in row.backends]
    masked = sum(count[0] for count in counts)
    return f"{masked} query rows masked at every key" if masked else "no query row masked at every key"


def not_finite_finding(result, backend: str) -> str:
    return (f"eager output is not finite where {backend}'s is (eager's attention calls: "
            f"{masked_rows_text(result, 'eager')}; {backend}'s: {masked_rows_text(result, backend)}); the layers are "
            f"judged on {backend} ({result.model_class}, {attention_source(result)})")


def judged_backend(result) -> str:
    return stand_in(result) or "eager"


class Judgement(NamedTuple):
    """What the judge makes of one model's readings: its verdict and the findings behind it."""

    verdict: AuditVerdict
    findings: list


def judge(readings) -> Judgement:
    """The verdict of one model from its readings (a :class:`.record.Readings`, or a record holding the same
    fields: model_class, backends, layers, source_lines): not measured where no layer could be read; else a
    backend disagreement, a mismatch, incomplete (a QK-norm layer with no declared logit) or ok, with the findings
    that decide it.  Changes nothing."""
    judged = judged_backend(readings)
    readable = [row for row in readings.layers if judged in row.backends and
                (is_readable(row.backends[judged]) or cosine_read(row))]
    if not readable:
        eager = readings.backends.get("eager", {})
        forms = sorted({row.backends["eager"].path["form"] for row in readings.layers
                        if row.backends["eager"].path})
        named = list(dict.fromkeys(n for row in readings.layers for n in row.declared.get("outside", [])))
        why = f" ({'; '.join(named)}: the designed q and k do not reach the product unchanged)" if named else ""
        return Judgement(AuditVerdict.NOT_MEASURED, [f"whole path: {', '.join(forms)}{why}" if forms and eager.get("accepted")
                                                     else eager.get("reason") or "no attention call could be read"])
    mismatches = [f for row in readable for f in layer_findings(row, judged)]
    if readings.backends.get(judged, {}).get("output") == NOT_FINITE:  # the factor was read, the model's output is NaN
        mismatches.insert(0, f"{judged} output is not finite (NaN or inf: {masked_rows_text(readings, judged)}); "
                             f"{readings.model_class}, {attention_source(readings)}")
    disagreements = [not_finite_finding(readings, judged)] if judged != "eager" else []
    for backend, info in readings.backends.items():
        if backend == "eager" or not info["accepted"]:
            continue
        if info.get("output") == NOT_FINITE and judged == "eager":
            # its factors and masks read off a NaN pass say nothing (a factor of 0, "a mask differs"): said once, and
            # only where eager's output is finite (else eager's own finding says it)
            if readings.backends["eager"].get("output") != NOT_FINITE:
                disagreements.append(f"{backend} output is not finite where eager's is (its attention calls: "
                                     f"{masked_rows_text(readings, backend)}); {readings.model_class}, "
                                     f"{attention_source(readings)}")
            continue
        tol = PARITY_TOL[torch.float32]
        if info["parity"] is not None and info["parity"] > tol:
            where = f" at positions {info['positions']}" if info.get("positions") else ""
            disagreements.append(f"{backend} output differs from eager by {info['parity']:.3g}{where} (relative; "
                                 f"tolerance {tol:g}; {readings.model_class}, {attention_source(readings)})")
        disagreements += [f for row in readable if backend in row.backends for f in backend_findings(row, backend)]
    # QK-norm read from a layer's own q and k, with no cosine-1 logit to hold it to: that layer is not judged
    unjudged = [f"{row.name}: QK-norm (read from the layer's own q and k, cosine-1 logit "
                f"{row.inputs['cosine_temperature']:.4g}) and no norm module found to declare its logit: not judged"
                for row in readable if not (row.backends[judged].path)
                and (row.inputs or {}).get("cosine_temperature") is not None
                and row.declared.get("cosine_temperature") is None]
    verdict = (AuditVerdict.BACKEND_DISAGREEMENT if disagreements else AuditVerdict.MISMATCH if mismatches
               else AuditVerdict.INCOMPLETE if unjudged else AuditVerdict.OK)
    return Judgement(verdict, disagreements + mismatches + unjudged)


# ---------------------------------------------------------------------------------------
# The one-line summary per family.

def fmt(value) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.4g}"


def judged_factor(entry: BackendLayer) -> float | None:
    """The factor a layer applies as the audit judges it: the whole path's when it is one
    factor, else the attention function's."""
    path = entry.path
    if path and path["form"] == "linear":
        return path["factor"]
    if path and last_only(path) and entry.function.get("factor") is None:
        return path["factor_last"]
    return entry.function.get("factor")


def span(values) -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return fmt(low) if relative(low, high) <= FACTOR_TOL else f"{fmt(low)}..{fmt(high)}"


def dependence(rows: list[LayerReading], backend: str = "eager") -> str:
    """Where the judged backend's whole path moves: with the query index, the position ids, the length."""
    found = []
    for row in rows:
        path = row.backends[backend].path
        if not path:
            continue
        base = path["factor"]
        if moves_beyond(path["query_spread"], DEPENDENCE_TOL, path.get("query_noise", 0.0)):
            found.append("query index")
        if path.get("factor_far") is not None and relative(path["factor_far"], base) > DEPENDENCE_TOL:
            found.append("position ids")
        if path.get("length_change") is not None and path["length_change"] > DEPENDENCE_TOL:
            found.append("length")  # row by row: a factor of the query row alone is not a length one
    read = sum(bool(row.backends[backend].path) for row in rows)
    if rows and not read:
        return "not measured (no whole path read)"
    text = ", ".join(dict.fromkeys(found)) or ("none" if rows else "-")
    if read and all((row.backends[backend].path or {}).get("length_change") is None for row in rows):
        text += " (length not measured)"  # an image or audio input: one length at the audit's size
    return text if read == len(rows) else f"{text} ({read} of {len(rows)} layers' whole path read)"


def nonlinearity(rows: list[LayerReading], backend: str = "eager") -> str:
    found = []
    for row in rows:
        entry = row.backends[backend]
        function = entry.function
        if function.get("nonlinearity") == "soft cap":
            found.append(f"soft cap {function['cap']:.4g}")
        elif function.get("nonlinearity") == "non-linear":
            found.append("non-linear")
        path = entry.path
        if path and path["form"] not in ("linear", "varies with the query position", "not readable"):
            found.append(path["form"] if path["form"] != "q and k normalised" else qk_norm_text(rows, backend))
        elif path and path.get("form_last") not in (None, "linear", "not readable", path["form"]):
            found.append(f"{path['form_last']} (last coordinate)")
    for row in rows:
        normalised = (row.inputs or {}).get("normalised", [])
        if normalised:
            found.append("QK-norm (from the layer's own q and k)" if len(normalised) == 2 else
                         f"{normalised[0]} normalised (from the layer's own {normalised[0]})")
    text = ", ".join(dict.fromkeys(found)) or ("linear" if rows else "-")
    if rows and not any(row.backends[backend].path for row in rows):
        return f"{text} (attention function only: {rows[0].path_missing or 'no whole path read'})"
    return text


def qk_norm_text(rows: list[LayerReading], backend: str) -> str:
    """QK-norm, with the logit of a cosine-1 pair read over the layers and the one their configs declare."""
    read = [(row.backends[backend].path or {}).get("cosine_temperature") for row in rows]
    declared = [row.declared.get("cosine_temperature") for row in rows]
    if not any(value is not None for value in read):
        return "QK-norm"
    return f"QK-norm (cosine-1 logit {span(read)}, declared {span(declared)})"


def other_mechanisms(rows: list[LayerReading]) -> str:
    """What changes the logits outside the factor: the eager attention sinks (the sink logit
    relative to a key's at q.k = 0, its range over layers) and the mechanisms the config declares
    outside the factor (an input multiplier, q/k/v clipping); "none" where the layers were read
    and have none."""
    logits, read, named = [], False, []
    for row in rows:
        sink = row.backends["eager"].function.get("sink")
        if sink and sink["rows"]:
            read = True
            if sink["present"]:
                logits.append(sink["sink_logit"])
        named += row.declared.get("outside", [])
    found = ([f"sink logit {span(logits)}"] if logits else []) + list(dict.fromkeys(named)) + clip_text(rows)
    return ", ".join(found) or ("none" if read else "-")


def unread_mechanisms(unread: list[dict]) -> list[str]:
    """The attention modules no row reads, grouped by class: what each computes where it is known."""
    by_class: dict[tuple, list[dict]] = {}
    for module in unread:
        by_class.setdefault((module["class"], module.get("read_by", "")), []).append(module)
    return [f"{mechanism_name(modules[0])} ({name} x{len(modules)}, no q.k)"
            if not is_intercepted_nowhere(modules[0]) else
            f"{name} x{len(modules)} read by {read_by}" if read_by else f"not intercepted: {name} x{len(modules)}"
            for (name, read_by), modules in by_class.items()]


def family_row(result, backends) -> dict:
    """family, declared factor, measured per backend, non-linearity, position dependence, verdict."""
    rows = result.layers
    row = {"family": result.family,
           "declared": span([r.declared["path_first"] for r in rows]) if rows else "-"}
    for backend in backends:
        info = result.backends.get(backend)
        if info is None:
            row[backend] = "-"
        elif not info["accepted"]:
            row[backend] = "not read" if info.get("inline") else "refused"
        else:
            row[backend] = span([judged_factor(r.backends[backend]) for r in rows if backend in r.backends])
            if row[backend] == "-" and info.get("parity") is not None:
                row[backend] = f"parity {info['parity']:.2g}"
    mechanisms = other_mechanisms(rows)
    unread = unread_mechanisms(getattr(result, "unread_attention", []))
    if unread:
        mechanisms = ", ".join(([] if mechanisms in ("none", "-") else [mechanisms]) + unread)
    judged = judged_backend(result) if rows else "eager"
    row.update({"non-linearity": nonlinearity(rows, judged), "other mechanisms": mechanisms,
                "position dependence": dependence(rows, judged),
                "verdict": result.verdict if result.status in (Status.AUDITED, Status.COVERED) else Status.SKIPPED.value,
                "seconds": round(result.seconds, 2)})
    return row


def judged_far(result: FamilyAudit, row: dict) -> FamilyAudit:
    """``result`` with its factor at far positions judged in (a new record): a factor that differs from the folder's
    own formula is a mismatch; one that could not be measured leaves an ``ok`` incomplete."""
    from dataclasses import replace

    verdict, findings = result.verdict, list(result.findings)
    if row["verdict"] == FarVerdict.DIFFERS:
        verdict = AuditVerdict.MISMATCH if verdict in (AuditVerdict.OK, AuditVerdict.INCOMPLETE) else verdict
        findings.append(f"factor at far positions: {row['reason']} ({row.get('formula', '')})")
    elif row["verdict"] == FarVerdict.NOT_MEASURED or row.get("not_measured_positions"):
        verdict = AuditVerdict.INCOMPLETE if verdict == AuditVerdict.OK else verdict
        findings.append(f"factor at far positions: {row['reason']}")
    return replace(result, verdict=verdict, findings=findings, far_positions=row)
