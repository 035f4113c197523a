"""What a hostile script tries, run inside the real bubblewrap sandbox; every attempt must fail.

The server's environment, its files (the project, the SQLite database, settings.py), the host's /tmp,
its processes and its loopback network are out of reach; the script runs as an unprivileged uid of its
own under limits, and nothing it starts outlives its run, setsid or not."""

import os
import socket
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from runs import sandbox
from runs.sandbox import PROCESS_LIMIT, ScriptJob, script_run
from tests.test_sandbox import argv, host_processes, marker, sh, wait_until

PROJECT = Path(django_settings.BASE_DIR).resolve()


@pytest.fixture(autouse=True)
def in_bubblewrap(settings, tmp_path):
    """These tests mean something only inside the real sandbox: without it they fail, never skip."""
    settings.ATRIUM_SANDBOX_DIR = str(tmp_path / "sandbox")
    assert sandbox.mode().name == "bwrap", sandbox.mode().reason


def both_streams(result) -> str:
    return result.stdout + result.stderr


# --- the server's secrets -------------------------------------------------------------------------


def test_the_parents_environment_cannot_be_read(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "server-secret-7f3a9c")
    monkeypatch.setenv("DATABASE_URL", "postgres://atrium:db-password-7f3a9c@db/atrium")
    result = script_run(sh(f'cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/{os.getpid()}/environ; '
                           'for p in /proc/[0-9]*; do cat "$p/environ"; done; env'))
    assert "7f3a9c" not in both_streams(result)
    assert "SECRET_KEY" not in result.stdout and "DATABASE_URL" not in result.stdout


def test_the_node_env_is_not_on_any_host_command_line():
    seen: list[list[int]] = []

    def should_cancel() -> bool:
        seen.append(host_processes("node-token-5b2e"))
        return len(seen) >= 3

    result = script_run(sh("sleep 30", env={"API_TOKEN": "node-token-5b2e"}, timeout=30), should_cancel=should_cancel,
                        cancel_check_every=0.2)
    assert result.cancelled
    assert seen == [[], [], []]


@pytest.mark.django_db
def test_the_database_file_and_the_settings_cannot_be_read(tmp_path):
    planted = PROJECT / "var" / f"escape-test-{os.getpid()}.sqlite3"
    planted.parent.mkdir(exist_ok=True)
    planted.write_text("password hashes 41c8e0")
    targets = [planted, PROJECT / "config" / "settings.py", PROJECT / "manage.py"]
    if connection.vendor == "sqlite":
        targets.append(Path(connection.settings_dict["NAME"]).resolve())
    try:
        for target in targets:
            assert target.exists()
            result = script_run(sh(f'cat "{target}"; ls -la "{target.parent}"'))
            assert not result.succeeded
            assert "No such file or directory" in result.stderr, target
            assert result.stdout == ""
        listing = script_run(sh(f'ls "{PROJECT}" "{PROJECT}/var" /root /home /work'))
        assert listing.stdout == ""
    finally:
        planted.unlink()


def test_the_venv_and_the_servers_interpreter_are_not_inside():
    result = script_run(sh(f'ls "{sys.prefix}" "{Path(sys.executable).parent}"'))
    assert result.stdout == ""
    assert result.stderr.count("No such file or directory") == 2


# --- writing ----------------------------------------------------------------------------------------


def test_nothing_outside_the_private_directory_can_be_written():
    name = f"escape-{marker()}"
    result = script_run(sh(f'for d in "{PROJECT}" "{PROJECT}/var" / /usr /etc /bin /proc/sys/kernel; do '
                           f'echo x > "$d/{name}" 2>/dev/null && echo "wrote $d"; done; '
                           f'echo x > /tmp/{name} && echo "wrote sandbox tmp"; echo x > "$HOME/{name}" && echo home'))
    written = [directory for directory in (PROJECT, PROJECT / "var", Path("/"), Path("/usr"), Path("/etc"),
                                           Path("/tmp")) if (directory / name).exists()]
    for directory in written:
        (directory / name).unlink()
    assert result.stdout == "wrote sandbox tmp\nhome\n"
    assert written == []


def test_the_private_directory_is_the_only_writable_place_and_is_gone_after(tmp_path):
    result = script_run(sh('echo "$HOME"; pwd; mkdir keep && echo kept > keep/file && cat keep/file'))
    home, cwd, content = result.stdout.split()
    assert home == cwd and content == "kept"
    assert not Path(home).exists()


# --- processes --------------------------------------------------------------------------------------


def test_a_setsid_process_does_not_outlive_the_run():
    survivor = marker()
    result = script_run(sh(f"setsid sleep {survivor} > /dev/null 2>&1 < /dev/null & "
                           f"nohup setsid sh -c 'sleep {survivor}' > /dev/null 2>&1 & echo started"))
    assert result.succeeded and result.stdout == "started\n"
    assert wait_until(lambda: not host_processes(f"sleep {survivor}")), "a setsid process survived"


def test_a_setsid_process_does_not_outlive_a_timeout_or_a_cancel():
    survivor = marker()
    timed_out = script_run(sh(f"setsid sleep {survivor} & sleep 60", timeout=1))
    assert timed_out.timed_out
    assert wait_until(lambda: not host_processes(f"sleep {survivor}"))

    cancelled = script_run(sh(f"setsid sleep {survivor} & sleep 60", timeout=60),
                           should_cancel=lambda: bool(host_processes(f"sleep {survivor}")), cancel_check_every=0.1)
    assert cancelled.cancelled
    assert wait_until(lambda: not host_processes(f"sleep {survivor}"))


def test_host_processes_are_invisible():
    result = script_run(sh("ps -eo pid,user,args; echo; ls -d /proc/[0-9]*"))
    table, numbers = result.stdout.split("\n\n")
    rows = table.splitlines()[1:]
    # bwrap's PID 1, the status reporter, sh, and ps itself: the sandbox's own processes only.
    assert len(rows) <= 5
    assert "pytest" not in table and "python" not in table
    assert str(os.getpid()) not in numbers.split("/proc/")


def test_the_host_cannot_be_signalled():
    # Signal 0 only asks whether a signal could be delivered: should the sandbox ever break, this test
    # still harms nothing. The test's pid does not exist in there; PID 1 is bwrap, still root.
    result = script_run(sh(f"kill -0 {os.getpid()}; echo $?; kill -0 1; echo $?"))
    assert result.stdout == "1\n1\n"
    assert "No such process" in result.stderr
    assert "Operation not permitted" in result.stderr


# --- identity ---------------------------------------------------------------------------------------


def test_the_script_runs_as_an_unprivileged_uid_that_is_not_the_servers():
    result = script_run(sh("id -u; id -g; id -G; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status"))
    uid, gid, groups, cap_eff, cap_bnd, no_new_privs = result.stdout.splitlines()
    assert int(uid) not in (0, os.getuid())
    assert gid == uid and groups == uid
    assert cap_eff.split() == ["CapEff:", "0000000000000000"]
    assert cap_bnd.split() == ["CapBnd:", "0000000000000000"]
    assert no_new_privs.split() == ["NoNewPrivs:", "1"]


def test_root_owned_files_of_the_system_stay_closed():
    # PID 1 is bwrap, still root: the script may neither read its environment nor enter its root.
    result = script_run(sh("cat /etc/shadow; cat /proc/1/environ; ls /proc/1/root/"))
    assert result.stdout == ""
    assert "No such file or directory" in result.stderr  # /etc/shadow is not mounted at all
    assert result.stderr.count("Permission denied") == 2


# --- network ----------------------------------------------------------------------------------------


def test_a_port_on_the_hosts_loopback_cannot_be_reached():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        result = script_run(argv("python3", "-c", "import socket, sys; socket.create_connection(('127.0.0.1', "
                                 f"{port}), timeout=3); print('connected')"))
    finally:
        server.close()
    assert not result.succeeded
    assert "connected" not in result.stdout
    assert "Connection refused" in result.stderr
    assert result.network_isolated


# --- limits -----------------------------------------------------------------------------------------


def test_a_fork_bomb_is_bounded_and_leaves_nothing_behind():
    tag = marker()
    started = time.monotonic()
    # Every shell of the bomb carries the tag in its command line, as do bwrap's two processes.
    result = script_run(ScriptJob(script=f": {tag}; f() {{ f | f & }}; f; sleep 1; echo bounded", command=None,
                                  timeout=30, env={}),
                        should_cancel=lambda: len(host_processes(tag)) > PROCESS_LIMIT + 2, cancel_check_every=0.1)
    assert not result.cancelled, "more processes than the limit"
    assert not result.timed_out
    assert "Cannot fork" in result.stderr
    assert result.stdout == "bounded\n"
    assert time.monotonic() - started < 25
    assert wait_until(lambda: not host_processes(tag))


def test_memory_cpu_and_file_size_limits_hold_inside():
    memory = script_run(argv("python3", "-c", "b = bytearray(1_000_000_000)", memory_mb=200))
    assert memory.error() == "Out of memory (limit 200 MB). Exited with status 1: MemoryError"
    cpu = script_run(sh("while :; do :; done", cpu_seconds=1, timeout=30))
    assert cpu.error() == "Killed: CPU time limit exceeded (1 s)"
    size = script_run(argv("dd", "if=/dev/zero", "of=big", "bs=1M", "count=70"))
    assert size.error() == "Killed: file size limit exceeded (64 MB)"
    tmp = script_run(sh("dd if=/dev/zero of=/tmp/a bs=1M count=40 && dd if=/dev/zero of=/tmp/b bs=1M count=40"))
    assert not tmp.succeeded and "No space left on device" in tmp.stderr


def test_an_exit_status_above_128_is_not_taken_for_a_signal():
    result = script_run(sh("exit 137"))
    assert result.exit_code == 137
    assert result.killed_by is None
    assert result.error() == "Exited with status 137"
