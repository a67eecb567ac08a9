"""The verdict panel and the error numbers, from a user's side (no grading: built Results).

The panel must put the verdict and the diagnosis first, list at most four
failing tests in an 80-column terminal (name, then one short line) and say how
many more there are; --verbose and --json keep everything. max_rel_err is
normwise (max |diff| / max |expected|), so a near-zero expected element
cannot blow it up.
"""

from __future__ import annotations

import io
import json

import torch
from rich.console import Console

from drill.judge import check
from drill.judge.compare import compare
from drill.judge.report import render, to_json
from drill.judge.spec import Diagnosis, Tolerance

DIAG = Diagnosis("missing_scale", "Missing 1/sqrt(d_k) scaling", "Logits grow with d_k.", "Scale by 1/sqrt(d_k).")


def _result(n_fail: int, *, partial: bool = False) -> check.Result:
    tests = [check.TestResult("a passing test", "pass", "", 1e-7, 1e-7)]
    for i in range(n_fail):
        tests.append(
            check.TestResult(
                f"fp32 failing test number {i} with a fairly long descriptive name, T_q=5 != T_k=13",
                "fail",
                f"output: 40 of 40 values outside tolerance; worst at [0, 1, {i}]: got 2.5, expected 0.4",
                2.1,
                0.9,
                detail="q=float32[2, 3, 5, 8]",
                short=f"40/40 values off; worst got 2.5, expected 0.4 (#{i})",
            )
        )
    return check.Result(
        exercise="attention", file="attention.py", status="fail", seed=7, tests=tests, diagnosis=DIAG,
        diagnosis_detail="your output matches this mistake (no scaling) on 3 failing tests",
        diagnosis_partial=partial, elapsed_s=1.0,
    )


def _panel(result: check.Result, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    render(result, Console(file=out, width=80, color_system=None, highlight=False), verbose=verbose)
    return out.getvalue().splitlines()


def test_panel_puts_diagnosis_first_and_lists_at_most_four_failures() -> None:
    lines = _panel(_result(9))
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    first_test = next(i for i, line in enumerate(lines) if "failing test number 0" in line)
    assert "FAIL" in lines[1] and "1/10 tests passed" in lines[1]
    assert max(i for i, line in enumerate(lines) if "Missing 1/sqrt(d_k)" in line or "Fix:" in line) < first_test
    assert sum("failing test number" in line for line in lines) == 4
    assert "5 more failing tests — use --verbose" in text
    assert "worst got 2.5, expected 0.4 (#0)" in text  # the short message survives 80 columns
    assert "(|diff| / max|expected|)" in text


def test_verbose_lists_every_test_and_json_keeps_them_all() -> None:
    result = _result(9, partial=True)
    text = "\n".join(_panel(result, verbose=True))
    assert all(f"[0, 1, {i}]" in text for i in range(9)) and "float32[2, 3, 5, 8]" in text
    assert "not the only mistake" in "\n".join(_panel(result))
    doc = json.loads(to_json([result]))
    assert len(doc["tests"]) == 10 and doc["diagnosis"]["partial"] is True
    assert doc["tests"][1]["message"].startswith("output: 40 of 40")  # full message, not the short one


def test_few_failures_have_no_more_line() -> None:
    text = "\n".join(_panel(_result(2)))
    assert "more failing" not in text and text.count("failing test number") == 2


def test_max_rel_err_is_normwise_not_elementwise() -> None:
    expected = torch.tensor([1000.0, 1e-6, -3.0])
    got = torch.tensor([1000.0, 3e-6, -3.0])  # elementwise: 200% off on the tiny element
    c = compare(got, expected, Tolerance(atol=2e-5, rtol=1e-4))
    assert c.ok
    assert abs(c.max_abs - 2e-6) < 1e-9
    assert c.max_rel < 1e-8  # 2e-6 / 1000, not 2.0
    bad = compare(torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), Tolerance(atol=2e-5, rtol=1e-4))
    assert not bad.ok and abs(bad.max_rel - 0.25) < 1e-9
    assert bad.brief.startswith("1/2 values off; worst got 2.5, expected 2")


def test_integer_answers_read_as_integers() -> None:
    """ffn_hidden_dim returns int64 sizes: "got 10752, expected 11008", never 1.075e+04."""
    got, expected = torch.tensor([10752, 5632, 1234567]), torch.tensor([11008, 5632, 1234568])
    c = compare(got, expected, Tolerance(atol=0.0, rtol=0.0))
    assert not c.ok
    assert "worst got 10752, expected 11008" in c.brief and "e+" not in c.message
    floats = compare(torch.tensor([10752.5]), torch.tensor([11008.25]), Tolerance(atol=1e-5, rtol=1e-4))
    assert "1.075e+04" in floats.brief  # float outputs keep their significant digits


def test_long_test_names_wrap_so_distinct_tests_stay_distinct() -> None:
    stem = "fp32 prompt then one token at a time [3+1+1+1+1], n_heads=4, n_kv_heads=2, d_head=16"
    tests = [check.TestResult(f"{stem}: returned cache {what}", "fail", "m", 1.0, 1.0, short="values off")
             for what in ("keys", "values")]
    result = check.Result(exercise="kv_cache", file="kv_cache.py", status="fail", seed=1, tests=tests, diagnosis=DIAG)
    lines = _panel(result)
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(line.strip("│ ") for line in lines)
    assert "returned cache keys" in text and "returned cache values" in text
    assert "…" not in "".join(line for line in lines if "returned cache" in line or "n_heads" in line)


def test_judge_readme_lists_every_generic_diagnosis_id() -> None:
    from pathlib import Path

    from drill.judge.diagnose import GENERIC

    readme = (Path(__file__).parents[1] / "drill" / "judge" / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("Generic ids"):readme.index("A bug variant is accepted")]
    assert [i for i in GENERIC if f"`{i}`" not in table] == []


def test_with_no_known_mistake_the_smallest_failing_test_is_listed_first() -> None:
    """Issue 31: `unknown` lists the failing tests smallest first (the one to redo by hand); a named mistake keeps
    the tests' order."""
    sizes = [(4096, 9000), (1, 1), (64, 70)]
    tests = [check.TestResult(f"test of size {out}", "fail", "m", 1.0, 1.0, short="values off", size=(out, inp))
             for out, inp in sizes]
    unknown = Diagnosis("unknown", "Mismatch with the reference", "why", "fix")
    for diagnosis, first in ((unknown, "test of size 1"), (DIAG, "test of size 4096")):
        result = check.Result(exercise="alibi", file="alibi.py", status="fail", seed=1, tests=tests,
                              diagnosis=diagnosis)
        listed = [line for line in _panel(result) if "test of size" in line]
        assert first in listed[0], listed


def test_a_pass_reads_its_error_against_the_tolerance() -> None:
    tests = [check.TestResult("a bf16 loss of about 2e4", "pass", "", 37.8, 1.9e-3, tol_used=0.0213)]
    result = check.Result(exercise="cross_entropy", file="ce.py", status="pass", seed=1, tests=tests)
    text = "\n".join(_panel(result))
    assert "every error within tolerance: the largest is 2.1% of its tolerance" in text
    assert "max abs err" not in text and "max abs err 3.78e+01" in "\n".join(_panel(result, verbose=True))
