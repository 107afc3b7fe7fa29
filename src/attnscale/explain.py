"""Where a claim's verdict comes from, generated from the registry and the code itself.

For a claim ID: its text, its parts (each with its role, the lab that reads it and the setting it
is read at) and the rule that labels a claim from its parts, and per lab the experiment
module, the judge function with its file and line, the helper functions of the verdict module it
calls (transitively), the named thresholds those functions read (module-level constants, with
their values), the numbers the finding carries, the command that reruns the lab; then the
sentences of the interview answer that read the claim, and (from a report, if one is given) the
verdict and figures.  Nothing here is typed in: a renamed function or a new threshold shows up
by itself.
"""

from __future__ import annotations

import importlib
import inspect
import types
from pathlib import Path

from . import answer, claims
from .errors import UserError

ROOT = Path(__file__).resolve().parent


def shown(relative: str) -> str:
    """A path of this package as the reader can open it: relative to the current folder when the package lies
    under it (a source checkout: src/attnscale/...), else absolute (an installed wheel's site-packages)."""
    path = ROOT / relative
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def number_values(patterns, numbers: dict, lab: str = "") -> dict:
    """The numbers a finding carries that match a lab's declared keys (``name*`` for a family); a claim read by
    several labs names each number ``lab.name`` in the report."""
    def bare(name: str) -> str:
        return name[len(lab) + 1:] if lab and name.startswith(lab + ".") else name

    return {name: value for name, value in numbers.items()
            if any(bare(name) == key or (key.endswith("*") and bare(name).startswith(key[:-1])) for key in patterns)}


def where(function) -> str:
    """'lab/training/verdicts.py:233' for a function of this package."""
    path = Path(inspect.getsourcefile(function)).resolve()
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return f"{path}:{inspect.getsourcelines(function)[1]}"


def _codes(function) -> list[types.CodeType]:
    """The function's code and the code of every function defined inside it, at any depth."""
    found, todo = [], [function.__code__]
    while todo:
        code = todo.pop()
        found.append(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def functions_called(function, package: str) -> list:
    """The functions of ``package`` (a lab's modules: its verdicts and its experiment) that
    ``function`` calls, directly or through each other, in file order."""
    seen, todo, found = set(), [function], []
    while todo:
        current = todo.pop()
        for code in _codes(current):
            for name in code.co_names:
                value = current.__globals__.get(name)
                if (isinstance(value, types.FunctionType) and value.__module__.startswith(package)
                        and value not in seen and value is not function):
                    seen.add(value)
                    found.append(value)
                    todo.append(value)
    return sorted(found, key=lambda f: (f.__module__, f.__code__.co_firstlineno))


def is_threshold(value) -> bool:
    """A named number (or a tuple or table of them) a rule can compare with."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, tuple):
        return bool(value) and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value)
    return isinstance(value, dict) and bool(value) and all(isinstance(v, (int, float)) for v in value.values())


def constants_read(functions) -> dict[str, object]:
    """The module-level UPPER_CASE thresholds the functions read, with their values."""
    found = {}
    for function in functions:
        for code in _codes(function):
            for name in code.co_names:
                if name.isupper() and name in function.__globals__ and is_threshold(function.__globals__[name]):
                    found[name] = function.__globals__[name]
    return dict(sorted(found.items()))


def answer_sentences(claim_id: str) -> list[str]:
    """The answer's sentence functions whose code reads this claim."""
    quoted = f'"{claim_id}"'
    return [name for name, value in vars(answer).items()
            if isinstance(value, types.FunctionType) and value.__module__ == answer.__name__
            and quoted in inspect.getsource(value)]


def explain(claim_id: str, report: dict | None = None) -> dict:
    """Everything that decides one claim's verdict, as data (see the module docstring)."""
    key = str(claim_id).upper()
    if key not in claims.ANY_BY_ID:
        raise UserError(f"unknown claim {claim_id!r}; accepted: {', '.join(claims.ANY_BY_ID)}")
    claim = claims.ANY_BY_ID[key]
    labs = []
    for name in claim.labs:
        verdicts = importlib.import_module(f"attnscale.lab.{name}.verdicts")
        judge = getattr(verdicts, f"judge_{key.lower()}")
        helpers = functions_called(judge, f"attnscale.lab.{name}")
        labs.append({
            "lab": name,
            "parts": [p.key for p in claim.parts_of(name)],
            "experiment": f"lab/{name}/experiment.py",
            "judge": {"name": judge.__name__, "where": where(judge), "doc": inspect.getdoc(judge) or ""},
            "helpers": [{"name": f.__name__, "where": where(f)} for f in helpers],
            "thresholds": constants_read([judge, *helpers]),
            "numbers": list(getattr(verdicts, "NUMBER_KEYS", {}).get(key, ())),
            "reproduce": f"attnscale {name} --preset quick --seed 0",
        })
    parts = [{"key": p.key, "text": p.text, "role": p.role, "lab": p.lab, "setting": p.setting} for p in claim.parts]
    out = {"id": key, "claim": claim.text, "section": claim.section, "parts": parts,
           "label_rule": {"name": claims.label.__name__, "where": where(claims.label)}, "labs": labs,
           "answer_sentences": answer_sentences(key)}
    if report is not None:
        listed = [*report.get("claims", []), *report.get("statements", [])]
        found = next((c for c in listed if isinstance(c, dict) and c.get("id") == key), None)
        if found is not None:
            out["verdict"] = found.get("verdict_line", found.get("verdict"))
            out["figures"] = list(found.get("figures", []))
            if isinstance(found.get("evidence"), str):
                out["evidence"] = found["evidence"]
            numbers = found.get("numbers") if isinstance(found.get("numbers"), dict) else {}
            for entry in labs:
                entry["values"] = number_values(entry["numbers"], numbers, entry["lab"])
            states = {p.get("key"): p for p in found.get("parts", []) if isinstance(p, dict)}
            for part in parts:
                if part["key"] in states:
                    part.update({k: states[part["key"]].get(k) for k in ("state", "measured", "threshold")})
            if isinstance(found.get("margin_text"), str):
                out["margin"] = found["margin_text"]
    return out


def render(explained: dict) -> str:
    where_from = "beyond the source" if explained["id"] in claims.STATEMENT_BY_ID else \
        f"source section {explained['section']}"
    lines = [f"{explained['id']} ({where_from}): {explained['claim']}"]
    if "verdict" in explained:
        lines.append(f"verdict in the report: {explained['verdict']}")
        if explained.get("margin"):
            lines.append(f"margin: {explained['margin']}")
    lines += ["", "parts:"]
    for part in explained["parts"]:
        lines.append(f"  {part['key']} ({part['role']}, {part['lab']} lab): {part['text']}; read at: {part['setting']}")
        if part.get("state"):
            lines.append(f"    {part['state']}: {part.get('measured') or ''} (threshold: {part.get('threshold') or '-'})")
    if explained.get("evidence"):
        lines += ["", "evidence: " + explained["evidence"]]
    lines.append(f"label from parts: {explained['label_rule']['name']} at {shown(explained['label_rule']['where'])} "
                 "(supported: every assertion holds; refuted: every assertion fails; partly: some hold, some fail, or "
                 "a premise or side remark fails; inconclusive: an undecided assertion could turn it)")
    for entry in explained["labs"]:
        lines += ["", f"[{entry['lab']}] parts {', '.join(entry['parts'])}",
                  f"  experiment: {shown(entry['experiment'])}",
                  f"  judge: {entry['judge']['name']} at {shown(entry['judge']['where'])}"]
        if entry["judge"]["doc"]:
            lines.append("    " + " ".join(entry["judge"]["doc"].split()))
        if entry["helpers"]:
            lines.append("  helpers: " + ", ".join(f"{h['name']} ({shown(h['where'])})" for h in entry["helpers"]))
        if entry["thresholds"]:
            lines.append("  thresholds: " + ", ".join(f"{k} = {v!r}" for k, v in entry["thresholds"].items()))
        if entry.get("values"):
            lines.append("  numbers: " + ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                                                   for k, v in entry["values"].items()))
        elif entry["numbers"]:
            lines.append("  numbers: " + ", ".join(entry["numbers"]))
        lines.append(f"  reproduce: {entry['reproduce']}")
    if explained.get("figures"):
        lines += ["", "figures: " + ", ".join(explained["figures"])]
    lines += ["", "answer sentences that read it: " + (", ".join(explained["answer_sentences"]) or "none")]
    return "\n".join(lines)
