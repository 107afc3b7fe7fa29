"""The compose stage: composites settled from finished records, as new records (the inputs are never changed).

Three rules, in this order:

1. :func:`settled`: a composite measured whole (or on its token ids) that left a tower's attention unread stays
   measured only where the row reading that tower is measured with nothing left; otherwise it is skipped, the
   rows named.
2. :func:`covered`: a composite skipped as a whole is covered where every tower that runs attention is measured
   with nothing left (a family, a tower row, or a composite covered in turn, as SAM 3's vision model is for SAM 3)
   and it runs no attention class of its own; otherwise its reason names what is left out.
3. :func:`completed`: a record judged ``ok`` that leaves some attention module unread (no row reads it) is
   ``incomplete``, N of M attention modules measured, each one left named: "ok" means every one was measured.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from . import families
from .record import (COVERED, NOT_MEASURED, AuditVerdict, FamilyAudit, SkipKind, Status, is_intercepted_nowhere,
                     is_measured, mechanism_name, unmeasured_here)
from .towers import attending, row_of


def compose(records: list[FamilyAudit]) -> list[FamilyAudit]:
    """Every record as the whole audit settles it, in the same order."""
    return completed(covered(settled(records)))


def nothing_left(record: FamilyAudit) -> bool:
    """A row that leaves nothing of its attention unmeasured: measured with every attention module read
    (none left "not intercepted": an inline SAM encoder beside a tower's intercepted encoder), covered,
    without attention, or with no softmax over q.k."""
    unread = any(map(is_intercepted_nowhere, record.unread_attention))
    judged = record.verdict != AuditVerdict.INCOMPLETE  # a layer it could not judge (QK-norm with no declared logit)
    return (is_measured(record) and not unread and judged or record.status == Status.COVERED
            or record.status == Status.SKIPPED and record.skip in (SkipKind.NO_ATTENTION, SkipKind.NO_SOFTMAX))


def tower_state(record: FamilyAudit) -> str:
    return record.verdict if record.status in (Status.AUDITED, Status.COVERED) else families.NO_ATTENTION


def unread_text(own: list[str], towers: list[str]) -> str:
    parts = ([f"its own attention classes {', '.join(own)} are not read"] if own else []) + (
        [f"the attention of {', '.join(towers)} is not read, and that row is not measured"] if towers else [])
    return "; ".join(parts)


def settled(records: list[FamilyAudit]) -> list[FamilyAudit]:
    by_name = {record.family: record for record in records}
    out = []
    for record in records:
        unmeasured = [name for name in record.relies_on if not (by_name.get(name) and nothing_left(by_name[name]))]
        if record.status == Status.AUDITED and unmeasured:
            record = replace(record, status=Status.SKIPPED, verdict=NOT_MEASURED,
                             reason=f"built whole: {unread_text([], unmeasured)}")
        out.append(record)
    return out


def covered(records: list[FamilyAudit]) -> list[FamilyAudit]:
    out = list(records)
    index = {record.family: position for position, record in enumerate(out)}
    row = lambda name: out[index[name]] if name in index else None  # noqa: E731 - the row as settled so far
    composites = [position for position, record in enumerate(out) if record.status == Status.SKIPPED and record.towers]
    newly_covered = True
    while newly_covered:  # a composite covered in turn covers the composites it is a tower of
        newly_covered = False
        for position in composites:
            record = out[position]
            towers = attending(record.towers)
            rows = [row(row_of(record.family, tower)) for tower in towers]
            if record.status == Status.SKIPPED and not record.own_attention and all(r and nothing_left(r) for r in rows):
                reason = "every tower measured: " + ", ".join(
                    [f"{t['name']} = {r.family} ({tower_state(r)})" for t, r in zip(towers, rows)]
                    + [f"{t['name']}: no attention" for t in record.towers if t not in towers])
                out[position] = replace(record, status=Status.COVERED, verdict=COVERED, reason=reason)
                newly_covered = True
    for position in composites:
        record = out[position]
        if record.status != Status.SKIPPED:
            continue
        left_out = [t["name"] for t in attending(record.towers)
                    if not ((r := row(row_of(record.family, t))) and nothing_left(r))]
        if record.own_attention:
            out[position] = replace(record, reason=record.reason + "; its own attention classes are not audited "
                                                                   f"({', '.join(record.own_attention)})")
        elif len(left_out) < len(record.towers):
            out[position] = replace(record, reason=record.reason + f"; not measured here: {', '.join(left_out)}")
    return out


def why_unmeasured(module: dict) -> str:
    if is_intercepted_nowhere(module):
        return str(module["mechanism"])
    return f"its code: {mechanism_name(module)}, not read here"


def completed(records: list[FamilyAudit]) -> list[FamilyAudit]:
    out = []
    for record in records:
        unread = unmeasured_here(record.unread_attention)
        if record.verdict == AuditVerdict.OK and unread:
            measured = len({layer["name"] for layer in record.layers})
            by_class = Counter((module["class"], why_unmeasured(module)) for module in unread)
            record = replace(record, verdict=AuditVerdict.INCOMPLETE, findings=[
                *record.findings, f"{measured} of {measured + len(unread)} attention modules measured; not measured: "
                + ", ".join(f"{name} x{count} ({why})" for (name, why), count in by_class.items())])
        out.append(record)
    return out
