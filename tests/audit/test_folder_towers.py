"""A model folder of a composite: its towers (parts built from sub-configs of their own) measured inside the
folder's audit, so that "ok" covers every attention module it has; and the whole audit's verdict from its rows."""

from __future__ import annotations

import json

import pytest
import torch

from attnscale.audit import families, pipeline, sizes
from attnscale.audit import composite as composites
from attnscale.audit.record import FamilyAudit, SkipKind, Status
from attnscale.probing.intercept import AttentionCall

from audit_helpers import run_cli


def composite_folder(tmp_path, model_type: str) -> str:
    families.build_whole(model_type, 0).config.save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_composite_folder_measures_its_vision_tower(tmp_path, capsys):
    rows = composites.folder_rows(composite_folder(tmp_path, "llava"), ("eager",))
    folder, tower = rows
    assert tower.family == f"{folder.family}.vision_tower" and tower.tower_of == folder.family
    assert tower.verdict == "ok" and len(tower.layers) == 2 and all(row.name.startswith("encoder.layers.") for row in tower.layers)
    clip = [u for u in folder.unread_attention if u["class"] == "CLIPAttention"]
    assert clip and all(u["read_by"] == tower.family for u in clip)
    code, out, _ = run_cli(["audit", str(tmp_path), "--backends", "eager", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "ok" and [r["verdict"] for r in report["rows"]] == ["ok", "ok"]


def test_a_tower_left_unmeasured_leaves_the_folder_incomplete(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise RuntimeError("a tower that cannot be run")

    real = composites.measure.audit_model
    calls = []

    def only_the_folder(model, family, *args, **kwargs):
        calls.append(family)
        return real(model, family, *args, **kwargs) if len(calls) == 1 else refuse()

    monkeypatch.setattr(composites.measure, "audit_model", only_the_folder)
    code, out, _ = run_cli(["audit", composite_folder(tmp_path, "llava"), "--backends", "eager", "--json"], capsys)
    report = json.loads(out)
    folder, tower = report["families"]
    assert tower["status"] == "skipped" and "a tower that cannot be run" in tower["reason"]
    assert folder["verdict"] == "incomplete" and "2 of 4 attention modules measured" in folder["findings"][-1]
    assert code == 3 and report["verdict"] == "incomplete"


def test_the_whole_audits_verdict():
    def record(name, verdict="ok", status=Status.AUDITED, tower_of="", skip=SkipKind.NONE):
        return FamilyAudit(name, status=status, verdict=verdict, tower_of=tower_of, skip=skip)

    assert pipeline.overall_verdict([record("a"), record("b.t", tower_of="b")])["verdict"] == "ok"
    failing = pipeline.overall_verdict([record("a"), record("b.t", "mismatch", tower_of="b")])
    assert failing["verdict"] == "mismatch" and failing["failing"] == ["b.t"] and failing["exit_code"] == 1
    incomplete = pipeline.overall_verdict([record("a", "incomplete"), record("cnn", "not measured", Status.SKIPPED,
                                                                           skip=SkipKind.NO_ATTENTION)])
    assert incomplete["verdict"] == "incomplete" and incomplete["incomplete"] == ["a"] and incomplete["exit_code"] == 3
    skipped = pipeline.overall_verdict([record("needs_timm", "not measured", Status.SKIPPED)])
    assert skipped["verdict"] == "incomplete"  # skipped for a missing package: not every attention module measured
    assert pipeline.overall_verdict([record("c", "covered by its towers", Status.COVERED)])["verdict"] == "ok"


def test_a_tower_beyond_the_budget_is_named_not_run(tmp_path, monkeypatch, capsys):
    """A tower at its own sizes whose designed pass would cost more than the audit spends (Mllama's 448-pixel
    vision model: about 24 TFLOP) is named with its cost, and leaves the folder incomplete instead of running
    for many minutes."""
    monkeypatch.setattr(sizes, "DESIGN_FLOP_BUDGET", 1e6)
    code, out, _ = run_cli(["audit", composite_folder(tmp_path, "llava"), "--backends", "eager", "--json"], capsys)
    folder, tower = json.loads(out)["families"]
    assert tower["status"] == "skipped" and "TFLOP" in tower["reason"] and "not audited at its own sizes" in tower["reason"]
    assert folder["verdict"] == "incomplete" and code == 3


def test_designed_passes_that_do_not_fit_in_memory_are_not_run(monkeypatch):
    """The whole path's designed passes are sized from the plain pass before they run; where not even one design
    fits, the whole path is named as not measured and the factor is read from the function alone."""
    from attnscale.audit import measure

    monkeypatch.setattr(measure, "fits", lambda needed: False)
    result = measure.audit_family("llama", ("eager",))
    assert all(row.backends["eager"].path is None for row in result.layers)
    assert "one a pass), more than the free memory holds" in result.layers[0].path_missing
    assert result.verdict == "ok"  # the attention function's factor is still read and judged


def test_designed_passes_beyond_the_budget_are_named_with_their_cost_before_they_run(monkeypatch):
    """A real-size video model's designed passes would run for many minutes on 2 cores: their cost (2 x parameters x
    tokens for the linear maps, the two products of each attention call, per design) is weighed before any runs, and
    beyond the budget the whole path is named as not run, its cost said; the function's factor is still judged."""
    from attnscale.audit import measure

    call = AttentionCall("layer", torch.nn.Identity(), None, torch.zeros(3, 2, 8, 16), torch.zeros(3, 2, 10, 16),
                         torch.zeros(3, 2, 10, 16), None, {})
    model = torch.nn.Linear(4, 5)  # 25 parameters
    assert measure.designed_pass_flop(model, [call], 14) == 14 * (2 * 25 * 3 * 8 + 4 * 3 * 2 * 8 * 10 * 16)
    ran = []
    monkeypatch.setattr(measure, "one_designed_pass", lambda *args: ran.append(args))
    monkeypatch.setattr(sizes, "DESIGN_FLOP_BUDGET", 1e3)
    result = measure.audit_family("llama", ("eager",))
    assert not ran and all(row.backends["eager"].path is None for row in result.layers)
    assert "TFLOP the audit spends on a model's designed passes (ATTNSCALE_DESIGN_TFLOP=1 runs them)" in \
        result.layers[0].path_missing
    assert result.verdict == "ok"  # the attention function's factor is still read and judged
    monkeypatch.setenv("ATTNSCALE_DESIGN_TFLOP", "1")  # what the line says runs them: the passes run
    measure.audit_family("llama", ("eager",))
    assert ran


def test_designs_that_do_not_fit_at_once_run_in_parts_and_read_the_same_path(monkeypatch):
    """A real-size video tower cannot hold all 14 designs in one pass: as many as fit run at a time (what a pass
    holds grows with its designs), and the parts read the same whole path as one pass."""
    from attnscale.audit import measure, whole_path

    whole = measure.audit_family("llama", ("eager",))
    calls = [AttentionCall("layer", torch.nn.Identity(), None, torch.zeros(1, 2, 64, 4), torch.zeros(1, 2, 64, 4),
                           torch.zeros(1, 2, 64, 4), None, {})]
    kept, logits = 2 * 2 * (64 + 2 * 64) * 4 * 4, 2 * 3 * 64 * 64 * 4  # per design: q, k, v, output; logits x 3
    assert measure.designed_pass_bytes(calls, 14) == 14 * (kept + logits)
    assert measure.designed_pass_bytes(calls, 14, 3) == 2 * 14 * kept + 3 * logits  # the parts kept, then merged
    monkeypatch.setattr(measure, "fits", lambda needed: needed <= 2 * 14 * kept + 3 * logits)
    assert measure.designs_per_pass(calls) == 3

    passes = []
    one_pass = measure.one_designed_pass
    monkeypatch.setattr(measure, "one_designed_pass", lambda model, feeding, backend, layouts, units, designs, *rest:
                        passes.append(len(designs)) or one_pass(model, feeding, backend, layouts, units, designs, *rest))
    monkeypatch.setattr(measure, "designs_per_pass", lambda calls: 3)
    parts = measure.audit_family("llama", ("eager",))
    assert max(passes) == 3 and sum(passes) == len(whole_path.DESIGNS) + len(whole_path.LENGTH_DESIGNS)  # main, longer
    for before, after in zip(whole.layers, parts.layers):
        old, new = before.backends["eager"].path, after.backends["eager"].path
        assert new["form"] == old["form"] and new["factor"] == pytest.approx(old["factor"], rel=1e-6)
        assert new["factor_far"] == pytest.approx(old["factor_far"], rel=1e-6)
    assert parts.verdict == whole.verdict == "ok"


def test_a_folder_the_audit_cannot_run_is_incomplete_not_a_crash(tmp_path, capsys):
    """PI0's model takes what the audit does not feed: the folder is named as not measured, with the reason (it used
    to end in an internal error)."""
    families.whole_config("pi0").save_pretrained(tmp_path)
    code, out, err = run_cli(["audit", str(tmp_path), "--backends", "eager", "--json"], capsys)
    row = json.loads(out)["families"][0]
    assert code == 3 and row["status"] == "skipped" and row["reason"].startswith("audit failed:") and "internal error" not in err
