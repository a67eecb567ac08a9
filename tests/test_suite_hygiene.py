"""The suite looks only in folders it made (issue 31 §2).

A tamper fixture once walked the whole of /tmp for progress stores: on a
long-lived machine (143k files, hundreds of other people's stores) the test
ran out of time, and it could find anybody's store. This reads every test
and fixture (ast and text, nothing run) and fails on a search rooted at a
folder the test did not make: a walk, glob, listing or recursive grep of
the temp folder, the home folder, /work, /opt, /usr or /, or a listing of
every process. CI also runs the suite with a temp folder pre-filled with
100k files and foreign stores (.ci/prefill_tmp.py), which catches the
searches rooted at TMPDIR that no text check can see.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
SEARCHES = {"walk", "listdir", "scandir", "glob", "iglob", "rglob", "iterdir"}
FOREIGN_ROOTS = ("/tmp", "/work", "/home", "/root", "/opt", "/usr", "/var")
# (file, search root) pairs that are not a search of someone else's files, and why
ALLOWED = {
    # runs inside the namespace sandbox, where /tmp is the run's own private tmpfs
    ("test_sandbox_view.py", "/tmp"),
    # every process, for ones carrying this session's own marker (test_judge_tamper.MARKER) or server folder
    ("test_judge_tamper.py", "/proc"),
    ("test_judge_server.py", "/proc"),
}
_GREP = re.compile(r"\b(grep\s+-\w*r\w*|find)\s[^|;]*?(?P<root>/(tmp|work|home|root|opt|usr|var)\b|\s/\s)")


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name != Path(__file__).name)


def _root(node: ast.AST) -> str | None:
    """The folder a search call starts from, when it is written as a literal or a well-known folder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value) + "{}"  # f"/proc/{pid}/task": one process, not every one
    if isinstance(node, ast.Call):
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        if name in ("gettempdir", "home", "expanduser"):
            return f"<{name}()>"
        if name == "Path" and node.args:
            return _root(node.args[0])
    return None


def _foreign(root: str) -> bool:
    if root.startswith("<"):
        return True
    if root.startswith("/proc"):
        return root.rstrip("/") == "/proc"  # /proc/self/... is the process's own
    return root == "/" or any(root == r or root.startswith(r + "/") for r in FOREIGN_ROOTS)


def _searches(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name not in SEARCHES:
                continue
            root = _root(fn.value) if isinstance(fn, ast.Attribute) else None  # Path(...).rglob(...)
            if root is None and node.args:
                root = _root(node.args[0])  # os.walk(...), glob.glob(...)
            if root is not None and _foreign(root):
                found.append((node.lineno, root))
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            text = node.value.decode(errors="replace") if isinstance(node.value, bytes) else node.value
            match = _GREP.search(text)
            if match:
                found.append((node.lineno, match.group("root").strip()))
    return found


def test_no_test_searches_folders_it_did_not_make() -> None:
    sources = _sources()
    assert len(sources) > 100  # the tests, their helpers and every fixture
    bad = [f"{path.relative_to(TESTS)}:{line} ({root})" for path in sources for line, root in _searches(path)
           if (path.name, root) not in ALLOWED]
    assert bad == [], "searches beyond the test's own folders: " + ", ".join(bad)


@pytest.mark.parametrize("source", [
    'import os\nos.walk("/tmp")\n', "import glob\nglob.glob('/work/**/x.py', recursive=True)\n",
    "import os, tempfile\nos.listdir(tempfile.gettempdir())\n", "from pathlib import Path\nPath.home().rglob('*')\n",
    "from pathlib import Path\nPath('/tmp').iterdir()\n", 'cmd = b"grep -rlx sentinel /tmp 2>/dev/null"\n',
    'import os\nos.listdir("/proc")\n',
])
def test_the_hygiene_check_sees_a_search_of_the_machine(source: str, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    assert _searches(probe), source
