"""triton_rmsnorm (issue 17): the policy profile, the compiler allowance, the spec's variants against emulations of
each fixture's mistake, the bandwidth verdict, the one-line refusal without a GPU, and (where the `triton`
package is installed) the fixtures graded through Triton's interpreter in the real child."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import audit, devices, gpu, policy, registry
from drill.judge.specs import triton_rmsnorm as spec_module

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "solutions" / "triton_rmsnorm"
HAS_TRITON = importlib.util.find_spec("triton") is not None


# ---------------------------------------------------------------- layer 1


def test_triton_is_allowed_for_this_exercise_only() -> None:
    for path in sorted(FIXTURES.glob("*.py")) + [ROOT / "exercises" / "triton_rmsnorm.py"]:
        src = path.read_text()
        assert policy.check_source(src, extra=registry.entry("triton_rmsnorm").imports) == [], path.name
        refused = {v.what for v in policy.check_source(src)}
        assert "`import triton` is not allowed" in refused, path.name


@pytest.mark.parametrize("line,what", [
    ("t = torch.jit", "`.jit`"), ("k = triton.knobs", "`.knobs`"), ("import triton.runtime", "`import triton.runtime`"),
    ("d = triton.runtime.driver", "`.runtime`"), ("from triton import knobs", "from triton import knobs"),
    ("b = triton.backends", "`.backends`"), ("x = torch.load", "`.load`"),
])
def test_triton_internals_stay_refused_with_the_profile(line: str, what: str) -> None:
    src = "import torch\nimport triton\nimport triton.language as tl\n" + line + "\n"
    found = policy.check_source(src, extra=("triton",))
    assert any(what in v.what + v.source for v in found), found


# ---------------------------------------------------------------- the compiler allowance (audit hook)


def test_only_triton_s_own_compiler_calls_are_allowed(tmp_path: Path) -> None:
    roots = (str(tmp_path.resolve()) + "/",)
    ptxas, cc = "/opt/triton/bin/ptxas", "/usr/bin/gcc"
    allowed = gpu.exec_rule({"ptxas": ptxas, "cc": cc}, roots)
    src, out = str(tmp_path / "k.ptx"), str(tmp_path / "k.ptx.o")
    assert allowed(ptxas, [ptxas, "-lineinfo", "-v", "--gpu-name=sm_90a", src, "-o", out])
    assert allowed(None, [ptxas, "--version"])
    c_src, so = str(tmp_path / "main.c"), str(tmp_path / "m.so")
    assert allowed(cc, [cc, c_src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so, "-l:libcuda.so.1",
                        "-L/usr/lib/x86_64-linux-gnu", "-I/usr/include/python3.11"])
    refused = [
        (ptxas, [ptxas, src, "-o", "/home/me/.bashrc"]),  # writes outside the run's folders
        (ptxas, [ptxas, "--output-file", out, src]),  # a flag Triton does not pass
        (cc, [cc, c_src, "-o", so, "-Wl,-Map=/home/me/x"]),
        (cc, [cc, "/home/me/evil.c", "-o", so]),  # a source outside the run's folders
        ("/bin/sh", ["/bin/sh", "-c", "id"]),
        (cc, ["gcc", c_src, "-o", so]),  # not an absolute argv[0]
        (cc, "gcc -o /tmp/x"),  # a string, not an argument list
    ]
    for exe, argv in refused:
        assert not allowed(exe, argv), argv
    assert gpu.exec_rule({}, roots) is None  # every other job: no process may be started


# ---------------------------------------------------------------- the hidden tests and the mistakes


def test_the_cases_cover_widths_dtypes_and_layouts() -> None:
    cases = spec_module.make_cases(11)
    widths = {c.ctx["width"] for c in cases}
    assert any(w & (w - 1) for w in widths) and 1 in widths and max(widths) >= 8192
    assert {c.ctx["dtype"] for c in cases} == {"float32", "float16", "bfloat16"}
    kinds = {c.extra["views"]["x"][0] for c in cases if c.extra.get("views")}
    assert kinds == {"narrow", "rows", "t"}
    for c in cases:
        x = spec_module.logical_x(c)
        assert tuple(x.shape)[-1] == c.ctx["width"]
        if c.extra.get("views"):
            assert not x.is_contiguous(), c.name


def _grade_variant(bug_label: str, case, got):
    bug = next(b for b in spec_module.BUGS if b.label == bug_label)
    out = bug.fn(case, got) if bug.fit else bug.fn(case)
    return out[0] if isinstance(out, tuple) else out


def _rms(x, w, eps, divisor=None, upto=None):
    xf = x.float()
    part = xf if upto is None else xf[..., :upto]
    return (xf * torch.rsqrt(part.pow(2).sum(-1, keepdim=True) / (divisor or x.shape[-1]) + eps) * w.float())


def test_the_variants_reproduce_emulations_of_the_fixtures_mistakes() -> None:
    """Each fixture's kernel written as torch ops: the variant (or the family's chosen member) equals it."""
    cases = spec_module.make_cases(11)
    odd = next(c for c in cases if "not a power of two, eps=1e-2" in c.name)
    x, w, eps = odd.args["x"], odd.args["weight"], odd.ctx["eps"]
    block = 1 << (x.shape[-1] - 1).bit_length()
    by_block = _rms(x, w, eps, divisor=block).to(x.dtype)
    assert torch.allclose(_grade_variant("sum(x * x) / BLOCK", odd, by_block), by_block)
    right = _rms(x, w, eps).to(x.dtype)
    assert torch.allclose(_grade_variant("sum(x * x) / BLOCK", odd, right), right)  # the right member is there

    wide = next(c for c in cases if "longer than 2048" in c.name)
    x, w, eps = wide.args["x"], wide.args["weight"], wide.ctx["eps"]
    short = _rms(x, w, eps, upto=1024)
    got = short.clone()
    got[:, 1024:] = float("nan")  # never written: whatever torch.empty held
    chosen = _grade_variant("a fixed BLOCK shorter than the row", wide, got)
    assert torch.allclose(chosen[:, :1024], short[:, :1024])

    for c in (c for c in cases if c.extra.get("views")):
        base, lx = c.args["x"], spec_module.logical_x(c)
        read = base.reshape(-1)[: lx.numel()].view(lx.shape)  # x_ptr + row * n_cols + col
        want = _rms(read, c.args["weight"], c.ctx["eps"]).to(lx.dtype)
        assert torch.equal(_grade_variant("row * n_cols + col, y contiguous", c, None), want), c.name

    hot = next(c for c in cases if "~400" in c.name)
    zeros = _grade_variant("x * x and the sum in the input dtype (no .to(tl.float32) after tl.load)", hot, None)
    assert bool((zeros == 0).all())  # inf squares: every row collapses to 0


def test_the_spec_is_cuda_only_and_the_mock_never_picks_it_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.mock.plan import gradable_exercises

    entry = registry.entry("triton_rmsnorm")
    assert entry.device == "cuda" and entry.imports == ("triton",)
    monkeypatch.delenv(devices.INTERPRET_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "triton_rmsnorm" not in gradable_exercises()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(devices, "gpu_nodes_visible", lambda: True)  # a GPU machine: its nodes exist too
    assert "triton_rmsnorm" in gradable_exercises()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_a_gpu_the_exercise_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(devices.INTERPRET_ENV, raising=False)
    r = CliRunner().invoke(app, ["check", str(FIXTURES / "good_one_row_per_program.py"), "-e", "triton_rmsnorm",
                                 "--no-server"])
    assert r.exit_code == 2
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "triton_rmsnorm can only be graded on a CUDA device" in lines[0], lines
    assert "DRILL_TRITON_INTERPRET=1" in lines[0]  # the way to grade it here anyway (issue 31)


# ---------------------------------------------------------------- the bandwidth verdict


def _measured(rate_share: float, launches: int = 3) -> dict:
    copy_s = 2 * 16384 * 4096 * 2 / 4.3e12
    return {"rows": 16384, "width": 4096, "dtype": "bfloat16", "launches": launches,
            "bytes": 2 * 16384 * 4096 * 2 + 4096 * 2, "median_s": copy_s / rate_share,
            "copy_bytes": 2 * 16384 * 4096 * 2, "copy_median_s": copy_s, "device_name": "NVIDIA H200",
            "memory_clock_khz": 0, "bus_width_bits": 0}


def test_bandwidth_is_reported_and_advises_below_the_threshold() -> None:
    lines, notes, measured = audit.judge("kernel_bandwidth", _measured(0.8))
    assert measured and notes == [], notes
    assert "of the 4800 GB/s datasheet peak" in lines[0] and "80% of a device copy (4300 GB/s now)" in lines[0], lines
    _, notes, _ = audit.judge("kernel_bandwidth", _measured(0.4))
    assert len(notes) == 1 and "40% of the device's copy bandwidth, under 55%" in notes[0]
    _, notes, _ = audit.judge("kernel_bandwidth", _measured(0.9, launches=0))
    assert notes and "no @triton.jit kernel was launched" in notes[0]
    lines, notes, measured = audit.judge("kernel_bandwidth", {"skipped": "not on a CUDA device", "launches": 3})
    assert not measured and lines == ["bandwidth audit: not measured (not on a CUDA device)"]


def test_datasheet_bandwidth() -> None:
    from drill.bench.device import datasheet_bandwidth

    assert datasheet_bandwidth("NVIDIA H200") == 4.8e12
    assert datasheet_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert datasheet_bandwidth("Some GPU", 3_201_000, 6144) == pytest.approx(4.917e12, rel=1e-3)
    assert datasheet_bandwidth("Some GPU") is None


# ---------------------------------------------------------------- graded through Triton's interpreter


INTERPRETED = {  # fixture -> the verdict Triton's interpreter gives (it computes bf16 products on raw bits: the
    "good_one_row_per_program.py": "pass",  # upcast fixture's bf16 squares come out NaN there, so it is left out)
    "good_two_pass_chunks.py": "pass",
    "bug_triton_mean_over_block__divides_by_block.py": "triton_mean_over_block",
    "bug_triton_assumes_contiguous__row_times_ncols.py": "triton_assumes_contiguous",
    "bug_triton_block_too_small__fixed_1024.py": "triton_block_too_small",
}


@pytest.mark.skipif(not HAS_TRITON, reason="the triton package is not installed here")
@pytest.mark.parametrize("name", sorted(INTERPRETED), ids=lambda n: n.split("__")[0])
def test_fixtures_graded_through_the_interpreter_in_the_real_child(name: str, monkeypatch: pytest.MonkeyPatch,
                                                                   pool) -> None:
    """The whole path without a GPU: policy profile, the child importing triton under its traps and sandbox,
    the non-contiguous views, the variants; the bandwidth audit says it did not measure."""
    from drill.judge.check import check_file

    monkeypatch.setenv(devices.INTERPRET_ENV, "1")
    r = check_file(FIXTURES / name, "triton_rmsnorm", seed=20261129, pool=pool)
    got = "pass" if r.status == "pass" else (r.diagnosis.id if r.diagnosis else None)
    assert got == INTERPRETED[name], (r.status, r.diagnosis_detail, r.output_tail[-500:])
    assert r.device == "cpu (Triton's interpreter: values only)"
    if got == "pass":
        assert r.audit == ["bandwidth audit: not measured (not on a CUDA device (Triton's interpreter on the CPU "
                           "measures no bandwidth))"], r.audit


@pytest.fixture(scope="module")
def pool():
    from drill.judge.pool import ChildPool

    with ChildPool() as p:
        yield p
