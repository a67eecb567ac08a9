"""Reading typed numeric answers: formats, units, families, and typos that must be re-asked."""

from __future__ import annotations

import math

import pytest

from drill.quiz.numbers import (
    AnswerFormatError,
    Tolerance,
    format_number,
    format_with_unit,
    parse_answer,
    read_answer,
    scale_slip,
    unit_slip,
)


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


# --- units that used to be read too leniently (QA pass 3) ----------------------


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("171.8 GB", "GiB", 171.8e9 / 2**30),  # capital B: bytes
        ("171.8 gb", "GiB", 171.8e9 / 2**30),  # all lower case: people type gb for gigabytes
        ("2 GIB", "bytes", 2 * 2**30),
        ("12 Gbit", "bytes", 12e9 / 8),  # bits spelled out are bits
        ("64 bits", "bytes", 8),
        ("8 kbit", "bytes", 1000),
        ("4198400", "params", 4198400),  # a bare number stays accepted
        ("4.1984M params", "params", 4198400),
        ("4198400 parameters", "params", 4198400),
        ("2k tokens", "tokens", 2000),
        ("1.5 billion", "params", 1.5e9),
        ("7b", "params", 7e9),  # in a count, b is a billion (no byte is a count)
        ("11.27B params", "B", 11.27),  # unit B (billions) says nothing about what is counted
        ("0.25x", "%", 25),
    ],
)
def test_units_that_are_read(text: str, unit: str, expected: float) -> None:
    assert parse_answer(text, unit) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "unit", "fragment"),
    [
        ("171.8 Gb", "GiB", "'Gb' means gigabits"),  # was silently read as GB and accepted for 160 GiB
        ("171.8 Gb", "GiB", "for bytes type GB"),
        ("3 Mb", "bytes", "'Mb' means megabits"),
        ("32 b", "bytes", "'b' means bits"),
        ("2 Gib", "bytes", "reads as bits"),
        ("4198400 tokens", "params", "you wrote tokens; the answer is in params"),
        ("4198400 x", "params", "you wrote x; the answer is in params"),
        ("3 params", "tokens", "you wrote params; the answer is in tokens"),
        ("7B tokens", "params", "you wrote B tokens; the answer is in params"),
        ("12 tokens", "%", "the answer is a ratio"),
        ("12 Gb", "params", "is a unit of memory (bytes)"),
    ],
)
def test_ambiguous_or_other_kind_units_are_asked_again(text: str, unit: str, fragment: str) -> None:
    with pytest.raises(AnswerFormatError) as info:
        parse_answer(text, unit)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("2^30", "bytes", 2**30),
        ("2**30", "bytes", 2**30),
        ("2^30 B", "bytes", 2**30),
        ("2^10 KiB", "MiB", 1),
        ("1/4", "", 0.25),
        ("sqrt(128)", "", 128**0.5),
        ("8√2", "", 8 * 2**0.5),
        ("√128", "", 128**0.5),
        ("3 x 4096", "", 12288),
        ("2×4096×2 bytes", "bytes", 16384),
        ("1,024 * 4", "", 4096),
        ("(4096 + 64) / 2", "", 2080),
        ("-2^3", "", -8),
    ],
)
def test_simple_arithmetic_is_evaluated(text: str, unit: str, expected: float) -> None:
    answer = read_answer(text, unit)
    assert answer.value == pytest.approx(expected) and answer.computed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("9^9^9", "too large"),  # the evaluator's guard against huge powers
        ("1/0", "division by zero"),
        ("2^30 parsecs", "unknown unit 'parsecs'"),
        ("__import__('os')", "couldn't"),
        ("tau * 2", "unknown name 'tau'; the one constant is pi"),  # pi is known (below); other names are not
        ("2 < 3", "couldn't"),
        ("1" + "+1" * 150, "longer than"),
        ("5 $", "couldn't read"),
        ("2**4095", "far too large"),  # within the power guard, but no float holds it
        ("10^308*10", "far too large"),
        ("1e400", "far too large"),
    ],
)
def test_arithmetic_that_cannot_be_an_answer_is_asked_again(text: str, fragment: str) -> None:
    with pytest.raises(AnswerFormatError) as info:
        read_answer(text, "")
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "unit", "answer", "meant"),
    [
        ("11,274,289,152", "B", 11.274289152, "did you mean 11.2743 B?"),
        ("1.127e10", "B", 11.274289152, "did you mean 11.27 B?"),
        ("0.25", "%", 25, "did you mean 25%?"),
        ("171798691840", "GiB", 160, "did you mean 160 GiB?"),
        ("4200000", "M", 4.2, "did you mean 4.2 M?"),
        ("0.25", "ms", 250, "did you mean 250 ms?"),
    ],
)
def test_a_number_off_by_the_display_scale_is_a_slip(text: str, unit: str, answer: float, meant: str) -> None:
    slip = scale_slip(read_answer(text, unit), unit, answer, Tolerance(rel=0.01))
    assert slip is not None and slip.startswith(meant)


@pytest.mark.parametrize(
    ("text", "unit", "answer"),
    [
        ("11.27", "B", 11.274289152),  # right as typed
        ("5", "B", 11.274289152),  # simply wrong: graded
        ("11274289152 params", "B", 11.274289152),  # a unit was typed: converted, no guessing
        ("4198400", "params", 4198400),  # a unit with scale 1 has no slip
        ("0.5", "%", 25),
    ],
)
def test_no_slip_when_the_number_is_right_wrong_or_has_a_unit(text: str, unit: str, answer: float) -> None:
    assert scale_slip(read_answer(text, unit), unit, answer, Tolerance(rel=0.01)) is None


def test_a_typographic_minus_is_a_minus() -> None:
    assert parse_answer("\u22122.5", "") == -2.5


@pytest.mark.filterwarnings("error")  # a SyntaxWarning would print on the learner's terminal
def test_no_typed_text_crashes_the_reader() -> None:
    """Whatever is typed, the reader returns a finite value or asks again (AnswerFormatError)."""
    import random

    rng = random.Random(4)
    alphabet = "0123456789.,_eE+-*/^()√×x% GiBbKMTkparmstoken\u2212"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        for unit in ("", "bytes", "GiB", "params", "B", "%", "ms", "FLOPs"):
            try:
                value = parse_answer(text, unit)
            except AnswerFormatError:
                continue
            assert isinstance(value, float) and value == value and abs(value) != float("inf"), (text, unit)


# --- pi in typed answers (issue 16: a RoPE period is 2π·Θ^(126/128)) -----------------


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("2*pi*10000", "", 2 * math.pi * 10000),
        ("2π·10000", "", 2 * math.pi * 10000),
        ("2π × 10000", "", 2 * math.pi * 10000),
        ("10000·2π", "", 2 * math.pi * 10000),
        ("2 pi", "", 2 * math.pi),
        ("2pi", "", 2 * math.pi),
        ("pi", "", math.pi),
        ("π/2", "", math.pi / 2),
        ("(2)π", "", 2 * math.pi),
        ("sqrt(pi)", "", math.sqrt(math.pi)),
        ("2π · 10000^(126/128) tokens", "tokens", 2 * math.pi * 10000 ** (126 / 128)),
        ("2*pi*10000^(126/128)", "tokens", 2 * math.pi * 10000 ** (126 / 128)),
    ],
)
def test_pi_is_a_constant_in_typed_arithmetic(text: str, unit: str, expected: float) -> None:
    answer = read_answer(text, unit)
    assert answer.value == pytest.approx(expected, rel=1e-12) and answer.computed


@pytest.mark.parametrize(
    ("text", "unit", "expected", "typed_unit"),
    [
        ("1e4", "", 10000, ""),  # scientific notation is untouched by the constants
        ("2.5E-3", "", 0.0025, ""),
        ("2 PiB", "bytes", 2 * 2**50, "PiB"),  # the Pi of PiB is a prefix, not π
        ("3 pib", "bytes", 3 * 2**50, "pib"),
        ("7 params", "params", 7, "params"),
    ],
)
def test_pi_never_reads_into_units_or_exponents(text: str, unit: str, expected: float, typed_unit: str) -> None:
    answer = read_answer(text, unit)
    assert answer.value == pytest.approx(expected) and answer.typed_unit == typed_unit and not answer.computed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("2e", "unknown unit 'e'"),  # an unfinished 2e3 is asked again, never read as 2·e = 5.44
        ("2*e*3", "unknown name 'e'; the one constant is pi (π), and e is exp(1)"),
    ],
)
def test_there_is_no_e_constant(text: str, fragment: str) -> None:
    with pytest.raises(AnswerFormatError) as info:
        read_answer(text, "")
    assert fragment in str(info.value)


# --- a decimal unit for a binary answer, or the reverse (issue 16: 2 GB for 2 GiB) ---


@pytest.mark.parametrize(
    ("text", "unit", "answer", "meant"),
    [
        ("2 GB", "GiB", 2, "did you mean 2 GiB? GB is 10^9 bytes and GiB is 2^30"),
        ("2 GiB", "GB", 2, "did you mean 2 GB? GiB is 2^30 bytes and GB is 10^9"),
        ("2 gb", "bytes", 2 * 2**30, "did you mean 2 GiB?"),
        ("512 MB", "MiB", 512, "did you mean 512 MiB? MB is 10^6 bytes and MiB is 2^20"),
        ("512 MiB", "bytes", 512e6, "did you mean 512 MB?"),
        ("320 KB", "KiB", 320, "did you mean 320 KiB? KB is 10^3 bytes and KiB is 2^10"),
        ("320 kB", "bytes", 320 * 1024, "did you mean 320 KiB? kB is 10^3 bytes"),
        ("320 KiB", "KB", 320, "did you mean 320 KB?"),
        ("3 TB", "TiB", 3, "did you mean 3 TiB? TB is 10^12 bytes and TiB is 2^40"),
        ("3 TiB", "bytes", 3e12, "did you mean 3 TB?"),
        ("10*16 GB", "GiB", 160, "did you mean 10*16 GiB?"),
    ],
)
def test_a_decimal_binary_unit_mix_up_is_a_slip(text: str, unit: str, answer: float, meant: str) -> None:
    typed = read_answer(text, unit)
    assert not Tolerance(rel=0.01).accepts(typed.value, answer)  # graded as typed, it would be wrong
    slip = unit_slip(typed, unit, answer, Tolerance(rel=0.01))
    assert slip is not None and slip.startswith(meant)


@pytest.mark.parametrize(
    ("text", "unit", "answer", "known_wrong"),
    [
        ("2 GiB", "GiB", 2, ()),  # right as typed
        ("171.8 GB", "GiB", 160, ()),  # right once converted
        ("3 GB", "GiB", 2, ()),  # wrong in either unit: graded
        ("2", "GiB", 2.1, ()),  # no unit typed: nothing to swap
        ("2 Gbit", "GiB", 2, ()),  # bits have no binary twin here
        ("68.72 GiB", "GiB", 64, (68.72,)),  # the question's own known mistake: graded, with its feedback
    ],
)
def test_no_unit_slip_when_right_wrong_either_way_or_a_known_mistake(
        text: str, unit: str, answer: float, known_wrong: tuple[float, ...]) -> None:
    assert unit_slip(read_answer(text, unit), unit, answer, Tolerance(rel=0.01), known_wrong) is None
