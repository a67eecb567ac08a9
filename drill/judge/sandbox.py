"""Layer 3, parent side: whether the OS sandbox can be used here, and the view of the file system it builds.

The child enters it (`sandbox_child.enter`, stdlib only); this module only
decides and describes, so it imports no torch:

- `mode()`: "namespaces" when Linux lets this user create user, PID, mount
  and network namespaces (probed once per process by a forked child that
  really calls unshare), else "off" with the reason. `DRILL_SANDBOX=off`
  forces the fallback (tests, or a machine where the probe lies).
- `spec(...)`: what the child mounts: the system and Python read-only, the
  learner's file read-only at /sandbox/learner/<name>, the driver at
  /sandbox/driver, the protocol folder read-write at /sandbox/work, one
  size-capped tmpfs for scratch, /tmp and /dev/shm; drill's own package
  folders hidden wherever a bind exposes them. Nothing else exists inside:
  no home folder, no DRILL_HOME, no /proc of the grading process.
- `harden_parent()`: the grading process itself is non-dumpable (no
  /proc/<pid>/mem, environ or ptrace for same-user processes) and a child
  subreaper (orphans of a run come back to it and are killed).
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any

ENV = "DRILL_SANDBOX"
TMPFS_BYTES = 256 * 2**20  # scratch + /tmp + /dev/shm together, per run
INSIDE_DRIVER = "/sandbox/driver"
INSIDE_WORK = "/sandbox/work"
INSIDE_SCRATCH = "/sandbox/tmpfs/scratch"
_PROBED: dict[str, str] = {}
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36


def mode() -> tuple[str, str]:
    """("namespaces", "") or ("off", why); cached after the first probe."""
    if os.environ.get(ENV, "").strip().lower() in ("off", "0", "no", "false"):
        return "off", f"{ENV}=off"
    if not sys.platform.startswith("linux"):
        return "off", f"no namespaces on {sys.platform}"
    if "mode" not in _PROBED:
        _PROBED["mode"], _PROBED["why"] = _probe()
    return _PROBED["mode"], _PROBED["why"]


def _probe() -> tuple[str, str]:
    try:
        if int(Path("/proc/sys/user/max_user_namespaces").read_text().strip() or "0") == 0:
            return "off", "user namespaces are disabled (user.max_user_namespaces = 0)"
    except (OSError, ValueError):
        pass
    try:
        if Path("/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "0" and os.geteuid() != 0:
            return "off", "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
    except OSError:
        pass
    flags = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000  # user | mount | pid | net
    pid = os.fork()
    if pid == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            os._exit(0 if libc.unshare(flags) == 0 else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "off", "this system refuses unprivileged user/mount/PID/network namespaces"
    return "namespaces", ""


def harden_parent() -> dict[str, bool]:
    """Non-dumpable and child subreaper (Linux); returns what took effect."""
    done = {"non_dumpable": False, "subreaper": False}
    if not sys.platform.startswith("linux"):
        return done
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done["non_dumpable"] = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
        done["subreaper"] = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except OSError:
        pass
    return done


def site_paths() -> list[str]:
    """Folders the child needs on sys.path for torch, numpy and einops (site-packages only, never drill's tree)."""
    out = []
    for p in sys.path:
        if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p) and p not in out:
            out.append(p)
    return out


def hidden_dirs() -> list[str]:
    """drill's own package folders (and the reference's), as real paths: never readable by the child."""
    import drill

    dirs = {os.path.realpath(os.path.dirname(drill.__file__))}
    try:
        import importlib.util

        found = importlib.util.find_spec("drill.reference")
        for loc in (found.submodule_search_locations or []) if found else []:
            dirs.add(os.path.realpath(loc))
    except (ImportError, ValueError):
        pass
    return sorted(dirs)


def _read_only_roots(paths: list[str]) -> list[str]:
    """The system folders, Python's prefixes and the site folders; nested entries dropped."""
    want = ["/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin", "/etc", "/opt"]
    exe = os.path.realpath(sys.executable)
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(exe)), *paths):
        p = os.path.realpath(p)
        if p not in want:
            want.append(p)
    keep: list[str] = []
    for p in sorted(want, key=len):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in keep if not os.path.islink(k)):
            keep.append(p)
    return keep


def gpu_library_dirs() -> list[str]:
    """Folders outside the system roots that a CUDA process may load its driver from: LD_LIBRARY_PATH's entries
    and the usual driver mounts of containers. Read-only binds; those under /usr, /lib, /opt are bound anyway."""
    found = []
    for p in [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), "/usr/local/nvidia", "/run/nvidia/driver"]:
        if p and os.path.isabs(p) and os.path.isdir(p):
            found.append(os.path.realpath(p))
    return found


def spec(root: Path, driver: Path | None, work: Path, learner_copy: Path, hard_timeout_s: float, *,
         gpu: bool = False, show_drill: bool = False) -> dict[str, Any]:
    """The child's mount plan (see sandbox_child.enter). `root` is an empty folder of the run's own.

    `gpu` (a check on CUDA): the driver's library folders are bound read-only too, and the child mounts
    the GPU's device nodes and /sys (read-only, without its sub-mounts): CUDA's initialisation fails with
    CUDA_ERROR_OPERATING_SYSTEM when /sys is missing. Untested on CPU machines: a small path, reviewed.

    `show_drill` (drill bench's child, `driver` None): drill's own folders are bound read-only at their
    own paths instead of hidden, because that child is drill's code (the benchmark and the reference), run
    from the source tree, and imports them before the learner's file; then it drops them from
    `sys.modules` and traps `import drill`, as the check's child never has them.
    """
    inside_learner = f"/sandbox/learner/{learner_copy.name}"
    drill_dirs = hidden_dirs()
    return {
        "root": str(root),
        "ro": _read_only_roots(site_paths() + (gpu_library_dirs() if gpu else [])) + (drill_dirs if show_drill else []),
        "gpu": bool(gpu),
        "files": {inside_learner: str(learner_copy)},
        "rw": {INSIDE_WORK: str(work)},
        "ro_dirs": {INSIDE_DRIVER: str(driver)} if driver is not None else {},
        "hide": [] if show_drill else drill_dirs,
        "tmpfs_bytes": TMPFS_BYTES,
        "hard_timeout_s": hard_timeout_s,
        "driver_inside": INSIDE_DRIVER,
        "cwd": INSIDE_SCRATCH,
        "inside": {"work": INSIDE_WORK, "learner": inside_learner, "scratch": INSIDE_SCRATCH},
    }
