"""Hostile or broken learner files end in an honest failure, quickly, leaving nothing behind (issue 13).

One fixture per attack class in tests/fixtures/tamper/ (each an attention.py
attempt, or `<exercise>__name.py` for another exercise). Every file is graded twice on a fork server (pool.ChildPool):
with the static policy (layer 1) on, as `drill check` does, and with it off,
so the layers below it (forbidden kernels and the audit hook in the child,
the OS sandbox, the parent's boundary) must hold on their own. Each run must
fail within its limit plus start-up, leave no process carrying a marker, and
leave the progress store untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import drill
from drill.judge import sandbox
from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits

TAMPER = Path(__file__).parent / "fixtures" / "tamper"
BASE = dict(timeout_s=20.0, cpu_s=20.0, memory_mb=2048)
ANY = None  # any honest failure
STOPPED = {"policy_violation", "crashed", "exception"}  # refused at run time, or could not get going

# file -> (diagnosis with the policy on, diagnosis(es) with it off, limit overrides)
CASES: dict[str, tuple] = {
    "exit_early": ("policy_violation", "crashed", {}),
    "system_exit": ("policy_violation", "crashed", {}),
    "forge_results": ("policy_violation", "crashed", {}),
    "monkeypatch_allclose": ("policy_violation", ANY, {}),
    "fake_verdict": ("policy_violation", ANY, {}),
    "infinite_loop": ("cpu_limit", "cpu_limit", {"cpu_s": 5.0, "timeout_s": 40.0}),
    # `import time` is allowed: a sleep spends only the limit
    "sleeps": ("time_limit", "time_limit", {"timeout_s": 3.0}),
    "leaves_child": ("policy_violation", {"policy_violation", "crashed"}, {}),
    "setsid_grandchild": ("policy_violation", {"policy_violation", "crashed"}, {}),
    # torch 2.11's CUDA build needs ~800 MB to import
    "memory_bomb": ("memory_limit", "memory_limit", {"memory_mb": 1536}),
    "wrong_type": ("wrong_type", "wrong_type", {}),
    "aten_kernel": ("policy_violation", "forbidden_op", {}),
    "import_drill": ("policy_violation", {"policy_violation", "forbidden_op", "exception"}, {}),
    "swallow_forbidden": ("forbidden_op", "forbidden_op", {}),
    # forbidden op hidden from the Python traps
    "jit_script_sdpa": ("policy_violation", "forbidden_op", {}),
    "thread_sdpa": ("policy_violation", "forbidden_op", {}),
    "disable_torch_function": ("policy_violation", "forbidden_op", {}),
    "pop_modes": ("policy_violation", "forbidden_op", {}),
    "patch_fnmatch": ("policy_violation", "forbidden_op", {}),
    # the answer computed elsewhere
    "reference_by_path": ("policy_violation", STOPPED | {"time_limit"}, {}),  # its search may run out of time
    "subprocess_empty_env": ("policy_violation", STOPPED, {}),
    # reaching the judge, the store, the terminal
    "proc_environ_store": ("policy_violation", {"policy_violation", "exception"}, {}),
    "ansi_message": ("exception", "exception", {}),
    "deep_json_status": ("policy_violation", {"crashed", "policy_violation"}, {}),
    "forge_status": ("policy_violation", {"crashed", "policy_violation"}, {}),
    "delete_status_sleep": ("policy_violation", {"time_limit", "policy_violation"}, {"timeout_s": 3.0}),
    "shm_fill": ("policy_violation", STOPPED | {"memory_limit", "output_limit"}, {}),
    "disk_fill": ("policy_violation", STOPPED | {"output_limit"}, {}),
    "signal_drill": ("policy_violation", {"policy_violation", "crashed"}, {}),
    "empty_env_helper": ("policy_violation", {"policy_violation", "crashed"}, {}),
    # red team (issue 13): each of these got an undeserved PASS, a traceback or a changed store before its fix
    "private_module_sys": ("policy_violation", "policy_violation", {}),  # full stack: real SDPA passed
    "builtins_alias_exec": ("policy_violation", "policy_violation", {}),
    "frames_kernel_library": ("policy_violation", "policy_violation", {}),
    "fake_filename_frames": ("policy_violation", "forbidden_op", {}),  # frames reached, kernels still blocked
    "flex_attention": ("forbidden_op", "forbidden_op", {}),
    "odd_outputs": ("wrong_type", "wrong_type", {}),
    "zip_bomb_output": ("policy_violation", "crashed", {}),
    # issue 30: torch changed for the grader's own code, through aliases the policy cannot follow: the child's
    # integrity check (drill/judge/integrity.py) stops the run, policy on or off
    "rewrite_torch_at_import": ("policy_violation", "policy_violation", {}),
    "rewrite_tensor_method_in_call": ("policy_violation", "policy_violation", {}),
    "native_writers_store": ("policy_violation", {"policy_violation", "exception"}, {}),  # no store in the sandbox
    "posix_spawn_store": ("policy_violation", "policy_violation", {}),
    "pidfd_stop_parent": ("policy_violation", "policy_violation", {}),
    "prlimit_parent": ("policy_violation", "policy_violation", {}),
    "scratch_fill": ("policy_violation", STOPPED | {"output_limit"}, {}),
    "mha__nested_native": ("policy_violation", "forbidden_op", {}),  # nested-tensor kernels were not blocked
    # passed with the policy off while only CPU/composite kernels were replaced (vmap decomposes above them)
    "rmsnorm__vmap_decomposition": ("policy_violation", "forbidden_op", {}),
    # issue 30 §0: the audit hook off for its thread, a fork + exec of a fresh Python computed SDPA and its
    # gradients (an undeserved pass with the policy off); the child's seccomp filter refuses the fork
    "fresh_interpreter": ("policy_violation", "exception", {}),
    # issue 30 §2: an answer that is a tensor subclass (a lazy one computes outside the measured call)
    "lazy_subclass_output": ("wrong_type", "wrong_type", {}),
}

# Attacks on what the sandbox would otherwise contain, graded with DRILL_SANDBOX=off and the policy off, so
# layers 2 and 4 (and the runner's polling) hold them alone: file -> diagnosis.
WITHOUT_SANDBOX = {
    "native_writers_store": "policy_violation",
    "posix_spawn_store": "policy_violation",
    "pidfd_stop_parent": "policy_violation",
    "prlimit_parent": "policy_violation",
    "scratch_fill": "output_limit",
    "zip_bomb_output": "crashed",
    "frames_kernel_library": "policy_violation",
    "fresh_interpreter": "exception",  # EPERM from the kernel: seccomp needs no namespace
}


# This session's own marker: the attacks that start processes or write /dev/shm name them after it
# (`_graded_copy`), so a test counts only what it started itself, never another run's attack on a shared
# machine (whose processes are visible here while that run lasts).
MARKER = f"drill-tamper-marker-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _marked_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if MARKER.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _graded_copy(name: str, folder: Path) -> Path:
    """The fixture as graded: a copy in the test's folder, with this session's marker, the folder an attack
    searches for stores (STORES) set to the test's own folder (never /tmp: on a long-lived machine it held 143k
    files and a walk of it ran out of time), and the search for drill's source bounded to drill's package."""
    text = (TAMPER / f"{name}.py").read_text()
    text = text.replace("drill-tamper-marker", MARKER)
    text = text.replace('STORES = "/nonexistent/drill-tamper-stores"', f"STORES = {str(folder)!r}")
    text = text.replace("CHECKOUT: list = []", f"CHECKOUT: list = [{str(Path(drill.__file__).parent)!r}]")
    dest = folder / "graded" / f"{name}.py"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(text)
    return dest


@pytest.fixture(scope="module")
def pool():
    with ChildPool() as p:
        yield p


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DRILL_HOME with a progress.db sentinel, visible in this (grading) process's environment."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "progress.db").write_bytes(b"sentinel")
    monkeypatch.setenv("DRILL_HOME", str(home))
    return home


def test_every_tamper_fixture_has_a_case() -> None:
    assert {p.stem for p in TAMPER.glob("*.py")} == set(CASES)


def _exercise(name: str) -> str:
    """Each fixture is an attention.py attempt, unless its name starts with another exercise (`mha__...`)."""
    return name.split("__")[0] if "__" in name else "attention"


def _accepts(want, got: str) -> bool:
    if want is ANY:
        return True
    return got in want if isinstance(want, set) else got == want


@pytest.mark.slow
@pytest.mark.parametrize("policy", [True, False], ids=["policy_on", "policy_off"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_tampering_fails_honestly(name: str, policy: bool, pool: ChildPool, store: Path) -> None:
    with_policy, without, overrides = CASES[name]
    limits = Limits(**{**BASE, **overrides})
    graded = _graded_copy(name, store.parent)
    t0 = time.monotonic()
    result = check_file(graded, _exercise(name), seed=7, limits=limits, pool=pool, policy=policy)
    elapsed = time.monotonic() - t0
    assert result.status in ("fail", "error"), f"{name} must never pass: {result.layers}"
    assert result.diagnosis is not None
    assert _accepts(with_policy if policy else without, result.diagnosis.id), (result.diagnosis.id,
                                                                               result.diagnosis_detail)
    assert elapsed < min(limits.timeout_s, limits.cpu_s) + 45
    assert _marked_processes() == [], "a learner-started process survived the grader"
    assert (store / "progress.db").read_bytes() == b"sentinel" and os.listdir(store) == ["progress.db"]
    assert not Path(f"/dev/shm/{MARKER}-shm").exists()
    text = json.dumps(result.to_json())
    assert "\x1b" not in text and "\x1b" not in result.diagnosis_detail


@pytest.fixture(scope="module")
def bare_pool():
    """The fork server for the runs without the namespace sandbox (each test sets DRILL_SANDBOX=off itself):
    its own, so an attack on the fork server that slipped through cannot reach the pool the other tests use."""
    with ChildPool() as p:
        yield p


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WITHOUT_SANDBOX))
def test_layers_below_the_policy_hold_without_the_sandbox(name: str, bare_pool: ChildPool, store: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_SANDBOX", "off")
    limits = Limits(**BASE)
    t0 = time.monotonic()
    result = check_file(_graded_copy(name, store.parent), "attention", seed=7, limits=limits, pool=bare_pool,
                        policy=False)
    assert result.layers["sandbox"].startswith("off")
    assert result.status in ("fail", "error") and result.diagnosis.id == WITHOUT_SANDBOX[name], (
        result.diagnosis.id, result.diagnosis_detail)
    assert time.monotonic() - t0 < limits.timeout_s + 45
    assert _marked_processes() == []
    assert (store / "progress.db").read_bytes() == b"sentinel" and os.listdir(store) == ["progress.db"]


def test_forbidden_op_report_names_op_and_line(pool: ChildPool) -> None:
    result = check_file(TAMPER / "swallow_forbidden.py", "attention", seed=3, limits=Limits(**BASE), pool=pool)
    assert "scaled_dot_product_attention" in result.diagnosis_detail
    assert "line 17" in result.diagnosis_detail


def test_threaded_forbidden_op_is_caught_below_python(pool: ChildPool) -> None:
    """The kernel-level block (layer 2) catches what the thread-local modes cannot see, naming the aten op."""
    result = check_file(TAMPER / "thread_sdpa.py", "attention", seed=3, limits=Limits(**BASE), pool=pool, policy=False)
    assert result.diagnosis.id == "forbidden_op"
    assert "scaled_dot_product" in result.diagnosis_detail
    assert "aten ops blocked" in result.layers["kernels"]


def test_policy_violation_quotes_file_line_and_what_is_allowed(pool: ChildPool) -> None:
    result = check_file(TAMPER / "thread_sdpa.py", "attention", seed=3, limits=Limits(**BASE), pool=pool)
    assert result.diagnosis.id == "policy_violation" and result.status == "fail"
    assert "thread_sdpa.py:15: `import threading` is not allowed" in result.diagnosis_detail
    assert "allowed: imports of torch" in result.diagnosis_detail
    assert result.layers["kernels"] == "not run"  # refused before anything ran


def test_escape_codes_never_reach_the_terminal(pool: ChildPool) -> None:
    from rich.console import Console

    from drill.judge.report import render

    result = check_file(TAMPER / "ansi_message.py", "attention", seed=3, limits=Limits(**BASE), pool=pool)
    console = Console(record=True, width=200, force_terminal=True, color_system=None)
    render(result, console, verbose=True)
    shown = console.export_text()
    assert "\\x1b[2J" in result.diagnosis_detail  # shown escaped, not interpreted
    assert "\x1b[2J" not in shown and "\x07" not in shown and "\r" not in result.diagnosis_detail
    assert all(len(t.message) <= 2100 for t in result.tests)  # length-capped


@pytest.mark.skipif(sandbox.mode()[0] != "namespaces", reason=f"no namespace sandbox here: {sandbox.mode()[1]}")
def test_sandbox_is_active_and_reported(pool: ChildPool) -> None:
    good = Path(__file__).parent / "fixtures" / "solutions" / "attention" / "good_matmul_softmax.py"
    result = check_file(good, "attention", seed=3, limits=Limits(**BASE), pool=pool)
    assert result.status == "pass"
    assert result.layers["sandbox"].startswith("namespaces")
    assert result.to_json()["layers"]["sandbox"].startswith("namespaces")
    assert "seccomp (no new process)" in result.layers["kernels"]


def test_fallback_without_namespaces_still_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """DRILL_SANDBOX=off forces the fallback: a correct file passes, attacks still fail, the JSON says so."""
    monkeypatch.setenv("DRILL_SANDBOX", "off")
    assert sandbox.mode() == ("off", "DRILL_SANDBOX=off")
    good = Path(__file__).parent / "fixtures" / "solutions" / "attention" / "good_matmul_softmax.py"
    with ChildPool() as pool:
        ok = check_file(good, "attention", seed=3, limits=Limits(**BASE), pool=pool)
        thread = check_file(TAMPER / "thread_sdpa.py", "attention", seed=3, limits=Limits(**BASE), pool=pool,
                            policy=False)
        helper = check_file(_graded_copy("empty_env_helper", tmp_path), "attention", seed=3, limits=Limits(**BASE),
                            pool=pool,
                            policy=False)
    assert ok.status == "pass" and ok.layers["sandbox"].startswith("off: DRILL_SANDBOX=off")
    assert thread.diagnosis.id == "forbidden_op"
    assert helper.status != "pass" and _marked_processes() == []


def test_single_run_child_without_a_pool_is_sandboxed_too() -> None:
    good = Path(__file__).parent / "fixtures" / "solutions" / "rmsnorm" / "good_rsqrt.py"
    result = check_file(good, "rmsnorm", seed=3, limits=Limits(**BASE))
    assert result.status == "pass", result.diagnosis_detail
    assert result.layers["sandbox"].startswith(sandbox.mode()[0])
    assert "seccomp (no new process)" in result.layers["kernels"]


def _descendants(pid: int) -> set[int]:
    out, stack = set(), [pid]
    while stack:
        p = stack.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids = {int(x) for x in fh.read().split()}
                stack += list(kids - out)
                out |= kids
        except OSError:
            continue
    return out


@pytest.mark.slow
def test_nothing_of_the_child_outlives_a_killed_drill(tmp_path: Path) -> None:
    """SIGKILL to drill itself: every process of the run dies with it (parent-death signal, PID namespace)."""
    target = tmp_path / "attention.py"
    target.write_text((TAMPER / "infinite_loop.py").read_text())
    env = {**os.environ, "DRILL_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "drill.cli", "check", str(target), "--timeout", "60"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    kids: set[int] = set()
    while time.monotonic() < deadline and len(kids) < 3:  # the child, its namespace's init, the worker
        time.sleep(0.5)
        kids = _descendants(proc.pid)
    assert kids, "drill started no child"
    time.sleep(1.0)
    kids = _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2.0)
    alive = [p for p in kids if Path(f"/proc/{p}").exists()
             and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]]
    assert alive == [], f"processes of the run outlived drill: {alive}"
