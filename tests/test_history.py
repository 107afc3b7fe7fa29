"""The history check: reading scale statements by pattern, the verified cache, and the black-box probe.

Nothing here uses the network.  Synthetic distributions are built in tmp_path; the one test
on a real release runs only if pytorch-pretrained-bert 0.1.2 is already in the cache.
"""

import hashlib
import io
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from attnscale.history import factor_history, format_table
from attnscale.history.cache import check, default_cache_dir, fetch, status, unpack
from attnscale.history.probe import match_rule, probe_release, probe_releases
from attnscale.history.reader import SUBJECTS, blank_strings_and_comments, read_release, read_tree, scan_source
from attnscale.history.releases import RELEASES, Release, find_release

SCALE = "attention_scores = attention_scores / math.sqrt(self.attention_head_size)"

MODELING = textwrap.dedent('''\
    """BERT, synthetic.  A docstring may say: attention_scores / math.sqrt(self.attention_head_size)."""
    import math

    import torch
    from torch import nn


    def gelu(x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


    class BertConfig(object):
        def __init__(self, vocab_size_or_config_json_file, hidden_size=32, num_attention_heads=2,
                     num_hidden_layers=1, intermediate_size=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0):
            self.hidden_size = hidden_size
            self.num_attention_heads = num_attention_heads
            self.attention_probs_dropout_prob = attention_probs_dropout_prob


    class BertLayerNorm(nn.Module):
        def forward(self, x):
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return (x - u) / torch.sqrt(s + 1e-12)


    class BertSelfAttention(nn.Module):
        def __init__(self, config):
            super(BertSelfAttention, self).__init__()
            self.num_attention_heads = config.num_attention_heads
            self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
            self.all_head_size = self.num_attention_heads * self.attention_head_size
            self.query = nn.Linear(config.hidden_size, self.all_head_size)
            self.key = nn.Linear(config.hidden_size, self.all_head_size)
            self.value = nn.Linear(config.hidden_size, self.all_head_size)
            self.extra = EXTRA

        def transpose_for_scores(self, x):
            new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            return x.view(*new_x_shape).permute(0, 2, 1, 3)

        def forward(self, hidden_states, attention_mask):
            query_layer = self.transpose_for_scores(self.query(hidden_states))
            key_layer = self.transpose_for_scores(self.key(hidden_states))
            value_layer = self.transpose_for_scores(self.value(hidden_states))
            attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
            # the scale: attention_scores / math.sqrt(self.attention_head_size)
            SCALE_LINE
            attention_scores = attention_scores * self.extra
            attention_scores = attention_scores + attention_mask
            attention_probs = nn.Softmax(dim=-1)(attention_scores)
            context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
            return context_layer.view(*(context_layer.size()[:-2] + (self.all_head_size,)))
    ''')


def bert_source(scale_line: str = SCALE, extra: str = "1.0") -> str:
    return MODELING.replace("SCALE_LINE", scale_line).replace("EXTRA", extra)


def line_of(text: str, statement: str) -> int:
    """The 1-based line where ``statement`` is code (not the comment or docstring that quotes it)."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == statement:
            return number
    raise AssertionError(f"{statement!r} not in text")


def write_wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, text in files.items():
            bundle.writestr(name, text)
    return path


def write_sdist(path: Path, top: str, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as bundle:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    return path


def release_for(path: Path, version: str = "0.0.1", package: str = "pytorch-pretrained-bert",
                kind: str = "wheel", language: str = "pytorch") -> Release:
    """A Release whose hash and size are those of the synthetic file at ``path``."""
    data = path.read_bytes()
    return Release(package, version, path.name, hashlib.sha256(data).hexdigest(), kind, "2018-11", language, len(data))


def fake_bert_wheel(folder: Path, version: str, files: dict[str, str]) -> Release:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = write_wheel(folder / f"pytorch_pretrained_bert-{version}-py3-none-any.whl",
                        {"pytorch_pretrained_bert/__init__.py": f'__version__ = "{version}"\n', **files})
    return release_for(wheel, version)


# ----------------------------------------------------------------------------- reader

def test_reader_finds_the_scale_statement_in_a_synthetic_wheel(tmp_path):
    source = bert_source()
    release = fake_bert_wheel(tmp_path, "0.0.1", {"pytorch_pretrained_bert/modeling.py": source})

    result = read_release(tmp_path, release)

    assert result.status.state == "present"
    found = [s for s in result.statements if s.scope[0] == "BertSelfAttention"]
    assert len(found) == 1, "the comment, the docstring, gelu's sqrt(2) and the layer norm are not scale statements"
    statement = found[0]
    assert statement.path == "pytorch_pretrained_bert/modeling.py"
    assert statement.line == line_of(source, SCALE)
    assert statement.statement == SCALE
    assert statement.scope == ("BertSelfAttention", "forward")
    assert statement.rule == "1/sqrt(d_k)"
    assert statement.formula == "1/sqrt(self.attention_head_size)"
    assert statement.factor(64) == pytest.approx(1 / 8)
    assert result.reading.forward_rule == "1/sqrt(d_k)"
    assert result.reading.where == f"pytorch_pretrained_bert/modeling.py:{statement.line}"


def test_reader_follows_the_statement_to_another_file(tmp_path):
    moved = bert_source().replace("class BertSelfAttention(nn.Module):", "class BertSelfAttention(nn.Module):  # moved")
    modeling = "from .models.bert.attention import BertSelfAttention, BertConfig\n"
    release = fake_bert_wheel(tmp_path, "0.0.2", {
        "pytorch_pretrained_bert/modeling.py": modeling,
        "pytorch_pretrained_bert/models/__init__.py": "",
        "pytorch_pretrained_bert/models/bert/__init__.py": "",
        "pytorch_pretrained_bert/models/bert/attention.py": moved,
    })

    reading = read_release(tmp_path, release).reading

    assert reading.primary.path == "pytorch_pretrained_bert/models/bert/attention.py"
    assert reading.primary.line == line_of(moved, SCALE)
    assert reading.defined_at.startswith("pytorch_pretrained_bert/models/bert/attention.py:")
    assert reading.summary == "1/sqrt(d_k) (forward)"


@pytest.mark.parametrize("line, rule", [
    ("q = q / math.sqrt(dim_per_head)", "1/sqrt(d_k)"),
    ("q *= key_depth_per_head**-0.5", "1/sqrt(d_k)"),
    ("attention = attention * (size_per_head ** -0.5)", "1/sqrt(d_k)"),
    ("w = w / (float(v.size(-1)) ** 0.5)", "1/sqrt(d_k)"),
    ("scores = scores * tf.rsqrt(tf.to_float(head_dim))", "1/sqrt(d_k)"),
    ("attention_scores = attention_scores / self.attention_head_size", "1/d_k"),
    ("q /= d_head", "1/d_k"),
])
def test_reader_rules_for_the_ways_old_code_wrote_the_factor(line, rule):
    text = f"def multihead_attention(q, attention, scores, w, v):\n    {line}\n    return q\n"
    found = scan_source(text, "x.py")
    assert [(s.line, s.rule, s.kind) for s in found] == [(2, rule, "forward")]


def test_reader_follows_a_stored_scale_to_where_it_is_applied():
    """XLNet / Transformer-XL style: ``self.scale = 1 / (d_head ** 0.5)``, applied later as ``* self.scale``."""
    from attnscale.history.reader import subject_reading
    text = textwrap.dedent('''\
        class RelMultiHeadAttn(nn.Module):
            def __init__(self, d_head):
                self.scale = 1 / (d_head ** 0.5)

            def forward(self, q, k):
                attn_score = torch.einsum("ibnd,jbnd->ijbn", (q, k))
                attn_score = attn_score * self.scale
                return attn_score
        ''')
    statement, = scan_source(text, "modeling_transfo_xl.py")
    assert (statement.kind, statement.applied, statement.rule) == ("constant", "*", "1/sqrt(d_k)")
    reading = subject_reading([statement], "RelMultiHeadAttn", "modeling_transfo_xl.py:1")
    assert reading.summary == "1/sqrt(d_k) (forward)" and reading.primary is statement

    divided = text.replace("1 / (d_head ** 0.5)", "d_head ** 0.5").replace("attn_score * self.scale",
                                                                           "attn_score / self.scale")
    statement, = scan_source(divided, "modeling_transfo_xl.py")
    assert (statement.applied, subject_reading([statement], "RelMultiHeadAttn", None).forward_rule) == ("/", "1/sqrt(d_k)")


def test_reader_sees_the_factor_folded_into_the_query_initialiser():
    """T5 / Mesh TensorFlow: W_q's std carries 1/sqrt(d_k); the forward scaling is off by default."""
    text = textwrap.dedent('''\
        class AttentionParams(object):
          def __init__(self, key_dim, fold_scaling_into_initializer=True):
            self.fold_scaling_into_initializer = fold_scaling_into_initializer

          def init_weights(self):
            stddev = self.query_input_dim.size ** -0.5
            if self.fold_scaling_into_initializer:
              stddev *= self.key_dim.size ** -0.5
            q_init = tf.random_normal_initializer(stddev=stddev)
            kv_init = tf.random_normal_initializer(stddev=self.memory_input_dim.size ** -0.5)

          def compute_q(self, x):
            ret = mtf.einsum([x, self.wq])
            if not self.fold_scaling_into_initializer:
              ret *= self.key_dim.size ** -0.5
            return ret
        ''')
    from attnscale.history.reader import subject_reading
    statements = scan_source(text, "mesh_tensorflow/transformer/attention.py")
    reading = subject_reading(statements, "AttentionParams", "mesh_tensorflow/transformer/attention.py:1")

    assert reading.forward_rule == "1 (none)"
    assert reading.init_exponent == pytest.approx(-0.5)
    assert reading.primary.line == line_of(text, "stddev *= self.key_dim.size ** -0.5")
    assert reading.primary.roles == ("q",)
    assert reading.summary == "1/sqrt(d_k) (folded into the init of W_q; forward: 1 (none))"
    assert any("off by default" in note and "ret *=" in note for note in reading.notes)


def test_reader_counts_a_quarter_power_on_both_q_and_k_as_one_over_sqrt_dk():
    text = ("def multihead_attention_params(io_channels, kv_channels):\n"
            "  qk_stddev = (io_channels.size ** -0.5) * (kv_channels.size ** -0.25)\n")
    statement, = scan_source(text, "layers.py")
    assert statement.kind == "init" and statement.roles == ("q", "k")
    assert statement.rule == "d_k^-1/4" and statement.logit_exponent == pytest.approx(-0.5)


def test_reader_reads_an_sdist_with_its_project_folder(tmp_path):
    text = "def multihead_attention(q):\n    q *= key_depth_per_head**-0.5\n    return q\n"
    sdist = write_sdist(tmp_path / "tensor2tensor-1.0.tar.gz", "tensor2tensor-1.0",
                        {"setup.py": "", "tensor2tensor/__init__.py": "", "tensor2tensor/models/common_attention.py": text})
    release = release_for(sdist, "1.0", "tensor2tensor", "sdist", "tensorflow")

    result = read_release(tmp_path, release)

    assert result.reading.where == "tensor2tensor/models/common_attention.py:2"
    assert result.reading.summary == "1/sqrt(d_k) (forward)"


# ----------------------------------------------------------------------------- cache

@pytest.fixture
def cached(tmp_path):
    """A cache folder holding one synthetic wheel, and its Release."""
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    return tmp_path / "cache", release


def test_cache_status_present_missing_partial_tampered(cached):
    folder, release = cached
    archive = folder / release.filename
    assert check(folder, release).state == "present"

    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    partial = check(folder, release)
    assert partial.state == "partial" and "truncated" in partial.reason

    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x01
    archive.write_bytes(bytes(changed))
    tampered = check(folder, release)
    assert tampered.state == "tampered" and "sha256" in tampered.reason

    archive.unlink()
    missing = check(folder, release)
    assert missing.state == "missing" and "attnscale history --fetch" in missing.fetch_command

    (folder / (release.filename + ".part")).write_bytes(data[:10])
    assert check(folder, release).state == "partial"


def test_an_edited_unpacked_copy_is_unpacked_again(cached):
    folder, release = cached
    root = unpack(folder, release).root
    modeling = root / "pytorch_pretrained_bert" / "modeling.py"
    modeling.write_text(modeling.read_text().replace("math.sqrt(self.attention_head_size)", "self.attention_head_size"))

    again = unpack(folder, release).root

    assert SCALE in (again / "pytorch_pretrained_bert" / "modeling.py").read_text()


def test_unusable_files_give_a_reason_instead_of_an_exception(cached):
    folder, release = cached
    archive = folder / release.filename
    changed = bytearray(archive.read_bytes())
    changed[-1] ^= 0xFF
    archive.write_bytes(bytes(changed))

    read = read_release(folder, release)
    assert read.reading is None and read.status.state == "tampered"
    assert unpack(folder, release).root is None
    probed = probe_release(folder, release)
    assert probed.state == "unavailable" and "--fetch" in probed.reason

    rows = factor_history(folder, releases=[release])
    assert rows[0]["status"].startswith("tampered:") and "--fetch" in rows[0]["status"]
    assert rows[0]["agreement"] == "not checked: tampered"

    empty = factor_history(folder / "nowhere", releases=RELEASES[:2])
    assert [row["status"].split(":")[0] for row in empty] == ["missing", "missing"]
    assert "missing" in format_table(empty)


def test_status_reports_every_release_and_the_default_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCALE_HISTORY_CACHE", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    states = status(None)
    assert len(states) == len(RELEASES) and {s.state for s in states} == {"missing"}
    with pytest.raises(ValueError, match="cache_dir is empty"):
        status("  ")


FAKE_PIP = textwrap.dedent('''\
    import shutil, sys
    args = sys.argv[1:]
    dest = args[args.index("--dest") + 1]
    shutil.copy(sys.argv[0].replace("fake_pip.py", "SOURCE"), dest)
    ''')


def test_fetch_verifies_the_hash_and_keeps_only_the_published_bytes(tmp_path):
    upstream = tmp_path / "upstream"
    release = fake_bert_wheel(upstream, "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    script = upstream / "fake_pip.py"
    script.write_text(FAKE_PIP.replace("SOURCE", release.filename))
    cache = tmp_path / "cache"

    fetched, = fetch(cache, [release], pip=[sys.executable, str(script)])
    assert fetched.state == "present" and (cache / release.filename).read_bytes() == (upstream / release.filename).read_bytes()

    wrong = replace(release, sha256="0" * 64)
    (cache / release.filename).unlink()
    refused, = fetch(cache, [wrong], pip=[sys.executable, str(script)])
    assert refused.state == "tampered" and "not kept" in refused.reason
    assert not (cache / release.filename).exists()


def test_release_list_is_well_formed():
    assert len({r.filename for r in RELEASES}) == len(RELEASES)
    assert sum(r.size for r in RELEASES) < 20_000_000
    assert find_release("transformers", "4.0.0").kind == "wheel"
    with pytest.raises(ValueError, match="no release"):
        find_release("transformers", "9.9.9")
    with pytest.raises(ValueError, match="YYYY-MM"):
        Release("transformers", "1", "t-1-py3-none-any.whl", "0" * 64, "wheel", "2019", "pytorch", 1)


# ----------------------------------------------------------------------------- probe

@pytest.mark.parametrize("measured, rule", [
    ({16: 0.25, 64: 0.125}, "1/sqrt(d_k)"),
    ({16: 1 / 16, 64: 1 / 64}, "1/d_k"),
    ({16: 1.0, 64: 1.0}, "none"),
    ({16: 0.3, 64: 0.2}, "other"),
])
def test_two_head_sizes_tell_the_rules_apart(measured, rule):
    assert match_rule(measured)[0] == rule


def test_one_head_size_is_not_enough():
    with pytest.raises(ValueError, match="two head sizes"):
        match_rule({64: 0.125})


def test_probe_reports_a_disagreement_instead_of_choosing(tmp_path):
    """The text says 1/sqrt(d_k), but the module also multiplies by a hidden 1/sqrt(d_k): it runs 1/d_k."""
    hidden = "1.0 / math.sqrt(int(config.hidden_size / config.num_attention_heads))"
    release = fake_bert_wheel(tmp_path, "0.0.3", {"pytorch_pretrained_bert/modeling.py": bert_source(extra=hidden)})

    row, = factor_history(tmp_path, releases=[release])

    assert row["forward_read"] == "1/sqrt(d_k)"
    assert row["rule_measured"] == "1/d_k"
    assert row["factor_measured"] == {16: pytest.approx(1 / 16), 64: pytest.approx(1 / 64)}
    assert row["agreement"].startswith("DISAGREE: read 1/sqrt(d_k), measured 1/d_k")


def test_releases_run_in_one_worker_import_each_its_own_code(tmp_path):
    """Two releases of one package, one scaling by 1/sqrt(d_k) and one by 1/d_k, then a third that does not import,
    run in one worker process: each measures its own module (a module left in sys.modules by the first would give
    the second the first's factor), and a failure stays with its release."""
    hidden = "1.0 / math.sqrt(int(config.hidden_size / config.num_attention_heads))"
    plain = fake_bert_wheel(tmp_path / "a", "0.0.4", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    doubled = fake_bert_wheel(tmp_path / "b", "0.0.5", {"pytorch_pretrained_bert/modeling.py": bert_source(extra=hidden)})
    broken = fake_bert_wheel(tmp_path / "c", "0.0.6", {"pytorch_pretrained_bert/modeling.py":
                                                        "import no_such_module_here\n" + bert_source()})
    for folder in ("b", "c"):
        for file in (tmp_path / folder).iterdir():
            file.rename(tmp_path / "a" / file.name)

    first, second, third, again = probe_releases(tmp_path / "a", [plain, doubled, broken, plain])

    assert first.rule == "1/sqrt(d_k)" and second.rule == "1/d_k" and again.rule == "1/sqrt(d_k)"
    assert third.state == "failed" and "no_such_module_here" in third.reason
    assert first.measured == again.measured and first.stubs_used == again.stubs_used


def test_a_release_that_hangs_crashes_or_prints_keeps_its_failure_to_itself(tmp_path):
    """In one worker: a release that prints an answer-like line of its own, one that never returns, one that
    takes the interpreter down; the releases after each still get their own answers (a fresh interpreter
    after the hang and the crash)."""
    versions = {"0.1.7": 'print(\'{"ok": true, "index": 5}\')\n', "0.1.8": "import time\ntime.sleep(600)\n",
                "0.1.9": "import os\nos._exit(3)\n"}
    releases = []
    for version, prelude in versions.items():
        releases.append(fake_bert_wheel(tmp_path / version, version, {"pytorch_pretrained_bert/modeling.py":
                                                                        prelude + bert_source()}))
        releases.append(fake_bert_wheel(tmp_path / f"{version}-good", version + "1", {
            "pytorch_pretrained_bert/modeling.py": bert_source()}))
    for folder in [p for p in tmp_path.iterdir() if p.is_dir()]:
        for file in folder.iterdir():
            file.rename(tmp_path / file.name)

    printed, after_print, hung, after_hang, crashed, after_crash = probe_releases(tmp_path, releases, timeout_s=15)

    assert printed.rule == after_print.rule == after_hang.rule == after_crash.rule == "1/sqrt(d_k)"
    assert hung.state == "failed" and "took longer than 15 s" in hung.reason
    assert crashed.state == "failed" and "exited 3 without an answer" in crashed.reason


def test_probe_on_the_real_pytorch_pretrained_bert_0_1_2():
    release = find_release("pytorch-pretrained-bert", "0.1.2")
    folder = default_cache_dir()
    cached = check(folder, release)
    if not cached.usable:
        pytest.skip(f"the real {release.filename} is {cached.state} in the cache {folder} ({cached.reason}); "
                    f"fetch it with `{cached.fetch_command}` to run this test")

    probed = probe_release(folder, release)

    assert probed.state == "measured", probed.reason
    assert probed.measured == {16: pytest.approx(0.25, rel=1e-9), 64: pytest.approx(0.125, rel=1e-9)}
    assert probed.rule == "1/sqrt(d_k)"
    reading = read_release(folder, release).reading
    assert reading.forward_rule == probed.rule
    assert reading.primary.statement == SCALE


def test_subjects_cover_every_release(tmp_path):
    assert {r.package for r in RELEASES} <= set(SUBJECTS)
    with pytest.raises(ValueError, match="no package folder"):
        read_tree(tmp_path, "no_such_package_here", SUBJECTS["transformers"])


def test_a_relative_cache_folder_is_the_one_below_the_current_folder(tmp_path, monkeypatch):
    """The probes run in a subprocess in another folder: a relative ATTNSCALE_HISTORY_CACHE made every
    probe fail (and the run exit 0 with C13 not testable), so it is made absolute where it is read."""
    from attnscale.history import cache

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNSCALE_HISTORY_CACHE", "hist")
    assert cache.default_cache_dir() == tmp_path / "hist" and cache.resolve_cache_dir().is_absolute()
    assert cache.resolve_cache_dir("other") == tmp_path / "other"


def blank_by_hand(text: str) -> str:
    """The reference: strings' bodies and comments blanked one character at a time, as a reader walks
    them (a backslash takes the next character with it; a one-quote string ends at a bare newline)."""
    out, i, n = [], 0, len(text)
    while i < n:
        char = text[i]
        if char == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif char in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else char
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if len(quote) == 1 and text[j] == "\n":
                    break
                j += 2 if text[j] == "\\" else 1
            body = text[i + len(quote):j]
            closed = j < n and text.startswith(quote, j)
            out.append(quote + "".join(c if c == "\n" else " " for c in body) + (quote if closed else ""))
            i = min(n, j + len(quote)) if closed else j
        else:
            out.append(char)
            i += 1
    return "".join(out)


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(["#", "'", '"', "\\", "\n", "a", " ", '"""', "'''", "r", "\\\n", "(", "x = 1"]),
                max_size=40).map("".join))
def test_blanking_strings_and_comments_equals_a_character_walk(text):
    blanked = blank_strings_and_comments(text)
    assert blanked == blank_by_hand(text)
    assert len(blanked) == len(text) and [i for i, c in enumerate(blanked) if c == "\n"] == \
        [i for i, c in enumerate(text) if c == "\n"]


def test_blanking_keeps_code_and_quotes():
    text = 'x = "a # b"  # note\ny = \'\'\'doc\n"s"\'\'\' + f"{z}"\n'
    assert blank_strings_and_comments(text) == 'x = "     "        \ny = \'\'\'   \n   \'\'\' + f"   "\n'
    # an escaped quote does not close; a one-quote string left open ends at its line's end
    assert blank_strings_and_comments('a = "b\\" c\nd') == 'a = "     \nd'
