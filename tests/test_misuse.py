"""Misuse, as a careless user or an attacker would try it, through the real command line.

Every bad invocation in :data:`CASES` runs as ``python -m attnscale ARGS`` in a fresh folder
of its own (its working directory) that holds only the files the case needs.  Each must
print exactly one line on stderr, ``attnscale: error: ...`` naming the bad value, exit with
code 2, print no traceback, and leave the folder as it found it: no new file, no changed
file.  The cases run in one batch (tests/cli_batch.py: one Python that imports attnscale
once and forks a child per case, each child running the package's ``__main__`` as
``python -m`` does); :func:`test_the_batch_driver_answers_as_python_minus_m_does` checks
that the driver gives the same answer as separate ``python -m attnscale`` processes.

Cases marked ``unprivileged`` need read-only files: they run with the capabilities that let
root ignore file permissions dropped, so they test the same thing as root or as a user.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

DRIVER = Path(__file__).with_name("cli_batch.py")
HUGE_SEED = str(2**63)
CANNOT_DROP = 77  # the driver's exit code when it cannot make file permissions apply


@dataclass
class Case:
    id: str
    args: list[str]
    needle: str  # must appear in the error line: the bad value, or what is wrong
    setup: object = None  # setup(folder) creates the files the case needs
    env: dict = field(default_factory=dict)
    unprivileged: bool = False


# ----------------------------------------------------------------------------- fixture files

def default_train_key() -> str:
    """The run key of ``attnscale train`` with its default options (its checkpoint is <key>.safetensors)."""
    from attnscale.runs import run_key
    from attnscale.train import RunSpec

    return run_key(RunSpec(task="recall", rule="sqrt", init="unit", d_head=16, n_layers=2, lr=3e-3, optimiser="adamw",
                           steps=300, seed=0, d_model=32, n_heads=1, batch_size=64, log_every=10, device="cpu"))


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return path


def garbage(path: Path) -> None:
    write(path, random.Random(0).randbytes(4096))


def table_file(path: Path, schema: str, rows=(), readonly: bool = False, wal: bool = False) -> Path:
    """An SQLite file with one table and rows; in WAL mode as attnscale's stores are, or with
    a rollback journal (a file that SQLite leaves unchanged when it only reads it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute(schema)
    table = re.search(r"TABLE (?:IF NOT EXISTS )?(\w+)", schema).group(1)
    for row in rows:
        db.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    db.commit()
    db.close()
    if readonly:
        path.chmod(0o444)
    return path


def results_schema() -> str:
    from attnscale.store import SCHEMA

    return SCHEMA.strip()


def runs_schema() -> str:
    from attnscale.runs import SCHEMA

    return SCHEMA.strip()


def results_store(path: Path, result='{"x": 1}', readonly=False, key="k") -> Path:
    return table_file(path, results_schema(), [(key, "variance", "{}", result, 1.0, 0.0, None)], readonly)


def runs_store(path: Path, result='{"status": "finished"}', readonly=False) -> Path:
    """A run store with one row, its digest right (as an older attnscale with another result format wrote it)."""
    from attnscale.store import row_digest

    values = ("k", "{}", "finished", result, 1.0, 0.0)
    return table_file(path, runs_schema(), [(*values, row_digest(*values))], readonly)


def truncated(path: Path) -> None:
    results_store(path, result=json.dumps({"x": list(range(20000))}))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def foreign_variance_result(folder: Path) -> None:
    """A results store whose row for the variance lab's quick config holds no variance result."""
    from attnscale import lab
    from attnscale.store import config_key

    config = lab.config_for("variance", "quick", seed=0, device="cpu")
    key, text = config_key("variance", lab.load("variance").VERSION, config)
    table_file(folder / "r" / "results.sqlite", results_schema(), [(key, "variance", text, '{"not": "a result"}', 1.0, 0.0,
                                                                    None)],
               wal=True)


def edited_store(path: Path, table: str) -> None:
    """A store written by attnscale, then one number of its row set to NaN by hand."""
    from attnscale.runs import RunStore
    from attnscale.store import Store

    if table == "results":
        Store(path).put("k", "variance", "{}", {"x": [1.5, 2.5]}, 1.0)
    else:
        RunStore(path).put("k", {"lr": 0.001}, {"status": "finished", "final_val_loss": 1.5}, 1.0)
    import gc

    gc.collect()  # the store's own connections are closed
    db = sqlite3.connect(path)
    db.execute(f"UPDATE {table} SET result = replace(result, '1.5', 'NaN')")
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")  # the file alone holds the store: reading it changes nothing
    db.close()


def read_only_folder(path: Path) -> None:
    path.mkdir(parents=True)
    path.chmod(0o555)


def qk_file(path: Path, q: torch.Tensor, k: torch.Tensor) -> None:
    save_file({"q": q.contiguous(), "k": k.contiguous()}, str(path))


def nan_q(path: Path) -> None:
    q = torch.ones(4, 8)
    q[1, 2] = float("nan")
    qk_file(path, q, torch.ones(4, 8))


def cut_report(claims) -> str:
    return json.dumps({"preset": "quick", "seed": 0, "claims": claims})


def full_report_with_text_numbers() -> str:
    from attnscale.claims import CLAIMS

    return cut_report([{"id": c.id, "verdict": "supported", "numbers": {"max_rel_error": "abc", "max_d_k": 4096}}
                       for c in CLAIMS])


def full_report_with(text: str, value: str) -> str:
    """A complete report whose first claim's number ``x`` is written as ``value`` (JSON text), and ``text`` replaced
    into it (a field of another type)."""
    from attnscale.claims import CLAIMS

    body = cut_report([{"id": c.id, "verdict": "supported", "numbers": {"x": 1.5}, "evidence": "e"} for c in CLAIMS])
    return body.replace('"x": 1.5', f'"x": {value}', 1).replace('"evidence": "e"', text, 1)


def vision_folder(path: Path) -> None:
    """A tiny ViT saved with a text tokenizer beside it: diagnose must refuse it, not crash."""
    from transformers import ViTConfig, ViTModel

    from attnscale.probing.loading import default_model_path

    ViTModel(ViTConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                       image_size=16, patch_size=8)).save_pretrained(path)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (default_model_path() / name).exists():
            write(path / name, (default_model_path() / name).read_bytes())


def model_folder(path: Path, config: str | None) -> None:
    path.mkdir(parents=True)
    if config is not None:
        write(path / "config.json", config)


# ----------------------------------------------------------------------------- malformed model folders

TINY_BERT = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
             "intermediate_size": 16, "vocab_size": 50, "max_position_embeddings": 32}


def tiny_folder(path: Path, weights: bytes | None = None, **config) -> Path:
    """A model folder with a tiny BERT config (fields overridden by ``config``) and, if given,
    ``model.safetensors`` holding exactly ``weights``."""
    model_folder(path, json.dumps({**TINY_BERT, **config}))
    if weights is not None:
        write(path / "model.safetensors", weights)
    return path


def safetensors_bytes(header: dict, data: bytes = b"", claimed: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return (len(raw) if claimed is None else claimed).to_bytes(8, "little") + raw + data


def lying_shape(path: Path) -> None:
    tiny_folder(path, safetensors_bytes({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 16]}}, bytes(16)))


def link_out(path: Path) -> None:
    tiny_folder(path)
    (path / "model.safetensors").symlink_to("/etc/passwd")


def pickle_index(path: Path) -> None:
    tiny_folder(path, safetensors_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)))
    write(path / "model.safetensors.index.json", json.dumps({"weight_map": {"w": "evil.bin"}}))
    write(path / "evil.bin", b"\x80\x04K\x01.")


def no_tokenizer(path: Path) -> None:
    from transformers import AutoModel, BertConfig

    model = AutoModel.from_config(BertConfig(**{k: v for k, v in TINY_BERT.items() if k != "model_type"}))
    model.save_pretrained(path)


def folder_cases(command: str, extra=()) -> list:
    """The same malformed folders, for diagnose and for audit."""
    c = command
    return [
        Case(f"{c}-weights-empty", [c, "m", *extra], "not a valid safetensors", lambda d: tiny_folder(d / "m", b"")),
        Case(f"{c}-weights-garbage", [c, "m", *extra], "not a valid safetensors",
             lambda d: tiny_folder(d / "m", random.Random(1).randbytes(3000))),
        Case(f"{c}-weights-truncated", [c, "m", *extra], "not a valid safetensors",
             lambda d: tiny_folder(d / "m", safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                                                              bytes(7)))),
        Case(f"{c}-weights-header-huge", [c, "m", *extra], "1,099,511,627,776",
             lambda d: tiny_folder(d / "m", safetensors_bytes({}, claimed=2**40))),
        Case(f"{c}-weights-lying-shape", [c, "m", *extra], "does not fit", lambda d: lying_shape(d / "m")),
        Case(f"{c}-weights-link-out", [c, "m", *extra], "outside the model folder", lambda d: link_out(d / "m")),
        Case(f"{c}-config-hidden-text", [c, "m", *extra], "hidden_size is '8'", lambda d: tiny_folder(d / "m", hidden_size="8")),
        Case(f"{c}-config-heads-zero", [c, "m", *extra], "num_attention_heads is 0",
             lambda d: tiny_folder(d / "m", num_attention_heads=0)),
        Case(f"{c}-config-heads-negative", [c, "m", *extra], "num_attention_heads is -2",
             lambda d: tiny_folder(d / "m", num_attention_heads=-2)),
        Case(f"{c}-config-layers-float", [c, "m", *extra], "num_hidden_layers is 1.5",
             lambda d: tiny_folder(d / "m", num_hidden_layers=1.5)),
        Case(f"{c}-config-nested", [c, "m", *extra], "not readable JSON",
             lambda d: model_folder(d / "m", "[" * 100_000 + "]" * 100_000)),
        Case(f"{c}-pickle-index", [c, "m", *extra], "'evil.bin'", lambda d: pickle_index(d / "m")),
    ]


def port_case(case_id: str, needle: str, source: str) -> Case:
    """``audit --callable port:attn`` with ``source`` as port.py."""
    return Case(case_id, ["audit", "--callable", "port:attn"], needle, lambda d: write(d / "port.py", source))


# ----------------------------------------------------------------------------- the table

LABS = ("variance", "saturation", "numerics", "training", "doctor")
SMALL = ["--no-probe", "--counterfactual", ""]  # diagnose without its slow parts

CASES = [
    Case("unknown-option", ["--bogus"], "--bogus"),
    Case("unknown-command", ["no-such-command"], "no-such-command"),
    # report
    Case("report-preset", ["report", "--preset", "huge"], "'huge'"),
    Case("report-device", ["report", "--device", "tpu"], "'tpu'"),
    Case("report-cuda", ["report", "--device", "cuda"], "no CUDA GPU"),
    Case("report-lab", ["report", "--labs", "astrology"], "'astrology'"),
    Case("report-seed-text", ["report", "--seed", "abc"], "--seed"),
    Case("report-seed-huge", ["report", "--seed", HUGE_SEED], HUGE_SEED),
    Case("report-seed-negative", ["report", "--seed", "-1"], "-1"),
    Case("report-out-file", ["report", "--out", "f", "--labs", "variance"], "'f' is a file", lambda d: write(d / "f", "x")),
    Case("report-out-under-file", ["report", "--out", "f/sub", "--labs", "variance"], "is a file",
         lambda d: write(d / "f", "x")),
    Case("report-out-read-only", ["report", "--out", "ro/r", "--labs", "variance"], "read-only",
         lambda d: read_only_folder(d / "ro"), unprivileged=True),
    Case("report-store-garbage", ["report", "--out", "r", "--labs", "variance"], "not a database",
         lambda d: garbage(d / "r" / "results.sqlite")),
    Case("report-store-truncated", ["report", "--out", "r", "--labs", "variance"], "malformed",
         lambda d: truncated(d / "r" / "results.sqlite")),
    Case("report-store-folder", ["report", "--out", "r", "--labs", "variance"], "is a folder",
         lambda d: (d / "r" / "results.sqlite").mkdir(parents=True)),
    Case("report-store-read-only", ["report", "--out", "r", "--labs", "variance"], "read-only",
         lambda d: results_store(d / "r" / "results.sqlite", readonly=True), unprivileged=True),
    Case("report-store-row-not-json", ["report", "--out", "r", "--labs", "variance"], "not a result",
         lambda d: results_store(d / "r" / "results.sqlite", result="[1, 2")),
    Case("report-store-row-not-object", ["report", "--out", "r", "--labs", "variance"], "not a result",
         lambda d: results_store(d / "r" / "results.sqlite", result="[1, 2]")),
    Case("report-store-row-foreign", ["report", "--out", "r", "--labs", "variance"], "carries no digest",
         foreign_variance_result),
    Case("report-store-other-table", ["report", "--out", "r", "--labs", "variance"], "columns",
         lambda d: table_file(d / "r" / "results.sqlite", "CREATE TABLE results (key TEXT, x TEXT)")),
    # answer
    Case("answer-lang", ["answer", "--lang", "fr"], "'fr'"),
    Case("answer-missing", ["answer", "--report", "nowhere"], "nowhere"),
    Case("answer-brackets", ["answer", "--report", "a[red]b[/x]"], "a[red]b[/x]"),
    Case("answer-garbage", ["answer", "--report", "r.json"], "not a report.json", lambda d: write(d / "r.json", "{garb")),
    Case("answer-binary", ["answer", "--report", "r.json"], "not a report.json",
         lambda d: write(d / "r.json", b"\xff\xfe\x00")),
    Case("answer-list", ["answer", "--report", "r.json"], "no 'claims'", lambda d: write(d / "r.json", "[1]")),
    Case("answer-cut-claim", ["answer", "--report", "r.json"], "'C01'",
         lambda d: write(d / "r.json", cut_report([{"id": "C01"}]))),
    Case("answer-no-claims", ["answer", "--report", "r.json"], "C01, C02",
         lambda d: write(d / "r.json", cut_report([]))),
    Case("answer-text-numbers", ["answer", "--report", "r.json"], "numbers",
         lambda d: write(d / "r.json", full_report_with_text_numbers())),
    Case("answer-report-folder", ["answer", "--report", "r"], "is a folder",
         lambda d: (d / "r" / "report.json").mkdir(parents=True)),
    # values a file can carry (hardening, third pass): numbers JSON does not define, fields of the wrong type
    Case("answer-nan", ["answer", "--report", "r.json"], "holds NaN",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "NaN"))),
    Case("answer-infinity", ["answer", "--report", "r.json"], "holds -Infinity",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "-Infinity"))),
    Case("answer-1e309", ["answer", "--report", "r.json"], "1e309, beyond float range",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "1e309"))),
    Case("answer-huge-int", ["answer", "--report", "r.json"], "integer of 5000 digits",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "9" * 5000))),
    Case("answer-evidence-null", ["answer", "--report", "r.json"], "'evidence' is a NoneType",
         lambda d: write(d / "r.json", full_report_with('"evidence": null', "1"))),
    Case("answer-number-list", ["answer", "--report", "r.json"], "number 'x' is a list",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "[1, 2]"))),
    Case("explain-nan", ["explain", "C02", "--report", "r.json"], "holds NaN",
         lambda d: write(d / "r.json", full_report_with('"evidence": "e"', "NaN"))),
    Case("diagnose-config-nan", ["diagnose", "m"], "holds NaN",
         lambda d: write(tiny_folder(d / "m") / "config.json",
                         json.dumps({**TINY_BERT, "layer_norm_eps": float("nan")}))),
    Case("audit-config-infinity", ["audit", "./m"], "holds Infinity",
         lambda d: write(tiny_folder(d / "m") / "config.json",
                         json.dumps({**TINY_BERT, "layer_norm_eps": float("inf")}))),
    Case("diagnose-text-not-utf8", ["diagnose", "--text", "abc\udcff"], "is not valid UTF-8"),
    Case("numerics-text-not-utf8", ["numerics", "--model", "default", "--text", "abc\udcff"], "is not valid UTF-8"),
    Case("history-cache-lock-is-a-folder", ["history"], "hc/.attnscale-cache.lock' is a folder, not a file",
         lambda d: (d / "hc" / ".attnscale-cache.lock").mkdir(parents=True), env={"ATTNSCALE_HISTORY_CACHE": "hc"}),
    # "--help" as an option's value asks for no help: the command runs, so the environment is checked first
    Case("env-design-tflop-not-a-number", ["audit", "gpt2"], "ATTNSCALE_DESIGN_TFLOP='lots' is not a number",
         env={"ATTNSCALE_DESIGN_TFLOP": "lots"}),
    Case("env-design-tflop-negative", ["audit", "gpt2"], "ATTNSCALE_DESIGN_TFLOP='-1' is not a positive number",
         env={"ATTNSCALE_DESIGN_TFLOP": "-1"}),
    Case("env-checked-with-help-as-a-value", ["diagnose", "--text", "--help"], "ATTNSCALE_MEMORY_LIMIT='0' leaves no "
         "memory", env={"ATTNSCALE_MEMORY_LIMIT": "0"}),
    Case("env-checked-with-help-as-a-value-after-equals", ["train", "--checkpoint=--help"], "ATTNSCALE_MEMORY_LIMIT='0'",
         env={"ATTNSCALE_MEMORY_LIMIT": "0"}),
    Case("diagnose-vision-model", ["diagnose", "m"], "takes pixel_values", lambda d: vision_folder(d / "m")),
    # explain
    Case("explain-unknown-claim", ["explain", "C99"], "'C99'"),
    Case("explain-no-claim", ["explain"], "Missing argument 'claim'"),
    Case("explain-report-missing", ["explain", "C02", "--report", "nowhere"], "nowhere"),
    Case("explain-report-garbage", ["explain", "C02", "--report", "r.json"], "not a report.json",
         lambda d: write(d / "r.json", "{garb")),
    # explore
    Case("explore-out-folder", ["explore", "--out", "d"], "is a folder", lambda d: (d / "d").mkdir()),
    Case("explore-out-html-folder", ["explore", "--out", "d.html"], "is a folder", lambda d: (d / "d.html").mkdir()),
    Case("explore-out-suffix", ["explore", "--out", "page.txt"], "page.txt"),
    Case("explore-out-under-file", ["explore", "--out", "f/e.html"], "is a file", lambda d: write(d / "f", "x")),
    Case("explore-out-read-only", ["explore", "--out", "ro/e.html"], "read-only", lambda d: read_only_folder(d / "ro"),
         unprivileged=True),
    # the labs
    *[Case(f"{name}-cuda", [name, "--device", "cuda"], "no CUDA GPU") for name in LABS],
    *[Case(f"{name}-seed-huge", [name, "--seed", HUGE_SEED], HUGE_SEED) for name in LABS],
    Case("training-seed-negative", ["training", "--seed", "-1"], "-1"),
    Case("variance-preset", ["variance", "--preset", "huge"], "'huge'"),
    Case("saturation-device", ["saturation", "--device", "tpu"], "'tpu'"),
    Case("variance-figures-file", ["variance", "--figures", "f"], "'f' is a file", lambda d: write(d / "f", "x")),
    Case("doctor-figures-read-only", ["doctor", "--figures", "ro/figs"], "read-only", lambda d: read_only_folder(d / "ro"),
         unprivileged=True),
    # numerics --from-file
    Case("precision-check-missing", ["numerics", "--from-file", "q[k].safetensors"], "q[k].safetensors"),
    Case("precision-check-garbage", ["numerics", "--from-file", "qk"], "safetensors", lambda d: garbage(d / "qk")),
    Case("precision-check-folder", ["numerics", "--from-file", "qk"], "'qk' is a folder", lambda d: (d / "qk").mkdir()),
    Case("precision-check-no-q", ["numerics", "--from-file", "qk"], "'q'",
         lambda d: save_file({"k": torch.ones(2, 2)}, str(d / "qk"))),
    Case("precision-check-int", ["numerics", "--from-file", "qk"], "I32",
         lambda d: qk_file(d / "qk", torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32))),
    Case("precision-check-nan", ["numerics", "--from-file", "qk"], "NaN", lambda d: nan_q(d / "qk")),
    Case("precision-check-d-k", ["numerics", "--from-file", "qk"], "d_k", lambda d: qk_file(d / "qk", torch.ones(2, 4), torch.ones(2, 8))),
    Case("precision-check-1d", ["numerics", "--from-file", "qk"], "(8,)", lambda d: qk_file(d / "qk", torch.ones(8), torch.ones(8))),
    Case("precision-check-no-tokens", ["numerics", "--from-file", "qk"], "(0, 8)",
         lambda d: qk_file(d / "qk", torch.ones(0, 8), torch.ones(4, 8))),
    Case("precision-check-batch", ["numerics", "--from-file", "qk"], "broadcast",
         lambda d: qk_file(d / "qk", torch.ones(2, 4, 8), torch.ones(3, 4, 8))),
    Case("precision-check-scale", ["numerics", "--from-file", "qk", "--scale", "bogus"], "'bogus'"),
    Case("precision-check-power-overflow", ["numerics", "--from-file", "qk", "--scale", "power:-400"], "power:-400",
         lambda d: qk_file(d / "qk", torch.ones(2, 8), torch.ones(2, 8))),
    Case("precision-check-dtype", ["numerics", "--from-file", "qk", "--dtype", "int8"], "'int8'"),
    Case("precision-check-seed", ["numerics", "--from-file", "qk", "--seed", HUGE_SEED], HUGE_SEED),
    Case("precision-check-memory-load", ["numerics", "--from-file", "qk"], "would need",
         lambda d: qk_file(d / "qk", torch.ones(20000, 64), torch.ones(20000, 64)), env={"ATTNSCALE_MEMORY_LIMIT": "4M"}),
    Case("precision-check-memory-rows", ["numerics", "--from-file", "qk"], "200000 keys",
         lambda d: qk_file(d / "qk", torch.ones(1, 8), torch.ones(200_000, 8)), env={"ATTNSCALE_MEMORY_LIMIT": "50M"}),
    # train
    Case("train-rule", ["train", "--rule", "bogus"], "'bogus'"),
    Case("train-power-overflow", ["train", "--rule", "power:-400"], "power:-400"),
    Case("train-optimiser", ["train", "--optimiser", "lion"], "'lion'"),
    Case("train-task", ["train", "--task", "poetry"], "'poetry'"),
    Case("train-init", ["train", "--init", "xavier"], "'xavier'"),
    Case("train-d-head", ["train", "--d-head", "0"], "d_head"),
    Case("train-lr-nan", ["train", "--lr", "nan"], "nan"),
    Case("train-lr-negative", ["train", "--lr", "-1"], "-1"),
    Case("train-steps", ["train", "--steps", "0"], "steps"),
    Case("train-batch", ["train", "--batch-size", "0"], "batch_size"),
    Case("train-seed-huge", ["train", "--seed", HUGE_SEED], HUGE_SEED),
    Case("train-seed-negative", ["train", "--seed", "-1"], "-1"),
    Case("train-memory", ["train", "--d-head", "100000000"], "would need"),
    Case("train-memory-limit", ["train"], "would need", env={"ATTNSCALE_MEMORY_LIMIT": "5M"}),
    Case("train-cuda", ["train", "--device", "cuda"], "no CUDA GPU"),
    Case("train-checkpoint-file", ["train", "--checkpoint", "f"], "'f' is a file", lambda d: write(d / "f", "x")),
    Case("train-checkpoint-file-is-a-folder", ["train", "--checkpoint", "c"], "is a folder, but the output",
         lambda d: (d / "c" / f"{default_train_key()}.safetensors").mkdir(parents=True)),
    Case("train-checkpoint-read-only", ["train", "--checkpoint", "ro/c"], "read-only", lambda d: read_only_folder(d / "ro"),
         unprivileged=True),
    # sweep
    Case("sweep-rule", ["sweep", "--rules", "sqrt,bogus"], "'bogus'"),
    Case("sweep-power-overflow", ["sweep", "--rules", "power:-400"], "power:-400"),
    Case("sweep-d-heads", ["sweep", "--d-heads", "16,abc"], "'abc'"),
    Case("sweep-lrs", ["sweep", "--lrs", "x"], "'x'"),
    Case("sweep-seeds-zero", ["sweep", "--seeds", "0"], "--seeds"),
    Case("sweep-seeds-huge", ["sweep", "--seeds", str(10**15)], "would need"),
    Case("sweep-memory", ["sweep", "--d-heads", "100000000"], "would need"),
    Case("completion-unknown-shell", ["--install-completion", "nosuchshell"], "'nosuchshell': unknown shell"),
    Case("completion-unknown-shell-equals", ["--show-completion=zsh2"], "'zsh2': unknown shell"),
    Case("completion-bad-instruction", [], "'bogus' is not a completion instruction", env={"_ATTNSCALE_COMPLETE": "bogus"}),
    Case("completion-bad-cursor", [], "COMP_CWORD='abc' is not a word index",
         env={"_ATTNSCALE_COMPLETE": "complete_bash", "COMP_WORDS": "attnscale au", "COMP_CWORD": "abc"}),
    Case("numerics-layer-negative", ["numerics", "--model", "default", "--layer", "-1"], "-1 is out of range"),
    Case("audit-config-field-of-the-wrong-type", ["audit", "cfg"], "Field 'hidden_dropout_prob' with value 'x'",
         lambda d: write(d / "cfg" / "config.json", json.dumps({"model_type": "bert", "hidden_size": 64,
                                                                "num_attention_heads": 4, "hidden_dropout_prob": "x"}))),
    Case("sweep-address-without-ray", ["sweep", "--address", "10.0.0.1:6379"], "('10.0.0.1:6379') is read only with --executor ray"),
    Case("sweep-batch-runs", ["sweep", "--batch-runs", "0"], "batch_runs"),
    Case("sweep-optimiser", ["sweep", "--optimisers", "adamw,lion"], "'lion'"),
    Case("sweep-executor", ["sweep", "--executor", "slurm"], "'slurm'"),
    Case("sweep-workers", ["sweep", "--workers", "0"], "workers"),
    Case("sweep-device", ["sweep", "--device", "tpu"], "'tpu'"),
    Case("sweep-checkpoint-file", ["sweep", "--checkpoint", "f"], "'f' is a file", lambda d: write(d / "f", "x")),
    Case("sweep-db-garbage", ["sweep", "--db", "r.sqlite"], "not a database", lambda d: garbage(d / "r.sqlite")),
    Case("sweep-db-truncated", ["sweep", "--db", "r.sqlite"], "malformed", lambda d: truncated(d / "r.sqlite")),
    Case("sweep-db-folder", ["sweep", "--db", "r.sqlite"], "is a folder", lambda d: (d / "r.sqlite").mkdir()),
    Case("sweep-db-read-only", ["sweep", "--db", "r.sqlite"], "read-only",
         lambda d: runs_store(d / "r.sqlite", readonly=True), unprivileged=True),
    Case("sweep-db-read-only-folder", ["sweep", "--db", "ro/r.sqlite"], "read-only",
         lambda d: (read_only_folder(d / "ro")), unprivileged=True),
    Case("sweep-db-other-table", ["sweep", "--db", "r.sqlite"], "columns",
         lambda d: table_file(d / "r.sqlite", "CREATE TABLE runs (key TEXT, x TEXT)")),
    Case("sweep-summary-missing", ["sweep", "--summary", "--db", "none.sqlite"], "none.sqlite"),
    Case("sweep-summary-garbage", ["sweep", "--summary", "--db", "r.sqlite"], "not a database",
         lambda d: garbage(d / "r.sqlite")),
    Case("sweep-summary-folder", ["sweep", "--summary", "--db", "r.sqlite"], "is a folder",
         lambda d: (d / "r.sqlite").mkdir()),
    Case("sweep-summary-row-not-json", ["sweep", "--summary", "--db", "r.sqlite"], "not a result",
         lambda d: runs_store(d / "r.sqlite", result="xx")),
    Case("sweep-summary-row-not-run", ["sweep", "--summary", "--db", "r.sqlite"], "not sweep results",
         lambda d: runs_store(d / "r.sqlite", result="{}")),
    Case("sweep-summary-results-store", ["sweep", "--summary", "--db", "results.sqlite"], "no 'runs' table",
         lambda d: results_store(d / "results.sqlite")),
    # diagnose
    Case("diagnose-model-missing", ["diagnose", "m[red]x"], "m[red]x"),
    Case("diagnose-model-file", ["diagnose", "f"], "config.json", lambda d: write(d / "f", "x")),
    Case("diagnose-model-no-config", ["diagnose", "m"], "config.json", lambda d: model_folder(d / "m", None)),
    Case("diagnose-model-garbage-config", ["diagnose", "m"], "config.json", lambda d: model_folder(d / "m", "{garb")),
    Case("diagnose-text-file-missing", ["diagnose", "--text-file", "t.txt"], "t.txt"),
    Case("diagnose-text-file-binary", ["diagnose", "--text-file", "t.txt"], "UTF-8",
         lambda d: write(d / "t.txt", b"\xff\xfe\xfa")),
    Case("diagnose-text-file-folder", ["diagnose", "--text-file", "t"], "folder", lambda d: (d / "t").mkdir()),
    Case("diagnose-text-twice", ["diagnose", "--text", "a b", "--text-file", "t.txt"], "not both",
         lambda d: write(d / "t.txt", "a b")),
    Case("diagnose-text-empty", ["diagnose", "--text", " ", *SMALL], "empty"),
    Case("diagnose-text-file-empty", ["diagnose", "--text-file", "t.txt"], "empty", lambda d: write(d / "t.txt", "\n")),
    Case("diagnose-counterfactual", ["diagnose", "--counterfactual", "bogus"], "'bogus'"),
    Case("diagnose-counterfactual-learned", ["diagnose", "--counterfactual", "learned"], "'learned'"),
    Case("diagnose-counterfactual-overflow", ["diagnose", "--no-probe", "--counterfactual", "power:-400"], "power:-400"),
    Case("diagnose-max-tokens", ["diagnose", "--max-tokens", "1"], "--max-tokens"),
    Case("diagnose-threads", ["diagnose", "--threads", "-1"], "--threads"),
    Case("diagnose-out-file", ["diagnose", "--out", "f"], "'f' is a file", lambda d: write(d / "f", "x")),
    Case("diagnose-out-read-only", ["diagnose", "--out", "ro/o"], "read-only", lambda d: read_only_folder(d / "ro"),
         unprivileged=True),
    Case("diagnose-cuda", ["diagnose", "--device", "cuda"], "no CUDA GPU"),
    Case("diagnose-device", ["diagnose", "--device", "tpu"], "'tpu'"),
    Case("diagnose-memory", ["diagnose"], "would need", env={"ATTNSCALE_MEMORY_LIMIT": "1M"}),
    # malformed model folders (diagnose and audit), unbounded work
    *folder_cases("diagnose", SMALL),
    *folder_cases("audit"),
    Case("diagnose-no-tokenizer", ["diagnose", "m", *SMALL], "no tokenizer", lambda d: no_tokenizer(d / "m")),
    Case("audit-config-pad-token", ["audit", "m"], "cannot be built", lambda d: tiny_folder(d / "m", pad_token_id=500)),
    Case("audit-config-billion-layers", ["audit", "m"], "would need",
         lambda d: tiny_folder(d / "m", num_hidden_layers=10**9)),
    Case("diagnose-text-file-huge", ["diagnose", "--text-file", "t.txt"], "MiB",
         lambda d: os.truncate(write(d / "t.txt", "a"), 90 * 2**20)),
    Case("answer-nested", ["answer", "--report", "r.json"], "nested", lambda d: write(d / "r.json", "[" * 100_000)),
    # options that do not apply, empty paths, unbounded numbers
    Case("numerics-scale-without-file", ["numerics", "--scale", "bogus"], "only with --from-file"),
    Case("numerics-dtype-without-file", ["numerics", "--dtype", "int8"], "only with --from-file"),
    Case("numerics-preset-with-file", ["numerics", "--from-file", "qk", "--preset", "full"], "--preset"),
    Case("numerics-figures-with-file", ["numerics", "--from-file", "qk", "--figures", "f"], "--figures"),
    Case("report-out-empty", ["report", "--out", ""], "empty"),
    Case("variance-figures-empty", ["variance", "--figures", ""], "empty"),
    Case("explore-out-empty", ["explore", "--out", ""], "empty"),
    Case("diagnose-out-empty", ["diagnose", "--out", ""], "empty"),
    Case("audit-out-empty", ["audit", "llama", "--out", ""], "empty"),
    Case("sweep-db-empty", ["sweep", "--db", ""], "empty"),
    Case("train-checkpoint-empty", ["train", "--checkpoint", ""], "empty"),
    Case("audit-head-dim-zero", ["audit", "--head-dim", "0"], "--head-dim"),
    Case("audit-head-dim-negative", ["audit", "--head-dim", "-8"], "-8"),
    Case("audit-seed-negative", ["audit", "--seed", "-1"], "-1"),
    Case("audit-seed-huge", ["audit", "--seed", str(10**23)], str(10**23)),
    Case("audit-workers-huge", ["audit", "--workers", "100000"], "100000"),
    Case("diagnose-threads-huge", ["diagnose", "--threads", "1000000"], "1000000"),
    Case("report-preset-case", ["report", "--preset", "Quick"], "'Quick'"),
    # checks before the work: names inside --out, the run store
    Case("report-figures-is-file", ["report", "--out", "r", "--labs", "variance"], "is a file",
         lambda d: write(d / "r" / "figures", "x")),
    Case("report-json-is-folder", ["report", "--out", "r", "--labs", "variance"], "is a folder",
         lambda d: (d / "r" / "report.json").mkdir(parents=True)),
    Case("report-run-store-garbage", ["report", "--out", "r", "--labs", "variance,training"], "runs.sqlite",
         lambda d: garbage(d / "r" / "runs.sqlite")),
    Case("report-run-store-folder", ["report", "--out", "r", "--labs", "variance,training"], "is a folder",
         lambda d: (d / "r" / "runs.sqlite").mkdir(parents=True)),
    Case("report-run-store-read-only", ["report", "--out", "r", "--labs", "variance,training"], "read-only",
         lambda d: runs_store(d / "r" / "runs.sqlite", readonly=True), unprivileged=True),
    Case("diagnose-out-json-folder", ["diagnose", "--out", "o"], "is a folder",
         lambda d: (d / "o" / "diagnosis.json").mkdir(parents=True)),
    Case("report-cjk-font-missing", ["report", "--out", "r", "--labs", "variance"], "ATTNSCALE_CJK_FONT='/no/font.ttf'",
         env={"ATTNSCALE_CJK_FONT": "/no/font.ttf"}),
    # what stands where a file is needed, named in words (hardening, third pass)
    Case("answer-report-fifo", ["answer", "--report", "p"], "'p' is a named pipe (FIFO)", lambda d: os.mkfifo(d / "p")),
    Case("answer-report-loop", ["answer", "--report", "a"], "'a' is a symbolic link that loops",
         lambda d: ((d / "a").symlink_to("b"), (d / "b").symlink_to("a"))),
    Case("answer-report-dangling", ["answer", "--report", "a"], "symbolic link to the missing",
         lambda d: (d / "a").symlink_to("gone.json")),
    Case("numerics-from-device", ["numerics", "--from-file", "/dev/zero"], "'/dev/zero' is a character device"),
    Case("diagnose-text-file-fifo", ["diagnose", "--text-file", "p"], "'p' is a named pipe (FIFO)",
         lambda d: os.mkfifo(d / "p")),
    # the environment is input too: each variable checked before any work, whatever the command
    Case("env-memory-not-a-size", ["explain", "C01"], "ATTNSCALE_MEMORY_LIMIT='lots'", env={"ATTNSCALE_MEMORY_LIMIT": "lots"}),
    Case("env-memory-zero", ["explore", "--out", "e.html"], "leaves no memory", env={"ATTNSCALE_MEMORY_LIMIT": "0"}),
    Case("env-memory-huge", ["explain", "C01"], "beyond any machine", env={"ATTNSCALE_MEMORY_LIMIT": "9" * 40 + "T"}),
    Case("env-font-folder", ["explain", "C01"], "ATTNSCALE_CJK_FONT='f' is a folder", lambda d: (d / "f").mkdir(),
         env={"ATTNSCALE_CJK_FONT": "f"}),
    Case("env-font-not-a-font", ["report", "--out", "r", "--labs", "variance"], "not a TrueType or OpenType font",
         lambda d: write(d / "f.ttf", "not a font"), env={"ATTNSCALE_CJK_FONT": "f.ttf"}),
    Case("env-history-cache-file", ["history", "--status"], "ATTNSCALE_HISTORY_CACHE='c' is a file",
         lambda d: write(d / "c", "x"), env={"ATTNSCALE_HISTORY_CACHE": "c"}),
    Case("diagnose-out-heatmap-folder", ["diagnose", "--out", "o"], "is a folder",
         lambda d: (d / "o" / "attention_layer5.png").mkdir(parents=True)),  # MiniLM's last layer
    Case("audit-out-json-folder", ["audit", "llama", "--out", "o"], "is a folder",
         lambda d: (d / "o" / "audit.json").mkdir(parents=True)),
    Case("diagnose-config-fifo", ["diagnose", "m"], "'m/config.json' is a named pipe (FIFO), not a file",
         lambda d: ((d / "m").mkdir(), os.mkfifo(d / "m" / "config.json"))),
    Case("audit-config-dangling", ["audit", "m"], "'m/config.json' is a symbolic link to the missing 'gone.json'",
         lambda d: ((d / "m").mkdir(), (d / "m" / "config.json").symlink_to("gone.json"))),
    Case("diagnose-config-folder", ["diagnose", "m"], "'m/config.json' is a folder, not a file",
         lambda d: (d / "m" / "config.json").mkdir(parents=True)),
    Case("diagnose-tokenizer-fifo", ["diagnose", "m"], "'m/tokenizer.json' in the model folder is a named pipe (FIFO)",
         lambda d: (write(d / "m" / "config.json", "{}"), os.mkfifo(d / "m" / "tokenizer.json"))),
    Case("audit-weights-device", ["audit", "m"], "'m/model.safetensors' in the model folder is a character device",
         lambda d: (write(d / "m" / "config.json", "{}"), (d / "m" / "model.safetensors").symlink_to("/dev/zero"))),
    Case("sweep-db-fifo", ["sweep", "--summary", "--db", "p"], "store 'p' is a named pipe (FIFO), not an SQLite file",
         lambda d: os.mkfifo(d / "p")),
    Case("sweep-db-loop", ["sweep", "--summary", "--db", "a"], "store 'a' is a symbolic link that loops",
         lambda d: ((d / "a").symlink_to("b"), (d / "b").symlink_to("a"))),
    Case("sweep-db-device", ["sweep", "--summary", "--db", "/dev/zero"], "store '/dev/zero' is a character device"),
    Case("report-store-fifo", ["report", "--out", "r", "--labs", "variance"], "'r/results.sqlite' is a named pipe",
         lambda d: ((d / "r").mkdir(), os.mkfifo(d / "r" / "results.sqlite"))),
    Case("report-store-dangling", ["report", "--out", "r", "--labs", "variance"],
         "'r/results.sqlite' is a symbolic link to the missing", lambda d: ((d / "r").mkdir(), (
             d / "r" / "results.sqlite").symlink_to("/nowhere/results.sqlite"))),
    Case("explore-out-device", ["explore", "--out", "d.html"], "--out 'd.html' is a character device, not a file",
         lambda d: os.mknod(d / "d.html", 0o666 | stat.S_IFCHR, os.makedev(1, 3))),  # a copy of /dev/null
    Case("explore-out-fifo", ["explore", "--out", "p"], "--out 'p' is a named pipe (FIFO), not a file",
         lambda d: os.mkfifo(d / "p")),
    Case("report-out-fifo", ["report", "--out", "p", "--labs", "variance"], "--out 'p' is a named pipe (FIFO), not a "
         "folder", lambda d: os.mkfifo(d / "p")),
    Case("train-checkpoint-loop", ["train", "--steps", "1", "--checkpoint", "a"], "--checkpoint 'a' is a symbolic link "
         "that loops", lambda d: ((d / "a").symlink_to("b"), (d / "b").symlink_to("a"))),
    # a read-only store whose last writes sit in its -wal file: read whole or refused, never read in part
    Case("sweep-summary-wal-read-only", ["sweep", "--summary", "--db", "ro/r.sqlite"], "last writes are still in",
         lambda d: read_only_run_store_with_wal(d), unprivileged=True),
    # the files SQLite keeps beside a store: a folder in their place, a name with no room for their suffix
    Case("sweep-db-wal-is-a-folder", ["sweep", "--db", "s.sqlite", "--rules", "sqrt", "--d-heads", "8", "--lrs", "1e-3",
                                      "--seeds", "1", "--steps", "2", "--d-model", "16"],
         "'s.sqlite-wal', where SQLite keeps its -wal file, is a folder", lambda d: (d / "s.sqlite-wal").mkdir()),
    Case("report-store-shm-is-a-folder", ["report", "--out", "r", "--labs", "variance"],
         "'r/results.sqlite-shm', where SQLite keeps its -shm file, is a folder",
         lambda d: (d / "r" / "results.sqlite-shm").mkdir(parents=True)),
    Case("report-store-wal-is-a-link", ["report", "--out", "r", "--labs", "variance"],
         "'r/results.sqlite-wal', where SQLite keeps its -wal file, is a symbolic link",
         lambda d: (write(d / "elsewhere.txt", "keep"), (d / "r").mkdir(),
                    (d / "r" / "results.sqlite-wal").symlink_to(d / "elsewhere.txt"))),
    Case("sweep-db-name-without-room", ["sweep", "--db", "s" * 248 + ".sqlite", "--rules", "sqrt", "--d-heads", "8",
                                        "--lrs", "1e-3", "--seeds", "1", "--steps", "2", "--d-model", "16"],
         "has a name of 255 bytes; SQLite keeps a -wal file beside it"),
    # memory: every worker process counted, files read whole sized first
    Case("sweep-workers-beyond-memory", ["sweep", "--db", "s.sqlite", "--rules", "sqrt", "--d-heads", "8", "--lrs",
                                         "1e-3", "--seeds", "16", "--steps", "2", "--d-model", "16", "--batch-runs", "1",
                                         "--workers", "16"], "in 16 worker processes", env={"ATTNSCALE_MEMORY_LIMIT": "1G"}),
    Case("audit-workers-beyond-memory", ["audit", "--workers", "8"], "8 audit worker processes",
         env={"ATTNSCALE_MEMORY_LIMIT": "2G"}),
    Case("answer-report-beyond-memory", ["answer", "--report", "r.json"], "up to 25x that as Python objects",
         lambda d: write(d / "r.json", "[" + ",".join(["{}"] * 400_000) + "]"), env={"ATTNSCALE_MEMORY_LIMIT": "20M"}),
    # stored rows edited by hand
    Case("report-store-row-edited", ["report", "--out", "r", "--labs", "variance"], "changed after attnscale wrote it",
         lambda d: edited_store(d / "r" / "results.sqlite", "results")),
    Case("sweep-summary-row-edited", ["sweep", "--summary", "--db", "r.sqlite"], "changed after attnscale wrote it",
         lambda d: edited_store(d / "r.sqlite", "runs")),
    # audit --callable, checked before any family is audited
    port_case("callable-syntax-error", "SyntaxError", "def attn(q, k, v:\n"),
    port_case("callable-raises", "ZeroDivisionError", "def attn(q, k, v, mask=None):\n    return 1 / 0\n"),
    port_case("callable-returns-none", "returned NoneType", "def attn(q, k, v, mask=None):\n    return None\n"),
    port_case("callable-wrong-shape", "returned shape (1, 1, 2)", "def attn(q, k, v, mask=None):\n    return q.sum(-1)\n"),
    port_case("callable-wrong-arguments", "cannot be called as f(q, k, v)", "def attn(q, k):\n    return q\n"),
    port_case("callable-recurses", "RecursionError", "def attn(q, k, v, mask=None):\n    return attn(q, k, v)\n"),
    port_case("callable-nan", "NaN", "def attn(q, k, v, mask=None):\n    return q * float('nan')\n"),
    port_case("callable-import-raises", "cannot import", "raise RuntimeError('no GPU here')\n"),
    Case("callable-a-class", ["audit", "--callable", "torch.nn:MultiheadAttention"], "names a class"),
    Case("module-no-colon", ["audit", "--module", "torch.nn"], "is not pkg.mod:factory"),
    Case("module-needs-arguments", ["audit", "--module", "torch.nn:MultiheadAttention"], "calling it with no arguments"),
    Case("module-not-a-module", ["audit", "--module", "math:sqrt"], "calling it with no arguments"),
    Case("module-returns-other", ["audit", "--module", "port:build"], "returned a int",
         lambda d: write(d / "port.py", "def build():\n    return 3\n")),
    Case("module-bad-shape", ["audit", "--module", "torch.nn:Identity", "--input-shape", "2,x"], "'2,x'"),
    Case("module-zero-shape", ["audit", "--module", "torch.nn:Identity", "--input-shape", "2,0"], "below 1"),
    Case("module-huge-shape", ["audit", "--module", "torch.nn:Identity", "--input-shape", "4096,4096,64"], "at most"),
    Case("module-with-target", ["audit", "gpt2", "--module", "torch.nn:Identity"], "takes no TARGET"),
    Case("module-fails-on-input", ["audit", "--module", "port:build", "--input-shape", "2,3"], "failed on the example input",
         lambda d: write(d / "port.py", "import torch.nn as nn\ndef build():\n    return nn.Linear(5, 5)\n")),
    Case("callable-a-module", ["audit", "--callable", "torch:nn"], "names a module (torch.nn)"),
    Case("callable-not-callable", ["audit", "--callable", "math:pi"], "names a float"),
    Case("callable-missing-name", ["audit", "--callable", "math:no_such"], "has no 'no_such'"),
]


# ----------------------------------------------------------------------------- running them

def snapshot(folder: Path) -> dict:
    """Every path under ``folder`` with its kind and contents."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


def run_batch(cases: list[dict]) -> list[dict]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "COLUMNS": "100"}
    done = subprocess.run([sys.executable, str(DRIVER)], input=json.dumps(cases), capture_output=True, text=True,
                          env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def read_only_run_store(folder: Path) -> None:
    """A run store (WAL mode, as sweeps write it) with one finished run, in a read-only folder."""
    spec = {"task": "recall", "rule": "sqrt", "init": "unit", "d_head": 16, "n_layers": 2, "optimiser": "adamw",
            "steps": 10, "lr": 0.001}
    result = {"status": "finished", "initial_val_loss": 3.0, "final_val_loss": 1.0, "final_val_acc": 0.5,
              "chance_acc": 0.0625}
    from attnscale.store import row_digest

    values = ("k", json.dumps(spec, sort_keys=True), "finished", json.dumps(result), 1.0, 0.0)
    path = table_file(folder / "ro" / "r.sqlite", runs_schema(), [(*values, row_digest(*values))],
                      readonly=True, wal=True)
    path.parent.chmod(0o555)


def read_only_run_store_with_wal(folder: Path) -> None:
    """A copy of a run store taken while its writer was still open, so that its one finished run sits in the -wal
    file (SQLite folds the WAL into the file only at a checkpoint), in a read-only folder without the -shm file."""
    values = ("k", "{}", "finished", '{"status": "finished"}', 1.0, 0.0)
    from attnscale.store import row_digest

    source = folder / "w" / "r.sqlite"
    source.parent.mkdir()
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute(runs_schema())
    writer.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", (*values, row_digest(*values)))
    writer.commit()
    (folder / "ro").mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{source}{suffix}", folder / "ro" / f"r.sqlite{suffix}")
    writer.close()
    shutil.rmtree(source.parent)
    assert (folder / "ro" / "r.sqlite-wal").stat().st_size > 0
    for file in (folder / "ro").iterdir():
        file.chmod(0o444)
    (folder / "ro").chmod(0o555)


# Commands that must succeed, run in the same batch: Case(id, args, what stdout must hold, setup, ...).
GOOD = {case.id: case for case in [
    # Rich markup is never applied to paths: '[red]' stays in the output, and '[/x]' breaks nothing.
    Case("brackets", ["train", "--steps", "1", "--log-every", "1", "--batch-size", "4", "--checkpoint", "c[red]k[/x]"],
         "checkpoint: c[red]k[/x]/"),
    Case("max-tokens", ["diagnose", "--max-tokens", "100000", "--text", "word " * 700, "--json", *SMALL], '"tokens"'),
    # A read-only store can still be read.
    Case("summary-read-only", ["sweep", "--summary", "--db", "ro/r.sqlite"], "sweep summary: 1 runs in ro/r.sqlite",
         read_only_run_store, unprivileged=True),
]}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Set up every case (and every GOOD command) in its own folder and run them all in one
    batch; {id: (folder, snapshot before, result)}."""
    root = tmp_path_factory.mktemp("misuse")
    jobs = [(case.id, case.args, case.setup, case.env, case.unprivileged) for case in CASES]
    jobs += [(f"good:{case.id}", case.args, case.setup, case.env, case.unprivileged) for case in GOOD.values()]
    prepared = []
    for name, args, setup, env, unprivileged in jobs:
        folder = root / name.replace(":", "-")
        folder.mkdir()
        if setup is not None:
            setup(folder)
        prepared.append((name, folder, snapshot(folder),
                         {"args": args, "cwd": str(folder), "env": env, "unprivileged": unprivileged, "timeout": 300}))
    results = run_batch([job for *_, job in prepared])
    return {name: (folder, before, result) for (name, folder, before, _), result in zip(prepared, results)}


def test_every_case_has_its_own_id():
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_invocation_gives_one_line_exit_2_and_leaves_nothing(case, outcomes):
    folder, before, result = outcomes[case.id]
    if result["code"] == CANNOT_DROP:
        pytest.skip("cannot make file permissions apply to this process")
    lines = result["stderr"].splitlines()
    assert not result["timed_out"]
    assert "Traceback" not in result["stderr"], result["stderr"][-2000:]
    assert result["code"] == 2, result["stderr"][-2000:]
    assert len(lines) == 1 and lines[0].startswith("attnscale: error: "), result["stderr"]
    assert case.needle in lines[0], lines[0]
    assert snapshot(folder) == before, sorted(set(snapshot(folder)) ^ set(before))


# ----------------------------------------------------------------------------- a nearly full disk
#
# Each command runs with a limit on how far any file may grow (RLIMIT_FSIZE, as a full disk
# looks to one process).  The write that crosses it fails; the command must say so in one line
# naming the path, and leave no temporary file and no part of its output behind.

FULL_DISK = [  # (case, limit in bytes, outputs that must not exist afterwards)
    (Case("explore", ["explore", "--out", "e.html"], "e.html"), 5_000, ["e.html"]),
    (Case("report", ["report", "--out", "r", "--labs", "variance"], "could not write the report into 'r'"), 150_000,
     ["r/report.json", "r/report.md", "r/index.html", "r/figures/variance_c02.png"]),
    (Case("diagnose", ["diagnose", "--out", "o", *SMALL], "diagnosis.json"), 8_000, ["o/diagnosis.json"]),
    (Case("checkpoint", ["train", "--steps", "1", "--log-every", "1", "--batch-size", "4", "--checkpoint", "c"],
          "could not write"), 8_000, []),
]


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
    root = tmp_path_factory.mktemp("full-disk")
    jobs = []
    for case, limit, _ in FULL_DISK:
        (root / case.id).mkdir()
        jobs.append({"args": case.args, "cwd": str(root / case.id), "env": {}, "timeout": 300, "file_size_limit": limit})
    return {case.id: (root / case.id, result) for (case, *_), result in zip(FULL_DISK, run_batch(jobs))}


@pytest.mark.parametrize("case, limit, outputs", FULL_DISK, ids=[case.id for case, *_ in FULL_DISK])
def test_a_full_disk_gives_one_line_and_leaves_no_partial_output(case, limit, outputs, full_disk):
    folder, result = full_disk[case.id]
    lines = result["stderr"].splitlines()
    assert "Traceback" not in result["stderr"], result["stderr"][-2000:]
    assert result["code"] == 2 and len(lines) == 1 and lines[0].startswith("attnscale: error: "), result["stderr"]
    assert case.needle in lines[0], lines[0]
    left = [str(p.relative_to(folder)) for p in folder.rglob("*")]
    assert not [name for name in left if ".tmp" in name], left
    assert not [name for name in outputs if (folder / name).exists()], left
    assert not list(folder.rglob("*.safetensors")), left


# ----------------------------------------------------------------------------- what is not an error

def test_bare_attnscale_prints_the_help(tmp_path):
    done = subprocess.run([sys.executable, "-m", "attnscale"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and done.stderr == ""
    assert "Usage: attnscale" in done.stdout and "diagnose" in done.stdout


@pytest.mark.parametrize("case_id", ["unknown-option", "answer-cut-claim"])
def test_the_batch_driver_answers_as_python_minus_m_does(case_id, outcomes, tmp_path):
    case = next(case for case in CASES if case.id == case_id)
    if case.setup is not None:
        case.setup(tmp_path)
    real = subprocess.run([sys.executable, "-m", "attnscale", *case.args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    batch = outcomes[case_id][2]
    assert (real.returncode, real.stdout, real.stderr) == (batch["code"], batch["stdout"], batch["stderr"])


def test_paths_with_brackets_print_as_they_are(outcomes):
    folder, _, done = outcomes["good:brackets"]
    assert done["code"] == 0, done["stderr"]
    assert "checkpoint: c[red]k[/x]/" in done["stdout"]
    assert list((folder / "c[red]k[/x]").glob("*.safetensors"))


def test_a_read_only_store_is_summarised_without_writing(outcomes):
    folder, before, done = outcomes["good:summary-read-only"]
    if done["code"] == CANNOT_DROP:
        pytest.skip("cannot make file permissions apply to this process")
    assert done["code"] == 0 and done["stderr"] == "", done["stderr"]
    assert GOOD["summary-read-only"].needle in " ".join(done["stdout"].split())
    assert snapshot(folder) == before


def test_max_tokens_beyond_the_models_positions_is_clipped_with_a_notice(outcomes):
    _, _, done = outcomes["good:max-tokens"]
    assert done["code"] == 0, done["stderr"]
    assert done["stderr"].splitlines() == [
        "attnscale: note: max_tokens 100000 is more than the model's 512 positions; using 512"]
    assert len(json.loads(done["stdout"])["tokens"]) == 512


# ----------------------------------------------------------------------------- the library, called at random
#
# Every function of the documented API (README, "The parts, as a library", the audit, the
# memory and path checks, the answer and the claims registry), called with a mix of good
# arguments and junk (None, bools, huge or negative numbers, NaN, text, tensors of any float
# or integer dtype and small shape, with NaN/inf/huge entries), may raise ValueError or
# TypeError and nothing else.  Sizes stay small: what is too big for memory is refused by
# :mod:`attnscale.memory`, tested above and in tests/test_memory.py.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from attnscale import answer, claims, lab, memory, numerics, paths, runtime, scaling, stats  # noqa: E402
from attnscale import softmax as softmax_module  # noqa: E402
from attnscale.attention import IMPLS, ScaledAttention, attention, capture  # noqa: E402

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32) | st.sampled_from([0.0, 1.0, -1.0, 7e4, -7e4, 1e30])
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.bool]


@st.composite
def tensors(draw, min_dims=0, max_dims=4, dtypes=DTYPES):
    shape = draw(st.lists(st.integers(0, 4), min_size=min_dims, max_size=max_dims))
    count = 1
    for size in shape:
        count *= size
    values = torch.tensor(draw(st.lists(FLOATS, min_size=count, max_size=count)), dtype=torch.float64).reshape(shape)
    dtype = draw(st.sampled_from(dtypes))
    if dtype == torch.bool:
        return values > 0
    if not dtype.is_floating_point:
        return values.nan_to_num(0.0, 0.0, 0.0).clamp(-100, 100).to(dtype)
    return values.to(dtype)


@st.composite
def probabilities(draw):
    """Softmax rows (sometimes with masked keys or zeroed rows): what stats functions expect."""
    logits = draw(tensors(min_dims=1, max_dims=3, dtypes=[torch.float16, torch.bfloat16, torch.float32, torch.float64]))
    probs = torch.softmax(logits.double().nan_to_num(0.0, 30.0, -30.0), dim=-1).to(logits.dtype)
    if draw(st.booleans()) and probs.dim() > 1 and probs.shape[-2] > 0:
        probs[..., 0, :] = 0.0
    return probs


FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@st.composite
def filled(draw, shape, dtype):
    """A tensor of ``shape``: finite values, or (one time in three) any floats with NaN, inf, huge."""
    count = 1
    for size in shape:
        count *= size
    elements = draw(st.sampled_from([st.floats(-10, 10, width=32), st.floats(-1e5, 1e5, width=32), FLOATS]))
    values = draw(st.lists(elements, min_size=count, max_size=count))
    return torch.tensor(values, dtype=torch.float64).reshape(shape).to(dtype)


@st.composite
def attention_calls(draw):
    """(args, kwargs) of attention() with q, k, v of matching shapes (any sizes from 0), and a
    mask that broadcasts, does not, or is junk."""
    batch = draw(st.lists(st.integers(1, 2), max_size=2))
    t_q, t_k, d, d_v = (draw(st.integers(0, 4)) for _ in range(4))
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    q, k, v = (draw(filled([*batch, t, width], dtype)) for t, width in ((t_q, d), (t_k, d), (t_k, d_v)))
    mask = draw(st.none() | st.just(None) | tensors(dtypes=[torch.bool])
                | st.lists(st.booleans(), min_size=t_q * t_k, max_size=t_q * t_k).map(
                    lambda bits: torch.tensor(bits, dtype=torch.bool).reshape(t_q, t_k)))
    keywords = {"scale": draw(SPECS), "mask": mask, "causal": draw(st.booleans()), "impl": draw(st.sampled_from(IMPLS)),
                "return_weights": draw(st.booleans()), "block_size": draw(st.integers(1, 3))}
    return (q, k, v), keywords


def build_and_run(x, *args, **kwargs):
    """ScaledAttention(*args, **kwargs) applied to x, also inside capture()."""
    block = ScaledAttention(*args, **kwargs)
    block(x)
    with capture(block):
        block(x)


@st.composite
def module_calls(draw):
    d_model, n_heads = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    d_head = draw(st.none() | st.integers(1, 6))
    shape = draw(st.sampled_from([[1, 3, d_model], [2, 0, d_model], [1, 3, d_model + 1], [3, d_model]]))
    x = draw(filled(shape, draw(st.sampled_from(FLOAT_DTYPES[2:]))))
    keywords = {"scale": draw(SPECS), "init": draw(st.sampled_from(list(scaling.INIT_SCHEMES))),
                "impl": draw(st.sampled_from(IMPLS)), "causal": draw(st.booleans()), "block_size": draw(st.integers(1, 3))}
    return (x, d_model, n_heads, d_head), keywords


@st.composite
def stats_calls(draw):
    """(args, kwargs) of a stats function: softmax rows and a mask of their shape (or none)."""
    probs = draw(probabilities())
    mask = draw(st.none() | st.lists(st.booleans(), min_size=probs.numel(), max_size=probs.numel()).map(
        lambda bits: torch.tensor(bits, dtype=torch.bool).reshape(probs.shape)))
    return (probs, mask), {}


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), FLOATS, st.text(max_size=8),
                 st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
ANY = JUNK | tensors()
SPECS = st.sampled_from(["sqrt", "inv_d", "none", "learned", "qknorm", "qknorm:2", "const:0.5", "power:0.75",
                         "power:-400", "power:400", "const:-1", "const:", "power:nan", " sqrt ", "SQRT"])
SMALL_INTS = st.integers(-2, 70)
MASKS = st.none() | tensors(dtypes=[torch.bool]) | tensors()
DEVICES = st.sampled_from(["cpu", "cuda", "cuda:0", "tpu", "", "cpu:0"])


def either(good):
    return st.one_of(good, good, ANY)


def call(function, *arguments, **keywords):
    """(function, a strategy of (args, kwargs))."""
    return function, st.tuples(st.tuples(*arguments), st.fixed_dictionaries(keywords))


def report_like():
    from attnscale.claims import CLAIMS

    claim = st.fixed_dictionaries({"id": st.sampled_from([c.id for c in CLAIMS]) | JUNK,
                                   "verdict": st.sampled_from(["supported", "refuted", "partly supported",
                                                               "not testable here", "pending"]) | JUNK,
                                   "numbers": st.dictionaries(st.text(max_size=12), JUNK, max_size=3) | JUNK})
    full = st.just([{"id": c.id, "verdict": "pending", "numbers": {}} for c in CLAIMS])
    return st.one_of(JUNK, st.fixed_dictionaries({"claims": st.lists(claim, max_size=3) | full | JUNK}))


PUBLIC = {
    "scaling.parse": call(scaling.parse, either(SPECS)),
    "scaling.factor": call(scaling.factor, either(SPECS), either(SMALL_INTS)),
    "scaling.check_d_k": call(scaling.check_d_k, either(SMALL_INTS)),
    "scaling.check_init": call(scaling.check_init, either(st.sampled_from(list(scaling.INIT_SCHEMES)))),
    "softmax.softmax": call(softmax_module.softmax, either(tensors()), either(MASKS),
                            either(st.sampled_from(softmax_module.METHODS)), either(st.integers(-1, 5))),
    "softmax.naive_softmax": call(softmax_module.naive_softmax, either(tensors()), either(MASKS)),
    "softmax.stable_softmax": call(softmax_module.stable_softmax, either(tensors()), either(MASKS)),
    "softmax.online_softmax": call(softmax_module.online_softmax, either(tensors()), either(MASKS), either(st.integers(-1, 5))),
    "softmax.softmax (masks that fit)": (softmax_module.softmax, stats_calls().flatmap(
        lambda call: st.tuples(st.just(call[0]), st.fixed_dictionaries({"method": st.sampled_from(softmax_module.METHODS)})))),
    "softmax.online_logsumexp": call(softmax_module.online_logsumexp, either(tensors()), either(MASKS)),
    "attention.attention (shapes that fit)": (attention, attention_calls()),
    "attention.attention": call(attention, either(tensors()), either(tensors()), either(tensors()),
                                scale=either(SPECS), mask=either(MASKS), causal=either(st.booleans()),
                                impl=either(st.sampled_from(IMPLS)),
                                return_weights=either(st.booleans()), block_size=either(st.integers(-1, 5))),
    "attention.ScaledAttention (sizes that fit)": (build_and_run, module_calls()),
    "attention.capture": call(capture, ANY),
    "attention.ScaledAttention": call(ScaledAttention, either(SMALL_INTS), either(st.integers(-1, 4)),
                                      either(st.none() | SMALL_INTS), scale=either(SPECS),
                                      init=either(st.sampled_from(list(scaling.INIT_SCHEMES))),
                                      impl=either(st.sampled_from(IMPLS)),
                                      block_size=either(st.integers(-1, 5))),
    "stats.logit_moments": call(stats.logit_moments, either(tensors()), either(MASKS)),
    "stats.summarize": call(stats.summarize, either(probabilities()), either(MASKS)),
    "stats.softmax_jacobian": call(stats.softmax_jacobian, either(probabilities())),
    "stats.jacobian_diagonal": call(stats.jacobian_diagonal, either(probabilities())),
    "numerics.precision_check (shapes that fit)": (numerics.precision_check, attention_calls().map(lambda call: (call[0][:2], {}))),
    "numerics.precision_check": call(numerics.precision_check, either(tensors()), either(tensors()), scale=either(SPECS),
                           dtype=either(st.sampled_from(["float16", "bf16", torch.float32, "fp8"])),
                           max_locations=either(st.integers(-1, 3)), seed=either(st.integers(0, 2**64))),
    "numerics.parse_dtype": call(numerics.parse_dtype, ANY),
    "numerics.exp_overflow_threshold": call(numerics.exp_overflow_threshold, either(st.sampled_from(["fp16", "bf16"])),
                                            either(DEVICES)),
    "numerics.matmul_accumulation": call(numerics.matmul_accumulation, either(st.sampled_from(["fp16", "fp32"])),
                                         either(DEVICES), either(st.integers(-1, 64)), either(st.integers(0, 2**64))),
    "memory.require_memory": call(memory.require_memory, either(st.integers(0, 2**80)), either(st.text(max_size=5)),
                                  either(st.text(max_size=5)), either(DEVICES)),
    "memory.available_bytes": call(memory.available_bytes, either(DEVICES)),
    "memory.tensor_bytes": call(memory.tensor_bytes, either(st.lists(st.integers(0, 10**6), max_size=3)),
                                either(st.sampled_from(DTYPES))),
    "memory.parse_bytes": call(memory.parse_bytes, either(st.sampled_from(["2G", "512M", "10", "1.5k", "x"]))),
    "memory.format_bytes": call(memory.format_bytes, either(st.integers(0, 10**15))),
    "runtime.check_device": call(runtime.check_device, either(DEVICES)),
    "runtime.torch_device": call(runtime.torch_device, either(DEVICES)),
    "runtime.check_seed": call(runtime.check_seed, either(st.integers(-1, 2**64))),
    "answer.compose": call(answer.compose, report_like(), either(st.sampled_from(answer.LANGS))),
    "answer.check_report": call(answer.check_report, report_like()),
    "claims.label": call(claims.label, either(st.lists(st.tuples(
        st.builds(claims.Part, st.text(max_size=3), st.text(max_size=5), st.sampled_from(claims.ROLES), st.text(max_size=3)),
        st.builds(claims.Reading, st.sampled_from(claims.STATES))), max_size=4))),
    "lab.load": call(lab.load, either(st.sampled_from(lab.LABS))),
    "lab.config_for": call(lab.config_for, either(st.sampled_from(lab.LABS)), either(st.sampled_from(lab.PRESET_NAMES)),
                           seed=either(st.integers(-1, 2**64)), device=either(DEVICES)),
}
for name in ("entropy", "normalized_entropy", "effective_support", "max_prob", "kl_to_uniform", "jacobian_frobenius",
             "jacobian_spectral", "n_valid"):
    PUBLIC[f"stats.{name}"] = call(getattr(stats, name), either(probabilities()), either(MASKS))
    PUBLIC[f"stats.{name} (masks that fit)"] = (getattr(stats, name), stats_calls())


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_function_raises_nothing_but_value_and_type_errors(name):
    function, arguments = PUBLIC[name]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(arguments)
    def check(drawn):
        args, kwargs = drawn
        try:
            function(*args, **kwargs)
        except (ValueError, TypeError):
            pass

    check()


@pytest.mark.parametrize("name", ["check_folder", "check_file"])
def test_path_checks_raise_nothing_but_value_and_type_errors(name, tmp_path):
    write(tmp_path / "file", "x")
    (tmp_path / "folder").mkdir()
    names = st.sampled_from(["file", "folder", "file/x", "folder/x", "new/deeper", "", ".", "a[b]", "\x00"])

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(either(names.map(lambda part: str(tmp_path / part))), either(st.text(max_size=5)))
    def check(path, what):
        try:
            getattr(paths, name)(path, what)
        except (ValueError, TypeError):
            pass

    check()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]  # the checks create nothing


# ----------------------------------------------------------------------------- long names

def test_a_valid_name_at_the_length_limit_is_written_with_no_temporary_left(tmp_path):
    """A file name of 250 characters is valid (the limit is 255); its temporary name, which adds the process id,
    is cut to fit, keeps the suffix, and is gone after the write."""
    target = tmp_path / ("n" * 245 + ".json")
    assert len(target.name) == 250
    assert paths.temporary_name(target).suffix == ".json" and len(paths.temporary_name(target).name) <= 255
    paths.write_text_atomic(target, "{}")
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_the_explorer_writes_to_a_name_at_the_length_limit(tmp_path):
    out = tmp_path / ("e" * 246 + ".html")
    result = subprocess.run([sys.executable, "-m", "attnscale", "explore", "--out", str(out)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 1000
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


# ----------------------------------------------------------------------------- a store another process writes

def locked(path: Path) -> sqlite3.Connection:
    """A connection holding a write lock on the store at ``path``, as a report or sweep writing it holds one."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    return db


def test_a_locked_store_is_named_before_any_work(tmp_path):
    """report and sweep on a store another process is writing: one line naming the store and why, exit 2, in
    seconds (before, the report ran its labs and then waited 60 s at its first write and discarded them)."""
    from attnscale.runs import RunStore
    from attnscale.store import Store

    out = tmp_path / "report"
    out.mkdir()
    Store(out / "results.sqlite")
    RunStore(tmp_path / "runs.sqlite")
    for args, store in ((["report", "--out", str(out), "--labs", "variance"], out / "results.sqlite"),
                        (["sweep", "--db", str(tmp_path / "runs.sqlite")], tmp_path / "runs.sqlite")):
        holder = locked(store)
        try:
            result = subprocess.run([sys.executable, "-m", "attnscale", *args], capture_output=True, text=True,
                                    timeout=60)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(store) in lines[0] and "is locked" in lines[0], lines
    assert sorted(p.name for p in out.iterdir()) == ["results.sqlite"]  # nothing written beside it
