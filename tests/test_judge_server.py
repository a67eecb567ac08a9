"""The warm grading server (issue 14), through the CLI and the Python API, with its faults.

Every test gets its own runtime folder (XDG_RUNTIME_DIR) and DRILL_HOME, so
its server is its own; the module-scoped `shared` one serves the tests that
only need a running server. conftest.py sets DRILL_NO_SERVER=1 for every
other test module; here it is removed. The pytest process stops being a
child subreaper while these tests run, so a server a CLI process started is
re-parented to init (as for a user), not to pytest, whose own in-process
grading would otherwise sweep it up as a graded run's orphan.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from drill.judge import check, client, server_dir, wire
from drill.judge.spec import Diagnosis

SOL = Path(__file__).parent / "fixtures" / "solutions"
TAMPER = Path(__file__).parent / "fixtures" / "tamper"
GOOD = SOL / "rmsnorm" / "good_rsqrt.py"
BUG = SOL / "rmsnorm" / "bug_rms_missing_weight__rsqrt.py"
STARTED = "started the grading server"


def _no_subreaper() -> None:
    try:
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off (harden_parent turns it on)
    except (OSError, AttributeError):
        pass


def make_env(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    run = root / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != server_dir.ENV_OFF}
    env.update(XDG_RUNTIME_DIR=str(run), DRILL_HOME=str(root / "home"), DRILL_SERVER_IDLE_MIN="5", NO_COLOR="1",
               COLUMNS="200")
    return env


@contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    with mock.patch.dict(os.environ, env, clear=True):
        yield


def drill(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drill.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def status(env: dict[str, str]) -> dict | None:
    with environ(env):
        try:
            return client.ask(server_dir.place(), "status")
        except client.ServerUnavailable:  # a socket that is not ours: no server of ours there
            return None


def attempts(env: dict[str, str]) -> list:
    from drill.store import open_store

    with environ(env), open_store(read_only=True) as store:
        return store.attempts()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def servers_in(folder: Path) -> list[int]:
    """Server processes started for `folder` (by their command line), zombies excluded."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if b"drill.judge.server" in argv and os.fsencode(str(folder)) in argv and alive(int(entry)):
                found.append(int(entry))
    return found


def stop(env: dict[str, str]) -> None:
    """Stop the env's server; fail if any server process of its folder is still there afterwards (a leak)."""
    with environ(env):
        folder = server_dir.place().folder
        try:
            client.ask(server_dir.place(), "stop")
        except client.ServerUnavailable:
            pass
    t0 = time.monotonic()
    while servers_in(folder) and time.monotonic() - t0 < 15:
        time.sleep(0.1)
    left = servers_in(folder)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    if folder.name.startswith(f"drill-{os.geteuid()}-"):  # the short /tmp folder of a deep test path
        shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"server processes left behind: {left}"


def copy(src: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / name
    dest.write_bytes(src.read_bytes())
    return dest


@pytest.fixture(autouse=True)
def _orphans_to_init() -> None:
    _no_subreaper()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    _no_subreaper()
    env = make_env(tmp_path_factory.mktemp("shared"))
    yield env
    stop(env)


@pytest.fixture
def own(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = make_env(tmp_path / "own")
    yield env
    stop(env)


# -- the ordinary path -----------------------------------------------------------------------------


def test_first_check_starts_the_server_once_then_checks_are_warm_and_recorded(shared: dict, tmp_path: Path) -> None:
    good = copy(GOOD, tmp_path, "rmsnorm.py")
    first = drill(shared, "check", str(good))
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr.count(STARTED) == 1 and len(first.stderr.strip().splitlines()) == 1, first.stderr
    st = status(shared)
    assert st is not None and st["checks"] >= 1 and st["dumpable"] == 0 and st["hardened"]["non_dumpable"], st
    bad = copy(BUG, tmp_path / "b", "rmsnorm.py")
    second = drill(shared, "check", str(bad), "--json")
    assert second.returncode == 1 and STARTED not in second.stderr, second.stderr
    doc = json.loads(second.stdout)
    assert doc["diagnosis"]["id"] == "rms_missing_weight" and doc["file"] == str(bad), doc
    after = status(shared)
    assert after["pid"] == st["pid"] and after["checks"] == st["checks"] + 1
    assert [a.status for a in attempts(shared)][-2:] == ["pass", "fail"]  # the client recorded both, once each


def test_a_folder_is_graded_by_the_server_with_the_same_summary(shared: dict, tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    copy(GOOD, folder, "rmsnorm.py")
    copy(SOL / "attention" / "bug_mask_inverted__where.py", folder, "attention.py")
    before = status(shared) or {"checks": 0}
    out = drill(shared, "check", str(folder))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1/2 passed" in out.stdout and "mask_inverted" in out.stdout, out.stdout
    assert status(shared)["checks"] == before["checks"] + 2


def test_usage_errors_come_back_as_one_line_with_the_typed_path(shared: dict, tmp_path: Path) -> None:
    bad = tmp_path / "rmsnorm.py"
    bad.write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xff\n")  # decodes; a syntax error graded as such
    undecodable = tmp_path / "u" / "rmsnorm.py"
    undecodable.parent.mkdir()
    undecodable.write_bytes(b"x = '\xff'\n")
    out = drill(shared, "check", str(undecodable))
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(f"error: {undecodable}:"), out.stderr
    syntax = drill(shared, "check", str(bad), "--json")
    assert json.loads(syntax.stdout)["diagnosis"]["id"] == "syntax_error"


def test_a_file_graded_before_cannot_change_a_later_verdict(shared: dict, tmp_path: Path) -> None:
    """Attacks graded with layer 1 off through one server, then a wrong file and a right one: verdicts hold."""
    with environ(shared):
        pid = (client.ask(server_dir.place(), "status") or {}).get("pid")
        jobs = [client.Job(copy(TAMPER / f"{name}.py", tmp_path / name, "attention.py"), "attention", seed=7,
                           policy=False)
                for name in ("monkeypatch_allclose", "fake_verdict", "forge_results", "signal_drill", "leaves_child")]
        notes: list[str] = []
        tampered = client.grade(jobs, say=notes.append)
        assert all(r.status != "pass" for r in tampered), [(r.file, r.status) for r in tampered]
        wrong = copy(SOL / "attention" / "bug_mask_inverted__where.py", tmp_path / "w", "attention.py")
        right = copy(SOL / "attention" / "good_matmul_softmax.py", tmp_path / "r", "attention.py")
        after = client.grade([client.Job(wrong, seed=7, policy=False), client.Job(right, seed=7, policy=False)],
                             say=notes.append)
        assert not [n for n in notes if "not used" in n], notes  # all of it went through the server
        assert after[0].status == "fail" and after[0].diagnosis.id == "mask_inverted", after[0].diagnosis_detail
        assert after[1].status == "pass", [(t.name, t.message) for t in after[1].tests if t.status != "pass"]
        assert pid is None or client.ask(server_dir.place(), "status")["pid"] == pid  # the same server throughout


def test_mock_grades_through_the_server(shared: dict, tmp_path: Path) -> None:
    from drill.mock.run import _check_file

    good = copy(GOOD, tmp_path, "rmsnorm.py")
    before = status(shared)["checks"]
    with environ(shared):
        result = _check_file(good, "rmsnorm", 3)
    assert result.status == "pass" and result.seed == 3 and result.file == str(good)
    assert status(shared)["checks"] == before + 1


def test_two_clients_at_once_both_get_their_verdict_and_attempt(own: dict, tmp_path: Path) -> None:
    good, bad = copy(GOOD, tmp_path / "g", "rmsnorm.py"), copy(BUG, tmp_path / "b", "rmsnorm.py")
    procs = [subprocess.Popen([sys.executable, "-m", "drill.cli", "check", str(p), "--json"], env=own,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in (good, bad)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 1], outs
    assert json.loads(outs[1][0])["diagnosis"]["id"] == "rms_missing_weight"
    assert sum(STARTED in err for _, err in outs) <= 2  # each says so at most once; one server stays
    assert sorted(a.status for a in attempts(own)) == ["fail", "pass"]
    assert status(own) is not None


def test_no_server_grades_in_process_and_starts_nothing(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    good = copy(GOOD, tmp_path, "rmsnorm.py")
    flag = drill(env, "check", str(good), "--no-server")
    assert flag.returncode == 0 and flag.stderr == "", flag.stderr
    envvar = drill({**env, server_dir.ENV_OFF: "1"}, "check", str(good))
    assert envvar.returncode == 0 and envvar.stderr == "", envvar.stderr
    assert status(env) is None and not list((tmp_path / "run").rglob("*.sock"))


def test_wire_round_trip_and_refusals() -> None:
    r = check.Result(exercise="rmsnorm", file="x.py", status="fail", seed=5,
               tests=[check.TestResult("t", "fail", "m", 0.5, float("nan"), "d", "s", "")],
               diagnosis=Diagnosis("unknown", "T", "W", "F"), diagnosis_detail="det", advisories=["a"],
               audit=["b"], elapsed_s=1.5, layers={"policy": "on"})
    back = wire.result_from_wire(wire.decode(wire.encode(wire.result_to_wire(r))))
    assert back.tests[0].max_rel is None and back.tests[0].max_abs == 0.5 and back.diagnosis == r.diagnosis
    assert back.to_json()["tests"] == [{**r.to_json()["tests"][0], "max_rel_err": None}]
    good = wire.result_to_wire(r)
    for broken in ({**good, "status": "great"}, {**good, "seed": "1"}, {k: v for k, v in good.items() if k != "tests"},
                   {**good, "extra": 1}, {**good, "tests": [{**good["tests"][0], "max_abs": "big"}]},
                   {**good, "diagnosis": {"id": "x"}}, {**good, "output_tail": "x" * (wire.MAX_TEXT + 1)}):
        with pytest.raises(wire.WireError):
            wire.result_from_wire(broken)
    with pytest.raises(wire.WireError):
        wire.decode(b'{"a": NaN}')
    item = wire.item("/x/rmsnorm.py", None, 1, client.Limits())
    wire.parse_request(wire.request("check", "f", [item]))
    for bad_item in ({**item, "path": "rel.py"}, {**item, "seed": -1}, {**item, "strict": 1},
                     {**item, "limits": {**item["limits"], "timeout_s": float("inf")}}):
        with pytest.raises(wire.WireError):
            wire.parse_request(wire.request("check", "f", [bad_item]))


def test_a_folder_is_graded_longest_first_as_last_measured(tmp_path: Path) -> None:
    """The server starts a request's slowest exercises first (unknown ones before them), so two workers end
    together; each answer still carries the index of its item, whatever the order."""
    from drill.judge import server

    srv = server.Server(server_dir.Place(tmp_path, "k"), idle_s=60.0, workers=1)
    srv.took = {"moe": 0.30, "rmsnorm": 0.05, "flash_attention": 0.20}
    seen: list[str] = []

    def grade(it: dict, tracker: object) -> tuple[str, str]:
        seen.append(server._cost_key(it))
        return "internal", server._cost_key(it)

    srv._grade = grade  # type: ignore[method-assign]
    names = ("rmsnorm", "moe", None, "flash_attention")
    items = [{"exercise": n, "path": f"/x/{n or 'attention'}.py"} for n in names]
    ours, theirs = socket.socketpair()
    with ours, theirs:
        srv._check(ours, items)
        ours.shutdown(socket.SHUT_WR)
        answers = [json.loads(line) for line in theirs.makefile().read().splitlines()]
    srv.executor.shutdown()
    assert seen == ["attention", "moe", "flash_attention", "rmsnorm"]
    assert {a["index"]: a["internal"] for a in answers if "index" in a} == {
        0: "rmsnorm", 1: "moe", 2: "attention", 3: "flash_attention"}
    assert answers[-1] == {"done": True}


def test_the_warm_up_starts_a_fork_server_per_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first folder check after a start had one file wait on a fork server started for it (16 s against
    1.2-1.5 s for the others, measured here): every worker's fork server is started by the warm-up (issue 31)."""
    from drill.judge import check, server

    monkeypatch.setattr(check, "check_file", lambda *a, **k: None)  # the throw-away check: not what is tested
    srv = server.Server(server_dir.Place(tmp_path, "k"), idle_s=60.0, workers=2)
    try:
        srv.warm_up()
        assert srv.warm.is_set() and srv.status()["pools"] == 2 and srv.pools.qsize() == 2
        assert all(p.proc is not None and p.proc.poll() is None for p in srv.all_pools)  # started, importing torch
        first, second = srv._take_pool(), srv._take_pool()
        assert first is not second and srv.status()["pools"] == 2  # neither made on the request path
    finally:
        for pool in srv.all_pools:
            pool.close()
        srv.executor.shutdown()


# -- faults ----------------------------------------------------------------------------------------


def test_garbage_and_other_protocols_are_refused_and_the_server_stays(shared: dict, tmp_path: Path) -> None:
    drill(shared, "server", "start")
    with environ(shared):
        path = server_dir.place().socket
    for payload in (b"not json\n", b'{"v": 99, "op": "check", "fingerprint": "x"}\n', b"[1, 2]\n",
                    b'{"v": 1, "op": "check", "fingerprint": "x", "items": [{"path": "/etc/passwd"}]}\n'):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(path))
            s.sendall(payload)
            reply = json.loads(s.makefile().readline())
        assert set(reply) == {"refused"}, reply
    assert status(shared) is not None


@pytest.mark.slow
def test_a_client_killed_mid_check_gets_its_run_killed_and_records_nothing(own: dict, tmp_path: Path) -> None:
    slow = copy(TAMPER / "sleeps.py", tmp_path / "s", "attention.py")
    before = len(attempts(own)) if (Path(own["DRILL_HOME"]) / "progress.db").exists() else 0
    proc = subprocess.Popen([sys.executable, "-m", "drill.cli", "check", str(slow), "--timeout", "120"], env=own,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = status(own)
        if st is not None and st["active"] == 1:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the check never reached the server")
    time.sleep(2.0)  # inside the learner's sleep now
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    while status(own)["active"] != 0:
        assert time.monotonic() - t0 < 20, "the killed client's run kept going"
        time.sleep(0.2)
    good = copy(GOOD, tmp_path, "rmsnorm.py")
    again = drill(own, "check", str(good))
    assert again.returncode == 0 and STARTED not in again.stderr, again.stderr
    assert [a.status for a in attempts(own)][before:] == ["pass"]  # nothing from the killed client


@pytest.mark.slow
def test_a_stale_socket_file_is_replaced_by_a_fresh_server(own: dict, tmp_path: Path) -> None:
    with environ(own):
        where = server_dir.place()
    server_dir.ensure_folder(where.folder)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(where.socket))  # bound, never listening, closed: what a SIGKILLed server leaves
    dead.close()
    out = drill(own, "check", str(copy(GOOD, tmp_path, "rmsnorm.py")))
    assert out.returncode == 0 and STARTED in out.stderr, out.stderr
    assert status(own) is not None


@pytest.mark.slow
def test_a_folder_with_loose_permissions_is_not_used(own: dict, tmp_path: Path) -> None:
    with environ(own):
        where = server_dir.place()
    server_dir.ensure_folder(where.folder)
    os.chmod(where.folder, 0o755)
    out = drill(own, "check", str(copy(BUG, tmp_path, "rmsnorm.py")), "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["diagnosis"]["id"] == "rms_missing_weight"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "grading server not used" in lines[0] and "0755" in lines[0], out.stderr
    assert not where.socket.exists() and status(own) is None
    assert len(attempts(own)) == 1


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a socket owned by another user")
def test_a_socket_owned_by_someone_else_is_neither_used_nor_removed(own: dict, tmp_path: Path) -> None:
    with environ(own):
        where = server_dir.place()
    server_dir.ensure_folder(where.folder)
    foreign = socket.socket(socket.AF_UNIX)
    foreign.bind(str(where.socket))
    foreign.listen(1)
    os.chown(where.socket, 65534, 65534)
    try:
        out = drill(own, "check", str(copy(GOOD, tmp_path, "rmsnorm.py")))
    finally:
        foreign.close()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "owned by uid 65534" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert where.socket.exists()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_connections_from_another_user_get_no_answer(own: dict) -> None:
    started = drill(own, "server", "start")
    assert started.returncode == 0, started.stderr
    with environ(own):
        where = server_dir.place()
    os.chmod(where.folder, 0o711)  # let the other user reach the socket at all
    os.chmod(where.socket, 0o666)
    request = json.dumps({"v": wire.VERSION, "op": "status", "fingerprint": "x"})  # the server's own version
    probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n"
             f"try:\n    s.sendall({(request + chr(10)).encode()!r})\n"
             "    print(repr(s.recv(100)))\nexcept (ConnectionResetError, BrokenPipeError):\n    print('reset')")
    mine = subprocess.run(["/usr/bin/python3", "-I", "-c", probe, str(where.socket)], capture_output=True, text=True,
                          timeout=30)
    assert mine.stdout.startswith("b'{\"status\""), mine.stdout + mine.stderr  # the same probe, as its own user
    try:
        out = subprocess.run(["/usr/bin/python3", "-I", "-c", probe, str(where.socket)], capture_output=True,
                             text=True, timeout=30, user=65534, group=65534)
    finally:
        os.chmod(where.folder, 0o700)
        os.chmod(where.socket, 0o600)
    assert out.stdout.strip() in ("b''", "reset"), out.stdout + out.stderr  # closed, unanswered
    assert status(own) is not None


@pytest.mark.slow
def test_a_server_of_an_older_drill_is_replaced(own: dict, tmp_path: Path) -> None:
    import drill.judge.registry as registry_module

    assert drill(own, "server", "start").returncode == 0
    old = status(own)["pid"]
    source = Path(registry_module.__file__)
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "another drill": its files changed
    try:
        out = drill(own, "check", str(copy(GOOD, tmp_path, "rmsnorm.py")))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "drill changed since the grading server started: restarted" in out.stderr, out.stderr
        new = status(own)["pid"]
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert new != old
    t0 = time.monotonic()
    while alive(old):
        assert time.monotonic() - t0 < 20, "the old server did not leave"
        time.sleep(0.1)


@pytest.mark.slow
def test_an_idle_server_leaves_and_removes_its_socket(own: dict) -> None:
    out = drill(own, "server", "start", "--idle-minutes", "0.05")
    assert out.returncode == 0 and "stops after 0.05 min idle" in out.stdout, out.stdout + out.stderr
    pid = status(own)["pid"]
    t0 = time.monotonic()
    while alive(pid):
        assert time.monotonic() - t0 < 60, "an idle server stayed"
        time.sleep(0.2)
    with environ(own):
        assert not server_dir.place().socket.exists()
    assert "no grading server running" in drill(own, "server", "status").stdout


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a full file system")
def test_a_full_disk_costs_one_line_and_the_in_process_path(tmp_path: Path) -> None:
    import tempfile

    full = Path(tempfile.mkdtemp(prefix="dfull-"))  # short: the socket path must fit in sun_path
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=16", "tmpfs", str(full)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    env = make_env(tmp_path / "e")
    try:
        (full / "drill").mkdir(mode=0o700)
        n = 0
        while True:  # use up every inode: no log, lock or socket can be created
            try:
                (full / f"f{n}").touch()
            except OSError:
                break
            n += 1
        env = {**make_env(tmp_path / "e"), "XDG_RUNTIME_DIR": str(full)}
        with environ(env):
            assert server_dir.place().folder == full / "drill"
        out = drill(env, "check", str(copy(BUG, tmp_path, "rmsnorm.py")), "--json")
        assert out.returncode == 1 and json.loads(out.stdout)["diagnosis"]["id"] == "rms_missing_weight"
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "grading server not used" in lines[0], out.stderr
        assert len(attempts(env)) == 1
    finally:
        stop(env)
        subprocess.run(["umount", "-l", str(full)], capture_output=True)
        full.rmdir()


def test_watch_and_bench_grade_through_the_server(shared: dict, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--watch re-grades through the server (no fork server of its own); bench's check does too."""
    from typer.testing import CliRunner

    import drill.judge.watch as watch_mod
    from drill.cli import app

    def fake_watch(paths, grade, on_idle=None, on_missing=None, **kwargs):
        grade(list(paths))
        grade(list(paths))  # a save
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_mod, "watch", fake_watch)
    good = copy(GOOD, tmp_path, "rmsnorm.py")
    bad = copy(BUG, tmp_path / "b", "rmsnorm.py")
    assert drill(shared, "server", "start").returncode == 0
    before = status(shared)["checks"]
    with environ(shared):
        watched = CliRunner().invoke(app, ["check", str(good), "--watch", "--seed", "2"])
        benched = CliRunner().invoke(app, ["bench", str(bad)])
    assert watched.exit_code == 0 and watched.output.count("PASS") == 2, watched.output
    assert benched.exit_code == 1, benched.output  # refused: the check failed, nothing timed
    assert status(shared)["checks"] == before + 3
