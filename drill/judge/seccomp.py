"""Layer 2, below Python: the graded process cannot create processes, whatever its Python state (Linux).

Standard library only (ctypes for one `seccomp(2)` call), loaded by path from
the child's driver folder like its siblings. The audit hook and the wrappers
of `_guard_native` refuse process creation in Python; a file that switched
the hook off for its thread (issue 30: through the driver's globals, or a
ctypes function looked up before the hook, which raises no audit event)
could still fork and exec a fresh interpreter with no traps at all. This
filter is the kernel's answer to every such path: after it, `execve`,
`execveat`, `fork`, `vfork` and a `clone` without `CLONE_THREAD` fail with
EPERM in every thread of the process and in anything it could start.

What stays allowed: threads (`clone` with `CLONE_THREAD`: torch's pools,
`threading`), and everything else. `clone3` passes its flags in memory, which
a classic filter cannot read, so it answers ENOSYS, as container runtimes do;
glibc then makes its threads with `clone`. A syscall of another ABI (x32,
i386 on x86_64) is refused outright: nothing the child runs uses one.

Installed after the child's set-up, before the learner's file is imported,
with `SECCOMP_FILTER_FLAG_TSYNC` so that threads started earlier are covered
too, and before the audit hook (which refuses ctypes). The CDLL handle it
uses is local: nothing reachable afterwards holds a ctypes function.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

# struct sock_filter opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000
_SET_MODE_FILTER, _FLAG_TSYNC = 1, 1
_PR_SET_NO_NEW_PRIVS = 38

# arch: (AUDIT_ARCH_*, seccomp's own number, refused calls, clone, clone3)
_ARCHES = {
    "x86_64": (0xC000003E, 317, {"execve": 59, "execveat": 322, "fork": 57, "vfork": 58}, 56, 435),
    "aarch64": (0xC00000B7, 277, {"execve": 221, "execveat": 281}, 220, 435),
}


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for `machine` (platform.machine()); KeyError elsewhere."""
    audit_arch, _nr, refused, clone, clone3 = _ARCHES[machine]
    deny = _ERRNO | _EPERM
    body: list[tuple[int, int, int, int]] = []
    for nr in sorted(refused.values()):
        body.append((_JEQ_K, 0, 1, nr))
        body.append((_RET_K, 0, 0, deny))
    body += [
        (_JEQ_K, 0, 1, clone3), (_RET_K, 0, 0, _ERRNO | _ENOSYS),
        (_JEQ_K, 0, 3, clone),
        (_LD_W_ABS, 0, 0, 16),  # args[0], its low 32 bits (little-endian): clone's flags
        (_JSET_K, 1, 0, _CLONE_THREAD),
        (_RET_K, 0, 0, deny),
        (_RET_K, 0, 0, _ALLOW),
    ]
    return [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, audit_arch),
        (_RET_K, 0, 0, deny),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_JGE_K, 0, 1, _X32_BIT),
        (_RET_K, 0, 0, deny),
        *body,
    ]


def deny_process_creation() -> dict:
    """Install the filter on this process; {"seccomp": "on"} or {"seccomp": "off", "reason": ...}."""
    machine = platform.machine()
    if not sys.platform.startswith("linux"):
        return {"seccomp": "off", "reason": f"no seccomp on {sys.platform}"}
    if machine not in _ARCHES or sys.byteorder != "little":  # the filter reads clone's flags as the low word
        return {"seccomp": "off", "reason": f"no filter written for {machine}"}
    instructions = program(machine)
    code = b"".join(struct.pack("=HBBI", *ins) for ins in instructions)
    buf = ctypes.create_string_buffer(code, len(code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(instructions), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        return {"seccomp": "off", "reason": f"no_new_privs refused ({os.strerror(ctypes.get_errno())})"}
    rc = libc.syscall(ctypes.c_long(_ARCHES[machine][1]), ctypes.c_uint(_SET_MODE_FILTER),
                      ctypes.c_uint(_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        err = ctypes.get_errno()
        why = os.strerror(err) if rc < 0 else f"thread {rc} could not be synchronised"
        return {"seccomp": "off", "reason": f"the kernel refused the filter ({why})"}
    return {"seccomp": "on"}
