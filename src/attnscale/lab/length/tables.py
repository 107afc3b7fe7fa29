"""The length lab's tables: the trained models at each test length, and the fading at initialisation."""

from __future__ import annotations

import statistics

from ... import intervals
from .experiment import fades, learned


def median_span(values: list[float]) -> str:
    """'median [min-max]' of the seeds' values."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def trained_rows(result: dict) -> list[dict]:
    """One row per (positions, rule) at its best learning rate: median accuracy [min-max] over seeds at
    each test length, and how many seeds keep the needle at the longest."""
    rows = []
    lengths = result["lengths"]
    for best in result["best"]:
        runs = [r for r in result["models"] if r["rule"] == best["rule"] and r["pos"] == best["pos"] and r["lr"] == best["lr"]]
        counted = [r for r in runs if learned(r)]
        row = {"positions": best["pos"], "rule": best["rule"], "lr": best["lr"], "seeds": len(runs)}
        for i, length in enumerate(lengths):
            row[f"accuracy at {length}"] = median_span([r["accuracy"][i] for r in runs])
        weights = [r["needle_weight"][-1] / r["needle_weight"][0] for r in counted]
        row[f"needle weight at {lengths[-1]} / at {lengths[0]}"] = median_span(weights) if weights else "-"
        k = sum(fades(r) for r in counted)
        row["seeds whose needle fades (95% interval)"] = f"{k} of {len(counted)} ({intervals.fmt_interval(intervals.wilson(k, len(counted)))})"
        rows.append(row)
    return rows


def init_rows(result: dict) -> list[dict]:
    return [{"rule or law": r["name"], "n": r["n"], "multiplier": round(r["multiplier"], 3),
             "needle among equal keys (exact)": f"{r['weight_equal']:.4g}",
             "needle among noisy keys: closed form": f"{r['weight_closed']:.4g}",
             "Monte Carlo (SE)": f"{r['weight_mc']:.4g} ({r['weight_se']:.1g})",
             "entropy / ln n (SE)": f"{r['entropy_mc']:.3f} ({r['entropy_se']:.1g})"} for r in result["init"]]


def tables(result: dict) -> dict[str, list[dict]]:
    return {"trained at one length, run at up to 16x it": trained_rows(result),
            "a needle and attention's entropy against the number of keys, at initialisation": init_rows(result)}
