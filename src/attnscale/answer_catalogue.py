"""Every wording of the interview answer, English and Chinese side by side.

:mod:`attnscale.answer` decides each sentence once (which entry, which numbers) and builds a
tree of :class:`Word` (an entry and its fields), :class:`Seq` (pieces in a row) and
:class:`Listing` (items with separators); :func:`render` words the tree in one language.  The
numbers arrive formatted, so both languages quote the same figures.  An entry's fields are the
same in both languages, except that the English may use a field for grammar alone (a plural).
"""

from __future__ import annotations

from dataclasses import dataclass

ENTRIES: dict[str, dict[str, str]] = {
    # --------------------------------------------------------------- shared pieces
    "gap": {"en": " ", "zh": ""},  # between two sentences of one paragraph
    "list.comma": {"en": ", ", "zh": "、"},
    "list.clause": {"en": ", ", "zh": "，"},
    "list.and": {"en": " and ", "zh": "和"},
    "pending": {"en": "({part}: not measured yet; run `attnscale report`.)",
                "zh": "（{part}：尚未测量，请运行 `attnscale report`。）"},
    "pending.half": {"en": "{claim}'s {lab} half", "zh": "{claim} 的{lab}部分"},
    "lab.training": {"en": "training", "zh": "训练"},
    "lab.saturation": {"en": "saturation", "zh": "初始化"},

    # --------------------------------------------------------------- the full answer
    "variance.premise": {
        "en": "If q and k have independent components of mean 0 and variance 1, q·k is a sum of d_k unit-variance "
              "terms, so Var(q·k) = d_k and its std is sqrt(d_k)",
        "zh": "若 q、k 各分量独立、均值为 0、方差为 1，q·k 就是 d_k 个方差为 1 的项之和，所以 Var(q·k) = d_k，标准差为 sqrt(d_k)"},
    "variance.holds": {"en": "{premise} (measured within {err} for d_k up to {d_max}).",
                       "zh": "{premise}（d_k 最大到 {d_max}，实测偏差不超过 {err}）。"},
    "variance.roughly": {"en": "{premise}; measured, the variance is off by up to {err}, so this holds only roughly.",
                         "zh": "{premise}；实测方差偏差可达 {err}，只是近似成立。"},

    "init.shown": {"en": "{name} ({value})", "zh": "{name}（{value}）"},
    "init.var[xavier-uniform square]": {"en": "Xavier on a square matrix", "zh": "方阵上的 Xavier 初始化"},
    "init.var[torch-default square]": {"en": "PyTorch's default nn.Linear", "zh": "PyTorch 默认的 nn.Linear 初始化"},
    "init.var[xavier-uniform per-head]": {"en": "Xavier on a per-head projection", "zh": "按单头投影做的 Xavier 初始化"},
    "init.all_near": {"en": "Common initialisations do give q and k components of variance about 1: {near}.",
                      "zh": "常见初始化确实让 q、k 分量的方差约为 1：{near}。"},
    "init.some_off": {
        "en": "That premise holds for some initialisations, not all: {near} {gives} q components of variance about 1, "
              "but {off} {does} not{tail}",
        "zh": "这个前提只对部分初始化成立：{near}得到的方差约为 1，但{off}得到的方差并不是 1{tail}"},
    "init.none_near": {
        "en": "That premise is an assumption: no initialisation measured gives q components of variance 1 ({off}){tail}",
        "zh": "这个前提只是假设，实测的初始化得到的方差都不是 1：{off}{tail}"},
    "init.tail": {"en": "; the spread still grows as sqrt(d_k), from whatever variance it starts at.",
                  "zh": "；不过无论起点方差是多少，点积的标准差都会随 sqrt(d_k) 变大。"},

    "sqrt.rule": {
        "en": "Dividing by sqrt(d_k) brings the logit std back to 1 at every d_k measured (within {err}), so the softmax "
              "sees the same input whatever the head size: at least {share} of the logits lie in [-3, 3] and {rows}.",
        "zh": "除以 sqrt(d_k) 后，在实测的各个 d_k 下 logit 的标准差都回到 1（偏差不超过 {err}），softmax 的输入不再随头维度"
              "变化：至少 {share} 的 logit 落在 [-3, 3] 内，{rows}。"},
    "sqrt.no_row": {"en": "no row saturates", "zh": "没有一行饱和"},
    "sqrt.some_rows": {"en": "at most {share} of rows saturate", "zh": "饱和的行不超过 {share}"},

    "inv_d.init": {
        "en": "Dividing by d_k shrinks the logit std to 1/sqrt(d_k): at initialisation attention is {uniform} "
              "(normalised entropy {entropy} or more at d_k = 64 and 128).",
        "zh": "除以 d_k 会把 logit 的标准差压到 1/sqrt(d_k)：初始化时注意力{uniform}（d_k = 64 和 128 时归一化熵不低于 "
              "{entropy}）。"},
    "inv_d.uniform": {"en": "near uniform", "zh": "接近均匀分布"},
    "inv_d.not_uniform": {"en": "not near uniform", "zh": "并不接近均匀分布"},
    "inv_d.trained.refuted": {
        "en": " But at this scale it is not 'unusable': trained ({scale}), each rule at its best learning rate, it "
              "learned {span} of what 1/sqrt(d_k) learned.",
        "zh": "但在这个规模上它并非“根本不可用”：各自取最佳学习率训练后（{scale}），它学到的相当于 1/sqrt(d_k) 的 {span}。"},
    "inv_d.trained.supported": {"en": " Trained ({scale}), it learned only {span} of what 1/sqrt(d_k) learned: unusable.",
                                "zh": "训练后（{scale}）它只学到 1/sqrt(d_k) 的 {span}，确实不可用。"},
    "inv_d.trained.inconclusive": {
        "en": " Trained ({scale}), it learned {span} of what 1/sqrt(d_k) learned; whether that is 'unusable' is "
              "undecided at these seeds.",
        "zh": "训练后（{scale}）它学到 1/sqrt(d_k) 的 {span}；是否“不可用”，以现有种子数尚无定论。"},
    "inv_d.trained.partly": {
        "en": " Trained ({scale}), it learned {span} of what 1/sqrt(d_k) learned: worse in places, not everywhere "
              "unusable.",
        "zh": "训练后（{scale}）它学到 1/sqrt(d_k) 的 {span}：有些设置更差，但并非处处不可用。"},
    "scale.d_heads": {"en": "d_head {d_heads}", "zh": "d_head {d_heads}"},
    "scale.trained": {"en": "{layers}-layer models of width {width} on recall, d_head {d_heads}",
                      "zh": "{layers} 层、宽 {width} 的模型，recall 任务，d_head {d_heads}"},

    "none.init": {
        "en": "Without scaling the logit std grows as sqrt(d_k): at d_k = 128 the largest logit of a row is {size}; "
              "{saturated} or more of the rows are already near one-hot, {gradient}.",
        "zh": "不缩放时 logit 的标准差会随 sqrt(d_k) 变大：d_k = 128 时每行最大的 logit {size}；至少 {saturated} 的行已经"
              "接近 one-hot，{gradient}。"},
    "none.size.extreme": {"en": "about ±{logit}, as extreme as the interview answer's ±100 suggests",
                          "zh": "约 ±{logit}，和原答案说的 ±100 一样极端"},
    "none.size.short": {"en": "about ±{logit}, well short of the interview answer's ±100 ({reach})",
                        "zh": "约 ±{logit}，远没有原答案说的 ±100（{reach}）"},
    "none.reach.from": {"en": "rows reach that only from d_k ≈ {d_k}", "zh": "要到 d_k ≈ {d_k} 才会到 100"},
    "none.reach.never": {"en": "no d_k measured reaches it", "zh": "实测的 d_k 都达不到"},
    "none.gradient.near_0": {"en": "and the gradient reaching W_q is {ratio}x the sqrt rule's: near zero",
                             "zh": "传到 W_q 的梯度只有 sqrt 规则的 {ratio} 倍，接近 0"},
    "none.gradient.larger": {"en": "yet the gradient reaching W_q is {ratio}x the sqrt rule's, not near zero",
                             "zh": "但传到 W_q 的梯度是 sqrt 规则的 {ratio} 倍，并不接近 0"},
    "none.gradient.smaller": {
        "en": "and the gradient reaching W_q is {ratio}x the sqrt rule's, smaller but not near zero",
        "zh": "传到 W_q 的梯度是 sqrt 规则的 {ratio} 倍，变小了但不接近 0"},
    "none.trained": {"en": " Trained ({scale}), {verb}: it learned {span} of what 1/sqrt(d_k) learned{count}.",
                     "zh": "训练后（{scale}），{verb}：学到的相当于 1/sqrt(d_k) 的 {span}{count}。"},
    "none.trained.count": {"en": ", and stalled in {stalled} of {seeds} seeds", "zh": "，{seeds} 个种子中 {stalled} 个停滞"},
    "none.verb.refuted": {"en": "training does not stall", "zh": "训练并未停滞"},
    "none.verb.supported": {"en": "training stalls", "zh": "训练确实停滞"},
    "none.verb.inconclusive": {"en": "whether training stalls is undecided at these seeds", "zh": "训练是否停滞，以现有种子数尚无定论"},
    "none.verb.leans": {"en": "training stalls, in some settings at least (the others undecided at these seeds)",
                        "zh": "训练停滞，至少在部分设置下如此（其余设置以现有种子数尚无定论）"},
    "none.verb.partly": {"en": "training stalls in some settings or seeds, not in all", "zh": "训练在部分设置或种子下停滞，并非全部"},

    "fp16.range": {
        "en": "In FP16 and BF16, scaled logits at d_k = {d_k} {unit_do} reach ±{claimed} for independent unit-variance "
              "q and k (the largest was {unit}), but a trained model's {trained_do}: in the pretrained {model} "
              "(d_k = {model_d_k}) they reach ±{trained}. ",
        "zh": "在 FP16 和 BF16 下，若 q、k 各分量独立且方差为 1，d_k = {d_k} 缩放后的 logit {unit_do}达到 ±{claimed}"
              "（实测最大 {unit}）；训练过的模型{trained_do}：预训练的 {model}（d_k = {model_d_k}）的 logit 达到 ±{trained}。"},
    "fp16.unit_do.yes": {"en": "do", "zh": "确实"},
    "fp16.unit_do.no": {"en": "do not", "zh": "并不会"},
    "fp16.trained_do.yes": {"en": "do", "zh": "却会"},
    "fp16.trained_do.no": {"en": "do not", "zh": "也不会"},
    "fp16.nonfinite": {"en": "Attention computed as models compute it then produced inf or NaN. ",
                       "zh": "按模型实际的算法计算注意力时，确实出现了 inf 或 NaN。"},
    "fp16.finite": {
        "en": "Still, attention computed as models compute it produced no inf or NaN: exp overflows FP16 past "
              "{threshold}, which a softmax without max subtraction would hit in {naive} of that model's rows, but "
              "real code subtracts the row max{precision}",
        "zh": "但按模型实际的算法计算注意力时，没有出现 inf 或 NaN：FP16 的 exp 在输入超过 {threshold} 时溢出，不减最大值的 "
              "softmax 会在该模型 {naive} 的行上溢出，而实际代码都会先减去每行的最大值{precision}"},
    "fp16.imprecise": {
        "en": "; what goes wrong is precision, BF16 attention computed the eager way being off by up to {error} std "
              "of v. ",
        "zh": "；真正的问题是精度：BF16 按 eager 方式计算的输出误差最大可达 v 标准差的 {error} 倍。"},
    "fp16.precise": {"en": ". ", "zh": "。"},
    "flash.online": {"en": "FlashAttention's online softmax keeps the max subtraction, so it never overflowed; its "
                           "tiling {tiling}",
                     "zh": "FlashAttention 的 online softmax 同样先减去最大值，所以从未溢出；它的分块{tiling}"},
    "flash.saves_memory": {
        "en": "is what saves memory (one head at T = {tokens}: {dense} MiB dense, {online} MiB tiled); ",
        "zh": "是为了省显存（单个头、T = {tokens} 时，完整矩阵需要 {dense} MiB，分块只要 {online} MiB）；"},
    "flash.no_overflow_fix": {"en": "does not prevent overflow; ", "zh": "并不能防止溢出；"},
    "clamp.after": {"en": "clamping", "zh": "clamp"},  # the clause after FlashAttention's
    "clamp.first": {"en": "Clamping", "zh": "clamp"},
    "clamp.none_works": {"en": "{clamp} with the values tried did not remove the overflow.",
                         "zh": "试过的 {clamp} 取值都没能消除溢出。"},
    "clamp.cheap": {"en": "{clamp} removed the overflow at a negligible cost (KL {kl} nats).",
                    "zh": "{clamp} 能以很小的代价消除溢出（KL {kl} nats）。"},
    "clamp.distorts": {"en": "{clamp} removed it only at values that distort attention (KL {kl} nats).",
                       "zh": "{clamp} 只有在明显扭曲注意力的取值下才能消除溢出（KL {kl} nats）。"},
    "clamp.undecided": {"en": "{clamp} removed the overflow; whether it distorts attention is undecided (KL {kl} nats, "
                              "95% interval {low}-{high}, straddling the {cheap} nats called negligible).",
                        "zh": "{clamp} 能消除溢出，但是否明显扭曲注意力尚无定论（KL {kl} nats，95% 区间 {low}-{high}，"
                              "跨过了视为可忽略的 {cheap} nats）。"},

    "balance.exponent": {
        "en": "So 1/sqrt(d_k) is the factor that keeps the softmax input the same whatever d_k: measured, the logit "
              "std stops changing with d_k when the factor is d_k^-{exponent} (0.5 in theory).",
        "zh": "所以 1/sqrt(d_k) 是让 softmax 的输入不随 d_k 变化的因子：实测因子取 d_k^-{exponent} 时，logit 的标准差不再随 "
              "d_k 变化（理论值是 0.5）。"},
    "balance.constant": {
        "en": " At initialisation a constant factor fits one d_k only: {constant} gives normalised entropy from {low} "
              "to {high} across d_k.",
        "zh": "在初始化时，固定常数只适合某一个 d_k：常数 {constant} 在不同 d_k 下的归一化熵从 {low} 变到 {high}。"},
    "balance.trained": {"en": " In training, 1/sqrt(d_k) was near the best rule in {best} of {cells} settings.",
                        "zh": "训练中，1/sqrt(d_k) 在 {cells} 个设置里有 {best} 个接近最好的规则。"},

    "follow_up.small_d_k": {"en": "If d_k is very small (1 or 2), is scaling still needed?",
                            "zh": "如果 d_k 很小（比如 1 或 2），还需要缩放吗？"},
    "follow_up.gradients": {"en": "Why does softmax saturation hurt training? What are the gradient values?",
                            "zh": "为什么 softmax 的梯度饱和区会导致训练问题？能具体说下梯度值吗？"},
    "follow_up.t5": {"en": "How does T5 scale, and why?", "zh": "T5 的缩放方式有什么不同？为什么？"},
    "follow_up.long_contexts": {"en": "What about long contexts?", "zh": "那长上下文呢？"},

    "long.fade": {
        "en": "1/sqrt(d_k) fixes the logits' spread, not the number of keys n: a relevant key at margin 5 among equal "
              "keys gets {w_small} of the weight at n = {small} and {w_large} at n = {large} (L1, {l1}). Long-context "
              "models multiply the logits by a factor that grows with n, log_L n beyond the training length L (Qwen-1, "
              "Su 2021) or s ln n with s learned (Scalable-Softmax); among equal keys the weight then tends to 1, "
              "{logn_large} at n = {large} under log_34 n (L2, {l2}).",
        "zh": "1/sqrt(d_k) 固定的是 logits 的离散程度，而不是 key 的个数 n：在等值 key 中领先 5 的那个 key，"
              "n = {small} 时得到 {w_small} 的权重，n = {large} 时只剩 {w_large}（L1，{l1}）。长上下文模型再乘一个随 n "
              "增长的因子：超过训练长度 L 后乘 log_L n（Qwen-1、苏剑林 2021），或乘 s ln n、s 可学习（Scalable-Softmax）；"
              "在等值 key 中权重随之趋于 1，log_34 n 下 n = {large} 时为 {logn_large}（L2，{l2}）。"},
    "long.trained": {
        "en": "Trained at {train} tokens and run at {test} (one-layer models on a needle task), {sqrt_k} of {sqrt_n} "
              "models under 1/sqrt(d_k) alone lost accuracy, {logn_k} of {logn_n} of the same models run under log-n"
              "{from_start} (L4, {l4}).",
        "zh": "在 {train} 个 token 上训练、在 {test} 个上运行（单层模型，找针任务）：只用 1/sqrt(d_k) 的 {sqrt_n} 个模型中有 "
              "{sqrt_k} 个准确率下降，同样的模型改用 log-n 运行时 {logn_n} 个中有 {logn_k} 个{from_start}（L4，{l4}）。"},
    "long.trained_from_start": {
        "en": ", and {k} of {n} models trained under log-n",
        "zh": "，在 log-n 下训练的 {n} 个模型中有 {k} 个"},
    "long.law": {
        "en": "Which law depends on the task: the log n that keeps a needle also freezes attention over iid logits "
              "(entropy / ln n {log_small} to {log_large}), while 0.5 sqrt(2 ln n) keeps that entropy ({sq_small} to "
              "{sq_large}) and, at initialisation, lets a needle fade{trained} (L3, {l3}).",
        "zh": "该用哪条规律取决于任务：保住单个目标 key 的 log n 会让独立同分布 logits 上的注意力冻结（熵 / ln n 从 "
              "{log_small} 降到 {log_large}），而 0.5 sqrt(2 ln n) 能保住这个熵（{sq_small} 到 {sq_large}），但在初始化时"
              "让目标 key 的权重衰减{trained}（L3，{l3}）。"},
    "long.law.trained": {"en": "; trained, models under sqrt(log n) kept {sq_kept} of their needle's weight at 16x "
                               "against {log_kept} under log n, {k} of {n} losing more than a tenth of it",
                         "zh": "；训练后，sqrt(log n) 下的模型在 16 倍长度上保住目标 key 权重的 {sq_kept}，log n 下为 "
                               "{log_kept}，{n} 个中 {k} 个丢了一成以上"},

    "small.tv": {
        "en": "At d_k = 1 the factor is exactly 1. At d_k = 2 the attention rows with and without 1/sqrt(2) are {tv2} "
              "apart in total variation, against {tv_large} at d_k = {d_large}: {size}.",
        "zh": "d_k = 1 时因子就是 1。d_k = 2 时，有无 1/sqrt(2) 的注意力分布总变差距离为 {tv2}，而 d_k = {d_large} 时为 "
              "{tv_large}：{size}。"},
    "small.size.small": {"en": "{share} of it, so the factor matters little there, though it is not nothing",
                         "zh": "只有后者的 {share}，所以这里缩放影响不大，但并非为零"},
    "small.size.open": {"en": "{share} of it, too near a quarter of it to call little or not at these rows",
                        "zh": "为后者的 {share}，与四分之一太接近，以现有样本无法判定是否算小"},
    "small.size.large": {"en": "{share} of it, not a small difference next to it",
                         "zh": "达到后者的 {share}，相比之下差别并不小"},

    "gradients.jacobian": {
        "en": "The softmax Jacobian is diag(p) - p p^T; with one input at 100 its entries are below {at100}{near_0}. "
              "The interview answer's 'p between 0.05 and 0.95, derivative 0.05-0.25' describes a softmax over a few "
              "keys: with sqrt-scaled logits {small} of p_i lie in [0.05, 0.95] for {small_n} keys{up_to}, but "
              "{large} for {large_n} keys, where every p_i is small (the p_i sum to 1, so beyond {possible} keys "
              "fewer than half of them can reach 0.05).",
        "zh": "softmax 的雅可比矩阵是 diag(p) - p p^T；某个输入为 100 时，它的元素都小于 {at100}{near_0}。原答案说的“p 在 "
              "0.05-0.95、导数 0.05-0.25”只适用于 key 很少的情况：sqrt 缩放后，{small_n} 个 key 时 {small} 的 p_i 落在 "
              "[0.05, 0.95]{up_to}；{large_n} 个 key 时只有 {large}，每个 p_i 都很小（p_i 之和为 1，key 超过 {possible} "
              "个时，能达到 0.05 的不到一半）。"},
    "gradients.near_0": {"en": ", near 0", "zh": "，接近 0"},
    "gradients.up_to": {"en": ", and most do up to {up_to} keys", "zh": "，到 {up_to} 个 key 时仍有一半以上"},
    "gradients.trained": {
        "en": " In training, the first layer's W_q, W_k gradient without scaling was {ratio}x that with scaling "
              "(median over matched runs){drop}",
        "zh": "训练中，不缩放时第一层 W_q、W_k 的梯度是缩放时的 {ratio} 倍（匹配运行的中位数）{drop}"},
    "gradients.drop.large": {"en": ", more than {times}x smaller.", "zh": "，确实小了 {times} 倍以上。"},
    "gradients.drop.small": {"en": ", not {times}x smaller.", "zh": "，并没有小 {times} 倍。"},

    "t5.init": {
        "en": "T5 applies {applies} (the installed code, probed: {factor}); W_q is initialised with std {ratio} times "
              "W_k's at d_kv = {d_kv} (1/sqrt(d_kv) = {inv_sqrt}), so only W_q's variance carries the extra 1/d_kv, and "
              "the logits start with std {logit_std}.",
        "zh": "T5 {applies}（实测已安装代码的因子为 {factor}）；d_kv = {d_kv} 时，W_q 初始化的标准差是 W_k 的 {ratio} 倍"
              "（1/sqrt(d_kv) = {inv_sqrt}），多出的 1/d_kv 只放在 W_q 的方差里，初始 logit 的标准差为 {logit_std}。"},
    "t5.applies.none": {"en": "no factor", "zh": "不做显式缩放"},
    "t5.applies.factor": {"en": "a factor {factor}", "zh": "的缩放因子是 {factor}"},
    "t5.trained.equivalent": {"en": " Trained, the two stay equivalent under every optimiser tried.",
                              "zh": "训练后，在所有试过的优化器下两者都保持等价。"},
    "t5.trained.some_same": {"en": " Trained, it stays equivalent under {same}{differ}{tail}",
                             "zh": "训练后，在 {same} 下仍然等价{differ}{tail}"},
    "t5.trained.none_same": {"en": " Trained, it stays equivalent under no optimiser tried{differ}{tail}",
                             "zh": "训练后，在所试的优化器下都不再等价{differ}{tail}"},
    "t5.differ": {"en": ", but the per-layer logit std ends apart under {apart}", "zh": "，但各层 logit 标准差{apart}"},
    "t5.apart": {"en": "{optimiser} by {gap}", "zh": "在 {optimiser} 下相差 {gap}"},
    "t5.tail": {"en": ": the optimiser sees a different parametrisation, so the folding is equivalent at step 0, not "
                      "in training.",
                "zh": "：优化器面对的是另一种参数化，所以这种折叠只在第 0 步等价，训练过程中并不等价。"},

    # --------------------------------------------------------------- the 30-second answer
    "short.mechanism.holds": {
        "en": "Why sqrt(d_k): with independent unit-variance components q·k has variance d_k (measured within {err} up "
              "to d_k = {d_max}), and dividing by sqrt(d_k) keeps the logit std at 1 (within {std_err}) whatever the "
              "head size.",
        "zh": "为什么是 sqrt(d_k)：分量独立、方差为 1 时，q·k 的方差是 d_k（d_k 到 {d_max}，实测偏差不超过 {err}），"
              "除以 sqrt(d_k) 后 logit 的标准差保持为 1（偏差不超过 {std_err}），与头维度无关。"},
    "short.mechanism.roughly": {
        "en": "Why sqrt(d_k): q·k's variance grows about as d_k (measured off by up to {err}), and dividing by sqrt(d_k) "
              "keeps the logit std near 1 (within {std_err}) whatever the head size.",
        "zh": "为什么是 sqrt(d_k)：q·k 的方差大约随 d_k 增长（实测偏差可达 {err}），除以 sqrt(d_k) 后 logit 的标准差"
              "接近 1（偏差不超过 {std_err}），与头维度无关。"},
    "short.inv_d.trains": {
        "en": "Dividing by d_k starts near uniform but is not unusable in small models: trained, it learned {span} "
              "of what sqrt(d_k) learned.",
        "zh": "除以 d_k 起初接近均匀分布，但在小模型上并非不可用：训练后学到 sqrt(d_k) 的 {span}。"},
    "short.inv_d.unusable": {
        "en": "Dividing by d_k starts near uniform and stays unusable: trained, it learned {span} of what sqrt(d_k) "
              "learned.",
        "zh": "除以 d_k 起初接近均匀分布，训练后也只学到 sqrt(d_k) 的 {span}，确实不可用。"},
    "short.inv_d.mixed": {
        "en": "Dividing by d_k starts near uniform and trains worse in places: {span} of what sqrt(d_k) learned.",
        "zh": "除以 d_k 起初接近均匀分布，训练后有些设置更差：学到 sqrt(d_k) 的 {span}。"},
    "short.inv_d.open": {
        "en": "Dividing by d_k starts near uniform; trained, it learned {span} of what sqrt(d_k) learned (unusable: "
              "undecided).",
        "zh": "除以 d_k 起初接近均匀分布；是否一直不可用，以现有种子数尚无定论：训练后学到 sqrt(d_k) 的 {span}。"},
    "short.none.open": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}; whether training stalls is undecided.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}；训练是否停滞，以现有种子数尚无定论。"},
    "short.none.stalls": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, and small models' training stalls{where}.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，小模型训练停滞{where}。"},
    "short.none.where": {"en": " ({layers} layers: {stalled} of {seeds} seeds)",
                         "zh": "（{layers} 层模型：{seeds} 个种子中 {stalled} 个）"},
    "short.none.leans": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, and training stalls, in part at "
              "least{where}.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，训练至少部分停滞{where}。"},
    "short.none.sometimes": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, and training stalls in some settings "
              "or seeds, not all.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，部分设置或种子下训练停滞。"},
    "short.none.trains": {
        "en": "Without scaling, logits reach about ±{logit} at d_k = 128{not_100}, yet training does not stall.",
        "zh": "不缩放时，d_k = 128 的 logit 约为 ±{logit}{not_100}，但训练并未停滞。"},
    "short.none.not_100": {"en": " (not ±100)", "zh": "（不是 ±100）"},
    "short.tally": {
        "en": "Of the source's {total} claims, {supported} {hold}, {partly} {hold_part} in part, {refuted} "
              "{refuted_be} refuted{refuted_list}{rest}.",
        "zh": "原答案的 {total} 条说法中，{supported} 条成立，{partly} 条部分成立，{refuted} 条不成立{refuted_list}{rest}。"},
    "short.tally.refuted": {"en": " ({items})", "zh": "（{items}）"},
    "short.tally.item": {"en": "{id}", "zh": "{id}"},
    "short.tally.inconclusive": {"en": "; {n} {be} inconclusive", "zh": "，{n} 条尚无定论"},
    "short.tally.not_in_preset": {"en": "; {n} {be} not tested in this preset", "zh": "，{n} 条本预设未检验"},
    "short.tally.untested": {"en": "; {n} cannot be tested here", "zh": "，{n} 条此处无法检验"},

    # --------------------------------------------------------------- the printed layers
    "heading.short": {"en": "The 30-second answer", "zh": "30 秒回答"},
    "heading.full": {"en": "The full answer, as measured", "zh": "完整回答（逐条实测）"},
    "heading.follow_up": {"en": "Follow-up {i}: {question}", "zh": "追问 {i}：{question}"},
    "footer": {"en": "(From the report of preset {preset}, seed {seed}; verdicts: {counts}.)",
               "zh": "（依据：preset {preset}、seed {seed} 的报告；结论统计：{counts}。）"},
    "footer.count": {"en": "{verdict} {n}", "zh": "{verdict} {n}"},
    "verdict.supported": {"en": "supported", "zh": "支持"},
    "verdict.partly supported": {"en": "partly supported", "zh": "部分支持"},
    "verdict.refuted": {"en": "refuted", "zh": "不成立"},
    "verdict.not testable here": {"en": "not testable here", "zh": "此处无法检验"},
    "verdict.inconclusive": {"en": "inconclusive", "zh": "尚无定论"},
    "verdict.not tested in this preset": {"en": "not tested in this preset", "zh": "本预设未检验"},
    "verdict.pending": {"en": "pending", "zh": "待测"},
}


@dataclass(frozen=True)
class Word:
    """A catalogue entry with its fields (numbers already formatted, or other pieces)."""
    entry: str
    fields: dict

    def __init__(self, entry: str, **fields):
        if entry not in ENTRIES:
            raise KeyError(f"no catalogue entry {entry!r}")
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "fields", fields)


@dataclass(frozen=True)
class Seq:
    """Pieces worded one after the other."""
    parts: tuple

    def __init__(self, *parts):
        object.__setattr__(self, "parts", parts)


@dataclass(frozen=True)
class Listing:
    """Items joined by the entry ``sep``, the last two by ``last`` (``sep`` if None)."""
    items: tuple
    sep: str
    last: str | None

    def __init__(self, items, sep: str = "list.comma", last: str | None = None):
        object.__setattr__(self, "items", tuple(items))
        object.__setattr__(self, "sep", sep)
        object.__setattr__(self, "last", last)


GAP = Word("gap")
used: set[str] | None = None  # set to a set to record the entries rendered (the tests do)


def render(piece, lang: str) -> str:
    """``piece`` worded in ``lang``: a str (or number) stays as it is; a Word is its entry's text with its
    fields worded; a Seq its parts one after the other; a Listing its items with the separators' words."""
    if isinstance(piece, str):
        return piece
    if isinstance(piece, (int, float)):  # a count or size, as str.format would show it
        return format(piece)
    if isinstance(piece, Word):
        if used is not None:
            used.add(piece.entry)
        return ENTRIES[piece.entry][lang].format(**{k: render(v, lang) for k, v in piece.fields.items()})
    if isinstance(piece, Seq):
        return "".join(render(part, lang) for part in piece.parts)
    if isinstance(piece, Listing):
        items = [render(item, lang) for item in piece.items]
        if len(items) < 2:
            return "".join(items)
        last = render(Word(piece.last or piece.sep), lang)
        return render(Word(piece.sep), lang).join(items[:-1]) + last + items[-1]
    raise TypeError(f"not a piece of the answer: {piece!r}")
