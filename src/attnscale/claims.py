"""The claims registry: claim ID -> text -> the labs that test it -> a computed verdict.

The 18 claims come from the source (an interview answer, in Chinese).  Each lab module in
:mod:`attnscale.lab` has a ``judge(result)`` function that turns its own measured results
into :class:`Finding` objects, one per claim it tests, by a rule written in code next to
the experiment.  A claim tested by several labs gets one finding from each, and each lab
tests one part of it (``Claim.parts``: the saturation lab at initialisation, the training
lab in training); :func:`combine` merges them by a fixed rule and :func:`verdict_line`
keeps an untested part visible next to the verdict.  Nothing here holds an expected verdict.

Each lab module declares the numbers its findings carry in ``NUMBER_KEYS`` (claim ID ->
key names; a name ending in ``*`` stands for a family of keys with that prefix), and
:mod:`attnscale.answer` declares the numbers it reads; :func:`undeclared_numbers` and
:func:`key_declared` let the tests hold the two to each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUPPORTED = "supported"
PARTLY = "partly supported"
REFUTED = "refuted"
NOT_TESTABLE = "not testable here"
PENDING = "pending"
VERDICTS = (SUPPORTED, PARTLY, REFUTED, NOT_TESTABLE)


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    text: str
    seed: str
    labs: tuple[str, ...]
    parts: tuple[str, ...] = ()  # with several labs: the part of the claim each lab tests, in order

    def part(self, lab: str) -> str:
        return self.parts[self.labs.index(lab)] if self.parts else f"{lab} part"


@dataclass
class Finding:
    """One lab's verdict on one claim, with the evidence text and the numbers it quotes.

    ``scope`` (optional) says where the verdict holds when that is narrower than the claim's
    wording (e.g. "for up to 8 keys only"); it is shown next to the verdict.
    """

    verdict: str
    evidence: str
    numbers: dict[str, float | int | str | None] = field(default_factory=dict)
    scope: str | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}; accepted: {', '.join(VERDICTS)}")
        if self.scope and self.verdict == SUPPORTED:
            raise ValueError(f"a finding whose scope narrows the claim ({self.scope!r}) is at most {PARTLY!r}, "
                             f"not {SUPPORTED!r}")


CLAIMS: tuple[Claim, ...] = (
    Claim("C01", "2.1",
          "Common initialisations (Xavier is named) give q and k components mean 0 and variance 1.",
          "假设 query q 和 key k 是 d_k 维向量，各分量独立且均值为 0、方差为 1（常见初始化，如 Xavier）。",
          ("variance",)),
    Claim("C02", "2.1",
          "If q_i and k_i are independent, mean 0, variance 1, then Var(q·k) = d_k and std = sqrt(d_k).",
          "点积的方差 = d_k * 1 = d_k，标准差 = sqrt(d_k)。",
          ("variance",)),
    Claim("C03", "2.1",
          "Unscaled, with d_k = 64 or 128, dot products spread over about [-3 sqrt(d_k), 3 sqrt(d_k)] "
          "and extreme values are likely.",
          "若不缩放，当 d_k 较大（如 64 或 128）时，点积值会分布在 [-3sqrt(d_k), 3sqrt(d_k)] 范围，极端值概率高。",
          ("variance",)),
    Claim("C04", "2.2",
          "Dividing by sqrt(d_k) makes the logit variance 1; softmax inputs concentrate in [-3, 3], where the "
          "softmax gradient is not saturated.",
          "除以 sqrt(d_k)：将点积方差归一化为 1，标准差为 1。softmax 输入值集中在 [-3, 3] 区间，梯度在非饱和区。",
          ("saturation",)),
    Claim("C05", "2.2, 5",
          "Dividing by d_k makes the variance 1/d_k: logits sit near 0, softmax is near uniform, attention loses "
          "the ability to focus, and the model is \"fundamentally unusable, not just a bit worse\".",
          "除以 d_k：方差变为 1/d_k……softmax 输出分布过于平滑（接近均匀分布），注意力丧失区分度；"
          "不是“差一点”而是根本不可用。",
          ("saturation", "training"), ("initialisation half", "training half")),
    Claim("C06", "2.2",
          "With no scaling, logits are extreme (around ±100), softmax is near one-hot, gradients are near 0 and "
          "training stalls.",
          "不缩放：方差为 d_k，softmax 输入值极端（如 100 或 -100），输出接近 one-hot……梯度在 softmax 饱和区几乎为 0，训练停滞。",
          ("saturation", "training"), ("initialisation half", "training half")),
    Claim("C07", "2.2",
          "Vaswani et al. (2017) verified by experiment that without scaling the gradients vanish and training "
          "does not converge.",
          "Vaswani 等人在原论文中通过实验验证：不缩放时梯度消失，训练无法收敛。",
          ("training",)),
    Claim("C08", "2.3",
          "Multiplying by 1/sqrt(d_k) is the same as dividing by sqrt(d_k).",
          "有人会问：为什么不用 1/sqrt(d_k) 乘以点积？本质一样，但除以 sqrt(d_k) 更直观。",
          ("variance",)),
    Claim("C09", "2.3",
          "Raising d_k to 256 while keeping the old factor (dividing by 8 = sqrt(64)) makes the loss oscillate and "
          "not converge in an 8-layer Transformer; dividing by 16 restores stable training.",
          "我在训练一个 8 层 Transformer 时，曾误将 d_k 设为 256 但忘记改缩放因子，结果 loss 震荡不收敛……"
          "改为除以 sqrt(256)=16 后恢复稳定。",
          ("training",)),
    Claim("C10", "2.3, 4.3",
          "T5 has no explicit scaling: it folds the factor into the initialisation of Q/K (the interview answer says both "
          "\"variance 1/sqrt(d_k)\" and \"variance 1/d_k\"); this is mathematically equivalent and cheaper on TPUs.",
          "他们将缩放因子融入 Q 和 K 的初始化：Q 和 K 的权重初始化方差设为 1/d_k，这样点积的方差自动为 1，无需显式缩放……"
          "本质数学等价，只是工程优化。",
          ("training", "doctor"), ("training half", "installed-code half")),
    Claim("C11", "2.4",
          "In FP16/BF16, even after scaling, d_k = 128 gives logits around [-30, 30]; FP16's small range then "
          "makes the softmax produce inf.",
          "例如 d_k=128，点积范围约 [-30, 30]，FP16 动态范围有限，softmax 输入过大导致 inf。",
          ("numerics",)),
    Claim("C12", "2.4",
          "The fixes are torch.clamp before the softmax, or FlashAttention, which scales by 1/sqrt(d_k) and tiles "
          "the computation so the large matrix never overflows.",
          "解法：在注意力计算前加 torch.clamp 或使用 FlashAttention……FlashAttention 内部将 QK^T 除以 sqrt(d_k) 后，"
          "再通过 tile 方式避免大矩阵溢出。",
          ("numerics",)),
    Claim("C13", "2.4",
          "Some implementations (Hugging Face's old BERT is named) wrongly used 1/d_k, which made training "
          "2-3x slower.",
          "某些实现（如 Hugging Face 的旧版 BERT）错误地使用了 1/d_k 缩放，导致训练慢 2-3 倍。",
          ("training", "doctor"), ("slowdown half", "old-BERT half")),
    Claim("C14", "2.4",
          "A diagnostic: print the attention weights; if every token gets about 1/n, the scaling is too strong.",
          "验证方法：打印注意力权重分布，若所有 token 权重接近 1/n，说明缩放过大。",
          ("doctor",)),
    Claim("C15", "4.1",
          "For small d_k (1 or 2) scaling matters little; d_k = 2 with or without the factor differs little.",
          "若 d_k=2，点积方差为 2，除以 sqrt(2)≈1.414，效果与不缩放差异不大。",
          ("variance",)),
    Claim("C16", "4.2",
          "The softmax derivative is p_i(1 - p_i): near 0 for extreme inputs (about 100); for inputs in [-3, 3], "
          "p_i is about 0.05-0.95 and the derivative about 0.05-0.25.",
          "softmax 的导数 = p_i * (1 - p_i)……当输入极端时（如 100），p_i≈1，导数≈0……若输入在 [-3, 3] 区间，"
          "p_i 约 0.05-0.95，导数约 0.05-0.25，梯度有效。",
          ("saturation",)),
    Claim("C17", "4.2",
          "Without scaling, the gradient norm of the first layers drops by more than 10x and the loss does not "
          "go down.",
          "实验表明，不缩放时前几层梯度范数下降 10 倍以上，训练 loss 不降。",
          ("training",)),
    Claim("C18", "summary",
          "sqrt(d_k) is the balance point: d_k over-smooths, and no constant can adapt to different d_k.",
          "除以 sqrt(d_k) 是数学推导（方差归一化）和工程实践（避免梯度饱和、保持区分度）的平衡点。"
          "不是 d_k 是因为会过度平滑，不是常数是因为无法适应不同 d_k。",
          ("saturation", "training"), ("initialisation half", "training half")),
)

BY_ID = {claim.id: claim for claim in CLAIMS}


def claims_of_lab(lab: str) -> tuple[str, ...]:
    return tuple(claim.id for claim in CLAIMS if lab in claim.labs)


def verdict_of_parts(parts) -> str:
    """Supported if every part holds, refuted if none does, partly otherwise: a part left undecided
    by its interval (None) can only make a verdict partly, never flip it between the two ends."""
    parts = list(parts)
    if parts and all(p is True for p in parts):
        return SUPPORTED
    if parts and all(p is False for p in parts):
        return REFUTED
    return PARTLY


def combine(findings: dict[str, Finding], labs: tuple[str, ...] | None = None) -> str:
    """One verdict from several labs' findings on the same claim (``labs``: the labs the claim
    names; by default those that reported).

    Findings that say "not testable here" are set aside when another lab could test the
    claim; if all the rest agree, that verdict stands; any disagreement (one lab supports
    what another refutes or only partly supports) gives "partly supported".  Where the claim
    names several labs, each tests only a part of it, so "supported" needs every part
    tested: with a part not measured yet or not testable here, it is capped at "partly
    supported".
    """
    if not isinstance(findings, dict) or not all(isinstance(f, Finding) for f in findings.values()):
        raise TypeError(f"combine needs {{lab: Finding}}, got {type(findings).__name__}")
    if not findings:
        return PENDING
    labs = tuple(findings) if labs is None else labs
    tested = {lab: f.verdict for lab, f in findings.items() if f.verdict != NOT_TESTABLE}
    if not tested:
        return NOT_TESTABLE
    verdicts = set(tested.values())
    verdict = verdicts.pop() if len(verdicts) == 1 else PARTLY
    if verdict == SUPPORTED and len(labs) > 1 and set(tested) != set(labs):
        verdict = PARTLY
    return verdict


def verdict_line(claim: Claim, findings: dict[str, Finding], verdict: str) -> str:
    """The verdict as the report shows it: with the parts that were not tested, and any
    finding's narrower scope, in brackets, e.g. "refuted (old-BERT half not testable here)"."""
    if verdict == PENDING:
        return verdict
    notes = []
    if len(claim.labs) > 1:
        for lab in claim.labs:
            if lab not in findings:
                notes.append(f"{claim.part(lab)} not measured yet")
            elif findings[lab].verdict == NOT_TESTABLE and verdict != NOT_TESTABLE:
                notes.append(f"{claim.part(lab)} not testable here")
    notes += [f.scope for f in findings.values() if f.scope]
    return verdict + (f" ({'; '.join(notes)})" if notes else "")


def key_declared(declared: tuple[str, ...], key: str) -> bool:
    """Whether ``key`` is one of ``declared``: by name, or by a family name ending in ``*``
    (a read of a family, e.g. ``inv_d_progress_*``, must be declared as that family)."""
    return any(key == name or (name.endswith("*") and not key.endswith("*") and key.startswith(name[:-1]))
               for name in declared)


def undeclared_numbers(declared: dict[str, tuple[str, ...]], findings: dict[str, Finding]) -> list[str]:
    """``claim.key`` names that disagree with a lab's ``NUMBER_KEYS``: numbers a finding carries
    that are not declared, and declared names (not families) that a tested finding lacks."""
    wrong = []
    for claim_id, finding in findings.items():
        names = declared.get(claim_id, ())
        wrong += [f"{claim_id}.{key} (not declared)" for key in finding.numbers if not key_declared(names, key)]
        if finding.verdict != NOT_TESTABLE:
            wrong += [f"{claim_id}.{name} (declared, missing)" for name in names
                      if not name.endswith("*") and name not in finding.numbers]
    wrong += [f"{claim_id} (declared, no finding)" for claim_id in declared if claim_id not in findings]
    return wrong


def evaluate(lab_findings: dict[str, dict[str, Finding]]) -> list[dict]:
    """Verdicts for every claim from ``{lab: {claim_id: Finding}}``.

    A claim whose labs have not all reported keeps the verdict of those that have (capped
    as :func:`combine` says), its evidence names the labs still pending and its verdict line
    the parts not measured yet; a claim no lab has reported on is ``pending``.
    """
    rows = []
    for claim in CLAIMS:
        found = {lab: lab_findings[lab][claim.id] for lab in claim.labs if claim.id in lab_findings.get(lab, {})}
        missing = [lab for lab in claim.labs if lab not in found]
        evidence = " ".join(f"[{lab}] {found[lab].evidence}" for lab in found) if len(found) > 1 else (
            next(iter(found.values())).evidence if found else "")
        if missing:
            evidence = (evidence + " " if evidence else "") + (
                f"Pending: the {', '.join(missing)} lab{'s' if len(missing) > 1 else ''} "
                f"will test {'the rest' if found else 'this claim'}."
            )
        numbers = {}
        for lab, finding in found.items():
            numbers.update({(f"{lab}.{k}" if len(claim.labs) > 1 else k): v for k, v in finding.numbers.items()})
        verdict = combine(found, claim.labs)
        rows.append({
            "id": claim.id,
            "claim": claim.text,
            "seed": claim.seed,
            "section": claim.section,
            "verdict": verdict,
            "verdict_line": verdict_line(claim, found, verdict),
            "complete": not missing,
            "evidence": evidence,
            "experiments": list(claim.labs),
            "lab_verdicts": {lab: f.verdict for lab, f in found.items()},
            "numbers": numbers,
            "figures": [],
        })
    return rows
