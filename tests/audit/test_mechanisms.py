"""A mechanism is a value with its kind (record.Mechanism), not a sentence read by its suffix; what it means for
a record: a module whose code shows a softmax the audit cannot read leaves "ok" incomplete, a record that is not
measured says why in its reason."""

import copy
from dataclasses import replace

from attnscale.audit import measure, pipeline
from attnscale.audit import composite as composites
from attnscale.audit.record import (NO_FACTOR, NOT_INTERCEPTED, NOT_MEASURED, AuditVerdict, FamilyAudit, MechanismKind,
                                    Status, is_intercepted_nowhere, no_factor)


def test_a_mechanism_is_its_text_in_json_and_keeps_its_kind_through_copies():
    wkv = no_factor("WKV recurrence")
    assert wkv == "WKV recurrence" + NO_FACTOR and wkv.kind == MechanismKind.NO_FACTOR
    row = FamilyAudit("x", unread_attention=[{"name": "a", "class": "A", "mechanism": wkv}])
    for copied in (copy.deepcopy(row), replace(row)):
        assert copied.unread_attention[0]["mechanism"].kind == MechanismKind.NO_FACTOR
    assert is_intercepted_nowhere({"mechanism": NOT_INTERCEPTED}) and not is_intercepted_nowhere({"mechanism": wkv})


def test_no_softmax_is_decided_by_the_kind_not_by_how_a_text_ends():
    """Every mechanism whose text says "no softmax"/"no q.k" is of kind no-factor, and the two with a softmax are
    not; a plain text that merely ends like one does not make a family skipped as having no softmax."""
    for _, mechanism in measure.MECHANISMS:
        assert (mechanism.kind == MechanismKind.NO_FACTOR) == mechanism.endswith(NO_FACTOR), mechanism[:40]
    assert {m.kind for _, m in measure.MECHANISMS} == {MechanismKind.NO_FACTOR, MechanismKind.UNREAD}
    typed, plain = [{"mechanism": no_factor("x")}], [{"mechanism": "x" + NO_FACTOR}]
    assert measure.has_no_factor(NOT_MEASURED, typed) and not measure.has_no_factor(NOT_MEASURED, plain)
    assert not measure.has_no_factor(AuditVerdict.OK, typed)  # something was read: not a family without a softmax


def test_a_module_whose_softmax_cannot_be_read_leaves_ok_incomplete():
    """Informer's encoder runs ProbSparse attention (the rows that attend are drawn at random): the decoder's
    attention is measured and matches, so the family is incomplete, not ok, naming the ProbSparse modules."""
    informer = composites.completed(pipeline.audit_item(("family", "informer"), ("eager",), 0))[0]
    assert informer.verdict == "incomplete"
    assert "InformerProbSparseAttention x3 (its code: ProbSparse attention (Informer), not read here)" \
        in informer.findings[-1]
    assert informer.findings[-1].startswith("1 of 4 attention modules measured")


def test_a_record_not_measured_says_why_in_its_reason():
    """MRA's attention runs only in a CUDA kernel: audited, not measured, and its reason says so (it was empty, the
    why only in its findings)."""
    mra = measure.audit_family("mra", ("eager",), 0)
    assert (mra.status, mra.verdict) == (Status.AUDITED, "not measured")
    assert "no attention probabilities were found" in mra.reason and "CUDA kernel" in mra.reason


def test_a_pass_that_calls_no_attention_function_is_read_from_the_weights_by_its_type(monkeypatch):
    """BLOOM computes attention inline: eager's pass raises NoAttentionCall (a type, not a message read back) and the
    family is read from its weights; the same refusal with another message still takes that path."""
    bloom = measure.audit_family("bloom", ("eager",), 0)
    assert bloom.backends["eager"]["reason"] == "inline attention: weights read" and bloom.verdict == "ok"
    monkeypatch.setattr(measure, "NO_CALL", "nothing intercepted")
    again = measure.audit_family("bloom", ("eager",), 0)
    assert again.backends["eager"]["reason"] == "inline attention: weights read"
    assert [layer.backends["eager"].path["factor"] for layer in again.layers] == [
        layer.backends["eager"].path["factor"] for layer in bloom.layers] != []
