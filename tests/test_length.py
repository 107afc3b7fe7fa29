"""Length terms (log-n, SSMax, a position temperature), positions for the small Transformer, and the
length lab: closed forms against Monte Carlo, rules against a float64 reference, every verdict reachable."""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics

import pytest
import torch

from attnscale import ScaledAttention, attention, claims, intervals, scaling
from attnscale.attention import capture, keys_per_query, rotate
from attnscale.lab import length as L
from attnscale.errors import UserError
from attnscale.lab.length import experiment as E
from attnscale.lab.length import verdicts as V
from attnscale.models import ModelConfig, Transformer
from attnscale.models.tasks import NeedleTask


def reference(q, k, v, spec, causal, mask=None):
    """softmax(q k^T / sqrt(d) * m(n)) v in float64, m(n) written out from the length term's definition."""
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & mask
    n = allowed.sum(dim=-1).double().clamp_min(1)
    term = scaling.parse(spec).length
    if term.kind == "logn":
        m = torch.clamp(torch.log(n) / math.log(term.base), min=1.0)
    elif term.kind == "sqrtlogn":
        m = torch.sqrt(torch.clamp(torch.log(n) / math.log(term.base), min=1.0))
    elif term.kind == "ssmax":
        m = term.coef * torch.log(n)
    else:
        m = 1 + term.coef * torch.log(1 + torch.floor(n / term.base))
    logits = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d) * m.unsqueeze(-1)
    return torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1) @ v.double()


@pytest.mark.parametrize("spec", ["sqrt+logn:8", "sqrt+sqrtlogn:2", "sqrt+ssmax", "sqrt+ssmax:0.3", "sqrt+temp:0.1:4"])
@pytest.mark.parametrize("impl", ["sdpa", "stable", "naive", "online"])
@pytest.mark.parametrize("causal", [True, False])
def test_length_terms_match_a_float64_reference(spec, impl, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    out = attention(q, k, v, scale=spec, causal=causal, impl=impl, block_size=7)
    assert torch.allclose(out, reference(q, k, v, spec, causal), atol=1e-12)


def test_length_term_counts_the_keys_a_mask_allows():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 12, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(12, 12, generator=g) > 0.3
    mask[:, 0] = True
    out = attention(q, k, v, scale="sqrt+logn:2", mask=mask, impl="stable")
    assert torch.allclose(out, reference(q, k, v, "sqrt+logn:2", False, mask), atol=1e-12)
    assert keys_per_query(3, 5, None, True).tolist() == [1, 2, 3]
    assert keys_per_query(3, 5, None, False).tolist() == [5, 5, 5]


def test_logn_is_the_plain_rule_up_to_its_base_length():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 30, 8, generator=g, dtype=torch.float64) for _ in range(3))
    assert torch.equal(attention(q, k, v, scale="sqrt+logn:30", causal=True, impl="stable"),
                       attention(q, k, v, scale="sqrt", causal=True, impl="stable"))


@pytest.mark.parametrize("spec, fragment", [("sqrt+logn:1", "base length L must be >= 2"),
                                            ("sqrt+ssmax:-1", "initial s must be finite and > 0"),
                                            ("sqrt+temp:0.1", "unknown length term 'temp:0.1'"),
                                            ("sqrt+", "unknown length term ''"),
                                            ("bogus+logn:4", "unknown scale spec 'bogus+logn:4'")])
def test_bad_length_terms_are_named(spec, fragment):
    with pytest.raises(ValueError, match="accepted") as error:
        scaling.parse(spec)
    assert fragment in str(error.value)


def test_ssmax_learns_one_s_per_head_and_row_weights_match_the_forward():
    module = ScaledAttention(16, 2, 8, scale="sqrt+ssmax", causal=True, rope=True)
    assert module.ssmax_s.shape == (2, 1) and float(module.ssmax_s.detach()[0]) == pytest.approx(0.43)
    x = torch.randn(3, 20, 16)
    wrapped = torch.nn.Sequential(module)
    with capture(wrapped) as seen:
        wrapped(x)
    assert torch.allclose(seen["0"].probs[:, :, -4:], module.row_weights(x, slice(-4, None)), atol=1e-6)
    (module(x).sum()).backward()
    assert module.ssmax_s.grad is not None and module.ssmax_s.grad.abs().sum() > 0


def test_rope_makes_the_logit_depend_on_relative_position_only():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 8, generator=g, dtype=torch.float64), torch.randn(1, 8, generator=g, dtype=torch.float64)
    def logit(i, j):
        return float(rotate(q, torch.tensor([i])) @ rotate(k, torch.tensor([j])).T)
    assert logit(5, 2) == pytest.approx(logit(105, 102), abs=1e-9)
    assert logit(5, 2) != pytest.approx(logit(5, 3), abs=1e-6)


@pytest.mark.parametrize("pos", ["none", "rope"])
def test_a_model_without_learned_positions_runs_past_its_training_length(pos):
    model = Transformer(ModelConfig(vocab_size=10, seq_len=16, d_head=16, pos=pos, scale="sqrt+logn:16"))
    assert not hasattr(model, "pos_emb")
    logits, _ = model(torch.randint(0, 10, (2, 64)))
    assert logits.shape == (2, 64, 10)


def test_learned_positions_refuse_a_longer_sequence():
    model = Transformer(ModelConfig(vocab_size=10, seq_len=16, d_head=16))
    with pytest.raises(ValueError, match="pos 'none' or 'rope'"):
        model(torch.randint(0, 10, (1, 17)))
    with pytest.raises(ValueError, match="unknown pos"):
        ModelConfig(vocab_size=10, seq_len=16, pos="alibi")


LENGTH_RULES = ("sqrt", "sqrt+logn:4", "learned+sqrtlogn:4", "sqrt+ssmax", "none+temp:0.1:4", "qknorm+logn:4")


@pytest.mark.parametrize("pos, d_head, rules", [
    ("learned", 8, LENGTH_RULES), ("none", 8, LENGTH_RULES), ("rope", 8, LENGTH_RULES),
    ("none", 24, LENGTH_RULES[:5]),  # heads wider than the model: through their bilinear forms
    ("rope", 24, LENGTH_RULES[:5]),  # ... except under RoPE, which rotates q and k themselves
])
def test_the_batched_engine_computes_positions_and_length_terms_as_the_plain_model_does(pos, d_head, rules):
    """Per run, the batched engine's loss and every parameter's gradient (SSMax's s included) equal the
    plain model's, with every query row or the scored rows alone, for each position scheme (float64)."""
    from attnscale.train.batched import BatchedTransformer, stack_name

    models = [Transformer(ModelConfig(vocab_size=20, seq_len=12, d_model=16, n_heads=2, d_head=d_head, scale=rule,
                                      pos=pos), seed=i).double() for i, rule in enumerate(rules)]
    engine = BatchedTransformer(models)
    assert engine.uses_bilinear == (d_head > 16 and pos != "rope")
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 20, (3, 12), generator=gen), torch.randint(0, 20, (3, 12), generator=gen)
    y[:, :-3] = -100  # scored at the last three positions only, as the needle task is
    idx, targets = x.expand(len(rules), 3, 12), y.expand(len(rules), 3, 12)
    for rows in (None, slice(-3, None)):
        for m in models:
            m.zero_grad()
            (m(x, y)[1] if rows is None else m.loss_at(x, y, rows)).backward()
        engine.zero_grad()
        losses = engine(idx, targets, rows=rows)[1]
        losses.sum().backward()
        for k, m in enumerate(models):
            assert float(losses[k].detach()) == pytest.approx(float(m(x, y)[1].detach()), rel=1e-12), (rules[k], rows)
            for name, param in m.named_parameters():
                got = engine.params[stack_name(name)].grad[k]
                assert torch.allclose(got, param.grad, rtol=1e-9, atol=1e-13), (rules[k], name, rows)
    observed: list = []
    assert torch.allclose(engine(idx, targets, observe=observed)[1], losses.detach(), rtol=1e-12)
    for k, m in enumerate(models):
        with capture(m) as seen:
            m(x)
        for layer, (logits, probs) in enumerate(observed):
            want = seen[f"blocks.{layer}.attn"]
            assert torch.allclose(probs[k], want.probs, rtol=1e-9, atol=1e-12), (rules[k], layer)
            assert torch.allclose(logits[k], want.logits, rtol=1e-9, atol=1e-12, equal_nan=True), (rules[k], layer)
    if pos != "learned":  # no learned positions: any length, beyond seq_len too
        longer = torch.randint(0, 20, (2, 17), generator=gen)
        for k, logits in enumerate(engine(longer.expand(len(rules), 2, 17))[0]):
            assert torch.allclose(logits, models[k](longer)[0], rtol=1e-9, atol=1e-12), rules[k]


def test_runs_with_a_length_term_train_in_one_batch_as_they_train_alone():
    from attnscale.train import group
    from attnscale.train.single import train

    specs = [dict(task="recall", rule=rule, seed=i, steps=6, log_every=2, n_pairs=2, n_queries=2, d_head=8,
                  dtype="float64") for i, rule in enumerate(("sqrt+logn:4", "sqrt+ssmax", "sqrt"))]
    together = group.train_group(specs)
    for spec, mine in zip(specs, together):
        alone = train(spec)
        assert mine["log"]["val_loss"] == pytest.approx(alone["log"]["val_loss"], rel=1e-9)
        for weight in ("W_q", "W_k"):
            flat = [[g for layer in log["grad"][weight] for g in layer] for log in (mine["log"], alone["log"])]
            assert flat[0] == pytest.approx(flat[1], rel=1e-9)


def test_the_needle_task_puts_each_answer_at_its_needle():
    task = NeedleTask(haystack=20, n_needles=3, n_keys=6, n_values=4)
    x, y = task.batch(64, torch.Generator().manual_seed(0))
    pairs, asked = x[:, :20], x[:, 20:] - 24
    for row in range(64):
        for j in range(3):
            at = (pairs[row] // 4 == asked[row, j]).nonzero().flatten()
            assert len(at) == 1 and int(pairs[row, at[0]] % 4) == int(y[row, 20 + j])
    assert (y[:, :20] == -100).all()


# --------------------------------------------------------------------------- closed forms against Monte Carlo

def test_needle_among_equal_keys_is_exact():
    for n, m in ((64, 1.0), (1000, 2.5)):
        logits = torch.full((n,), -2.0, dtype=torch.float64)
        logits[0] = 3.0
        assert E.equal_keys_weight(n, m) == pytest.approx(float(torch.softmax(m * logits, 0)[0]), rel=1e-12)


def test_the_fig1_limits():
    # s D > 1: the needle's weight tends to 1; s D < 1: to 0 (D = 5)
    s_large, s_small = 0.43, 0.1
    assert E.equal_keys_weight(10**8, s_large * math.log(10**8)) > 0.999
    assert E.equal_keys_weight(10**8, s_small * math.log(10**8)) < 1e-3  # about n^(sD - 1) = 1e-4


@pytest.mark.parametrize("n, m", [(1024, 1.0), (4096, 1.0), (4096, 1.5)])
def test_noisy_needle_closed_form_against_monte_carlo(n, m):
    g = torch.Generator().manual_seed(n)
    draws = 4000
    others = torch.randn(draws, n - 1, generator=g, dtype=torch.float64)
    logits = torch.cat([torch.full((draws, 1), 3.0, dtype=torch.float64), others], dim=1) * m
    weight = torch.softmax(logits, dim=1)[:, 0]
    mean, se = float(weight.mean()), float(weight.std()) / math.sqrt(draws)
    closed = E.needle_weight_closed(n, m, 3.0, 1.0)
    assert abs(mean - closed) < 4 * se + 0.03 * closed


def test_entropy_fraction_under_the_sqrt_log_law_tends_to_one_minus_c_squared():
    g = torch.Generator().manual_seed(0)
    n, c = 65536, 0.5
    logits = torch.randn(200, n, generator=g, dtype=torch.float64) * c * math.sqrt(2 * math.log(n))
    p = torch.softmax(logits, dim=1)
    fraction = float((-(p * p.log()).sum(dim=1) / math.log(n)).mean())
    assert fraction == pytest.approx(1 - c * c, abs=0.02)


# --------------------------------------------------------------------------- the lab and its verdicts

TINY = E.Config(ns=(16, 64, 65536), draws=40, steps=30, val_size=16, multiples=(1, 2), seeds=4, best_seeds=4,
                lrs=(3e-3,), base_length=18)


@pytest.fixture(scope="module")
def measured():
    return E.run(TINY)


def test_the_lab_runs_every_rule_at_its_best_rate(measured):
    assert {b["rule"] for b in measured["best"]} == set(TINY.rules)
    assert measured["runs"] == len(measured["models"]) >= len(TINY.rules) * TINY.seeds
    assert measured["lengths"] == [18, 36]


def test_only_the_rules_named_for_positions_are_trained_with_them():
    config = dataclasses.replace(TINY, rules=("sqrt", "sqrt+logn:16"), positions=("none", "rope"),
                                 rules_with_positions=("sqrt",), steps=4, seeds=1, best_seeds=1, ns=(16, 64))
    measured = E.run(config)
    assert {(b["pos"], b["rule"]) for b in measured["best"]} == {("none", "sqrt"), ("none", "sqrt+logn:16"),
                                                                 ("rope", "sqrt")}
    with pytest.raises(UserError, match="not among them: \\['sqrt\\+ssmax'\\]"):
        dataclasses.replace(TINY, rules=("sqrt",), positions=("none", "rope"), rules_with_positions=("sqrt", "sqrt+ssmax"))


@pytest.mark.parametrize("rule, length, source", [("sqrt+logn:34", 34, "sqrt"), ("sqrt+logn:34", 35, "sqrt+logn:34"),
                                                  ("inv_d+logn:64", 18, "inv_d"), ("sqrt+ssmax", 18, "sqrt+ssmax"),
                                                  ("sqrt+temp:0.1:34", 34, "sqrt+temp:0.1:34"), ("sqrt", 18, "sqrt")])
def test_a_rule_trains_as_the_plain_rule_only_where_its_term_is_exactly_one(rule, length, source):
    assert E.trained_as(rule, length) == source


@pytest.mark.parametrize("pos", ["none", "rope"])
def test_log_n_below_its_base_length_trains_bit_for_bit_as_the_plain_rule(pos):
    config = dataclasses.replace(TINY, steps=12)
    plain = E.train_one(config, "sqrt", pos, 3e-3, 0).state_dict()
    logn = E.train_one(config, "sqrt+logn:34", pos, 3e-3, 0).state_dict()
    assert plain.keys() == logn.keys() and all(torch.equal(plain[k], logn[k]) for k in plain)


@pytest.mark.parametrize("pos", ["none", "rope"])
def test_models_trained_together_end_where_each_trained_alone_ends(pos):
    """The lab trains a phase's models in one batch (train_together); each ends with the weights the plain
    loop (train_one) gives it, up to float32 rounding over the steps: its own seed's batches, its own rate,
    its length term (SSMax's s learned per model)."""
    config = dataclasses.replace(TINY, steps=25)
    jobs = [("sqrt", pos, 3e-3, 0), ("sqrt+ssmax", pos, 6e-3, 0), ("sqrt+logn:16", pos, 3e-3, 1)]
    for job, together in zip(jobs, E.train_together(config, jobs)):
        alone = E.train_one(config, *job).state_dict()
        mine = together.state_dict()
        assert mine.keys() == alone.keys()
        for name in alone:
            assert torch.allclose(mine[name], alone[name], rtol=1e-4, atol=1e-5), (job, name)


def test_a_model_whose_loss_turns_nan_stops_and_leaves_the_others_trained_together_untouched():
    config = dataclasses.replace(TINY, steps=10)
    jobs = [("sqrt", "none", 3e-3, 0), ("sqrt", "none", float("inf"), 1), ("sqrt+ssmax", "none", 3e-3, 1)]
    for job, together in zip(jobs, E.train_together(config, jobs)):
        alone, mine = E.train_one(config, *job).state_dict(), together.state_dict()
        for name in alone:
            assert torch.allclose(mine[name], alone[name], rtol=1e-4, atol=1e-5, equal_nan=True), (job, name)
    assert not all(torch.isfinite(t).all() for t in E.train_one(config, *jobs[1]).state_dict().values())


def test_the_lab_trains_a_shared_model_once_and_evaluates_it_under_each_rule(measured):
    by_cell = {(r["rule"], r["lr"], r["seed"]): r for r in measured["models"]}
    for (rule, lr, seed), row in by_cell.items():
        assert row["trained_as"] == E.trained_as(rule, TINY.base_length)
        if row["trained_as"] != rule:
            plain = by_cell[(row["trained_as"], lr, seed)]
            assert row["accuracy"][0] == plain["accuracy"][0]  # same weights, same logits at the base length
    assert measured["trainings"] == len({(r["trained_as"], r["pos"], r["lr"], r["seed"]) for r in measured["models"]})
    assert measured["trainings"] < measured["runs"]


def with_runs(result, rule, accuracy, weight):
    edited = copy.deepcopy(result)
    for r in edited["models"]:
        if r["rule"] == rule:
            r["accuracy"], r["needle_weight"] = list(accuracy), list(weight)
    return edited


def test_l1_trained_part_reaches_each_state(measured):
    fading = with_runs(measured, "sqrt", [0.9, 0.8], [0.6, 0.3])
    keeping = with_runs(measured, "sqrt", [0.9, 0.9], [0.6, 0.6])
    assert L.judge(fading)["L1"].readings["trained"].state == claims.HOLDS
    assert L.judge(keeping)["L1"].readings["trained"].state == claims.FAILS
    mixed = copy.deepcopy(fading)
    for r in [r for r in mixed["models"] if r["rule"] == "sqrt"][:2]:
        r["needle_weight"] = [0.6, 0.6]
    assert L.judge(mixed)["L1"].readings["trained"].state == claims.UNDECIDED  # 2 of 4: Wilson straddles 1/2
    unlearned = with_runs(measured, "sqrt", [0.2, 0.2], [0.6, 0.3])
    assert L.judge(unlearned)["L1"].readings["trained"].state == claims.UNDECIDED  # no seed learned the task


def test_l2_and_l4_reach_supported_and_refuted(measured):
    good = with_runs(with_runs(with_runs(with_runs(measured, "sqrt", [0.9, 0.7], [0.6, 0.3]), V.LOGN, [0.9, 0.9],
                                         [0.6, 0.6]), V.LOGN_TRAINED, [0.9, 0.9], [0.6, 0.6]), V.SSMAX, [0.9, 0.9], [0.6, 0.6])
    bad = with_runs(with_runs(with_runs(with_runs(measured, "sqrt", [0.9, 0.9], [0.6, 0.6]), V.LOGN, [0.9, 0.7],
                                        [0.6, 0.3]), V.LOGN_TRAINED, [0.9, 0.7], [0.6, 0.3]), V.SSMAX, [0.9, 0.7], [0.6, 0.3])
    # the RoPE assertion is not trained in this fixture (as in the quick preset): untested is not
    # supported, so the label stays open between the two labels it could still take
    good_l4, bad_l4 = L.judge(good)["L4"], L.judge(bad)["L4"]
    assert good_l4.verdict == claims.INCONCLUSIVE and good_l4.line.startswith(
        "inconclusive (supported or partly supported, as the open parts turn out")
    assert bad_l4.verdict == claims.INCONCLUSIVE and bad_l4.line.startswith(
        "inconclusive (partly supported or refuted, as the open parts turn out")
    assert "not tested in this preset" in good_l4.line and "not tested in this preset" in bad_l4.line
    assert L.judge(good)["L2"].readings["trained_logn"].state == claims.HOLDS
    assert L.judge(bad)["L2"].readings["trained_logn"].state == claims.FAILS


def test_log_n_keeps_only_where_both_log_n_models_keep(measured):
    """The model trained with log_16 n and the sqrt weights run under log_34 n are two settings of one part:
    one keeping and one losing its needle is 'holds in part', each named."""
    trained = {r["trained_as"] for r in measured["models"] if r["rule"] == V.LOGN_TRAINED}
    assert trained == {V.LOGN_TRAINED}  # acting within the training length (from 16 keys on), it is trained, not borrowed
    split = with_runs(with_runs(measured, V.LOGN, [0.9, 0.9], [0.6, 0.6]), V.LOGN_TRAINED, [0.9, 0.7], [0.6, 0.3])
    for claim, key in (("L2", "trained_logn"), ("L4", "logn_keeps")):
        reading = L.judge(split)[claim].readings[key]
        assert reading.state == claims.MIXED
        assert {s["where"]: s["state"] for s in reading.settings} == {V.LOGN_SETTINGS[0]: claims.HOLDS,
                                                                      V.LOGN_SETTINGS[1]: claims.FAILS}
    older = copy.deepcopy(measured)  # a report from before the trained log-n model reads the other alone
    older["models"] = [r for r in older["models"] if r["rule"] != V.LOGN_TRAINED]
    older["best"] = [b for b in older["best"] if b["rule"] != V.LOGN_TRAINED]
    assert L.judge(older)["L2"].readings["trained_logn"].settings == []


def test_l3_trained_part_reaches_holds_and_fails(measured):
    """L3 votes on trained models only: log_16 n keeping its needle while sqrt(log_16 n) keeps less of it, seed
    by seed, holds; sqrt(log_16 n) keeping as much fails, with the failing setting named."""
    keeps = with_runs(measured, V.LOGN_TRAINED, [0.9, 0.9], [0.6, 0.6])
    holds = with_runs(keeps, V.SQRT_LOG_TRAINED, [0.9, 0.8], [0.6, 0.57])  # loses 5%: less than log n, under the 10% cut
    fails = with_runs(keeps, V.SQRT_LOG_TRAINED, [0.9, 0.9], [0.6, 0.6])
    assert L.judge(holds)["L3"].verdict == claims.SUPPORTED
    failed = L.judge(fails)["L3"]
    assert failed.verdict == claims.REFUTED
    assert "sqrt(log_16 n) keeps less: sqrt(log_16 n) keeps as much or more" in failed.readings["trained"].direction


def test_l3_contrast_is_the_paired_t_interval_of_the_kept_share(measured):
    """The difference is read seed by seed (both models start from the same weights and see the same batches)
    with a Student t interval: a known sample gives its closed-form bounds, and a spread that straddles 0 leaves
    the part open with the seeds that would decide it."""
    from scipy import stats

    keeps = with_runs(measured, V.LOGN_TRAINED, [0.9, 0.9], [0.6, 0.6])
    edited = copy.deepcopy(keeps)
    sqrt_log = sorted((r for r in edited["models"] if r["rule"] == V.SQRT_LOG_TRAINED and r["lr"] == next(
        b["lr"] for b in edited["best"] if b["rule"] == V.SQRT_LOG_TRAINED)), key=lambda r: r["seed"])
    kept = [0.5, 0.9, 1.05, 0.95][:len(sqrt_log)]
    for r, share in zip(sqrt_log, kept):
        r["accuracy"], r["needle_weight"] = [0.9, 0.9], [0.6, 0.6 * share]
    differences = [1 - share for share in kept]
    mean, sd = sum(differences) / len(differences), statistics.stdev(differences)
    half = stats.t.ppf(0.975, len(differences) - 1) * sd / math.sqrt(len(differences))
    assert intervals.t_interval(differences) == pytest.approx((mean - half, mean + half))
    reading = V.keeps_less_part(edited, V.LOGN_TRAINED, V.SQRT_LOG_TRAINED, ("log_16 n", "sqrt(log_16 n)"))
    # the half-width shrinks as 1/sqrt(n): 4 * (half / mean)^2 = 26.3 seeds would put the low end at 0
    assert reading.state == claims.UNDECIDED and reading.decide == "about 27 seeds at the observed difference"
    assert f"{mean:.3f} less per seed" in reading.measured


def edit_shares(result, rule, shares, accuracy=0.9):
    """The rule's best cell with seed i keeping shares[i] of its needle's weight (accuracy at 1x ``accuracy``)."""
    edited = copy.deepcopy(result)
    best_lr = next(b["lr"] for b in edited["best"] if b["rule"] == rule)
    cell = sorted((r for r in edited["models"] if r["rule"] == rule and r["lr"] == best_lr), key=lambda r: r["seed"])
    for r, share in zip(cell, shares):
        r["accuracy"], r["needle_weight"] = [accuracy, accuracy], [0.6, 0.6 * share]
    return edited


def test_l3_contrast_holds_and_fails_with_spread_and_pairs_seeds_by_number(measured):
    names = ("log_16 n", "sqrt(log_16 n)")
    keeps = edit_shares(measured, V.LOGN_TRAINED, [1.0, 0.98, 1.02, 1.0])

    def read(edited):
        return V.keeps_less_part(edited, V.LOGN_TRAINED, V.SQRT_LOG_TRAINED, names)
    less = read(edit_shares(keeps, V.SQRT_LOG_TRAINED, [0.9, 0.93, 0.95, 0.91]))
    assert less.state == claims.HOLDS and less.moved == {"0.8": claims.HOLDS, "1.2": claims.HOLDS}
    more = read(edit_shares(keeps, V.SQRT_LOG_TRAINED, [1.1, 1.05, 1.12, 1.08]))
    assert more.state == claims.FAILS and more.direction == "sqrt(log_16 n) keeps as much or more, not less"
    # a seed where sqrt(log n) did not learn the task drops out of both sides: three pairs, not four
    unlearned = edit_shares(keeps, V.SQRT_LOG_TRAINED, [0.9, 0.93, 0.95, 0.91])
    first = min((r for r in unlearned["models"] if r["rule"] == V.SQRT_LOG_TRAINED), key=lambda r: r["seed"])
    first["accuracy"] = [0.1, 0.1]
    three = read(unlearned)
    assert "over the 3 seeds both learned at" in three.measured
    numbers = V.numbers_of(unlearned)
    assert numbers["sqrt_log_trained_kept"] == pytest.approx((0.93 + 0.95 + 0.91) / 3)
    assert numbers["logn_trained_kept"] == pytest.approx((0.98 + 1.02 + 1.0) / 3)
    assert numbers["kept_difference"] == pytest.approx(numbers["logn_trained_kept"] - numbers["sqrt_log_trained_kept"])
    # fewer than two seeds learned under both: open, and the numbers say so with None
    lone = edit_shares(keeps, V.SQRT_LOG_TRAINED, [0.9, 0.9, 0.9, 0.9], accuracy=0.1)
    assert read(lone).state == claims.UNDECIDED and V.numbers_of(lone)["kept_difference"] is None


def test_t_interval_refuses_what_it_cannot_read():
    with pytest.raises(UserError, match="need at least two values for the interval of a mean, got 1"):
        intervals.t_interval([0.5])
    with pytest.raises(UserError, match="needs finite values, got nan"):
        intervals.t_interval([0.5, float("nan")])
    with pytest.raises(UserError, match=r"level must lie in \(0, 1\), got 1.5"):
        intervals.t_interval([0.5, 0.6], level=1.5)
    with pytest.raises(UserError, match="needs numbers"):
        intervals.t_interval(["a", 0.6])


def test_l3_parts_follow_the_numbers(measured):
    found = L.judge(measured)["L3"]
    assert found.readings["needle_log"].state == claims.HOLDS  # exact: log_18 n keeps margin 5, sqrt(log n) does not
    flat = copy.deepcopy(measured)
    for r in flat["init"]:
        if r["name"] == "log":
            r["entropy_mc"] = 0.8  # log n no longer lowers the entropy fraction
    assert L.judge(flat)["L3"].readings["entropy_sqrt_log"].state == claims.FAILS


def test_statements_stay_out_of_the_source_tally(measured):
    rows = claims.evaluate({"length": L.judge(measured)}, claims.STATEMENTS)
    assert [r["id"] for r in rows] == ["L1", "L2", "L3", "L4"]
    assert all(c.id.startswith("C") for c in claims.CLAIMS) and len(claims.CLAIMS) == 18


def test_the_answer_reads_a_real_length_result(measured):
    from attnscale import answer

    report = {"preset": "quick", "seed": 0, "claims": claims.evaluate({}),
              "statements": claims.evaluate({"length": L.judge(measured)}, claims.STATEMENTS)}
    for lang in answer.LANGS:
        text = answer.compose(report, lang)["follow_ups"][3]["answer"][0]
        assert "L1" in text and "L3" in text and "L4" in text  # L4 pending here: no tiny model learned the task


def test_the_monte_carlo_drawn_in_blocks_is_the_one_draw_of_every_row(monkeypatch):
    """Rows drawn a block at a time (blocks of 16 rows: torch fills normals 16 at a time) are the very rows of one
    draw of them all, so bounding the memory changes no draw; each statistic is per row."""
    config = dataclasses.replace(E.PRESETS["quick"], draws=200, ns=(16, 300))
    monkeypatch.setattr(E, "CHUNK_VALUES", 16 * 40)  # blocks of 32 rows at width 15, 16 at 299 and 300
    for width in (15, 299, 300):
        blocks = E.per_row(config, width, torch.Generator().manual_seed(5), [1.0, 2.5],
                           lambda logits, m: E.needle_weight(logits, config.margin, m))
        whole = torch.randn(config.draws, width, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        for m, found in zip([1.0, 2.5], blocks):
            assert torch.equal(found, E.needle_weight(whole * config.logit_std, config.margin, m))
    entropy = E.per_row(config, 300, torch.Generator().manual_seed(5), [0.5], lambda x, m: E.normalised_entropy(x * m, 300))
    whole = torch.randn(config.draws, 300, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(entropy[0], E.normalised_entropy(whole * config.logit_std * 0.5, 300))


def test_an_assertion_of_two_things_fails_where_either_does():
    """L4's RoPE part, "log-n keeps the accuracy that 1/sqrt(d_k) alone loses": 1/sqrt(d_k) losing it (holds) while
    log-n loses it too (fails) is a failure of the part, not a part that holds in part; holds only where both
    hold; undecided where one is open and none fails."""
    from attnscale.lab.length.verdicts import both

    def reading(state):
        return claims.Reading(state, measured=state, moved={"x0.8": state, "x1.2": state})

    H, F, U = claims.HOLDS, claims.FAILS, claims.UNDECIDED
    assert both(reading(H), reading(F), ("sqrt", "log-n")).state == F
    assert both(reading(F), reading(H), ("sqrt", "log-n")).state == F
    assert both(reading(H), reading(H), ("sqrt", "log-n")).state == H
    open_part = both(reading(H), reading(U), ("sqrt", "log-n"))
    assert open_part.state == U and open_part.could_be == [H, F]
    assert both(reading(F), reading(U), ("sqrt", "log-n")).state == F
    assert both(reading(H), reading(F), ("sqrt", "log-n")).moved == {"x0.8": F, "x1.2": F}
    assert claims.over_settings([H, F]) == claims.MIXED  # read as settings, the same states would hold in part
