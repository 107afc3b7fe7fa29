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
    """The real quick report, built once per test session: (folder, report dict), every lab at its
    quick preset but the training lab, which runs a small config of the same shape: the page tests
    need every section and verdict drawn, not the lab's 75 training runs (over two minutes on 2 cores)."""
    from attnscale.report import build_report

    from attnscale.lab import training

    out = tmp_path_factory.mktemp("quick-report")
    small = training.Config(d_heads=(8, 64), d_model=16, n_heads=1, log_every=5, lr_widen=1, recall_steps=20,
                            recall_batch=16, deep_layers=2, deep_d_head=16, deep_steps=10, t5_recall_d_head=8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(training.PRESETS, "quick", small)
        return out, build_report(preset="quick", seed=0, out=out)
