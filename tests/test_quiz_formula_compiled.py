"""Formulas run as closures compiled once (drill.quiz.formula._compile); they must compute what
the tree walker (_eval) computes, value for value and error for error, on every formula of
the shipped bank over its draws and on the evaluator's edge cases."""

from __future__ import annotations

import random

import pytest

from drill.paths import questions_dir
from drill.quiz import formula as f
from drill.quiz import parametric
from drill.quiz.loader import scan


def _outcome(run, env):  # type: ignore[no-untyped-def]
    try:
        return ("value", run(env))
    except f.FormulaError as exc:
        return ("error", str(exc))
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        return ("raised", type(exc).__name__)


def _same(text: str, env: dict) -> None:
    parsed = f.parse_formula(text)
    walked = _outcome(lambda e: f._eval(parsed.tree.body, e), env)
    compiled = _outcome(f._compile(parsed.tree.body), env)
    assert walked == compiled, (text, env)


def test_the_banks_formulas_agree_on_their_draws() -> None:
    bank = scan(questions_dir(), audit=False).bank
    rng = random.Random(7)
    checked = 0
    for q in bank.questions:
        if q.kind != "parametric":
            continue
        texts = [t for _, t in q.derived] + list(q.constraints) + [q.formula] + [w.formula for w in q.wrong_formulas]
        for _ in range(40):
            env = parametric.draw_params(q, rng)
            for name, text in q.derived:
                _same(text, env)
                try:
                    env[name] = parametric.compiled(text).evaluate(env)
                except f.FormulaError:
                    break
            for text in texts:
                _same(text, dict(env))
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("text", [
    "1 / 0", "0 ** -1", "9 ** 9 ** 9", "(-8) ** 0.5", "2 ** 5000", "x * y", "nope + 1", "sqrt(-1)",
    "1 < 2 < 3", "3 > 2 > 2", "not 0", "0 or 0", "1 and 0", "min(1, 2) + max(3, 4)", "log(0)", "-x", "+x",
    "pi * 2", "round(2.567, 2)", "int(7.9) // 2 % 3", "10 ** 400 * 10 ** 400",
])
def test_edge_cases_agree(text: str) -> None:
    _same(text, {"x": 3, "y": 2.5})
