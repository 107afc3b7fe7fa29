"""The saturation lab: the row sampler against explicit q.k, the slope-vs-A relation, the softmax
derivative, the explorer contract, and every verdict rule on constructed results."""

import copy
import dataclasses
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import claims, stats
from attnscale.lab import saturation

TINY = saturation.Config(d_ks=(1, 4, 16, 64, 128, 1024), ns=(16, 128), exponents=(0.0, 0.25, 0.5, 0.75, 1.0),
                         rows=128, grad_n=32, grad_d_model=16, grad_d_v=8, grad_batch=1, deriv_points=31,
                         deriv_rows=128)


@pytest.fixture(scope="module")
def result():
    return saturation.run(TINY)


def test_sampler_matches_explicit_dot_products():
    # the shortcut qk_std |q| z has the distribution of q.k_j with gaussian keys
    d_k, n, rows, s = 8, 64, 4000, 0.7
    short = saturation.sample_rows(d_k, n, s, rows, seed=3)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(rows, 1, d_k, generator=g) * s
    k = torch.randn(rows, n, d_k, generator=g) * s
    explicit = (q * k).sum(-1)
    levels = torch.tensor([0.01, 0.1, 0.5, 0.9, 0.99])
    assert torch.allclose(torch.quantile(short.flatten()[:200_000], levels),
                          torch.quantile(explicit.flatten()[:200_000], levels), atol=0.05 * s * s * math.sqrt(d_k))
    # rows share |q|: the per-row std varies like |q| does, in both
    assert float(short.std(-1).std()) == pytest.approx(float(explicit.std(-1).std()), rel=0.1)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 4096), st.floats(0.25, 4.0))
def test_logit_std_closed_form(d_k, qk_std):
    logits = saturation.sample_rows(d_k, 256, qk_std, 256, seed=0)
    expected = qk_std**2 * math.sqrt(d_k)
    assert float(logits.pow(2).mean().sqrt()) == pytest.approx(expected, rel=0.15)


@settings(max_examples=6, deadline=None)
@given(st.floats(0.0, 1.5))
def test_slope_is_half_minus_exponent(exponent):
    d_ks = [1, 8, 64, 512, 4096]
    stds = [saturation.softmax_row_stats(d, exponent, 16, rows=512, seed=1)["logit_std"] for d in d_ks]
    assert saturation.fit_slope(d_ks, stds) == pytest.approx(0.5 - exponent, abs=0.03)


def test_slopes_and_zero_crossing(result):
    for row in result["slopes"]:
        assert row["slope"] == pytest.approx(row["theory"], abs=0.03)
    for value in result["zero_slope_exponent"].values():
        assert value == pytest.approx(0.5, abs=0.03)
    const = [r for r in result["slopes"] if r["exponent"] is None]
    assert const and all(r["slope"] == pytest.approx(0.5, abs=0.03) for r in const)


def test_fit_slope_exact():
    assert saturation.fit_slope([1, 2, 4, 8], [3 * d**0.3 for d in (1, 2, 4, 8)]) == pytest.approx(0.3)
    rows = [{"exponent": a, "slope": 0.5 - a} for a in (0.0, 0.25, 0.75, 1.0)]
    assert saturation.zero_slope_exponent(rows) == pytest.approx(0.5)


def test_explorer_function_reproduces_the_sweep(result):
    # the explorer contract: softmax_row_stats gives the very numbers the lab reports
    for row in result["sweep"]:
        if row["exponent"] in (0.5, 1.0) and row["d_k"] in (4, 128) and row["n"] == 128:
            mine = saturation.softmax_row_stats(row["d_k"], row["exponent"], row["n"], TINY.qk_std, TINY.seed, TINY.rows)
            for key in ("normalized_entropy", "max_prob", "jacobian_frobenius", "saturated_share", "uniform_share"):
                assert mine[key] == row[key]


def test_row_stats_use_the_stats_module():
    logits = saturation.sample_rows(16, 32, 1.0, 64, seed=2)
    probs = torch.softmax(logits, -1)
    got = saturation.row_stats(logits)
    assert got["normalized_entropy"] == pytest.approx(float(stats.normalized_entropy(probs).mean()), rel=1e-5)
    assert got["jacobian_frobenius"] == pytest.approx(
        float(torch.linalg.matrix_norm(stats.softmax_jacobian(probs)).mean()), rel=1e-4)


def test_rule_behaviour(result):
    pick = {(r["rule"], r["d_k"], r["n"]): r for r in result["sweep"] if r["rule"]}
    assert pick[("inv_d", 1024, 128)]["normalized_entropy"] > 0.999
    assert pick[("none", 1024, 128)]["saturated_share"] > 0.5
    assert pick[("sqrt", 1024, 128)]["saturated_share"] == 0
    for n in TINY.ns:  # at d_k = 1 every power rule has factor 1
        assert pick[("none", 1, n)]["normalized_entropy"] == pick[("inv_d", 1, n)]["normalized_entropy"]


def test_gradient_includes_the_factor(result):
    grads = {(r["rule"], r["d_k"]): r for r in result["gradient"] if r["rule"]}
    assert grads[("none", 1)]["grad_wq_output"] == grads[("inv_d", 1)]["grad_wq_output"]
    # inv_d vs sqrt at d_k = 1024: logits near 0 and the factor itself 32x smaller
    assert grads[("inv_d", 1024)]["grad_wq_output"] < grads[("sqrt", 1024)]["grad_wq_output"] / 5


def test_gradient_matches_a_plain_reference():
    # the same draws, the plain formula softmax(q k^T * d_k^-A) v, torch autograd
    config = dataclasses.replace(TINY, exponents=(0.25,), grad_n=8, grad_d_model=4, grad_d_v=3, grad_batch=2)
    d_k = 4
    row = saturation.gradient_to_wq(d_k, config)[0]
    g = torch.Generator().manual_seed(config.seed * 100_003 + d_k)
    b, n, d, dv = 2, 8, 4, 3
    x = torch.randn(b, n, d, generator=g).double()
    w_q = (torch.randn(d_k, d, generator=g) * d**-0.5).double().requires_grad_(True)
    w_k = (torch.randn(d_k, d, generator=g) * d**-0.5).double()
    w_v = (torch.randn(dv, d, generator=g) * d**-0.5).double()
    weights = torch.randn(b, n, dv, generator=g).double()
    probs = torch.softmax((x @ w_q.T) @ (x @ w_k.T).transpose(-1, -2) * d_k**-0.25, dim=-1)
    ((probs @ (x @ w_v.T)) * weights).sum(-1).mean().backward()
    assert row["grad_wq_output"] == pytest.approx(float(w_q.grad.norm()), rel=1e-4)


def test_derivative_curves(result):
    c2, c128 = result["derivative"]["2"], result["derivative"]["128"]
    xs = torch.tensor(c2["x"], dtype=torch.float64)
    assert torch.allclose(torch.tensor(c2["p"], dtype=torch.float64), torch.sigmoid(xs))
    assert torch.allclose(torch.tensor(c2["diag"], dtype=torch.float64), torch.sigmoid(xs) * torch.sigmoid(-xs))
    assert c2["p_range"] == pytest.approx([0.0474, 0.9526], abs=1e-4)
    assert c2["diag_range"][1] == pytest.approx(0.25)
    assert c128["p_range"][1] < 0.5
    for c in (c2, c128):
        assert c["formula_error"] < 1e-12
        assert c["at_100"]["diag"] < 1e-30 and c["at_100"]["max_off_diag"] < 1e-30
        # ||J||_F from the closed form equals the norm of the explicit matrix
    logits = torch.tensor([[0.3, -1.0, 2.0]], dtype=torch.float64)
    d = saturation.derivative_at(logits)
    explicit = stats.softmax_jacobian(torch.softmax(logits, -1))
    assert float(d["frobenius"]) == pytest.approx(float(torch.linalg.matrix_norm(explicit)))


def test_derivative_in_use(result):
    u2, u128 = result["derivative_in_use"]["2"], result["derivative_in_use"]["128"]
    assert u2["share_p_in_5_95"] > 0.9  # sigmoid of N(0, 2)
    assert u128["share_p_in_5_95"] < 0.1
    assert 0 < u128["diagonal_share_of_jacobian"] <= 1
    for n, used in result["derivative_in_use"].items():
        # the p_i sum to 1: at most 20 of them reach 0.05
        assert used["share_p_in_5_95"] <= min(1.0, 20 / int(n)) + 1e-12


def test_same_seed_same_numbers():
    config = dataclasses.replace(TINY, d_ks=(1, 16), ns=(16,), exponents=(0.0, 0.5), rows=32)
    a, b = saturation.run(config), saturation.run(config)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert saturation.run(dataclasses.replace(config, seed=5))["sweep"][-1] != a["sweep"][-1]


@pytest.mark.parametrize("bad", [dict(d_ks=(0,)), dict(ns=(1,)), dict(exponents=(math.nan,)), dict(qk_std=0.0),
                                 dict(rows=1), dict(device="tpu")])
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        saturation.run(dataclasses.replace(TINY, **bad))


def test_softmax_row_stats_bad_input():
    with pytest.raises(ValueError, match="d_k"):
        saturation.softmax_row_stats(0)
    with pytest.raises(ValueError, match="n must"):
        saturation.softmax_row_stats(4, 0.5, 1)


def test_result_is_json_and_figures_exist(result, tmp_path):
    json.dumps(result)
    paths = saturation.figures(result, tmp_path)
    assert set(paths) == {"C04", "C05", "C06", "C16", "C18"}
    for rels in paths.values():
        for rel in rels:
            assert (tmp_path / rel).read_bytes()[:4] == b"\x89PNG"
    assert all(rows for rows in saturation.tables(result).values())


# ---------------------------------------------------------------------------------------
# verdict rules on constructed results (copies of a real run, edited)


def _edit(result, match, **values):
    """The result with ``values`` set in the matching rows, each known exactly (its interval a point),
    unless the edit gives the interval itself (``key_ci``)."""
    res = copy.deepcopy(result)
    for row in res["sweep"]:
        if all(row.get(k) == v for k, v in match.items()):
            row.update(values)
            for key, value in values.items():
                if f"{key}_ci" in row and f"{key}_ci" not in values:
                    row[f"{key}_ci"] = [value, value]
    return res


def test_a_part_whose_interval_straddles_its_threshold_is_undecided(result):
    """An interval across a threshold leaves its part undecided: where that could turn the label
    either way the claim is inconclusive, never flipped to either end."""
    ok = _edit(result, {"rule": "sqrt"}, logit_std=1.0, share_within_3=0.99, saturated_share=0.0)
    straddles = _edit(ok, {"rule": "sqrt"}, saturated_share=0.0, saturated_share_ci=[0.0, 0.015])
    finding = saturation.judge_c04(straddles)
    assert finding.readings["unsaturated"].state == claims.UNDECIDED
    assert finding.verdict == claims.INCONCLUSIVE and "undecided: the softmax is not saturated" in finding.line
    bad = _edit(ok, {"rule": "sqrt"}, logit_std=2.0, share_within_3=0.5, saturated_share=0.5)
    assert saturation.judge_c04(_edit(bad, {"rule": "sqrt"}, saturated_share=0.5,
                                      saturated_share_ci=[0.005, 0.6])).verdict == claims.INCONCLUSIVE


def test_row_intervals_cover_the_true_share_and_std():
    """On rows drawn exactly as the lab draws them, the 95% intervals contain the population values
    (std 1 under sqrt with unit-variance q and k; share of |logit| <= 3 from the normal law at large d_k)."""
    import math as m

    logits = saturation.sample_rows(4096, 64, 1.0, 2048, seed=3) / 64
    row = saturation.row_stats(logits)
    low, high = row["logit_std_ci"]
    assert low <= 1.0 <= high and high - low < 0.05
    share = m.erf(3 / m.sqrt(2))
    assert row["share_within_3_ci"][0] <= share <= row["share_within_3_ci"][1]




def test_c04_rule(result):
    ok = _edit(result, {"rule": "sqrt"}, logit_std=1.0, share_within_3=0.99, saturated_share=0.0)
    assert saturation.judge_c04(ok).verdict == claims.SUPPORTED
    assert saturation.judge_c04(_edit(ok, {"rule": "sqrt"}, saturated_share=0.2)).verdict == claims.PARTLY
    bad = _edit(ok, {"rule": "sqrt"}, logit_std=2.0, share_within_3=0.5, saturated_share=0.5)
    assert saturation.judge_c04(bad).verdict == claims.REFUTED
    none = copy.deepcopy(result)
    none["sweep"] = [r for r in none["sweep"] if r["rule"] != "sqrt"]
    assert saturation.judge_c04(none).verdict == claims.NOT_TESTABLE


def test_c05_rule(result):
    assert saturation.judge_c05(_edit(result, {"rule": "inv_d"}, normalized_entropy=0.999, uniform_share=0.9)
                                ).verdict == claims.SUPPORTED
    assert saturation.judge_c05(_edit(result, {"rule": "inv_d"}, normalized_entropy=0.97, uniform_share=0.1)
                                ).verdict == claims.INCONCLUSIVE  # between 'near uniform' and 'far from it'
    assert saturation.judge_c05(_edit(result, {"rule": "inv_d"}, normalized_entropy=0.6, uniform_share=0.0)
                                ).verdict == claims.REFUTED
    res = copy.deepcopy(result)
    res["sweep"] = [r for r in res["sweep"] if r["d_k"] not in (64, 128)]
    assert saturation.judge_c05(res).verdict == claims.NOT_TESTABLE


def _grad_ratio(result, ratio):
    res = copy.deepcopy(result)
    sqrt = {r["d_k"]: r for r in res["gradient"] if r["rule"] == "sqrt"}
    for r in res["gradient"]:
        if r["rule"] == "none":
            r["grad_wq_output"] = ratio * sqrt[r["d_k"]]["grad_wq_output"]
    return res


def test_c06_rule(result):
    extreme = _edit(_grad_ratio(result, 0.01), {"rule": "none"}, logit_max_abs=100.0, saturated_share=0.9)
    assert saturation.judge_c06(extreme).verdict == claims.SUPPORTED
    mild = _edit(_grad_ratio(result, 5.0), {"rule": "none"}, logit_max_abs=20.0, saturated_share=0.2)
    assert saturation.judge_c06(mild).verdict == claims.REFUTED
    assert saturation.judge_c06(_edit(mild, {"rule": "none"}, saturated_share=0.8)).verdict == claims.PARTLY
    res = copy.deepcopy(result)
    res["gradient"] = []
    assert saturation.judge_c06(res).verdict == claims.NOT_TESTABLE


def _c16_edit(result, n, **values):
    """Values set at n keys, each known exactly (its interval a point)."""
    res = copy.deepcopy(result)
    row = res["derivative_in_use"][str(n)]
    row.update(values)
    for key, value in values.items():
        if f"{key}_ci" in row:
            row[f"{key}_ci"] = [value, value]
    return res


def test_c16_a_share_whose_interval_straddles_half_is_undecided(result):
    up_to = saturation.judge_c16(result).numbers["holds_up_to_n"]
    edited = copy.deepcopy(result)
    edited["derivative_in_use"][str(up_to)]["share_p_in_5_95_ci"] = [0.45, 0.55]
    finding = saturation.judge_c16(edited)
    states = {s["where"]: s["state"] for s in finding.readings["ranges"].settings}
    assert states[f"n = {up_to}"] == claims.UNDECIDED and states["n = 128"] == claims.FAILS
    assert finding.verdict == claims.PARTLY and f"at n = {up_to} the share's interval straddles" in finding.evidence


def _c16_where_the_ranges_hold(r):
    """The measurement kept to the key counts where the source's ranges hold."""
    edited = copy.deepcopy(r)
    edited["derivative_in_use"] = {n: u for n, u in r["derivative_in_use"].items()
                                   if u["share_p_in_5_95"] >= 0.5 and u["share_diag_in_5_25"] >= 0.5}
    return edited


def _c16_all_fail(r):
    """A Jacobian off autograd, far from 0 at 100, and logits too spread for the ranges even with 2 keys."""
    curves = {n: {**c, "formula_error": 1e-3, "at_100": {**c["at_100"], "diag": 0.1}} for n, c in r["derivative"].items()}
    edited = {**r, "derivative": curves}
    for n in r["derivative_in_use"]:
        edited = _c16_edit(edited, n, share_p_in_5_95=0.3, share_diag_in_5_25=0.3)
    return edited


def _c16_undecided(r):
    """The ranges measured only where they hold, one key count straddling: supported or partly."""
    edited = copy.deepcopy(_c16_where_the_ranges_hold(r))
    edited["derivative_in_use"]["2"]["share_p_in_5_95_ci"] = [0.45, 0.55]
    return edited


C16_CASES = {
    # the formula and near 0 at 100 hold, and the ranges hold at every key count measured
    claims.SUPPORTED: _c16_where_the_ranges_hold,
    # the measurement as it is: the ranges hold with few keys and fail at 128: the part holds in part
    claims.PARTLY: lambda r: r,
    claims.REFUTED: _c16_all_fail,
    claims.INCONCLUSIVE: _c16_undecided,
}


@pytest.mark.parametrize("verdict", C16_CASES)
def test_c16_rule_reaches_every_verdict(result, verdict):
    assert saturation.judge_c16(C16_CASES[verdict](result)).verdict == verdict
    # not testable / not in this preset: every preset measures the derivative, from closed forms
    assert set(C16_CASES) == set(claims.VERDICTS) - {claims.NOT_TESTABLE, claims.NOT_IN_PRESET}


def test_c16_names_where_the_ranges_hold(result):
    measured = saturation.judge_c16(result)
    up_to = measured.numbers["holds_up_to_n"]
    ranges = measured.readings["ranges"]
    assert 2 <= up_to < 128 and ranges.state == claims.MIXED
    states = {int(s["where"].split("= ")[1]): s["state"] for s in ranges.settings}
    assert all(state == claims.HOLDS for n, state in states.items() if n <= up_to) and states[128] == claims.FAILS
    assert measured.numbers["possible_up_to_n"] == 40 and "fail for realistic n" in measured.evidence
    assert measured.verdict == claims.PARTLY and "holds only in part: p_i in 0.05-0.95" in measured.line
    few = copy.deepcopy(result)  # measured only where the ranges can hold
    few["derivative_in_use"] = {n: u for n, u in few["derivative_in_use"].items() if int(n) <= up_to}
    assert saturation.judge_c16(few).verdict == claims.SUPPORTED
    # logits too spread for the ranges even with 2 keys (sqrt-scaled q.k of std 4: p_i mostly near 0 or 1)
    spread = _c16_edit(result, 2, share_p_in_5_95=0.3, share_diag_in_5_25=0.3)
    assert saturation.judge_c16(spread).readings["ranges"].settings[0] == {"where": "n = 2", "state": claims.FAILS}
    assert saturation.judge_c16(spread).verdict == claims.PARTLY


def test_c18_rule(result):
    assert saturation.judge_c18(result).verdict == claims.SUPPORTED
    res = copy.deepcopy(result)
    res["sweep"] = [r for r in res["sweep"] if r["exponent"] is not None]
    res["slopes"] = [r for r in res["slopes"] if r["exponent"] is not None]
    # no constant measured: that assertion is not testable, named, and leaves the label open (it could
    # fail): untested is not supported
    no_constant = saturation.judge_c18(res)
    assert no_constant.verdict == claims.INCONCLUSIVE and "not testable here" in no_constant.line
    off = copy.deepcopy(result)
    off["zero_slope_exponent"] = {k: 0.9 for k in off["zero_slope_exponent"]}
    for r in off["slopes"]:
        r["entropy_spread"] = 0.0 if r["exponent"] == 1.0 else 0.5
    assert saturation.judge_c18(off).verdict == claims.PARTLY  # the balance fails, the other two hold
    for r in off["sweep"]:
        if r["rule"] == "inv_d":
            r["normalized_entropy"] = 0.9
    for r in off["slopes"]:
        if r["exponent"] is None:
            r["entropy_spread"] = 0.1
    assert saturation.judge_c18(off).verdict == claims.REFUTED
    one = copy.deepcopy(result)
    one["slopes"] = [r for r in one["slopes"] if r["exponent"] == 0.5]
    assert saturation.judge_c18(one).verdict == claims.NOT_TESTABLE
