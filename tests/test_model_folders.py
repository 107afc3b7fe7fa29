"""A model folder never runs its own code: folders with auto_map code and pickle-only weights
are refused with one line and exit code 2, even when "y" is piped to stdin."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from attnscale import diagnosis

SRC = str(Path(__file__).resolve().parents[1] / "src")


def code_folder(tmp_path: Path, marker: Path) -> Path:
    """A folder whose configuration and modeling code write ``marker`` when imported."""
    folder = tmp_path / "evil-model"
    folder.mkdir()
    config = {"model_type": "evil", "architectures": ["EvilModel"], "hidden_size": 8,
              "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    (folder / "configuration_evil.py").write_text(
        payload + "from transformers import PretrainedConfig\n\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")
    (folder / "modeling_evil.py").write_text(
        payload + "from transformers import PreTrainedModel\nfrom .configuration_evil import EvilConfig\n\n"
        "class EvilModel(PreTrainedModel):\n    config_class = EvilConfig\n")
    return folder


class WritesMarker:
    """Unpickling this object writes a marker file (what a malicious pytorch_model.bin does)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "ran"))


def pickle_folder(tmp_path: Path, marker: Path) -> Path:
    folder = tmp_path / "bin-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2,
                                                    "num_hidden_layers": 1, "intermediate_size": 64,
                                                    "vocab_size": 100}))
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(WritesMarker(marker)))
    return folder


def run_cli(args, tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    return subprocess.run([sys.executable, "-m", "attnscale", *args], input="y\ny\ny\n", capture_output=True,
                          text=True, env=env, timeout=300, cwd=tmp_path)


def test_the_code_folder_really_runs_code_when_trusted(tmp_path):
    """The positive control: transformers does run this folder's code when trusted."""
    from transformers import AutoConfig

    marker = tmp_path / "marker"
    folder = code_folder(tmp_path, marker)
    AutoConfig.from_pretrained(str(folder), trust_remote_code=True, local_files_only=True)
    assert marker.exists()


@pytest.mark.parametrize("command", [["diagnose"], ["audit"]])
def test_cli_refuses_a_folder_with_code_even_when_told_yes(command, tmp_path):
    marker = tmp_path / "marker"
    folder = code_folder(tmp_path, marker)
    done = run_cli([*command, str(folder)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "auto_map" in done.stderr and "configuration_evil.EvilConfig" in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("command", [["diagnose"], ["audit"]])
def test_cli_refuses_pickle_only_weights(command, tmp_path):
    marker = tmp_path / "marker"
    folder = pickle_folder(tmp_path, marker)
    done = run_cli([*command, str(folder)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "safetensors" in done.stderr and "pytorch_model.bin" in done.stderr
    assert not marker.exists()


def test_api_refuses_code_and_pickles(tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(ValueError, match="auto_map AutoConfig -> configuration_evil.EvilConfig"):
        diagnosis.load_model(code_folder(tmp_path, marker))
    with pytest.raises(ValueError, match="auto_map"):
        diagnosis.load_config(tmp_path / "evil-model")
    with pytest.raises(ValueError, match="only from safetensors"):
        diagnosis.load_model(pickle_folder(tmp_path, marker))
    assert not marker.exists()
    tokenizer_code = tmp_path / "tok"
    tokenizer_code.mkdir()
    (tokenizer_code / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tokenizer_code / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["tok.T", None]}}))
    with pytest.raises(ValueError, match="tokenizer_config.json auto_map AutoTokenizer"):
        diagnosis.check_model_dir(tokenizer_code)


@pytest.mark.parametrize("model_type", ["florence2", "musicflamingo", "glm5_next"])
def test_the_size_check_accepts_the_sizes_transformers_own_configs_write(model_type, tmp_path):
    """Florence-2's DaViT vision config sizes its heads per stage ([1, 2, 4, 8]), MusicFlamingo writes
    max_position_embeddings as 1200.0 and GLM-5's text config head_dim 0 (its RoPE width): a folder saved from each
    passes the check (each was refused), while a size of 1.5, 0 or a stage of 0 still is not."""
    from transformers import AutoConfig

    from attnscale.errors import UserError
    from attnscale.probing.loading import check_config_sizes, check_model_dir

    AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    check_model_dir(tmp_path)  # no error
    for bad in (1.5, 0, [1, 0, 4], [], True):
        with pytest.raises(UserError, match=r"num_heads is .*; accepted: a whole number >= 1"):
            check_config_sizes({"num_heads": bad}, tmp_path / "config.json")
