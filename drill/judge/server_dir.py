"""Where a user's grading server lives, who may talk to it, and which drill it belongs to (no torch).

- The folder: `$XDG_RUNTIME_DIR/drill` (per user, tmpfs, cleared at logout),
  else `<data dir>/run` (the progress store's folder: `$DRILL_HOME/run` when
  DRILL_HOME is set, so a test's private DRILL_HOME gets a private server).
  It must be a real directory owned by this user with no group/other
  permissions (0700); anything else is refused with the reason, and the
  check grades in-process.
- The key: one server per (Python interpreter, drill install, grading-relevant
  environment). Two venvs, or two checkouts of drill, never share a server;
  a new terminal of the same user does. What the environment contributes is
  only what can change a verdict or the sandbox (DRILL_SANDBOX, CUDA device
  selection, torch/OpenMP settings, the dynamic loader), never TERM or PWD.
- The fingerprint: drill's version and the size and mtime of every Python
  file of drill and of the reference, plus torch's version file. The client
  sends it with every request; a server started from other files answers
  "stale" and leaves, and the client starts a fresh one.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV_OFF = "DRILL_NO_SERVER"
ENV_IDLE = "DRILL_SERVER_IDLE_MIN"
DEFAULT_IDLE_MIN = 15.0
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux, 104 on macOS
_KEY_ENV_PREFIXES = ("DRILL_", "CUDA_", "PYTORCH_", "TORCH_", "OMP_", "MKL_", "LD_")
_KEY_ENV_SKIP = {"DRILL_HOME", ENV_OFF, ENV_IDLE}


def disabled() -> bool:
    """DRILL_NO_SERVER set to anything but "", 0, no or false: grade in-process, as before the server."""
    return os.environ.get(ENV_OFF, "").strip().lower() not in ("", "0", "no", "false")


def idle_minutes() -> float:
    """The idle period after which an auto-started server leaves (DRILL_SERVER_IDLE_MIN, default 15)."""
    try:
        value = float(os.environ.get(ENV_IDLE, ""))
    except ValueError:
        return DEFAULT_IDLE_MIN
    return value if 0 < value <= 24 * 60 else DEFAULT_IDLE_MIN


@dataclass(frozen=True)
class Place:
    folder: Path
    key: str

    @property
    def socket(self) -> Path:
        return self.folder / f"server-{self.key}.sock"

    @property
    def lock(self) -> Path:
        return self.folder / f"server-{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.folder / f"server-{self.key}.log"


def base_folder() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "drill"
    from drill.paths import data_home

    return data_home() / "run"


def place() -> Place:
    """The server's folder and key for this process's interpreter, drill and environment."""
    folder = base_folder()
    key = _key()
    if len(str(folder / f"server-{key}.sock").encode()) > SOCKET_PATH_MAX:
        # A deep runtime or data dir (a test's tmp folder): a short private folder of the same identity.
        digest = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir()) / f"drill-{os.geteuid()}-{digest}"
    return Place(folder, key)


def _key() -> str:
    import drill

    parts = [os.path.realpath(sys.executable), os.path.realpath(os.path.dirname(drill.__file__)), str(os.geteuid())]
    parts += sorted(f"{k}={v}" for k, v in os.environ.items()
                    if k.startswith(_KEY_ENV_PREFIXES) and k not in _KEY_ENV_SKIP)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def not_private(path: Path, uid: int | None = None, *, kind: str = "dir") -> str:
    """"" when `path` is ours alone (a directory, or a socket), else why not, in words."""
    uid = os.geteuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    want = stat.S_ISDIR if kind == "dir" else stat.S_ISSOCK
    if not want(st.st_mode):
        link = " (a symlink)" if stat.S_ISLNK(st.st_mode) else ""
        return f"is not a {'folder' if kind == 'dir' else 'socket'}{link}"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by you (uid {uid})"
    if kind == "dir" and st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700 (chmod 700 {path})"
    return ""


def ensure_folder(folder: Path) -> str:
    """Create the private folder if needed; "" when it is usable, else why not."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        return f"cannot create {folder}: {exc.strerror}"
    why = not_private(folder)
    return f"{folder} {why}" if why else ""


def fingerprint() -> str:
    """A digest of the installed drill (version, files) and torch's version file; ~1 ms, no imports."""
    import importlib.util

    import drill

    h = hashlib.sha256(f"{drill.__version__}\0{sys.version}".encode())
    roots = [os.path.dirname(drill.__file__)]
    try:
        found = importlib.util.find_spec("drill.reference")
        roots += list(found.submodule_search_locations or []) if found else []
    except (ImportError, ValueError):
        pass
    for root in sorted({os.path.realpath(r) for r in roots}):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.stat(full)
                    except OSError:
                        continue
                    h.update(f"{os.path.relpath(full, root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    try:
        torch_spec = importlib.util.find_spec("torch")
        origin = torch_spec.origin if torch_spec else None
        if origin:
            st = os.stat(os.path.join(os.path.dirname(origin), "version.py"))
            h.update(f"torch\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except (ImportError, ValueError, OSError):
        pass
    return h.hexdigest()[:32]
