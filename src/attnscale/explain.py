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
import re
import types
from pathlib import Path

from . import answer, claims
from .errors import UserError

ROOT = Path(__file__).resolve().parent


def shown(relative: str) -> str:
    """A path of this package as the package names it: attnscale/lab/training/verdicts.py:233 (the same in a
    checkout and in an installed wheel; ``python -c "import attnscale; print(attnscale.__file__)"`` says where)."""
    return f"{ROOT.name}/{relative}"


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
    out = {"id": key, "claim": claim.text, "section": claim.section, "source": claim.source, "parts": parts,
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
                    part.update({k: states[part["key"]].get(k) for k in PART_FIELDS if states[part["key"]].get(k)})
            if isinstance(found.get("margin_text"), str):
                out["margin"] = found["margin_text"]
    return out


PART_FIELDS = ("state", "measured", "threshold", "direction", "decide", "note")
CODE_SPAN = re.compile(r"`[^`]+`")
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[])")
LAB_BLOCK = re.compile(r"\[(\w+)\]\s*")


def quote_once(text: str) -> str:
    """A quoted line that repeats is quoted once, with how many times it occurs; its repeats say so."""
    counts: dict[str, int] = {}
    for span in CODE_SPAN.findall(text):
        counts[span] = counts.get(span, 0) + 1
    seen: set[str] = set()

    def once(match: re.Match) -> str:
        span = match.group()
        if counts[span] == 1:
            return span
        if span in seen:
            return "the same line"
        seen.add(span)
        return f"{span} (the same line in all {counts[span]})"

    return CODE_SPAN.sub(once, text)


def evidence_blocks(evidence: str) -> list[tuple[str, list[str]]]:
    """The evidence as (lab, sentences): one block per lab ("[training] ..."), a repeated quote once."""
    pieces = LAB_BLOCK.split(evidence.strip())
    blocks = [("", pieces[0])] if pieces[0].strip() else []
    blocks += [(pieces[i], pieces[i + 1]) for i in range(1, len(pieces) - 1, 2)]
    return [(lab, [s for s in SENTENCE_BREAK.split(quote_once(text.strip())) if s]) for lab, text in blocks]


def render_for_a_learner(explained: dict) -> str:
    """The claim, its label, its parts with what was measured, and the evidence sentence by sentence:
    what a reader needs to judge the verdict.  :func:`render` adds the code that decides it."""
    where_from = ("a statement of our own beyond the source" if explained["id"] in claims.STATEMENT_BY_ID else
                  f"the interview answer, section {explained['section']}")
    lines = [f"{explained['id']} ({where_from})", f"  {explained['claim']}"]
    if explained.get("source"):
        lines.append(f"  原文: {explained['source']}")
    lines += ["", f"Verdict: {explained.get('verdict', 'no report read: run `attnscale report`')}"]
    if explained.get("report_source"):
        lines.append(f"  (from {explained['report_source']})")
    lines += ["", "Its parts:"]
    for part in explained["parts"]:
        state = part.get("state", "not measured yet")
        lines.append(f"  - {part['text']} ({part['role']}, read by the {part['lab']} lab): {state}")
        if part.get("measured"):
            lines.append(f"      measured: {part['measured']}")
        if part.get("threshold"):
            lines.append(f"      against: {part['threshold']}")
        if part.get("direction") and state == claims.FAILS:
            lines.append(f"      which way: {part['direction']}")
        if part.get("decide") or part.get("note"):
            lines.append(f"      {'what would decide it' if part.get('decide') else 'why'}: "
                         f"{part.get('decide') or part.get('note')}")
        lines.append(f"      read at: {part['setting']}")
    if explained.get("margin"):
        lines += ["", f"Margin: {explained['margin']}"]
    if explained.get("evidence"):
        lines += ["", "Evidence:"]
        for lab, sentences in evidence_blocks(explained["evidence"]):
            if lab:
                lines.append(f"  [{lab}]")
            lines += [f"    {sentence}" for sentence in sentences]
    if explained.get("figures"):
        lines += ["", "Figures (in the report folder): " + ", ".join(explained["figures"])]
    rerun = "; ".join(entry["reproduce"] for entry in explained["labs"])
    lines += ["", f"Rerun: {rerun}.",
              f"The code that decides it (judges, helpers, thresholds): attnscale explain {explained['id']} --verbose"]
    return "\n".join(lines)


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
        if part.get("state") and part.get("measured"):
            lines.append(f"    {part['state']}: {part['measured']} (threshold: {part.get('threshold') or '-'})")
        elif part.get("state"):
            lines.append(f"    {part['state']}" + (f": {part['note']}" if part.get("note") else ""))
    if explained.get("evidence"):
        lines += ["", "evidence: " + quote_once(explained["evidence"])]
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
