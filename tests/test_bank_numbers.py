"""Every number the bank teaches is recomputed here from first principles.

A card's own `formula` is checked by `drill validate`, but a formula can be
wrong in the same way as the answer. Here each figure is derived again in
plain Python from the model configs and definitions it rests on (Llama-3-8B's
config, 2 FLOPs per multiply-accumulate, the mixed-precision Adam layout,
the KV-cache layout, the roofline), written independently of the card, and
compared with the card's answer within the card's own tolerance.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from drill.paths import questions_dir
from drill.quiz.kinds.choice import ChoiceQuestion
from drill.quiz.kinds.numeric import NumericQuestion
from drill.quiz.loader import scan

KIB, MIB, GIB = 2**10, 2**20, 2**30

# Model configs as published (Hugging Face config.json of each checkpoint).
LLAMA3_8B = dict(vocab=128256, d=4096, layers=32, heads=32, kv_heads=8, head_dim=128, d_ff=14336, tied=False)
LLAMA3_70B = dict(vocab=128256, d=8192, layers=80, heads=64, kv_heads=8, head_dim=128, d_ff=28672, tied=False)
LLAMA32_1B = dict(vocab=128256, d=2048, layers=16, heads=32, kv_heads=8, head_dim=64, d_ff=8192, tied=True)
QWEN25_7B = dict(vocab=152064, d=3584, layers=28, heads=28, kv_heads=4, head_dim=128, d_ff=18944, tied=False)
QWEN25_7B_QKV_BIAS = 3584 + 2 * 4 * 128  # Qwen2 puts a bias on q, k and v only
LLAMA2_7B = dict(vocab=32000, d=4096, layers=32, heads=32, kv_heads=32, head_dim=128, d_ff=11008, tied=False)

# H100 SXM datasheet: dense bf16 tensor throughput and HBM3 bandwidth.
H100_BF16_FLOPS = 989e12
H100_HBM_BYTES_PER_S = 3.35e12


def layer_params(c: dict) -> int:
    """One Llama decoder layer: q, k, v, o projections, SwiGLU MLP, two RMSNorm weights; no biases."""
    attn = c["d"] * c["heads"] * c["head_dim"] * 2 + c["d"] * c["kv_heads"] * c["head_dim"] * 2
    mlp = 3 * c["d"] * c["d_ff"]
    return attn + mlp + 2 * c["d"]


def model_params(c: dict) -> int:
    embeddings = c["vocab"] * c["d"] * (1 if c["tied"] else 2)
    return c["layers"] * layer_params(c) + embeddings + c["d"]  # + final norm


def kv_bytes_per_token(c: dict, bytes_per_elem: int = 2) -> int:
    return 2 * c["layers"] * c["kv_heads"] * c["head_dim"] * bytes_per_elem


def test_llama3_8b_has_8_03_billion_parameters() -> None:
    """The anchor figure of issue 15: counting Llama-3-8B from its config gives 8.03B."""
    assert model_params(LLAMA3_8B) == 8_030_261_248
    assert model_params(LLAMA3_70B) == 70_553_706_496
    assert layer_params(LLAMA3_8B) == 218_112_000


def _bpe_merges(words: dict[str, int], n: int) -> list[tuple[tuple[str, str], int]]:
    """A minimal BPE trainer: merge the most frequent adjacent pair, recount, n times."""
    corpus = {tuple(w): c for w, c in words.items()}
    merges = []
    for _ in range(n):
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in corpus.items():
            for a, b in zip(symbols, symbols[1:], strict=False):
                pairs[(a, b)] += count
        (a, b), count = pairs.most_common(1)[0]
        merges.append(((a, b), count))
        new = {}
        for symbols, c in corpus.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new[tuple(out)] = c
        corpus = new
    return merges


def _softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def _cross_entropy_smoothed(logits: list[float], target: int, eps: float) -> float:
    logp = [math.log(p) for p in _softmax(logits)]
    return (1 - eps) * -logp[target] + eps * sum(-lp for lp in logp) / len(logp)


def _rmsnorm_backward(x: list[float], w: list[float], dy: list[float]) -> list[float]:
    """grad_x of sum(dy * RMSNorm(x)) by central finite differences (eps = 0): independent of the closed form."""

    def loss(v: list[float]) -> float:
        r = math.sqrt(sum(a * a for a in v) / len(v))
        return sum(g * wi * a / r for g, wi, a in zip(dy, w, v, strict=True))

    h = 1e-6
    return [(loss([a + h * (i == j) for j, a in enumerate(x)])
             - loss([a - h * (i == j) for j, a in enumerate(x)])) / (2 * h)
            for i in range(len(x))]


def _alibi_slopes(n: int) -> list[float]:
    """ALiBi's reference rule: powers of two directly, otherwise the 2m-sequence's even entries fill the gap."""
    def power_of_two(k: int) -> list[float]:
        return [2 ** (-8 * (h + 1) / k) for h in range(k)]

    m = 2 ** math.floor(math.log2(n))
    return power_of_two(m) if m == n else power_of_two(m) + power_of_two(2 * m)[0::2][: n - m]


def _aux_loss(n_experts: int, chosen: list[list[int]], probs: list[list[float]]) -> float:
    """Mixtral-style balance loss: N * sum_e f_e * P_e, f_e = share of tokens whose top-k includes e."""
    tokens = len(chosen)
    f = [sum(e in c for c in chosen) / tokens for e in range(n_experts)]
    p = [sum(row[e] for row in probs) / tokens for e in range(n_experts)]
    return n_experts * sum(fe * pe for fe, pe in zip(f, p, strict=True))


# card id -> the value derived here, in the card's unit
EXPECTED: dict[str, float] = {
    # tokenization
    "tok-gpt2-vocab-size": 256 + 50_000 + 1,
    "tok-vocab-growth-params": (LLAMA3_8B["vocab"] - LLAMA2_7B["vocab"]) * 4096 * 2 / 1e6,
    "tok-compression-token-drop": 100 * (1 - (1 / 3.94) / (1 / 3.17)),
    # sampling
    "samp-temperature-value": _softmax([2 / 0.5, 1 / 0.5, 0 / 0.5])[0],
    "samp-top-p-renormalised": 0.5 / sum([0.5, 0.25, 0.15]),  # the crossing token (cum 0.75 -> 0.90) is kept
    "samp-min-p-count": sum(1 for p in [0.4, 0.25, 0.15, 0.1, 0.06, 0.04] if p >= 0.2 * 0.4),
    # 4 beams on a 1,536-token prompt, 512 new tokens each: the prompt stored once (paged, shared blocks)
    "samp-beam-kv-memory": 100 * (1536 + 4 * 512) / (4 * (1536 + 512)),
    "samp-repetition-penalty-value": 2.0 / 1.2,
    # loss and perplexity
    "loss-underflow-value": -(-120 - math.log(math.exp(0) + math.exp(-120))),
    "loss-initial-value": math.log(LLAMA3_8B["vocab"]),
    "loss-perplexity-value": math.exp(2.0),
    "loss-bits-per-byte": 2.2 / math.log(2) / 4.0,
    "loss-label-smoothing-value": _cross_entropy_smoothed([math.log(p) for p in (0.7, 0.1, 0.1, 0.1)], 0, 0.1),
    "loss-ce-gradient": _softmax([1, 2, 3])[0] - 1,
    "loss-grad-accumulation-value": (100 * 2.0 + 300 * 1.0) / (100 + 300),
    # compute and scaling
    "scale-llama3-8b-params": model_params(LLAMA3_8B) / 1e9,
    "scale-llama3-8b-training-flops": 6 * 8.03e9 * 15e12,
    "scale-gpu-hours": 6 * 8.03e9 * 15e12 / (0.4 * H100_BF16_FLOPS) / 3600,
    "scale-chinchilla-optimal-size": math.sqrt(5.76e23 / (6 * 20)) / 1e9,
    "scale-chinchilla-loss": 1.69 + 406.4 / 70e9**0.34 + 410.7 / 1.4e12**0.28,
    "scale-tokens-per-parameter": 15e12 / 8.03e9,
    "scale-mfu": 100 * 8000 * 6 * 8.03e9 / H100_BF16_FLOPS,
    "scale-lm-head-flops": 100 * (2 * LLAMA3_8B["vocab"] * LLAMA3_8B["d"]) / (2 * 8.03e9),
    # serving
    "serve-ridge-point": H100_BF16_FLOPS / H100_HBM_BYTES_PER_S,
    "serve-roofline-ms-per-token": model_params(LLAMA3_8B) * 2 / H100_HBM_BYTES_PER_S * 1000,
    "serve-decode-step-with-kv": (
        (model_params(LLAMA3_8B) * 2 + 32 * 8192 * kv_bytes_per_token(LLAMA3_8B)) / H100_HBM_BYTES_PER_S * 1000
    ),
    "serve-prefill-time": 2 * model_params(LLAMA3_8B) * 8192 / (0.5 * H100_BF16_FLOPS) * 1000,
    "serve-paged-waste": math.ceil(1000 / 16) * 16 - 1000,
    "serve-speculative-accept-prob": min(1.0, 0.3 / 0.5),
    "serve-kv-quant-capacity": (40 * GIB) // (32_768 * kv_bytes_per_token(LLAMA3_70B, bytes_per_elem=1)),
    # training memory and parallelism
    "train-adam-memory-7b": 7e9 * (2 + 2 + 4 + 4 + 4) / 1e9,  # bf16 w, bf16 g, fp32 master, Adam m, Adam v
    "train-fsdp-per-gpu": 7e9 * 16 / 8 / 1e9,
    "train-activation-per-layer": (34 * 4096 * 1 * 4096 + 5 * 32 * 4096**2 * 1) / GIB,
    "train-ring-allreduce": 2 * (8 - 1) / 8 * (7e9 * 2) / 1e9,
    "train-pipeline-bubble": 100 * (8 - 1) / (32 + 8 - 1),
    # beyond attention
    "beyond-linear-state-vs-kv": (128 * 128) / (128 + 128),
    "beyond-hybrid-kv": kv_bytes_per_token({**LLAMA3_8B, "layers": 32 // 8}) / KIB,
    "beyond-mla-cache-size": (512 + 64) * 60 * 2 / KIB,
    "beyond-swa-receptive-field": 32 * 4096,
    "beyond-rolling-buffer-slot": 10_000 % 4096,
    # cards added to existing topics for the exercises of issues 11 and 12
    "norm-eps-outside-sqrt": math.sqrt(1e-6 + 1e-5) / (math.sqrt(1e-6) + 1e-5),
    "norm-rmsnorm-backward-value": _rmsnorm_backward([3.0, 4.0], [1.0, 1.0], [1.0, 0.0])[0],
    "pos-sinusoidal-value": math.sin(5 * 10_000 ** (-2 * 1 / 4)),
    "pos-sinusoidal-i-bug": 2 * math.pi * 10_000 ** (255 / 512),
    "pos-alibi-slopes-non-power-of-two": _alibi_slopes(12)[9],
    "pos-alibi-bias-alignment": -0.5 * ((5 - 2 + 0) - 1),
    "flash-standard-hbm-traffic": 4 * 32 * 4096**2 * 2 / GIB,
    "flash-merge-partials": (math.exp(2.0) * 1.0 + math.exp(1.0) * 3.0) / (math.exp(2.0) + math.exp(1.0)),
    "block-llama-layer-params": (layer_params(QWEN25_7B) + QWEN25_7B_QKV_BIAS) / 1e6,
    "block-llama3-70b-params": 100 * 2 * LLAMA3_70B["vocab"] * LLAMA3_70B["d"] / model_params(LLAMA3_70B),
    "block-tied-embedding-saving": LLAMA32_1B["vocab"] * LLAMA32_1B["d"] / 1e6,
    "ffn-param-share-llama3": 100 * 3 * 4096 * 14336 / (layer_params(LLAMA3_8B) - 2 * 4096),
    "moe-topk-weight-value": _softmax([2.0, 1.0, 0.5, -1.0])[0],
    "moe-aux-balanced-value": _aux_loss(8, [[e, (e + 1) % 8] for e in range(8)], [[1 / 8] * 8] * 8),
    "moe-aux-collapsed-value": _aux_loss(8, [[0, 1]] * 4, [[0.5, 0.5] + [0.0] * 6] * 4),
    "moe-every-expert-cost": 8 / 2,
    "gqa-max-tp-without-replication": LLAMA3_70B["kv_heads"],
    # existing cards whose figures come from the same configs
    "block-embedding-share": LLAMA3_8B["vocab"] * LLAMA3_8B["d"] / 1e6,
    "kv-llama2-7b-per-token": kv_bytes_per_token(LLAMA2_7B) / KIB,
    "gqa-70b-bytes-per-token": kv_bytes_per_token(LLAMA3_70B) / KIB,
    "gqa-70b-batch-cache": kv_bytes_per_token(LLAMA3_70B) / kv_bytes_per_token(LLAMA2_7B),
    "kv-max-batch-fits": 6.74e9 * 2 / kv_bytes_per_token(LLAMA2_7B),  # one request's cache outgrows the weights
    "mha-crossover-swiglu": 3 * 2 * LLAMA3_8B["d"] * LLAMA3_8B["d_ff"] / (4 * LLAMA3_8B["d"]),
    "moe-mixtral-active-expert-params": 32 * 2 * 3 * 4096 * 14336 / 1e9,
    "moe-expected-distinct-experts": 8 * (1 - (6 / 8) ** 8),
    "attn-score-matrix-memory": 32 * 32_768**2 * 2 / GIB,
    "flash-lse-state-size": 32 * 32_768 * 4 / MIB,
    "block-params-per-layer": 4 * 512**2 + 2 * 512 * 2048 + 2 * 2 * 512,
    "mha-params-with-bias": 4 * 1024**2 + 4 * 1024,
    "mask-causal-pairs": 2048 * 2049 // 2,
    "pos-rope-slowest-period": 2 * math.pi * 10_000 ** (126 / 128),
    "pos-alibi-slope": 2 ** (-8 * 5 / 16),
    "norm-gpt2-init-std": 0.02 / math.sqrt(2 * 48),
    "ffn-swiglu-param-count": 3 * 4096 * 11008 / 1e6,
    "ffn-llama-hidden-dim": 256 * math.ceil((8 * 4096 // 3) / 256),
    "flash-online-update-value": 2.5 * math.exp(1 - 3) + math.exp(0) + math.exp(1 - 3),
}


@pytest.fixture(scope="module")
def cards():  # type: ignore[no-untyped-def]
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


@pytest.mark.parametrize(("card", "value"), sorted(EXPECTED.items()))
def test_card_answer_matches_first_principles(cards, card: str, value: float) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, NumericQuestion), card
    assert q.tolerance.accepts(q.answer, value), f"{card}: card says {q.answer}, derived {value:.10g}"


def test_llama3_8b_kv_cache_is_128_kib_per_token() -> None:
    """The serving cards quote this figure in their prompts."""
    assert kv_bytes_per_token(LLAMA3_8B) == 128 * KIB
    assert kv_bytes_per_token(LLAMA3_70B) == 320 * KIB


def test_speculative_expected_tokens_formula_matches_a_simulation() -> None:
    """(1 - a^(g+1)) / (1 - a), the parametric card's formula, against a direct expectation over outcomes."""
    for alpha in (0.6, 0.7, 0.8, 0.9):
        for gamma in range(2, 7):
            # i accepted drafts then a correction (i < gamma), or all gamma accepted plus a bonus token
            expected = sum((i + 1) * alpha**i * (1 - alpha) for i in range(gamma)) + (gamma + 1) * alpha**gamma
            assert math.isclose(expected, (1 - alpha ** (gamma + 1)) / (1 - alpha))


def test_bpe_second_merge_card_matches_a_real_bpe_run(cards) -> None:  # type: ignore[no-untyped-def]
    merges = _bpe_merges({"tea": 8, "ten": 5, "net": 3, "tent": 4}, 2)
    assert merges[0] == (("t", "e"), 17)
    (a, b), count = merges[1]
    q = cards["tok-bpe-second-merge"]
    assert isinstance(q, ChoiceQuestion)
    right = [o.text for o in q.options if o.correct]
    assert right == [f"({a}, {b})"] and count == 9
    assert "17 occurrences" in q.prompt
