"""runs.sandbox: script nodes run in a sandbox with a clean environment, limits, a private work directory
and no network unless asked. Every test starts real processes, in the sandbox in force (bubblewrap in CI;
tests/test_sandbox_escapes.py checks it is) or, where marked `both_modes`, also in subprocess mode;
bounds are generous."""

import os
import random
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from runs import sandbox
from runs.sandbox import (
    OUTPUT_CAP_BYTES,
    PROCESS_LIMIT,
    BundledFile,
    ScriptJob,
    ScriptResult,
    script_run,
)

# The system's interpreter: the server's own (a venv, pyenv under /root) is not inside the sandbox.
PYTHON = "python3"


def sh(script: str, **options) -> ScriptJob:
    return ScriptJob(script=script, command=None, timeout=options.pop("timeout", 20), env=options.pop("env", {}),
                     **options)


def argv(*command: str, **options) -> ScriptJob:
    return ScriptJob(script=None, command=list(command), timeout=options.pop("timeout", 20),
                     env=options.pop("env", {}), **options)


def marker() -> str:
    """A `sleep` duration no other process on the host uses, so the test can find its process by
    command line: inside a PID namespace, the pids a script sees mean nothing outside."""
    return f"{random.randint(300, 999)}.{random.randint(10**8, 10**9)}"


def host_processes(text: str) -> list[int]:
    """Live processes on the host whose command line contains `text`. A killed orphan may linger as a
    zombie when the container's init does not reap, so zombies do not count."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


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


@pytest.fixture(params=["bwrap", "subprocess"])
def both_modes(request, settings) -> str:
    """Runs the test in the bubblewrap sandbox and again in subprocess mode (which needs DEBUG on)."""
    settings.ATRIUM_SCRIPT_SANDBOX = request.param
    settings.DEBUG = request.param == "subprocess"
    assert sandbox.mode().name == request.param
    return request.param


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


def test_the_node_env_is_passed_and_the_server_environment_is_not(monkeypatch, both_modes):
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


def test_a_timeout_kills_the_script_and_the_children_it_spawned(both_modes):
    child = marker()
    started = time.monotonic()
    result = script_run(sh(f"sleep {child} & sleep 30", timeout=1))
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.cancelled
    assert result.killed_by == "timeout"
    assert result.exit_code is None
    assert result.error() == "Timed out after 1 s"
    assert elapsed < 8
    assert wait_until(lambda: not host_processes(f"sleep {child}")), "the child still runs"


def test_a_script_ignoring_sigterm_is_still_killed_after_the_grace():
    started = time.monotonic()
    result = script_run(sh("trap '' TERM; sleep 30", timeout=1))
    assert result.timed_out
    assert time.monotonic() - started < 8


def test_background_children_are_killed_when_the_script_exits(both_modes):
    child = marker()
    result = script_run(sh(f"sleep {child} > /dev/null 2>&1 & echo done"))
    assert result.succeeded
    assert result.stdout == "done\n"
    assert wait_until(lambda: not host_processes(f"sleep {child}")), "the child still runs"


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


def test_an_exception_from_should_cancel_still_kills_the_script_and_cleans_up(sandbox_dir):
    script = marker()

    def should_cancel() -> bool:
        if host_processes(f"sleep {script}"):
            raise RuntimeError("database gone")
        return False

    with pytest.raises(RuntimeError, match="database gone"):
        script_run(sh(f"sleep {script}", timeout=60), should_cancel=should_cancel, cancel_check_every=0.1)
    assert wait_until(lambda: not host_processes(f"sleep {script}"))
    assert list(sandbox_dir.iterdir()) == []


# --- limits ---------------------------------------------------------------------------------------


def test_allocating_beyond_the_memory_limit_fails_and_says_so(both_modes):
    result = script_run(argv(PYTHON, "-c", "b = bytearray(2_000_000_000)", memory_mb=256))
    assert not result.succeeded
    assert "MemoryError" in result.stderr
    assert "memory" in result.error().lower()
    assert "256 MB" in result.error()


def test_the_same_allocation_fits_under_a_larger_limit():
    result = script_run(argv(PYTHON, "-c", "b = bytearray(100_000_000)", memory_mb=512))
    assert result.succeeded, result.error()


def test_a_busy_loop_is_killed_by_the_cpu_limit(both_modes):
    result = script_run(sh("while :; do :; done", cpu_seconds=1, timeout=30))
    assert result.killed_by == "cpu"
    assert not result.timed_out
    assert result.exit_code is None
    assert result.error() == "Killed: CPU time limit exceeded (1 s)"
    assert result.duration_ms < 20_000


def test_limits_are_applied_to_the_script_process(both_modes):
    result = script_run(sh("ulimit -v; ulimit -t; ulimit -n; ulimit -f; ulimit -c", memory_mb=300, timeout=7.5))
    virtual_kb, cpu_s, files, file_blocks, core = result.stdout.split()
    assert int(virtual_kb) == 300 * 1024
    assert int(cpu_s) == 9  # ceil(7.5) + 1
    assert int(files) == 256
    assert int(file_blocks) * 512 == 64 * 1024 * 1024
    assert int(core) == 0


def test_the_process_limit_is_set_in_the_sandbox():
    result = script_run(argv("grep", "Max processes", "/proc/self/limits"))
    assert result.stdout.split()[2:4] == [str(PROCESS_LIMIT), str(PROCESS_LIMIT)]


def test_writing_a_file_beyond_the_size_limit_is_killed_with_a_clear_error(both_modes):
    result = script_run(argv("dd", "if=/dev/zero", "of=big", "bs=1M", "count=70"))
    assert result.killed_by == f"signal {int(signal.SIGXFSZ)}"
    assert result.error() == "Killed: file size limit exceeded (64 MB)"


def test_the_script_starts_with_no_signal_ignored(both_modes):
    result = script_run(argv("grep", "SigIgn", "/proc/self/status"))
    label, mask = result.stdout.split()
    # Signals 1-31; 32 and above are real-time signals the C library keeps for itself, which a
    # parent (make, for one) may leave ignored and no program can reset.
    assert (label, int(mask, 16) & 0x7FFFFFFF) == ("SigIgn:", 0)


def test_a_script_killed_by_a_signal_reports_the_signal(both_modes):
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


def test_without_network_a_script_cannot_reach_even_the_hosts_loopback(listening_port, both_modes):
    result = script_run(argv(PYTHON, "-c", CONNECT, str(listening_port)))
    assert result.network_isolated
    assert not result.succeeded
    assert "connected" not in result.stdout
    # The sandbox has a loopback of its own (bwrap brings it up; unshare leaves it down).
    assert "Connection refused" in result.stderr or "unreachable" in result.stderr


def test_with_network_allowed_the_same_connection_succeeds(listening_port, both_modes):
    result = script_run(argv(PYTHON, "-c", CONNECT, str(listening_port), network=True))
    assert not result.network_isolated
    assert result.succeeded, result.error()
    assert result.stdout == "connected\n"


# --- threads --------------------------------------------------------------------------------------


def test_scripts_can_run_from_several_threads_at_once_each_as_its_own_uid():
    results: dict[int, ScriptResult] = {}

    def run(index: int) -> None:
        results[index] = script_run(sh(f"sleep 0.5; echo {index} $(id -u)"))

    threads = [threading.Thread(target=run, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    lines = {index: result.stdout.split() for index, result in results.items()}
    assert {index: words[0] for index, words in lines.items()} == {index: str(index) for index in range(4)}
    # One uid per sandbox running at the same time, so RLIMIT_NPROC and signals stay per sandbox.
    assert len({words[1] for words in lines.values()}) == 4


# --- the mode in force ----------------------------------------------------------------------------


def test_bubblewrap_is_the_mode_in_force_by_default():
    current = sandbox.mode()
    assert current.name == "bwrap"
    assert "bubblewrap" in current.reason
    assert sandbox.unavailable_reason() is None


def test_subprocess_mode_runs_scripts_as_the_servers_user_when_debug_is_on(settings):
    settings.ATRIUM_SCRIPT_SANDBOX, settings.DEBUG = "subprocess", True
    assert sandbox.mode().name == "subprocess"
    assert sandbox.unavailable_reason() is None
    result = script_run(sh("id -u"))
    assert result.succeeded
    assert result.stdout == f"{os.getuid()}\n"


def test_subprocess_mode_is_refused_with_debug_off_and_nothing_runs(settings, tmp_path, sandbox_dir):
    settings.ATRIUM_SCRIPT_SANDBOX, settings.DEBUG = "subprocess", False
    witness = tmp_path / "ran"
    assert sandbox.mode().name == "unavailable"
    result = script_run(sh(f"touch {witness}"))
    assert not result.succeeded
    assert result.refused == sandbox.unavailable_reason()
    assert result.error() == ("Script nodes cannot run: ATRIUM_SCRIPT_SANDBOX=subprocess is only for a local "
                              "single-user server with DEBUG on. Install bubblewrap (apt-get install bubblewrap) "
                              "and unset it.")
    assert result.output() == {"stdout": "", "stderr": "", "exitCode": None}
    assert not witness.exists()
    assert not sandbox_dir.exists()


def test_without_bubblewrap_script_nodes_are_refused_saying_what_to_install(monkeypatch, tmp_path, sandbox_dir):
    monkeypatch.setattr(sandbox, "TOOLS_PATH", str(tmp_path / "empty"))
    witness = tmp_path / "ran"
    assert sandbox.mode().name == "unavailable"
    result = script_run(sh(f"touch {witness}"))
    assert not result.succeeded and result.exit_code is None
    assert result.error() == ("Script nodes need bubblewrap, which is not installed: apt-get install bubblewrap "
                              "(a local single-user server with DEBUG on may set ATRIUM_SCRIPT_SANDBOX=subprocess "
                              "instead).")
    assert sandbox.unavailable_reason() == result.error()
    assert not witness.exists()
    assert not sandbox_dir.exists()
