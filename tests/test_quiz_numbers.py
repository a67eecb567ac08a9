"""Reading typed numeric answers: formats, units, families, and typos that must be re-asked."""

from __future__ import annotations

import pytest

from drill.quiz.numbers import AnswerFormatError, Tolerance, format_number, format_with_unit, parse_answer


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("11008", "", 11008),
        ("1.5e3", "", 1500),
        ("1,500", "", 1500),
        ("1_500", "", 1500),
        ("12,345,678", "", 12345678),
        ("-3.5", "", -3.5),
        ("2 GiB", "bytes", 2 * 2**30),
        ("2GB", "bytes", 2e9),
        ("2 GB", "GiB", 2e9 / 2**30),
        ("512 MiB", "GiB", 0.5),
        ("16", "GiB", 16),
        ("32 B", "bytes", 32),
        ("3.2 TFLOPs", "FLOPs", 3.2e12),
        ("3200 GFLOPs", "TFLOPs", 3.2),
        ("7B", "params", 7e9),
        ("7B params", "params", 7e9),
        ("7000M", "B", 7),
        ("7", "B", 7),
        ("15%", "%", 15),
        ("15", "%", 15),
        ("4x", "x", 4),
        ("250 ms", "s", 0.25),
        ("2 gib", "bytes", 2 * 2**30),
    ],
)
def test_parses_numbers_and_units(text: str, unit: str, expected: float) -> None:
    assert parse_answer(text, unit) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "unit", "fragment"),
    [
        ("12,3.4", "", "couldn't read '12,3.4' as a number"),
        ("1,5", "", "couldn't read"),
        ("abc", "", "couldn't read"),
        ("", "", "type a number"),
        ("1__0", "", "couldn't read"),
        ("2 GFLOPs", "bytes", "is a unit of compute (FLOPs), but this answer is memory (bytes)"),
        ("2 GiB", "FLOPs", "is a unit of memory (bytes)"),
        ("2 GiB", "", "is a unit of memory"),
        ("3 parsecs", "bytes", "unknown unit 'parsecs'"),
        ("5 M", "bytes", "is a unit of a count"),
    ],
)
def test_unreadable_or_wrong_family_is_refused(text: str, unit: str, fragment: str) -> None:
    with pytest.raises(AnswerFormatError) as info:
        parse_answer(text, unit)
    assert fragment in str(info.value)


def test_binary_and_decimal_prefixes_differ_beyond_a_percent() -> None:
    tol = Tolerance(rel=0.01)
    assert tol.accepts(parse_answer("2 GiB", "bytes"), 2 * 2**30)
    assert not tol.accepts(parse_answer("2 GB", "bytes"), 2 * 2**30)


@pytest.mark.parametrize(
    ("tol", "value", "answer", "ok"),
    [
        (Tolerance(), 11008, 11008, True),
        (Tolerance(), 11009, 11008, False),
        (Tolerance(rel=0.01), 101, 100, True),
        (Tolerance(rel=0.01), 102, 100, False),
        (Tolerance(rel=0.0, abs=0.5), 3.4, 3.0, True),
        (Tolerance(rel=0.0, abs=0.5), 3.6, 3.0, False),
        (Tolerance(rel=0.01), float("nan"), 1.0, False),
    ],
)
def test_tolerance(tol: Tolerance, value: float, answer: float, ok: bool) -> None:
    assert tol.accepts(value, answer) is ok


@pytest.mark.parametrize(
    ("text", "unit", "shown"),
    [
        ("4.06M", "", "4,060,000"),  # 4059999.9999999995 in floating point: not "4.06e+06"
        ("11008", "", "11,008"),
        ("2 GiB", "bytes", "2,147,483,648 bytes"),
        ("1234567.8", "", "1,234,568"),
        ("1500.25", "", "1,500.25"),
        ("0.0625", "", "0.0625"),
        ("1.5e18", "", "1.5e+18"),
        ("25 percent", "%", "25%"),
        ("0.1", "%", "0.1%"),
    ],
)
def test_a_typed_answer_is_echoed_the_way_a_person_writes_it(text: str, unit: str, shown: str) -> None:
    assert format_with_unit(parse_answer(text, unit), unit) == shown


def test_format_number_keeps_true_fractions() -> None:
    assert format_number(12.5) == "12.5"
    assert format_number(0.1 + 0.2) == "0.3"
