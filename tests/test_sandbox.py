"""runs.sandbox: script nodes run in a separate process with a clean environment, limits, a private work
directory and, where the OS allows, no network. Every test starts real processes; bounds are generous."""

import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from runs.sandbox import (
    OUTPUT_CAP_BYTES,
    BundledFile,
    ScriptJob,
    ScriptResult,
    network_isolation_available,
    script_run,
)

# The interpreter running the tests, started as a separate process: the sandbox's PATH may have no python3.
PYTHON = sys.executable


def sh(script: str, **options) -> ScriptJob:
    return ScriptJob(script=script, command=None, timeout=options.pop("timeout", 20), env=options.pop("env", {}),
                     **options)


def argv(*command: str, **options) -> ScriptJob:
    return ScriptJob(script=None, command=list(command), timeout=options.pop("timeout", 20),
                     env=options.pop("env", {}), **options)


def gone(pid: int) -> bool:
    """Whether a process no longer runs. A killed orphan may linger as a zombie when the container's
    init does not reap, so a zombie counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_until(predicate, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture(autouse=True)
def sandbox_dir(settings, tmp_path: Path) -> Path:
    base = tmp_path / "sandbox"
    settings.ATRIUM_SANDBOX_DIR = str(base)
    return base


# --- output ---------------------------------------------------------------------------------------


def test_json_stdout_is_parsed_as_the_output():
    result = script_run(sh("""printf '  {"ok": true, "items": [1, 2]}\\n'"""))
    assert result.succeeded
    assert result.exit_code == 0
    assert result.error() is None
    assert result.output() == {"ok": True, "items": [1, 2]}


def test_any_json_value_counts_as_json_output():
    assert script_run(sh("echo 42")).output() == 42
    assert script_run(sh("echo '\"text\"'")).output() == "text"


def test_non_json_stdout_gives_stdout_stderr_and_exit_code():
    result = script_run(sh("echo hello; echo warning >&2"))
    assert result.output() == {"stdout": "hello\n", "stderr": "warning\n", "exitCode": 0}


def test_a_non_zero_exit_fails_with_the_last_stderr_line_in_the_error():
    result = script_run(sh("echo first >&2; echo 'config missing' >&2; exit 3"))
    assert not result.succeeded
    assert result.exit_code == 3
    assert result.killed_by is None
    assert result.error() == "Exited with status 3: config missing"
    assert result.output() == {"stdout": "", "stderr": "first\nconfig missing\n", "exitCode": 3}


def test_invalid_utf8_output_is_decoded_with_replacement_characters():
    result = script_run(sh(r"printf 'a\377b'"))
    assert result.stdout == "a\ufffdb"


def test_each_stream_is_capped_keeping_the_head_and_noting_the_truncation():
    size = 3 * OUTPUT_CAP_BYTES
    result = script_run(sh(f"head -c {size} /dev/zero | tr '\\0' a; head -c {size} /dev/zero | tr '\\0' b >&2"))
    assert result.succeeded
    for text, letter in ((result.stdout, "a"), (result.stderr, "b")):
        assert text.startswith(letter * OUTPUT_CAP_BYTES)
        assert f"[output truncated: kept the first {OUTPUT_CAP_BYTES} of {size} bytes]" in text
        assert len(text) < OUTPUT_CAP_BYTES + 200


def test_large_output_on_both_streams_does_not_deadlock():
    chatty = "import sys\nfor _ in range(500):\n    sys.stdout.write('o' * 1000)\n    sys.stderr.write('e' * 1000)"
    result = script_run(argv(PYTHON, "-c", chatty, timeout=30))
    assert result.succeeded, result.error()
    assert len(result.stdout) == len(result.stderr) == 500_000


# --- environment and files -----------------------------------------------------------------------


def test_the_node_env_is_passed_and_the_server_environment_is_not(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "server-secret-value")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/atrium")
    result = script_run(sh("env", env={"GREETING": "hello world", "PATH": "/bin:/usr/bin"}))
    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert "server-secret-value" not in result.stdout
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert env["GREETING"] == "hello world"
    assert env["PATH"] == "/bin:/usr/bin"
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"
    assert env["HOME"] == env["ATRIUM_WORKFLOW_DIR"] == env["ROSCOE_WORKFLOW_DIR"]
    assert env["TMPDIR"] == env["HOME"] + "/tmp"
    assert set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "ATRIUM_WORKFLOW_DIR", "ROSCOE_WORKFLOW_DIR",
                        "GREETING", "PWD", "SHLVL", "_", "OLDPWD"}


def test_the_default_path_is_the_system_one():
    result = script_run(sh("echo $PATH"))
    assert result.stdout == "/usr/local/bin:/usr/bin:/bin\n"


def test_the_node_env_cannot_move_the_workflow_directory_or_home():
    result = script_run(sh('echo "$ATRIUM_WORKFLOW_DIR|$ROSCOE_WORKFLOW_DIR|$HOME|$PWD"',
                           env={"ATRIUM_WORKFLOW_DIR": "/etc", "ROSCOE_WORKFLOW_DIR": "/etc", "HOME": "/root"}))
    workflow_dir, roscoe_dir, home, cwd = result.stdout.strip().split("|")
    assert workflow_dir == roscoe_dir == home == cwd
    assert workflow_dir != "/etc"


def test_a_bundled_executable_is_reachable_through_the_workflow_directory():
    files = (BundledFile("scripts/check.sh", "#!/bin/sh\necho \"checked $1\"\n", executable=True),)
    result = script_run(sh('"$ATRIUM_WORKFLOW_DIR/scripts/check.sh" one && "$ROSCOE_WORKFLOW_DIR/scripts/check.sh" two',
                           files=files))
    assert result.succeeded, result.error()
    assert result.stdout == "checked one\nchecked two\n"


def test_a_command_may_name_a_bundled_program_relative_to_the_workflow_directory():
    files = (BundledFile("scripts/check.sh", "#!/bin/sh\necho \"checked $1\"\n", executable=True),)
    result = script_run(argv("scripts/check.sh", "three", files=files))
    assert result.stdout == "checked three\n"


def test_a_bundled_file_not_marked_executable_cannot_be_executed_but_can_be_read():
    files = (BundledFile("data/input.txt", "some data\n", executable=False),)
    assert script_run(sh('cat "$ATRIUM_WORKFLOW_DIR/data/input.txt"', files=files)).stdout == "some data\n"
    result = script_run(argv("data/input.txt", files=files))
    assert result.exit_code == 126
    assert "Permission denied" in result.error()


@pytest.mark.parametrize("path", ["../escape.sh", "/etc/passwd", "scripts/../../escape.sh", "", "."])
def test_a_bundled_file_path_escaping_the_workflow_directory_is_refused(path, sandbox_dir):
    with pytest.raises(ValueError, match="inside the workflow directory"):
        script_run(sh("true", files=(BundledFile(path, "x", executable=False),)))
    assert not (sandbox_dir.parent / "escape.sh").exists()


def test_a_job_needs_exactly_one_of_script_and_command():
    with pytest.raises(ValueError, match="exactly one"):
        script_run(ScriptJob(script="true", command=["true"], timeout=5, env={}))
    with pytest.raises(ValueError, match="exactly one"):
        script_run(ScriptJob(script=None, command=None, timeout=5, env={}))


def test_a_command_runs_without_a_shell():
    result = script_run(argv("printf", "%s", "$HOME"))
    assert result.stdout == "$HOME"


def test_an_unknown_command_fails_like_a_shell_would():
    result = script_run(argv("no-such-program-here"))
    assert result.exit_code == 127
    assert result.error() == "Exited with status 127: no-such-program-here: No such file or directory"


def test_the_work_directory_is_fresh_and_removed_afterwards(sandbox_dir):
    first = script_run(sh('ls -A; echo "$ATRIUM_WORKFLOW_DIR"; touch leftover; mkdir -p d/e && chmod 500 d'))
    second = script_run(sh('echo "$ATRIUM_WORKFLOW_DIR"; ls -A'))
    *listing, first_dir = first.stdout.splitlines()
    second_dir, *second_listing = second.stdout.splitlines()
    assert listing == second_listing == ["tmp"]
    assert first_dir != second_dir
    assert Path(first_dir).parent == sandbox_dir
    assert not Path(first_dir).exists()
    assert list(sandbox_dir.iterdir()) == []


def test_the_work_directory_is_removed_when_the_script_is_killed(sandbox_dir):
    result = script_run(sh("echo started; sleep 30", timeout=1))
    assert result.timed_out
    assert list(sandbox_dir.iterdir()) == []


# --- timeout and cancel ---------------------------------------------------------------------------


def test_a_timeout_kills_the_script_and_the_children_it_spawned(tmp_path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    result = script_run(sh('sleep 30 & echo $! > "$PID_FILE"; sleep 30', timeout=1, env={"PID_FILE": str(pid_file)}))
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.cancelled
    assert result.killed_by == "timeout"
    assert result.exit_code is None
    assert result.error() == "Timed out after 1 s"
    assert elapsed < 8
    child = int(pid_file.read_text())
    assert wait_until(lambda: gone(child)), f"child {child} still running"


def test_a_script_ignoring_sigterm_is_still_killed_after_the_grace():
    started = time.monotonic()
    result = script_run(sh("trap '' TERM; sleep 30", timeout=1))
    assert result.timed_out
    assert time.monotonic() - started < 8


def test_background_children_are_killed_when_the_script_exits(tmp_path):
    pid_file = tmp_path / "child.pid"
    result = script_run(sh('sleep 30 > /dev/null 2>&1 & echo $! > "$PID_FILE"; echo done',
                           env={"PID_FILE": str(pid_file)}))
    assert result.succeeded
    child = int(pid_file.read_text())
    assert wait_until(lambda: gone(child)), f"child {child} still running"


def test_output_printed_before_a_timeout_is_kept():
    result = script_run(sh("echo partial; echo oops >&2; sleep 30", timeout=1))
    assert result.stdout == "partial\n"
    assert result.stderr == "oops\n"


def test_should_cancel_stops_a_long_script_promptly():
    checks = []
    cancel_at = time.monotonic() + 1

    def should_cancel() -> bool:
        checks.append(time.monotonic())
        return time.monotonic() >= cancel_at

    result = script_run(sh("sleep 60", timeout=60), should_cancel=should_cancel, cancel_check_every=0.2)
    assert result.cancelled and not result.timed_out
    assert result.killed_by == "cancel"
    assert result.exit_code is None
    assert result.error() == "Cancelled"
    assert result.duration_ms < 10_000
    assert len(checks) >= 2


def test_an_exception_from_should_cancel_still_kills_the_script_and_cleans_up(tmp_path, sandbox_dir):
    pid_file = tmp_path / "script.pid"

    def should_cancel() -> bool:
        if pid_file.exists() and pid_file.read_text().strip():
            raise RuntimeError("database gone")
        return False

    with pytest.raises(RuntimeError, match="database gone"):
        script_run(sh('echo $$ > "$PID_FILE"; sleep 60', env={"PID_FILE": str(pid_file)}), should_cancel=should_cancel,
                   cancel_check_every=0.1)
    assert wait_until(lambda: gone(int(pid_file.read_text())))
    assert list(sandbox_dir.iterdir()) == []


# --- limits ---------------------------------------------------------------------------------------


def test_allocating_beyond_the_memory_limit_fails_and_says_so():
    result = script_run(argv(PYTHON, "-c", "b = bytearray(2_000_000_000)", memory_mb=256))
    assert not result.succeeded
    assert "MemoryError" in result.stderr
    assert "memory" in result.error().lower()
    assert "256 MB" in result.error()


def test_the_same_allocation_fits_under_a_larger_limit():
    result = script_run(argv(PYTHON, "-c", "b = bytearray(100_000_000)", memory_mb=512))
    assert result.succeeded, result.error()


def test_a_busy_loop_is_killed_by_the_cpu_limit():
    result = script_run(sh("while :; do :; done", cpu_seconds=1, timeout=30))
    assert result.killed_by == "cpu"
    assert not result.timed_out
    assert result.exit_code is None
    assert result.error() == "Killed: CPU time limit exceeded (1 s)"
    assert result.duration_ms < 20_000


def test_limits_are_applied_to_the_script_process():
    result = script_run(sh("ulimit -v; ulimit -t; ulimit -n; ulimit -f; ulimit -c", memory_mb=300, timeout=7.5))
    virtual_kb, cpu_s, files, file_blocks, core = result.stdout.split()
    assert int(virtual_kb) == 300 * 1024
    assert int(cpu_s) == 9  # ceil(7.5) + 1
    assert int(files) == 256
    assert int(file_blocks) * 512 == 64 * 1024 * 1024
    assert int(core) == 0


def test_writing_a_file_beyond_the_size_limit_is_killed_with_a_clear_error():
    result = script_run(argv("dd", "if=/dev/zero", "of=big", "bs=1M", "count=70"))
    assert result.killed_by == f"signal {int(signal.SIGXFSZ)}"
    assert result.error() == "Killed: file size limit exceeded (64 MB)"


def test_the_script_starts_with_no_signal_ignored():
    result = script_run(argv("grep", "SigIgn", "/proc/self/status"))
    label, mask = result.stdout.split()
    # Signals 1-31; 32 and above are real-time signals the C library keeps for itself, which a
    # parent (make, for one) may leave ignored and no program can reset.
    assert (label, int(mask, 16) & 0x7FFFFFFF) == ("SigIgn:", 0)


def test_a_script_killed_by_a_signal_reports_the_signal():
    result = script_run(argv(PYTHON, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"))
    assert result.exit_code is None
    assert result.killed_by == f"signal {int(signal.SIGUSR1)}"
    assert result.error() == f"Killed by signal {int(signal.SIGUSR1)} (SIGUSR1)"


def test_error_sentences_for_results_built_by_hand():
    base = {"stdout": "", "stderr": "", "timed_out": False, "cancelled": False, "duration_ms": 5,
            "network_isolated": True, "memory_mb": 512}
    assert ScriptResult(exit_code=None, killed_by="memory", **base).error() == "Killed: out of memory (limit 512 MB)"
    segfault = ScriptResult(exit_code=None, killed_by="signal 11", **base).error()
    assert segfault == "Killed by signal 11 (SIGSEGV), possibly the memory limit (limit 512 MB)"
    assert ScriptResult(exit_code=2, killed_by=None, **base).error() == "Exited with status 2"


# --- network --------------------------------------------------------------------------------------


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


CONNECT = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5); print('connected')"


@pytest.mark.skipif(not network_isolation_available(),
                    reason="network namespaces (unshare --net) are not permitted on this machine")
def test_without_network_a_script_cannot_reach_even_the_hosts_loopback(listening_port):
    result = script_run(argv(PYTHON, "-c", CONNECT, str(listening_port)))
    assert result.network_isolated
    assert not result.succeeded
    assert "connected" not in result.stdout
    assert "OSError" in result.stderr or "unreachable" in result.stderr


def test_with_network_allowed_the_same_connection_succeeds(listening_port):
    result = script_run(argv(PYTHON, "-c", CONNECT, str(listening_port), network=True))
    assert not result.network_isolated
    assert result.succeeded, result.error()
    assert result.stdout == "connected\n"


# --- threads --------------------------------------------------------------------------------------


def test_scripts_can_run_from_several_threads_at_once():
    results: dict[int, ScriptResult] = {}

    def run(index: int) -> None:
        results[index] = script_run(sh(f"sleep 0.5; echo {index}"))

    threads = [threading.Thread(target=run, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {index: result.stdout for index, result in results.items()} == {index: f"{index}\n" for index in range(4)}
