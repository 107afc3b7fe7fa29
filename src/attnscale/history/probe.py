"""Run an old release's BERT self-attention and measure the factor it puts on q.k.

Why run it as well as read it: a regex can miss a second scaling, a changed default or an
override; the module itself cannot.  The worker (:mod:`._probe_worker`) imports the release's
``BertSelfAttention`` in a separate Python process, with the unpacked distribution first on
``sys.path`` and stubs for what the attention never uses, sets W_q = W_k = W_v = identity and
reads the factor ``s`` off the output (see its docstring).  Done at two head sizes, the pair
tells 1/sqrt(d_k) from 1/d_k from no factor: ``s(16), s(64)`` is ``(1/4, 1/8)``, ``(1/16, 1/64)``
or ``(1, 1)``.

Only PyTorch releases are run; TensorFlow ones are read, not run.  A release that is not in
the cache, or whose import fails, gives a :class:`ProbeResult` with the reason, never an
exception.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .cache import CacheStatus, unpack
from .reader import find_definition
from .releases import Release

WORKER = Path(__file__).with_name("_probe_worker.py")
DEFAULT_HEAD_DIMS = (16, 64)
ATTENTION_CLASS = "BertSelfAttention"
CONFIG_CLASS = "BertConfig"
# rule name -> power of d_k
RULES = {"1/sqrt(d_k)": -0.5, "1/d_k": -1.0, "none": 0.0}
RELATIVE_TOLERANCE = 1e-6


@dataclass
class ProbeResult:
    """What running one release's attention showed.

    ``state``: ``measured``, ``not run`` (TensorFlow, or run=False), ``unavailable`` (cache),
    ``failed`` (import or run error; ``reason`` has the last lines of the traceback).
    ``measured`` maps head size d_k to the factor s.
    """

    release: Release
    state: str
    reason: str = ""
    measured: dict[int, float] = field(default_factory=dict)
    rule: str | None = None
    exponent: float | None = None
    stubs_used: list[str] = field(default_factory=list)
    shims_used: list[str] = field(default_factory=list)
    module_file: str | None = None
    seconds: float = 0.0
    status: CacheStatus | None = None


def match_rule(measured: dict[int, float]) -> tuple[str, float | None]:
    """The rule that every measurement fits (relative tolerance 1e-6) and the fitted power of d_k.

    Needs two head sizes or more: at one size, 1/sqrt(d_k) and 1/d_k can look alike for some
    factor, and "none" cannot be told from a fixed constant.
    """
    if len(measured) < 2:
        raise ValueError(f"need measurements at two head sizes or more to tell the rules apart, got {sorted(measured)}")
    if any(d <= 0 for d in measured) or any(s is None or not s > 0 for s in measured.values()):
        return "other", None
    (d1, s1), (d2, s2) = sorted(measured.items())[0], sorted(measured.items())[-1]
    exponent = math.log(s2 / s1) / math.log(d2 / d1)
    for name, power in RULES.items():
        if all(abs(s - d ** power) <= RELATIVE_TOLERANCE * d ** power for d, s in measured.items()):
            return name, power
    return "other", exponent


def _factor_from(samples: list[dict]) -> tuple[float | None, str]:
    """One factor from the worker's samples (heads x logit sizes), or None and why they differ."""
    values = [v for sample in samples for v in sample["per_head"]]
    if not values or any(v is None for v in values):
        return None, "a probability was 0 or 1: the factor is too large to read at this logit"
    spread = max(values) - min(values)
    if spread > RELATIVE_TOLERANCE * max(abs(v) for v in values):
        return None, f"the factor differs between heads or logit sizes ({min(values):.6g} .. {max(values):.6g})"
    return sum(values) / len(values), ""


def attention_module(root: Path, import_name: str) -> str | None:
    """The dotted module that defines ``BertSelfAttention``, found by pattern in the release."""
    found = find_definition(root, import_name, (ATTENTION_CLASS,))
    if not found:
        return None
    path = found[1].rsplit(":", 1)[0]
    return path[:-len(".py")].replace("/", ".")


def _worker_environment(home: str) -> dict[str, str]:
    """The caller's environment with one thread, no network, and HOME in a scratch folder:
    old ``file_utils`` modules compute cache folders under HOME at import time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HOME=home, XDG_CACHE_HOME=home, TORCH_HOME=home,
               HF_HOME=home, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1", NO_PROXY="*")
    return env


def run_worker(specs: list[dict], timeout_s: float) -> list[dict]:
    """Run :mod:`._probe_worker` on ``specs`` in isolated interpreters (``-I -B -X pycache_prefix``: no user
    site, no PYTHONPATH, no bytecode read from or written into the cache) and return one JSON answer per spec,
    in order.

    One interpreter serves them all (torch imported once), each release isolated from the others there.
    A release that takes longer than ``timeout_s``, or takes the interpreter down with it, gets an answer
    saying so, and the releases after it run in a fresh interpreter."""
    answers: list[dict] = []
    while len(answers) < len(specs):
        rest = specs[len(answers):]
        done, why = _one_worker(rest, timeout_s)
        answers += done
        if len(done) < len(rest):
            answers.append({"ok": False, "error": why})
    return answers


def _one_worker(specs: list[dict], timeout_s: float) -> tuple[list[dict], str]:
    """The answers one interpreter gave, in order, until it finished, stopped answering within ``timeout_s``
    or exited; and, if it did not answer every spec, why not."""
    with tempfile.TemporaryDirectory(prefix="attnscale-probe-") as home:
        # -X pycache_prefix: bytecode is read (and, with -B, never written) under the scratch folder only, so no
        # .pyc found in the cache's unpacked copy can run in place of the verified source
        command = [sys.executable, "-I", "-B", "-X", f"pycache_prefix={Path(home) / 'bytecode'}", str(WORKER),
                   json.dumps(specs)]
        with open(Path(home) / "stderr.txt", "w+", encoding="utf-8", errors="replace") as errors:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, cwd=home,
                                       env=_worker_environment(home))
            answers, why = [], ""
            try:
                for index, line in enumerate(_answer_lines(process.stdout.fileno(), timeout_s, len(specs))):
                    answer = json.loads(line)
                    if answer.get("index") != index:
                        raise ValueError(f"answer {answer.get('index')!r} came where {index} was due")
                    answers.append(answer)
            except TimeoutError:
                why = f"the probe took longer than {timeout_s:.0f} s"
            except ValueError as error:  # a line that is not one whole answer (json's error is a ValueError)
                why = f"the worker's answer could not be read ({error})"
            finally:
                process.kill()
                code = process.wait()
            errors.seek(0)
            tail = " | ".join(errors.read().strip().splitlines()[-4:])
    return answers, why or f"the worker exited {code} without an answer: {tail}".rstrip(": ")


def _answer_lines(fd: int, timeout_s: float, count: int):
    """Up to ``count`` lines from ``fd`` that hold an answer (they start with '{'), each within ``timeout_s`` of
    the one before; ends early where the stream ends; TimeoutError where a line is late."""
    buffer, found = b"", 0
    while found < count:
        while b"\n" not in buffer:
            if not select.select([fd], [], [], timeout_s)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        if line.startswith(b"{"):
            found += 1
            yield line.decode("utf-8", errors="replace")


def probe_release(cache_dir, release: Release, head_dims=DEFAULT_HEAD_DIMS, num_heads: int = 2,
                  timeout_s: float = 180.0) -> ProbeResult:
    """Measure the factor of one PyTorch release at each head size in ``head_dims``."""
    return probe_releases(cache_dir, [release], head_dims, num_heads, timeout_s)[0]


def probe_releases(cache_dir, releases: list[Release], head_dims=DEFAULT_HEAD_DIMS, num_heads: int = 2,
                   timeout_s: float = 180.0) -> list[ProbeResult]:
    """:func:`probe_release` for each release, those that can run probed in one worker process."""
    head_dims = tuple(int(d) for d in head_dims)
    if len(set(head_dims)) < 2 or any(d <= 0 for d in head_dims):
        raise ValueError(f"head_dims must hold two or more different positive sizes, got {head_dims}")
    if num_heads < 1:
        raise ValueError(f"num_heads must be at least 1, got {num_heads}")
    prepared = [prepare(cache_dir, release, head_dims, num_heads) for release in releases]
    runnable = [item for item in prepared if not isinstance(item, ProbeResult)]
    answers = iter(run_worker([spec for _, spec, _ in runnable], timeout_s) if runnable else [])
    return [item if isinstance(item, ProbeResult) else answered(item[0], next(answers), item[2]) for item in prepared]


def answered(release: Release, answer: dict, status: CacheStatus) -> ProbeResult:
    """The worker's answer for one release as its result."""
    seconds = answer.get("seconds", 0.0)
    if not answer.get("ok"):
        reason = answer.get("error", "unknown error")
        if answer.get("traceback"):
            reason += " | " + " | ".join(answer["traceback"][-3:])
        return ProbeResult(release, "failed", reason, seconds=seconds, status=status)
    return _result_from(release, answer, seconds, status)


def prepare(cache_dir, release: Release, head_dims: tuple[int, ...], num_heads: int):
    """(release, the worker's spec, cache status) for a release that can run, else its ProbeResult saying why not."""
    if not release.probed:
        return ProbeResult(release, "not run", f"{release.language} release the probe cannot build: read, not run")
    unpacked = unpack(cache_dir, release)
    if unpacked.root is None:
        return ProbeResult(release, "unavailable", f"{unpacked.status.state}: {unpacked.status.reason}; "
                                                   f"{unpacked.status.advice}", status=unpacked.status)
    module = attention_module(unpacked.root, release.import_name)
    if module is None:
        return ProbeResult(release, "failed", f"no class {ATTENTION_CLASS} in {release.label}", status=unpacked.status)
    spec = {"root": str(unpacked.root), "module": module, "class": ATTENTION_CLASS, "config_class": CONFIG_CLASS,
            "head_dims": list(head_dims), "num_heads": num_heads}
    return release, spec, unpacked.status


def _result_from(release: Release, answer: dict, seconds: float, status: CacheStatus) -> ProbeResult:
    measured, problems = {}, []
    for head_dim, samples in answer["measurements"].items():
        factor, problem = _factor_from(samples)
        if factor is None:
            problems.append(f"d_k={head_dim}: {problem}")
        else:
            measured[int(head_dim)] = factor
    rule, exponent = match_rule(measured) if len(measured) >= 2 else ("other", None)
    return ProbeResult(release, "measured", "; ".join(problems), measured, rule, exponent,
                       answer.get("stubs_used", []), answer.get("shims_used", []), answer.get("module_file"),
                       seconds, status)
