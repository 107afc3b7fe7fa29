"""Run many ``attnscale`` command lines in one Python process, each as ``python -m attnscale`` runs it.

Starting Python and importing torch takes about 3 s per command line; a table of a hundred
bad invocations would spend minutes on that alone.  This driver imports attnscale (and what
its commands import) once, then runs each case in a child forked from that clean parent:
the child changes into the case's folder, points its stdin, stdout and stderr at files and
runs the package's ``__main__`` with runpy, which is what ``python -m attnscale`` does.  An
exception that escapes is printed as Python prints one (a traceback, exit code 1).  Every
case starts from the same untouched parent, so no state leaks from one case to the next.

    python tests/cli_batch.py < cases.json > results.json

cases.json: ``[{"args": [...], "cwd": "...", "env": {}, "stdin": "", "timeout": 120, "unprivileged": false,
"file_size_limit": 0}, ...]`` (``unprivileged``: give up the capabilities that let root ignore file
permissions first, so that read-only files are read-only even when the tests run as root; Linux
only; ``file_size_limit``: no file may grow past this many bytes, as on a nearly full disk);
results.json: ``[{"code": int, "stdout": str, "stderr": str, "timed_out": bool, "seconds": float}, ...]``.
POSIX only (os.fork).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback

CANNOT_DROP = 77  # exit code of an unprivileged case on a system where capabilities cannot be dropped
FILE_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def drop_file_capabilities() -> None:
    """Clear the capabilities that let root ignore file permissions (Linux), so that a
    read-only file or folder is read-only to this process too, even when it runs as root."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    for bit in FILE_CAPABILITIES:
        data[0].effective &= ~(1 << bit)
        data[0].permitted &= ~(1 << bit)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


PRELOAD = ("attnscale.cli", "attnscale.numerics", "attnscale.report.build", "attnscale.answer", "attnscale.runs",
           "attnscale.diagnosis", "safetensors.torch", "transformers")


def child(case: dict, stdin, stdout, stderr) -> None:
    """In the forked child: run ``attnscale ARGS`` and exit with its code (never returns)."""
    code = 1
    try:
        if case.get("unprivileged"):
            try:
                drop_file_capabilities()
            except (OSError, AttributeError):
                code = CANNOT_DROP
                return
        if case.get("file_size_limit"):
            # a nearly full disk, as one process sees it: a write past this many bytes of any file fails
            # with EFBIG (SIGXFSZ ignored, as a full disk sends no signal)
            import resource

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (case["file_size_limit"], case["file_size_limit"]))
        os.environ.update(case.get("env", {}))
        os.chdir(case["cwd"])
        for fd, file in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(file.fileno(), fd)
        sys.argv = ["attnscale", *case["args"]]
        try:
            runpy.run_module("attnscale", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def start(case: dict) -> dict:
    files = [tempfile.TemporaryFile() for _ in range(3)]
    files[0].write(case.get("stdin", "").encode())
    files[0].flush()
    files[0].seek(0)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(case, *files)
    return {"pid": pid, "files": files, "started": time.monotonic(), "deadline": time.monotonic() + case.get("timeout", 120)}


def finish(job: dict, status: int, timed_out: bool) -> dict:
    _, stdout, stderr = job["files"]
    texts = []
    for file in (stdout, stderr):
        file.seek(0)
        texts.append(file.read().decode("utf-8", "replace"))
    for file in job["files"]:
        file.close()
    code = os.waitstatus_to_exitcode(status)
    return {"code": code, "stdout": texts[0], "stderr": texts[1], "timed_out": timed_out,
            "seconds": round(time.monotonic() - job["started"], 2)}


def run_all(cases: list[dict], parallel: int) -> list[dict]:
    results: list[dict | None] = [None] * len(cases)
    running: dict[int, tuple[int, dict]] = {}
    queue = list(enumerate(cases))
    while queue or running:
        while queue and len(running) < parallel:
            index, case = queue.pop(0)
            job = start(case)
            running[job["pid"]] = (index, job)
        for pid, (index, job) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            timed_out = False
            if not done and time.monotonic() > job["deadline"]:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                done, timed_out = pid, True
            if done:
                results[index] = finish(job, status, timed_out)
                del running[pid]
        time.sleep(0.02)
    return results


def main() -> None:
    cases = json.load(sys.stdin)
    for name in PRELOAD:
        __import__(name)
    parallel = int(os.environ.get("CLI_BATCH_PARALLEL", max(1, min(4, os.cpu_count() or 1))))
    json.dump(run_all(cases, parallel), sys.stdout)


if __name__ == "__main__":
    main()
