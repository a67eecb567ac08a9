"""The post_training, quantization and peft cards' numbers, derived again from first principles.

As in test_bank_numbers.py, each figure is recomputed here in plain Python from
its definition (the Bradley-Terry and DPO losses, GRPO's group normalisation,
absmax rounding, the fp8 value sets enumerated bit pattern by bit pattern,
LoRA's factor shapes, QLoRA's block constants), written independently of the
card, and compared with the card's answer within the card's own tolerance.
Parametric cards are checked on every draw of their parameter space against
a Python function of the drawn values. No torch: this stays a quiz-side test.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable

import pytest

from drill.paths import questions_dir
from drill.quiz import parametric
from drill.quiz.kinds.numeric import NumericQuestion
from drill.quiz.kinds.parametric import ParametricQuestion
from drill.quiz.loader import scan


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _fp8_values(exponent_bits: int, mantissa_bits: int, ieee_specials: bool) -> list[float]:
    """Every finite non-negative value of a sign/exponent/mantissa fp8 layout, by enumerating the bit patterns.

    E5M2 follows IEEE 754 (the top exponent is inf/NaN); E4M3 (the "fn" variant) keeps the top exponent for
    numbers and gives up only the all-ones pattern, its NaN.
    """
    bias = 2 ** (exponent_bits - 1) - 1
    values = []
    for e in range(2**exponent_bits):
        for m in range(2**mantissa_bits):
            if ieee_specials and e == 2**exponent_bits - 1:
                continue
            if not ieee_specials and e == 2**exponent_bits - 1 and m == 2**mantissa_bits - 1:
                continue
            frac = m / 2**mantissa_bits
            values.append(frac * 2 ** (1 - bias) if e == 0 else (1 + frac) * 2 ** (e - bias))
    return sorted(set(values))


E4M3 = _fp8_values(4, 3, ieee_specials=False)
E5M2 = _fp8_values(5, 2, ieee_specials=True)


def _gap_near(values: list[float], x: float) -> float:
    below = max(v for v in values if v <= x)
    return min(v for v in values if v > below) - below


def _sft_targets(prompt: int, response: int) -> int:
    """Positions t = 0..n-2 predict token t+1; a target counts when it is a response token."""
    n = prompt + response
    return sum(1 for t in range(n - 1) if t + 1 >= prompt)


def _absmax_int8_codes(row: list[float]) -> list[int]:
    scale = max(abs(x) for x in row) / 127
    return [round(x / scale) for x in row]


def _max_int8_error(amax: float, samples: int = 200_001) -> float:
    scale = amax / 127
    grid = (-amax + 2 * amax * i / (samples - 1) for i in range(samples))
    return max(abs(x - round(x / scale) * scale) for x in grid)


def _optimal_policy_ratio(rewards: list[float], ref: list[float], beta: float) -> float:
    """pi*(y) = pi_ref(y) exp(r(y)/beta) / Z over the listed responses; ratio of the first to the second."""
    weights = [p * math.exp(r / beta) for p, r in zip(ref, rewards, strict=True)]
    z = sum(weights)
    return (weights[0] / z) / (weights[1] / z)


# card id -> the value derived here, in the card's unit
EXPECTED: dict[str, float] = {
    # post_training
    "pt-sft-target-count": _sft_targets(300, 100),
    "pt-sft-token-vs-sequence-mean": (20 + 30) / (10 + 30),
    "pt-bradley-terry-value": -math.log(_sigmoid(0.7 - (-0.8))),
    "pt-kl-penalised-reward": 2.0 - 0.1 * 5.0,
    "pt-dpo-loss-value": -math.log(_sigmoid(0.1 * ((-10 - -11) - (-14 - -12)))),
    "pt-kl-optimal-policy": _optimal_policy_ratio([1.0, 0.0], [0.5, 0.5], 0.5),
    "pt-grpo-advantage-value": (1 - statistics.mean([1, 0, 0, 0])) / statistics.stdev([1, 0, 0, 0]),
    # quantization
    "quant-int4-group-memory": 70e9 * (4 * 128 + 16) / 128 / 8 / 1e9,
    "quant-absmax-outlier": _absmax_int8_codes([0.04, -0.03, 0.06, 12.7]).count(0),
    "quant-int8-rounding-error": _max_int8_error(2.54),
    "quant-smoothquant-factor": math.sqrt(64) / math.sqrt(0.25),
    "quant-fp8-next-after-one": min(v for v in E4M3 if v > 1),
    "quant-fp8-block-scales": math.ceil(4096 / 128) * math.ceil(14336 / 128),
    "quant-kv-int4-ratio": 16 * 32 / (4 * 32 + 16 + 16),
    # peft
    "peft-lora-params-matrix": 16 * 4096 + 4096 * 16,
    "peft-alpha-over-r": (16 / 8) / (16 / 64),
    "peft-rank-bound": min(8, 4096, 11008),
    "peft-memory-lora-vs-full": (7e9 * 2 + 40e6 * 16) / 1e9,
    "peft-double-quant-saving": 65e9 * (32 / 64 - (8 / 64 + 32 / (64 * 256))) / 8 / 1e9,
}


def _ppo(p: dict) -> float:
    r, a, eps = p["ratio"], p["advantage"], p["eps"]
    return min(r * a, min(max(r, 1 - eps), 1 + eps) * a)


def _grpo(p: dict) -> float:
    rewards = [1] * p["correct"] + [0] * (p["group"] - p["correct"])
    return (1 - statistics.mean(rewards)) / statistics.pstdev(rewards)


def _lora_gqa(p: dict) -> float:
    shapes = [(p["d"], p["d"]), (p["d"], p["d_kv"]), (p["d"], p["d_kv"]), (p["d"], p["d"])]  # q, k, v, o
    return p["layers"] * sum(p["r"] * (d_in + d_out) for d_in, d_out in shapes)


# parametric card id -> the answer as a function of one draw
PARAMETRIC: dict[str, Callable[[dict], float]] = {
    "pt-ppo-clip-value": _ppo,
    "pt-dpo-loss-parametric": lambda p: -math.log(_sigmoid(p["beta"] * (p["chosen_ratio"] - p["rejected_ratio"]))),
    "pt-grpo-binary-advantage": _grpo,
    "quant-compression-ratio": lambda p: 16 * p["group"] / (p["bits"] * p["group"] + p["meta"]),
    "quant-smoothquant-weight-after": lambda p: (p["act_max"] * p["w_max"]) ** p["alpha"],  # w_max * s, simplified
    "quant-fp8-spacing": lambda p: _gap_near(E4M3, p["x"]),
    "peft-lora-params-gqa": _lora_gqa,
    "peft-qlora-base-memory": lambda p: p["billions"] * 1e9 * (4 + 8 / 64 + 32 / 64 / 256) / 8 / 1e9,
    "peft-trainable-share": lambda p: 100 * 4 * (p["r"] * p["d"] + p["d"] * p["r"]) / (12 * p["d"] ** 2),
}


@pytest.fixture(scope="module")
def cards():  # type: ignore[no-untyped-def]
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


def test_fp8_enumeration_gives_the_published_maxima() -> None:
    """The cards quote 448 (E4M3) and 57344 (E5M2); the enumeration above must agree before it checks them."""
    assert max(E4M3) == 448 and max(E5M2) == 57344
    assert len([v for v in E4M3 if 1 <= v < 2]) == 8 and len([v for v in E5M2 if 1 <= v < 2]) == 4


@pytest.mark.parametrize(("card", "value"), sorted(EXPECTED.items()))
def test_card_answer_matches_first_principles(cards, card: str, value: float) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, NumericQuestion), card
    assert q.tolerance.accepts(q.answer, value), f"{card}: card says {q.answer}, derived {value:.10g}"


@pytest.mark.parametrize("card", sorted(PARAMETRIC))
def test_parametric_formula_matches_first_principles_on_every_draw(cards, card: str) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, ParametricQuestion), card
    values = [spec.choices if spec.choices else range(spec.low, spec.high + 1, spec.step) for spec in q.params]
    checked = 0
    for combo in itertools.product(*values):
        draw = dict(zip((s.name for s in q.params), combo, strict=True))
        env = parametric.complete(q, draw)
        if env is None:
            continue
        checked += 1
        card_value, derived = parametric.answer(q, env), PARAMETRIC[card](draw)
        assert q.tolerance.accepts(card_value, derived), f"{card} {draw}: card gives {card_value}, derived {derived}"
    assert checked > 0
