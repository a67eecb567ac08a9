"""The serving-structures and evaluation cards' numbers, derived again from first principles.

Each figure is rebuilt here the way the mechanism works (a block table walked
by hand, a prefix cache matched block by block, pass@k counted over every
subset of samples), independently of the card's own `formula`, and compared
with the card's answer within the card's tolerance. Parametric cards are
checked on every draw of their grid.
"""

from __future__ import annotations

import itertools

import pytest

from drill.paths import questions_dir
from drill.quiz.loader import scan
from drill.quiz.parametric import answer, complete
from drill.quiz.schema import NumericQuestion, ParametricQuestion

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


EXPECTED = {
    "ss-block-table-slot": _slot([7, 2, 9, 4], 37, 16),
    "ss-paged-capacity": (20 * GIB) // (_blocks_held(1000, 16) * 16 * LLAMA3_8B_KV_PER_TOKEN),
    "ss-prefix-reused-tokens": _reused_tokens(530, 16),
    "ss-static-batch-utilisation": 100 * sum([100, 200, 300, 1000]) / (4 * max([100, 200, 300, 1000])),
    "ss-mla-gqa-equivalent": (512 + 64) / (2 * 128),
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


# parametric card -> the answer for one draw, computed without the card's formula
PARAMETRIC = {
    "ss-pool-blocks": _pool_blocks,
    "ss-mla-vs-mha-ratio": _mla_shrink,
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
