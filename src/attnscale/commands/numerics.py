"""``attnscale numerics``: the numerics lab, or (``--from-file``) a precision check of your own q and k.

The file is a safetensors file with two tensors named ``q`` and ``k`` (``--q-name``, ``--k-name``), of shape
(..., T, d_k): e.g. (batch, heads, T, d_k) or (T, d_k); any float dtype; the leading
dimensions of q and k must broadcast.  Save them with
``safetensors.torch.save_file({"q": q, "k": k}, "q_k.safetensors")``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from . import options

def expected(q_name: str = "q", k_name: str = "k") -> str:
    return f"tensors named {q_name!r} and {k_name!r} of shape (..., T, d_k)"
SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}  # -> torch dtypes


def load_qk(path: Path, q_name: str = "q", k_name: str = "k"):
    """q and k from a safetensors file (the tensors named ``q_name`` and ``k_name``); FileNotFoundError /
    ValueError name what is wrong.

    Only q and k are read, and only after their sizes (from the file's header) are checked
    against the free memory."""
    import torch
    from safetensors import SafetensorError, safe_open

    from ..memory import require_memory, tensor_bytes

    from ..paths import what_is

    kind = what_is(path)
    if kind == "missing":
        raise FileNotFoundError(f"no such file: {str(path)!r} (expected a safetensors file with "
                                f"{expected(q_name, k_name)})")
    if kind != "a file":
        raise UserError(f"{str(path)!r} is {kind}; give a safetensors file with {expected(q_name, k_name)}")
    try:
        with safe_open(str(path), framework="pt") as file:
            names = set(file.keys())
            missing = [name for name in (q_name, k_name) if name not in names]
            if missing:
                raise UserError(f"{str(path)!r} has no tensor named {', '.join(map(repr, missing))}; found "
                                 f"{', '.join(map(repr, sorted(names))) or 'none'}; expected "
                                 f"{expected(q_name, k_name)} (--q-name, --k-name name others)")
            sizes = 0
            for name in (q_name, k_name):
                piece = file.get_slice(name)
                dtype = SAFETENSORS_DTYPES.get(piece.get_dtype())
                if dtype is None:
                    raise UserError(f"tensor {name!r} in {str(path)!r} has dtype {piece.get_dtype()}; accepted: "
                                     "F16, BF16, F32, F64")
                sizes += tensor_bytes(piece.get_shape(), getattr(torch, dtype))
            require_memory(sizes, f"loading q and k from {str(path)!r}", "save fewer tokens or heads")
            return file.get_tensor(q_name), file.get_tensor(k_name)
    except (SafetensorError, OSError) as error:
        raise UserError(f"cannot read {str(path)!r} as safetensors ({str(error).splitlines()[0]}); "
                         f"expected {expected(q_name, k_name)}") from None


def print_precision_check(report: dict) -> None:
    from rich.text import Text

    from ..terminal import console, print_rows

    console.print(Text.assemble(("precision check", "bold"), f": q {report['shape_q']}, k {report['shape_k']}, d_k {report['d_k']}, "
                  f"scale {report['scale']} (factor {report['factor']:.4g}), in {report['dtype']}"))
    values = [
        {"value": "logits min / max", "measured": f"{report['logits']['min']:.4g} / {report['logits']['max']:.4g}"},
        {"value": "largest |q.k| (before the factor)", "measured": f"{report['max_abs_product']:.4g}"},
        {"value": "probability error max / mean (against float64)", "measured": _pair(report["prob_error"])},
        {"value": "output error max / mean (v ~ N(0, 1))", "measured": _pair(report["output_error"])},
    ]
    print_rows("precision check: values", values)
    print_rows(f"precision check: counts in {report['dtype']}", [counted(report, *row) for row in COUNTED])
    for line in report["risks"]:
        console.print(f"- {line}")


def model_precision(model_dir, layer: int | None, text: str, dtype, seed: int, max_tokens: int = 128) -> list[dict]:
    """The precision check of a real model's q and k, captured from one forward pass over ``text``: one report
    per attention call (``layer``: only that one, counted from 0), each at the factor the call applies."""
    from ..attention import capture
    from ..diagnosis.health import clip_max_tokens, encode
    from ..numerics import precision_check
    from ..probing.intercept import model_inputs
    from ..probing.loading import load_model

    model, tokenizer = load_model(model_dir)
    ids, _, _ = encode(tokenizer, text, clip_max_tokens(model, tokenizer, max_tokens), "cpu")
    import torch

    with torch.no_grad(), capture(model) as seen:
        model(**model_inputs(model, ids))
    calls = list(seen.items())
    if layer is not None and not 0 <= layer < len(calls):
        raise UserError(f"--layer {layer} is out of range; accepted: 0..{len(calls) - 1} (the model's "
                        f"{len(calls)} attention calls)")
    chosen = [calls[layer]] if layer is not None else calls
    reports = []
    for name, seen_call in chosen:
        report = precision_check(seen_call.q, seen_call.k, scale=f"const:{seen_call.factor!r}", dtype=dtype, seed=seed)
        reports.append({"layer": calls.index((name, seen_call)), "module": name, **report})
    return reports


def print_model_precision(reports: list[dict]) -> None:
    from ..terminal import console, print_rows

    rows = [{"layer": str(r["layer"]), "module": r["module"], "d_k": str(r["d_k"]), "factor": f"{r['factor']:.4g}",
             "logits min / max": f"{r['logits']['min']:.4g} / {r['logits']['max']:.4g}",
             f"q k^T not finite ({r['dtype']})": str(r["matmul_overflow"]["count"]),
             "naive softmax rows overflowing": f"{r['naive_softmax_overflow_rows']['count']} of {r['rows']}",
             "probability error max": "n/a" if r["prob_error"]["max"] is None else f"{r['prob_error']['max']:.3g}"}
            for r in reports]
    print_rows("precision check of the model's own q and k", rows)
    for report in reports:
        for line in report["risks"]:
            console.print(f"- layer {report['layer']}: {line}", markup=False, highlight=False)


# (what is counted, the report's key, what it is counted among): one unit per column
COUNTED = (
    ("q k^T entries not finite", "matmul_overflow", "entries"),
    ("... with the factor folded into q first", "matmul_overflow_scaled_first", "entries"),
    ("rows where exp without max subtraction overflows", "naive_softmax_overflow_rows", "rows"),
    ("probabilities that underflow to exactly 0", "probs_underflow_to_zero", "entries"),
    ("probabilities that round to exactly 1", "probs_round_to_one", "entries"),
    ("rows holding a probability of exactly 1 (one-hot)", "saturated_rows", "rows"),
)


def counted(report: dict, what: str, key: str, among: str) -> dict:
    """One counted row: how many, of how many (entries of q k^T or query rows), and the share."""
    found = report[key]
    return {"counted": what, "count": str(found["count"]), "of": f"{report[among]} {among}",
            "share": f"{found['share']:.3g}"}


def _pair(error: dict) -> str:
    return "n/a" if error["max"] is None else f"{error['max']:.3g} / {error['mean']:.3g}"


def register(app: typer.Typer) -> None:
    @app.command("numerics")
    def numerics(
        ctx: typer.Context,
        preset: options.Preset = "quick",
        seed: options.Seed = 0,
        device: options.Device = "cpu",
        as_json: bool = typer.Option(False, "--json", help="Print the full result (or the precision check) as JSON."),
        figures: Annotated[Optional[Path], options.path_option("Also draw the lab's figures into this folder; not "
                                                               "with --from-file.")] = None,
        from_file: Annotated[Optional[Path], options.path_option(
            "Audit your own activations instead: a safetensors file with tensors 'q' and 'k' of shape (..., T, d_k).",
            "--from-file")] = None,
        model: Annotated[Optional[str], typer.Option("--model", help="Check a real model's own q and k instead: a "
                         "local model folder, or 'default' (MiniLM, offline); each attention call at its own factor.")] = None,
        layer: Annotated[Optional[int], typer.Option("--layer", callback=options.within(0),
                                                     help="With --model: only this attention call "
                                                     "(counted from 0).")] = None,
        text: str = typer.Option(None, help="With --model: the text to run (default: the health check's text)."),
        q_name: str = typer.Option("q", "--q-name", help="With --from-file: the name of the q tensor in the file."),
        k_name: str = typer.Option("k", "--k-name", help="With --from-file: the name of the k tensor in the file."),
        scale: str = typer.Option("sqrt", help="With --from-file: the scale rule (sqrt, none, inv_d, const:C, ...)."),
        dtype: str = typer.Option("float16", help="With --from-file or --model: float16, bfloat16 or float32."),
    ) -> None:
        """Run the numerics lab (FP16/BF16 overflow, error, clamp; C11, C12), or check the precision of q, k from a file."""
        from .lab_command import run_lab_command

        if model is not None:
            if from_file is not None:
                raise UserError("--model and --from-file are two sources of q and k; give one")
            options.refuse_given(ctx, "the precision check of a model (--model) has no preset, figures or --scale (each "
                                      "call is checked at its own factor)",
                                 refused=("preset", "figures", "scale", "q_name", "k_name"))
            from ..diagnosis.health import DEFAULT_TEXT
            from ..numerics import parse_dtype
            from ..runtime import check_seed

            low = parse_dtype(dtype)
            check_seed(seed)
            from ..terminal import utf8_option

            text = utf8_option("--text", text)
            reports = model_precision(None if model == "default" else model, layer, text or DEFAULT_TEXT, low, seed)
            if as_json:
                sys.stdout.write(json.dumps(reports, indent=1) + "\n")
            else:
                print_model_precision(reports)
            return
        if layer is not None or text is not None:
            raise UserError("--layer and --text apply only with --model")
        if from_file is None:
            options.refuse_given(ctx, "--scale, --dtype, --q-name and --k-name apply only with --from-file or --model "
                                      "(the lab runs its own rules and dtypes)",
                                 refused=("scale", "dtype", "q_name", "k_name"))
            run_lab_command("numerics", options.preset_name(preset), seed, device, as_json, figures)
            return
        options.refuse_given(ctx, "the precision check of a file (--from-file) has no preset and no figures",
                             refused=("preset", "figures"))
        from .. import scaling
        from ..numerics import parse_dtype, precision_check
        from ..runtime import check_seed

        low = parse_dtype(dtype)
        scaling.parse(scale)
        check_seed(seed)
        q, k = load_qk(from_file, q_name, k_name)
        report = precision_check(q, k, scale=scale, dtype=low, seed=seed)
        if as_json:
            sys.stdout.write(json.dumps(report, indent=1) + "\n")
        else:
            print_precision_check(report)
