"""The training lab's figures: every training number drawn as the median over seeds with a
min-max band.  :func:`panel_grid` sets up a grid of panels; :func:`task_panels` the (task x
d_head) grid that several figures share."""

from __future__ import annotations

import statistics
from pathlib import Path

from ...plotting import pyplot, save
from .experiment import mean_score, task_d_heads, tasks_of
from .verdicts import best_lr, deep_rows, runs_at

RULE_COLORS = {"sqrt": "tab:blue", "inv_d": "tab:orange", "none": "tab:red", "const:0.125": "tab:green",
               "const:0.0625": "tab:purple"}


def panel_grid(rows: int, cols: int, height: float = 2.7):
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, height * rows), squeeze=False)
    return fig, axes


def task_panels(result: dict):
    """A (task x d_head) grid: (fig, [(task, d_head, ax)]) for the d_heads each task was
    trained at; the panels of d_heads a task lacks are switched off."""
    d_heads = sorted({d for task in tasks_of(result) for d in task_d_heads(result, task)})
    fig, axes = panel_grid(len(tasks_of(result)), len(d_heads))
    panels = []
    for row, task in enumerate(tasks_of(result)):
        for col, d in enumerate(d_heads):
            if d in task_d_heads(result, task):
                panels.append((task, d, axes[row][col]))
            else:
                axes[row][col].axis("off")
    return fig, panels


def label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def band(ax, runs: list[dict], field: str, color=None, name: str = "", log: bool = False, fill=None) -> None:
    """Median over the runs of curve[field] with a min-max band; a missing point (diverged) is ``fill``."""
    if not runs:
        return
    length = max(len(r["curve"]["step"]) for r in runs)
    steps = max((r["curve"]["step"] for r in runs), key=len)
    columns = []
    for i in range(length):
        values = [(r["curve"][field][i] if i < len(r["curve"][field]) else None) for r in runs]
        values = [fill if v is None else v for v in values]
        columns.append([v for v in values if v is not None])
    points = [(s, statistics.median(c), min(c), max(c)) for s, c in zip(steps, columns) if c]
    if not points:
        return
    xs, mid, low, high = zip(*points)
    plot = ax.semilogy if log else ax.plot
    plot(xs, mid, color=color, label=name)
    ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)


def finish(fig, outdir: Path, name: str) -> str:
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return save(fig, outdir, name)


def figure_curves(result: dict, outdir: Path) -> str:
    fig, panels = task_panels(result)
    base = result["baselines"]
    for task, d, ax in panels:
        field = "val_acc" if task == "recall" else "val_loss"
        for rule in result["config"]["rules"]:
            lr = best_lr(result, task, rule, d)
            if lr is None:  # the decisive point trains its rules only
                continue
            band(ax, runs_at(result, task, rule, d, lr), field, RULE_COLORS.get(rule), f"{rule} (lr {lr:g})",
                 fill=0.0 if task == "recall" else None)
        if task == "recall":
            ax.axhline(base["recall"]["copy"], color="gray", linestyle=":", label="copy baseline")
            label(ax, f"recall, d_head {d}", "step", "validation accuracy")
        else:
            ax.axhline(base["shakespeare"]["bigram"], color="gray", linestyle=":", label="bigram entropy")
            ax.axhline(base["shakespeare"]["unigram"], color="gray", linestyle="--", label="unigram entropy")
            label(ax, f"Shakespeare, d_head {d}", "step", "validation loss (nats)")
    return finish(fig, outdir, "training_curves.png")


def figure_grads(result: dict, outdir: Path) -> str:
    d_heads = task_d_heads(result, "recall")
    fig, axes = panel_grid(1, len(d_heads))
    for col, d in enumerate(d_heads):
        ax = axes[0][col]
        lr = best_lr(result, "recall", "sqrt", d)
        for rule in ("sqrt", "none"):
            runs = [dict(r, curve={"step": r["curve"]["step"], "grad": [max(g, 1e-12) for g in r["grad_qk_layer0"]]})
                    for r in runs_at(result, "recall", rule, d, lr)]
            band(ax, runs, "grad", RULE_COLORS[rule], rule, log=True)
        label(ax, f"recall, d_head {d}, lr {lr:g}", "step", "layer-0 |grad W_q, W_k|")
    return finish(fig, outdir, "training_c17_grads.png")


def figure_lr(result: dict, outdir: Path) -> str:
    fig, panels = task_panels(result)
    for task, d, ax in panels:
        for rule in result["config"]["rules"]:
            cells = sorted((c for c in result["cells"] if (c["task"], c["rule"], c["d_head"]) == (task, rule, d)),
                           key=lambda c: c["lr"])
            if not cells:
                continue
            lrs = [c["lr"] for c in cells]
            ax.semilogx(lrs, [mean_score(c) for c in cells], marker="o", label=f"{rule} (mean over seeds)",
                        color=RULE_COLORS.get(rule))
            ax.fill_between(lrs, [c["score"]["min"] for c in cells], [c["score"]["max"] for c in cells],
                            color=RULE_COLORS.get(rule), alpha=0.15, linewidth=0)
        label(ax, f"{task}, d_head {d}", "learning rate",
              "final accuracy" if task == "recall" else "final validation loss")
    return finish(fig, outdir, "training_lr_sweep.png")


def figure_deep(result: dict, outdir: Path) -> str | None:
    lrs = sorted({r["lr"] for r in deep_rows(result)})
    if not lrs:
        return None  # this preset trains no deep model
    fig, axes = panel_grid(1, max(1, len(lrs)))
    for col, lr in enumerate(lrs):
        ax = axes[0][col]
        for rule in ("const:0.125", "const:0.0625"):
            band(ax, [r for r in result["deep"] if r["rule"] == rule and r["lr"] == lr], "val_acc",
                 RULE_COLORS[rule], rule, fill=0.0)
        label(ax, f"{result['config']['deep_layers']} layers, d_head {result['config']['deep_d_head']}, lr {lr:g}",
              "step", "validation accuracy (recall)")
    return finish(fig, outdir, "training_c09_deep.png")


def t5_tasks_of(result: dict) -> list[str]:
    return [t for t in result["config"]["t5_tasks"] if any(r["task"] == t for r in result["t5"])]


def figure_t5(result: dict, outdir: Path) -> str:
    opts = [o for o, _ in result["config"]["t5_optimisers"]]
    fig, axes = panel_grid(len(t5_tasks_of(result)), len(opts))
    for row, task in enumerate(t5_tasks_of(result)):
        field = "val_acc" if task == "recall" else "val_loss"
        for col, opt in enumerate(opts):
            ax = axes[row][col]
            for init, color in (("unit", "tab:blue"), ("t5", "tab:brown")):
                runs = [r for r in result["t5"] if r["task"] == task and r["optimiser"] == opt and r["init"] == init]
                name = "sqrt + unit init" if init == "unit" else "none + t5 init"
                band(ax, runs, field, color, name, fill=0.0 if task == "recall" else None)
            label(ax, f"{task}, {opt}", "step", "validation accuracy" if task == "recall" else "validation loss")
    return finish(fig, outdir, "training_c10_t5.png")


def coord_rows(result: dict) -> list[dict]:
    """Logit std and max |logit| per layer at init and after 100 steps (recall, each rule at its best
    learning rate), medians over seeds."""
    rows = []
    for rule in result["config"]["rules"]:
        for d in result["config"]["d_heads"]:
            runs = runs_at(result, "recall", rule, d, best_lr(result, "recall", rule, d))
            for when in ("0", "100"):
                layers = [r["attention_at"][when] for r in runs if when in r["attention_at"]]
                for layer in range(len(layers[0]) if layers else 0):
                    rows.append({"rule": rule, "d_head": d, "step": int(when), "layer": layer,
                                 **{m: statistics.median(ls[layer][m] for ls in layers)
                                    for m in ("logit_std", "max_abs_logit", "entropy")}})
    return rows


def figure_coord(result: dict, outdir: Path) -> str:
    rows = coord_rows(result)
    fig, axes = panel_grid(2, 2, height=2.8)
    for col, step in enumerate((0, 100)):
        for row, metric in enumerate(("logit_std", "max_abs_logit")):
            ax = axes[row][col]
            for rule in result["config"]["rules"]:
                for layer in sorted({r["layer"] for r in rows if r["rule"] == rule}):
                    pts = sorted((r["d_head"], r[metric]) for r in rows
                                 if r["rule"] == rule and r["layer"] == layer and r["step"] == step)
                    if pts:
                        ax.loglog(*zip(*pts), marker="o", color=RULE_COLORS.get(rule),
                                  linestyle="-" if layer == 0 else ":", label=f"{rule} L{layer}")
            words = {"logit_std": "logit std", "max_abs_logit": "largest |logit|"}[metric]
            label(ax, f"{words}, step {step}\n(median over seeds)", "head dimension d_head", words)
            ax.minorticks_off()
            ax.set_xticks(result["config"]["d_heads"], [str(d) for d in result["config"]["d_heads"]])
    return finish(fig, outdir, "training_coord_check.png")


def figures(result: dict, outdir) -> dict[str, list[str]]:
    outdir = Path(outdir)
    curves, grads, lrs = figure_curves(result, outdir), figure_grads(result, outdir), figure_lr(result, outdir)
    return {"C05": [curves, lrs], "C06": [curves, grads], "C13": [curves], "C17": [grads],
            "C18": [curves, lrs], "C09": [f for f in [figure_deep(result, outdir)] if f], "C10": [figure_t5(result, outdir)],
            "training": [figure_coord(result, outdir)]}
