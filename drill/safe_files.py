"""Writing a file the user named without letting another local user aim the write elsewhere.

Why this exists: an output path in a shared folder (/tmp, a group project folder) can be prepared by someone
else. A predictable temporary name beside it (`.out.csv.1234.tmp`) pre-created as a symlink made drill
write through it into the victim's `progress.db`; a target pre-created by another user kept that user's
ownership and mode 0666; and `drill start` followed a dangling symlink out of the folder it was asked for.

So every file drill writes for the user goes through `write_atomic`:
- the data goes into a fresh temporary file in the target's own folder, created with O_CREAT | O_EXCL |
  O_NOFOLLOW and a random name (`tempfile.mkstemp`), so no prepared name or link is ever opened;
- it gets its final mode (0644 unless asked) on the descriptor, is flushed, then renamed onto the target:
  the target holds the whole new file or is untouched, and is ours;
- a target that exists and is owned by another user, or is not a regular file (a FIFO would block, a
  device would be written), is refused in one line; so is a symlink at the final component, unless it is
  ours and points at a regular file of ours (the user named it): then that file is the target.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from drill.errors import UserError


def resolve_target(path: Path) -> Path:
    """The file a write to `path` must replace; UserError when another user or a non-file is in the way."""
    path = path.expanduser()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UserError(f"cannot inspect the file: {exc.strerror or exc}", str(path)) from None
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid != my_uid():
            raise UserError("is a symbolic link owned by another user; refusing to write through it", str(path))
        try:
            real = Path(os.path.realpath(path))
            target = os.stat(real)
        except OSError:
            raise UserError("is a symbolic link to nothing; remove it or name another file", str(path)) from None
        if not stat.S_ISREG(target.st_mode):
            raise UserError("is a symbolic link to something that is not a regular file", str(path))
        if target.st_uid != my_uid():
            raise UserError("is a symbolic link to a file owned by another user; refusing to write it", str(path))
        return real
    if stat.S_ISDIR(st.st_mode):
        raise UserError("is a folder; give a file name", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise UserError("is not a regular file (a pipe, socket or device); give another file name", str(path))
    if st.st_uid != my_uid():
        raise UserError("is owned by another user; refusing to replace it", str(path))
    return path


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o644) -> Path:
    """Replace `path` (see the module docstring) with `data`; returns the file written. UserError on failure."""
    target = resolve_target(Path(path))
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UserError(f"cannot write here: {exc.strerror or exc}", str(target)) from None
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode & ~_umask())
            out.write(blob)
            out.flush()
            os.fsync(out.fileno())
        resolve_target(target)  # the target may have been swapped while we wrote: check again, then rename
        os.replace(tmp, target)
    except OSError as exc:
        raise UserError(f"cannot write the file: {exc.strerror or exc}", str(target)) from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return target


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def my_uid() -> int:
    """The uid a file must have to be replaced (a function, so a test can make every file look foreign)."""
    return os.getuid()
