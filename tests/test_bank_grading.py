"""The shipped bank grades fairly: no known mistake is ever graded right, and nothing ticks by accident.

These are the bank-side guards for issue 15's grading holes. `drill validate`
checks a sample of draws; here every parametric question is run on the whole
of its parameter space (they are all small), so a wrong formula that lands
inside the tolerance on a single draw fails. Key-point patterns are run
against answers that say nothing: a pattern that matches one of them ticks a
point for a learner who knew nothing. And the cards must stand alone: a
prompt that opens by pointing at "the same model" or "the previous question"
refers to something the learner may never have seen (cards are shown in
spaced-repetition order, one at a time).
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

from drill.paths import questions_dir
from drill.quiz import parametric
from drill.quiz.formula import FormulaError
from drill.quiz.kinds.choice import ChoiceQuestion
from drill.quiz.kinds.numeric import NumericQuestion
from drill.quiz.kinds.parametric import ParametricQuestion
from drill.quiz.kinds.recall import RecallQuestion
from drill.quiz.loader import scan
from drill.quiz.schema import Question

EXHAUSTIVE_LIMIT = 200_000


@pytest.fixture(scope="module")
def questions() -> tuple[Question, ...]:
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return result.bank.questions


def _parametric_ids() -> list[str]:
    return [q.id for q in scan(questions_dir()).bank.questions if isinstance(q, ParametricQuestion)]


def _all_draws(q: ParametricQuestion):  # type: ignore[no-untyped-def]
    values = [spec.choices if spec.choices else range(spec.low, spec.high + 1, spec.step) for spec in q.params]
    total = 1
    for v in values:
        total *= len(v)
    if total <= EXHAUSTIVE_LIMIT:
        for combo in itertools.product(*values):
            yield dict(zip((s.name for s in q.params), combo, strict=True))
    else:  # pragma: no cover - no shipped question is this large today
        rng = random.Random(15)
        for _ in range(EXHAUSTIVE_LIMIT):
            yield {s.name: rng.choice(list(v)) for s, v in zip(q.params, values, strict=True)}


@pytest.mark.parametrize("qid", _parametric_ids())
def test_no_wrong_formula_is_graded_right_on_any_draw(questions: tuple[Question, ...], qid: str) -> None:
    q = next(x for x in questions if x.id == qid)
    assert isinstance(q, ParametricQuestion)
    valid = 0
    for params in _all_draws(q):
        env = parametric.complete(q, params)
        if env is None:
            continue
        valid += 1
        right = parametric.answer(q, env)
        for wrong in q.wrong_formulas:
            try:
                value = parametric.finite(parametric.compiled(wrong.formula).evaluate(env))
            except FormulaError:
                continue
            assert not q.tolerance.accepts(value, right), (
                f"{qid}: wrong formula {wrong.formula!r} gives {value:.6g}, within {q.tolerance.describe()} "
                f"of the answer {right:.6g} for {params}"
            )
    assert valid > 0


def test_no_numeric_wrong_answer_is_graded_right(questions: tuple[Question, ...]) -> None:
    for q in questions:
        if isinstance(q, NumericQuestion):
            for wrong in q.wrong_answers:
                assert not q.tolerance.accepts(wrong.value, q.answer), f"{q.id}: {wrong.value} is graded right"


# Answers that know nothing. A pattern matching any of them gives a point away.
NONSENSE = (
    "I don't know",
    "idk",
    "no idea, sorry",
    "yes",
    "no",
    "maybe",
    "it depends",
    "because of reasons",
    "asdf qwerty zxcv",
    "...",
    "???",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore",
    "all of the above and none of the above; each and every one of them, only some, and also both",
    "The model learns it from the data during training, and then it just works.",
    "It is better, faster and more efficient, so everyone uses it now.",
    "This is a hard question. I am not sure, but I think it has something to do with the way things work in general.",
    "It is used because it is the standard approach that people use in practice for this kind of thing.",
    "the answer is the one that makes the most sense given what we know about it",
    # from the set `drill validate` audits with (drill/quiz/kinds/recall.py on the quiz-code branch)
    "the thing",
    "It is all about how each and every part works; only then is it better overall.",
    "About 10, 100 or 1000 times, maybe 2 or 3 on average.",
)
# Buzzwords strung together: single domain words may match one pattern, but no whole point may tick.
DOMAIN_NONSENSE = (
    "The model uses attention over the tokens of the input in every layer and learns better weights in training.",
    "It uses the GPU memory and the attention weights, the tokens, the softmax and the loss to train the model faster.",
)


def test_no_key_point_pattern_matches_a_nonsense_answer(questions: tuple[Question, ...]) -> None:
    bad = []
    for q in questions:
        if not isinstance(q, RecallQuestion):
            continue
        for point in q.key_points:
            for pattern in point.patterns:
                hits = [n for n in NONSENSE if re.search(pattern, n, re.IGNORECASE)]
                if hits:
                    bad.append(f"{q.id}: {pattern!r} matches {hits[0]!r}")
    assert not bad, "\n".join(bad)


def test_no_key_point_is_ticked_by_domain_buzzwords(questions: tuple[Question, ...]) -> None:
    bad = [
        f"{q.id}: {p.text[:60]!r} ticks on {n[:40]!r}"
        for q in questions
        if isinstance(q, RecallQuestion)
        for p in q.key_points
        for n in DOMAIN_NONSENSE
        if p.matches(n)
    ]
    assert not bad, "\n".join(bad)


def test_no_key_point_is_ticked_by_the_prompt_typed_back(questions: tuple[Question, ...]) -> None:
    """A learner who pastes the question back has said nothing; no point may tick for it."""
    bad = [
        f"{q.id}: {p.text[:60]!r}"
        for q in questions
        if isinstance(q, RecallQuestion)
        for p in q.key_points
        if p.matches(q.prompt)
    ]
    assert not bad, "\n".join(bad)


def test_every_recall_card_can_be_pre_graded(questions: tuple[Question, ...]) -> None:
    """A card whose points have no patterns never suggests a rating; each one needs at least two points that
    can tick."""
    for q in questions:
        if isinstance(q, RecallQuestion):
            assert sum(1 for p in q.key_points if p.patterns) >= 2, q.id


def longest_option_is_right(q: ChoiceQuestion) -> bool:
    """True when an option of the maximum length (ties included) is a right one: the length gives it away."""
    longest = max(len(o.text) for o in q.options)
    return any(o.correct and len(o.text) == longest for o in q.options)


def test_the_longest_option_rarely_gives_the_answer_away(questions: tuple[Question, ...]) -> None:
    choice = [q for q in questions if isinstance(q, ChoiceQuestion)]
    longest = [q.id for q in choice if longest_option_is_right(q)]
    share = len(longest) / len(choice)
    assert share <= 0.35, (f"{len(longest)} of {len(choice)} choice questions ({share:.0%}) have the right option "
                           f"longest: {longest}")


def test_the_shortest_option_rarely_gives_the_answer_away_either(questions: tuple[Question, ...]) -> None:
    """Trimming right options to beat the length cue must not create the opposite cue."""
    choice = [q for q in questions if isinstance(q, ChoiceQuestion)]
    shortest = [q.id for q in choice if any(o.correct and len(o.text) == min(len(x.text) for x in q.options)
                                            for o in q.options)]
    share = len(shortest) / len(choice)
    assert share <= 0.35, (f"{len(shortest)} of {len(choice)} choice questions ({share:.0%}) have the right option "
                           f"shortest: {shortest}")


BACK_REFERENCE = re.compile(
    r"^\W*(same\b|the same (model|setup|config|loss|formula|numbers?|layer|question)\b|as (above|before)|"
    r"(the |that |this )?(previous|preceding|last|above) (question|card|model|answer|example|one)|"
    r"following (up|on)|continu(ing|ed)|again,|now (assume|suppose|take)|next,|in the (last|previous))",
    re.IGNORECASE,
)
BACK_REFERENCE_ANYWHERE = re.compile(
    r"\b(as (in|for) the (previous|last|above)|(previous|preceding|earlier|last|above) (question|card)|"
    r"from (the )?(previous|last) (question|card|answer)|the same model as)\b",
    re.IGNORECASE,
)


def test_cards_stand_alone(questions: tuple[Question, ...]) -> None:
    """No prompt leans on a card the learner may not have seen (issue 16: 'Same model (320 KiB …)')."""
    bad = [q.id for q in questions if BACK_REFERENCE.search(q.prompt) or BACK_REFERENCE_ANYWHERE.search(q.prompt)]
    assert not bad, f"prompts that refer to another card: {bad}"


@pytest.mark.parametrize(
    "prompt",
    [
        "Same model (320 KiB of KV cache per token). How much cache do 16 requests need?",
        "As above, but with GQA-8.",
        "The previous question used fp16; redo it in fp8.",
        "Following up on FlashAttention: what limits decode?",
        "Using the numbers from the previous card, compute the total.",
        "Same loss, but with top-1 routing.",
    ],
)
def test_back_reference_check_catches_the_known_shapes(prompt: str) -> None:
    assert BACK_REFERENCE.search(prompt) or BACK_REFERENCE_ANYWHERE.search(prompt)
