"""The figures of the optimizers, long_context and decoding topics, derived again from their definitions.

Like test_bank_numbers.py, each value is recomputed here in plain Python, independently of the card's own
`formula`: Adam and clipping are run as algorithms, bf16 rounding is done on the bit pattern, the RoPE
scalings (NTK-aware, YaRN, Llama 3.1) build their frequency tables, speculative sampling is enumerated over
its outcomes, and Medusa's tree is built node by node. Parametric cards are checked the same way on every
draw of their parameter space.
"""

from __future__ import annotations

import itertools
import math
import struct

import pytest

from drill.paths import questions_dir
from drill.quiz import parametric
from drill.quiz.kinds.numeric import NumericQuestion
from drill.quiz.kinds.parametric import ParametricQuestion
from drill.quiz.loader import scan


def adam_first_step(g: float, b1: float = 0.9, b2: float = 0.999, corrected: bool = True) -> float:
    """One Adam update from zero state (ε = 0), in units of the learning rate."""
    m = (1 - b1) * g
    v = (1 - b2) * g * g
    if corrected:
        m, v = m / (1 - b1), v / (1 - b2)
    return m / math.sqrt(v)


def warmup_cosine(step: int, peak: float, floor: float, warmup: int, total: int) -> float:
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / (total - warmup)
    return floor + (peak - floor) * (1 + math.cos(math.pi * progress)) / 2


def clip_global(norms: list[float], max_norm: float) -> list[float]:
    """torch.nn.utils.clip_grad_norm_ on tensors given by their norms: one factor for all."""
    total = math.sqrt(sum(n * n for n in norms))
    scale = min(1.0, max_norm / (total + 1e-6))
    return [n * scale for n in norms]


def to_bf16(x: float) -> float:
    """Round a float32 value to bfloat16 (round to nearest, ties to even) on its bit pattern."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def rope_inv_freq(base: float, d: int) -> list[float]:
    return [base ** (-2 * i / d) for i in range(d // 2)]


def llama3_scaled(inv_freq: list[float], factor: float = 8, low: float = 1, high: float = 4,
                  old_len: int = 8192) -> list[float]:
    """Llama 3.1's rope_scaling, written from its three-band definition."""
    out = []
    for f in inv_freq:
        wavelen = 2 * math.pi / f
        if wavelen < old_len / high:
            out.append(f)
        elif wavelen > old_len / low:
            out.append(f / factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def speculative_tokens_per_step(alpha: float, gamma: int) -> float:
    """Expected tokens from one target pass: i accepted drafts and a correction, or all γ plus a bonus."""
    return sum((i + 1) * alpha**i * (1 - alpha) for i in range(gamma)) + (gamma + 1) * alpha**gamma


def speculative_output_distribution(p: list[float], q: list[float]) -> list[float]:
    """P(emitted = x) for one speculative position: accepted draft plus resampled residual."""
    accepted = [qx * min(1.0, px / qx) for px, qx in zip(p, q, strict=True)]
    residual = [max(0.0, px - qx) for px, qx in zip(p, q, strict=True)]
    rejected = 1 - sum(accepted)
    return [a + rejected * r / sum(residual) for a, r in zip(accepted, residual, strict=True)]


def tree_nodes(top_k: list[int]) -> int:
    """Distinct prefixes of the Cartesian-product candidate tree (each verified once)."""
    prefixes = set()
    for candidate in itertools.product(*(range(k) for k in top_k)):
        for depth in range(1, len(candidate) + 1):
            prefixes.add(candidate[:depth])
    return len(prefixes)


P = [0.4, 0.3, 0.2, 0.1]
Q = [0.1, 0.5, 0.1, 0.3]
RESIDUAL = [max(0.0, p - q) for p, q in zip(P, Q, strict=True)]
INV_FREQ_1E4 = rope_inv_freq(10_000, 128)
NTK_BASE_S4 = 10_000 * 4 ** (128 / 126)

EXPECTED: dict[str, float] = {
    # optimizers
    "opt-no-bias-correction-step1": adam_first_step(0.37, corrected=False) / adam_first_step(0.37),
    "opt-cosine-lr": warmup_cosine(75_500, 3e-4, 3e-5, 2_000, 100_000),
    "opt-clip-global-norm-value": clip_global([3, 4, 12], 1.0)[0],
    "opt-adamw-decay-fraction": math.prod([1 - 3e-4 * 0.1] * 100_000),
    "opt-bf16-update-lost": to_bf16(to_bf16(1.0) - 0.001),
    "opt-8bit-adam-bytes": sum({"bf16 weights": 2, "bf16 grads": 2, "fp32 master": 4, "m int8": 1,
                                "v int8": 1}.values()),
    "opt-mup-hidden-lr": 1e-2 / (4096 / 256),
    # long_context
    "lc-pi-fast-angle": INV_FREQ_1E4[0] * (1 * 4096 / 32_768),
    "lc-ntk-middle-pair": (2 * math.pi / rope_inv_freq(NTK_BASE_S4, 128)[32]) / (2 * math.pi / INV_FREQ_1E4[32]),
    "lc-yarn-logit-scale": (0.1 * math.log(16) + 1) ** 2,
    "lc-yarn-full-interp-count": sum(1 for f in INV_FREQ_1E4 if 4096 / (2 * math.pi / f) < 1),
    "lc-llama3-band-wavelength": 2 * math.pi / llama3_scaled([2 * math.pi / 4096])[0],
    "lc-ring-min-block": 400e12 / 50e9,  # 4dc^2 / F = 4dc / B at the smallest hidden block
    # decoding
    "dec-spec-alpha-value": sum(q * min(1.0, p / q) for p, q in zip(P, Q, strict=True)),
    "dec-spec-residual-value": RESIDUAL[2] / sum(RESIDUAL),
    "dec-spec-speedup-value": speculative_tokens_per_step(0.8, 4) / (4 * 0.05 + 1),
    "dec-gnmt-length-penalty": -6.0 * 6**0.6 / (5 + 10) ** 0.6,
    "dec-medusa-tree-size": tree_nodes([2, 3, 2]),
}


@pytest.fixture(scope="module")
def cards():  # type: ignore[no-untyped-def]
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


@pytest.mark.parametrize(("card", "value"), sorted(EXPECTED.items()))
def test_card_answer_matches_its_derivation(cards, card: str, value: float) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, NumericQuestion), card
    assert q.tolerance.accepts(q.answer, value), f"{card}: card says {q.answer}, derived {value:.10g}"


def test_the_derivations_themselves_hold() -> None:
    """The helpers agree with the facts they stand for, so a wrong helper cannot bless a wrong card."""
    assert to_bf16(1.0 - 2**-8) == 1.0 - 2**-8 and to_bf16(1.0 - 0.003) == 1.0 - 2**-8
    assert speculative_output_distribution(P, Q) == pytest.approx(P)  # speculative sampling is exact
    assert tree_nodes([2, 3, 2]) == 2 + 6 + 12
    slow = rope_inv_freq(NTK_BASE_S4, 128)[-1]
    assert INV_FREQ_1E4[-1] / slow == pytest.approx(4) and rope_inv_freq(NTK_BASE_S4, 128)[0] == 1.0
    scaled = llama3_scaled(rope_inv_freq(500_000, 128))
    kept = sum(a == b for a, b in zip(scaled, rope_inv_freq(500_000, 128), strict=True))
    assert kept == 29  # the long_context card's explanation: 29 kept, 29 divided by 8, 6 blended


def _draws(q: ParametricQuestion):  # type: ignore[no-untyped-def]
    values = [spec.choices if spec.choices else range(spec.low, spec.high + 1, spec.step) for spec in q.params]
    for combo in itertools.product(*values):
        env = parametric.complete(q, dict(zip((s.name for s in q.params), combo, strict=True)))
        if env is not None:
            yield env


# parametric card -> its answer derived from the drawn values, independently of the card's formula
DERIVED = {
    "opt-clip-param": lambda e: clip_global([e["ga"], e["gb"]], e["max_norm"])[0],
    "opt-wsd-lr": lambda e: e["peak"] * (1 - (e["step"] - e["decay_start"]) / (e["total"] - e["decay_start"])),
    "lc-pi-angle": lambda e: (e["m"] / e["factor"]) * rope_inv_freq(10_000, 128)[int(e["i"])],
    "lc-ntk-base": lambda e: _ntk_base_by_bisection(e["base"], int(e["d_head"]), e["s"]),
    "dec-spec-walltime-param": lambda e: (speculative_tokens_per_step(e["alpha"], int(e["gamma"]))
                                          / (e["gamma"] * e["c"] + 1)),
    "dec-length-penalty-param": lambda e: e["logp"] / ((5 + e["length"]) / 6) ** e["alpha"],
    # Mistral 7B: 32 layers x 8 KV heads x 128, fp16, K and V; the rolling buffer keeps the last 4,096 tokens
    "kv-sliding-window-cache": lambda e: e["batch"] * min(e["seq_len"], 4096) * (2 * 32 * 8 * 128 * 2) / 2**20,
}


def _ntk_base_by_bisection(base: float, d: int, s: float) -> float:
    """The base whose slowest pair turns exactly s times slower, found numerically."""
    target = base ** (-(d - 2) / d) / s
    lo, hi = base, base * s**2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid ** (-(d - 2) / d) > target else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("card", sorted(DERIVED))
def test_parametric_formula_matches_its_derivation_on_every_draw(cards, card: str) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, ParametricQuestion), card
    n = 0
    for env in _draws(q):
        n += 1
        right, derived = parametric.answer(q, env), DERIVED[card](env)
        assert q.tolerance.accepts(right, derived), f"{card}: formula {right:.6g}, derived {derived:.6g} for {env}"
    assert n > 0
