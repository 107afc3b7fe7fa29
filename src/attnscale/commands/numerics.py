"""``attnscale numerics``: the numerics lab, or (``--from-file``) a precision check of your own q and k.

The file is a safetensors file with two tensors named ``q`` and ``k``, of shape
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

EXPECTED = "tensors named 'q' and 'k' of shape (..., T, d_k)"
SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}  # -> torch dtypes


def load_qk(path: Path):
    """q and k from a safetensors file; FileNotFoundError / ValueError name what is wrong.

    Only q and k are read, and only after their sizes (from the file's header) are checked
    against the free memory."""
    import torch
    from safetensors import SafetensorError, safe_open

    from ..memory import require_memory, tensor_bytes

    from ..paths import what_is

    kind = what_is(path)
    if kind == "missing":
        raise FileNotFoundError(f"no such file: {str(path)!r} (expected a safetensors file with {EXPECTED})")
    if kind != "a file":
        raise UserError(f"{str(path)!r} is {kind}; give a safetensors file with {EXPECTED}")
    try:
        with safe_open(str(path), framework="pt") as file:
            names = set(file.keys())
            missing = [name for name in ("q", "k") if name not in names]
            if missing:
                raise UserError(f"{str(path)!r} has no tensor named {', '.join(map(repr, missing))}; found "
                                 f"{', '.join(map(repr, sorted(names))) or 'none'}; expected {EXPECTED}")
            sizes = 0
            for name in ("q", "k"):
                piece = file.get_slice(name)
                dtype = SAFETENSORS_DTYPES.get(piece.get_dtype())
                if dtype is None:
                    raise UserError(f"tensor {name!r} in {str(path)!r} has dtype {piece.get_dtype()}; accepted: "
                                     "F16, BF16, F32, F64")
                sizes += tensor_bytes(piece.get_shape(), getattr(torch, dtype))
            require_memory(sizes, f"loading q and k from {str(path)!r}", "save fewer tokens or heads")
            return file.get_tensor("q"), file.get_tensor("k")
    except (SafetensorError, OSError) as error:
        raise UserError(f"cannot read {str(path)!r} as safetensors ({str(error).splitlines()[0]}); "
                         f"expected {EXPECTED}") from None


def print_precision_check(report: dict) -> None:
    from rich.text import Text

    from ..terminal import console, print_rows

    console.print(Text.assemble(("precision check", "bold"), f": q {report['shape_q']}, k {report['shape_k']}, d_k {report['d_k']}, "
                  f"scale {report['scale']} (factor {report['factor']:.4g}), in {report['dtype']}"))
    rows = [
        {"what": "logits min / max", "value": f"{report['logits']['min']:.4g} / {report['logits']['max']:.4g}"},
        {"what": "largest |q.k| (before the factor)", "value": f"{report['max_abs_product']:.4g}"},
        {"what": f"q k^T entries not finite in {report['dtype']}",
         "value": f"{report['matmul_overflow']['count']} ({report['matmul_overflow']['share']:.3g})"},
        {"what": "... with the factor folded into q first", "value": str(report["matmul_overflow_scaled_first"]["count"])},
        {"what": "rows where exp without max subtraction overflows",
         "value": f"{report['naive_softmax_overflow_rows']['count']} of {report['rows']}"},
        {"what": "probabilities that underflow to exactly 0",
         "value": f"{report['probs_underflow_to_zero']['share']:.3g}"},
        {"what": "probabilities that round to exactly 1", "value": str(report["probs_round_to_one"]["count"])},
        {"what": "probability error max / mean",
         "value": _pair(report["prob_error"])},
        {"what": "output error max / mean (v ~ N(0, 1))", "value": _pair(report["output_error"])},
    ]
    print_rows("precision check", rows)
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
    calls = list(seen)
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
        scale: str = typer.Option("sqrt", help="With --from-file: the scale rule (sqrt, none, inv_d, const:C, ...)."),
        dtype: str = typer.Option("float16", help="With --from-file or --model: float16, bfloat16 or float32."),
    ) -> None:
        """Run the numerics lab (FP16/BF16 overflow, error, clamp; C11, C12), or check the precision of q, k from a file."""
        from .lab_command import run_lab_command

        if model is not None:
            if from_file is not None:
                raise UserError("--model and --from-file are two sources of q and k; give one")
            options.refuse_given(ctx, "the precision check of a model (--model) has no preset, figures or --scale (each "
                                      "call is checked at its own factor)", refused=("preset", "figures", "scale"))
            from ..diagnosis.health import DEFAULT_TEXT
            from ..numerics import parse_dtype
            from ..runtime import check_seed

            low = parse_dtype(dtype)
            check_seed(seed)
            reports = model_precision(None if model == "default" else model, layer, text or DEFAULT_TEXT, low, seed)
            if as_json:
                sys.stdout.write(json.dumps(reports, indent=1) + "\n")
            else:
                print_model_precision(reports)
            return
        if layer is not None or text is not None:
            raise UserError("--layer and --text apply only with --model")
        if from_file is None:
            options.refuse_given(ctx, "--scale and --dtype apply only with --from-file or --model (the lab runs its own "
                                      "rules and dtypes)", refused=("scale", "dtype"))
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
        q, k = load_qk(from_file)
        report = precision_check(q, k, scale=scale, dtype=low, seed=seed)
        if as_json:
            sys.stdout.write(json.dumps(report, indent=1) + "\n")
        else:
            print_precision_check(report)
