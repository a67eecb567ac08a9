"""The serving-structures and evaluation cards' numbers, derived again from first principles.

Each figure is rebuilt here the way the mechanism works (a block table walked
by hand, a prefix cache matched block by block, pass@k counted over every
subset of samples), independently of the card's own `formula`, and compared
with the card's answer within the card's tolerance. Parametric cards are
checked on every draw of their grid.
"""

from __future__ import annotations

import itertools
import math
from itertools import combinations

import pytest

from drill.paths import questions_dir
from drill.quiz.kinds.numeric import NumericQuestion
from drill.quiz.kinds.parametric import ParametricQuestion
from drill.quiz.loader import scan
from drill.quiz.parametric import answer, complete

KIB, GIB = 2**10, 2**30
LLAMA3_8B_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16


def _slot(block_table: list[int], pos: int, block_size: int) -> int:
    """The flat pool slot of a sequence's token, walking its blocks as a paged cache does."""
    slots = [b * block_size + i for b in block_table for i in range(block_size)]
    return slots[pos]


def _blocks_held(tokens: int, block_size: int) -> int:
    held = 0
    while held * block_size < tokens:
        held += 1
    return held


def _reused_tokens(matching: int, block_size: int) -> int:
    """Tokens whose KV a block-level prefix cache serves: whole blocks inside the match."""
    reused = 0
    while reused + block_size <= matching:
        reused += block_size
    return reused


def _pass_at_k_by_subsets(n: int, c: int, k: int) -> float:
    """pass@k as the share of k-subsets of the n samples (the first c correct) holding a correct one."""
    subsets = list(combinations(range(n), k))
    return sum(1 for s in subsets if min(s) < c) / len(subsets)


def _min_k_prob(logprobs: list[float], share: float) -> float:
    lowest = sorted(logprobs)[: max(1, int(len(logprobs) * share))]
    return sum(lowest) / len(lowest)


def _bits(nats: float) -> float:
    return nats / math.log(2)


EXPECTED = {
    "ss-block-table-slot": _slot([7, 2, 9, 4], 37, 16),
    "ss-paged-capacity": (20 * GIB) // (_blocks_held(1000, 16) * 16 * LLAMA3_8B_KV_PER_TOKEN),
    "ss-prefix-reused-tokens": _reused_tokens(530, 16),
    "ss-static-batch-utilisation": 100 * sum([100, 200, 300, 1000]) / (4 * max([100, 200, 300, 1000])),
    "ss-mla-gqa-equivalent": (512 + 64) / (2 * 128),
    # evaluation
    "eval-bpb-to-perplexity": math.exp(0.80 * 4.0 * math.log(2)),
    "eval-pass-at-k-value": _pass_at_k_by_subsets(10, 3, 5),
    "eval-min-k-score": _min_k_prob([-0.1, -0.3, -2.5, -0.2, -4.0, -0.05, -0.6, -1.2, -0.4, -0.15], 0.2),
    "eval-paired-difference": 0.02 / math.hypot(math.sqrt(0.81 * 0.19 / 1000), math.sqrt(0.79 * 0.21 / 1000)),
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


def test_llama3_8b_kv_is_128_kib_per_token() -> None:
    assert LLAMA3_8B_KV_PER_TOKEN == 128 * KIB


def test_contiguous_reservation_fits_the_40_requests_the_capacity_card_states() -> None:
    assert (20 * GIB) // (4096 * LLAMA3_8B_KV_PER_TOKEN) == 40


def _pool_blocks(env: dict) -> float:
    """Whole blocks of K and V for every layer that fit in the pool, in exact integer bytes."""
    return (env["free_gib"] * GIB) // (env["block_size"] * LLAMA3_8B_KV_PER_TOKEN)


def _mla_shrink(env: dict) -> float:
    mha = 2 * env["n_heads"] * env["d_head"]  # a key and a value per head
    mla = env["d_latent"] + env["d_rope"]  # the latent and the shared RoPE key
    return mha / mla


def _pass_at_2(env: dict) -> float:
    return _pass_at_k_by_subsets(env["n"], env["c"], 2)


def _ci_half_width_points(env: dict) -> float:
    p = env["acc"] / 100
    return 100 * 1.959964 * math.sqrt(p * (1 - p) / env["n"])  # the 97.5% normal quantile


# parametric card -> the answer for one draw, computed without the card's formula
PARAMETRIC = {
    "ss-pool-blocks": _pool_blocks,
    "ss-mla-vs-mha-ratio": _mla_shrink,
    "eval-pass-at-2": _pass_at_2,
    "eval-error-bar": _ci_half_width_points,
}


def _grid(question: ParametricQuestion):  # type: ignore[no-untyped-def]
    axes = [spec.choices if spec.choices else range(spec.low, spec.high + 1, spec.step) for spec in question.params]
    for values in itertools.product(*axes):
        env = complete(question, {spec.name: v for spec, v in zip(question.params, values, strict=True)})
        if env is not None:
            yield env


@pytest.mark.parametrize("card", sorted(PARAMETRIC))
def test_parametric_card_matches_first_principles_on_every_draw(cards, card: str) -> None:  # type: ignore[no-untyped-def]
    q = cards[card]
    assert isinstance(q, ParametricQuestion), card
    draws = list(_grid(q))
    assert draws, card
    for env in draws:
        derived = PARAMETRIC[card](env)
        card_says = answer(q, env)
        assert q.tolerance.accepts(card_says, derived), f"{card} at {env}: card {card_says}, derived {derived}"


def test_the_compared_tokenizers_card_states_the_right_bits_per_byte() -> None:
    """eval-ppl-compare-tokenizers: B, ~0.83 bits per byte, against A's ~0.91."""
    a, b = math.log2(9.0) / 3.5, math.log2(14.0) / 4.6
    assert (round(a, 2), round(b, 2)) == (0.91, 0.83)


def test_pooling_pass_at_k_over_problems_is_wrong_by_what_the_spot_bug_card_says() -> None:
    """eval-bug-pass-at-k-pooled: one problem always solved, one never, n = 10, k = 10."""
    per_problem = (_pass_at_k_by_subsets(10, 10, 10) + _pass_at_k_by_subsets(10, 0, 10)) / 2
    assert per_problem == 0.5
    assert _pass_at_k_by_subsets(20, 10, 10) > 0.99


def test_the_acc_norm_card_picks_as_the_harness_does() -> None:
    """eval-acc-norm: raw sums pick X (5 chars, -3.0); per character Y (20 chars, -8.0) wins."""
    lls, lengths = [-3.0, -8.0], [5, 20]
    assert max(range(2), key=lambda i: lls[i]) == 0
    assert max(range(2), key=lambda i: lls[i] / lengths[i]) == 1
