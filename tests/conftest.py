import fcntl
import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

from hypothesis import settings  # noqa: E402

# In CI the examples are drawn from a fixed seed: the same commit gives the same test run.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def quick_report(tmp_path_factory, request):
    """The real quick report, built once per test session from an empty folder: (folder, report dict).
    The page tests read it, and the README's table of verdicts is checked against it (about 4 minutes
    on 2 cores).  Under pytest-xdist the workers share one build: the first to ask builds it under a lock
    in the folder they share, the others wait for it and read the report it wrote."""
    from attnscale.report import build_report

    if getattr(request.config, "workerinput", None) is None:  # not an xdist worker
        out = tmp_path_factory.mktemp("quick-report")
        return out, build_report(preset="quick", seed=0, out=out)
    shared = tmp_path_factory.getbasetemp().parent
    out = shared / "quick-report"
    with open(shared / "quick-report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (out / "report.json").exists():
                build_report(preset="quick", seed=0, out=out)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out, json.loads((out / "report.json").read_text())
