"""The sandbox's file-system view keeps what the child needs even when it lives under /tmp.

A clone in /tmp with its venv inside it (how CI was first run in this
project) had every sandboxed single run crash with "No module named torch":
the private /tmp was mounted over the read-only bind of the venv. Entered for
real here, in a subprocess, with a read-only folder under /tmp standing in
for such a venv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from drill.judge import sandbox

SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    from drill.judge import sandbox
    sys.path.insert(0, os.path.dirname(sandbox.__file__))
    import sandbox_child

    run = Path(tempfile.mkdtemp(prefix="drill-view-", dir="/tmp"))
    venv = run / "venv"
    venv.mkdir()
    (venv / "marker.txt").write_text("seen")
    for sub in ("newroot", "driver", "work"):
        (run / sub).mkdir()
    learner = run / "learner.py"
    learner.write_text("")
    spec = sandbox.spec(run / "newroot", run / "driver", run / "work", learner, 30.0)
    spec["ro"].append(str(venv))
    bound = sorted({p.split("/")[2] for p in spec["ro"] if p.startswith("/tmp/")})  # mount points under /tmp
    state = sandbox_child.enter(spec)
    if state.get("sandbox") == "off":
        print(json.dumps({"off": state.get("reason", "")}))
        sys.exit(0)
    try:
        open(venv / "new.txt", "w").close()
        venv_writable = True
    except OSError:
        venv_writable = False
    open("/tmp/scratch.txt", "w").close()
    print(json.dumps({"run": str(run), "marker": (venv / "marker.txt").read_text(), "venv_writable": venv_writable,
                      "tmp": sorted(os.listdir("/tmp")), "bound": bound}), flush=True)
""")


@pytest.mark.skipif(sandbox.mode()[0] != "namespaces", reason="no user namespaces here: the sandbox is off")
def test_a_read_only_folder_under_tmp_stays_visible_inside_the_sandbox() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(seen.get("run", "/nonexistent"), ignore_errors=True)
    assert "off" not in seen, seen
    assert seen["marker"] == "seen"  # bound on top of the private /tmp, not hidden by it
    assert not seen["venv_writable"]  # and still read-only
    # /tmp itself is private: the run's own file and the mount points of the binds under /tmp, nothing else
    assert sorted(seen["tmp"]) == sorted([*seen["bound"], "scratch.txt"]), seen


PROC_SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    from drill.judge import sandbox
    sys.path.insert(0, os.path.dirname(sandbox.__file__))
    import sandbox_child

    run = Path(tempfile.mkdtemp(prefix="drill-proc-", dir="/tmp"))
    for sub in ("newroot", "driver", "work"):
        (run / sub).mkdir()
    learner = run / "learner.py"
    learner.write_text("")
    state = sandbox_child.enter(sandbox.spec(run / "newroot", run / "driver", run / "work", learner, 30.0))
    if state.get("sandbox") == "off":
        print(json.dumps({"off": state.get("reason", "")}))
        sys.exit(0)
    opened = {}
    for path in ("/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"):
        try:  # opened for writing and closed at once: nothing is ever written
            os.close(os.open(path, os.O_WRONLY))
            opened[path] = "writable"
        except OSError as exc:
            opened[path] = exc.errno
    try:
        kcore = os.path.getsize("/proc/kcore")
    except OSError:
        kcore = -1
    print(json.dumps({"run": str(run), "opened": opened, "kcore": kcore,
                      "hostname": Path("/proc/sys/kernel/hostname").read_text().strip() != ""}), flush=True)
""")


@pytest.mark.skipif(sandbox.mode()[0] != "namespaces", reason="no user namespaces here: the sandbox is off")
def test_the_machine_wide_parts_of_proc_are_read_only_or_hidden_inside() -> None:
    out = subprocess.run([sys.executable, "-c", PROC_SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(seen.get("run", "/nonexistent"), ignore_errors=True)
    assert "off" not in seen, seen
    import errno

    assert all(v in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT) for v in seen["opened"].values()), seen
    assert seen["kcore"] in (0, -1) and seen["hostname"], seen  # still readable, never writable
