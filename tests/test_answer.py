import re
import subprocess
import sys

import pytest

from attnscale import answer, claims
from attnscale.claims import PARTLY, REFUTED, SUPPORTED, Finding

SATURATION = {
    "C04": Finding(SUPPORTED, "", {"max_std_error": 0.077, "min_share_within_3": 0.976, "max_saturated_share": 0.0}),
    "C05": Finding(SUPPORTED, "", {"min_normalized_entropy": 0.9984, "min_uniform_share": 0.92}),
    "C06": Finding(REFUTED, "", {"max_logit_abs": 32.0, "min_saturated_share": 0.15, "grad_ratio_none_sqrt": 15.3,
                                 "dk_logits_reach_100": 1208.0}),
    "C16": Finding(PARTLY, "", {"share_p_in_5_95_n2": 0.96, "share_p_in_5_95_n128": 0.009}),
    "C18": Finding(SUPPORTED, "", {"zero_slope_exponent": 0.498}),
}

DOCTOR = {"C10": Finding(PARTLY, "", {"t5_factor": 1.0, "t5_wq_wk_std_ratio": 0.125, "d_kv": 64})}


def training(c06_verdict, c06_progress):
    return {
        "C05": Finding(REFUTED, "", {"inv_d_progress_recall_64": 0.95, "inv_d_progress_recall_256": 0.9}),
        "C06": Finding(c06_verdict, "", {"none_progress_recall_64": c06_progress, "init_max_abs_logit": 60.0}),
        "C10": Finding(PARTLY, "", {"final_logit_std_gap_adamw": 0.12, "final_logit_std_gap_adafactor": 0.0,
                                     "step0_gap": 0.0}),
        "C17": Finding(REFUTED, "", {"median_grad_ratio_sqrt_over_none": 0.5}),
        "C18": Finding(SUPPORTED, "", {"sqrt_near_best_cells": 5, "cells": 6}),
    }


def report_from(findings):
    return {"preset": "quick", "seed": 0, "claims": claims.evaluate(findings)}


def test_with_no_evidence_every_sentence_says_it_is_pending():
    composed = answer.compose(report_from({}), "en")
    sentences = composed["answer"] + [s for item in composed["follow_ups"] for s in item["answer"]]
    assert len(sentences) == 10
    assert all("not measured yet" in s for s in sentences)


def test_sentences_quote_the_measured_numbers():
    text = answer.render_text(answer.compose(report_from({"saturation": SATURATION}), "en"))
    assert "±32, not ±100" in text and "d_k ≈ 1208" in text and "15x the sqrt rule's" in text
    assert "0.998" in text and "0.498" in text and "0.9% for 128 keys" in text
    assert "C06's training half: not measured yet" in text


@pytest.mark.parametrize("verdict, progress, phrase", [
    (REFUTED, 0.9, "training does not stall: it learned 90%"),
    (SUPPORTED, 0.05, "training stalls: it learned 5%"),
    (PARTLY, 0.5, "training is hurt: it learned 50%"),
])
def test_the_text_follows_the_verdict(verdict, progress, phrase):
    findings = {"saturation": SATURATION, "training": training(verdict, progress), "doctor": DOCTOR}
    text = answer.render_text(answer.compose(report_from(findings), "en"))
    assert phrase in text
    assert "not 'unusable'" in text and "90%-95%" in text  # C05 refuted in training
    assert "2.00x that with scaling" in text and "not 10x smaller" in text  # C17 ratio 0.5
    assert "equivalent under adafactor, but the per-layer logit std ends apart under adamw by 12%" in text and "measured std ratio 0.125 at d_kv = 64" in text


def test_chinese_text_is_chinese_and_carries_the_same_numbers():
    findings = {"saturation": SATURATION, "training": training(REFUTED, 0.9)}
    zh = answer.render_text(answer.compose(report_from(findings), "zh"))
    assert len(re.findall(r"[\u4e00-\u9fff]", zh)) > 300
    assert "±32" in zh and "1208" in zh and "训练并未停滞" in zh and "90%" in zh


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
