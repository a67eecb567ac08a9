"""Hostile or broken learner files end in an honest failure, quickly, leaving nothing behind.

One fixture per case in tests/fixtures/tamper/ (each is an attention.py
attempt). Short limits keep the suite fast; each case must end well within
its limit plus start-up, never pass, and leave no process carrying the marker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from drill.judge.check import check_file
from drill.judge.runner import Limits

TAMPER = Path(__file__).parent / "fixtures" / "tamper"
BASE = dict(timeout_s=20.0, cpu_s=20.0, memory_mb=2048)

# file -> (expected diagnosis id or None for "any failure", limit overrides)
CASES = {
    "exit_early": ("crashed", {}),
    "system_exit": ("crashed", {}),
    "forge_results": ("crashed", {}),
    "monkeypatch_allclose": (None, {}),
    "fake_verdict": (None, {}),
    "infinite_loop": ("cpu_limit", {"cpu_s": 5.0, "timeout_s": 40.0}),
    "sleeps": ("time_limit", {"timeout_s": 3.0}),
    "leaves_child": ("crashed", {}),
    "setsid_grandchild": ("crashed", {}),
    "memory_bomb": ("memory_limit", {"memory_mb": 1536}),  # torch 2.11's CUDA build needs ~800 MB just to import
    "wrong_type": ("wrong_type", {}),
    "aten_kernel": ("forbidden_op", {}),
    "import_drill": ("forbidden_op", {}),
    "swallow_forbidden": ("forbidden_op", {}),
}


def _marked_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if b"drill-tamper-marker" in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_every_tamper_fixture_has_a_case() -> None:
    assert {p.stem for p in TAMPER.glob("*.py")} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tampering_fails_honestly(name: str) -> None:
    want, overrides = CASES[name]
    limits = Limits(**{**BASE, **overrides})
    t0 = time.monotonic()
    result = check_file(TAMPER / f"{name}.py", "attention", seed=7, limits=limits)
    elapsed = time.monotonic() - t0
    assert result.status in ("fail", "error"), f"{name} must never pass"
    assert result.diagnosis is not None
    if want is not None:
        assert result.diagnosis.id == want, result.diagnosis_detail
    # generous: start-up of two torch imports on a loaded 2-core machine, plus the limit
    assert elapsed < min(limits.timeout_s, limits.cpu_s) + 45
    assert _marked_processes() == [], "a learner-started process survived the grader"


def test_forbidden_op_report_names_op_and_line() -> None:
    result = check_file(TAMPER / "swallow_forbidden.py", "attention", seed=3, limits=Limits(**BASE))
    assert "scaled_dot_product_attention" in result.diagnosis_detail
    assert "line 17" in result.diagnosis_detail
