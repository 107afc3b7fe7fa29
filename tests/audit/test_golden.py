"""The golden audit: every family's status, verdict and factors, from a full run of ``attnscale audit``,
held against ``golden_audit.json`` (one entry per family and tower row).

A change to the audit's code that moves any family's reading shows here as a named list of differences;
where the move is intended (a misread fixed), write the file anew and say which rows moved and why:

    python tests/audit/test_golden.py --write            # a fresh full run (about 2 minutes on 2 cores)
    python tests/audit/test_golden.py --write audit.json  # from an earlier ``attnscale audit --out`` run
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from attnscale.audit.verdicts import FACTOR_TOL

GOLDEN = Path(__file__).with_name("golden_audit.json")
REL_TOL = FACTOR_TOL  # the audit's own factor tolerance: a reading that moves by more than that has changed
ABS_TOL = 1e-6


def rounded(value):
    if isinstance(value, float):
        return value if not math.isfinite(value) or value == 0 else float(f"{value:.6g}")
    return value


def entry(family: dict) -> dict:
    """What the golden file keeps of one row of audit.json: status, verdict, which backends ran, and per layer the
    declared factor and, per backend, the factor on the attention function, on the whole path, and the
    cosine temperature where q and k are normalised."""
    layers = []
    for layer in family["layers"]:
        measured = {}
        for backend, reading in layer["backends"].items():
            path = reading.get("path") or {}
            measured[backend] = [rounded(reading["function"].get("factor")), rounded(path.get("factor")),
                                 rounded(path.get("cosine_temperature"))]
        layers.append({"name": layer["name"], "declared": rounded(layer["declared"]["path_first"]),
                       "declared_cosine": rounded(layer["declared"].get("cosine_temperature")), "measured": measured})
    return {"status": family["status"], "verdict": family["verdict"],
            "backends": sorted(b for b, info in family["backends"].items() if info.get("accepted")),
            "layers": layers}


def golden_of(audit: dict) -> dict:
    return {"transformers": audit["transformers"], "coverage": audit["coverage"],
            "families": {family["family"]: entry(family) for family in audit["families"]}}


def same(expected, actual) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        return math.isclose(expected, actual, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same(expected[k], actual[k]) for k in expected)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(e, a) for e, a in zip(expected, actual))
    return expected == actual


def differences(expected: dict, actual: dict) -> list[str]:
    """One line per family whose entry moved, came or went, and one for the coverage counts."""
    lines = []
    if expected["coverage"] != actual["coverage"]:
        lines.append(f"coverage: {expected['coverage']} -> {actual['coverage']}")
    for name in sorted(expected["families"].keys() | actual["families"].keys()):
        before, after = expected["families"].get(name), actual["families"].get(name)
        if before is None or after is None:
            lines.append(f"{name}: {'new row' if before is None else 'row gone'}")
        elif not same(before, after):
            lines.append(f"{name}: " + "; ".join(moves(before, after)))
    return lines


def moves(before: dict, after: dict) -> list[str]:
    """What moved in one family's entry: a field, or a layer's reading under one backend."""
    found = [f"{key} {before[key]} -> {after[key]}" for key in ("status", "verdict", "backends")
             if not same(before[key], after[key])]
    layers_before = {layer["name"]: layer for layer in before["layers"]}
    layers_after = {layer["name"]: layer for layer in after["layers"]}
    for name in sorted(layers_before.keys() | layers_after.keys()):
        old, new = layers_before.get(name), layers_after.get(name)
        if old is None or new is None:
            found.append(f"layer {name} {'new' if old is None else 'gone'}")
            continue
        for key in ("declared", "declared_cosine"):
            if not same(old[key], new[key]):
                found.append(f"{name} {key} {old[key]} -> {new[key]}")
        for backend in sorted(old["measured"].keys() | new["measured"].keys()):
            was, now = old["measured"].get(backend), new["measured"].get(backend)
            if not same(was, now):
                found.append(f"{name} {backend} [function, path, cosine] {was} -> {now}")
    return found


def write(golden: dict, path: Path) -> None:
    """A row a line: a diff of the file names the families that moved."""
    rows = ",\n".join(f" {json.dumps(name)}: {json.dumps(row, sort_keys=True)}" for name, row in sorted(golden["families"].items()))
    path.write_text(f'{{"transformers": {json.dumps(golden["transformers"])},\n'
                    f'"coverage": {json.dumps(golden["coverage"], sort_keys=True)},\n"families": {{\n{rows}\n}}}}\n')


def full_audit() -> dict:
    from attnscale.audit.pipeline import plan, report, run_plan
    from attnscale.runs import default_workers

    items = plan(None)
    results = run_plan(items, workers=default_workers())
    return report(results, ("eager", "sdpa", "flex_attention"), 0.0)


@pytest.mark.slow
def test_full_audit_matches_the_golden_file(tmp_path):
    import transformers

    expected = json.loads(GOLDEN.read_text())
    if expected["transformers"] != transformers.__version__:
        pytest.fail(f"golden_audit.json was written for transformers {expected['transformers']}, "
                    f"{transformers.__version__} is installed: write it anew (see this file's docstring)")
    actual = golden_of(json.loads(json.dumps(full_audit(), default=str)))
    moved = differences(expected, actual)
    if moved:
        write(actual, tmp_path / GOLDEN.name)  # to look at, or to copy over the golden file where the moves are intended
    assert not moved, f"{len(moved)} rows moved (this run's file: {tmp_path / GOLDEN.name}):\n" + "\n".join(moved[:40])


def test_differences_name_what_moved():
    base = {"coverage": {"measured": 1}, "families": {
        "a": {"status": "audited", "verdict": "ok", "backends": ["eager"],
              "layers": [{"name": "l0", "declared": 0.25, "declared_cosine": None, "measured": {"eager": [0.25, 0.25, None]}}]}}}
    moved = json.loads(json.dumps(base))
    moved["families"]["a"]["layers"][0]["measured"]["eager"][1] = 0.2501  # within 0.1%: the same reading
    assert differences(base, moved) == []
    moved["families"]["a"]["layers"][0]["measured"]["eager"][1] = 0.3
    moved["families"]["b"] = base["families"]["a"]
    assert differences(base, moved) == ["a: l0 eager [function, path, cosine] [0.25, 0.25, None] -> [0.25, 0.3, None]",
                                        "b: new row"]
    moved["families"]["a"]["verdict"] = "mismatch"
    assert differences(base, moved)[0].startswith("a: verdict ok -> mismatch; l0 eager")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write"]:
        sys.exit(__doc__)
    audit = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else json.loads(json.dumps(full_audit(), default=str))
    write(golden_of(audit), GOLDEN)
    print(f"wrote {GOLDEN} ({len(audit['families'])} rows)")
