"""The small Transformer and its tasks: shapes, causality, seeding, observation points,
the T5 folding identity at init, and the tasks' data (recall answers, the Shakespeare split)."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from attnscale import capture
from attnscale.models import IGNORE_INDEX, ModelConfig, Transformer
from attnscale.models.tasks import RecallTask, ShakespeareTask, load_corpus, make_task


def small(**kw):
    base = dict(vocab_size=20, seq_len=12, d_model=16, n_layers=2, n_heads=2, d_head=8)
    base.update(kw)
    return ModelConfig(**base)


def test_shapes_and_loss_ignore_index():
    model = Transformer(small())
    x = torch.randint(0, 20, (3, 12))
    y = torch.full_like(x, IGNORE_INDEX)
    y[:, -1] = 5
    logits, loss = model(x, y)
    assert logits.shape == (3, 12, 20)
    expected = torch.nn.functional.cross_entropy(logits[:, -1], y[:, -1])
    assert torch.allclose(loss, expected)


@settings(max_examples=15, deadline=None)
@given(cut=st.integers(1, 11), seed=st.integers(0, 1000))
def test_causal_future_tokens_do_not_change_the_past(cut, seed):
    model = Transformer(small(), seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 20, (2, 12), generator=g)
    x2 = x.clone()
    x2[:, cut:] = torch.randint(0, 20, (2, 12 - cut), generator=g)
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(x2)
    assert torch.allclose(a[:, :cut], b[:, :cut], atol=1e-5)


def test_same_seed_same_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = Transformer(small(), seed=7)
    after = torch.rand(1)
    b = Transformer(small(), seed=7)
    c = Transformer(small(), seed=8)
    assert torch.equal(before, after)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
    assert any(not torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


def test_d_head_independent_of_d_model_and_observation_points():
    model = Transformer(small(d_model=16, n_heads=3, d_head=40, n_layers=3))
    assert model.blocks[0].attn.w_q.weight.shape == (120, 16)
    with capture(model) as seen:
        model(torch.randint(0, 20, (2, 12)))
    assert list(seen) == model.observation_points() == ["blocks.0.attn", "blocks.1.attn", "blocks.2.attn"]
    assert seen["blocks.2.attn"].probs.shape == (2, 3, 12, 12)
    assert len(model.attention_weights()) == 3 and set(model.attention_weights()[0]) == {"W_q", "W_k", "W_v", "W_o"}


def test_capture_path_equals_fused_path():
    model = Transformer(small(scale="inv_d")).eval()
    x = torch.randint(0, 20, (2, 12))
    with torch.no_grad():
        fused, _ = model(x)
        with capture(model):
            dense, _ = model(x)
    assert torch.allclose(fused, dense, atol=1e-5)


@pytest.mark.parametrize("n_layers,pos,scale", [(1, "none", "sqrt"), (1, "rope", "sqrt+ssmax"), (2, "learned", "inv_d"),
                                                 (2, "rope", "sqrt+logn:4"), (3, "none", "sqrt+sqrtlogn:4")])
def test_logits_at_some_rows_equal_the_forward_passs_rows(n_layers, pos, scale):
    """logits_at runs the last block on the asked rows only; its logits and the last layer's
    probabilities are the full forward pass's at those rows (the dense capture path's probabilities)."""
    model = Transformer(small(n_layers=n_layers, pos=pos, scale=scale), seed=1).eval()
    x = torch.randint(0, 20, (3, 12), generator=torch.Generator().manual_seed(2))
    rows = slice(-4, None)
    with torch.no_grad(), capture(model) as seen:
        full, _ = model(x)
    logits, probs = model.logits_at(x, rows)
    assert logits.shape == (3, 4, 20) and probs.shape == (3, 2, 4, 12)
    assert torch.allclose(logits, full[:, rows], atol=1e-5)
    assert torch.allclose(probs, seen[f"blocks.{n_layers - 1}.attn"].probs[:, :, rows], atol=1e-6)
    middle = model.logits_at(x, slice(3, 5))[0]
    assert torch.allclose(middle, full[:, 3:5], atol=1e-5)  # causal rows inside the sequence too


@pytest.mark.parametrize("n_layers,pos,scale", [(1, "none", "sqrt"), (1, "rope", "sqrt+ssmax"), (1, "none", "sqrt+logn:4"),
                                                 (2, "learned", "inv_d"), (3, "rope", "sqrt+sqrtlogn:4")])
def test_loss_at_the_scored_rows_is_the_forward_passs_loss_and_gradient(n_layers, pos, scale):
    """Training on the scored rows alone (what the length lab does) is training on the forward pass's
    loss: the same value and the same gradient for every parameter (SSMax's s included), in float64
    to well below float32's rounding."""
    config = small(n_layers=n_layers, pos=pos, scale=scale)
    full_model = Transformer(config, seed=3).double()
    rows_model = Transformer(config, seed=3).double()
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 20, (3, 12), generator=g)
    y = torch.full_like(x, IGNORE_INDEX)
    y[:, -4:] = torch.randint(0, 20, (3, 4), generator=g)
    y[0, -2] = IGNORE_INDEX  # a row inside the slice may still carry no loss
    _, full_loss = full_model(x, y)
    rows_loss = rows_model.loss_at(x, y, slice(-4, None))
    full_loss.backward()
    rows_loss.backward()
    assert torch.allclose(rows_loss, full_loss, rtol=1e-12, atol=0)
    for (name, a), b in zip(full_model.named_parameters(), rows_model.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-9, atol=1e-13), name


def test_loss_at_refuses_targets_outside_its_rows():
    model = Transformer(small())
    x = torch.randint(0, 20, (2, 12))
    y = torch.full_like(x, IGNORE_INDEX)
    y[:, -3:] = 1
    with pytest.raises(ValueError, match=r"rows slice\(-2, None, None\) only.*use forward"):
        model.loss_at(x, y, slice(-2, None))
    assert torch.isfinite(model.loss_at(x, y, slice(-3, None)))
    with pytest.raises(ValueError, match="select a position"):
        model.loss_at(x, torch.full_like(x, IGNORE_INDEX), slice(12, None))

@pytest.mark.parametrize("d_head", [4, 64])
def test_t5_fold_equals_sqrt_at_init(d_head):
    """none + t5 init (W_q std (d_model d_k)^-1/2) gives the same function as sqrt + unit init: the
    generator draws the same normals, scaled by 1/sqrt(d_k)."""
    x = torch.randint(0, 20, (2, 12))
    sqrt_model = Transformer(small(d_head=d_head, scale="sqrt", init="unit"), seed=3).eval()
    t5_model = Transformer(small(d_head=d_head, scale="none", init="t5"), seed=3).eval()
    with torch.no_grad():
        a, _ = sqrt_model(x)
        b, _ = t5_model(x)
    assert torch.allclose(a, b, atol=1e-5)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="d_head"):
        small(d_head=0)
    with pytest.raises(ValueError, match="scale spec"):
        small(scale="halve")
    with pytest.raises(ValueError, match="init scheme"):
        small(init="xavier")
    with pytest.raises(ValueError, match="seq_len"):
        Transformer(small())(torch.zeros(1, 13, dtype=torch.long))


@settings(max_examples=20, deadline=None)
@given(n_pairs=st.integers(1, 8), n_queries=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_recall_answers_are_the_values_of_the_queried_keys(n_pairs, n_queries, seed):
    task = RecallTask(n_pairs=n_pairs, n_queries=n_queries, n_keys=8, n_values=5)
    x, y = task.batch(4, torch.Generator().manual_seed(seed))
    assert x.shape == y.shape == (4, task.seq_len)
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        keys, values = row_x[0:2 * n_pairs:2], row_x[1:2 * n_pairs:2]
        assert len(set(keys)) == n_pairs and all(k < 8 for k in keys) and all(8 <= v < 13 for v in values)
        assert row_y[:2 * n_pairs] == [IGNORE_INDEX] * (2 * n_pairs)
        for q, target in zip(row_x[2 * n_pairs:], row_y[2 * n_pairs:]):
            assert target == values[keys.index(q)]
    assert task.chance_accuracy == pytest.approx(1 / 5)


def test_validation_sets_are_fixed():
    for task in (RecallTask(), ShakespeareTask(context=16, val_size=8)):
        a, b = task.validation(), task.validation()
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_shakespeare_corpus_and_split():
    corpus = load_corpus()
    assert len(corpus["train"]) + len(corpus["val"]) == 5_057_198
    assert len(corpus["vocab"]) == 84 and list(corpus["vocab"]) == sorted(corpus["vocab"])
    assert len(corpus["files"]["val"]) == 4 and len(corpus["files"]["train"]) == 38
    assert not set(corpus["files"]["val"]) & set(corpus["files"]["train"])
    task = ShakespeareTask(context=24)
    x, y = task.batch(5, torch.Generator().manual_seed(0))
    assert x.shape == (5, 24) and torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < task.vocab_size


def test_make_task_rejects_bad_names_and_options():
    with pytest.raises(ValueError, match="unknown task"):
        make_task("translation")
    with pytest.raises(ValueError, match="unknown option"):
        make_task("recall", context=5)
    with pytest.raises(ValueError, match="n_pairs"):
        RecallTask(n_pairs=20, n_keys=16)
