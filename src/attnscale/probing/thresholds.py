"""The health check's stated thresholds, in one place (the evidence texts quote them)."""

THRESHOLDS = {
    "over_smoothed_kl": 0.05,  # nats: effective support > exp(-0.05) = 95% of the keys
    "saturated_p": 0.99,
    "most_rows": 0.5,  # a head is flagged when more than this share of its rows is
    "sink_share": 0.5,
    "sink_over_uniform": 2.0,
    "factor_rel_tol": 0.02,  # probe labels: within 2% of 1/sqrt(d_k), 1/d_k or 1
}
