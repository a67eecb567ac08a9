"""`drill check --device cpu|cuda|auto` (issue 17): the option, its one-line refusals, the --json fields, the
request to the grading server, the reference on the device, the sandbox's view of a GPU, and the forbidden
CUDA kernels. The CUDA half (`-m cuda`) runs on a GPU only (benchmarks/gpu_check.sh); here it skips."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.errors import UserError
from drill.judge import devices, registry, wire
from drill.judge.check import Result
from drill.judge.check import TestResult as _Test
from drill.judge.runner import Limits

ROOT = Path(__file__).resolve().parents[1]
SOL = ROOT / "tests" / "fixtures" / "solutions"
GOOD = SOL / "rmsnorm" / "good_rsqrt.py"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
runner = CliRunner()


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------- the option


@NO_CUDA
@pytest.mark.parametrize("extra", [[], ["--watch"]], ids=["file", "watch"])
def test_device_cuda_without_a_gpu_is_one_line_and_exit_2(extra: list[str]) -> None:
    r = runner.invoke(app, ["check", str(GOOD), "-e", "rmsnorm", "--device", "cuda", "--no-server", *extra])
    assert r.exit_code == 2, r.output
    lines = _lines(r.output)
    assert len(lines) == 1 and "--device cuda: torch sees no CUDA device here" in lines[0], lines
    assert "CPU-only build" in lines[0] or "finds no device" in lines[0] or "CUDA_VISIBLE_DEVICES" in lines[0]


@NO_CUDA
def test_device_cuda_on_a_folder_without_a_gpu_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "rmsnorm.py").write_text(GOOD.read_text())
    (tmp_path / "swiglu.py").write_text((SOL / "swiglu" / "good_f_silu.py").read_text())
    r = runner.invoke(app, ["check", str(tmp_path), "--device", "cuda", "--no-server"])
    assert r.exit_code == 2 and len(_lines(r.output)) == 1, r.output


@NO_CUDA
def test_a_folder_grades_the_rest_when_it_holds_a_cuda_only_exercise(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder of every starter still grades on a CPU machine: the CUDA-only file is left out, said once."""
    monkeypatch.delenv("DRILL_TRITON_INTERPRET", raising=False)
    (tmp_path / "triton_rmsnorm.py").write_text((ROOT / "exercises" / "triton_rmsnorm.py").read_text())
    only = runner.invoke(app, ["check", str(tmp_path), "--no-server"])
    assert only.exit_code == 2 and len(_lines(only.output)) == 1, only.output
    assert "triton_rmsnorm is graded on CUDA only" in only.output
    (tmp_path / "rmsnorm.py").write_text(GOOD.read_text())
    r = runner.invoke(app, ["check", str(tmp_path), "--no-server", "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert "left out triton_rmsnorm.py: triton_rmsnorm is graded on CUDA only" in r.output
    assert "1/1 passed" in r.output and "rmsnorm.py" in r.output


def test_an_unknown_device_is_one_line_and_exit_2() -> None:
    r = runner.invoke(app, ["check", str(GOOD), "-e", "rmsnorm", "--device", "gpu"])
    assert r.exit_code == 2
    assert _lines(r.output) == ["error: unknown device 'gpu'; valid: cpu, cuda, auto"], r.output


@NO_CUDA
def test_auto_grades_on_the_cpu_here_and_the_json_says_where_and_with_what() -> None:
    r = runner.invoke(app, ["check", str(GOOD), "-e", "rmsnorm", "--device", "auto", "--json", "--no-server"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["version"] == 3 and doc["status"] == "pass"
    assert doc["device"] == "cpu"
    assert doc["reference_backend"] == "cpu: rms_norm F.rms_norm x9", doc["reference_backend"]


def test_the_default_is_the_cpu_and_attention_names_the_sdpa_kernel_that_ran() -> None:
    from drill.judge.check import check_file

    r = check_file(SOL / "attention" / "good_matmul_softmax.py", "attention", seed=5)
    assert r.status == "pass" and r.device == "cpu"
    # the CPU's fused SDPA ("flash" for CPU) where it applies, the math kernel for the shapes it refuses (5-D)
    assert r.reference_backend.startswith("cpu: sdpa flash x") and "math x" in r.reference_backend, r.reference_backend


def test_requested_needs_no_torch_and_refuses_cpu_for_a_cuda_only_exercise(monkeypatch: pytest.MonkeyPatch) -> None:
    triton_ex = registry.entry("triton_rmsnorm")
    monkeypatch.delenv(devices.INTERPRET_ENV, raising=False)
    assert devices.requested(None, registry.entry("rmsnorm")) == "cpu"
    assert devices.requested("AUTO", registry.entry("rmsnorm")) == "auto"
    assert devices.requested(None, triton_ex) == "cuda"
    with pytest.raises(UserError, match="graded on CUDA only; drop --device cpu"):
        devices.requested("cpu", triton_ex)
    monkeypatch.setenv(devices.INTERPRET_ENV, "1")
    assert devices.requested("cuda", triton_ex) == "cpu"  # the interpreter runs on CPU tensors


def test_resolve_says_why_there_is_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto", registry.entry("rmsnorm")) == "cpu"
    with pytest.raises(UserError, match=r"^--device cuda: torch sees no CUDA device here \("):
        devices.resolve("cuda", registry.entry("rmsnorm"))
    with pytest.raises(UserError, match="triton_rmsnorm can only be graded on a CUDA device"):
        devices.resolve("cuda", registry.entry("triton_rmsnorm"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve("auto", registry.entry("rmsnorm")) == "cuda"


def test_kernel_summary_groups_by_device_and_op() -> None:
    counts = {("cuda", "sdpa", "flash"): 12, ("cuda", "sdpa", "math"): 4, ("cuda", "rms_norm", "F.rms_norm"): 2,
              ("cpu", "sdpa", "math"): 3}
    text = devices.kernel_summary(counts, fallback=1)
    assert text == ("cpu: sdpa math x3; cuda: rms_norm F.rms_norm x2, sdpa flash x12, math x4; "
                    "1 case(s) computed on the CPU after the CUDA reference failed")
    assert devices.kernel_summary({}).startswith("no SDPA or norm call")


def test_the_kernel_log_is_per_thread_and_reads_the_dispatchers_choice() -> None:
    from drill.reference import rms_norm, sdpa
    from drill.reference.backend import kernel_log

    q = torch.randn(1, 2, 8, 16)
    seen = {}

    def other() -> None:
        with kernel_log() as c:
            sdpa(q, q, q, impl="math")
        seen["other"] = dict(c)

    with kernel_log() as mine:
        sdpa(q, q, q)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        rms_norm(q, torch.ones(16), 1e-6, impl="math")
    assert dict(mine) == {("cpu", "sdpa", "flash"): 1, ("cpu", "rms_norm", "math"): 1}
    assert seen["other"] == {("cpu", "sdpa", "math"): 1}


# ---------------------------------------------------------------- the request to the server


def test_the_device_travels_in_the_request_and_is_validated() -> None:
    it = wire.item("/abs/rmsnorm.py", None, 3, Limits(), device="cuda")
    assert it["device"] == "cuda"
    wire.parse_request(wire.request("check", "fp", [it]))
    wire.parse_request(wire.request("check", "fp", [{**it, "device": None}]))
    for bad in ("gpu", 1, True):
        with pytest.raises(wire.WireError, match="device must be one of"):
            wire.parse_request(wire.request("check", "fp", [{**it, "device": bad}]))
    with pytest.raises(wire.WireError, match="missing"):
        wire.parse_request(wire.request("check", "fp", [{k: v for k, v in it.items() if k != "device"}]))


def test_results_carry_the_device_and_the_reference_backend_both_ways() -> None:
    r = Result(exercise="rmsnorm", file="x.py", status="pass", seed=1, tests=[_Test("t", "pass")],
               device="cuda:0 (NVIDIA H200, 140 GiB), capped at 2048 MB",
               reference_backend="cuda: rms_norm F.rms_norm x9")
    back = wire.result_from_wire(json.loads(wire.encode(wire.result_to_wire(r))))
    assert back.device == r.device and back.reference_backend == r.reference_backend


def test_a_server_without_cuda_is_not_sent_the_cuda_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge import client

    said: list[str] = []
    monkeypatch.setattr(client, "ask", lambda where, op: {"cuda": False})
    run = client._Run([client.Job(GOOD, "rmsnorm", device="cuda"), client.Job(GOOD, "rmsnorm"),
                       client.Job(GOOD, "rmsnorm", device="auto")], [1, 2, 3])
    assert client._servable(run, None, said.append) == [1, 2]  # auto is the server's to settle
    assert said == []  # this process refuses them in one line of its own: nothing before it (issue 31)
    monkeypatch.setattr(client, "ask", lambda where, op: None)  # no status to be had: then it says so
    monkeypatch.setattr(client, "start", lambda where, say, reason="": 0)
    assert client._servable(run, None, said.append) == [1, 2]
    assert said == ["the grading server did not say whether it sees a CUDA device; grading the CUDA checks in "
                    "this process"]
    said.clear()
    monkeypatch.setattr(client, "ask", lambda where, op: {"cuda": True})
    assert client._servable(run, None, said.append) == [0, 1, 2]
    asked = []
    monkeypatch.setattr(client, "ask", lambda where, op: asked.append(op))
    cpu_only = client._Run([client.Job(GOOD, "rmsnorm")], [1])
    assert client._servable(cpu_only, None, said.append) == [0] and asked == []  # no status round trip for CPU


def test_a_server_without_cuda_refuses_a_cuda_item_to_the_client(tmp_path: Path) -> None:
    from drill.judge import server
    from drill.judge.server_dir import Place

    srv = server.Server(Place(tmp_path, "k"), 60, 1)
    srv._cuda = False
    item = wire.item(str(GOOD), "rmsnorm", 1, Limits(), device="cuda")
    assert srv._grade(item, server._Tracker()) == ("internal", "this grading server sees no CUDA device")
    assert srv.status()["cuda"] is False
    srv.executor.shutdown(wait=False)


# ---------------------------------------------------------------- the child's side


def test_the_parent_and_the_child_build_the_same_non_contiguous_views() -> None:
    from drill.judge import child
    from drill.judge.specs.triton_rmsnorm import view

    base = torch.arange(60.0).reshape(6, 10)
    for how in (["narrow", 7], ["rows", 2], ["t"]):
        a, b = view(base, how), child.input_view(base, how)
        assert torch.equal(a, b) and a.stride() == b.stride() and not a.is_contiguous()


def test_a_cuda_out_of_memory_error_is_a_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge import child, gpu

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    exc = oom("CUDA out of memory. Tried to allocate 3725.29 GiB. GPU 0 has a total capacity of 139.81 GiB")
    assert gpu.is_device_oom(exc) and not gpu.is_device_oom(RuntimeError("shape mismatch"))
    monkeypatch.setattr(child, "DEVICE", "cuda")
    rec = child.classify(exc)
    assert rec["status"] == "memory_limit" and rec["message"].startswith("CUDA memory limit: CUDA out of memory")
    monkeypatch.setattr(child, "DEVICE", "cpu")
    assert child.classify(exc)["status"] == "exception"  # on the CPU such an error is not the run's cap


def test_an_output_left_on_another_device_is_a_contract_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge import child

    monkeypatch.setattr(child, "DEVICE", "cuda")
    with pytest.raises(child.ContractError, match="returned a tensor on cpu, but its inputs are on cuda"):
        child.on_device(torch.zeros(2), "RMSNorm")
    monkeypatch.setattr(child, "DEVICE", "cpu")
    child.on_device(torch.zeros(2), "RMSNorm")


def test_the_memory_cap_cannot_be_raised_from_graded_code() -> None:
    """_guard_native replaces the allocator's fraction setters (every run; they matter on CUDA)."""
    code = f"""
import sys, torch
sys.path.insert(0, {str(ROOT)!r})
from drill.judge import child
child.WORK = ""
refused = []
def refuse(what, detail=""):
    refused.append(what)
    raise child.Denied(what)
child._guard_native(refuse, lambda f: True)
calls = [lambda: torch.cuda.set_per_process_memory_fraction(1.0),
         lambda: torch.cuda.memory.set_per_process_memory_fraction(1.0)]
if hasattr(torch._C, "_cuda_setMemoryFraction"):  # CUDA builds only: the private setter under the public one
    calls.append(lambda: torch._C._cuda_setMemoryFraction(1.0, 0))
for call in calls:
    try:
        call()
    except child.Denied:
        pass
print(len(calls) == len(refused), sorted(set(refused)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("True ['torch.cuda.") and "set_per_process_memory_fraction" in out.stdout


# ---------------------------------------------------------------- forbidden CUDA kernels


CUDA_KERNELS = {
    "attention": ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
                  "_cudnn_attention_forward", "_scaled_dot_product_flash_attention_backward",
                  "_scaled_dot_product_fused_attention_overrideable"),
    "rmsnorm": ("_fused_rms_norm", "rms_norm"),
    "triton_rmsnorm": ("_fused_rms_norm", "rms_norm", "native_layer_norm"),
}


@pytest.mark.parametrize("exercise", sorted(CUDA_KERNELS))
def test_every_fused_cuda_kernel_is_in_the_forbidden_set(exercise: str) -> None:
    """The CUDA build's fused kernels exist as aten schemas in every build: each is matched, and the child's
    plan (forbidden_op_names) lists it, so a CUDA build registers the trap on its CUDA key."""
    from drill.judge import child

    spec = registry.load_spec(exercise)
    names = {n.split(".")[0] for n in child.forbidden_op_names(list(spec.forbidden))}
    missing = [k for k in CUDA_KERNELS[exercise] if k not in names]
    assert not missing, missing


def _fresh_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge import child

    for name, empty in (("_PLANS", {}), ("_REGISTERED", {}), ("_UNPLANNED", set())):
        monkeypatch.setattr(child, name, empty)


def test_a_cuda_build_blocks_every_key_the_dispatcher_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the plan asks the dispatcher for in a CUDA build (faked here: the kernel table is the dispatcher's
    own `_dispatch_dump` format): every listed key, wrappers (vmap, autocast, autograd) included, plus CPU and
    CUDA; an op with only wrapper kernels cannot run and is left alone; "(inactive)" entries are not kernels."""
    from drill.judge import child

    _fresh_plans(monkeypatch)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    tables = {
        "aten::_scaled_dot_product_flash_attention": "CUDA: registered at a.cpp\nMeta: registered at m.py\n"
                                                     "Autograd[alias]: registered at v.cpp\n",
        "aten::rms_norm": "debug: registered at s.cpp\nCompositeImplicitAutograd[alias]: registered at c.cpp\n"
                          "FuncTorchBatchedDecomposition: registered at b.cpp\nMeta (inactive): registered at x\n",
        "aten::_cudnn_attention_forward": "debug: registered at s.cpp\nMeta: registered at m.py\n"
                                          "Autograd[alias]: registered at v.cpp\n",
    }
    monkeypatch.setattr(torch._C, "_dispatch_dump", lambda op: tables[op])
    probe = {("aten::_scaled_dot_product_flash_attention", "CUDA"), ("aten::rms_norm", "CompositeImplicitAutograd")}
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda op, key: (op, key) in probe)
    assert child._kernel_keys("_scaled_dot_product_flash_attention") == ["CUDA", "Meta", "Autograd", "CPU"]
    assert child._kernel_keys("rms_norm") == ["CompositeImplicitAutograd", "FuncTorchBatchedDecomposition", "CPU",
                                              "CUDA"]
    assert child._kernel_keys("_cudnn_attention_forward") == []  # no kernel that computes: nothing to run
    assert child._UNPLANNED == set()


def test_without_a_kernel_table_the_known_keys_are_probed_and_the_dispatch_trap_stays_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch that cannot list an op's kernels: the known keys are probed (as before the table was read), and
    the exercise's runs keep the per-op DispatchTrap as the backstop for any key the probe did not know."""
    from drill.judge import child

    _fresh_plans(monkeypatch)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.delattr(torch._C, "_dispatch_dump")
    has = {("aten::_scaled_dot_product_flash_attention", "CUDA"), ("aten::_fused_rms_norm", "CUDA"),
           ("aten::rms_norm", "CompositeImplicitAutograd")}
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda op, key: (op, key) in has)
    assert child._kernel_keys("_scaled_dot_product_flash_attention") == ["CUDA", "CPU"]
    assert child._kernel_keys("rms_norm") == ["CompositeImplicitAutograd", "CPU", "CUDA"]
    assert child._kernel_keys("_cudnn_attention_forward") == []
    patterns = list(registry.load_spec("rmsnorm").forbidden)
    assert child.kernel_plan(patterns)
    leaks = child._PLANS[tuple(patterns)][1]
    assert "rms_norm" in leaks and child.needs_dispatch_trap(leaks)


def test_a_kernel_table_that_misses_a_probed_kernel_keeps_the_dispatch_trap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing this code does not read right (another torch's format: here it names no key at all) is caught
    by the probe of the known keys: the probed kernels are blocked too, and the DispatchTrap stays on."""
    from drill.judge import child

    _fresh_plans(monkeypatch)
    monkeypatch.setattr(torch._C, "_dispatch_dump", lambda op: "name: " + op + "\nCPU -> kernel at x.cpp\n")
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                        lambda op, key: (op, key) == ("aten::native_layer_norm", "CPU"))
    assert child._kernel_keys("native_layer_norm") == ["CPU"] + (["CUDA"] if torch.backends.cuda.is_built() else [])
    assert child._UNPLANNED == {"native_layer_norm"}
    patterns = list(registry.load_spec("layernorm").forbidden)
    child.kernel_plan(patterns)
    assert child.needs_dispatch_trap(child._PLANS[tuple(patterns)][1])


def test_with_the_kernel_table_no_forbidden_op_keeps_the_dispatch_trap(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this torch every forbidden op of every exercise has its kernels listed, so no run pays for the trap."""
    from drill.judge import child

    _fresh_plans(monkeypatch)
    for name in registry.graded_names():
        patterns = list(registry.load_spec(name).forbidden)
        child.kernel_plan(patterns)
        assert child._PLANS[tuple(patterns)][1] == [], name


# ---------------------------------------------------------------- the sandbox's view of a GPU


def test_the_gpu_view_has_a_read_only_sysfs_and_only_the_nvidia_nodes(tmp_path: Path) -> None:
    """sandbox_child._gpu_view, entered for real (no GPU needed): /sys is there and read-only, without the
    host's sub-mounts; /dev holds the standard nodes and the host's nvidia* (none on a CPU machine)."""
    from drill.judge import runner, sandbox

    if sandbox.mode()[0] != "namespaces":
        pytest.skip(f"no namespaces here: {sandbox.mode()[1]}")
    driver = runner.copy_driver(tmp_path / "driver")
    (tmp_path / "work").mkdir()
    learner = tmp_path / "learner.py"
    learner.write_text("")
    (tmp_path / "newroot").mkdir()
    spec = sandbox.spec(tmp_path / "newroot", driver.parent, tmp_path / "work", learner, 60, gpu=True)
    code = f"""
import importlib.util, json, os, sys
s = importlib.util.spec_from_file_location("sandbox_child", {str(driver.parent / 'sandbox_child.py')!r})
m = importlib.util.module_from_spec(s); s.loader.exec_module(m)
state = m.enter(json.loads(sys.argv[1]))
try:
    open("/sys/module/.drill_probe", "w")
    writable = True
except OSError as exc:
    writable = exc.strerror
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
print(json.dumps({{"state": state.get("sandbox"), "sys": os.path.isdir("/sys/module") and os.path.isdir("/sys/bus"),
                  "writable": writable, "sub": [p for p in mounts if p.startswith("/sys/")],
                  "nvidia": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")),
                  "host_nvidia": {sorted(n for n in __import__('os').listdir('/dev') if n.startswith('nvidia'))!r}}}))
"""
    out = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["state"] == "namespaces" and seen["sys"], seen
    assert seen["writable"] == "Read-only file system", seen
    assert seen["sub"] == [], seen  # a fresh sysfs: no cgroup, debugfs, bpf or securityfs under it
    assert seen["nvidia"] == seen["host_nvidia"], seen


def test_a_cpu_check_does_not_show_the_gpu_to_the_child(tmp_path: Path) -> None:
    from drill.judge import sandbox

    plan = sandbox.spec(tmp_path, tmp_path, tmp_path, tmp_path / "x.py", 10)
    assert plan["gpu"] is False
    assert sandbox.spec(tmp_path, tmp_path, tmp_path, tmp_path / "x.py", 10, gpu=True)["gpu"] is True


# ---------------------------------------------------------------- on a GPU (skipped here)


@pytest.mark.parametrize("exercise", [e.name for e in registry.INDEX])
@pytest.mark.parametrize("mark", [pytest.param(0, marks=CUDA)])
def test_cuda_expectations_agree_with_the_cpu_reference_within_the_tolerances(exercise: str, mark: int) -> None:
    """Measures what drill/judge/README.md's CUDA tolerance column rests on: every case's expectation computed on
    CUDA (fused kernels, fp32, TF32 off) against the CPU's, normwise; must be within the case's own tolerance."""
    from drill.judge.compare import compare
    from drill.judge.specs._common import reference_device

    spec = registry.load_spec(exercise)
    worst = 0.0
    for case in spec.make_cases(7):
        cpu_out, cpu_grads = spec.reference(case)
        with reference_device("cuda"):
            cuda_out, cuda_grads = spec.reference(case)
        tol = spec.tolerances[case.ctx.get("tol", case.ctx.get("dtype", "float32"))]
        c = compare(cuda_out, cpu_out, tol, care=case.care, dtype=cpu_out.dtype)
        assert c.ok, (case.name, c.message)
        worst = max(worst, c.max_rel or 0.0)
        for key, g in cpu_grads.items():
            assert compare(cuda_grads[key], g, spec.tolerances["grad"], dtype=g.dtype).ok, (case.name, key)
    print(f"{exercise}: worst CUDA-vs-CPU expectation {worst:.2e} (normwise)")


@pytest.mark.parametrize("mark", [pytest.param(0, marks=CUDA)])
def test_a_cuda_check_of_a_good_file_passes_on_the_gpu_and_says_so(mark: int) -> None:
    from drill.judge.check import check_file

    r = check_file(GOOD, "rmsnorm", seed=3, device="cuda")
    assert r.status == "pass", (r.diagnosis_detail, r.output_tail)
    assert r.device.startswith("cuda:0 (") and "capped at 2048 MB" in r.device, r.device
    assert r.reference_backend.startswith("cuda: rms_norm F.rms_norm x"), r.reference_backend


@pytest.mark.parametrize("mark", [pytest.param(0, marks=CUDA)])
def test_a_huge_cuda_allocation_is_a_memory_limit_and_nothing_stays_allocated(tmp_path: Path, mark: int) -> None:
    from drill.judge.check import check_file

    f = tmp_path / "rmsnorm.py"
    f.write_text(GOOD.read_text().replace("def forward(self, x):", "def forward(self, x):\n"
                                          "        torch.empty(10**12, device='cuda')", 1))
    before = torch.cuda.mem_get_info()[0]
    r = check_file(f, "rmsnorm", seed=3, device="cuda")
    assert r.diagnosis is not None and r.diagnosis.id == "memory_limit", (r.diagnosis_detail, r.output_tail)
    assert torch.cuda.mem_get_info()[0] >= before - 2**30  # the child's memory went with it


def test_no_gpu_node_on_linux_answers_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA-only exercise on a Linux machine with no GPU device node is unavailable, torch never asked (a
    torch-free client expanding a folder pays no torch import for it); with a node, torch decides."""
    monkeypatch.delenv(devices.INTERPRET_ENV, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(devices, "GPU_NODES", ("/nonexistent/nvidiactl",))

    def asked() -> bool:
        raise AssertionError("torch was asked")

    monkeypatch.setattr(torch.cuda, "is_available", asked)
    assert devices.device_available(registry.entry("triton_rmsnorm")) is False
    assert devices.device_available(registry.entry("rmsnorm")) is True
    monkeypatch.setattr(devices, "GPU_NODES", ("/dev/null",))  # a node that exists: torch decides
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.device_available(registry.entry("triton_rmsnorm")) is True
