"""Subprocess entry point: import one old release's BERT self-attention and measure its logit scale.

Run as ``python -I -B _probe_worker.py '<json list of specs>'`` by :mod:`.probe`; prints one JSON
line per spec, in order.  It is a separate process because the old package must be imported from the
unpacked distribution, with stub modules for what it imports but the attention never uses, and
neither may leak into the caller (the caller's ``transformers`` is version 5).  Nor may one release
leak into the next: after each, the modules it brought in under its own package's name, the stubs and
the shims are dropped and sys.path and the import hooks put back (:func:`isolated`), so that each
release imports exactly what it would in a process of its own; torch is imported once for them all.

Standard library and torch only: this file must not import ``attnscale``.

How the factor is measured, black-box: W_q = W_k = W_v = identity, biases zero, two tokens.
Token 0 has ``a`` in the first coordinate of every head, token 1 is zero, so for query 0 the
logits are ``[s * a^2, 0]`` where ``s`` is the factor the code applies, and with V = identity
the first coordinate of head h's output is ``p * a`` with ``p = sigmoid(s * a^2)``.  Hence
``s = logit(p) / a^2``.  It is taken at two logit sizes (a^2 = 1 and 4) to check that the
code multiplies q.k by a constant; the caller compares two head sizes.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import math
import re
import sys
import traceback
import types
from pathlib import Path

# Modules the old packages import at module level for downloading, caching, progress bars and
# tokenizing.  The self-attention never calls them, and the installed versions (if any) are
# years newer, so each is replaced by a stub whether installed or not -- except one that torch
# itself already imported (tqdm, with torch 2.13), which stays real.  The probe reports which
# stubs the release actually imported.
STUBS = {
    "boto3": "S3 downloads of pretrained weights (file_utils)",
    "botocore": "S3 error classes, e.g. botocore.exceptions.ClientError (file_utils)",
    "requests": "HTTP downloads of pretrained weights (file_utils)",
    "tqdm": "download progress bars (file_utils)",
    "filelock": "locks on the download cache (file_utils, transformers 2+)",
    "regex": "GPT-2/RoBERTa tokenizers",
    "sacremoses": "XLM tokenizer",
    "sentencepiece": "XLNet/ALBERT tokenizers",
    "tokenizers": "fast tokenizers (transformers 3+)",
}


class _StubClass(Exception):
    """What any attribute of a stub module is: a class that can be called, subclassed, caught."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args)

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        return self


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        made = type(name, (_StubClass,), {"__module__": self.__name__})
        setattr(self, name, made)
        return made


def _six_shim(module) -> None:
    # The Python 2/3 compatibility package six (not installed here): pytorch-transformers and
    # transformers 2.x import it in modeling_utils and use PY2/PY3, string_types, text_type,
    # binary_type.  A stub would make ``six.PY2`` truthy, so these get their Python 3 values.
    module.PY2, module.PY3, module.PY34 = False, True, True
    module.string_types, module.integer_types = (str,), (int,)
    module.text_type, module.binary_type = str, bytes


def _torch_six_shim(module) -> None:
    # torch._six was removed in torch 2.0; releases of 2019-2020 import container_abcs,
    # string_classes, int_classes and inf from it.
    import collections.abc
    module.container_abcs = collections.abc
    module.string_classes, module.int_classes, module.inf = (str, bytes), int, math.inf
    module.PY3, module.PY37 = True, True


# Modules served with their old meaning because the old code branches on or calls them at import time.
SHIMS = {
    "six": (_six_shim, "six (not installed): PY2/PY3, string_types, text_type, binary_type with Python 3 values"),
    "torch._six": (_torch_six_shim, "torch._six (removed in torch 2.0): container_abcs, string_classes, int_classes, inf"),
}


class _CompatFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stub for every module under a name in :data:`STUBS` and a shim for each name in
    :data:`SHIMS` that the interpreter lacks, ahead of the real import system, and records
    which ones were imported."""

    def __init__(self):
        self.stubs_used: list[str] = []
        self.shims_used: list[str] = []
        # torch itself imports some of these (tqdm): those stay real, submodules included,
        # so one package is never half real and half stub.
        self.already_real = sorted(name for name in STUBS if name in sys.modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in SHIMS:
            if importlib.machinery.PathFinder.find_spec(fullname.split(".")[-1], path) is not None:
                return None  # the real module exists: no shim
            return importlib.machinery.ModuleSpec(fullname, self)
        top = fullname.split(".")[0]
        if top in STUBS and top not in self.already_real:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name in SHIMS:
            return types.ModuleType(spec.name)
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module):
        if module.__name__ in SHIMS:
            build, reason = SHIMS[module.__name__]
            build(module)
            self.shims_used.append(reason)
        elif module.__name__ not in self.stubs_used:
            self.stubs_used.append(module.__name__)


def install_bare_packages(root: Path, module: str) -> list[str]:
    """Register the parent packages of ``module`` without running their ``__init__.py``.

    Why: a release's top ``__init__`` imports every model and tokenizer (and their
    dependencies); the attention module needs only its siblings, which relative imports
    load from the package folder as usual.
    """
    parts = module.split(".")[:-1]
    registered = []
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        folder = root.joinpath(*parts[:depth])
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        package.__package__ = name
        package.__file__ = str(folder / "__init__.py")
        package.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        package.__spec__.submodule_search_locations = [str(folder)]
        if depth == 1:
            package.__version__ = _declared_version(folder / "__init__.py")
        sys.modules[name] = package
        registered.append(name)
    return registered


def _declared_version(init_file: Path) -> str:
    """The ``__version__ = "x.y.z"`` an ``__init__.py`` declares (read, not run): sibling
    modules such as transformers' file_utils do ``from . import __version__``."""
    text = init_file.read_text(encoding="utf-8", errors="replace") if init_file.exists() else ""
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else "0.0.0"


def make_config(config_class, hidden: int, heads: int):
    """The release's own config, with one layer, no dropout, and the given width and heads."""
    wanted = dict(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=1, intermediate_size=4 * hidden,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    parameters = inspect.signature(config_class.__init__).parameters
    if "vocab_size_or_config_json_file" in parameters:  # pytorch-pretrained-bert, pytorch-transformers
        return config_class(vocab_size_or_config_json_file=100, **wanted)
    return config_class(vocab_size=100, **wanted)


def set_identity_projections(attention, torch) -> None:
    """W_q = W_k = W_v = identity, biases zero: the logits are the raw dot products of the inputs."""
    with torch.no_grad():
        for name in ("query", "key", "value"):
            linear = getattr(attention, name)
            linear.weight.copy_(torch.eye(linear.weight.shape[0], dtype=linear.weight.dtype))
            if linear.bias is not None:
                linear.bias.zero_()


def measure_scale(attention, torch, heads: int, head_dim: int, logit: float) -> dict:
    """The factor ``s`` with which the module multiplies a q.k logit of size ``logit``, per head."""
    amplitude = math.sqrt(logit)
    hidden = heads * head_dim
    states = torch.zeros(1, 2, hidden, dtype=torch.float64)
    for head in range(heads):
        states[0, 0, head * head_dim] = amplitude
    mask = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    with torch.no_grad():
        output = attention(states, mask)
    if isinstance(output, (tuple, list)):
        output = output[0]
    per_head = []
    for head in range(heads):
        probability = float(output[0, 0, head * head_dim]) / amplitude
        if not 0.0 < probability < 1.0:
            per_head.append(None)
            continue
        per_head.append(math.log(probability / (1.0 - probability)) / logit)
    return {"logit": logit, "per_head": per_head}


class isolated:
    """Leave the interpreter as it was before one release's probe: the modules imported under the release's
    package, the stub and the shim names removed, sys.path and sys.meta_path restored.  Other modules it
    imported (numpy, the standard library, torch's own submodules) stay: they cannot be imported twice in
    one process, and are the same for every release."""

    def __init__(self, spec: dict):
        self.dropped = {spec["module"].split(".")[0], *STUBS, *SHIMS}

    def __enter__(self):
        self.modules, self.path, self.meta_path = set(sys.modules), sys.path[:], sys.meta_path[:]

    def __exit__(self, *exc):
        for name in set(sys.modules) - self.modules:
            if name in self.dropped or name.split(".")[0] in self.dropped:
                del sys.modules[name]
        sys.path[:], sys.meta_path[:] = self.path, self.meta_path
        importlib.invalidate_caches()


def probe(spec: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    finder = _CompatFinder()
    sys.meta_path.insert(0, finder)
    root = Path(spec["root"])
    sys.path.insert(0, str(root))
    bare = install_bare_packages(root, spec["module"])
    module = importlib.import_module(spec["module"])
    attention_class = getattr(module, spec["class"])
    config_class = getattr(module, spec["config_class"])
    heads = int(spec.get("num_heads", 2))
    results = {}
    for head_dim in spec["head_dims"]:
        config = make_config(config_class, heads * head_dim, heads)
        attention = attention_class(config).double().eval()
        set_identity_projections(attention, torch)
        results[str(head_dim)] = [measure_scale(attention, torch, heads, head_dim, logit) for logit in (1.0, 4.0)]
    return {"ok": True, "measurements": results, "stubs_used": finder.stubs_used, "shims_used": finder.shims_used,
            "real_not_stubbed": finder.already_real,
            "bare_packages": bare, "module_file": getattr(module, "__file__", None),
            "torch": torch.__version__, "python": sys.version.split()[0]}


def probe_one(spec: dict, index: int) -> dict:
    """:func:`probe` in isolation, with the seconds it took and its place in the list; an error is an answer,
    not an exit.  What the release prints goes to stderr: stdout carries the answers alone."""
    import contextlib
    import time

    started = time.monotonic()
    try:
        with isolated(spec), contextlib.redirect_stdout(sys.stderr):
            result = probe(spec)
    except Exception as error:  # the caller reports it; the traceback says which import failed
        tail = traceback.format_exc().strip().splitlines()[-8:]
        result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": tail}
    return {**result, "seconds": time.monotonic() - started, "index": index}


PARENT_POLL_SECONDS = 0.2


def leave_with_parent() -> None:
    """Exit as soon as the process that started this one is gone (killed, even with kill -9: this process is
    then re-parented), so that a release that hangs never outlives the run that probed it."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(3)

    threading.Thread(target=watch, name="leave-with-parent", daemon=True).start()


def main(argv) -> int:
    if len(argv) != 1:
        print(json.dumps({"ok": False, "error": "usage: _probe_worker.py '<json list of specs>'"}))
        return 2
    leave_with_parent()
    import torch  # once, before the first release's clock starts

    del torch
    failed = 0
    for index, spec in enumerate(json.loads(argv[0])):
        result = probe_one(spec, index)
        print(json.dumps(result), flush=True)  # line by line: what was done survives a crash in a later release
        failed += not result.get("ok")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
