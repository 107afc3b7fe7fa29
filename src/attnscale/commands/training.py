"""``attnscale train`` (one run), ``attnscale sweep`` (a grid, in parallel, into SQLite) and
``attnscale training`` (the lab's preset, with its verdicts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from . import options

DEFAULT_DB = Path("attnscale-runs") / "runs.sqlite"
Checkpoint = Annotated[Optional[Path], options.path_option("Save the final weights (safetensors) into this folder.")]
BYTES_PER_RUN = 4096  # a grid point held by the sweep: its spec, key and summary row (measured ~1 kB, with margin)


def parse_list(text: str, kind, name: str) -> list:
    """'1e-3,3e-3' -> [0.001, 0.003]; ValueError naming the bad item."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UserError(f"--{name} needs at least one value, got {text!r}")
    out = []
    for item in items:
        try:
            out.append(kind(item))
        except ValueError:
            raise UserError(f"--{name}: {item!r} is not a valid {kind.__name__}; give a comma-separated list") from None
    return out


def print_run(result: dict) -> None:
    from ..terminal import console, print_rows

    log = result["log"]
    rows = []
    for i, step in enumerate(log["step"]):
        layers = log["attention"][i]
        rows.append({"step": step, "train_loss": log["train_loss"][i], "val_loss": log["val_loss"][i],
                     "val_acc": log["val_acc"][i] if log["val_acc"][i] is not None else "-",
                     "grad W_q L0": log["grad"]["W_q"][i][0], "grad W_k L0": log["grad"]["W_k"][i][0],
                     "entropy L0": layers[0]["entropy"], "max|logit| L0": layers[0]["max_abs_logit"],
                     "logit std L0": layers[0]["logit_std"]})
    print_rows("training log (layer 0; --json has every layer)", rows, limit=60)
    if result["status"] == "diverged":
        console.print(f"diverged at step {result['diverged_at']} (loss NaN/inf)", style="bold red")
    else:
        acc = result["final_val_acc"]
        console.print(f"finished: validation loss {result['initial_val_loss']:.4f} -> {result['final_val_loss']:.4f}"
                      + (f", recall accuracy {acc:.3f} (chance {result['chance_acc']:.3f})" if acc is not None else ""))


def summarize_rows(summary, rows: list[dict], db: Path) -> list[dict]:
    """The sweep summary of stored rows; a row without what a finished run stores is a clear error."""
    try:
        return summary(rows)
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError) as error:
        raise UserError(f"run store {str(db)!r} holds rows that are not sweep results ({type(error).__name__}: "
                         f"{str(error)[:60]}); use another --db") from None


def train(
    task: str = typer.Option("recall", help="recall (multi-query associative recall) or shakespeare (char LM)."),
    rule: str = typer.Option("sqrt", help="Scale spec: sqrt, inv_d, none, const:C, power:A, learned, qknorm."),
    init: str = typer.Option("unit", help="Q/K/V init: torch, unit, t5, mup."),
    d_head: int = typer.Option(16, help="Head dimension d_k."),
    layers: int = typer.Option(2, help="Number of Transformer blocks."),
    lr: float = typer.Option(3e-3, help="Peak learning rate."),
    optimiser: str = typer.Option("adamw", help="adamw, sgd or adafactor."),
    steps: int = typer.Option(300, help="Training steps."),
    seed: options.Seed = 0,
    d_model: int = typer.Option(32, help="Model width."),
    heads: int = typer.Option(1, help="Attention heads per layer."),
    batch_size: int = typer.Option(64, help="Sequences per step."),
    log_every: int = typer.Option(10, help="Log every k steps."),
    device: options.Device = "cpu",
    checkpoint: Checkpoint = None,
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON."),
) -> None:
    """Train one model and print its log (a NaN/inf loss is reported as 'diverged at step k')."""
    import dataclasses

    from .. import scaling
    from ..paths import check_folder, check_outputs
    from ..runs import run_key, run_one
    from ..train import RunSpec

    spec = RunSpec(task=task, rule=rule, init=init, d_head=d_head, n_layers=layers, lr=lr, optimiser=optimiser,
                   steps=steps, seed=seed, d_model=d_model, n_heads=heads, batch_size=batch_size,
                   log_every=log_every, device=device)
    scaling.factor(rule, d_head)  # a factor that overflows at this d_head fails here, not in the model
    if checkpoint is not None:
        check_outputs(check_folder(checkpoint, "--checkpoint"), files=(run_key(spec) + ".safetensors",))
    result, seconds = run_one(dataclasses.asdict(spec), None if checkpoint is None else str(checkpoint))
    if as_json:
        sys.stdout.write(json.dumps({"spec": dataclasses.asdict(spec), "result": result}, indent=1) + "\n")
        return
    from ..terminal import console

    print_run(result)
    if checkpoint is not None:
        console.print(f"checkpoint: {checkpoint / (run_key(spec) + '.safetensors')}")
    console.print(f"took {seconds:.1f} s")


def sweep(
    ctx: typer.Context,
    task: str = typer.Option("recall", help="recall or shakespeare."),
    rules: str = typer.Option("sqrt,inv_d,none", help="Comma-separated scale specs."),
    d_heads: str = typer.Option("16,64,256", help="Comma-separated head dimensions."),
    lrs: str = typer.Option("1e-3,3e-3,1e-2", help="Comma-separated learning rates."),
    seeds: int = typer.Option(1, callback=options.within(1), help="Seeds per grid point (0, 1, ...)."),
    layers: str = typer.Option("2", help="Comma-separated numbers of layers."),
    optimisers: str = typer.Option("adamw", help="Comma-separated optimisers: adamw, sgd, adafactor."),
    init: str = typer.Option("unit", help="Q/K/V init scheme."),
    steps: int = typer.Option(250, help="Training steps per run."),
    d_model: int = typer.Option(32, help="Model width."),
    log_every: int = typer.Option(10, help="Log every k steps."),
    device: options.Device = "cpu",
    workers: int = typer.Option(None, help="Worker processes (default: the number of cores)."),
    executor: str = typer.Option("local", help="local (process pool) or ray."),
    batch_runs: int = typer.Option(24, help="Most runs of one shape trained together as one program (1: one at a "
                                            "time; fewer where a group would outgrow the CPU cache)."),
    address: str = typer.Option(None, help="Ray cluster address (default: start a local Ray)."),
    db: Annotated[Path, options.path_option("SQLite file of finished runs (reruns skip them).")] = DEFAULT_DB,
    checkpoint: Annotated[Optional[Path], options.path_option(
        "Save each run's final weights (safetensors) into this folder.")] = None,
    summary_only: bool = typer.Option(False, "--summary", help="Print the summary of the runs in --db; run nothing."),
) -> None:
    """Run a grid of training runs (skipping those already in --db) and print a summary with LR sensitivity."""
    if summary_only:
        options.refuse_given(ctx, "--summary only reads --db", allowed=("db", "summary_only"))
        print_summary(db)
        return
    specs = grid_specs(task, rules, d_heads, lrs, seeds, layers, optimisers, init, steps, d_model, log_every, device)
    run_grid(specs, db, checkpoint, workers, executor, address, batch_runs)


def print_summary(db: Path) -> None:
    from ..terminal import print_rows
    from ..runs import RunStore, summary

    if not db.is_symlink() and not db.exists():  # a broken link is named by the store for what it is
        raise FileNotFoundError(f"no run store at {str(db)!r}; run a sweep first or pass --db")
    store = RunStore(db, readonly=True)
    rows, unverified = store.rows(), store.unverified()
    left_out = f" ({unverified} rows without a digest left out: put there by hand or by an older attnscale)" if unverified else ""
    print_rows(f"sweep summary: {len(rows)} runs in {db}{left_out}", summarize_rows(summary, rows, db), limit=200)


def grid_specs(task, rules, d_heads, lrs, seeds, layers, optimisers, init, steps, d_model, log_every, device) -> list:
    """The sweep's RunSpecs, every list parsed and the grid's size and factors checked first."""
    from .. import scaling
    from ..memory import require_memory
    from ..train import RunSpec

    grid = {"rules": parse_list(rules, str, "rules"), "d-heads": parse_list(d_heads, int, "d-heads"),
            "lrs": parse_list(lrs, float, "lrs"), "layers": parse_list(layers, int, "layers"),
            "optimisers": parse_list(optimisers, str, "optimisers")}
    runs = seeds
    for values in grid.values():
        runs *= len(values)
    require_memory(runs * BYTES_PER_RUN, f"a sweep grid of {runs} runs", "use fewer seeds or fewer values")
    specs = [RunSpec(task=task, rule=r, init=init, d_head=d, n_layers=n, lr=lr, optimiser=o, steps=steps, seed=s,
                     d_model=d_model, log_every=log_every, device=device)
             for r in grid["rules"] for d in grid["d-heads"] for lr in grid["lrs"] for n in grid["layers"]
             for o in grid["optimisers"] for s in range(seeds)]
    for rule in grid["rules"]:
        for d_head in grid["d-heads"]:
            scaling.factor(rule, d_head)  # a factor that overflows fails here, not in a worker
    return specs


def run_grid(specs: list, db: Path, checkpoint: Path | None, workers, executor: str, address, batch_runs: int) -> None:
    from ..terminal import print_rows, progress_bar
    from ..paths import check_folder, check_outputs
    from ..runs import RunStore, check_options, execute, plan_groups, run_key, spec_dict, summary, workers_for_memory
    from ..runs import check_memory as runs_check_memory

    pool_size = check_options(executor, workers, address)
    todo = {run_key(s): spec_dict(s) for s in specs}
    if checkpoint is not None:  # each run's checkpoint file, before any training
        check_outputs(check_folder(checkpoint, "--checkpoint"), files=tuple(f"{key}.safetensors" for key in todo))
    groups = plan_groups(todo, batch_runs, pool_size)
    if executor == "local" and workers is None:  # the default, cut to what memory holds (as execute cuts it)
        pool_size = workers_for_memory(pool_size, groups, todo)
    runs_check_memory(groups, todo, pool_size if executor == "local" else 1)
    RunStore.check(db)  # a store another sweep is writing is refused here, before any training
    store = RunStore(db)
    with progress_bar() as bar:
        job = bar.add_task("sweep", total=len(specs), note="")
        execute(specs, store, workers=workers, executor=executor, address=address,
                ray_dir=db.parent / "ray", checkpoint_dir=checkpoint, batch_runs=batch_runs,
                progress=lambda done, total, msg: bar.update(job, completed=done, note=msg))
    keys = {run_key(s) for s in specs}
    rows = [row for row in store.rows() if row["key"] in keys]
    print_rows(f"sweep summary: {len(rows)} runs (store: {db})", summarize_rows(summary, rows, db), limit=200)


def register(app: typer.Typer) -> None:
    from .lab_command import make_lab_command

    app.command("training")(make_lab_command("training"))
    app.command("train")(train)
    app.command("sweep")(sweep)
