"""drill bench on a real CUDA device (skipped without one; `pytest -m cuda` selects them).

What CPU tests cannot show: that events, allocator peaks, the copy bandwidth
and the OOM path behave on a GPU as drill/bench/device.py assumes, and that
the fused reference's advantage over eager code shows up as numbers.
benchmarks/gpu_check.sh runs these in one device call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.bench import device as dev
from drill.bench.run import BenchOptions, bench_file

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).parent
SOL = ROOT / "fixtures" / "solutions"


@pytest.fixture(scope="module")
def backend():
    return dev.CudaBackend(torch.device("cuda", 0))


def test_events_time_real_work_after_a_synchronize(backend) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timer = dev.Timer(backend)
    one = timer.once(lambda: a @ a)
    four = timer.once(lambda: [a @ a for _ in range(4)])
    assert 0 < one < 1.0
    assert 2.0 < four / one < 8.0  # four products take about four times one


def test_allocator_peak_is_per_call_and_includes_the_output(backend) -> None:
    mib = 2**20
    peak, out = dev.cuda_peak_bytes(lambda: torch.empty(64 * mib, dtype=torch.uint8, device="cuda"), backend)
    assert 64 * mib <= peak < 66 * mib
    del out
    peak, out = dev.cuda_peak_bytes(lambda: torch.empty(mib, dtype=torch.uint8, device="cuda"), backend)
    assert mib <= peak < 3 * mib  # reset between calls: not the 64 MiB of the call before
    del out


def test_copy_bandwidth_is_plausible(backend) -> None:
    bw = dev.copy_bandwidth(backend, dev.Timer(backend))
    assert bw is not None and 100e9 < bw < 20e12, bw


def test_attention_fused_advantage_is_measured() -> None:
    report = bench_file(SOL / "attention" / "good_matmul_softmax.py", "attention",
                        BenchOptions(device="cuda", max_size=4096, seed=1))
    doc = report.to_json()
    assert report.exit_code == 0, (doc["learner_error"], doc["stopped"], report.output_tail)
    assert doc["device"] == "cuda" and doc["dtype"] == "bfloat16" and doc["peak_bandwidth_gb_s"] > 100
    assert [s["size"] for s in doc["sizes"]] == [1024, 2048, 4096]
    last = doc["sizes"][-1]["results"]
    assert all(r["status"] == "ok" for r in last.values()), last
    assert last["learner"]["ratio_to_fused"] > 1.0  # eager T x T scores lose to the fused kernel
    assert last["learner"]["peak_bytes"] > 4 * last["fused"]["peak_bytes"]  # and hold far more memory


def test_rmsnorm_bandwidth_is_a_fraction_of_the_copy_peak() -> None:
    report = bench_file(SOL / "rmsnorm" / "good_rsqrt.py", "rmsnorm", BenchOptions(device="cuda", seed=1))
    doc = report.to_json()
    assert report.exit_code == 0, (doc["learner_error"], doc["stopped"], report.output_tail)
    for impl in ("fused", "learner"):
        frac = doc["sizes"][-1]["results"][impl]["bandwidth_fraction"]
        assert frac is not None and 0.02 < frac < 1.25, (impl, frac)
    assert doc["datasheet_bandwidth_gb_s"] is None or doc["datasheet_bandwidth_gb_s"] > 100


def test_learner_oom_is_reported_not_a_crash() -> None:
    report = bench_file(ROOT / "fixtures" / "bench" / "attention_oom_on_cuda.py", "attention",
                        BenchOptions(device="cuda", max_size=4096, seed=1))
    doc = report.to_json()
    assert report.exit_code == 1, (doc, report.output_tail)
    assert [s["size"] for s in doc["sizes"]] == [1024, 2048]
    assert doc["sizes"][1]["results"]["learner"]["status"] == "oom"
    assert doc["sizes"][1]["results"]["fused"]["status"] == "ok"
    assert doc["learner_error"].startswith("out of memory at T=2048")
