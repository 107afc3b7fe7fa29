"""The report stage on the user's terminal: the audit's own table and lines, not the notes third-party code prints
while the tiny models are built and run."""

from __future__ import annotations

import warnings

import pytest

from attnscale.audit import composite as composites
from attnscale.audit import pipeline
from attnscale.cli import main


def test_transformers_and_torch_notes_stay_off_the_terminal(capfd, monkeypatch):
    """Gemma 4's and DiffusionGemma's text configs log that they force their last layer to full attention at
    the tiny sizes (built as the composites' towers), and a warning raised while a family is audited (as torch's
    on an even kernel's 'same' padding) is not the audit's to print: neither reaches stderr."""
    audit_family = composites.audit_family
    warned = []

    def noisy(*args, **kwargs):
        warned.append(args[0])
        warnings.warn("a kernel note from model code", UserWarning)
        return audit_family(*args, **kwargs)

    monkeypatch.setattr(composites, "audit_family", noisy)  # the name the composite stage calls, not measure's own
    with pytest.raises(SystemExit) as leaving:
        main(["audit", "gemma4,diffusion_gemma", "--backends", "eager", "--workers", "1"])
    out, err = capfd.readouterr()
    assert warned  # the noisy stand-in ran: the warning below had its chance to reach stderr
    assert leaving.value.code == 3  # incomplete: diffusion_gemma's vision tower is not measured in this run
    assert "gemma4" in out and "diffusion_gemma" in out
    assert "Last layer must use" not in out + err and "kernel note" not in err and "Warning" not in err, err
