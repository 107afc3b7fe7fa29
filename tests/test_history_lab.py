"""The history lab: C07, C10 and C13 read on the released code (rows as attnscale.history gives them)."""

import copy
import os

import pytest

from attnscale import claims, lab
from attnscale.claims import INCONCLUSIVE, NOT_TESTABLE, REFUTED, SUPPORTED
from attnscale.lab import history as H


def row(package, version, language="pytorch", statement="attention_scores / math.sqrt(self.attention_head_size)",
        read="1/sqrt(d_k) (forward)", forward="1/sqrt(d_k)", rule="1/sqrt(d_k)", agreement="agree"):
    measured = None if language == "tensorflow" or rule is None or statement is None else (
        {16: 0.25, 64: 0.125} if rule == "1/sqrt(d_k)" else {16: 1 / 16, 64: 1 / 64})
    return {"package": package, "version": version, "date": "2019-01", "language": language,
            "location": f"{package}/modeling.py:200" if statement else None, "statement": statement,
            "factor_read": read if statement else None, "forward_read": forward if statement else None,
            "factor_measured": measured, "rule_measured": rule if measured else None,
            "agreement": agreement if statement else "not checked: missing",
            "status": "checked" if statement else "missing: not in the cache; fetch with `attnscale history --fetch`",
            "notes": []}


def result(rows):
    return {"config": {"head_dims": [16, 64], "run": True, "seed": 0, "device": "cpu"}, "cache": "/cache",
            "fetch_command": "attnscale history --fetch", "rows": rows}


MEASURED = result([
    row("tensor2tensor", "1.0", "tensorflow", "q *= key_depth_per_head**-0.5", rule=None),
    row("pytorch-pretrained-bert", "0.1.2"), row("pytorch-transformers", "1.0.0"), row("transformers", "4.0.0"),
    row("mesh-tensorflow", "0.0.5", "tensorflow", "qk_stddev = (io_channels.size ** -0.5) * (kv_channels.size ** -0.25)",
        read="1/sqrt(d_k) (folded into the init of W_q, W_k; forward: 1 (none))", forward="1 (none)", rule=None),
    row("mesh-tensorflow", "0.1.21", "tensorflow", "stddev *= self.key_dim.size ** -0.5",
        read="1/sqrt(d_k) (folded into the init of W_q; forward: 1 (none))", forward="1 (none)", rule=None),
])


def test_c13_every_outcome():
    assert H.judge_c13(MEASURED).verdict == REFUTED  # every release divides by sqrt(d_k), reading and run agreeing
    edited = copy.deepcopy(MEASURED)
    edited["rows"][2] = row("pytorch-transformers", "1.0.0", statement="attention_scores / self.attention_head_size",
                            read="1/d_k (forward)", forward="1/d_k", rule="1/d_k")
    found = H.judge_c13(edited)
    assert found.verdict == SUPPORTED and found.numbers["bert_releases_inv_d"] == 1
    disagree = copy.deepcopy(MEASURED)
    disagree["rows"][1]["agreement"] = "DISAGREE: read 1/sqrt(d_k), measured 1/d_k"
    found = H.judge_c13(disagree)
    assert found.verdict == INCONCLUSIVE and "pytorch-pretrained-bert 0.1.2" in found.readings["old_bert"].decide
    empty = result([row(p, v, statement=None) for p, v in (("pytorch-pretrained-bert", "0.1.2"), ("transformers", "4.0.0"))])
    found = H.judge_c13(empty)
    assert found.verdict == NOT_TESTABLE and "attnscale history --fetch" in found.readings["old_bert"].note


def test_c13_quotes_every_release_it_checked():
    found = H.judge_c13(MEASURED)
    assert found.evidence.count("math.sqrt(self.attention_head_size)") == 3
    assert "d_k 16: 0.25, d_k 64: 0.125 -> 1/sqrt(d_k)" in found.evidence
    assert {s["where"].split(" (")[0] for s in found.readings["old_bert"].settings} == {
        "pytorch-pretrained-bert 0.1.2", "pytorch-transformers 1.0.0", "transformers 4.0.0"}


def test_c10_reads_t5s_code():
    found = H.judge_c10(MEASURED)
    assert found.readings["released"].state == claims.HOLDS and found.numbers["t5_releases_folded"] == 2
    assert "kv_channels.size ** -0.25" in found.evidence and "read, never imported" in found.evidence
    # which of the answer's two variance statements each release matches, derived from what it folds where
    assert "0.0.5 (2019-01) puts it in W_q and W_k, each with variance 1/sqrt(d_k)" in found.evidence
    assert "0.1.21 (2019-01) puts it in W_q, with variance 1/d_k" in found.evidence and "on Q only" in found.evidence
    forward = copy.deepcopy(MEASURED)
    forward["rows"][5].update(factor_read="1/sqrt(d_k) (forward)", forward_read="1/sqrt(d_k)")
    assert H.judge_c10(forward).readings["released"].state == claims.MIXED
    assert H.judge_c10(result([])).verdict == NOT_TESTABLE


def test_c07_reads_the_paper_and_quotes_the_original_code():
    found = H.judge_c07(MEASURED)
    assert found.verdict == REFUTED and "q *= key_depth_per_head**-0.5" in found.evidence
    assert found.numbers["original_code_factor"] == "1/sqrt(d_k)"
    assert H.judge_c07(MEASURED, paper_ran_ablation=True).verdict == SUPPORTED
    assert "not in the cache" in H.judge_c07(result([row("tensor2tensor", "1.0", "tensorflow", None)])).evidence


def test_findings_carry_exactly_their_declared_numbers():
    assert claims.undeclared_numbers(H.NUMBER_KEYS, H.judge(MEASURED)) == []
    assert set(H.judge(MEASURED)) == set(claims.claims_of_lab("history")) == {"C07", "C10", "C13"}


def test_a_result_is_keyed_by_what_the_cache_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCALE_HISTORY_CACHE", str(tmp_path))
    assert H.stored_key() == "cache:empty"
    from importlib.metadata import version
    assert lab.REGISTRY["history"].stored_version() == f"{H.VERSION}+transformers-{version('transformers')}+cache:empty"


@pytest.mark.skipif(not all(__import__("attnscale.history.cache", fromlist=["check"]).check(None, r).usable
                            for r in __import__("attnscale.history", fromlist=["RELEASES"]).RELEASES),
                    reason="the release cache is not filled here: `attnscale history --fetch` (set-up runs it)")
def test_the_real_releases_read_as_recorded():
    """On the real cache, read only (the probe is tested in test_history.py): every BERT release
    reads 1/sqrt(d_k) in its forward pass, and T5's Mesh TensorFlow folds it into the init."""
    measured = H.run(H.Config(run=False))
    found = H.judge(measured)
    bert = [r for r in measured["rows"] if r["package"] in H.verdicts.BERT_PACKAGES]
    assert bert and all(r["forward_read"] == "1/sqrt(d_k)" for r in bert)
    assert found["C10"].readings["released"].state == claims.HOLDS
    assert found["C13"].verdict == NOT_TESTABLE  # read only: no release was run, so nothing was measured


def test_the_table_ends_with_the_installed_transformers():
    """The same reader on today's BertSelfAttention: ``self.scaling = self.attention_head_size**-0.5``,
    passed as ``scaling=`` to the function that multiplies by it, reads 1/sqrt(d_k)."""
    row = H.experiment.installed_row()
    assert row["version"].endswith("(installed)") and row["scope"] == "BertSelfAttention"
    assert row["forward_read"] == "1/sqrt(d_k)" and "attention_head_size" in row["statement"]
    assert row["location"].startswith("transformers/models/bert/modeling_bert.py:")


def test_a_constant_passed_by_keyword_is_read_where_it_is_applied():
    from attnscale.history.reader import constant_use

    code = "self.scale = d ** -0.5\nout = attend(q, k, scaling=self.scale)\ndef attend(q, k, scaling):\n    return q @ k * scaling\n"
    assert constant_use(code, "self.scale") == "*"
    assert constant_use("self.scale = d ** -0.5\nuse(self.scale)\n", "self.scale") is None
