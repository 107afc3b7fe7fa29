"""Findings built to carry a given label: for the tests of what reads labels (the answer, the report),
where the parts themselves are not under test.  Each lab's own tests edit real results instead."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnscale import claims
from attnscale.claims import (ASSERTION, FAILS, HOLDS, INCONCLUSIVE, MIXED, NOT_IN_PRESET, NOT_TESTABLE, PARTLY,
                              REFUTED, SUPPORTED, UNDECIDED, Finding, Reading)


def finding_as(claim_id: str, lab: str, verdict: str, evidence: str = "", numbers: dict | None = None) -> Finding:
    """A finding of ``lab`` on ``claim_id`` whose parts give ``verdict`` by :func:`claims.label`."""
    parts = claims.ANY_BY_ID[claim_id].parts_of(lab)
    voters = [p for p in parts if p.role == ASSERTION] or list(parts)
    states = {p.key: HOLDS for p in parts}
    if verdict in (NOT_TESTABLE, NOT_IN_PRESET):
        states = {p.key: verdict for p in parts}
    elif verdict == REFUTED:
        states.update({p.key: FAILS for p in voters})
    elif verdict == INCONCLUSIVE:
        states.update({p.key: UNDECIDED for p in voters})
    elif verdict == PARTLY:
        if len(voters) == 1:
            states[voters[0].key] = MIXED
        else:
            states.update({p.key: FAILS for p in voters[1:]})
    elif verdict != SUPPORTED:
        raise ValueError(f"no finding can be built for {verdict!r}")
    finding = Finding(claim_id, lab, evidence, dict(numbers or {}), {k: Reading(s) for k, s in states.items()})
    assert finding.verdict == verdict, (claim_id, lab, verdict, finding.verdict)
    return finding


@dataclass
class Stub:
    """A finding as the older tests wrote it (label, evidence, numbers), bound to its claim and lab by :func:`real`."""
    verdict: str
    evidence: str = ""
    numbers: dict = field(default_factory=dict)
    scope: str | None = None


def real(findings: dict) -> dict:
    """{lab: {claim: Stub or Finding}} -> {lab: {claim: Finding}}."""
    return {lab: {cid: f if isinstance(f, Finding) else finding_as(cid, lab, f.verdict, f.evidence, f.numbers)
                  for cid, f in by_claim.items()} for lab, by_claim in findings.items()}
