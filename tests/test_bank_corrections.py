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
from drill.quiz.loader import scan
from drill.quiz.schema import ChoiceQuestion, Question, RecallQuestion


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


@pytest.mark.parametrize("fix", CORRECTIONS, ids=[c.card for c in CORRECTIONS])
def test_card_says_the_corrected_claim(cards: dict[str, Question], fix: Correction) -> None:
    text = teaching_text(cards[fix.card])
    for pattern in fix.says:
        assert re.search(pattern, text, re.MULTILINE), f"{fix.card} lost the corrected claim {pattern!r}"
    for pattern in fix.not_says:
        assert not re.search(pattern, text, re.MULTILINE), f"{fix.card} teaches the old claim again: {pattern!r}"


@pytest.mark.parametrize("fix", [c for c in CORRECTIONS if c.ticks], ids=[c.card for c in CORRECTIONS if c.ticks])
def test_corrected_key_point_grades_the_corrected_fact(cards: dict[str, Question], fix: Correction) -> None:
    card = cards[fix.card]
    assert isinstance(card, RecallQuestion)
    for fragment, right, wrong in fix.ticks:
        points = [p for p in card.key_points if fragment in p.text]
        assert len(points) == 1, f"{fix.card}: no single key point containing {fragment!r}"
        assert points[0].matches(right), f"{fix.card}: {fragment!r} does not tick a right answer: {right!r}"
        assert not points[0].matches(wrong), f"{fix.card}: {fragment!r} ticks the misconception {wrong!r}"


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
