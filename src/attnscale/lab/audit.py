"""Audit lab: the factor the installed transformers' attention families apply, against their configs.

The scale audit (:mod:`attnscale.audit`) on tiny random-init members of
transformers families: per layer and attention backend, the factor measured on the
attention function and on the whole path from the q and k projections, soft caps and
QK-norm, dependence on position and length, and parity between backends.  The quick
preset audits a representative set of families (encoders, decoders, encoder-decoders,
soft caps, QK-norm, latent attention, a factor set by a config field, inline attention,
and the families whose factor the full audit found to differ from their config); the
full preset audits every decoder and encoder family, as ``attnscale audit`` does.  Both presets
also measure the families whose factor changes with the query's position at p up to 1,048,576
(:mod:`attnscale.audit.positions`).

It tests no claim of the source (C10 is the doctor's and the history lab's, C13 the history and
training labs'): its section of the
report lists the mismatches and backend disagreements it found, each with the source
line of the family that sets its factor.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import checks
from ..audit import pipeline
from ..audit import positions as far_positions
from ..audit.record import FAILING, Status
from ..errors import UserError
from ..plotting import pyplot, save

VERSION = 7  # 7: the factor at far positions (audit.positions); 6: video clips, audio shapes, detectors on tiny backbones, attention no row reads named; 5: composites covered by their towers, mrope and per-stage tiny sizes, coverage counts; 4: the attention function's entry named "function" (was "kernel"); 2: factors declared from the attention class's own code; gemma3n_text, zamba2 built; length row by row; 3: sinks
NUMBER_KEYS: dict[str, tuple[str, ...]] = {}  # the audit tests no claim of the source, so its findings carry no numbers

# A representative subset for the quick preset (about 15 s on 2 cores).
QUICK_FAMILIES = ("bert", "gpt2", "t5", "llama", "gemma2", "granite", "qwen3", "deepseek_v3", "gpt_neo", "ministral3",
                  "zamba", "inkling_text", "gemma4_text", "doge", "opt")


@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"  # the audit's tiny models always run on the CPU
    families: tuple[str, ...] | None = QUICK_FAMILIES  # None: every decoder and encoder family
    backends: tuple[str, ...] = pipeline.DEFAULT_BACKENDS

    def __post_init__(self):
        checks.config(self)


PRESETS = {"quick": Config(), "full": Config(families=None)}


def check_config(config: Config) -> None:
    if config.device not in ("cpu", "cuda"):
        raise UserError(f"unknown device {config.device!r}; accepted: cpu, cuda")
    if config.families is not None and not config.families:
        raise UserError("families is empty; accepted: a tuple of transformers model types, or None for all")


def compact(result) -> dict:
    """What the report keeps of one family's audit (no timings: same seed, same numbers)."""
    layers = []
    for row in result.layers:
        layers.append({
            "name": row.name, "d_k": row.d_k, "declared": row.declared["path_first"],
            "declared_rules": row.declared["rules"],
            "measured": {backend: {"function": entry.function.get("factor"), "cap": entry.function.get("cap"),
                                   "sink_logit": (entry.function.get("sink") or {}).get("sink_logit"),
                                   "path": (entry.path or {}).get("factor"),
                                   "form": (entry.path or {}).get("form")}
                         for backend, entry in row.backends.items()},
        })
    return {"family": result.family, "status": result.status, "reason": result.reason, "verdict": result.verdict,
            "findings": result.findings, "source_lines": result.source_lines,
            "unread_attention": result.unread_attention,
            "backends": {b: {k: v for k, v in info.items() if k in ("accepted", "reason", "parity")}
                         for b, info in result.backends.items()},
            "layers": layers}


def run(config: Config, progress=None) -> dict:
    check_config(config)
    items = pipeline.plan(None if config.families is None else ",".join(config.families))

    def step(done: int, name: str, seconds: float) -> None:
        if progress:
            progress(done / len(items), f"{name}")

    results = pipeline.run_plan(items, config.backends, config.seed, step)
    far = far_positions.audit_positions(seed=config.seed)
    summary = pipeline.report(results, config.backends, 0.0)
    rows = [{k: v for k, v in row.items() if k != "seconds"} for row in summary["rows"]]
    return {"transformers": summary["transformers"], "backends": list(config.backends),
            "families_audited": "all" if config.families is None else list(config.families),
            "tolerances": summary["tolerances"], "counts": summary["counts"], "coverage": summary["coverage"],
            "rows": rows,
            "families": [compact(result) for result in results], "far_positions": far}


def judge(result: dict) -> dict:
    """The audit tests no claim of the interview answer; its findings are listed in its tables."""
    return {}


def tables(result: dict) -> dict[str, list[dict]]:
    findings = []
    for family in result["families"]:
        if family["verdict"] not in FAILING:
            continue
        for text in family["findings"][:4]:
            findings.append({"family": family["family"], "verdict": family["verdict"], "finding": text,
                             "source": "; ".join(family["source_lines"][:2])})
    scope = "all families" if result["families_audited"] == "all" else \
        f"{len(result['families_audited'])} families (attnscale audit: all)"
    skipped = [{"family": f["family"], "reason": f["reason"]} for f in result["families"] if f["status"] == Status.SKIPPED]
    covered = [{"family": f["family"], "towers": f["reason"]} for f in result["families"] if f["status"] == Status.COVERED]
    out = {f"mismatches and backend disagreements in transformers {result['transformers']} ({scope})": findings,
           "families audited": result["rows"]}
    if result.get("far_positions"):
        out["factor at far positions (relative to position 0, measured through the whole forward pass)"] = \
            far_positions.table(result["far_positions"])
    if covered:
        out["composites covered by their towers"] = covered
    if skipped:
        out["families skipped"] = skipped
    return out


def figures(result: dict, outdir) -> dict[str, list[str]]:
    """Measured factor / declared factor per family and backend (first attention layer)."""
    plt = pyplot()
    families = [f for f in result["families"] if f["layers"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(families) + 2), 3.4), dpi=100)
    markers = {"eager": "o", "sdpa": "s", "flex_attention": "^"}
    for backend in result["backends"]:
        xs, ys = [], []
        for index, family in enumerate(families):
            layer = family["layers"][0]
            measured = layer["measured"].get(backend)
            if not measured or not layer["declared"]:
                continue
            value = measured["path"] if measured["form"] == "linear" else measured["function"]
            if value is not None and value == value:
                xs.append(index)
                ys.append(value / layer["declared"])
        ax.scatter(xs, ys, marker=markers.get(backend, "x"), s=22, alpha=0.7, label=backend)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(families)))
    ax.set_xticklabels([f["family"] for f in families], rotation=90, fontsize=8)
    ax.set_ylabel("measured / declared factor")
    ax.set_title(f"scale audit, transformers {result['transformers']} (first attention layer)", fontsize=9)
    ax.legend(fontsize=8)
    return {"audit": [save(fig, outdir, "audit_factors.png")]}
