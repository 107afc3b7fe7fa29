"""The tables of the training lab: the rows worth printing (CLI) or tabulating (report)."""

from __future__ import annotations

from ... import intervals
from .experiment import task_d_heads, tasks_of
from .figures import coord_rows
from .verdicts import READINGS, cell, deep_rows, fmt_spread, speed_rows, t5_rows


def spread_text(s: dict | None) -> str:
    return "-" if s is None else fmt_spread(s)


def chosen_on(row: dict) -> str:
    """The base seeds, or sqrt's confirmation among its candidate rates on every seed of theirs."""
    if "confirmed_among" not in row:
        return "base seeds"
    rates = ", ".join(f"{lr:g}" for lr in row["confirmed_among"])
    return f"{row['confirmed_seeds']} seeds each of {rates} (base seeds: {row['chosen_on_base']:g})"


def best_lr_rows(result: dict) -> list[dict]:
    by_key = {(c["task"], c["rule"], c["d_head"], c["lr"]): c for c in result["cells"]}
    rows = []
    for row in result["best_lr"]:
        c = by_key[(row["task"], row["rule"], row["d_head"], row["lr"])]
        rows.append({"task": row["task"], "d_head": row["d_head"], "rule": row["rule"], "best_lr": row["lr"],
                     "lrs tried": ", ".join(f"{lr:g}" for lr in row["grid"]),
                     "best at an edge": row["at_edge"] or "no",
                     "indistinguishable (bootstrap)": ", ".join(f"{lr:g}" for lr in row.get("near_best", ())) or "-",
                     "chosen on": chosen_on(row),
                     "seeds": len(c["seeds"]), "accuracy" if row["task"] == "recall" else "loss":
                     spread_text(c["final_val_acc"] if row["task"] == "recall" else c["final_val_loss"]),
                     "diverged seeds": c["diverged"]})
    return rows


def progress_rows(result: dict) -> list[dict]:
    rows = []
    for rule in result["config"]["rules"]:
        if rule == "sqrt":
            continue
        for task in tasks_of(result):
            for d in task_d_heads(result, task):
                for reading in READINGS:
                    c = cell(result, task, rule, d, reading)
                    if not c["trained"]:
                        continue
                    rate = c["stall_rate"]
                    rows.append({"task": task, "d_head": d, "rule": rule, "lr": c["lr"],
                                 "read at": "own best lr" if reading == "own" else "sqrt's best lr",
                                 "progress vs sqrt": spread_text(c["progress"]), "class": c["class"],
                                 "stalled seeds": f"{rate['stalled']} of {rate['seeds']}" if rate["seeds"] else "-",
                                 "stall rate (Wilson 95%)": (intervals.fmt_interval(rate["interval"], percent=True)
                                                             if rate["seeds"] else "-")})
    return rows


def tables(result: dict) -> dict[str, list[dict]]:
    base = result["baselines"]
    return {
        "baselines (recall copy accuracy; entropies of the training text, nats)": [
            {"recall copy baseline": base["recall"]["copy"], "recall chance": base["recall"]["chance"],
             "unigram entropy": base["shakespeare"]["unigram"], "bigram entropy": base["shakespeare"]["bigram"],
             "runs": result["runs"]}],
        "each rule's best learning rate per d_head (median [min-max] over seeds)": best_lr_rows(result),
        "progress vs sqrt (fraction of sqrt's learning), each rule at its own and at sqrt's best lr": progress_rows(result),
        "steps to solve recall, inv_d vs sqrt (C13)": [
            {k: (intervals.fmt_interval(v) if k == "interval" else v) for k, v in r.items()}
            for reading in READINGS for r in speed_rows(result, reading)],
        "8 layers, d_head 256, recall: factor 1/8 vs 1/16 (C09)": [
            {k: (spread_text(v) if isinstance(v, dict) else intervals.fmt_interval(v, percent=True)
                 if k == "solved_interval" else v) for k, v in r.items() if k != "oscillations"}
            for r in deep_rows(result)],
        "T5 folding: none + t5 init vs sqrt + unit init (C10)": [
            {k: (spread_text(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in t5_rows(result)],
        "coord check: attention logits per layer vs d_head (medians over seeds)": coord_rows(result),
    }
