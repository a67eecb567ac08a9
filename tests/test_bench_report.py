"""drill bench's report on synthetic measurements: table width, notes, and what stopped the ladder.

No child process here: a BenchReport is filled with chosen timings (the
widest realistic cells: CUDA bandwidth with %peak, 8-column tables, 5-digit
sizes) and rendered to a Console of a fixed width, the way a user's terminal
would show it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from drill.bench.report import render, table
from drill.bench.run import BenchReport, ImplResult, SizeRow
from drill.bench.workloads import WORKLOADS


def _res(median: float, spread: float = 0.02, peak: int = 16 * 2**20) -> ImplResult:
    """An ok result whose IQR is `spread` x the median."""
    return ImplResult("ok", median_s=median, q1_s=median * (1 - spread / 2), q3_s=median * (1 + spread / 2),
                      min_s=median * 0.9, max_s=median * 1.1, reps=5, peak_bytes=peak)


def make_report(exercise: str, device: str = "cpu", growth: dict[str, float] | None = None,
                spread: dict[tuple[int, str], float] | None = None, n_sizes: int | None = None,
                stop_reason: str = "", stopped: str = "") -> BenchReport:
    """Medians grow as size^growth[impl] from 48.79 ms at the first size (so cells look like `48.79 ms`)."""
    wl = WORKLOADS[exercise]
    growth = growth or {"learner": wl.expected_exponent, "fused": wl.expected_exponent, "math": wl.expected_exponent}
    sizes = wl.ladder(device)[:n_sizes]
    report = BenchReport(exercise=exercise, file=f"/home/someone/solutions/{exercise}.py", device=device,
                         dtype="bfloat16" if device == "cuda" else "float32", threads=1, seed=7, workload=wl,
                         dims=wl.dims(device), check_seed=3, device_name="NVIDIA H200" if device == "cuda" else "CPU",
                         torch_version="2.11.0", peak_bandwidth=4.1e12 if device == "cuda" else None,
                         stop_reason=stop_reason, stopped=stopped)
    for size in sizes:
        results = {}
        for impl, k in growth.items():
            median = 0.04879 * (1.0 if impl == "learner" else 0.7) * (size / sizes[0]) ** k
            results[impl] = _res(median, (spread or {}).get((size, impl), 0.02), peak=16 * 2**20 * size // sizes[0])
        report.rows.append(SizeRow(size, results, elapsed_s=1.0))
    return report


def rendered(report: BenchReport, width: int) -> str:
    buf = io.StringIO()
    render(report, Console(file=buf, width=width, highlight=False, color_system=None))
    return buf.getvalue()


def table_text(report: BenchReport, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(table(report, width))
    return buf.getvalue()


@pytest.mark.parametrize("exercise, device", [("rmsnorm", "cpu"), ("swiglu", "cpu"), ("rmsnorm", "cuda"),
                                               ("swiglu", "cuda"), ("attention", "cuda"), ("kv_cache", "cpu")])
def test_table_fits_80_columns_without_wrapping_a_cell(exercise: str, device: str) -> None:
    report = make_report(exercise, device)
    text = table_text(report, 80)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80, text
    assert "…" not in text  # no header or cell cut short
    body = [ln for ln in lines if "yours" in ln or "fused ref" in ln or "math ref" in ln]
    assert len(body) == 3 * len(report.rows), text  # one line per implementation and size: nothing wrapped
    for ln in body:
        assert re.search(r"\d+(\.\d+)? (µs|ms|s) ", ln), ln  # the median and its unit on one line
        assert re.search(r"\d\.\d\dx", ln), ln  # the ratio survives every narrowing
    for size in (r.size for r in report.rows):
        assert re.search(rf"│\s+{size} │ yours", text), size


def test_a_wide_terminal_keeps_every_column_and_a_narrow_one_says_what_it_dropped() -> None:
    report = make_report("rmsnorm", "cuda")
    wide = table_text(report, 200)
    for header in ("median", "IQR", "tokens/s", "GB/s (%peak)", "peak mem", "vs fused"):
        assert header in wide, header
    assert "not shown" not in wide
    narrow = table_text(report, 60)
    assert max(len(ln) for ln in narrow.splitlines()) <= 60, narrow
    assert "narrow terminal:" in " ".join(narrow.split()) and "--json has them" in " ".join(narrow.split())
    assert "median" in narrow and "vs fused" in narrow


def test_a_reference_growing_past_the_expected_exponent_gets_a_note() -> None:
    """RMSNorm on a CPU: d=8192 x 1024 fp32 is 32 MiB, past the caches, so the fused path itself reads ~d^1.8."""
    drifting = make_report("rmsnorm", growth={"learner": 1.84, "fused": 1.84, "math": 1.8})
    notes = drifting.warnings()
    assert any("fused reference itself grows as d_model^1.84" in n and "compare ratios" in n for n in notes), notes
    assert not any(n.startswith("your time grows") for n in notes)  # the learner matches the reference: no blame
    as_expected = make_report("rmsnorm", growth={"learner": 1.0, "fused": 1.0, "math": 1.0})
    assert not any("fused reference itself" in n for n in as_expected.warnings())


def test_noisy_rounds_are_flagged_next_to_the_ratio() -> None:
    wl = WORKLOADS["attention"]
    noisy_size = wl.ladder("cpu")[2]
    noisy = make_report("attention", spread={(noisy_size, "fused"): 0.4})
    notes = noisy.warnings()
    assert any(f"reaches 40% of the median at T={noisy_size}" in n for n in notes), notes
    text = table_text(noisy, 100)
    marked = [ln for ln in text.splitlines() if re.search(r"\d\.\d\dx\*", ln)]
    assert len(marked) == 2 and "yours" not in marked[1]  # yours and math ref at that size; fused is the base
    assert "* noisy" in text
    quiet = make_report("attention")
    assert not any("noisy" in n for n in quiet.warnings())
    assert "*" not in table_text(quiet, 100)


@pytest.mark.parametrize(
    "reason, flag",
    [("timeout", "raise --timeout"), ("size_budget", "raise --size-budget"), ("max_size", "raise --max-size"),
     ("memory", "raise --memory-mb"), ("learner", "your code failed")],
)
def test_too_few_sizes_names_what_stopped_the_ladder(reason: str, flag: str) -> None:
    report = make_report("attention", n_sizes=1, stop_reason=reason, stopped="stopped before T=256: why")
    text = " ".join(rendered(report, 120).split())
    assert "needs at least 3 sizes; this run measured 1" in text
    assert flag in text
    others = {"raise --timeout", "raise --size-budget", "raise --max-size", "raise --memory-mb"} - {flag}
    assert not any(o in text for o in others), text
    assert "ladder stopped before T=256: why" in text and "stopped: stopped" not in text


def test_cuda_bandwidth_is_shown_against_the_copy_and_the_datasheet_peak() -> None:
    """RMSNorm on CUDA: the fraction of the copy measured in the run, and of the device's datasheet peak."""
    report = make_report("rmsnorm", device="cuda")
    report.datasheet_bandwidth = 4.8e12
    doc = report.to_json()
    assert doc["datasheet_bandwidth_gb_s"] == 4800.0 and doc["peak_bandwidth_gb_s"] == 4100.0
    res = doc["sizes"][-1]["results"]["fused"]
    assert res["datasheet_fraction"] == pytest.approx(res["bandwidth_gb_s"] / 4800.0)
    assert res["bandwidth_fraction"] == pytest.approx(res["bandwidth_gb_s"] / 4100.0)
    assert ("device copy bandwidth (practical peak): 4100 GB/s = 85% of the 4800 GB/s datasheet peak"
            in rendered(report, 200))
    cpu = make_report("rmsnorm").to_json()
    assert cpu["datasheet_bandwidth_gb_s"] is None and cpu["sizes"][0]["results"]["fused"]["datasheet_fraction"] is None


@pytest.mark.parametrize("width", [80, 120])
def test_the_log_log_curves_match_their_snapshot(width: int) -> None:
    """Time against size on log-log axes, yours above the references as it grows faster (issue 29)."""
    from drill.bench.report import curves

    report = make_report("attention", growth={"learner": 2.3, "fused": 2.0, "math": 2.0})
    chart = curves(report, width)
    snapshot = Path(__file__).parent / "fixtures" / "charts" / f"bench_attention_{width}.txt"
    assert chart == snapshot.read_text(encoding="utf-8"), chart
    assert max(len(line) for line in chart.splitlines()) <= width
    assert chart in rendered(report, width)
    assert curves(make_report("attention", n_sizes=1), width) is None  # one size: no curve, the bars only
