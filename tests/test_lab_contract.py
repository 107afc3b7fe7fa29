"""Every lab of the registry keeps the protocol of :mod:`attnscale.lab`, checked once over the registry on
the results of the real quick report (built once a session, :func:`conftest.quick_report`): its judge gives
a finding for exactly the claims whose parts name it, each with a label the claims know and exactly the
numbers its ``NUMBER_KEYS`` declare; its result is JSON; its module has what the protocol lists."""

import inspect
import json

import pytest

from attnscale import claims, lab

PROTOCOL = ("VERSION", "Config", "PRESETS", "run", "judge", "tables", "figures", "NUMBER_KEYS")


@pytest.mark.parametrize("name", lab.LABS)
def test_the_lab_module_has_the_protocol_and_the_registry_says_how_it_runs(name):
    entry = lab.REGISTRY[name]
    module = entry.module()
    assert [attribute for attribute in PROTOCOL if not hasattr(module, attribute)] == []
    assert ("store" in inspect.signature(module.run).parameters) == entry.uses_run_store
    assert set(module.NUMBER_KEYS) == set(entry.claims)
    assert set(module.PRESETS) == set(lab.PRESET_NAMES)


@pytest.mark.parametrize("name", lab.LABS)
def test_the_lab_judges_its_claims_with_their_declared_numbers(quick_report, name):
    _, report = quick_report
    entry = lab.REGISTRY[name]
    module = entry.module()
    result = report["experiments"][name]
    json.dumps(result, allow_nan=False)
    findings = module.judge(result)
    assert set(findings) == set(entry.claims) == set(claims.claims_of_lab(name))
    assert all(finding.verdict in claims.VERDICTS for finding in findings.values())
    assert claims.undeclared_numbers(module.NUMBER_KEYS, findings) == []

