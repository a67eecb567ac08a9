"""Quiz kinds as plug-ins (issue 15, section 3), the spot_bug kind, and the bank audits (section 1).

The plug-in proof is a toy kind registered by the test alone: the loader
builds it, `drill validate` counts it, the quiz asks it, the mock budgets it
and the Anki export renders it, with no other module changed.
"""

from __future__ import annotations

import io
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.mock import plan
from drill.quiz import kinds
from drill.quiz.build import all_fields
from drill.quiz.fields import Fields
from drill.quiz.kinds.base import Asked, Kind
from drill.quiz.kinds.choice import LONGEST_RIGHT_MAX, longest_is_right
from drill.quiz.kinds.recall import NONSENSE_ANSWERS
from drill.quiz.loader import load_bank, scan
from drill.quiz.schema import COMMON_OPTIONAL, COMMON_REQUIRED, Question
from drill.quiz.session import Session
from drill.store import Store

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _bank(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


# -- the registry -------------------------------------------------------------


def test_every_kind_is_complete_and_documented() -> None:
    readme = (ROOT / "questions" / "README.md").read_text()
    for name, kind in kinds.REGISTRY.items():
        assert kind.name == name and kind.question.__name__.endswith("Question")
        assert kind.budget_s > 0
        assert not set(kind.fields) & set(COMMON_REQUIRED + COMMON_OPTIONAL), name
        assert f"\n## {name}\n" in readme, f"questions/README.md has no section for kind {name}"
        assert f"`{name}`" in readme.split("## File layout")[0], f"README's list of kinds lacks {name}"


def test_no_module_outside_the_kinds_names_a_kind() -> None:
    """The point of the registry: a new kind must not need edits elsewhere."""
    names = "|".join(kinds.names())
    pattern = re.compile(rf"""["'](?:{names})["']""")
    offenders = []
    for path in [*(ROOT / "drill").rglob("*.py")]:
        if "kinds" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "kind" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@dataclass(frozen=True, kw_only=True)
class CountQuestion(Question):
    """The toy kind: count the words of a phrase."""

    phrase: str


def _build_count(fields: Fields, common: dict[str, Any]) -> Question:
    return CountQuestion(phrase=fields.text("phrase"), **common)


def _ask_count(session: Any, question: CountQuestion) -> Asked:
    session.say(question.prompt + f" «{question.phrase}»")
    typed = session.answer(question, "how many words? >")
    right = typed.strip() == str(len(question.phrase.split()))
    session.verdict(right, "correct" if right else f"it is {len(question.phrase.split())}")
    session.teach(question)
    return Asked(3 if right else 1, typed.strip(), right)


def _check_count(question: CountQuestion, add: Any) -> None:
    if len(question.phrase.split()) < 2:
        add(question.line_of("phrase"), "a phrase needs two words or more")


TOY = Kind(name="count", question=CountQuestion, required=("phrase",), optional=(), build=_build_count,
           ask=_ask_count, card=lambda q: (q.prompt, q.phrase), check=_check_count, budget_s=42.0)

TOY_BANK = """\
topic: toys
questions:
  - id: toy-count-one
    kind: count
    difficulty: easy
    prompt: "Count the words:"
    explanation: "Split on spaces."
    phrase: "one two three"
"""


def test_a_kind_registered_alone_works_everywhere(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kinds.REGISTRY, "count", TOY)
    bank = _bank(tmp_path / "bank", {"toys": TOY_BANK})
    assert "phrase" in all_fields()
    # loader and validate
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 0 and "count 1" in result.output, result.output
    broken = _bank(tmp_path / "broken", {"toys": TOY_BANK.replace("one two three", "one")})
    assert "a phrase needs two words or more" in runner.invoke(app, ["validate", str(broken)]).output
    # the quiz asks it and saves its rating
    quiz = runner.invoke(app, ["quiz", "--bank", str(bank), "-n", "1"], input="3\n")
    assert quiz.exit_code == 0 and "✓ correct" in quiz.output, quiz.output
    with Store(home / "progress.db") as store:
        assert [(r.question_id, r.rating) for r in store.reviews()] == [("toy-count-one", 3)]
    # the mock's budget and the export come from the kind
    questions = list(load_bank(bank, cache_dir=tmp_path / "cache").questions)
    assert plan.fit_questions(questions, 60)[1] == [42.0]
    out = tmp_path / "toys.apkg"
    assert runner.invoke(app, ["export", "anki", "--bank", str(bank), "-o", str(out)]).exit_code == 0
    assert out.stat().st_size > 0


def test_an_unknown_kind_names_the_registered_ones(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "bank", {"toys": TOY_BANK})
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 2
    assert "unknown kind 'count'" in result.output and "spot_bug" in result.output


# -- spot_bug -----------------------------------------------------------------

SPOT = """\
topic: attention
questions:
  - id: spot-scale
    kind: spot_bug
    difficulty: easy
    prompt: "Which line scales wrongly?"
    explanation: "Scale by sqrt(d_k)."
    hints: ["Look at the divisor."]
    code: |
      import math

      def scores(q, k, d_model):
          s = q @ k.transpose(-2, -1)
          return s / math.sqrt(d_model)
    bug_line: 5
    fix: "return s / math.sqrt(q.size(-1))"
    decoys:
      - line: 4
        why: "The transpose of k's last two axes is right."
"""


def _ask_spot(tmp_path: Path, lines: list[str]) -> tuple[str, Store]:
    bank = _bank(tmp_path / "bank", {"attention": SPOT})
    question = load_bank(bank, cache_dir=tmp_path / "cache").questions[0]
    store = Store(tmp_path / "progress.db")
    console = Console(file=io.StringIO(), width=80, record=True)
    feed = iter(lines)
    session = Session(store, console, lambda prompt: next(feed, None), None, random.Random(0))
    session.run([question])
    return console.export_text(), store


def test_spot_bug_right_line_is_good_and_shows_the_fix(tmp_path: Path) -> None:
    out, store = _ask_spot(tmp_path, ["?", "line 5"])
    assert "hint: Look at the divisor." in out
    assert "  5 │     return s / math.sqrt(d_model)" in out
    assert "✓ correct: line 5" in out and "return s / math.sqrt(q.size(-1))" in out and "Scale by sqrt(d_k)." in out
    # Its only hint is its last: the right line after it is Hard at most (issue 28 §2); without it, Good.
    assert "hint-capped" in out
    assert [(r.rating, r.answer) for r in store.reviews()] == [(2, "5")]
    _out, unhinted = _ask_spot(tmp_path / "unhinted", ["line 5"])
    assert [(r.rating, r.answer) for r in unhinted.reviews()] == [(3, "5")]


def test_spot_bug_fix_is_a_diff_with_the_line_number_apart(tmp_path: Path) -> None:
    """The number was the removed line's mark ("- 5 return s / ..."), glued onto the code (issue 31)."""
    out, _store = _ask_spot(tmp_path, ["5"])
    lines = [line.rstrip() for line in out.splitlines()]
    at = lines.index("The fix, line 5")
    assert lines[at + 1:at + 3] == ["  - return s / math.sqrt(d_model)", "  + return s / math.sqrt(q.size(-1))"]


def test_spot_bug_wrong_line_is_again_and_explains_the_decoy(tmp_path: Path) -> None:
    out, store = _ask_spot(tmp_path, ["4"])
    assert "✗ the bug is on line 5 (you said 4)" in out
    assert "The transpose of k's last two axes is right." in out
    assert [r.rating for r in store.reviews()] == [1]


@pytest.mark.parametrize(("typed", "message"), [
    ("five", "type the number of the line with the bug (1-5)"),
    ("9", "the snippet has lines 1-5"),
    ("2", "line 2 is blank"),
])
def test_spot_bug_unreadable_lines_are_asked_again(tmp_path: Path, typed: str, message: str) -> None:
    out, store = _ask_spot(tmp_path, [typed, "L5"])
    assert message in out and "✓ correct: line 5" in out
    assert [r.answer for r in store.reviews()] == ["5"]


def test_the_shipped_spot_bug_questions() -> None:
    bank = load_bank(None)
    spots = [q for q in bank.questions if q.kind == "spot_bug"]
    assert len(spots) >= 15
    # spot_bug.yaml holds the spot-bugs of the older topics (each names its topic); a topic file may hold its own
    assert all(q.file.endswith("spot_bug.yaml") or Path(q.file).stem == q.topic for q in spots)
    topics = {q.topic for q in spots}
    assert "spot_bug" not in topics and len(topics) >= 8  # each drills a real topic
    assert topics <= {q.topic for q in bank.questions if q.kind != "spot_bug"}
    assert all(q.hints for q in spots)


def test_numbers_the_spot_bug_questions_state() -> None:
    """Recomputed here: what the prompts and explanations claim."""
    import math

    hidden = int(2 * (4 * 4096) / 3)
    assert (hidden, 256 * (hidden // 256), 256 * -(-hidden // 256)) == (10922, 10752, 11008)
    assert round(math.sqrt(3 / 4), 2) == 0.87 and round(math.sqrt(767 / 768), 4) == 0.9993
    d = 128
    slow_wrong, slow_right = 10000 ** (-(d // 2 - 1) / d), 10000 ** (-(d - 2) / d)
    assert 80 < 1 / slow_wrong < 120 and 8000 < 1 / slow_right < 10000


def test_the_mock_asks_spot_bug_questions_within_their_budget(tmp_path: Path, home: Path) -> None:
    from tests.test_mock import StubGrader, sit  # the mock's own harness

    spots = SPOT + SPOT.split("questions:\n", 1)[1].replace("spot-scale", "spot-scale-two")
    bank = _bank(tmp_path / "bank", {"attention": spots})
    code, store, out, _ = sit(tmp_path, bank, [(30, "5"), (200, "4"), "done"], grade=StubGrader())
    report = store.mocks()[-1]
    import json

    questions = json.loads(report["report_json"])["concept"]["questions"]
    assert [(q["kind"], q["budget_s"], q["outcome"]) for q in questions] == [
        ("spot_bug", kinds.get("spot_bug").budget_s, "right"), ("spot_bug", kinds.get("spot_bug").budget_s, "wrong")]
    assert "took 3:20 of a 2:00 budget" in out


# -- the audits ---------------------------------------------------------------

PARAMETRIC = """\
topic: flops
questions:
  - id: flops-audit
    kind: parametric
    difficulty: easy
    prompt: "FLOPs of a {n} x {n} by {n} x {m} matmul?"
    explanation: "2 n n m."
    params:
      n: {range: [1, 20]}
      m: {range: [1, 20]}
    formula: "2 * n * n * m"
    tolerance: {rel: 0.01}
    wrong_formulas:
      - formula: "n * n * m + 2 * n * m * m"
        feedback: "A made-up mistake that equals the answer when m = n / 2."
"""


def test_a_wrong_formula_within_tolerance_on_some_draw_is_refused(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "bank", {"flops": PARAMETRIC})
    problems = [str(p) for p in scan(bank).problems]
    assert len(problems) == 1, problems
    assert "flops.yaml:14: " in problems[0]
    assert "lands within the answer's tolerance (±1%) on 10 of 400 draws (all of them)" in problems[0]
    assert "e.g. n=2, m=1" in problems[0]
    fixed = PARAMETRIC.replace("    formula: \"2 * n * n * m\"",
                               "    constraints: [\"2 * m != n\"]\n    formula: \"2 * n * n * m\"")
    assert not scan(_bank(tmp_path / "fixed", {"flops": fixed})).problems
    assert load_bank(bank, cache_dir=tmp_path / "cache").questions  # the quiz still runs it: quality, not safety


RECALL = """\
topic: masks
questions:
  - id: masks-audit
    kind: recall
    difficulty: easy
    prompt: "How is a padding mask applied to attention scores?"
    explanation: "Before the softmax."
    answer: "Fill the padded keys' logits with -inf before the softmax."
    key_points:
      - text: "Padded keys get -inf logits"
        patterns: ["{first}"]
      - text: "Applied before the softmax"
        patterns: ["{second}"]
"""


@pytest.mark.parametrize(("first", "offender"), [
    ("inf|and", "It is all about how each and every part works"),
    ("0", "About 10, 100 or 1000 times"),
    ("padding|-inf", "the question's own prompt typed back"),
    ("y", "'yes'"),
])
def test_a_key_point_ticked_by_nonsense_is_refused(tmp_path: Path, first: str, offender: str) -> None:
    bank = _bank(tmp_path / "bank", {"masks": RECALL.format(first=first, second="before (the )?softmax")})
    problems = [str(p) for p in scan(bank).problems]
    assert len(problems) == 1 and "masks.yaml:10: " in problems[0] and offender in problems[0], problems


def test_specific_key_points_pass_the_nonsense_audit(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "bank", {"masks": RECALL.format(first="-inf|negative infinity|finfo",
                                                            second="before (the )?softmax")})
    assert not scan(bank).problems
    assert len(NONSENSE_ANSWERS) >= 6 and "" not in NONSENSE_ANSWERS


def _choice(n: int, longest_right: bool) -> str:
    if longest_right:
        right, wrong = "the right answer, spelled out at length", "wrong"
    else:
        right, wrong = "right", "a wrong answer, spelled out at length"
    options = [f"      - {{text: \"{right} {n}\", correct: true}}\n",
               f"      - {{text: \"{wrong} {n}\", correct: false}}\n"]
    if n % 2:  # the right option at a and b alike: the position audit (issue 28) has nothing to say here
        options.reverse()
    return (f"  - id: pick-{n:02d}\n    kind: choice\n    difficulty: easy\n    prompt: \"Pick {n}.\"\n"
            f"    explanation: \"Because.\"\n    options:\n" + "".join(options))


@pytest.mark.parametrize(("total", "longest", "refused"), [(10, 4, True), (20, 7, False), (9, 9, False)])
def test_the_longest_right_option_share_is_reported_and_capped(tmp_path: Path, total: int, longest: int,
                                                               refused: bool) -> None:
    body = "".join(_choice(n, n < longest) for n in range(total))
    bank = _bank(tmp_path / "bank", {"picks": "topic: picks\nquestions:\n" + body})
    result = scan(bank)
    assert result.figures["longest_right"] == (longest, total)
    summary = result.summary()
    assert f"right option longest in {longest} of {total} choice questions ({longest / total:.0%})" in summary
    assert bool(result.problems) is refused
    if refused:
        assert len(result.problems) == longest and all("the right option is the longest" in p.message
                                                       for p in result.problems)


def test_the_shipped_bank_keeps_the_longest_right_option_share_low() -> None:
    """Fails until the bank's choice questions are rebalanced (issue 15 §1: 28 of 43 today)."""
    bank = load_bank(None)
    choices = [q for q in bank.questions if q.kind == "choice"]
    share = sum(longest_is_right(q) for q in choices) / len(choices)
    assert share <= LONGEST_RIGHT_MAX, f"right option longest in {share:.0%} of {len(choices)} choice questions"
