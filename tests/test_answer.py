import json
import re
import subprocess
import sys

import pytest

from attnscale import answer, claims, lab, reference
from attnscale.claims import INCONCLUSIVE, NOT_IN_PRESET, NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED

from attnscale.claims import HOLDS, MIXED, UNDECIDED, Finding as RealFinding, Reading
from findings import Stub as Finding, finding_as, real

# Labs whose findings do not declare their numbers yet; once a lab declares NUMBER_KEYS, take it out
# of this set and every number the answer reads from it is checked against its declaration.
UNDECLARED: set[str] = set()

# Findings with the numbers of a quick report (variance, saturation, numerics, doctor).
VARIANCE = {
    "C01": Finding(PARTLY, "", {"var[torch-default square]": 0.33, "var[xavier-uniform square]": 1.0,
                                "var[xavier-uniform per-head]": 1.8}),
    "C02": Finding(SUPPORTED, "", {"max_rel_error": 0.108, "max_d_k": 4096}),
    "C15": Finding(PARTLY, "", {"tv_dk2": 0.13, "tv_dk_large": 0.87, "dk_large": 128}),
}
SATURATION = {
    "C04": Finding(SUPPORTED, "", {"max_std_error": 0.077, "min_share_within_3": 0.976, "max_saturated_share": 0.0}),
    "C05": Finding(SUPPORTED, "", {"min_normalized_entropy": 0.9984, "min_uniform_share": 0.92}),
    "C06": Finding(REFUTED, "", {"max_logit_abs": 32.0, "min_saturated_share": 0.15, "grad_ratio_none_sqrt": 15.3,
                                 "dk_logits_reach_100": 1208.0}),
    "C16": Finding(PARTLY, "", {"max_entry_at_100": 6.4e-43, "small_n": 2, "large_n": 128,
                                   "share_p_in_range_small_n": 0.96, "share_p_in_range_large_n": 0.009,
                                   "holds_up_to_n": 16, "possible_up_to_n": 40}, scope="for up to 16 keys only"),
    "C18": Finding(SUPPORTED, "", {"zero_slope_exponent": 0.498, "constant_factor": 0.125,
                                   "constant_entropy_min": 0.13, "constant_entropy_max": 0.998}),
}
NUMERICS = {
    "C11": Finding(PARTLY, "", {"claim_d_k": 128, "claimed_range": 30.0, "max_abs_logit_unit_std_sqrt": 4.27,
                                "trained_model": "bert", "trained_d_k": 32, "trained_max_abs_logit": 44.0,
                                "trained_naive_fp16_overflow_rows": 0.083, "real_code_nonfinite": 0.0,
                                "real_code_max_error": 0.24, "fp16_exp_first_inf": 11.09375}),
    "C12": Finding(PARTLY, "", {"online_overflow": "never", "tiled_naive_nonfinite": 1.0, "clamp_cost": "distorts",
                                "clamp_kl_cheapest_fix": 2.33, "clamp_kl_cheapest_fix_low": 2.27,
                                "clamp_kl_cheapest_fix_high": 2.39, "memory_tokens": 2048, "dense_peak_mib": 32.0, "online_peak_mib": 1.02,
                                "memory_ratio": 31.5}),
}
DOCTOR = {"C10": Finding(PARTLY, "", {"t5_factor": 1.0, "t5_finding": "no scaling", "t5_wq_wk_std_ratio": 0.125,
                                      "d_kv": 64, "t5_logit_std": 0.999})}
MEASURED = {"variance": VARIANCE, "saturation": SATURATION, "numerics": NUMERICS, "doctor": DOCTOR}


def training(c06_verdict, c06_progress):
    return {
        "C05": Finding(REFUTED, "", {"inv_d_progress_recall_64": 0.95, "inv_d_progress_recall_256": 0.9,
                                     "n_layers": 2, "d_model": 32}),
        "C06": Finding(c06_verdict, "", {"none_progress_recall_64": c06_progress,
                                         "none_progress_shakespeare_256": c06_progress, "init_max_abs_logit": 60.0,
                                         "none_stalled_recall_64": 5, "none_seeds_recall_64": 6,
                                         "none_stalled_shakespeare_256": 3, "none_seeds_shakespeare_256": 4,
                                         "n_layers": 2, "d_model": 32}),
        "C10": Finding(PARTLY, "", {"final_logit_std_gap_adamw": 2.51, "final_logit_std_gap_adafactor": 0.0,
                                     "step0_gap": 0.0}),
        "C17": Finding(REFUTED, "", {"median_grad_ratio_sqrt_over_none": 0.5}),
        "C18": Finding(SUPPORTED, "", {"sqrt_near_best_cells": 5, "cells": 6}),
        "C09": Finding(NOT_IN_PRESET, "the full preset trains it"),
    }


def report_from(findings):
    return {"preset": "quick", "seed": 0, "claims": claims.evaluate(real(findings))}


def sentences(composed):
    return composed["answer"] + [s for item in composed["follow_ups"] for s in item["answer"]]


def test_with_no_evidence_every_sentence_says_it_is_pending():
    composed = answer.compose(report_from({}), "en")
    assert len(sentences(composed)) == 11
    assert all("not measured yet" in s for s in sentences(composed))


def test_the_answer_reads_only_numbers_the_labs_declare():
    """Every number the answer reads is declared by the lab that emits it (the labs' own tests check
    that their findings carry exactly their NUMBER_KEYS)."""
    declaring = {name for name in lab.LABS if hasattr(lab.load(name), "NUMBER_KEYS")}
    assert declaring == set(lab.LABS) - UNDECLARED, "a lab declares NUMBER_KEYS now: take it out of UNDECLARED"
    for (claim_id, name), keys in answer.READS.items():
        assert name in claims.ANY_BY_ID[claim_id].labs, (claim_id, name)
        if name in declaring:
            declared = lab.load(name).NUMBER_KEYS.get(claim_id, ())
            missing = [key for key in keys if not claims.key_declared(declared, key)]
            assert not missing, f"the answer reads {claim_id}'s {missing} from {name}, which it does not declare"


def test_reading_an_undeclared_number_fails():
    ev = answer.Evidence(report_from(MEASURED))
    with pytest.raises(KeyError, match="READS does not declare"):
        ev.number("C02", "share_in_ci")
    assert ev.number("C02", "max_rel_error") == 0.108 and ev.number("C10", "d_kv") == 64  # doctor.d_kv


def test_sentences_quote_the_measured_numbers():
    text = answer.render_text(answer.compose(report_from(MEASURED), "en"))
    assert "about ±32, well short of the interview answer's ±100 (rows reach that only from d_k ≈ 1208)" in text
    assert "15x the sqrt rule's" in text and "at least 97.6% of the logits" in text and "98%" not in text
    assert "Xavier on a square matrix (1.00) gives q components of variance about 1" in text
    assert "but PyTorch's default nn.Linear (0.33) and Xavier on a per-head projection (1.80) do not" in text
    assert "up to 4096" in text and "against 0.87 at d_k = 128: 15% of it, so the factor matters little there" in text
    assert "0.998" in text and "d_k^-0.498" in text and "0.9% for 128 keys" in text and "up to 16 keys" in text
    assert "At initialisation a constant factor fits one d_k only: 0.125 gives normalised entropy from 0.13" in text
    assert "in the pretrained bert (d_k = 32) they reach ±44" in text and "off by up to 0.24 std of v" in text
    assert "2048: 32 MiB dense, 1.0 MiB tiled" in text and "KL 2.33 nats" in text
    assert "C06's training half: not measured yet" in text and "0.13 apart" in text and "d_k = 128" in text
    assert "make up the factor" not in text


def test_no_fixed_comparison_survives_other_numbers():
    extreme = dict(SATURATION, C06=Finding(SUPPORTED, "", {"max_logit_abs": 110.0, "min_saturated_share": 0.8,
                                                           "grad_ratio_none_sqrt": 0.02, "dk_logits_reach_100": 100.0}))
    wide = dict(NUMERICS)
    wide["C11"] = Finding(SUPPORTED, "", {**NUMERICS["C11"].numbers, "max_abs_logit_unit_std_sqrt": 31.0,
                                          "real_code_nonfinite": 0.02})
    text = answer.render_text(answer.compose(report_from({**MEASURED, "saturation": extreme, "numerics": wide}), "en"))
    assert "as extreme as the interview answer's ±100" in text and "near zero" in text and "not ±100" not in text
    assert "do reach ±30" in text and "produced inf or NaN" in text and "no inf" not in text


@pytest.mark.parametrize("verdict, progress, phrase", [
    (REFUTED, 0.9, "training does not stall: it learned 90%"),
    (SUPPORTED, 0.05, "training stalls: it learned 5%"),
    (PARTLY, 0.5, "training stalls in some settings or seeds, not in all: it learned 50%"),
])
def test_the_text_follows_the_verdict(verdict, progress, phrase):
    findings = {**MEASURED, "training": training(verdict, progress)}
    text = answer.render_text(answer.compose(report_from(findings), "en"))
    assert phrase in text and "Trained (2-layer models of width 32 on recall, d_head 64-256)" in text
    assert "stalled in 8 of 10 seeds" in text  # seeds as counts, summed over the cells
    assert "not 'unusable'" in text and "90%-95%" in text  # C05 refuted in training
    assert "2.00x that with scaling" in text and "not 10x smaller" in text  # C17 ratio 0.5
    assert "equivalent under Adafactor, but the per-layer logit std ends apart under AdamW by 251%" in text
    assert "std 0.125 times W_k's at d_kv = 64" in text and "near the best rule in 5 of 6 settings" in text


def test_chinese_text_is_chinese_with_the_same_numbers_and_labels():
    findings = {**MEASURED, "training": training(REFUTED, 0.9)}
    zh = answer.render_text(answer.compose(report_from(findings), "zh"))
    assert len(re.findall(r"[\u4e00-\u9fff]", zh)) > 300
    assert "±32" in zh and "1208" in zh and "训练并未停滞" in zh and "90%" in zh
    assert "在 AdamW 下相差 251%" in zh and "得到的方差并不是 1" in zh and "变大" in zh
    assert "零斜率" not in zh and "训练训练" not in zh
    assert "结论统计：部分支持 " in zh and "，支持 " in zh and "不成立 " in zh
    for label in ("supported", "refuted", "partly"):
        assert label not in zh
    # full-width punctuation around Chinese text
    assert not re.search(r"[\u4e00-\u9fff] ?[,;:()]|[,;:(] ?[\u4e00-\u9fff]", zh), zh


def test_bad_input():
    with pytest.raises(ValueError, match="'fr'"):
        answer.compose(report_from({}), "fr")
    with pytest.raises(FileNotFoundError, match="attnscale report"):
        answer.load_report("/nonexistent/report.json")


def test_cli_answer_errors_are_one_line(tmp_path):
    (tmp_path / "report.json").write_text("{not json")
    for args in (["--report", str(tmp_path / "missing")], ["--report", str(tmp_path)]):
        done = subprocess.run([sys.executable, "-m", "attnscale", "answer", *args], capture_output=True, text=True)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


# --------------------------------------------------------------------------- the 30-second layer

def hanzi(text: str) -> int:
    return len(re.findall(r"[\u4e00-\u9fff]", text))


def short_cases():
    """Reports that between them take every branch of the 30-second layer."""
    cases = {"pending": report_from({}), "measured": report_from(MEASURED)}
    for c05 in (SUPPORTED, PARTLY, REFUTED, INCONCLUSIVE):
        for c06 in (SUPPORTED, PARTLY, REFUTED, INCONCLUSIVE):
            train = training(c06, 0.05)
            train["C05"] = Finding(c05, "", train["C05"].numbers)
            cases[f"inv_d {c05}, none {c06}"] = report_from({**MEASURED, "training": train})
    far = dict(SATURATION, C06=Finding(SUPPORTED, "", {**SATURATION["C06"].numbers, "max_logit_abs": 110.0}))
    rough = dict(VARIANCE, C02=Finding(PARTLY, "", VARIANCE["C02"].numbers))
    cases["far logits, rough variance"] = report_from({**MEASURED, "saturation": far, "variance": rough,
                                                       "training": training(SUPPORTED, 0.05)})
    cases["the shipped reference"] = reference.load()  # the answer a fresh install gives
    return cases


def edited(findings, lab_name, claim_id, verdict=None, drop=(), **numbers):
    """``findings`` with one finding's verdict and numbers changed (keys in ``drop`` removed)."""
    old = findings[lab_name][claim_id]
    kept = {k: v for k, v in old.numbers.items() if k not in drop}
    finding = Finding(verdict or old.verdict, old.evidence, {**kept, **numbers}, scope=old.scope)
    return {**findings, lab_name: {**findings[lab_name], claim_id: finding}}


def answer_cases():
    """Reports built by the real claim evaluation from findings with a quick report's numbers, edited
    so that between them they take every branch of every layer of the answer."""
    base = {**MEASURED, "training": training(PARTLY, 0.05)}
    cases = dict(short_cases())
    cases["base"] = report_from(base)
    for verdict in (SUPPORTED, PARTLY, REFUTED):
        cases[f"none trains {verdict}"] = report_from({**MEASURED, "training": training(verdict, 0.5)})
    # "training stalls" undecided between holding in full and in part, the other trained part holding: the
    # answer says it holds at least in part
    leaning = training(INCONCLUSIVE, 0.05)
    leaning["C06"] = RealFinding("C06", "training", "", leaning["C06"].numbers,
                                 {"logits_trained": Reading(HOLDS),
                                  "stalls": Reading(UNDECIDED, could_be=[HOLDS, MIXED])})
    cases["none leans to stalling"] = report_from({**MEASURED, "training": leaning})
    edits = {
        "C01 all near": ("variance", "C01", None, (), {"var[torch-default square]": 1.02, "var[xavier-uniform per-head]": 0.97}),
        "C01 none near": ("variance", "C01", None, (), {"var[xavier-uniform square]": 1.5}),
        "C01 one off": ("variance", "C01", None, (), {"var[xavier-uniform per-head]": 1.0}),
        "C04 some saturated": ("saturation", "C04", None, (), {"max_saturated_share": 0.004}),
        "C05 not uniform": ("saturation", "C05", REFUTED, (), {"min_normalized_entropy": 0.7}),
        "C05 trained supported": ("training", "C05", SUPPORTED, (), {}),
        "C05 trained partly": ("training", "C05", PARTLY, (), {}),
        "C06 never reaches 100": ("saturation", "C06", None, ("dk_logits_reach_100",), {}),
        "C06 gradient near 0": ("saturation", "C06", None, (), {"grad_ratio_none_sqrt": 0.05, "max_logit_abs": 120.0}),
        "C06 gradient smaller": ("saturation", "C06", None, (), {"grad_ratio_none_sqrt": 0.5}),
        "C11 unit reaches, trained not": ("numerics", "C11", None, (), {"max_abs_logit_unit_std_sqrt": 20.0,
                                                                        "trained_max_abs_logit": 9.0}),
        "C11 nonfinite": ("numerics", "C11", None, (), {"real_code_nonfinite": 0.1}),
        "C11 precise": ("numerics", "C11", None, (), {"real_code_max_error": 0.01}),
        "C12 online overflows": ("numerics", "C12", None, (), {"online_overflow": "overflows"}),
        "C12 online undecided": ("numerics", "C12", None, (), {"online_overflow": "undecided"}),
        "C12 memory not saved": ("numerics", "C12", None, (), {"memory_ratio": 1.5}),
        "C12 no clamp works": ("numerics", "C12", None, ("clamp_kl_cheapest_fix",),
                               {"clamp_cost": "no clamp removes it"}),
        "C12 cheap clamp": ("numerics", "C12", None, (), {"clamp_kl_cheapest_fix": 0.001, "clamp_cost": "cheap",
                                                          "clamp_kl_cheapest_fix_low": 0.0005,
                                                          "clamp_kl_cheapest_fix_high": 0.0015}),
        "C12 clamp cost undecided": ("numerics", "C12", None, (), {"clamp_kl_cheapest_fix": 0.008,
                                                                   "clamp_cost": "undecided",
                                                                   "clamp_kl_cheapest_fix_low": 0.004,
                                                                   "clamp_kl_cheapest_fix_high": 0.012}),
        "C12 cheap clamp, online overflows": ("numerics", "C12", None, (), {"clamp_kl_cheapest_fix": 0.001,
                                                                            "clamp_cost": "cheap",
                                                                            "clamp_kl_cheapest_fix_low": 0.0005,
                                                                            "clamp_kl_cheapest_fix_high": 0.0015,
                                                                            "online_overflow": "overflows"}),
        "C18 no constant": ("saturation", "C18", None, ("constant_factor",), {}),
        "C18 no cells": ("training", "C18", None, (), {"cells": 0}),
        "C15 small": ("variance", "C15", SUPPORTED, (), {"tv_dk2": 0.05}),
        "C15 not small": ("variance", "C15", REFUTED, (), {"tv_dk2": 0.5}),
        "C15 undecided": ("variance", "C15", INCONCLUSIVE, (), {"tv_dk2": 0.22}),
        "C15 not testable": ("variance", "C15", NOT_TESTABLE, (), {}),
        "C16 not near 0": ("saturation", "C16", None, ("holds_up_to_n",), {"max_entry_at_100": 1e-5}),
        "C17 tenfold": ("training", "C17", SUPPORTED, (), {"median_grad_ratio_sqrt_over_none": 20.0}),
        "C10 a factor": ("doctor", "C10", REFUTED, (), {"t5_factor": 0.125, "t5_finding": "1/sqrt(d_k)"}),
        "C10 equivalent": ("training", "C10", SUPPORTED, (), {"final_logit_std_gap_adamw": 0.01}),
        "C10 all apart": ("training", "C10", PARTLY, (), {"final_logit_std_gap_adafactor": 0.3}),
        "C10 none apart": ("training", "C10", PARTLY, (), {"final_logit_std_gap_adamw": 0.01}),
        "C06 an older report, no model size": ("training", "C06", None, ("n_layers", "d_model"), {}),
    }
    for name, (lab_name, claim_id, verdict, drop, numbers) in edits.items():
        cases[name] = report_from(edited(base, lab_name, claim_id, verdict, drop, **numbers))
    no_c17 = {**base, "training": {k: v for k, v in base["training"].items() if k != "C17"}}
    cases["C17 pending"] = report_from(no_c17)
    cases["long contexts"] = {**report_from(base), "statements": long_statements(LONG_NUMBERS)}
    cases["long contexts, L4 pending"] = {**report_from(base), "statements": long_statements(
        {**LONG_NUMBERS, "L4": {"train_length": 34, "test_length": 544}})}
    return cases


LONG_NUMBERS = {"L1": {"sqrt_weight_equal_64": 0.70, "sqrt_weight_equal_65536": 0.002},
                "L2": {"logn_weight_equal_64": 0.85, "logn_weight_equal_65536": 0.99},
                "L3": {"sqrt_log_entropy_64": 0.775, "sqrt_log_entropy_65536": 0.751, "log_entropy_64": 0.843,
                       "log_entropy_65536": 0.576, "sqrt_log_trained_fading": 1, "sqrt_log_trained_seeds": 8,
                       "sqrt_log_trained_kept": 0.932, "logn_trained_kept": 1.008},
                "L4": {"train_length": 34, "test_length": 544, "sqrt_drop_rate": 1.0, "logn_drop_rate": 0.0,
                       "sqrt_dropping": 4, "sqrt_drop_seeds": 4, "logn_dropping": 0, "logn_drop_seeds": 4,
                       "logn_trained_dropping": 1, "logn_trained_drop_seeds": 6}}


def long_statements(numbers):
    """The statements beyond the source as the real evaluation labels them, from findings with these numbers."""
    findings = {"length": {sid: finding_as(sid, "length", SUPPORTED, "", nums) for sid, nums in numbers.items()}}
    return claims.evaluate(findings, claims.STATEMENTS)


def test_the_long_contexts_follow_up_quotes_its_numbers_in_both_languages():
    report = answer_cases()["long contexts"]
    for lang, question in (("en", "What about long contexts?"), ("zh", "那长上下文呢？")):
        item = answer.compose(report, lang)["follow_ups"][3]
        assert item["question"] == question
        assert all(number in item["answer"][0] for number in ("0.70", "0.002", "0.99", "0.58", "0.75"))
        assert "%" not in item["answer"][0]  # seeds are counted, not given as shares
    en = answer.compose(report, "en")["follow_ups"][3]["answer"][0]
    assert ("4 of 4 models under 1/sqrt(d_k) alone lost accuracy, 0 of 4 of the same models run under log-n, and 1 of "
            "6 models trained under log-n") in en
    assert "one-layer models on a needle task" in en
    assert ("lets a needle fade; trained, models under sqrt(log n) kept 0.93 of their needle's weight at 16x against "
            "1.01 under log n, 1 of 8 losing more than a tenth of it (L3") in en
    assert "not measured" in answer.compose(report_from({}), "en")["follow_ups"][3]["answer"][0]


def test_the_30_second_answer_fits_in_30_seconds_in_both_languages():
    for name, report in short_cases().items():
        en = " ".join(answer.compose(report, "en")["short"])
        zh = "".join(answer.compose(report, "zh")["short"])
        assert len(en.split()) <= answer.SHORT_WORDS, (name, len(en.split()), en)
        assert hanzi(zh) <= answer.SHORT_HANZI, (name, hanzi(zh), zh)


def test_every_catalogue_entry_has_both_languages_and_is_produced_by_some_report(monkeypatch):
    """One catalogue words the whole answer; each entry has its English and Chinese text with the same
    numbers, and each is worded, in both languages, for some report built by the real evaluation."""
    from attnscale import answer_catalogue

    for entry, words in answer_catalogue.ENTRIES.items():
        assert set(words) == set(answer.LANGS), entry
        fields = {lang: set(re.findall(r"{(\w+)}", text)) for lang, text in words.items()}
        assert fields["zh"] <= fields["en"], entry  # the English wording may add grammar (plurals), never numbers
    for lang in answer.LANGS:
        used = set()
        monkeypatch.setattr(answer_catalogue, "used", used)
        for report in answer_cases().values():
            answer.render_text(answer.compose(report, lang))
        assert used == set(answer_catalogue.ENTRIES), (lang, set(answer_catalogue.ENTRIES) - used)
    text = answer.render_text(answer.compose(report_from(MEASURED | {"training": training(PARTLY, 0.05)}), "en"))
    assert "(not ±100)" in text and "training stalls in some settings or seeds, not all" in text


def test_no_language_is_decided_outside_the_catalogue():
    """The sentence functions decide; only the catalogue words: no branch on the language in them."""
    import inspect

    for build in (*answer.SHORT_SENTENCES, *answer.FULL_SENTENCES, *(f for _, f in answer.FOLLOW_UPS)):
        source = inspect.getsource(build)
        assert "lang" not in source and not re.search(r"[\u4e00-\u9fff]", source), build.__name__


def test_the_three_layers_print_in_order():
    report = report_from({**MEASURED, "training": training(PARTLY, 0.05)})
    for lang, headings in (("en", ["The 30-second answer", "The full answer, as measured", "Follow-up 1:"]),
                           ("zh", ["30 秒回答", "完整回答（逐条实测）", "追问 1："])):
        composed = answer.compose(report, lang)
        text = answer.render_text(composed)
        places = [text.index(h) for h in headings]
        assert places == sorted(places), lang
        assert text.index(composed["short"][0]) < places[1] < text.index(composed["answer"][0])
    en = answer.compose(report, "en")["short"]
    assert en[0].startswith("Why sqrt(d_k):") and "within 10.8% up to d_k = 4096" in en[0] and "within 7.7%" in en[0]
    assert "learned 90%-95% of what sqrt(d_k) learned" in en[1]


def test_the_shipped_reference_is_the_quick_report_this_code_makes(quick_report):
    """The reference that `answer` speaks from before any run: rebuilt here from the quick preset at
    seed 0, every label and every number the answer quotes (in both languages) must match it."""
    from attnscale import reference

    _, fresh = quick_report
    shipped = reference.load()
    assert shipped["preset"] == "quick" and shipped["seed"] == 0
    lines = lambda report: {c["id"]: c["verdict_line"] for c in report["claims"] + report["statements"]}
    assert lines(shipped) == lines(fresh), "regenerate it: python -m attnscale.reference FOLDER (quick, seed 0)"
    for lang in answer.LANGS:
        assert answer.render_text(answer.compose(shipped, lang)) == answer.render_text(answer.compose(fresh, lang))


def test_answer_speaks_from_the_reference_before_any_run_and_a_local_report_wins(tmp_path):
    from attnscale import reference

    run = lambda *args: subprocess.run([sys.executable, "-m", "attnscale", "answer", *args], cwd=tmp_path,
                                       capture_output=True, text=True)
    before = run()
    assert before.returncode == 0, before.stderr
    shipped = reference.load()
    assert before.stdout.startswith("(No report here yet: this is the reference report shipped with attnscale "
                                    f"{shipped['attnscale_version']} (preset quick, seed 0, measured "
                                    f"{shipped['started'][:10]} on {shipped['machine']})")
    assert "The 30-second answer" in before.stdout
    # a local report, when present, takes precedence (here the reference itself with one label changed)
    local = dict(shipped, claims=[dict(c, verdict="supported", verdict_line="supported") if c["id"] == "C07" else c
                                  for c in shipped["claims"]])
    (tmp_path / "attnscale-report").mkdir()
    (tmp_path / "attnscale-report" / "report.json").write_text(json.dumps(local), encoding="utf-8")
    after = run()
    assert after.returncode == 0 and "No report here yet" not in after.stdout
    assert after.stdout != before.stdout


def _shipped():
    from attnscale import reference

    return json.loads(json.dumps(reference.load()))


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(statements={"L1": {}}), "'statements' is a dict"),
    (lambda r: r["statements"].append(["L9"]), "not a claim with an 'id'"),
    (lambda r: r["statements"][0].update(id="C05"), "'C05'; accepted: L1, L2"),
    (lambda r: r["statements"][0].update(verdict="great"), "lacks a known 'verdict'"),
    (lambda r: r["statements"][0].update(lab_verdicts={"length": ["supported"]}), "from the 'length' lab"),
    (lambda r: r["statements"][0].update(figures=[1, 2]), "'figures' is not a list of strings"),
    (lambda r: r["statements"][0].update(parts=[{"text": 3}]), "'parts' is not a list of parts"),
    (lambda r: r["claims"][4].update(lab_verdicts={"training": ["refuted"]}), "'C05''s verdict from the 'training'"),
    (lambda r: r["statements"].append(dict(r["statements"][0])), "'L1' appears twice"),
])
def test_every_shape_of_a_bad_report_is_refused_in_words(edit, needle):
    report = _shipped()
    edit(report)
    with pytest.raises(ValueError) as refused:
        answer.check_report(report, "r.json")
    assert needle in str(refused.value)


def test_control_sequences_in_a_report_never_reach_the_terminal(tmp_path):
    report = _shipped()
    report["claims"][6]["verdict_line"] = "refuted\x1b]52;c;aGk=\x07\x1b[2J"  # a clipboard write, a screen clear
    report["statements"][0]["claim"] += "\x1b[31m"
    (tmp_path / "report.json").write_text(json.dumps(report), encoding="utf-8")
    for command in (["answer"], ["explain", "C07"], ["explain", "L1"], ["answer", "--json"]):
        done = subprocess.run([sys.executable, "-m", "attnscale", *command, "--report", str(tmp_path)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
