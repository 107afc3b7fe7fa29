"""Render the report dict (the report.json contract) as Markdown and as one self-contained HTML page."""

from __future__ import annotations

import base64
import re
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from ..claims import (FAILS, HOLDS, INCONCLUSIVE, MIXED, NOT_IN_PRESET, NOT_TESTABLE, PARTLY, PENDING, REFUTED, SUPPORTED,
                      UNDECIDED)
from .. import source
from . import fonts

QUESTION = ("Why does attention compute softmax(QK^T / sqrt(d_k)), and not / d_k, no scaling, or a constant?")
VERDICT_CLASS = {SUPPORTED: "ok", PARTLY: "partly", REFUTED: "bad", INCONCLUSIVE: "open", NOT_IN_PRESET: "na",
                 NOT_TESTABLE: "na", PENDING: "pending"}
STATE_CLASS = {HOLDS: "state-holds", FAILS: "state-fails", MIXED: "state-partly", UNDECIDED: "state-open"}
PART_COLUMNS = ("part", "role", "read at", "measured", "threshold", "state", "moved 20%")


def tally(report: dict) -> str:
    """How many claims carry each label, in the labels' order: '3 supported, 9 partly supported, ...'."""
    counts = [(verdict, sum(c["verdict"] == verdict for c in report["claims"])) for verdict in (*VERDICT_CLASS,)]
    return ", ".join(f"{n} {verdict}" for verdict, n in counts if n)


def part_row(part: dict) -> dict:
    """One part as the report's parts table shows it."""
    moved = part.get("moved") or {}
    settings = part.get("settings") or []
    where = "; ".join(f"{s['where']}: {s['state']}" for s in settings)
    state = part["state"] + (f" ({where})" if any(s["state"] != part["state"] for s in settings) else "")
    note = part.get("decide") or part.get("note") or ""
    return {"part": part["text"], "role": part["role"], "read at": part.get("setting", ""),
            "measured": part.get("measured", ""), "threshold": part.get("threshold", ""),
            "state": state + (f"; {'decides it' if part.get('decide') else 'why'}: {note}" if note else ""),
            "moved 20%": ", ".join(f"x{k}: {v}" for k, v in moved.items()) if moved else "-",
            "class": STATE_CLASS.get(part["state"], "")}


def parts_table_md(claim: dict) -> list[str]:
    rows = [part_row(p) for p in claim.get("parts", [])]
    if not rows:
        return []
    cells = lambda r: [str(r[c]).replace("|", "\\|") for c in PART_COLUMNS]
    return (["| " + " | ".join(PART_COLUMNS) + " |", "|" + "---|" * len(PART_COLUMNS)]
            + ["| " + " | ".join(cells(r)) + " |" for r in rows]
            + (["", f"Margin: {claim['margin_text']}"] if claim.get("margin_text") else []))


def verdict_line(claim: dict) -> str:
    """The verdict with its untested parts and scope, e.g. "refuted (old-BERT half not testable here)"."""
    return claim.get("verdict_line") or claim["verdict"]


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def evidence_opening(evidence: str) -> str:
    """The first sentence of each lab's evidence: what report.md shows of it (the page and `explain` show it whole)."""
    from ..explain import evidence_blocks

    return " ".join((f"[{lab}] " if lab else "") + sentences[0] for lab, sentences in evidence_blocks(evidence)
                    if sentences)


def _body_md(c: dict) -> list[str]:
    """A claim's or a statement's verdict, parts, the opening of its evidence, and links to its figures and
    its whole evidence, in Markdown (for reading: the page and report.json hold everything)."""
    lines = [f"**Verdict: {verdict_line(c)}.**", ""] + parts_table_md(c)
    lines += ["", f"{evidence_opening(c['evidence'])} (The whole evidence: `attnscale explain {c['id']}`, or the page.)"]
    if c["figures"]:
        lines += ["", "Figures: " + ", ".join(f"[{Path(path).stem}]({path})" for path in c["figures"])]
    if c.get("commands"):
        lines += ["", "Reproduce: " + "; ".join(f"`{cmd}`" for cmd in c["commands"])]
    return lines


def render_markdown(report: dict) -> str:
    lines = [
        "# attnscale report",
        "",
        f"attnscale {report['attnscale_version']}, preset `{report['preset']}`, seed {report['seed']}, "
        f"device {report['device']}, started {report['started']}, {report['seconds']:.1f} s.",
        "",
        f"**The question.** {QUESTION}",
        "",
    ]
    if report.get("answer"):
        lines += [f"**The 30-second answer.** {' '.join(report['answer']['en']['short'])}", "",
                  f"**The full answer, as measured.** {' '.join(report['answer']['en']['answer'])}", ""]
        lines += [f"- *{item['question']}* {' '.join(item['answer'])}" for item in report["answer"]["en"]["follow_ups"]]
        lines.append("")
    lines += [
        f"**Labels:** {tally(report)} (each from the claim's parts: [docs/verdicts.md](docs/verdicts.md)).",
        "",
        "| ID | claim | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| [{c['id']}](#{c['id'].lower()}) | {c['claim']} | {verdict_line(c)} |" for c in report["claims"]]
    for c in report["claims"]:
        lines += ["", f"## {c['id']}", "", f"> {c['source']}", "", f"**Claim** (interview answer, section {c['section']}): {c['claim']}",
                  ""] + _body_md(c)
    if report.get("statements"):
        lines += ["", "## Beyond the source: long contexts", "",
                  "Statements the interview answer does not make, judged by the same rules; not in its tally.", "",
                  "| ID | statement | verdict |", "|---|---|---|"]
        lines += [f"| [{c['id']}](#{c['id'].lower()}) | {c['claim']} | {verdict_line(c)} |" for c in report["statements"]]
        for c in report["statements"]:
            lines += ["", f"## {c['id']}", "", f"**Statement:** {c['claim']}", ""] + _body_md(c)
    lines += ["", "## Lab run times", "",
              f"The report took {report['seconds']:.1f} s. Each lab's time is its own clock: the labs beside the "
              "training lab run at the same time in worker processes, so the times overlap and add up to more.", ""]
    lines += [f"- {name}: {info['seconds']:.1f} s{' (stored result reused)' if info['cached'] else ''}"
              for name, info in report["labs"].items()]
    titles = [f"{name}: {title}" for name, tables in report.get("tables", {}).items() for title in tables]
    if titles:
        lines += ["", "## The labs' tables", "",
                  f"{len(titles)} tables ({', '.join(titles[:6])}{', ...' if len(titles) > 6 else ''}) are in "
                  "report.json (`tables`) and, folded, on the page (index.html)."]
    return "\n".join(lines) + "\n"


def _inline_image(out: Path, rel: str) -> str:
    data = (out / rel).read_bytes()
    kind = "svg+xml" if rel.endswith(".svg") else "png"
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


EXPLORER_ROWS = 256  # must match ROWS in static/explorer.js


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("attnscale.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
    )
    env.filters["fmt"] = _fmt
    env.filters["verdict_line"] = verdict_line
    env.filters["part_row"] = part_row
    env.filters["unbroken"] = unbroken
    return env


HYPHENATED = re.compile(r"[^\s<>]*[-/][^\s<>]*")


def unbroken(text) -> Markup:
    """``text`` escaped, each word holding a hyphen or a slash ("0.05-0.95", "1/sqrt(d_k)") kept on one line: a
    browser breaks a line after those, which splits numbers and identifiers."""
    escaped = str(escape(str(text)))
    return Markup(HYPHENATED.sub(lambda m: f'<span class="nb">{m.group()}</span>', escaped))


def _assets() -> dict[str, str]:
    static = resources.files("attnscale.report") / "static"
    return {"css": (static / "style.css").read_text(encoding="utf-8"),
            "explorer_js": (static / "explorer.js").read_text(encoding="utf-8"), "rows": EXPLORER_ROWS}


def render_explorer(version: str) -> str:
    """The explorer alone, as one self-contained page."""
    return _environment().get_template("explore.html.j2").render(version=version, **_assets())


def figure_places(report: dict) -> dict:
    """Where each figure is embedded (the first claim, statement or lab, in page order, that shows it: every
    later use links there), its anchor id and its name."""
    home: dict[str, str] = {}
    for owner, figures in [*((c["id"], c["figures"]) for c in report["claims"] + report.get("statements", [])),
                           *((name, info.get("figures", [])) for name, info in report["labs"].items())]:
        for rel in figures:
            home.setdefault(rel, owner)
    return {"figure_home": home, "figure_id": {rel: "fig-" + Path(rel).stem for rel in home},
            "figure_name": {rel: Path(rel).stem.replace("_", " ") for rel in home}}


def render_html(report: dict, out: Path) -> str:
    env = _environment()
    images = {}
    for claim in report["claims"] + report.get("statements", []):
        for rel in claim["figures"]:
            images[rel] = _inline_image(out, rel)
    for info in report["labs"].values():
        for rel in info.get("figures", []):
            images[rel] = _inline_image(out, rel)
    template = env.get_template("index.html.j2")
    page = dict(report=report, question=QUESTION, images=images, **figure_places(report), verdict_class=VERDICT_CLASS, part_columns=PART_COLUMNS,
                tally=tally(report), source_zh=source.source_text("zh"), source_en=source.source_text("en"), **_assets())
    # the page's own CJK characters, cut from an installed font (rendered once to know which)
    face = fonts.font_face(template.render(**page, font_css=""))
    return template.render(**page, font_css=face)
