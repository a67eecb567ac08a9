"""Layer 3, child side: put the calling process into fresh Linux namespaces before learner code runs.

Standard library only (ctypes for unshare/mount/pivot_root/prctl/capset), no
torch, no drill: the grader's child loads this file by path from its driver
folder. One entry point, `enter(spec)`, called in a single-threaded process
(a fresh child before `import torch`, or a process just forked from a fork
server): it returns only in the *worker*, the process that then runs the
learner's code; the two processes above it stay in this file and wait.

    caller (P): unshare(user, mount, pid, net); map its own uid/gid;
                build a new root on a tmpfs (read-only binds of the system,
                Python and torch; the learner's file; the driver; the
                protocol folder read-write; one size-capped tmpfs for
                scratch, /tmp and /dev/shm); pivot_root; fork ->
    init (I):   PID 1 of the new PID namespace: mounts /proc, forks the
                worker, reaps everything, and when the worker ends leaves,
                which makes the kernel kill every process left in the
                namespace; P mirrors the worker's exit status.
    worker (W): drops every capability (bounding set, capset, no_new_privs),
                becomes non-dumpable, and returns to the caller.

Any failure before the worker exists is reported in the returned dict and
the caller continues without the sandbox (`{"sandbox": "off", "reason": ...}`):
the parent reports which layer was active, never claims one that was not.
A hard wall-clock kill (`spec["hard_timeout_s"]`) is enforced by P too, so a
stopped or killed grading process cannot leave the tree running.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER = 36
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
ST_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC} if hasattr(os, "ST_NOSUID") else {}

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int = 0) -> int:
    return libc().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL when the parent dies (and leave now if it is already gone)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(70)


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = libc().mount(
        src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
        ctypes.c_ulong(flags), data.encode() if data else None,
    )
    _check(rc, f"mount {src or fstype} on {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _locked_flags(path: str) -> int:
    """Flags of the mount holding `path` that a bind remount inside a user namespace must keep."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return sum(ms for st_flag, ms in ST_FLAGS.items() if st.f_flag & st_flag)


def _bind(src: str, dest: str, *, writable: bool = False) -> None:
    if os.path.isdir(src):
        os.makedirs(dest, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if not os.path.exists(dest):
            os.close(os.open(dest, os.O_WRONLY | os.O_CREAT, 0o600))
    _mount(src, dest, None, MS_BIND | MS_REC)
    if not writable:
        _mount(None, dest, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(src))


def _build_root(spec: dict) -> str:
    """A new root under a fresh tmpfs, laid out as `spec` says; returns its path (before pivot_root)."""
    root = spec["root"]  # a path that exists in the old root (the parent's run folder); mounted over
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount("drill-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    # One size-capped tmpfs for everything writable: scratch (the cwd), /tmp and /dev/shm. Mounted before
    # the read-only binds, so a Python or venv that lives under /tmp (a CI clone) is bound on top of the
    # private /tmp instead of being hidden by it (the child then could not import torch).
    scratch = root + "/sandbox/tmpfs"
    os.makedirs(scratch, exist_ok=True)
    _mount("drill-scratch", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(spec['tmpfs_bytes'])},mode=1777")
    for sub in ("scratch", "tmp", "shm"):
        os.makedirs(f"{scratch}/{sub}", mode=0o1777, exist_ok=True)
        os.chmod(f"{scratch}/{sub}", 0o1777)
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount(f"{scratch}/tmp", root + "/tmp", None, MS_BIND)
    for path in spec["ro"]:
        if not os.path.exists(path):
            continue
        dest = root + path
        if os.path.islink(path):  # merged-/usr systems: /bin -> usr/bin; keep the link
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not os.path.lexists(dest):
                os.symlink(os.readlink(path), dest)
            continue
        _bind(path, dest)
    for inside, outside in spec.get("files", {}).items():  # the learner's file, read-only
        _bind(outside, root + inside)
    for inside, outside in spec.get("ro_dirs", {}).items():  # the driver (this file and its siblings)
        _bind(outside, root + inside)
    for inside, outside in spec.get("rw", {}).items():  # the protocol folder
        _bind(outside, root + inside, writable=True)
    for path in spec.get("hide", []):  # drill's own package, wherever a read-only bind exposed it
        if os.path.isdir(root + path):
            _mount("drill-hidden", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    os.makedirs(root + "/dev/shm", exist_ok=True)
    for dev in ("null", "zero", "full", "random", "urandom"):
        _bind(f"/dev/{dev}", f"{root}/dev/{dev}", writable=True)
    if spec.get("gpu"):
        _gpu_view(root)
    _mount(f"{scratch}/shm", root + "/dev/shm", None, MS_BIND)
    os.makedirs(root + "/proc", exist_ok=True)
    return root


# The parts of a fresh /proc that still reach the whole machine, as container runtimes treat them: the
# namespace's own proc shows the host's sysctls, and a worker whose uid is root's (mapped, no capabilities)
# could write them (kernel/core_pattern, vm/drop_caches, kernel/hostname). Read-only: these folders and
# files; hidden (an empty file or folder over them): kernel memory, keyrings and timer/scheduler internals.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_HIDDEN = ("kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms", "kmsg",
               "acpi", "scsi", "asound")


def _mask_proc(proc: str) -> None:
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC  # proc's own flags, locked in a user namespace: kept on remount
    for name in PROC_READ_ONLY:
        path = f"{proc}/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
    for name in PROC_HIDDEN:
        path = f"{proc}/{name}"
        if os.path.isdir(path):
            _mount("drill-masked", path, "tmpfs", MS_RDONLY | flags, "size=4k,mode=0555")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)


def _gpu_view(root: str) -> None:
    """What a CUDA process needs inside the view (a check on CUDA only; untestable without a GPU, keep it small).

    - the NVIDIA device nodes (/dev/nvidiactl, /dev/nvidia0.., /dev/nvidia-uvm, /dev/nvidia-caps/): bound from
      the host's /dev, so they stay usable device files (a node made on our nodev tmpfs would not be), and
      writable, since CUDA opens them read-write; they give access to the GPU and nothing else;
    - /sys, because the driver reads /sys/module/nvidia and /sys/bus/pci/devices at cuInit: a fresh sysfs,
      read-only, which has none of the host's sub-mounts (cgroup, debugfs, bpf, securityfs); the kernel allows
      it in our user namespace as we own a network namespace (a bind of the host's /sys would need MS_REC in a
      user namespace, and bring those sub-mounts along writable);
    - /proc/driver/nvidia comes with the namespace's own /proc.
    The driver's libraries are under the read-only system roots or in `sandbox.gpu_library_dirs()`.
    """
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia"):
            _bind(f"/dev/{name}", f"{root}/dev/{name}", writable=True)
    os.makedirs(root + "/sys", exist_ok=True)
    _mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _pivot(root: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {platform.machine()}")
    old = root + "/.old"
    os.makedirs(old, exist_ok=True)
    _check(libc().syscall(ctypes.c_long(number), root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _check(libc().umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges() -> None:
    """No capabilities now or after any execve, no privilege gain, not dumpable (no ptrace, no /proc/pid/mem)."""
    for cap in range(64):
        if prctl(PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    prctl(PR_SET_NO_NEW_PRIVS, 1)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    libc().capset(ctypes.byref(header), data)
    prctl(PR_SET_DUMPABLE, 0)


def _mirror(status: int, *, decode_init: bool = False) -> None:
    """Leave with the same exit status as a waited-for process (its signal re-raised on ourselves).

    A namespace's PID 1 cannot die of its own default-action signal, so init
    exits with 128 + signal instead; the supervisor (`decode_init`) turns that
    back into the signal, which is what the parent reads (SIGXCPU -> cpu_limit).
    """
    if decode_init and os.WIFEXITED(status) and 128 < os.WEXITSTATUS(status) < 128 + 65:
        sig = os.WEXITSTATUS(status) - 128
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


def _init(worker: int) -> None:
    """PID 1 of the namespace: reap everything; when the worker ends, leave with its status (killing the rest)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(70)
        except InterruptedError:
            continue
        if pid == worker:
            _mirror(status)


def _supervise(child: int, hard_timeout_s: float) -> None:
    """P: wait for the namespace's init, killing it at the hard deadline; mirror its status."""
    import select

    deadline = time.monotonic() + hard_timeout_s
    try:  # woken the moment init exits (a 50 ms poll here added ~25 ms to every run)
        fd = os.pidfd_open(child)
    except (AttributeError, OSError):
        fd = None
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            _mirror(status, decode_init=True)
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            _, status = os.waitpid(child, 0)
            _mirror(status, decode_init=True)
        if fd is None:
            time.sleep(0.05)
        else:
            select.select([fd], [], [], min(1.0, max(0.0, deadline - time.monotonic())))


def enter(spec: dict) -> dict:
    """Enter the sandbox described by `spec`; returns (in the worker only) what is active.

    On any failure before namespaces exist, returns {"sandbox": "off", "reason": ...}
    in the calling process itself, which then runs the job without them.
    """
    global _libc
    uid, gid = os.getuid(), os.getgid()
    try:
        _check(libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare")
    except OSError as exc:
        return {"sandbox": "off", "reason": str(exc)}
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        return {"sandbox": "off", "reason": f"could not map the user: {exc}", "fatal": True}
    init = os.fork()
    if init != 0:
        _supervise(init, float(spec.get("hard_timeout_s", 3600)))
    # init: PID 1 of the new PID namespace. /proc is mounted before the old root goes away
    # (the kernel allows a new proc only where a full one is still visible), then pivot_root.
    die_with_parent()
    try:
        root = _build_root(spec)
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mask_proc(root + "/proc")
        _pivot(root)
    except OSError as exc:
        os.write(2, f"drill sandbox: could not build the read-only view: {exc}\n".encode())
        os._exit(71)
    worker = os.fork()
    if worker != 0:
        _init(worker)
    die_with_parent()
    os.setsid()
    drop_privileges()
    os.chdir(spec.get("cwd", "/sandbox/tmpfs/scratch"))
    _libc = None  # no ctypes function of ours (syscall, mount) stays reachable once the learner's code runs
    return {"sandbox": "namespaces", "user": True, "pid": True, "mount": True, "net": True, "fs": "read-only"}


def enter_or_leave(spec: dict) -> dict:
    """`enter`, but a half-built sandbox (the user namespace made, its mapping refused) ends the process at once
    with status 71 and the reason on stderr: running on in that state is neither sandboxed nor plain."""
    active = enter(spec)
    if active.get("fatal"):
        os.write(2, f"drill sandbox: {active.get('reason')}\n".encode())
        os._exit(71)
    return active
