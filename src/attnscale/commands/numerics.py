"""``attnscale numerics``: the numerics lab, or (``--from-file``) an audit of your own q and k.

The file is a safetensors file with two tensors named ``q`` and ``k``, of shape
(..., T, d_k): e.g. (batch, heads, T, d_k) or (T, d_k); any float dtype; the leading
dimensions of q and k must broadcast.  Save them with
``safetensors.torch.save_file({"q": q, "k": k}, "q_k.safetensors")``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

EXPECTED = "tensors named 'q' and 'k' of shape (..., T, d_k)"


def load_qk(path: Path):
    """q and k from a safetensors file; FileNotFoundError / ValueError name what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path} (expected a safetensors file with {EXPECTED})")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"cannot read {path} as safetensors ({str(error).splitlines()[0]}); expected {EXPECTED}") from None
    missing = [name for name in ("q", "k") if name not in tensors]
    if missing:
        raise ValueError(f"{path} has no tensor named {', '.join(map(repr, missing))}; found "
                         f"{', '.join(map(repr, sorted(tensors))) or 'none'}; expected {EXPECTED}")
    return tensors["q"], tensors["k"]


def print_audit(report: dict) -> None:
    from ..cli import console, print_rows

    console.print(f"[bold]audit[/bold]: q {report['shape_q']}, k {report['shape_k']}, d_k {report['d_k']}, "
                  f"scale {report['scale']} (factor {report['factor']:.4g}), in {report['dtype']}")
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
    print_rows("numerics audit", rows)
    for line in report["risks"]:
        console.print(f"- {line}", markup=False, highlight=False)


def _pair(error: dict) -> str:
    return "n/a" if error["max"] is None else f"{error['max']:.3g} / {error['mean']:.3g}"


def register(app: typer.Typer) -> None:
    @app.command("numerics")
    def numerics(
        preset: str = typer.Option("quick", help="quick or full."),
        seed: int = typer.Option(0, help="Random seed; same seed, same numbers."),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        as_json: bool = typer.Option(False, "--json", help="Print the full result (or the audit) as JSON."),
        figures: Path = typer.Option(None, help="Also draw the lab's figures into this folder."),
        from_file: Path = typer.Option(None, "--from-file",
                                       help="Audit your own activations instead: a safetensors file with tensors "
                                            "'q' and 'k' of shape (..., T, d_k)."),
        scale: str = typer.Option("sqrt", help="With --from-file: the scale rule (sqrt, none, inv_d, const:C, ...)."),
        dtype: str = typer.Option("float16", help="With --from-file: float16, bfloat16 or float32."),
    ) -> None:
        """Run the numerics lab (FP16/BF16 overflow, error, clamp; C11, C12), or audit q, k from a file."""
        from ..cli import run_lab_command

        if from_file is None:
            run_lab_command("numerics", preset, seed, device, as_json, figures)
            return
        from ..numerics import audit, parse_dtype

        low = parse_dtype(dtype)
        q, k = load_qk(from_file)
        report = audit(q, k, scale=scale, dtype=low, seed=seed)
        if as_json:
            sys.stdout.write(json.dumps(report, indent=1) + "\n")
        else:
            print_audit(report)
