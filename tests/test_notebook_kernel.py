"""tests/notebooks/check.ipynb executed by nbclient under a real IPython kernel of this venv's Python.

The kernel is the learner's situation, not a call of the magic's function: `%load_ext drill`, a correct
and a buggy `%%drill rmsnorm` cell, `drill.check` on a class defined in an earlier cell, a builtin
refused in one line (no traceback), `%drill_hint`, `%drill_start`'s new cell. The kernel grades through
a warm grading server of its own (a private XDG_RUNTIME_DIR; stopped afterwards), as a learner's does,
so a cell can say that torch had not entered the kernel. Its DRILL_HOME is the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from drill.judge import server_dir
from drill.store import Store

NOTEBOOK = Path(__file__).parent / "notebooks" / "check.ipynb"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _stop_server() -> None:
    """Stop the kernel's server (the same place: same interpreter, drill and environment) and wait for it."""
    from drill.judge import client

    place = server_dir.place()
    try:
        status = client.ask(place, "status")
        client.ask(place, "stop")
    except client.ServerUnavailable:
        status = None
    pid = (status or {}).get("pid")
    if isinstance(pid, int):
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    if place.folder.name.startswith(f"drill-{os.geteuid()}-"):  # the short /tmp folder of a deep test path
        shutil.rmtree(place.folder, ignore_errors=True)


def _text(cell) -> str:
    """Everything a code cell showed, as plain text: streams, results and displays, errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: " + "\n".join(out.traceback))
    return "".join(parts)


@pytest.mark.slow  # 12-29 s on 2 cores (one server start, three checks): CI runs it
def test_a_notebook_grades_a_correct_and_a_buggy_cell_under_a_real_kernel(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "jupyter" / "kernels" / "drill-venv"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({  # this venv's Python, whatever `python3` means elsewhere
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "drill test venv", "language": "python"}))
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    for key, value in {"JUPYTER_PATH": tmp_path / "jupyter", "JUPYTER_DATA_DIR": tmp_path / "jupyter",
                       "JUPYTER_CONFIG_DIR": tmp_path / "jupyter-config", "IPYTHONDIR": tmp_path / "ipython",
                       "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter-run", "XDG_RUNTIME_DIR": run,
                       "NO_COLOR": "1", "COLUMNS": "100"}.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv(server_dir.ENV_OFF, raising=False)  # the kernel's checks go through a server of its own
    monkeypatch.setenv(server_dir.ENV_IDLE, "2")  # should the stop below miss it, it leaves by itself
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        NotebookClient(nb, kernel_name="drill-venv", timeout=600, startup_timeout=120,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        _stop_server()
    shown = {c.id: _text(c) for c in nb.cells if c.cell_type == "code"}

    assert "torch after import drill: False" in shown["cell-1"]
    assert "PASS" in shown["cell-3"] and "<cell>" in shown["cell-3"]  # the panel, titled with the cell
    assert "verdict: pass True" in shown["cell-4"]
    assert "FAIL" in shown["cell-5"] and "[rms_missing_weight]" in shown["cell-5"]
    assert "verdict: fail rms_missing_weight" in shown["cell-6"]
    assert "started the grading server" in shown["cell-3"]  # its one dim line, on the first check's stderr
    # Graded by the warm server: torch never entered the kernel (the next cell imports it, for its class).
    assert "torch in the kernel: False" in shown["cell-6"]
    assert "verdict: True <RMSNorm>" in shown["cell-8"] and "PASS" in shown["cell-8"]
    refused = shown["cell-9"]  # one line, not a traceback through drill's code
    assert refused == "UserError: error: `len` is a built-in (C) function: it has no Python source to grade"
    assert "Hint 1/3" in shown["cell-10"] and "Hint 2/3" not in shown["cell-10"]
    assert "next cell: %%drill rmsnorm" in shown["cell-11"]
    # The cell's own line numbers (the %%drill line is line 1), and --no-record leaves no attempt.
    assert "policy_violation" in shown["cell-12"] and "<cell>:3:" in shown["cell-12"]
    attempts = Store(home / "progress.db").attempts()
    assert [(a.status, a.diagnosis, a.seed, a.file) for a in attempts] == [
        ("pass", None, 3, "<cell>"), ("fail", "rms_missing_weight", 3, "<cell>"), ("pass", None, 3, "<RMSNorm>")]
