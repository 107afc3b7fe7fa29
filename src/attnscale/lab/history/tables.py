"""The table of the history lab: the factor through history, one row per release."""

from __future__ import annotations


def tables(result: dict) -> dict[str, list[dict]]:
    rows = [{"release": f"{r['package']} {r['version']}", "date": r["date"], "file:line": r["location"] or "-",
             "statement": r["statement"] or "-", "factor read": r["factor_read"] or r["status"],
             "factor measured": (", ".join(f"d_k {d}: {s:.4g}" for d, s in sorted(r["factor_measured"].items()))
                                 + f" -> {r['rule_measured']}") if r["factor_measured"] else
                                (r["agreement"] if r["agreement"].startswith("read, not run") else "-"),
             "agreement": r["agreement"]} for r in result["rows"]]
    return {"the attention factor through history (released code, read and run)": rows}
