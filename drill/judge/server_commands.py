"""`drill server start|stop|status`: the warm grading server by hand (it also starts itself on first use).

Thin: drill/judge/client.py does the work; nothing here imports torch.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console

from drill.cliutil import fail_usage

HELP = """The warm grading server: keeps torch, the specs and a fork server loaded, so
`drill check` answers in a fraction of a second. `drill check`, --watch, `drill mock`
and `drill bench` start it on first use (one dim line says so) and use it while it
runs; it stops after an idle period (default 15 min, DRILL_SERVER_IDLE_MIN), and is
replaced when drill's files change. Every check still draws fresh cases and runs your
file in a fresh sandboxed process; your progress is recorded by the command, never by
the server. DRILL_NO_SERVER=1 or `drill check --no-server` grade without it."""


# The judge area adds this group as `drill server` (drill/judge/commands.py).
app = typer.Typer(help=HELP, short_help="The warm grading server: start, stop, status.", no_args_is_help=True)


@app.command("start")
def start_cmd(
    idle_minutes: Annotated[float | None, typer.Option(
        "--idle-minutes", help="Stop after this long without a check (default 15, or DRILL_SERVER_IDLE_MIN).",
        min=0.05, max=24 * 60)] = None,
) -> None:
    """Start the grading server now (nothing happens if one of this drill is running)."""
    from drill.judge import client, server_dir

    where = server_dir.place()
    why = server_dir.ensure_folder(where.folder)
    if why:
        fail_usage(f"grading server not started: {why}")
    try:
        running = client.ask(where, "status")
        if running is not None and running.get("fingerprint") == server_dir.fingerprint():
            Console(highlight=False).print(f"grading server already running (pid {running.get('pid')}, {where.socket})")
            return
        pid = client.start(where, None, idle_minutes=idle_minutes)
    except client.ServerUnavailable as exc:
        fail_usage(f"grading server not started: {exc}")
    idle = idle_minutes if idle_minutes is not None else server_dir.idle_minutes()
    Console(highlight=False).print(f"grading server started (pid {pid}, {where.socket}); stops after {idle:g} min idle")


@app.command("stop")
def stop_cmd() -> None:
    """Stop the grading server (checks in flight finish first)."""
    from drill.judge import client, server_dir

    where = server_dir.place()
    try:
        status = client.ask(where, "status")
        if status is None:
            Console(highlight=False).print("no grading server running")
            return
        client.ask(where, "stop")
    except client.ServerUnavailable as exc:
        fail_usage(f"cannot reach the grading server: {exc}")
    pid = status.get("pid")
    for _ in range(200):  # it unlinks its socket at once; the process leaves when its checks end
        if not _alive(pid):
            break
        time.sleep(0.05)
    Console(highlight=False).print(f"grading server stopped (pid {pid})")


@app.command("status")
def status_cmd() -> None:
    """Whether a grading server is running for this drill, and what it has done."""
    from drill.judge import client, server_dir

    where = server_dir.place()
    try:
        status = client.ask(where, "status")
    except client.ServerUnavailable as exc:
        fail_usage(f"cannot reach the grading server: {exc}")
    out = Console(highlight=False)
    if status is None:
        out.print(f"no grading server running ({where.socket})")
        return
    stale = status.get("fingerprint") != server_dir.fingerprint()
    up = time.time() - float(status.get("started", time.time()))
    out.print(f"grading server running: pid {status.get('pid')}, up {up / 60:.1f} min, {status.get('checks')} checks, "
              f"{status.get('active')} active, idle {float(status.get('idle_s', 0)):.0f} s of "
              f"{float(status.get('idle_limit_s', 0)) / 60:g} min, {'warm' if status.get('warm') else 'warming up'}, "
              f"non-dumpable: {'yes' if status.get('dumpable') == 0 else 'no'}")
    out.print(f"socket: {where.socket}")
    if stale:
        out.print("[yellow]started from other drill files: the next check replaces it[/]")


def _alive(pid: object) -> bool:
    import os

    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (its parent has not reaped it yet) is gone for our purposes
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
