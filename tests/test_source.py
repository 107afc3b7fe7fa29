"""The interview answer, whole: the original kept verbatim, an English rendering, the claim IDs in both."""

import re
import subprocess
import sys

import pytest

from attnscale import claims, source

IDS = re.compile(r"\[(C\d\d)\]")


def test_the_original_is_kept_verbatim_under_its_marks():
    marked = source.source_text("zh")
    assert IDS.sub("", marked) == source.original()
    assert source.original().startswith("为什么attention的公式中是除以根号d_k")


@pytest.mark.parametrize("lang", source.LANGS)
def test_every_claim_is_marked_where_the_answer_makes_it(lang):
    found = IDS.findall(source.source_text(lang))
    assert sorted(set(found)) == sorted(c.id for c in claims.CLAIMS)


def test_a_claim_is_marked_after_the_sentence_that_makes_it():
    marked = source.source_text("zh")
    assert "导致训练慢 2-3 倍。[C13]" in marked and "训练 loss 不降。[C17]" in marked
    # C05 is made twice: in section 2.2 and among the wrong answers of section 5
    assert len(re.findall(r"\[C05\]", marked)) == 2 and "根本不可用。[C05]" in marked


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="unknown language 'fr'; accepted: zh, en"):
        source.source_text("fr")


def test_answer_source_prints_it(tmp_path):
    run = lambda *args: subprocess.run([sys.executable, "-m", "attnscale", "answer", "--source", *args],
                                       cwd=tmp_path, capture_output=True, text=True)
    zh, en = run("--lang", "zh"), run()
    assert zh.returncode == 0 and zh.stdout.rstrip("\n") == source.source_text("zh").rstrip("\n")
    assert en.returncode == 0 and "Why does the attention formula divide by the square root of d_k" in en.stdout
    bad = run("--lang", "fr")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fr" in bad.stderr
