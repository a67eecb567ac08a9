"""The child's seccomp filter (drill/judge/seccomp.py): no new process, whatever the Python state (issue 30, §0).

Each test runs the filter in a fresh interpreter of its own (it cannot be
removed), which reports what the kernel did as JSON on stdout. Python's audit
hook is not installed there: what is refused is refused by the kernel alone.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

SECCOMP = Path(__file__).parents[1] / "drill" / "judge" / "seccomp.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"),
                                reason="the filter is written for Linux on x86_64 and aarch64")

PROBE = r'''
import importlib.util, json, os, subprocess, sys, threading
spec = importlib.util.spec_from_file_location("seccomp", sys.argv[1])
seccomp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seccomp)
import torch

go, seen = threading.Event(), {}
def earlier_thread():  # started before the filter: TSYNC must cover it
    go.wait()
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        seen["thread_fork"] = "ran"
    except OSError as exc:
        seen["thread_fork"] = exc.errno
t = threading.Thread(target=earlier_thread)
t.start()
seen["installed"] = seccomp.deny_process_creation()
go.set(); t.join()

def attempt(name, call):
    try:
        out = call()
        if out == 0:  # a fork that went through: the child leaves at once
            os._exit(0)
        seen[name] = "ran"
    except OSError as exc:
        seen[name] = exc.errno
attempt("fork", os.fork)
attempt("subprocess", lambda: subprocess.run(["true"]))
attempt("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
attempt("execv", lambda: os.execv(sys.executable, [sys.executable, "-c", "pass"]))
box = []
t = threading.Thread(target=lambda: box.append(float(torch.ones(4).sum())))
t.start(); t.join()
seen["thread"] = box
torch.set_num_threads(2)
seen["matmul"] = float((torch.ones(256, 256) @ torch.ones(256, 256))[0, 0])
print(json.dumps(seen))
'''


def test_every_way_to_start_a_process_is_refused_and_threads_still_work() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(SECCOMP)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["installed"] == {"seccomp": "on"}
    eperm = 1
    for name in ("fork", "subprocess", "posix_spawn", "execv", "thread_fork"):
        assert seen[name] == eperm, (name, seen)
    assert seen["thread"] == [4.0] and seen["matmul"] == 256.0


def test_the_program_refuses_other_abis_and_jumps_inside_itself() -> None:
    """Every jump lands on an instruction of the program, and it ends in a return on every path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("drill_seccomp_under_test", SECCOMP)
    seccomp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seccomp)
    for machine in ("x86_64", "aarch64"):
        prog = seccomp.program(machine)
        for i, (code, jt, jf, _k) in enumerate(prog):
            if code & 0x07 == 0x05:  # a conditional jump
                assert i + 1 + max(jt, jf) < len(prog)
        assert prog[-1][0] == 0x06  # ret
        assert prog[0] == (0x20, 0, 0, 4) and prog[2] == (0x06, 0, 0, 0x00050001)  # a foreign arch: EPERM
    with pytest.raises(KeyError):
        seccomp.program("riscv64")
