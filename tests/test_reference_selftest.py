"""The GPU self-test: runs (as a CPU comparison) here, and for real where CUDA exists."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import drill.reference.norm as norm_module
from drill.reference import selftest


@pytest.mark.slow
def test_selftest_passes_on_this_machine(capsys):
    assert selftest.main([]) == 0
    out = capsys.readouterr().out
    if not torch.cuda.is_available():
        assert "CUDA not available" in out
        # 14 comparisons, 2 forced SDPA backends, the default choice, rms_norm
        assert "18/18 passed" in out and "ok   filter_logits" in out
        assert "ok   sdpa forced flash_attention -> aten._scaled_dot_product_flash_attention_for_cpu" in out
        assert "ok   sdpa default choice = flash (dispatcher), ran _scaled_dot_product_flash_attention_for_cpu" in out


def test_a_forced_backend_whose_op_does_not_run_fails(monkeypatch):
    """The backend check watches the aten op: a table naming another op than the one that runs fails."""
    ops = {**selftest.SDPA_OPS["cpu"], "FLASH_ATTENTION": "_scaled_dot_product_efficient_attention"}
    monkeypatch.setitem(selftest.SDPA_OPS, "cpu", ops)
    results = {r.name: r for r in selftest.backend_checks(torch.device("cpu"), torch.float32, 1e-5)}
    bad = results["sdpa forced flash_attention -> aten._scaled_dot_product_efficient_attention"]
    assert not bad.ok and "_scaled_dot_product_flash_attention_for_cpu" in bad.note


def test_the_default_choice_must_be_what_runs(monkeypatch):
    """The grader's reported backend (backend.sdpa_choice) is held to the op that really runs."""
    import drill.reference.backend as backend

    monkeypatch.setattr(backend, "sdpa_choice", lambda *a, **k: "math")
    results = selftest.backend_checks(torch.device("cpu"), torch.float32, 1e-5)
    default = next(r for r in results if r.name.startswith("sdpa default choice"))
    assert default.name.startswith("sdpa default choice = math") and not default.ok


@pytest.mark.slow
def test_selftest_fails_loudly_when_a_fused_part_is_wrong(monkeypatch, capsys):
    real = norm_module.rms_norm

    def off_by_eps(x, weight, eps, impl=None):
        return real(x, weight, eps * 1e4 if impl != "math" else eps, impl=impl)

    monkeypatch.setattr(selftest, "rms_norm", off_by_eps)
    assert selftest.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL rms_norm" in out and "FAILED: rms_norm" in out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_selftest_on_cuda_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "drill.reference.selftest"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SDPA math kernel disabled" in proc.stdout
    for backend in ("flash_attention", "efficient_attention"):  # cuDNN's may be unavailable: reported, not failed
        assert f"ok   sdpa forced {backend}" in proc.stdout, proc.stdout
    assert "ok   sdpa default choice = " in proc.stdout and "choice = math" not in proc.stdout
    assert ("ok   rms_norm fused -> aten._fused_rms_norm" in proc.stdout
            or not hasattr(torch.ops.aten, "_fused_rms_norm"))
