"""The report machinery, on a small lab written here (the real labs have their own tests)."""

import dataclasses
import json
import os
import sqlite3
import time
import re
import sys
import types

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import claims, lab
from attnscale.claims import INCONCLUSIVE, NOT_TESTABLE, PARTLY, PENDING, REFUTED, SUPPORTED

from findings import finding_as
from attnscale.report import build_report
from attnscale.report.schema import REPORT_SCHEMA


def make_fake_lab(calls):
    """A lab that 'measures' Var(q.k) = d_k exactly and judges C02 from it."""
    module = types.ModuleType("attnscale.lab.variance")

    @dataclasses.dataclass(frozen=True)
    class Config:
        d_k: int = 64
        seed: int = 0
        device: str = "cpu"

    def run(config, progress=None):
        calls.append(config)
        if progress:
            progress(0.5, "half way")
        return {"rows": [{"d_k": config.d_k, "variance": float(config.d_k) + config.seed}]}

    def judge(result):
        row = result["rows"][0]
        verdict = SUPPORTED if row["variance"] == row["d_k"] else REFUTED
        return {"C02": finding_as("C02", "variance", verdict, f"variance {row['variance']} at d_k {row['d_k']}",
                                  {"variance": row["variance"]})}

    def figures(result, outdir):
        (outdir / "fake.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        return {"C02": ["fake.png"]}

    module.VERSION = 1
    module.Config = Config
    module.PRESETS = {"quick": Config(), "full": Config(d_k=128)}
    module.run, module.judge, module.figures = run, judge, figures
    module.tables = lambda result: {"variance": result["rows"]}
    return module


@pytest.fixture
def fake_lab(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "attnscale.lab.variance", make_fake_lab(calls))
    return calls


def test_report_follows_the_contract_and_is_self_contained(fake_lab, tmp_path):
    report = build_report(out=tmp_path, labs=("variance",))
    on_disk = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(on_disk, REPORT_SCHEMA)
    by_id = {c["id"]: c for c in on_disk["claims"]}
    assert [c["id"] for c in on_disk["claims"]] == [f"C{i:02d}" for i in range(1, 19)]
    assert by_id["C02"]["verdict"] == SUPPORTED and by_id["C02"]["numbers"] == {"variance": 64.0}
    assert by_id["C02"]["verdict_line"] == SUPPORTED and by_id["C11"]["verdict_line"] == PENDING
    assert by_id["C02"]["figures"] == ["figures/fake.png"]
    assert by_id["C02"]["commands"] == ["attnscale variance --preset quick --seed 0"]
    assert by_id["C11"]["verdict"] == PENDING and "numerics" in by_id["C11"]["evidence"]
    assert report["experiments"]["variance"]["rows"][0]["d_k"] == 64
    html = (tmp_path / "index.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not re.search(r"url\(\s*['\"]?https?:|@import", html)
    assert "data:image/png;base64," in html and 'id="C02"' in html and 'class="explorer"' in html
    md = (tmp_path / "report.md").read_text()
    assert "| [C02](#c02) |" in md and "supported" in md
    assert not list(tmp_path.glob(".*.tmp"))


def test_rerun_reuses_the_store_and_fresh_or_a_new_seed_recompute(fake_lab, tmp_path):
    first = build_report(out=tmp_path, labs=("variance",))
    assert len(fake_lab) == 1 and first["labs"]["variance"]["cached"] is False
    again = build_report(out=tmp_path, labs=("variance",))
    assert len(fake_lab) == 1 and again["labs"]["variance"]["cached"] is True
    assert again["claims"] == first["claims"]
    build_report(out=tmp_path, labs=("variance",), fresh=True)
    assert len(fake_lab) == 2
    other_seed = build_report(out=tmp_path, labs=("variance",), seed=3)
    assert len(fake_lab) == 3 and fake_lab[-1].seed == 3
    assert {c["id"]: c["verdict"] for c in other_seed["claims"]}["C02"] == REFUTED
    full = build_report(out=tmp_path, labs=("variance",), preset="full")
    assert fake_lab[-1].d_k == 128 and full["preset"] == "full"


def test_a_result_measured_on_another_release_of_a_probed_package_is_not_reused(fake_lab, tmp_path, monkeypatch):
    """A lab that probes installed code (the audit, the doctor: transformers) keys its stored results by
    that package's version too: after an upgrade the stored row is not the installed code's."""
    import importlib.metadata

    from attnscale import lab

    monkeypatch.setitem(lab.REGISTRY, "variance", dataclasses.replace(lab.REGISTRY["variance"], probes=("transformers",)))
    build_report(out=tmp_path, labs=("variance",))
    assert build_report(out=tmp_path, labs=("variance",))["labs"]["variance"]["cached"] is True
    installed = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "transformers" else installed(name))
    assert lab.REGISTRY["variance"].stored_version() == "1+transformers-0.0.1"
    assert build_report(out=tmp_path, labs=("variance",))["labs"]["variance"]["cached"] is False
    assert len(fake_lab) == 2


def test_a_stored_row_without_a_digest_is_refused_before_any_work(fake_lab, tmp_path):
    """A row the report did not write (a number set to NaN by hand, with no digest) is refused in
    one error naming the row, before a lab runs; --fresh computes it again."""
    build_report(out=tmp_path, labs=("variance",))
    db = sqlite3.connect(tmp_path / "results.sqlite")
    db.execute("UPDATE results SET result = replace(result, '64.0', 'NaN'), digest = NULL")
    db.commit()
    db.close()
    (tmp_path / "report.json").unlink()
    with pytest.raises(ValueError, match=r"the variance row stored in .*results.sqlite' \(key '[0-9a-f]+'\) carries no "
                                         r"digest.*rerun with --fresh"):
        build_report(out=tmp_path, labs=("variance",))
    assert len(fake_lab) == 1 and not (tmp_path / "report.json").exists()
    again = build_report(out=tmp_path, labs=("variance",), fresh=True)
    assert len(fake_lab) == 2 and {c["id"]: c["verdict"] for c in again["claims"]}["C02"] == SUPPORTED


def test_labs_side_by_side_in_workers_give_the_numbers_they_give_here(monkeypatch, tmp_path):
    """With two cores, labs that run alone go to worker processes; their results equal this process's."""
    from attnscale.lab import audit, variance
    from attnscale.report import build, run_labs
    from attnscale.store import Store

    tiny = {"variance": variance.Config(d_ks=(1, 4, 64), samples=2_000, max_elements=200_000, min_samples=500,
                                        init_d_model=128, init_head_dim=16, init_tokens=256, ulp_max_dk=64,
                                        ulp_per_dk=64, small_d_ks=(1, 2, 16), small_rows=64),
            "audit": audit.Config(families=("gpt_neo",), backends=("eager",))}
    monkeypatch.setattr(build.lab, "config_for", lambda name, preset, **kw: tiny[name])
    monkeypatch.setattr(build, "default_workers", lambda: 2)
    seen = []
    (tmp_path / "drawn").mkdir()
    runs = run_labs("quick", 0, "cpu", Store(tmp_path / "results.sqlite"), ("variance", "audit"),
                    progress=lambda name, fraction, message: seen.append((name, fraction)), figure_dir=tmp_path / "drawn")
    assert list(runs) == ["variance", "audit"] and not any(r["cached"] for r in runs.values())
    assert runs["variance"]["result"] == variance.run(tiny["variance"])
    assert runs["audit"]["result"] == audit.run(tiny["audit"])
    (tmp_path / "here").mkdir()  # the figures a worker drew are the ones drawn here, byte for byte
    here = build.draw(variance, runs["variance"]["result"], tmp_path / "here")
    assert runs["variance"]["figures"] == here and here
    for path in (p for paths in here.values() for p in paths):
        name = path.removeprefix("figures/")
        assert (tmp_path / "drawn" / name).read_bytes() == (tmp_path / "here" / name).read_bytes()
    assert {name for name, _ in seen} == {"variance", "audit"} and (("audit", 1.0) in seen)
    assert [name for name, fraction in seen if fraction == 0.0][:2] == ["variance", "audit"]  # bars in lab order


def test_side_labs_run_and_are_kept_while_the_training_lab_trains_and_survive_its_failure(monkeypatch, tmp_path):
    """The labs that run alone go on in workers while the training lab runs here: each is stored
    as soon as it is back, before the training lab ends; when the training lab fails, they stay stored."""
    from attnscale.lab import audit, training, variance
    from attnscale.report import build, run_labs
    from attnscale.store import Store

    tiny = {"variance": variance.Config(d_ks=(1, 4), samples=2_000, max_elements=100_000, min_samples=500,
                                        init_d_model=128, init_head_dim=16, init_tokens=256, ulp_max_dk=16,
                                        ulp_per_dk=64, small_d_ks=(1, 2), small_rows=64),
            "audit": audit.Config(families=("gpt_neo",), backends=("eager",)), "training": training.Config()}
    monkeypatch.setattr(build.lab, "config_for", lambda name, preset, **kw: tiny[name])
    monkeypatch.setattr(build, "default_workers", lambda: 2)
    seen = []

    def training_that_waits_then_fails(name, module, config, store, fresh, progress, run_store=None):
        deadline = time.monotonic() + 120
        while not {("variance", 1.0), ("audit", 1.0)} <= set(seen) and time.monotonic() < deadline:
            progress(name, 0.5, "training")  # the side labs are polled through the training lab's progress
            time.sleep(0.05)
        seen.append(("training ends", 0.0))
        raise RuntimeError("training broke")

    monkeypatch.setattr(build, "_run_here", training_that_waits_then_fails)
    store = Store(tmp_path / "results.sqlite")
    with pytest.raises(RuntimeError, match="training broke"):
        run_labs("quick", 0, "cpu", store, ("variance", "training", "audit"),
                 progress=lambda name, fraction, message: seen.append((name, fraction)))
    ends = seen.index(("training ends", 0.0))
    assert ("variance", 1.0) in seen[:ends] and ("audit", 1.0) in seen[:ends]
    again = run_labs("quick", 0, "cpu", store, ("variance", "audit"))  # both were stored: nothing runs again
    assert all(run["cached"] for run in again.values())
    assert again["variance"]["result"] == json.loads(json.dumps(variance.run(tiny["variance"])))  # as stored


@pytest.mark.parametrize("kwargs, message", [
    (dict(preset="medium"), "'medium'"),
    (dict(device="tpu"), "'tpu'"),
    (dict(labs=("astrology",)), "'astrology'"),
])
def test_bad_arguments_raise_value_error_and_write_nothing(kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        build_report(out=tmp_path / "r", **kwargs)
    assert not (tmp_path / "r" / "report.json").exists()


A_, P_, S_, D_ = claims.ASSERTION, claims.PREMISE, claims.SIDE, claims.DERIVATION
DECIDED = (claims.HOLDS, claims.FAILS, claims.MIXED)


def _pairs(*spec):
    """[(Part, Reading)] from (role, state) pairs."""
    return [(claims.Part(f"p{i}", f"part {i}", role, "lab"), claims.Reading(state)) for i, (role, state) in enumerate(spec)]


def test_label_rule_on_every_kind_of_outcome():
    H, F, M, U = claims.HOLDS, claims.FAILS, claims.MIXED, claims.UNDECIDED
    assert claims.label(_pairs((A_, H), (A_, H))).verdict == SUPPORTED
    assert claims.label(_pairs((A_, F), (A_, F))).verdict == REFUTED
    assert claims.label(_pairs((A_, H), (A_, F))).verdict == PARTLY
    assert claims.label(_pairs((A_, M))).verdict == PARTLY
    assert claims.label(_pairs((A_, H), (S_, F))).verdict == PARTLY  # a side remark fails
    assert claims.label(_pairs((P_, H), (A_, F))).line == "refuted (its premise holds: part 0)"
    assert claims.label(_pairs((P_, F), (A_, F))).verdict == REFUTED
    assert claims.label(_pairs((A_, U))).verdict == INCONCLUSIVE
    assert claims.label(_pairs((A_, H), (A_, U))).verdict == INCONCLUSIVE  # supported or partly
    assert claims.label(_pairs((A_, H), (A_, F), (A_, U))).verdict == PARTLY  # partly whatever it turns out
    assert claims.label(_pairs((A_, H), (S_, U))).line == "supported (undecided: part 1)"
    assert claims.label(_pairs((A_, claims.NOT_IN_PRESET))).verdict == claims.NOT_IN_PRESET
    assert claims.label(_pairs((A_, NOT_TESTABLE), (S_, H))).verdict == NOT_TESTABLE
    assert claims.label(_pairs((A_, H), (S_, NOT_TESTABLE))).line == "supported (part 1: not testable here)"
    assert claims.label(_pairs((P_, H))).verdict == SUPPORTED  # a lab reading only a premise: it votes
    with pytest.raises(ValueError, match="unknown state"):
        claims.Reading("true")
    with pytest.raises(ValueError, match="unknown role"):
        claims.Part("x", "x", "hope", "lab")


STATE = st.sampled_from(claims.TESTED + (NOT_TESTABLE,))


@given(st.lists(st.tuples(st.sampled_from(claims.ROLES), STATE), min_size=1, max_size=6), st.randoms())
@settings(max_examples=300, deadline=None)
def test_label_is_the_same_whatever_an_undecided_part_turns_out(spec, rnd):
    """A label other than inconclusive does not move when any undecided part is decided either way,
    nor with the parts in another order; refuted only where no assertion holds, supported only where
    none fails."""
    verdict = claims.label(_pairs(*spec)).verdict
    shuffled = list(spec)
    rnd.shuffle(shuffled)
    assert claims.label(_pairs(*shuffled)).verdict == verdict
    assertions = ([state for role, state in spec if role == A_]
                  or [state for role, state in spec if role != D_])  # a derivation never votes
    if verdict == REFUTED:
        assert all(s in (claims.FAILS, NOT_TESTABLE) for s in assertions if s != claims.UNDECIDED)
    if verdict == SUPPORTED:
        assert all(s in (claims.HOLDS, NOT_TESTABLE) for s in assertions)
    if verdict != INCONCLUSIVE:
        for i, (role, state) in enumerate(spec):
            if state == claims.UNDECIDED and (role == A_ or not any(r == A_ for r, _ in spec)):
                for decided in (claims.HOLDS, claims.FAILS):
                    turned = spec[:i] + [(role, decided)] + spec[i + 1:]
                    assert claims.label(_pairs(*turned)).verdict == verdict


@given(st.lists(st.tuples(st.sampled_from(claims.ROLES), STATE), min_size=1, max_size=5),
       st.sampled_from(claims.STATES + (NOT_TESTABLE,)))
@settings(max_examples=200, deadline=None)
def test_a_derivation_never_moves_the_label(spec, derived):
    """A step that follows from arithmetic is shown, not counted: adding one, in any state, leaves the
    label of the other parts as it was (where they have a voting part)."""
    if all(role == D_ for role, _ in spec):
        return
    assert claims.label(_pairs(*spec, (D_, derived))).verdict == claims.label(_pairs(*spec)).verdict


def test_a_failing_derivation_is_named_in_the_line_and_leaves_the_label():
    """A derivation that fails is said beside the label (the arithmetic does not hold in the claim's setting),
    and the label stays the voting parts' own; one that holds is not said."""
    H, F = claims.HOLDS, claims.FAILS
    failing = claims.label(_pairs((A_, H), (D_, F)))
    assert failing.verdict == SUPPORTED and failing.line == "supported (a derivation fails, not counted: part 1)"
    assert claims.label(_pairs((A_, H), (D_, H))).line == "supported"
    assert claims.label(_pairs((A_, F), (D_, claims.MIXED))).line == \
        "refuted (a derivation fails, not counted: part 1)"


def test_margins_name_the_moves_that_change_the_label():
    pairs = _pairs((A_, claims.HOLDS), (A_, claims.HOLDS))
    pairs[1] = (pairs[1][0], claims.Reading(claims.HOLDS, moved={"0.8": claims.HOLDS, "1.2": claims.FAILS}))
    found = claims.margins(pairs)
    assert found == [{"part": "p1", "text": "part 1", "move": "1.2", "state": claims.FAILS, "verdict": PARTLY}]
    assert "20% higher" in claims.margin_text(found) and "partly supported" in claims.margin_text(found)
    assert claims.margins(_pairs((A_, claims.HOLDS))) == [] and "No threshold" in claims.margin_text([])


@pytest.fixture(scope="module")
def saturation_findings():
    """The saturation lab's real findings on a tiny run: C05, C06 and C18 at initialisation."""
    from attnscale.lab import saturation

    tiny = saturation.Config(d_ks=(1, 16, 64, 128, 1024), ns=(16, 128), exponents=(0.0, 0.25, 0.5, 0.75, 1.0),
                             rows=64, grad_n=16, grad_d_model=16, grad_d_v=8, grad_batch=1, deriv_points=11,
                             deriv_rows=32)
    return saturation.judge(saturation.run(tiny))


def test_a_premise_alone_cannot_make_a_claim_supported(saturation_findings):
    """C05's premise (near uniform at initialisation) is the saturation lab's; its assertion
    (unusable) the training lab's: the claim's label follows the assertion."""
    c05 = saturation_findings["C05"]
    assert c05.verdict == SUPPORTED  # at initialisation 1/d_k is near uniform
    row = {r["id"]: r for r in claims.evaluate({"saturation": saturation_findings})}["C05"]
    assert row["verdict"] == PENDING and "fundamentally unusable: not measured yet" in row["verdict_line"]
    outcomes = {}
    for trained in (SUPPORTED, PARTLY, REFUTED, INCONCLUSIVE, NOT_TESTABLE):
        rows = {r["id"]: r for r in claims.evaluate({"saturation": saturation_findings,
                                                     "training": {"C05": finding_as("C05", "training", trained)}})}
        outcomes[trained] = (rows["C05"]["verdict"], rows["C05"]["verdict_line"])
    assert outcomes[SUPPORTED] == (SUPPORTED, SUPPORTED)
    assert outcomes[PARTLY][0] == PARTLY
    assert outcomes[REFUTED] == (REFUTED, "refuted (its premise holds: near uniform at initialisation)")
    assert outcomes[INCONCLUSIVE][0] == INCONCLUSIVE
    assert outcomes[NOT_TESTABLE][0] == NOT_TESTABLE


def test_a_part_not_testable_stays_in_the_verdict_line():
    found = {"history": {"C13": finding_as("C13", "history", NOT_TESTABLE, "no release in the cache")},
             "training": {"C13": finding_as("C13", "training", REFUTED, "not slower")}}
    c13 = {r["id"]: r for r in claims.evaluate(found)}["C13"]
    # the one tested assertion fails; the untested one could still hold: open between two labels
    assert c13["verdict"] == INCONCLUSIVE
    assert c13["verdict_line"] == ("inconclusive (partly supported or refuted, as the open parts turn out; "
                                   "fails: 1/d_k makes training 2-3x slower; "
                                   "Hugging Face's old BERT used 1/d_k: not testable here)")
    alone = {r["id"]: r for r in claims.evaluate({"history": found["history"]})}["C13"]
    assert alone["verdict"] == PENDING and "1/d_k makes training 2-3x slower: not measured yet" in alone["verdict_line"]


def test_declared_number_keys_are_checked_both_ways():
    declared = {"C01": ("a", "family_*")}
    assert claims.undeclared_numbers(declared, {"C01": finding_as("C01", "variance", SUPPORTED, "",
                                                                  {"a": 1, "family_x": 2})}) == []
    assert claims.undeclared_numbers(declared, {"C01": finding_as("C01", "variance", SUPPORTED, "", {"b": 1})}) == [
        "C01.b (not declared)", "C01.a (declared, missing)"]
    assert claims.undeclared_numbers(declared, {"C01": finding_as("C01", "variance", NOT_TESTABLE)}) == []
    assert claims.key_declared(("family_*",), "family_*") and not claims.key_declared(("family_x",), "family_*")


def test_a_finding_must_read_exactly_the_parts_its_lab_declares():
    with pytest.raises(ValueError, match="declares"):
        claims.Finding("C05", "training", "", {}, {"uniform": claims.Reading(claims.HOLDS)})
    with pytest.raises(ValueError, match="no part read by"):
        claims.Finding("C05", "numerics", "", {}, {})


def test_evaluate_marks_missing_labs_and_prefixes_numbers():
    rows = {r["id"]: r for r in claims.evaluate(
        {"training": {"C05": finding_as("C05", "training", REFUTED, "loss 0.1", {"loss": 0.1})}})}
    c05 = rows["C05"]
    assert c05["verdict"] == REFUTED and not c05["complete"]
    assert "saturation" in c05["evidence"] and c05["numbers"] == {"training.loss": 0.1}
    assert [p["state"] for p in c05["parts"]] == [PENDING, claims.FAILS]
    assert rows["C01"]["verdict"] == PENDING


def test_every_claim_declares_parts_with_an_assertion():
    for claim in claims.CLAIMS:
        assert any(p.role == claims.ASSERTION for p in claim.parts), claim.id
        assert len({p.key for p in claim.parts}) == len(claim.parts), claim.id
        assert all(p.text and p.setting for p in claim.parts), claim.id


def test_every_claim_names_labs_that_exist():
    assert len(claims.CLAIMS) == 18
    for claim in claims.CLAIMS:
        assert set(claim.labs) <= set(lab.LABS), claim.id



def test_cjk_characters_are_the_range_members_at_every_boundary():
    """The regular expression agrees with the ranges' definition, code point by code point, at and
    next to each range's ends (and ASCII, Latin and emoji stay out)."""
    from attnscale.report import fonts

    points = {p for low, high in fonts.CJK_RANGES for p in (low - 1, low, low + 1, high - 1, high, high + 1)}
    text = "".join(chr(p) for p in sorted(points)) + "attention 注意力 é 😀" * 3
    expected = sorted({ch for ch in text if any(low <= ord(ch) <= high for low, high in fonts.CJK_RANGES)})
    assert fonts.cjk_characters(text) == "".join(expected)
    assert "注" in expected and chr(0x2FFF) not in expected and chr(0x3000) in expected


def test_the_page_embeds_exactly_the_cjk_characters_it_uses(fake_lab, tmp_path):
    """A subset of an installed CJK font (set-up installs Debian's fonts-wqy-microhei), holding a glyph
    for every CJK character of the page, and only those, inside the page (no file, no network)."""
    import base64
    import io

    from fontTools.ttLib import TTFont

    from attnscale.report import fonts

    assert fonts.font_path() is not None, "no CJK font installed: run scripts/setup.sh as root"
    build_report(out=tmp_path, labs=("variance",))
    html = (tmp_path / "index.html").read_text()
    face = re.search(r'@font-face \{ font-family: "attnscale CJK"; src: url\(data:font/ttf;base64,([A-Za-z0-9+/=]+)\)',
                     html)
    assert face, "no embedded CJK font"
    font = TTFont(io.BytesIO(base64.b64decode(face.group(1))))
    covered = {chr(code) for code in font.getBestCmap()}
    used = set(fonts.cjk_characters(html.replace(face.group(1), "")))
    assert len(used) > 50 and used <= covered  # the interview answer's quotes and the Chinese answer
    assert {ch for ch in covered if fonts.cjk_characters(ch)} == used  # nothing the page does not use
    assert fonts.font_face("no CJK here") == ""


def test_the_verdicts_page_lists_every_part_the_registry_declares():
    """docs/verdicts.md's table of parts is the registry's, row for row."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "verdicts.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| C")]
    expected = [f"| {c.id} | {p.text} | {p.role} | {p.lab} | {p.setting} |" for c in claims.CLAIMS for p in c.parts]
    assert rows == expected


def test_an_undecided_part_turns_out_only_as_its_settings_allow():
    """A part that fails at one setting and is undecided at another can end failing or holding in
    part, never holding: with another assertion holding, the claim is partly supported either way."""
    H, F, U = claims.HOLDS, claims.FAILS, claims.UNDECIDED
    part = claims.Reading.over([F, U])
    assert part.state == U and part.could_be == [F, claims.MIXED]
    pairs = _pairs((A_, H), (A_, U))
    assert claims.label(pairs).verdict == INCONCLUSIVE  # by default it could hold
    pairs[1] = (pairs[1][0], part)
    assert claims.label(pairs).verdict == PARTLY
    assert claims.could_be([H, H]) == [] and claims.could_be([U, U]) == [H, F, claims.MIXED]


def test_a_reused_folder_holds_one_reports_figures(fake_lab, tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "saturation_c04.png").write_bytes(b"\x89PNG old")  # an earlier report's figure
    (tmp_path / "figures" / "notes.txt").write_text("the reader's own file")
    build_report(out=tmp_path, labs=("variance",))
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["fake.png", "notes.txt"]


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(fake_lab, tmp_path, capsys):
    from attnscale.cli import main
    from attnscale.paths import FolderLock

    with FolderLock(tmp_path, "the report folder"):
        with pytest.raises(SystemExit) as done:
            main(["report", "--out", str(tmp_path), "--labs", "variance"])
    assert done.value.code == 2 and "another attnscale run is writing the report folder" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists() and fake_lab == []  # refused before any lab ran
    build_report(out=tmp_path, labs=("variance",))  # released with the block
    assert (tmp_path / "report.json").exists()


def test_what_a_killed_run_left_is_removed_by_the_next_one(fake_lab, tmp_path):
    dead = 2**22 + 12345  # above the default pid_max of 4,194,304: no live process has it
    (tmp_path / ".attnscale.lock").write_text("")  # kill -9 leaves the lock file (its lock went with the process)
    (tmp_path / f".figures.{dead}.tmp").mkdir()
    (tmp_path / f".figures.{dead}.tmp" / "half.png").write_bytes(b"\x89PNG")
    (tmp_path / f".report.{dead}.tmp").mkdir()
    live = tmp_path / f".figures.{os.getppid()}.tmp"  # a live process's staging is never touched
    live.mkdir()
    build_report(out=tmp_path, labs=("variance",))
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [live.name], left


def test_a_lock_file_that_is_a_symbolic_link_is_refused(fake_lab, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    out = tmp_path / "out"
    out.mkdir()
    (out / ".attnscale.lock").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a symbolic link"):
        build_report(out=out, labs=("variance",))
    assert not elsewhere.exists() and fake_lab == []


def test_report_md_is_for_reading(quick_report):
    """At most 60 KB: the answer, the verdict table, each claim's verdict, parts and the opening of its
    evidence; figures linked, not inlined; the whole evidence one command away."""
    out, report = quick_report
    md = (out / "report.md").read_text(encoding="utf-8")
    assert len(md.encode()) <= 60 * 1024, len(md.encode())
    assert "![" not in md and "The 30-second answer" in md
    for claim in report["claims"] + report["statements"]:
        assert f"**Verdict: {claim['verdict_line']}.**" in md and f"`attnscale explain {claim['id']}`" in md
        for path in claim["figures"]:
            assert f"]({path})" in md and (out / path).is_file()
