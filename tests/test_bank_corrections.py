"""The reviewed cards of issue 15 §1 say the right thing and no longer the wrong one.

Each correction is pinned three ways, because a fix can regress in any of
them: the teaching text (answer, explanation, key points, right options,
hints) must contain the corrected claim and must not contain the old wrong
one; where the card is a recall card, a learner answer stating the corrected
fact must tick the key point that carries it, and the old misconception must
not. The wrong claim may still appear on purpose in `common_wrong` or in a
wrong option's text, where it is shown as a mistake, so those are not
searched for it.

The PyTorch facts some corrections rest on (fp16 casts saturate, SDPA's
fully masked rows, view after transpose) are checked against torch itself at
the end, so the card and the library cannot drift apart unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from drill.paths import questions_dir
from drill.quiz.kinds.choice import ChoiceQuestion
from drill.quiz.kinds.recall import RecallQuestion
from drill.quiz.loader import scan
from drill.quiz.schema import Question


@pytest.fixture(scope="module")
def cards() -> dict[str, Question]:
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


def teaching_text(q: Question) -> str:
    """Everything the card presents as true: not its common_wrong, not its wrong options."""
    parts = [q.prompt, q.explanation, *q.hints]
    if isinstance(q, RecallQuestion):
        parts += [q.answer, *(p.text for p in q.key_points)]
    if isinstance(q, ChoiceQuestion):
        parts += [f"{o.text} {o.feedback}" for o in q.options if o.correct]
    return "\n".join(parts)


def right_option(q: Question) -> str:
    assert isinstance(q, ChoiceQuestion)
    return " ".join(o.text + " " + o.feedback for o in q.options if o.correct)


@dataclass(frozen=True)
class Correction:
    card: str
    says: tuple[str, ...]  # regexes the teaching text must match
    not_says: tuple[str, ...] = ()  # regexes it must not match
    # (substring of a key point's text, learner answer that must tick it, misconception that must not)
    ticks: tuple[tuple[str, str, str], ...] = ()


CORRECTIONS = (
    Correction(
        "pos-base-wraparound",
        says=(r"\(Θ'/Θ\)\^\(2i/d_k\)", r"fast pairs barely", r"Position Interpolation"),
        not_says=(r"raising the base lengthens every pair's wavelength", r"including the faster ones, blurring"),
        ticks=(("fast pairs barely change",
                "Raising the base barely changes the fast pairs and mostly stretches the slow ones.",
                "Raising the base blurs local resolution for every pair equally."),),
    ),
    Correction(
        "gqa-expand-kv-memory",
        says=(r"cache itself stays compact", r"bandwidth", r"enable_gqa"),
        not_says=(r"memory \(and bandwidth\) GQA was supposed to save is spent",
                  r"peak GPU memory during decoding did\s+not drop"),
        ticks=(("bandwidth",
                "Each step reads the small cache, writes the big copy and reads it again: the bytes moved per token go "
                "up.",
                "It allocates an extra copy."),),
    ),
    Correction(
        "block-embedding-sqrt-d",
        says=(r"pre-norm stack the factor still matters", r"Gemma"),
        not_says=(r"a\s+constant factor is divided out and has no forward effect",),
        ticks=(("Pre-norm does not cancel it",
                "In pre-norm the residual stream keeps c times the embedding, so c changes its size relative to the "
                "blocks' updates.",
                "The first norm divides the constant out, so it has no effect."),),
    ),
    Correction(
        "mha-attn-vs-mlp-cost",
        says=(r"n = 4d", r"n = 2d", r"8d² \+ 4nd"),
        ticks=(("crossover at n = 2d",
                "Counting the projections too, the whole attention sublayer matches the MLP at n = 2d.",
                "Attention matches the MLP at n = 4d."),),
    ),
    Correction(
        "pos-extend-2k-to-32k",
        says=(r"raise the base θ", r"Code Llama", r"Position Interpolation"),
        ticks=(("Position Interpolation",
                "Position interpolation: scale the positions down by 16 and fine-tune briefly.",
                "Just change the config."),),
    ),
    Correction(
        "pos-why-needed",
        says=(r"causal decoder is different", r"NoPE", r"Haviv"),
        not_says=(r"^Self-attention without position information is permutation-equivariant",),
        ticks=(("causal mask breaks the symmetry",
                "With a causal mask each position sees a different number of tokens, so a decoder can learn position "
                "without any encoding.",
                "Attention is permutation invariant so it needs positions."),),
    ),
    Correction(
        "pit-fp16-mask-overflow",
        says=(r"\.to\(torch\.float16\) turns it into −inf", r"left\s+padding", r"masked_fill", r"promote to fp32"),
        not_says=(r"cast to fp16 it becomes −inf\. If every entry",),
        ticks=(("Adding two masks",
                "Adding the causal and the padding mask, each at finfo.min, overflows to -inf.",
                "The mask is -1e9."),),
    ),
    Correction(
        "pit-dtype-minus-1e9",
        says=(r"mask\.to\(dtype\)", r"without overflow"),
        not_says=(r"^You fill masked attention scores with the constant −1e9 and cast",),
    ),
    Correction(
        "pit-rmsnorm-low-precision",
        says=(r"model\.half\(\)", r"\|x\| above about 256", r"pow and rsqrt are\s+autocast to fp32"),
        not_says=(r"directly in bf16 and\s+adds eps after the rsqrt", r"only\s+under autocast"),
        ticks=(("In fp16, x² overflows",
                "Squares above 65504 overflow to inf in fp16, so the mean is inf.",
                "Adding eps after the rsqrt is wrong."),),
    ),
    Correction(
        "block-no-biases",
        says=(r"stability", r"Qwen2 keeps biases"),
        not_says=(r"at no measured quality cost",),
    ),
    Correction(
        "norm-pre-vs-post-claims",
        says=(r"still use a short warmup", r"Gemma 2", r"OLMo 2"),
        not_says=(r"Pre-norm removes the need for a tuned warmup",),
    ),
    Correction(
        "norm-prenorm-vs-postnorm",
        says=(r"still warm up", r"Gemma 2", r"OLMo 2"),
        not_says=(r"warmup stops\s+being mandatory",),
        ticks=(("still use a few thousand warmup steps",
                "Pre-norm tolerates a short warmup, but real LLM recipes still warm up for a few thousand steps.",
                "Pre-norm needs no warmup."),),
    ),
    Correction(
        "norm-postln-abandoned",
        says=(r"much less sensitive to warmup",),
        not_says=(r"without that warmup\s+sensitivity",),
    ),
    Correction(
        "pit-post-ln-divergence",
        says=(r"tolerates a short warmup",),
        not_says=(r"can train without warmup",),
    ),
    Correction(
        "block-explain-in-60s",
        says=(r"train robustly",),
        not_says=(r"without a fragile\s+warmup",),
    ),
    Correction(
        "block-2026-changes",
        says=(r"far less\s+warmup-sensitive", r"QK-norm"),
        not_says=(r"trainable at depth without a tuned\s+warmup",),
    ),
    Correction(
        "mask-fully-masked-row",
        says=(r"PyTorch 2\.5", r"returns zeros"),
        ticks=(("Current SDPA",
                "PyTorch's scaled_dot_product_attention now returns zeros for such a row.",
                "It returns NaN."),),
    ),
    Correction(
        "ffn-silu-to-constant",
        says=(r"rank is at most d\b", r"d × d"),
        not_says=(r"rank at most d_ff",),
        ticks=(("rank ≤ d",
                "With the gate at 1 it is one linear map W_up W_down, a d x d matrix of rank at most d.",
                "It is a rank d_ff map."),),
    ),
    Correction("ffn-param-share", says=(r"Llama-3-8B", r"about 81%")),
    Correction(
        "pos-alibi-vs-rope",
        says=(r"FlashAttention-2 takes ALiBi", r"recency bias|penalising distance"),
        not_says=(r"fused kernels\s+support less flexibly",),
        ticks=(("linear distance penalty",
                "ALiBi penalises distant tokens linearly, a recency bias, so it tolerates long inputs without really "
                "using them.",
                "ALiBi is slower."),),
    ),
    Correction(
        "flash-v2-v3-changes",
        says=(r"divided by the running sum ℓ once at the end", r"rescale still happens per block", r"Hopper"),
        not_says=(r"rescaling of the accumulator is done once at\s+the end",),
    ),
    Correction(
        "mha-contiguous-view",
        says=(r"T = 1", r"stride"),
        not_says=(r"^view raises an error, because the transposed tensor is not contiguous",),
    ),
    Correction(
        "attn-scale-dk-not-dmodel",
        says=(r"kernel\s+efficiency", r"query_pre_attn_scalar"),
        not_says=(r"the scaled scores stay well behaved and more capacity goes into more heads",),
    ),
    Correction(
        "arch-where-encoders-win",
        says=(r"quality per unit of cost|cost per query", r"LLM2Vec", r"NV-Embed"),
        not_says=(r"which\s+is a better representation per token than a causal model's",),
        ticks=(("causal mask removed",
                "The best embedding models are now LLMs fine-tuned contrastively, "
                "e.g. LLM2Vec removes the causal mask.",
                "Encoders are better."),),
    ),
)


# issue 28 §1: an audit of the whole bank against the papers and the libraries' own code.
ISSUE_28 = (
    Correction(
        "block-weight-tying",
        says=(r"ValueError", r"clone\(\)", r"tie_weights\(\)", r"about 65M", r"37k tokens"),
        not_says=(r"two param groups on one tensor fight", r"receive conflicting updates", r"16\.4M of\s+roughly"),
        ticks=(("copying the values",
                "Both modules must hold the same tensor object; copying it with .data = or clone() unties them.",
                "Tie it before creating the optimizer, or two parameter groups fight over it."),),
    ),
    Correction(
        "gqa-expand-kv-memory",
        says=(r"fold each group into the query axis", r"q\.reshape\(B, 8, 4·T, d\)", r"expands K to the broadcast"),
        not_says=(r"so a plain\s+batched matmul broadcasts against \(B, 8, 1, S, d\) without a copy",
                  r"barely improved"),
        ticks=(("Fix: share K/V inside the kernel",
                "Call SDPA with enable_gqa=True, or fold the query group into the sequence axis.",
                "Reshape q to (B, 8, 4, T, d) so that matmul broadcasts K without a copy."),),
    ),
    Correction(
        "pit-rope-pairing-convention",
        says=(r"two different failures", r"the offset test passes", r"comparison of logits"),
        not_says=(r"you get the same failure if the checkpoint",),
        ticks=(("A checkpoint trained with the other pairing",
                "When the checkpoint was trained with the other pairing, only comparing logits against a reference "
                "implementation finds it.",
                "Run the offset invariance test: it catches every pairing problem."),),
    ),
    Correction("beyond-window-eviction-choice", says=(r"constant cost per generated token",)),
    Correction(
        "arch-t5-span-count",
        says=(r"random_spans_noise_mask", r"round\(77 / 3\)", r"26 spans, exactly"),
        not_says=(r"≈ 25\.6 spans",),
    ),
    Correction("train-which-parallelism", says=(r"208 GB", r"A 1\.3B model"),
               not_says=(r"A 13B model trains well with data parallelism",)),
    Correction("scale-6n-flops", says=(r"4·n_layers·n_ctx·d", r"averaged over a causal sequence")),
    Correction("flash-no-visible-key", says=(r"stores \+inf", r"split-KV")),
    Correction("mha-contiguous-view", says=(r"\(or h = 1\)", r"size-1 axis")),
    Correction("bug-gqa-repeat-tiles", says=(r"equals n_heads", r"group = 1"),
               not_says=(r"match only when n_kv_heads = 1\.",)),
    Correction("norm-qk-norm", says=(r"whole projection", r"Qwen3 and Gemma 3", r"OLMo 2"),
               not_says=(r"to each\s+head's query and key vectors",)),
    Correction("moe-norm-topk-prob", says=(r"Qwen3-MoE and DeepSeek-V3",),
               not_says=(r"Qwen-MoE and\s+DeepSeek-V2 use them as they are",)),
    Correction("moe-router-precision", says=(r"2\.4 decimal digits",), not_says=(r"about 3 significant",)),
    Correction("moe-load-balancing", says=(r"sequence-wise balance loss",)),
    Correction("serve-speculative-exactness", says=(r"up with a poor one", r"slower than without it"),
               not_says=(r"Nothing in distribution; it is faster",)),
    Correction("ffn-param-share", says=(r"outlier activations",), not_says=(r"most\s+quantization-sensitive",)),
    Correction("ffn-what-mlp-adds", says=(r"MoE replaces the MLP",), not_says=(r"quantizing it hurts the most",)),
    Correction("ffn-silu-to-constant", says=(r"beats the classic ReLU FFN",), not_says=(r"which underperforms",)),
    Correction("pos-rope-qk-not-v", says=(r"reference implementation",),
               not_says=(r"injects noise rather than signal", r"just ends up worse")),
    Correction("pos-rope-90-seconds", says=(r"Position Interpolation, YaRN",), not_says=(r"single knob",)),
    Correction("pos-additive-activation", says=(r"broadcast over the batch", r"25\.6 MB"),
               not_says=(r"rotates q and k in place and adds nothing",)),
    Correction("pos-learned-absolute-limit", says=(r"rises sharply",), not_says=(r"degrades gradually",)),
    Correction("norm-pre-vs-post-claims", says=(r"adds one final norm",)),
    Correction("norm-layernorm-symbols", says=(r"input of fixed\s+scale",),
               not_says=(r"makes the sublayer's input scale\s+regardless", r"no measured loss")),
    Correction("block-embedding-sqrt-d", says=(r"do not say why",), not_says=(r"by √d for this reason",)),
    Correction("block-final-norm", says=(r"GPT-2",), not_says=(r"miscalibration", r"retuning per checkpoint")),
    Correction(
        "flash-io-complexity",
        says=(r"Algorithm 1", r"FlashAttention-2\s+swaps the loops", r"192 KB per SM"),
        not_says=(r"M ≈ 100 KB", r"keeps blocks of about M/d rows of Q in SRAM and streams"),
    ),
)
# issue 31 §3: a key point that is a formula credits an equivalent form of it.
ISSUE_31 = (
    Correction(
        "norm-rmsnorm-backward",
        says=(r"any equivalent form",),
        ticks=(("grad_x = (g",
                "grad_x = (1/r) * (g*w - x * mean(g*w*x)/r^2)",
                "grad_x = g * w / r"),
               ("grad_x = (g",
                "grad_x = (g - x̂ * mean(g * x̂)) / r",
                "grad_x = rsqrt of the mean times g")),
    ),
    Correction(
        "norm-layernorm-backward",
        says=(r"any equivalent form",),
        ticks=(("dx = (1/σ)",
                "dx = (g - mean(g) - (x - mu) * mean(g * (x - mu)) / sigma^2) / sigma",
                "dx = g / sigma"),),
    ),
)
ALL_CORRECTIONS = CORRECTIONS + ISSUE_28 + ISSUE_31


@pytest.mark.parametrize("fix", ALL_CORRECTIONS, ids=[f"{c.card}-{i}" for i, c in enumerate(ALL_CORRECTIONS)])
def test_card_says_the_corrected_claim(cards: dict[str, Question], fix: Correction) -> None:
    text = teaching_text(cards[fix.card])
    for pattern in fix.says:
        assert re.search(pattern, text, re.MULTILINE), f"{fix.card} lost the corrected claim {pattern!r}"
    for pattern in fix.not_says:
        assert not re.search(pattern, text, re.MULTILINE), f"{fix.card} teaches the old claim again: {pattern!r}"


@pytest.mark.parametrize("fix", [c for c in ALL_CORRECTIONS if c.ticks],
                         ids=[f"{c.card}-{i}" for i, c in enumerate(ALL_CORRECTIONS) if c.ticks])
def test_corrected_key_point_grades_the_corrected_fact(cards: dict[str, Question], fix: Correction) -> None:
    card = cards[fix.card]
    assert isinstance(card, RecallQuestion)
    for fragment, right, wrong in fix.ticks:
        points = [p for p in card.key_points if fragment in p.text]
        assert len(points) == 1, f"{fix.card}: no single key point containing {fragment!r}"
        assert points[0].matches(right), f"{fix.card}: {fragment!r} does not tick a right answer: {right!r}"
        assert not points[0].matches(wrong), f"{fix.card}: {fragment!r} ticks the misconception {wrong!r}"



def test_t5_span_count_grades_the_rounded_count(cards: dict[str, Question]) -> None:
    """random_spans_noise_mask makes round(round(512 * 0.15) / 3) = 26 spans; 25.6 is the unrounded figure."""
    card = cards["arch-t5-span-count"]
    assert card.answer == round(round(512 * 0.15) / 3) == 26
    for typed in (26, 25.6):
        assert card.tolerance.accepts(typed, card.answer)
    for typed in (25, 27, 77):
        assert not card.tolerance.accepts(typed, card.answer)


def test_no_card_calls_the_ffn_the_most_quantization_sensitive_block(cards: dict[str, Question]) -> None:
    """Sensitivity to quantization follows outlier activations, not a block's share of the parameters."""
    claim = re.compile(r"most\s+quantization-sensitive|quantizing it hurts the most", re.IGNORECASE)
    assert not [q.id for q in cards.values() if claim.search(teaching_text(q))]


MOE_SOURCES = {
    "moe-load-balancing": "Switch Transformers",
    "moe-capacity-factor": "GShard",
    "moe-router-forward": "Mixtral",
    "moe-expert-parallel-communication": "GShard",
    "moe-router-z-loss": "ST-MoE",
    "moe-memory-footprint": "Mixtral",
    "moe-aux-loss-purpose": "Switch Transformers",
    "moe-dropped-token": "Switch Transformers",
    "moe-mixtral-active-expert-params": "Mixtral",
    "moe-expert-capacity": "Switch Transformers",
}


@pytest.mark.parametrize(("card", "paper"), sorted(MOE_SOURCES.items()))
def test_moe_cards_cite_the_paper_their_content_comes_from(cards: dict[str, Question], card: str, paper: str) -> None:
    """The seed texts mention MoE only in one drill answer; these cards' content is from the papers."""
    source = cards[card].source
    assert paper in source and re.search(r"arXiv:\d{4}\.\d{4,5}", source), source
    assert source != "seed 003 · Modern Architecture Deltas · Interview drill"


# --- the PyTorch behaviour the corrected cards describe -------------------------------------


def test_torch_fp16_cast_saturates_and_promotion_keeps_fp32() -> None:
    torch = pytest.importorskip("torch")
    mask = torch.triu(torch.full((3, 3), -1e9), 1)
    assert torch.isneginf(mask.to(torch.float16)[0, 1])  # pit-fp16-mask-overflow: the cast gives -inf
    scores = torch.zeros(3, 3, dtype=torch.float16)
    assert (scores + mask).dtype == torch.float32  # ... while fp16 + fp32 promotes
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(torch.ones(3, 3, dtype=torch.bool), -1e9)
    low = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    assert torch.isneginf(low + low)  # two additive masks overflow
    assert torch.isinf(torch.tensor([300.0], dtype=torch.float16).pow(2))  # pit-rmsnorm-low-precision


def test_torch_sdpa_returns_zeros_for_a_fully_masked_row() -> None:
    torch = pytest.importorskip("torch")
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 5):
        pytest.skip("the safe softmax in SDPA arrived in PyTorch 2.5")
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, 1, 3, 8) for _ in range(3))
    allowed = torch.ones(3, 3, dtype=torch.bool)
    allowed[0] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.equal(out[0, 0, 0], torch.zeros(8))
    assert torch.isnan(torch.softmax(torch.full((3,), float("-inf")), -1)).all()  # a hand-written softmax


def test_torch_view_after_transpose_works_only_at_one_token() -> None:
    torch = pytest.importorskip("torch")
    one = torch.randn(2, 4, 1, 8)
    merged = one.transpose(1, 2).view(2, 1, 32)
    assert torch.equal(merged, one.transpose(1, 2).reshape(2, 1, 32))
    with pytest.raises(RuntimeError):
        torch.randn(2, 4, 3, 8).transpose(1, 2).view(2, 3, 32)
