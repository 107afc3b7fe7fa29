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
def quick_report(tmp_path_factory):
    """The real quick report, built once per test session from an empty folder: (folder, report dict).
    The page tests read it, and the README's table of verdicts is checked against it (about 3 minutes
    on 2 cores: the side labs, not the training lab, set its length)."""
    from attnscale.report import build_report

    out = tmp_path_factory.mktemp("quick-report")
    return out, build_report(preset="quick", seed=0, out=out)
