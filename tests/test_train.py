"""The training engine: one run learns, runs are deterministic, divergence is a result, and
a batch of runs trained as one program gives each run exactly what training it alone gives."""

import dataclasses
import subprocess
import sys

import pytest
import torch

from attnscale import train as T
from attnscale.threads import flushed_denormals
from attnscale.train import batched, optim

TINY = dict(d_model=32, n_layers=2, batch_size=32, log_every=25)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread; on a busy 2-core machine more threads only wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_tiny_run_learns_recall_well_above_chance():
    spec = T.RunSpec(task="recall", rule="sqrt", d_head=16, lr=1e-2, steps=150, n_pairs=2, n_queries=2, **TINY)
    result = T.train(spec)
    assert result["status"] == "finished"
    assert result["final_val_acc"] > max(0.5, 5 * result["chance_acc"]), result["final_val_acc"]
    assert result["final_val_loss"] < result["initial_val_loss"] - 1.0


def test_same_seed_same_curve_and_log_shape():
    spec = T.RunSpec(task="shakespeare", steps=10, log_every=5, context=16, d_model=16, batch_size=8)
    a, b = T.train(spec), T.train(spec)
    assert a["log"] == b["log"]
    assert a["log"]["step"] == [0, 5, 10]
    assert len(a["log"]["grad"]["W_q"][0]) == 2 and len(a["log"]["attention"][0]) == 2
    other = T.train(dataclasses.replace(spec, seed=1))
    assert other["log"]["train_loss"] != a["log"]["train_loss"]


def test_diverging_run_is_recorded_not_raised():
    result = T.train(T.RunSpec(optimiser="sgd", lr=1e4, steps=40, log_every=5, batch_size=8))
    assert result["status"] == "diverged"
    assert isinstance(result["diverged_at"], int) and 0 < result["diverged_at"] <= 40
    assert result["final_val_loss"] is None and result["final_val_acc"] is None


def test_adafactor_and_sgd_run():
    for opt, lr in (("adafactor", 1e-2), ("sgd", 0.1)):
        result = T.train(T.RunSpec(optimiser=opt, lr=lr, steps=5, log_every=5, batch_size=8))
        assert result["status"] == "finished"


SUBNORMAL = 1e-39  # below float32's smallest normal number, 1.18e-38


def subnormal_kept() -> bool:
    """Whether float32 arithmetic on this thread keeps a subnormal (False: flushed to zero)."""
    return float(torch.tensor([SUBNORMAL]) * 1.0) > 0


def test_flushed_denormals_zeroes_subnormals_inside_the_block_only_and_survives_nesting():
    assert subnormal_kept()
    with flushed_denormals() as supported:
        with flushed_denormals():
            pass
        # the inner block's exit leaves the outer block flushing (on a CPU without the mode, nothing changes)
        assert subnormal_kept() is not supported
        assert float(torch.tensor([3e-6], dtype=torch.float16) * 1) > 0  # half precision keeps its subnormals
    assert subnormal_kept()
    with pytest.raises(RuntimeError), flushed_denormals():
        raise RuntimeError("an error inside the block")
    assert subnormal_kept()


@pytest.mark.parametrize("path", ["single", "group"])
def test_training_flushes_subnormals_while_it_runs_and_not_after(path):
    """Both training paths flush subnormals (a saturated softmax fills the backward with them): a
    forward hook sees the mode on during training; it is off again afterwards."""
    seen = []
    real_forward = batched.BatchedTransformer.forward if path == "group" else T.single.Transformer.forward

    def recording_forward(self, *args, **kwargs):
        seen.append(subnormal_kept())
        return real_forward(self, *args, **kwargs)

    spec = T.RunSpec(steps=2, log_every=1, batch_size=4)
    with pytest.MonkeyPatch.context() as patch:
        if path == "group":
            patch.setattr(batched.BatchedTransformer, "forward", recording_forward)
            T.train_group([spec, dataclasses.replace(spec, seed=1)])
        else:
            patch.setattr(T.single.Transformer, "forward", recording_forward)
            T.train(spec)
    supported = torch.set_flush_denormal(False)  # whether this CPU has the mode (and leave it off)
    assert seen and all(kept is not supported for kept in seen)
    assert subnormal_kept()


def test_lr_schedule_warmup_then_cosine_to_a_tenth():
    spec = T.RunSpec(steps=100, warmup=10)
    assert T.lr_factor(0, spec) == pytest.approx(0.1)
    assert T.lr_factor(9, spec) == pytest.approx(1.0)
    assert T.lr_factor(10, spec) == pytest.approx(1.0)
    assert T.lr_factor(55, spec) == pytest.approx(0.55)
    assert T.lr_factor(100, spec) == pytest.approx(0.1)


def test_attention_stats_ranges_and_extremes():
    spec = T.RunSpec(rule="none", d_head=256)
    task = T.build_task(spec)
    x = task.validation()[0][:16]
    hot = T.attention_stats(T.build_model(spec, task), x)
    cool = T.attention_stats(T.build_model(T.RunSpec(rule="inv_d", d_head=256), task), x)
    for layer in hot + cool:
        assert 0 <= layer["entropy"] <= 1 and 0 < layer["max_prob"] <= 1
    # unit init: logit std ~ d_k^(1/2) unscaled, ~ d_k^(-1/2) under 1/d_k
    assert hot[0]["logit_std"] > 5 and cool[0]["logit_std"] < 0.2
    assert hot[0]["entropy"] < cool[0]["entropy"]


def test_bad_specs_raise():
    for bad, match in ((dict(task="mt"), "unknown task"), (dict(optimiser="lion"), "optimiser"),
                       (dict(lr=-1.0), "lr"), (dict(steps=0), "steps"), (dict(rule="x"), "scale spec"),
                       (dict(device="tpu"), "device")):
        with pytest.raises(ValueError, match=match):
            T.RunSpec(**bad)




# --------------------------------------------------------------------------- batched = one at a time

SMALL = dict(task="recall", d_head=8, d_model=16, batch_size=8, log_every=10, n_pairs=3, n_queries=3)


def numbers(result: dict) -> list[float]:
    """Every number a run logs, flattened (None as nan)."""
    log = result["log"]
    flat = list(log["step"]) + list(log["train_loss"]) + list(log["val_loss"]) + [a or 0.0 for a in log["val_acc"]]
    for w in T.single.WEIGHTS:
        flat += [g for layers in log["grad"][w] for g in layers]
    flat += [layer[k] for layers in log["attention"] for layer in layers for k in sorted(layer)]
    return [float("nan") if v is None else float(v) for v in flat]


def assert_same_runs(specs, rel: float):
    together, batched_models = T.train_group(specs, return_models=True)
    for spec, mine, model in zip(specs, together, batched_models):
        alone, reference = T.train(spec, return_model=True)
        assert (mine["status"], mine["diverged_at"]) == (alone["status"], alone["diverged_at"]), spec
        if alone["status"] == "diverged":
            continue  # blowing up amplifies rounding without bound: only where it stopped must agree
        got, want = torch.tensor(numbers(mine), dtype=torch.float64), torch.tensor(numbers(alone), dtype=torch.float64)
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=rel, atol=rel * 1e-3, equal_nan=True), (spec, (got - want).abs().max())
        for (name, a), (_, b) in zip(reference.named_parameters(), model.named_parameters()):
            a, b = a.detach(), b.detach()
            scale = a.abs().max().clamp_min(1e-12)
            assert float((a - b).abs().max() / scale) <= rel, (spec.rule, name)
    return together


def test_batched_float64_equals_separate_runs_to_1e_9():
    specs = [T.RunSpec(rule="sqrt", seed=0, lr=3e-3, steps=30, dtype="float64", **SMALL),
             T.RunSpec(rule="inv_d", seed=1, lr=1e-2, steps=30, dtype="float64", **SMALL),
             T.RunSpec(rule="none", seed=2, lr=1e-3, steps=30, dtype="float64", **SMALL)]
    assert_same_runs(specs, rel=1e-9)


def test_batched_float64_learned_qknorm_and_three_optimisers():
    specs = T.group_specs([
        T.RunSpec(rule="learned", seed=3, lr=1e-2, steps=20, optimiser="adamw", dtype="float64", **SMALL),
        T.RunSpec(rule="qknorm", seed=4, lr=0.05, steps=20, optimiser="sgd", dtype="float64", **SMALL),
        T.RunSpec(rule="const:0.125", seed=5, lr=1e-2, steps=20, optimiser="adafactor", dtype="float64", **SMALL),
        T.RunSpec(rule="power:0.75", init="t5", seed=5, lr=3e-3, steps=20, optimiser="adafactor", dtype="float64",
                  **SMALL),
    ])
    assert len(specs) == 1
    assert_same_runs(specs[0], rel=1e-9)


WIDE = dict(SMALL, d_head=40)  # heads wider than the model: the batched engine computes their bilinear forms


@pytest.mark.parametrize("n_heads", [1, 2])
def test_heads_wider_than_the_model_train_through_their_bilinear_forms_as_the_plain_model_does(n_heads):
    """q k^T = x (W_q^T W_k) x^T and p v W_o^T = p x (W_v^T W_o^T): the same function of the same weights, so
    every logged number (losses, gradient norms of W_q, W_k, W_v, W_o, attention statistics) and every final
    weight match the plain model's projections (float64), a learnable factor and three optimisers included."""
    specs = T.group_specs([
        T.RunSpec(rule="sqrt", seed=0, lr=3e-3, steps=20, dtype="float64", n_heads=n_heads, **WIDE),
        T.RunSpec(rule="none", seed=1, lr=1e-2, steps=20, optimiser="sgd", dtype="float64", n_heads=n_heads, **WIDE),
        T.RunSpec(rule="learned", seed=2, lr=1e-2, steps=20, dtype="float64", n_heads=n_heads, **WIDE),
        T.RunSpec(rule="inv_d", seed=3, lr=1e-2, steps=20, optimiser="adafactor", dtype="float64", n_heads=n_heads,
                  **WIDE)])
    assert len(specs) == 1
    models = [T.build_model(s, T.build_task(s)) for s in specs[0]]
    assert batched.BatchedTransformer(models).uses_bilinear
    assert_same_runs(specs[0], rel=1e-9)


def test_either_way_to_attend_gives_the_same_loss_and_gradients_and_bilinear_is_refused_where_it_cannot_hold():
    specs = [T.RunSpec(rule=rule, seed=s, steps=2, dtype="float64", **shape)
             for shape in (SMALL, WIDE) for s, rule in enumerate(("sqrt", "learned"))]
    x, y = T.build_task(specs[0]).batch(4, torch.Generator().manual_seed(0))
    idx, targets = x.expand(2, *x.shape), y.expand(2, *y.shape)
    for pair in (specs[:2], specs[2:]):  # heads narrower and wider than the model
        task = T.build_task(pair[0])
        engines = [batched.BatchedTransformer([T.build_model(s, task) for s in pair], bilinear=b) for b in (False, True)]
        losses = [engine(idx, targets)[1] for engine in engines]
        assert torch.allclose(losses[0], losses[1], rtol=1e-12)
        for loss in losses:
            loss.sum().backward()
        for (name, a), b in zip(engines[0].named_parameters(), engines[1].parameters()):
            assert torch.allclose(a.grad, b.grad, rtol=1e-9, atol=1e-13), name
    task = T.build_task(specs[0])
    with pytest.raises(ValueError, match="bilinear"):
        batched.BatchedTransformer([T.build_model(dataclasses.replace(specs[2], rule="qknorm"), task)], bilinear=True)


def test_a_group_with_qknorm_keeps_the_projections_of_wide_heads():
    specs = [T.RunSpec(rule=rule, seed=s, steps=20, dtype="float64", **WIDE) for s, rule in enumerate(("sqrt", "qknorm"))]
    task = T.build_task(specs[0])
    assert not batched.BatchedTransformer([T.build_model(s, task) for s in specs]).uses_bilinear
    assert batched.BatchedTransformer([T.build_model(specs[0], task)]).uses_bilinear
    assert_same_runs(specs, rel=1e-9)


def test_batched_float32_equals_separate_runs_over_50_steps():
    specs = [T.RunSpec(rule=rule, seed=seed, lr=lr, steps=50, **SMALL)
             for rule, seed, lr in (("sqrt", 0, 3e-3), ("inv_d", 1, 1e-2), ("qknorm", 2, 3e-3))]
    assert_same_runs(specs, rel=1e-4)


def test_a_diverging_run_leaves_its_neighbours_untouched():
    calm = [T.RunSpec(rule="sqrt", seed=0, lr=3e-3, steps=20, optimiser="sgd", dtype="float64", **SMALL),
            T.RunSpec(rule="none", seed=1, lr=1e-2, steps=20, optimiser="sgd", dtype="float64", **SMALL)]
    # a rate that overflows within a few steps whatever the order of summation (at 1e4 the blow-up takes 5 or 6
    # steps as rounding goes: the batched engine and the plain model compute the query rows' softmax differently)
    wild = T.RunSpec(rule="none", seed=2, lr=1e10, steps=20, optimiser="sgd", dtype="float64", **SMALL)
    with_wild = assert_same_runs([calm[0], wild, calm[1]], rel=1e-9)
    assert with_wild[1]["status"] == "diverged" and 0 < with_wild[1]["diverged_at"] <= 20
    without = T.train_group(calm)
    for a, b in zip((with_wild[0], with_wild[2]), without):
        assert numbers(a) == pytest.approx(numbers(b), rel=1e-12)


def test_group_specs_share_a_shape_keep_optimisers_contiguous_and_cap_the_size():
    specs = [T.RunSpec(rule=r, optimiser=o, seed=s, d_head=d, steps=5)
             for d in (8, 16) for o in ("sgd", "adamw") for r in ("sqrt", "none") for s in range(3)]
    groups = T.group_specs(specs, max_runs=5, cache_bytes=None)
    assert sum(len(g) for g in groups) == len(specs)
    assert all(len(g) <= 5 and len({s.shape() for s in g}) == 1 for g in groups)
    for g in groups:
        kinds = [s.optimiser for s in g]
        assert kinds == sorted(kinds, key=T.OPTIMISERS.index)
    assert [len(g) for g in T.group_specs(specs, max_runs=1)] == [1] * len(specs)
    assert [len(g) for g in groups] == [4, 4, 4, 4, 4, 4]  # 12 runs per shape, cap 5: 4+4+4, not 5+5+2
    assert [len(g) for g in T.group_specs(specs[:12] * 2 + specs[:1], max_runs=24, cache_bytes=None)] == [13, 12]
    with pytest.raises(ValueError, match="max_runs"):
        T.group_specs(specs, max_runs=0)


def test_groups_stay_within_the_cache_sized_cap_of_their_shape():
    from attnscale.train.spec import GROUP_CACHE_BYTES, shape_cap
    # the quick preset's recall shape: 64 examples x 9 tokens x (4 x 2 heads x width + 10 x 32) values of 4 bytes,
    # the width d_head, or d_model (32) for heads wider than the model (their bilinear forms), unless QK-norm
    recall = dict(task="recall", batch_size=64, n_pairs=3, n_queries=3, n_heads=2, d_model=32, steps=5)
    bilinear = GROUP_CACHE_BYTES // (64 * 9 * 576 * 4)
    for d_head, cap in ((16, GROUP_CACHE_BYTES // (64 * 9 * 448 * 4)), (64, bilinear), (256, bilinear)):
        assert shape_cap(T.RunSpec(d_head=d_head, **recall)) == cap
    assert (shape_cap(T.RunSpec(d_head=64, rule="qknorm", **recall)), shape_cap(T.RunSpec(d_head=256, rule="qknorm", **recall))) == (4, 1)
    assert shape_cap(T.RunSpec(d_head=256, **recall), kinds=["fixed", "qknorm"]) == 1  # a group with a QK-norm run
    assert shape_cap(T.RunSpec(d_head=16, dtype="float64", **recall)) == GROUP_CACHE_BYTES // (64 * 9 * 448 * 8)
    specs = [T.RunSpec(d_head=d, seed=s, **recall) for d in (16, 64, 256) for s in range(20)]
    sizes = {d: sorted(len(g) for g in T.group_specs(specs) if g[0].d_head == d) for d in (16, 64, 256)}
    assert bilinear == 6 and sizes == {16: [6, 7, 7], 64: [5] * 4, 256: [5] * 4}
    with_qknorm = specs[40:] + [dataclasses.replace(specs[40], rule="qknorm")]
    assert [len(g) for g in T.group_specs(with_qknorm)] == [1] * 21
    assert [len(g) for g in T.group_specs(specs, cache_bytes=None)] == [20, 20, 20]
    on_gpu = [dataclasses.replace(s, device="cuda") for s in specs]  # a GPU wants big batches: no cache cap
    assert [len(g) for g in T.group_specs(on_gpu)] == [20, 20, 20]


def test_batched_optimisers_match_torch_per_run():
    """One step of each batched optimiser on stacked random tensors equals torch.optim on each slice."""
    gen = torch.Generator().manual_seed(0)
    decay = 0.1
    for kind, make in (("adamw", lambda p, lr: torch.optim.AdamW([p], lr=lr, betas=T.single.ADAMW_BETAS,
                                                                 weight_decay=decay)),
                       ("sgd", lambda p, lr: torch.optim.SGD([p], lr=lr, momentum=T.single.SGD_MOMENTUM,
                                                             weight_decay=decay)),
                       ("adafactor", lambda p, lr: torch.optim.Adafactor([p], lr=lr, weight_decay=decay))):
        for shape in ((3,), (3, 5), (3, 4, 6)):
            start = torch.randn(shape, generator=gen, dtype=torch.float64)
            grads = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(3)]
            lrs = torch.tensor([1e-3, 1e-2, 0.3], dtype=torch.float64)
            stacked = torch.nn.Parameter(start.clone())
            opt = optim.BatchedOptimiser([stacked], [(kind, 0, 3)], weight_decay=decay)
            for g in grads:
                stacked.grad = g.clone()
                opt.step(lrs, torch.ones(3, dtype=torch.bool))
            for k in range(3):
                alone = torch.nn.Parameter(start[k].clone())
                reference = make(alone, float(lrs[k]))
                for g in grads:
                    alone.grad = g[k].clone()
                    reference.step()
                assert torch.allclose(stacked[k].detach(), alone.detach(), rtol=1e-12, atol=1e-14), (kind, shape, k)


@pytest.mark.parametrize("shape", [SMALL, WIDE])
def test_attention_kernels_agree_and_bad_kernel_is_refused(shape):
    spec = T.RunSpec(rule="sqrt", steps=3, dtype="float64", **shape)
    task = T.build_task(spec)
    models = [T.build_model(dataclasses.replace(spec, seed=s), task) for s in range(2)]
    x, y = task.batch(4, torch.Generator().manual_seed(0))
    idx, targets = x.expand(2, *x.shape), y.expand(2, *y.shape)
    assert batched.BatchedTransformer(models).uses_bilinear == (shape is WIDE)
    losses = {kernel: batched.BatchedTransformer(models, kernel=kernel)(idx, targets)[1] for kernel in ("sdpa", "math")}
    observed: list = []
    dense = batched.BatchedTransformer(models)(idx, targets, observe=observed)[1]
    assert torch.allclose(losses["sdpa"], losses["math"], rtol=1e-12) and torch.allclose(dense, losses["math"], rtol=1e-12)
    for k, model in enumerate(models):
        assert float(losses["math"][k]) == pytest.approx(float(model(x, y)[1]), rel=1e-12)
    assert len(observed) == spec.n_layers and observed[0][1].shape[:2] == (2, 4)
    with pytest.raises(ValueError, match="kernel"):
        batched.BatchedTransformer(models, kernel="cuda-graphs")


@pytest.mark.parametrize("n_layers, shape", [(1, SMALL), (2, SMALL), (2, WIDE)])
def test_the_batched_loss_on_the_query_rows_is_the_forward_passs_loss_and_gradient(n_layers, shape):
    """Recall is trained on the loss of its query rows computed alone (the last layer's queries, MLP and
    head on those rows): per run the same loss and the same gradient for every parameter as the full
    forward pass, a learnable factor and QK-norm's gain included (float64); heads wider than the model
    through their bilinear forms."""
    spec = T.RunSpec(steps=3, dtype="float64", n_layers=n_layers, **shape)
    task = T.build_task(spec)
    models = [T.build_model(dataclasses.replace(spec, rule=rule, seed=s), task)
              for s, rule in enumerate(("sqrt", "learned", "qknorm" if shape is SMALL else "none"))]
    x, y = task.batch(4, torch.Generator().manual_seed(0))
    idx, targets = x.expand(3, *x.shape), y.expand(3, *y.shape)
    full, rows = batched.BatchedTransformer(models), batched.BatchedTransformer(models)
    assert full.uses_bilinear == (shape is WIDE)
    full_loss, rows_loss = full(idx, targets)[1], rows(idx, targets, rows=task.loss_rows)[1]
    assert rows(idx, targets, rows=task.loss_rows)[0].shape == (3, 4, spec.n_queries, task.vocab_size)
    assert torch.allclose(rows_loss, full_loss, rtol=1e-12, atol=0)
    full_loss.sum().backward()
    rows_loss.sum().backward()
    for (name, a), b in zip(full.named_parameters(), rows.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-9, atol=1e-13), name
    with pytest.raises(ValueError, match="no target outside them"):
        full(idx, targets, rows=slice(-1, None))
    with pytest.raises(ValueError, match="observe"):
        full(idx, targets, observe=[], rows=task.loss_rows)
    with pytest.raises(ValueError, match="select no position"):
        full(idx, torch.full_like(targets, -100), rows=slice(idx.shape[-1], None))


HEAP_CHILD = """
import resource, sys, torch
from attnscale import train as T
from attnscale.threads import keep_freed_heap
if sys.argv[1] == "kept":
    assert keep_freed_heap()
torch.set_num_threads(1)
specs = [T.RunSpec(d_head=64, seed=s, steps=2, n_pairs=3, n_queries=3) for s in range(4)]
task = T.build_task(specs[0])
model = T.batched.BatchedTransformer([T.build_model(s, task) for s in specs])
x, y = task.batch(64, torch.Generator().manual_seed(0))
def step():
    for p in model.parameters():
        p.grad = None
    model(x.expand(4, *x.shape), y.expand(4, *y.shape), rows=task.loss_rows)[1].sum().backward()
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; page faults as Linux counts them")
def test_kept_heap_spares_a_training_step_the_page_faults_of_memory_handed_back():
    """With the report's malloc settings (freed memory kept for the next step) ten training steps of the
    quick preset's d_head 64 group fault far fewer pages in than with glibc's defaults, which hand
    each step's activations back to the kernel and fault them in again on the next."""
    faults = {mode: int(subprocess.run([sys.executable, "-c", HEAP_CHILD, mode], check=True, capture_output=True,
                                       text=True).stdout) for mode in ("default", "kept")}
    assert faults["default"] > 1000 and faults["kept"] < faults["default"] / 10, faults
