"""The history lab's part readings (C07, C10, C13), reading only the lab's result (the rows of
:func:`attnscale.history.factor_history`); :func:`attnscale.claims.label` turns the parts into the
label.  A part whose releases are not in the cache is not testable here, and says how to fetch them.
"""

from __future__ import annotations

import re

from ...claims import FAILS, HOLDS, NOT_TESTABLE, UNDECIDED, Finding, Reading, state_of

BERT_PACKAGES = ("pytorch-pretrained-bert", "pytorch-transformers", "transformers")  # Hugging Face's BERT, by name
T5_PACKAGE = "mesh-tensorflow"       # T5's original code (Mesh TensorFlow)
ORIGINAL_PACKAGE = "tensor2tensor"   # the original Transformer's code (Vaswani et al. 2017)
INV_D, INV_SQRT = "1/d_k", "1/sqrt(d_k)"

VASWANI_2017 = (
    "Vaswani et al. (2017), section 3.2.1, report no ablation of the scale: they note that dot-product and "
    "additive attention do about equally well for small d_k while additive attention is ahead for larger d_k "
    "without scaling (a comparison taken from Britz et al. 2017), say they suspect that large dot products push "
    "the softmax into regions of tiny gradients, and scale by 1/sqrt(d_k) to counteract it; footnote 4 supports "
    "the suspicion with the variance argument (independent components of mean 0 and variance 1 give a dot "
    "product of variance d_k). Their Table 3 varies d_k, always with the scale; no run without it is shown."
)
VASWANI_RAN_ABLATION = False  # from VASWANI_2017: a statement about a paper, which no code can show

NUMBER_KEYS = {
    "C07": ("paper_has_no_scale_ablation", "original_code_factor"),
    "C10": ("t5_releases_read", "t5_releases_folded"),
    "C13": ("bert_releases_checked", "bert_releases_inv_d", "bert_releases_disagree"),
}


def rows_of(result: dict, packages) -> list[dict]:
    return [r for r in result["rows"] if r["package"] in packages]


def read(row: dict) -> bool:
    return row["statement"] is not None


def release_name(row: dict) -> str:
    return f"{row['package']} {row['version']} ({row['date']})"


def quote(row: dict) -> str:
    return f"{release_name(row)}, {row['location']}: `{row['statement']}`"


def missing_text(result: dict, rows: list[dict]) -> str:
    unread = [r for r in rows if not read(r)]
    absent = [release_name(r) for r in unread if r.get("cache_state") != "unwritable"]
    stuck = [release_name(r) for r in unread if r.get("cache_state") == "unwritable"]
    return "; ".join(([f"not in the cache {result['cache']}: {', '.join(absent)}; fetch with `{result['fetch_command']}`"]
                      if absent else []) +
                     ([f"in the cache {result['cache']} but not unpacked there (no room, or not writable): "
                       f"{', '.join(stuck)}"] if stuck else []))


def judge_c13(result: dict) -> Finding:
    """'Hugging Face's old BERT used 1/d_k', on every release of Hugging Face's BERT in the cache:
    each run at two head sizes (reading and running must agree).  It holds if one release measured
    1/d_k, fails if every release checked measured 1/sqrt(d_k) with its reading agreeing; a release
    whose reading and run disagree leaves it undecided."""
    rows = rows_of(result, BERT_PACKAGES)
    checked = [r for r in rows if r["rule_measured"] is not None]
    inv_d = [r for r in checked if r["rule_measured"] == INV_D]
    disagree = [r for r in checked if r["agreement"].startswith("DISAGREE")]
    settings = [{"where": release_name(r), "state": HOLDS if r["rule_measured"] == INV_D else FAILS,
                 "measured": f"{r['rule_measured']} ({r['agreement']})"} for r in checked]
    numbers = {"bert_releases_checked": len(checked), "bert_releases_inv_d": len(inv_d),
               "bert_releases_disagree": len(disagree)}
    if not checked:
        why = ("no release of Hugging Face's BERT could be checked: " + (missing_text(result, rows) or
               "; ".join(f"{release_name(r)}: {r['status']}" for r in rows)))
        return Finding("C13", "history", why, numbers, {"old_bert": Reading(NOT_TESTABLE, note=why)})
    state = HOLDS if inv_d else UNDECIDED if disagree else FAILS
    measured = "; ".join(f"{release_name(r)}: {', '.join(f'd_k {d}: {s:.4g}' for d, s in sorted((r['factor_measured'] or {}).items()))}"
                         f" -> {r['rule_measured']}" for r in checked)
    reading = Reading(state, measured=f"{len(inv_d)} of {len(checked)} releases measured 1/d_k",
                      threshold="one release that divides by d_k", settings=settings,
                      decide="a reading and a run that agree for " + ", ".join(release_name(r) for r in disagree)
                      if state == UNDECIDED else "",
                      direction=f"{len(checked) - len(inv_d)} of {len(checked)} releases, read and run, divide by "
                                "sqrt(d_k)")
    missing = missing_text(result, rows)
    evidence = ("Every release of Hugging Face's BERT in the cache, read and run: "
                + "; ".join(quote(r) for r in checked) + ". Run in a subprocess at head sizes "
                f"{', '.join(map(str, result['config']['head_dims']))} (designed q and k, the module's own forward): "
                f"{measured}. Reading and running agree in {sum(r['agreement'] == 'agree' for r in checked)} of "
                f"{len(checked)}." + (f" Not checked: {missing}." if missing else "")
                + " Part rule: holds if one release divides by d_k, fails if every release checked divides by "
                "sqrt(d_k) with its reading agreeing; a disagreement between reading and running leaves it undecided.")
    return Finding("C13", "history", evidence, numbers, {"old_bert": reading})


def folded_only(row: dict) -> bool:
    """The release puts the factor into the initial weights and applies none in the forward pass."""
    return "folded" in (row["factor_read"] or "") and row["forward_read"] == "1 (none)"


FOLDED_INTO = re.compile(r"init of ([^;)]+)")  # "folded into the init of W_q, W_k; ..." -> "W_q, W_k"


def variance_sentence(row: dict) -> str:
    """Which of the interview answer's two variance statements a release matches: the 1/sqrt(d_k)
    split over the n weights that carry it gives each a std factor d_k^(-1/(2n)), a variance d_k^(-1/n)."""
    found = FOLDED_INTO.search(row["factor_read"] or "")
    if not found:
        return f"{release_name(row)} folds no factor into its initial weights."
    weights = [w.strip() for w in found.group(1).split(",")]
    variance = "1/sqrt(d_k)" if len(weights) == 2 else "1/d_k" if len(weights) == 1 else f"d_k^-1/{len(weights)}"
    statement = {"1/sqrt(d_k)": "the interview answer's 'variance 1/sqrt(d_k)'",
                 "1/d_k": "the interview answer's 'variance 1/d_k', but on "
                          + ("Q" if weights == ["W_q"] else " and ".join(weights)) + " only, not on both Q and K"}
    return (f"{release_name(row)} puts it in {' and '.join(weights)}, {'each ' if len(weights) > 1 else ''}with "
            f"variance {variance} beyond the usual "
            f"1/d_model ({statement.get(variance, 'neither of the interview answer statements')}).")


def judge_c10(result: dict) -> Finding:
    """'T5 folds the factor into the initialisation', read in T5's Mesh TensorFlow code: holds where
    every release read puts 1/sqrt(d_k) into the initial Q/K weights and applies no factor in the
    forward pass (TensorFlow code is read, never run)."""
    rows = [r for r in rows_of(result, (T5_PACKAGE,)) if read(r)]
    numbers = {"t5_releases_read": len(rows), "t5_releases_folded": sum(map(folded_only, rows))}
    if not rows:
        why = "T5's Mesh TensorFlow code could not be read: " + missing_text(result, rows_of(result, (T5_PACKAGE,)))
        return Finding("C10", "history", why, numbers, {"released": Reading(NOT_TESTABLE, note=why)})
    settings = [{"where": release_name(r), "state": state_of(folded_only(r)), "measured": r["factor_read"]}
                for r in rows]
    reading = Reading.over([s["state"] for s in settings], measured="; ".join(f"{s['where']}: {s['measured']}" for s in settings),
                           threshold="the factor in the initial weights, none in the forward pass", settings=settings)
    notes = [n for r in rows for n in r["notes"]]
    evidence = ("T5's original code, Mesh TensorFlow (read, never imported): " + "; ".join(
        f"{quote(r)} -> {r['factor_read']}" for r in rows) + (f" ({'; '.join(notes)})" if notes else "")
        + ". " + " ".join(variance_sentence(r) for r in rows) + " Part rule: holds where a release puts the factor "
        "into the initial weights and none in the forward pass.")
    return Finding("C10", "history", evidence, numbers, {"released": reading})


def judge_c07(result: dict, paper_ran_ablation: bool = VASWANI_RAN_ABLATION) -> Finding:
    """A claim about what a paper did, read on the paper (VASWANI_2017): it holds only if the paper
    ran the ablation.  The original code's factor (tensor2tensor 1.0, read) is evidence beside it."""
    original = [r for r in rows_of(result, (ORIGINAL_PACKAGE,)) if read(r)]
    code = ("The original code, " + "; ".join(f"{quote(r)} -> {r['factor_read']}" for r in original)
            + ", scales q by 1/sqrt(d_k) before the dot product, with no switch to turn it off: nothing in it runs "
            "the ablation either." if original else
            "The original code (tensor2tensor) is " + (missing_text(result, rows_of(result, (ORIGINAL_PACKAGE,)))
                                                       or "not readable here") + ".")
    evidence = (f"{VASWANI_2017} So the paper did not verify by experiment that training fails without the scale. "
                f"{code} Part rule: read on the paper, which reports no run without the scale.")
    reading = Reading(HOLDS if paper_ran_ablation else FAILS, measured="no run without the scale is reported",
                      threshold="a reported run without the scale")
    return Finding("C07", "history", evidence, {"paper_has_no_scale_ablation": int(not paper_ran_ablation),
                                                "original_code_factor": original[0]["forward_read"] if original else None},
                   {"paper": reading})


def judge(result: dict) -> dict[str, Finding]:
    return {"C07": judge_c07(result), "C10": judge_c10(result), "C13": judge_c13(result)}
