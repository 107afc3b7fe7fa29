"""``attnscale audit``: the factor every attention family (or a model folder) really applies.

    attnscale audit                          every decoder and encoder family of the installed transformers
    attnscale audit llama,gemma2,t5          those families
    attnscale audit path/to/model            a local model folder (weights optional)
    attnscale audit gemma2 --callable my_kernel:attn   a port, checked against the family's numbers
    attnscale audit --module mymodel:build --expect sqrt   your module, each attention module against 1/sqrt(d_k)

Exit codes: 0 every attention module measured and ok; 1 a mismatch or a backend disagreement; 3 incomplete (what
was measured is ok, something was not; 1 with --strict); 2 bad input.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..backends import DEFAULT_BACKENDS
from ..errors import UserError
from ..terminal import say
from . import options

MAX_HEAD_DIM = 65536
MAX_WORKERS = 256


def parse_backends(text: str) -> tuple[str, ...]:
    from ..probing.intercept import registered_backends

    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    accepted = registered_backends()
    for name in names:
        if name not in accepted:
            raise UserError(f"unknown attention backend {name!r}; accepted: {', '.join(accepted)}")
    if not names:
        raise UserError("--backends is empty; accepted: a comma-separated list of " + ", ".join(accepted))
    return names


HEADERS = {"flex_attention": "flex", "position dependence": "moves with", "seconds": "s"}


def print_table(report: dict) -> None:
    from rich.table import Table

    from ..audit.record import AuditVerdict, Status
    from ..terminal import console
    from ..terminal import print_table as show

    if "rows" not in report:  # --callable alone
        print_callable(report, console)
        return
    table = Table(title=f"scale audit: transformers {report['transformers']}, backends {', '.join(report['backends'])}")
    columns = ["family", "declared", *report["backends"], "non-linearity", "other mechanisms", "position dependence", "verdict", "seconds"]
    for column in columns:
        table.add_column(HEADERS.get(column, column), no_wrap=column in ("family", "verdict"),
                         justify="right" if column in ("declared", "seconds", *report["backends"]) else "left")
    for row in report["rows"]:
        table.add_row(*(str(row[c]) for c in columns))
    show(table, console)
    shown = {AuditVerdict.MISMATCH: 3, AuditVerdict.BACKEND_DISAGREEMENT: 3, AuditVerdict.NOT_MEASURED: 1,
             AuditVerdict.INCOMPLETE: 1}  # findings per family
    findings = [(r["family"], f) for r in report["families"] for f in r["findings"][:shown.get(r["verdict"], 0)]]
    for family, finding in findings:
        console.print(f"{family}: {finding}", markup=False, highlight=False, soft_wrap=True)
    skipped = [r for r in report["families"] if r["status"] == Status.SKIPPED]
    if skipped:
        console.print(f"skipped {len(skipped)}: " + "; ".join(f"{r['family']} ({r['reason']})" for r in skipped[:12]) +
                      (" ..." if len(skipped) > 12 else ""), markup=False, highlight=False, soft_wrap=True)
    from ..audit.record import unread_here

    partly_read = set(report["coverage"]["partly_read"])
    partly = [r for r in report["families"] if r["family"] in partly_read]
    if partly:
        unread = lambda r: ", ".join(sorted({u["class"] for u in unread_here(r["unread_attention"])}))  # noqa: E731
        console.print(f"measured, leaving attention unread {len(partly)}: " +
                      "; ".join(f"{r['family']} ({unread(r)})" for r in partly), markup=False, highlight=False, soft_wrap=True)
    counts = report["counts"]
    console.print(f"{report['coverage']['families']} families in {report['seconds']:.1f} s: " +
                  ", ".join(f"{n} {v}" for v, n in counts.items() if n), markup=False, highlight=False, soft_wrap=True)
    cover = report["coverage"]
    console.print(f"coverage: of {cover['attention_bearing']} families with attention, {cover['measured']} measured "
                  f"({cover['measured_partly']} of them leaving some attention module unread, named in their other "
                  f"mechanisms), "
                  f"{cover['covered']} covered by their towers, {cover['no_softmax']} with no softmax over q.k "
                  f"(nothing to scale, each mechanism named), {cover['unmeasured']} "
                  f"({cover['unmeasured_share']:.0%}) unmeasured, each with its reason; {cover['tower_rows']} rows for "
                  f"towers without a base model of their own, {cover['tower_rows_measured']} of them measured",
                  markup=False, highlight=False, soft_wrap=True)
    print_callable(report, console)
    print_verdict(report, console)


def print_verdict(report: dict, console) -> None:
    """The whole audit's verdict, the line its exit code stands for."""
    failing, incomplete = report["failing"], report["incomplete"]
    named = lambda names: ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")  # noqa: E731
    console.print(f"verdict: {report['verdict']}" +
                  (f"; {len(failing)} with a mismatch or a backend disagreement: {named(failing)}" if failing else "") +
                  (f"; {len(incomplete)} not wholly measured: {named(incomplete)}" if incomplete else ""),
                  markup=False, highlight=False, soft_wrap=True)


def print_callable(report: dict, console) -> None:
    if report.get("callable"):
        port = report["callable"]
        factor = port["function"]["factor"]
        against = f", expected {port['expected']:.6g} ({port['expect']})" if port.get("expect") else ""
        console.print(f"callable {port['target']}: factor {factor if factor is None else f'{factor:.6g}'}{against}, "
                      f"{port['function']['nonlinearity']}" +
                      (f" (cap {port['function']['cap']:.4g})" if port["function"].get("cap") else "") +
                      f", factor by key count {port['key_counts']}: {port['verdict']}", markup=False, highlight=False,
                      soft_wrap=True)
        for finding in port["findings"]:
            say(f"  {finding}", console)


def with_callable(report: dict) -> dict:
    """The audit's verdict and exit code with the --callable's verdict folded in (a mismatch of either fails it)."""
    from ..scale_check import EXIT_CODES, Verdict, model_verdict

    audited = report.get("verdict")
    verdicts = [report["callable"]["verdict"]] + ([] if "rows" not in report else
                                                 [audited if audited in (Verdict.OK, Verdict.MISMATCH) else Verdict.NOT_MEASURED])
    overall = model_verdict(verdicts)
    return {**report, "verdict": str(overall), "exit_code": EXIT_CODES[overall]}


def emit(report: dict, out: Path | None, as_json: bool, show) -> None:
    """audit.json into ``out`` (if given), then the report as JSON on stdout or as ``show()`` prints it."""
    from ..terminal import console, err_console

    if out is not None:
        written = write_out(report, out)
        (err_console if as_json else console).print(f"wrote {', '.join(written)}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=1, default=str) + "\n")
    else:
        show()


def write_out(report: dict, out: Path) -> list[str]:
    from ..paths import write_text_atomic

    out.mkdir(parents=True, exist_ok=True)
    return [str(write_text_atomic(out / "audit.json", json.dumps(report, indent=1, default=str)))]


def register(app: typer.Typer) -> None:
    @app.command("audit")
    def audit(
        target: str = typer.Argument(None, help="Comma-separated transformers families (model_type), a local "
                                                "model folder, or the id of a repo the Hugging Face cache holds "
                                                "(org/name, read offline); default: every family."),
        backends: str = typer.Option(",".join(DEFAULT_BACKENDS),
                                     help="Comma-separated attention implementations to measure and compare."),
        callable_spec: str = typer.Option(None, "--callable", help="module:function, an attention function "
                                          "f(q, k, v, mask=None) to measure (against TARGET's first layer if given)."),
        head_dim: int = typer.Option(64, callback=options.within(1, MAX_HEAD_DIM), help="Head dimension for --callable "
                                                                      "alone (with TARGET: its first layer's)."),
        module_spec: str = typer.Option(None, "--module", help="pkg.mod:factory, a function (or class) that returns "
                                        "an nn.Module: read the factor of every attention call it makes."),
        input_shape: str = typer.Option("2,16,64", "--input-shape", help="Shape of the random input --module is run "
                                        "on (comma-separated; the last axis is the model width)."),
        as_json: bool = typer.Option(False, "--json", help="Print the whole audit as JSON."),
        out: Annotated[Optional[Path], options.path_option("Write audit.json into this folder.")] = None,
        seed: options.Seed = 0,
        list_families: bool = typer.Option(False, "--list", help="List every family the audit knows (what it audits "
                                                                   "with no argument) and exit."),
        workers: int = typer.Option(0, callback=options.within(0, MAX_WORKERS), help="Processes to spread the families over "
                                                                   "(0: one per core)."),
        expect: str = typer.Option(None, "--expect", help="The factor --module and --callable must apply: a scale rule "
                                   "(sqrt, inv_d, none, const:C, power:A, qknorm:G) or a number; default sqrt, "
                                   "1/sqrt(d_k) (with TARGET, --callable is held to the family's factor)."),
        strict: bool = typer.Option(False, "--strict", help="Exit 1, not 3, when some attention module could not be "
                                                              "measured."),
    ) -> None:
        """Measure the factor each attention layer applies to q.k, under each backend, against its config.

        Exit code 0: every attention module measured and as expected; 1: a mismatch or a backend disagreement;
        3: incomplete (some attention module not measured; 1 with --strict); 2: bad input."""
        from ..audit import measure as audit_api
        from ..audit import pipeline
        from ..terminal import console, progress_bar

        from ..paths import FolderLock, check_folder, check_outputs

        from ..scale_check import ModelVerdict, exit_code, expectation

        chosen = parse_backends(backends)
        if expect is not None:
            if module_spec is None and callable_spec is None:
                raise UserError(f"--expect {expect!r} is for --module or --callable; a family or a folder is held to "
                                "what its config declares")
            expectation(expect)
        if out is not None:
            check_folder(out, "--out")
            check_outputs(out, files=("audit.json",))

        def holding_out():
            """A second audit writing the same --out is refused while this one runs (its audit.json would replace ours)."""
            return FolderLock(out, "--out") if out is not None else contextlib.nullcontext()
        if module_spec is not None:
            if target is not None or callable_spec is not None:
                raise UserError("--module reads one module of yours; it takes no TARGET and no --callable")
            from ..probing import module_cli

            with holding_out():
                report = {"module": module_cli.probe_spec(module_spec, input_shape, seed, expect or "sqrt")}
                emit(report, out, as_json, lambda: module_cli.print_probe(report["module"], console))
            raise typer.Exit(exit_code(ModelVerdict(report["module"]["verdict"]), strict))
        port = audit_api.load_callable(callable_spec) if callable_spec else None
        if port is not None:
            audit_api.check_callable(port, callable_spec, head_dim)
        if list_families:
            for family in audit_api.families.all_families():
                console.print(f"{family.model_type}  ({', '.join(family.kinds)})", markup=False, highlight=False, soft_wrap=True)
            return
        start = time.perf_counter()
        if port is not None and target is None:  # the function alone, at --head-dim
            with holding_out():
                report = with_callable({"callable": audit_api.audit_callable(port, head_dim, callable_spec,
                                                                             expect=expect).to_dict(),
                                        "seconds": time.perf_counter() - start})
                emit(report, out, as_json, lambda: print_table(report))
            raise typer.Exit(exit_code(ModelVerdict(report["verdict"]), strict))
        plan = pipeline.plan(target)
        workers = pipeline.workers_within_memory(pipeline.parallel_workers(plan, workers or os.cpu_count() or 1),
                                                 chosen=workers > 0)
        with holding_out():
            with progress_bar() as bar:
                task = bar.add_task("audit", total=max(len(plan), 1), note="")

                def progress(done: int, name: str, seconds: float) -> None:
                    bar.update(task, completed=done, note=f"{name} {seconds:.1f} s")

                results = pipeline.run_plan(plan, chosen, seed, progress, workers)
            report = pipeline.report(results, chosen, time.perf_counter() - start)
            if port is not None:
                reference = next((r for r in results if r.layers), None)
                d_k = reference.layers[0].d_k if reference else head_dim
                report["callable"] = audit_api.audit_callable(port, d_k, callable_spec, reference, expect).to_dict()
                report = with_callable(report)
            emit(report, out, as_json, lambda: print_table(report))
        raise typer.Exit(exit_code(ModelVerdict(report["verdict"]), strict))
