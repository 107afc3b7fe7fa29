"""The training lab: a tiny run learns, runs are deterministic, divergence is a result, and
every verdict rule gives each of its outcomes on constructed results."""

import math

import pytest
import torch

from attnscale.claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED
from attnscale.lab import training as T

TINY = dict(d_model=32, n_layers=2, batch_size=32, log_every=25)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread; on a busy 2-core machine more threads only wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_lr_sensitivity_closed_form():
    cells = [{"final_val_loss": 1.0, "initial_val_loss": 4.0}, {"final_val_loss": 2.0, "initial_val_loss": 4.0},
             {"final_val_loss": 9.0, "initial_val_loss": 4.0}]
    assert T.lr_sensitivity(cells) == pytest.approx((1 + 2 + 4) / 3 - 1)
    assert T.lr_sensitivity(cells[:1]) is None


# --------------------------------------------------------------------------- constructed results

STEPS = list(range(0, 101, 10))
CONFIG = dict(T.dataclasses.asdict(T.Config(recall_lrs=(1e-2,), lm_lrs=(1e-2,), deep_lrs=(1e-2,))))


def curve(initial, final, reach):
    """Linear from initial to final by step ``reach`` (None: never quite), then flat."""
    if reach is None:
        return [initial - (initial - final) * 0.5 * s / 100 for s in STEPS]
    return [initial - (initial - final) * min(1.0, s / reach) for s in STEPS]


def fake_run(task, rule, d, frac, reach=50, grad=1.0, entropy=0.5, lr=1e-2, seed=0):
    chance = 1 / 16 if task == "recall" else None
    initial = 2.8 if task == "recall" else 4.4
    final = initial - 2.0 * frac if task == "recall" else initial - 1.5 * frac
    return {"task": task, "rule": rule, "d_head": d, "lr": lr, "seed": seed, "init": "unit", "n_layers": 2,
            "optimiser": "adamw", "steps": 100, "status": "finished", "diverged_at": None,
            "initial_val_loss": initial, "final_val_loss": final, "best_val_loss": final,
            "final_val_acc": (chance + 0.9 * frac) if chance else None, "chance_acc": chance,
            "curve": {"step": STEPS, "val_loss": curve(initial, final, reach), "val_acc": [None] * len(STEPS),
                      "train_loss": curve(initial, final, reach)},
            "grad_qk_layer0": [grad] * len(STEPS), "grad_vo_layer0": [1.0] * len(STEPS),
            "grad_qk_layer0_early": grad, "grad_vo_layer0_early": 1.0,
            "attention_at": {"0": [{"entropy": entropy, "max_prob": 0.5, "max_abs_logit": 3.0 * d ** 0.5,
                                    "logit_std": 1.0}] * 2,
                             "final": [{"entropy": entropy, "max_prob": 0.5, "max_abs_logit": 3.0, "logit_std": 1.0}] * 2}}


def fake_result(frac=None, reach=None, grad=None, entropy=None, sqrt_frac=1.0, deep=None, t5=None):
    """frac/reach/grad/entropy: {rule: value or {d_head: value}}, defaults sqrt-like."""
    def pick(table, rule, d, default):
        value = (table or {}).get(rule, default)
        return value.get(d, default) if isinstance(value, dict) else value

    grid = []
    for task in ("recall", "shakespeare"):
        for rule in CONFIG["rules"]:
            for d in CONFIG["d_heads"]:
                f = sqrt_frac if rule == "sqrt" else pick(frac, rule, d, 1.0)
                grid.append(fake_run(task, rule, d, f, reach=pick(reach, rule, d, 50), grad=pick(grad, rule, d, 1.0),
                                     entropy=pick(entropy, rule, d, 0.5)))
    result = {"config": CONFIG, "grid": grid, "cells": T.cells(grid)}
    result["deep"] = deep or deep_runs()
    result["t5"] = t5 or t5_runs()
    result["t5_variant_step0"] = {"d_head": 64, "sqrt_unit": [1.0, 1.0], "none_wq_var_inv_sqrt_dk": [2.83, 2.83]}
    return result


def deep_runs(old_final=2.5, new_final=2.5, old_diverged=False, new_initial=4.4):
    runs = []
    for rule, final, diverged in (("const:0.125", old_final, old_diverged), ("const:0.0625", new_final, False)):
        run = fake_run("shakespeare", rule, 256, 1.0)
        run["initial_val_loss"] = new_initial
        run["final_val_loss"] = None if diverged else final
        run["status"] = "diverged" if diverged else "finished"
        run["diverged_at"] = 30 if diverged else None
        run["curve"]["val_loss"] = curve(new_initial, final, 50)[: 4 if diverged else None]
        runs.append(run)
    return runs


def t5_runs(step0_gap=0.0, curve_gap=None, trained_gap=None):
    runs = []
    for opt, lr in CONFIG["t5_optimisers"]:
        for rule, init in (("sqrt", "unit"), ("none", "t5")):
            run = fake_run("shakespeare", rule, 64, 1.0)
            run.update(optimiser=opt, init=init, lr=lr)
            if init == "t5":
                run["attention_at"]["0"] = [{**l, "logit_std": 1.0 + step0_gap} for l in run["attention_at"]["0"]]
                run["attention_at"]["final"] = [{**l, "logit_std": 1.0 + (trained_gap or {}).get(opt, 0.0)}
                                                for l in run["attention_at"]["final"]]
                shift = (curve_gap or {}).get(opt, 0.0)
                run["curve"]["val_loss"] = [v * (1 + shift) for v in run["curve"]["val_loss"]]
            runs.append(run)
    return runs


SMALL = {16: 1.0}


def test_c05_all_outcomes():
    assert T.judge_c05(fake_result(frac={"inv_d": 0.05})).verdict == SUPPORTED
    assert T.judge_c05(fake_result(frac={"inv_d": 1.0})).verdict == REFUTED
    assert T.judge_c05(fake_result(frac={"inv_d": 0.5})).verdict == REFUTED  # "a bit worse" is what C05 denies
    assert T.judge_c05(fake_result(frac={"inv_d": {16: 1.0, 64: 1.0, 256: 0.05}})).verdict == PARTLY
    finding = T.judge_c05(fake_result(sqrt_frac=0.01))
    assert finding.verdict == NOT_TESTABLE and "Inconclusive" in finding.evidence


def test_c06_c07_c17_all_outcomes():
    stalls = fake_result(frac={"none": {16: 1.0, 64: 0.05, 256: 0.05}}, grad={"none": 0.01})
    trains = fake_result(frac={"none": 1.0}, grad={"none": 1.0})
    mixed = fake_result(frac={"none": {16: 1.0, 64: 1.0, 256: 0.05}}, grad={"none": 0.01})
    assert T.judge_c06(stalls).verdict == SUPPORTED
    assert T.judge_c06(trains).verdict == REFUTED
    assert T.judge_c06(mixed).verdict == PARTLY
    assert T.judge_c06(fake_result(sqrt_frac=0.01)).verdict == NOT_TESTABLE
    assert T.judge_c07(trains).verdict == REFUTED
    assert T.judge_c07(stalls).verdict == PARTLY
    assert "no ablation" in T.judge_c07(trains).evidence
    assert T.judge_c17(stalls).verdict == SUPPORTED
    assert T.judge_c17(stalls).numbers["median_grad_ratio_sqrt_over_none"] == pytest.approx(100)
    assert T.judge_c17(trains).verdict == REFUTED
    assert T.judge_c17(fake_result(frac={"none": 1.0}, grad={"none": 0.01})).verdict == PARTLY


def test_c09_all_outcomes():
    assert T.judge_c09(fake_result(deep=deep_runs(old_diverged=True))).verdict == SUPPORTED
    assert T.judge_c09(fake_result(deep=deep_runs(old_final=4.0))).verdict == SUPPORTED  # no convergence
    assert T.judge_c09(fake_result(deep=deep_runs())).verdict == REFUTED
    assert T.judge_c09(fake_result(deep=deep_runs(old_final=2.8))).verdict == REFUTED  # worse, but converged
    # 1/8 worse, but 1/16 did not train either (ends above 80% of its initial loss)
    assert T.judge_c09(fake_result(deep=deep_runs(old_final=4.3, new_final=4.0))).verdict == PARTLY


def test_c10_all_outcomes():
    assert T.judge_c10(fake_result()).verdict == SUPPORTED
    assert T.judge_c10(fake_result(t5=t5_runs(curve_gap={"adamw": 0.1}))).verdict == PARTLY
    assert T.judge_c10(fake_result(t5=t5_runs(trained_gap={"sgd": 0.5}))).verdict == PARTLY
    assert T.judge_c10(fake_result(t5=t5_runs(step0_gap=0.5))).verdict == REFUTED


def test_c13_all_outcomes():
    assert T.judge_c13(fake_result(reach={"inv_d": 50, "sqrt": 20})).verdict == SUPPORTED
    assert T.judge_c13(fake_result(reach={"inv_d": 20, "sqrt": 20})).verdict == REFUTED
    partly = T.judge_c13(fake_result(reach={"inv_d": None, "sqrt": 10}))
    assert partly.verdict == PARTLY and "not within" in partly.evidence
    assert T.judge_c13(fake_result(sqrt_frac=0.01)).verdict == NOT_TESTABLE


def test_c18_all_outcomes():
    balance = fake_result(frac={"inv_d": 0.3, "const:0.125": {16: 0.1, 64: 1.0, 256: 0.5}},
                          entropy={"inv_d": 0.9, "sqrt": 0.4})
    assert T.judge_c18(balance).verdict == SUPPORTED
    nothing = fake_result(frac={"none": 1.3, "inv_d": 1.0, "const:0.125": 1.0})
    assert T.judge_c18(nothing).verdict == REFUTED
    some = fake_result(frac={"inv_d": 1.0, "const:0.125": {16: 0.1, 64: 1.0, 256: 1.0}})
    assert T.judge_c18(some).verdict == PARTLY
    # the constant only slower somewhere (not stalled): that part does not hold
    assert T.judge_c18(fake_result(frac={"const:0.125": {16: 0.5, 64: 1.0, 256: 1.0}},
                                   entropy={"inv_d": 0.9, "sqrt": 0.4})).verdict == PARTLY
    assert T.judge_c18(fake_result(sqrt_frac=0.01)).verdict == NOT_TESTABLE


def test_judge_covers_the_lab_claims_and_tables_and_figures(tmp_path):
    result = fake_result(frac={"inv_d": 0.5})
    findings = T.judge(result)
    assert set(findings) == {"C05", "C06", "C07", "C09", "C10", "C13", "C17", "C18"}
    for finding in findings.values():
        assert finding.evidence
    assert all(isinstance(rows, list) for rows in T.tables(result).values())
    paths = T.figures(result, tmp_path)
    for files in paths.values():
        for name in files:
            assert (tmp_path / name).stat().st_size > 1000
