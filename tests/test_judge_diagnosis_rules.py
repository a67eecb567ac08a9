"""The general rules of diagnosis (issue 31 §1), on a made-up exercise graded in this process.

No child, no fixture file: a tiny spec whose "learner" output is built
tensor by tensor, so each rule is checked on exactly the evidence it speaks
about, through `diagnose_cases` (the function `drill check` calls):
- a partial match on a small minority of the failing tests is not named:
  the verdict is `unknown` and the partial match is listed in its detail;
- a variant that changes nothing on a test (its output is the reference's)
  never explains that test's failure;
- two known mistakes showing on different tests are both named;
- "other failing tests" never counts tests the named mistake explains;
- with no known mistake the detail shows the simplest failing case, and a
  0-dim output its value, not "worst at []".
"""

from __future__ import annotations

import torch

from drill.judge.compare import Comparison, compare
from drill.judge.diagnose import CaseEval, diagnose_cases
from drill.judge.spec import Bug, Case, Diagnosis, Spec, Tolerance

TOL = Tolerance(1e-5, 1e-5)
DOUBLED = Diagnosis("doubled", "Output doubled", "why", "fix")
NEGATED = Diagnosis("negated", "Output negated", "why", "fix")
PLUS_ONE = Diagnosis("plus_one", "One added", "why", "fix")


def _case(i: int, n: int = 4, *, flag: bool = True) -> Case:
    """Test i: an (n,) output 1 + i + arange(n); `flag` is the option the `doubled` mistake needs to show."""
    case = Case(f"test {i} (n={n}{', flag' if flag else ''})", "f", args={"n": n, "flag": flag})
    case.expected = torch.arange(n, dtype=torch.float32) + 1 + i
    return case


def _only_flagged(fn):
    """A variant that shows only where the case's flag is on; elsewhere it returns the reference (changes nothing)."""
    return lambda case: fn(case.expected) if case.args["flag"] else case.expected.clone()


def _spec(*bugs: Bug) -> Spec:
    return Spec(name="made_up", graded=("f",), make_cases=lambda seed: [], reference=lambda c: (c.expected, {}),
                tolerances={"float32": TOL}, bugs=bugs)


DOUBLE = Bug(DOUBLED, _only_flagged(lambda e: 2 * e), "x * 2")
NEGATE = Bug(NEGATED, lambda case: -case.expected, "-x")


def _eval(case: Case, got: torch.Tensor) -> CaseEval:
    return CaseEval(case, "ok", {}, got=got, forward=compare(got, case.expected, TOL))


def _grade(spec: Spec, learner, n: int = 10) -> object:
    """The verdict on n cases built by `learner(i, case) -> output` (None: the case's expected output)."""
    evals = []
    for i, case in enumerate(_case(i, n=2 + i) for i in range(n)):
        got = learner(i, case)
        evals.append(_eval(case, case.expected.clone() if got is None else got))
    return diagnose_cases(spec, evals, lambda case: TOL)


def test_a_partial_match_on_a_small_minority_of_the_failing_tests_is_not_named() -> None:
    # Every test fails by +0.5, except test 3, which the learner happens to double: 1 of 10 failing tests.
    verdict = _grade(_spec(DOUBLE), lambda i, c: 2 * c.expected if i == 3 else c.expected + 0.5)
    assert verdict.diagnosis.id == "unknown" and not verdict.partial, verdict.detail
    assert "closest known mistake: Output doubled (doubled, x * 2) reproduces only 1 of 10 failing tests" \
        in verdict.detail


def test_a_partial_match_on_one_in_six_or_more_is_still_named_as_one_of_more_mistakes() -> None:
    verdict = _grade(_spec(DOUBLE), lambda i, c: 2 * c.expected if i < 2 else c.expected + 0.5, n=12)
    assert verdict.diagnosis.id == "doubled" and verdict.partial
    assert "exactly on 2 of 12 failing tests" in verdict.detail and "more than one mistake" in verdict.detail


def test_a_variant_that_changes_nothing_on_a_failing_test_cannot_explain_it() -> None:
    # The flag is off on the first five tests: `doubled` returns the reference there, so it explains none of their
    # failures, even though the learner's output there is what `doubled` gives where it does show.
    cases = [_case(i, flag=i >= 5) for i in range(10)]
    evals = [_eval(c, 2 * c.expected) for c in cases]
    verdict = diagnose_cases(_spec(DOUBLE), evals, lambda case: TOL)
    assert verdict.diagnosis.id == "doubled" and verdict.partial
    assert "exactly on 5 of 10 failing tests" in verdict.detail
    only_off = diagnose_cases(_spec(DOUBLE), evals[:5] + [_eval(c, c.expected.clone()) for c in cases[5:]],
                              lambda case: TOL)
    assert only_off.diagnosis.id == "unknown" and "doubled" not in only_off.detail, only_off.detail


def test_two_known_mistakes_on_different_tests_are_both_named() -> None:
    # Tests 0-5 doubled, tests 6-9 negated: neither alone explains everything.
    verdict = _grade(_spec(DOUBLE, NEGATE), lambda i, c: 2 * c.expected if i < 6 else -c.expected)
    assert verdict.diagnosis.id == "doubled" and verdict.partial and verdict.second == "negated"
    assert ("exactly on 6 of 10 failing tests, and another known mistake, Output negated (negated, -x), on 4 "
            "others: there is more than one mistake") in verdict.detail
    assert "match neither" not in verdict.detail


def test_two_small_matches_together_below_one_in_six_are_not_named() -> None:
    verdict = _grade(_spec(DOUBLE, NEGATE),
                     lambda i, c: 2 * c.expected if i == 0 else (-c.expected if i == 1 else c.expected + 0.5), n=13)
    assert verdict.diagnosis.id == "unknown", verdict.detail
    assert "closest known mistake" in verdict.detail


def test_a_mistake_matching_every_failing_test_but_overshooting_a_passing_one_says_so() -> None:
    # `plus_one` fails every test; the learner adds 1 everywhere except on test 9 (a milder form). It stays
    # partial (on another seed a failing test may differ too: the flag must not change with the seed), and the
    # detail no longer reads "but 0 other failing tests differ from it".
    plus = Bug(PLUS_ONE, lambda case: case.expected + 1, "x + 1")
    verdict = _grade(_spec(plus), lambda i, c: None if i == 9 else c.expected + 1)
    assert verdict.diagnosis.id == "plus_one" and verdict.partial, verdict.detail
    assert "exactly on all 9 failing tests, but as modelled it would also fail 1 test your code passes" \
        in verdict.detail and " 0 other" not in verdict.detail


def test_the_named_mistake_shows_its_simplest_failing_test() -> None:
    verdict = _grade(_spec(NEGATE), lambda i, c: -c.expected)
    assert verdict.diagnosis.id == "negated" and not verdict.partial
    assert "simplest failing test: 'test 0 (n=2, flag)', got -" in verdict.detail, verdict.detail


def test_no_known_mistake_shows_the_simplest_failing_case_not_the_largest_error() -> None:
    # The error grows with the test's size: the largest is on test 9, the simplest case is test 0.
    verdict = _grade(_spec(NEGATE), lambda i, c: c.expected + 0.5 * (i + 1))
    assert verdict.diagnosis.id == "unknown"
    assert "in test 'test 0 (n=2, flag)' (the simplest of 10 failing tests)" in verdict.detail, verdict.detail


def test_a_scalar_output_shows_its_value_not_worst_at_an_empty_index() -> None:
    c = compare(torch.tensor(2.5), torch.tensor(2.0), TOL)
    assert not c.ok and "[]" not in c.message and "[]" not in c.brief
    assert c.message == "output: got 2.5, expected 2 (a scalar)" and c.brief == "got 2.5, expected 2"
    nan = compare(torch.tensor(float("nan")), torch.tensor(2.0), TOL)
    assert not nan.ok and "[]" not in nan.message and "nan where 2 was expected" in nan.message


def test_other_failing_tests_never_count_those_the_named_mistake_explains() -> None:
    """A measurement (Case.judge) fails too: its "N other failing tests" leaves out the value failures the named
    variant explains (flash_attention's top-left causal once said 12 others of 13 failing)."""
    cases = [_case(i) for i in range(4)]
    evals = [_eval(c, -c.expected) for c in cases]
    judged = Case("a measurement", "f", judge=lambda got: got)
    judged.expected = torch.zeros(1)
    measured = Comparison(False, "values", "measured too much", diagnosis=PLUS_ONE)
    evals.append(CaseEval(judged, "ok", {}, got=torch.zeros(1), forward=measured))
    unexplained = _case(7)
    evals.append(_eval(unexplained, unexplained.expected + 0.5))  # one value failure no variant explains
    verdict = diagnose_cases(_spec(NEGATE), evals, lambda case: TOL)
    assert verdict.diagnosis.id == "negated" and "also failing: plus_one (measured too much" in verdict.detail
    assert "1 other failing test (values) match no known mistake" in verdict.detail, verdict.detail
