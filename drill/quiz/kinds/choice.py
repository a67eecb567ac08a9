"""choice: single or multiple choice, checked automatically; options are shown shuffled.

Banks tend to write the right option first and longest (it is the one that
needs qualifying). Shuffling hides the first in the quiz, but `--no-shuffle`
shows bank order, so `drill validate` checks both: it refuses a bank where the
right option is the longest more often than LONGEST_RIGHT_MAX, and one where a
position holds the right option far more often than its fair share (a
learner could pass by picking the longest, or by picking b). The Anki export
shuffles too, seeded by the question's id so re-exports keep one order.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from drill.quiz.fields import Fields
from drill.quiz.kinds.base import Asked, Asker, Kind
from drill.quiz.schedule import AGAIN, GOOD
from drill.quiz.schema import Question, letter
from drill.quiz.text import reflow

LONGEST_RIGHT_MAX = 0.35
# Below this many choice questions a share says little (one file, a small own bank): report only.
LONGEST_RIGHT_MIN_QUESTIONS = 10
# A position holding the right option of more than this times its fair share (plus a little slack for small
# banks) is given away: a bank in drafting order puts it at a or b three times in four.
POSITION_RIGHT_MAX = 1.5
POSITION_SLACK = 2


@dataclass(frozen=True)
class Option:
    """One choice option; `feedback` is shown when it is picked or is right."""

    text: str
    correct: bool
    feedback: str = ""


@dataclass(frozen=True, kw_only=True)
class ChoiceQuestion(Question):
    """Single or multiple choice, checked automatically."""

    options: tuple[Option, ...]

    @property
    def multiple(self) -> bool:
        """More than one correct option: the learner must pick all of them."""
        return sum(o.correct for o in self.options) > 1

    @property
    def correct_letters(self) -> frozenset[str]:
        return frozenset(letter(i) for i, o in enumerate(self.options) if o.correct)


def build(fields: Fields, common: dict[str, Any]) -> Question:
    options = []
    raw = fields.items("options", lo=2, hi=8)
    for item in raw:
        sub = fields.sub(item, "option", fields.line("options"))
        if sub is None:
            continue
        sub.check_keys(("text", "correct"), ("feedback",))
        correct = sub.data.get("correct")
        if "correct" in sub.data and not isinstance(correct, bool):
            sub.out.add(sub.line("correct"), f"{sub.what}: 'correct' must be true or false, not {correct!r}")
        options.append(Option(sub.text("text"), correct is True, sub.text("feedback", required=False)))
    if raw and options and not any(o.correct for o in options):
        fields.out.add(fields.line("options"),
                       f"{fields.what}: no option is marked 'correct: true'; mark the right one(s)")
    texts = [o.text for o in options if o.text]
    for text in {t for t in texts if texts.count(t) > 1}:
        fields.out.add(fields.line("options"),
                       f"{fields.what}: option text {text!r} appears twice; make options distinct")
    return ChoiceQuestion(options=tuple(options), **common)


def ask(session: Asker, question: ChoiceQuestion) -> Asked:
    session.say(reflow(question.prompt))
    options = list(question.options)
    if session.shuffle:
        session.rng.shuffle(options)
    session.items([(f"{letter(i)})", option.text, None) for i, option in enumerate(options)])
    how = "pick all that apply, e.g. a,c" if question.multiple else "one letter"
    while True:
        text = session.answer(question, f"your choice ({how}) >")
        try:
            picked = parse_choice(text, len(question.options), question.multiple)
            break
        except ValueError as exc:
            session.say(str(exc), "yellow")
    correct = frozenset(letter(i) for i, option in enumerate(options) if option.correct)
    right = picked == correct
    session.verdict(right, "correct" if right else f"the answer is {', '.join(sorted(correct))}")
    session.items([
        (f"{'✓' if option.correct else '✗'} {letter(i)})", option.feedback, "green" if option.correct else "red")
        for i, option in enumerate(options)
        if option.feedback and (letter(i) in picked or option.correct)
    ])
    session.teach(question)
    return Asked(GOOD if right else AGAIN, ",".join(sorted(picked)), right)


def parse_choice(text: str, count: int, multiple: bool) -> frozenset[str]:
    """`b`, `a,c`, `a c` or `A, C` -> letters; ValueError with a learner-facing message."""
    parts = [p for p in text.replace(",", " ").replace(";", " ").lower().split() if p]
    if len(parts) == 1 and len(parts[0]) > 1 and parts[0].isalpha() and multiple:
        parts = list(parts[0])  # "ac"
    valid = [letter(i) for i in range(count)]
    if not parts:
        raise ValueError(f"type a letter ({valid[0]}-{valid[-1]}), or q to quit")
    bad = [p for p in parts if p not in valid]
    if bad:
        raise ValueError(f"'{bad[0]}' is not an option; choose from {', '.join(valid)}")
    picked = frozenset(parts)
    if not multiple and len(picked) > 1:
        raise ValueError("this question has one right answer; pick one letter")
    return picked


def longest_is_right(question: ChoiceQuestion) -> bool:
    """The one longest option (no tie) is a right one: the answer given away by its length."""
    lengths = sorted(((len(o.text.strip()), o.correct) for o in question.options), reverse=True)
    return len(lengths) > 1 and lengths[0][0] > lengths[1][0] and lengths[0][1]


def right_positions(questions: Sequence[ChoiceQuestion]) -> tuple[Counter[int], dict[int, float]]:
    """Over single-answer questions: how often the right option sits at each position, and how
    often it would by chance (each question adds 1/n to each of its n positions)."""
    seen: Counter[int] = Counter()
    fair: dict[int, float] = {}
    for question in questions:
        right = [i for i, option in enumerate(question.options) if option.correct]
        if len(right) != 1:
            continue
        seen[right[0]] += 1
        for position in range(len(question.options)):
            fair[position] = fair.get(position, 0.0) + 1 / len(question.options)
    return seen, fair


def bank_audit(questions: Sequence[ChoiceQuestion], add: Callable[[Any, int, str], None]) -> dict[str, Any]:
    """Two giveaways over the bank, each refused with enough questions to tell: the right option is
    the longest too often, or one position holds it far more often than chance (its questions are
    listed at their options)."""
    figures = {**_longest_audit(questions, add), **_position_audit(questions, add)}
    return figures


def _position_audit(questions: Sequence[ChoiceQuestion], add: Callable[[Any, int, str], None]) -> dict[str, Any]:
    """A position holding the right option more than POSITION_RIGHT_MAX times its fair share, or less
    than 1/POSITION_RIGHT_MAX of it (each with POSITION_SLACK questions of slack), skews the bank: the
    questions at the most over-used position are listed, since moving some of them fixes both."""
    seen, fair = right_positions(questions)
    total = sum(seen.values())
    figures = {"right_positions": {letter(p): seen[p] for p in sorted(fair)}}
    if total < LONGEST_RIGHT_MIN_QUESTIONS:
        return figures
    skewed = [p for p in fair if seen[p] > POSITION_RIGHT_MAX * fair[p] + POSITION_SLACK
              or seen[p] < fair[p] / POSITION_RIGHT_MAX - POSITION_SLACK]
    if not skewed:
        return figures
    worst = max(fair, key=lambda p: seen[p] - fair[p])
    shown = " ".join(f"{letter(p)} {seen[p]}" for p in sorted(fair))
    chance = " ".join(f"{letter(p)} {fair[p]:.0f}" for p in sorted(fair))
    for question in questions:
        if [i for i, option in enumerate(question.options) if option.correct] == [worst]:
            add(question, question.line_of("options"),
                f"the right option is {letter(worst)}), and the right options' positions are {shown} in "
                f"{total} single-answer choice questions (chance: about {chance}): in bank order (--no-shuffle) "
                f"a learner passes by picking {letter(worst)} — move some right options to "
                f"{', '.join(letter(p) for p in sorted(fair) if seen[p] < fair[p])}")
    return figures


def _longest_audit(questions: Sequence[ChoiceQuestion], add: Callable[[Any, int, str], None]) -> dict[str, Any]:
    longest = [q for q in questions if longest_is_right(q)]
    share = len(longest) / len(questions) if questions else 0.0
    if share > LONGEST_RIGHT_MAX and len(questions) >= LONGEST_RIGHT_MIN_QUESTIONS:
        for question in longest:
            add(question, question.line_of("options"),
                f"the right option is the longest, as in {len(longest)} of {len(questions)} choice questions "
                f"({share:.0%}; at most {LONGEST_RIGHT_MAX:.0%}): a learner passes by picking the longest — "
                "shorten it or lengthen a wrong one")
    return {"longest_right": (len(longest), len(questions))}


def card_order(question: ChoiceQuestion) -> list[Option]:
    """The options of an exported card: shuffled, seeded by the question's id (a text seed is
    stable across runs and machines), so a re-export keeps each card's order."""
    options = list(question.options)
    random.Random(f"drill-anki:{question.id}").shuffle(options)
    return options


def card(question: ChoiceQuestion) -> tuple[str, str]:
    options = card_order(question)
    front = reflow(question.prompt) + "\n\n" + "\n".join(f"{letter(i)}) {o.text}" for i, o in enumerate(options))
    right = [f"{letter(i)}) {o.text}" + (f" — {o.feedback}" if o.feedback else "")
             for i, o in enumerate(options) if o.correct]
    return front, "\n".join(right) + f"\n\n{reflow(question.explanation)}"


KIND = Kind(
    name="choice",
    question=ChoiceQuestion,
    required=("options",),
    optional=("common_wrong",),
    build=build,
    ask=ask,
    card=card,
    bank_audit=bank_audit,
    budget_s=90.0,
    exports=(Option,),
)
