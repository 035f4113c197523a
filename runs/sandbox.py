"""Running a workflow's script node in a separate, limited process.

Each call gets a fresh temporary working directory holding the workflow's bundled files, a clean
environment (nothing of the server's: no SECRET_KEY, no DATABASE_URL), resource limits, its own
session so a timeout or cancel kills every process it started, and, where the OS allows, a network
namespace without a usable interface. The directory is removed afterwards in every case.

Limits are applied by a tiny Python launcher (`_LAUNCHER`) that sets them on itself and then execs
the user's program, rather than by `subprocess.Popen(preexec_fn=...)`: preexec_fn runs Python code
between fork and exec, which can deadlock when the parent has other threads (Celery thread pools,
threaded web workers), and this module is called from both. Without preexec_fn, subprocess does the
fork, setsid and exec in C, which is thread-safe. The launcher is the server's interpreter binary
started fresh with -I -S (no site, no PYTHON* variables) and it is replaced by the user's program at
exec, so user code never runs in the server's interpreter. `prlimit` would do the same job but is not
installed everywhere; sys.executable always is.

What this does not contain: a script runs as the server's user and can read what that user can read
(as root it could even raise its own hard limits back), and a process that calls setsid itself leaves
the process group and survives the kill.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
OUTPUT_CAP_BYTES = MIB  # per stream; the head is kept
FILE_SIZE_LIMIT_BYTES = 64 * MIB
OPEN_FILES_LIMIT = 256
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
TERM_GRACE_SECONDS = 0.5
# After the kill, how long to wait for the pipes to close. Only a process that escaped the group
# (setsid) can hold them open longer, and it must not hang the caller.
DRAIN_SECONDS = 2.0
PROTECTED_ENV = ("ATRIUM_WORKFLOW_DIR", "ROSCOE_WORKFLOW_DIR", "HOME")

# argv: RLIMIT_NAME:soft:hard ... -- program args...  Runs with -I -S, so only builtins are imported.
# A hard limit is never raised above the current one: without CAP_SYS_RESOURCE that would fail.
# Ignored signals survive exec: Python ignores SIGPIPE and SIGXFSZ at startup, and whatever started
# the server (make, a supervisor) may ignore others. All are reset, or `yes | head` would not end on
# SIGPIPE and the file size limit would not kill. Signals the C library keeps for itself refuse.
_LAUNCHER = """\
import os, resource, signal, sys
for number in range(1, signal.NSIG):
    try:
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
args = sys.argv[1:]
split = args.index("--")
for spec in args[:split]:
    name, soft, hard = spec.split(":")
    which = getattr(resource, name)
    current = resource.getrlimit(which)[1]
    hard = int(hard) if current == resource.RLIM_INFINITY else min(int(hard), current)
    resource.setrlimit(which, (min(int(soft), hard), hard))
program = args[split + 1:]
try:
    os.execvp(program[0], program)
except OSError as exc:
    sys.stderr.write(f"{program[0]}: {exc.strerror}\\n")
    sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""

_OUT_OF_MEMORY = re.compile(r"MemoryError|Cannot allocate memory|[Oo]ut of memory|bad_alloc")
# Signals that a failed allocation under RLIMIT_AS often ends in, though a plain bug can too.
_MEMORY_LIKE_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGKILL})


@dataclass(frozen=True)
class BundledFile:
    path: str  # relative to the workflow directory, e.g. "scripts/check.sh"
    content: str
    executable: bool


@dataclass(frozen=True)
class ScriptJob:
    script: str | None  # exactly one of script / command
    command: list[str] | None
    timeout: float  # seconds
    env: dict[str, str]  # node env, already rendered
    files: tuple[BundledFile, ...] = ()
    memory_mb: int = 512  # address-space limit
    cpu_seconds: int | None = None  # RLIMIT_CPU; default: ceil(timeout) + 1
    network: bool = False  # False: cut the network where the OS allows

    @property
    def cpu_limit(self) -> int:
        return self.cpu_seconds if self.cpu_seconds is not None else math.ceil(self.timeout) + 1


@dataclass(frozen=True)
class ScriptResult:
    exit_code: int | None  # None when killed (timeout, cancel, signal)
    stdout: str
    stderr: str
    timed_out: bool
    cancelled: bool
    duration_ms: int
    killed_by: str | None  # "timeout", "cancel", "memory", "cpu", "signal N" or None
    network_isolated: bool
    # The limits the job ran under, so error() can name them.
    timeout: float | None = None
    memory_mb: int | None = None
    cpu_seconds: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled

    def output(self) -> object:
        """stdout as JSON when the whole of it is a JSON value, else the raw streams and exit code."""
        text = self.stdout.strip()
        if text:
            try:
                return json.loads(text)
            except ValueError:
                pass
        return {"stdout": self.stdout, "stderr": self.stderr, "exitCode": self.exit_code}

    def error(self) -> str | None:
        """One sentence saying why the script failed, or None when it succeeded."""
        if self.succeeded:
            return None
        if self.cancelled:
            return "Cancelled"
        if self.timed_out:
            return "Timed out" + (f" after {self.timeout:g} s" if self.timeout is not None else "")
        if self.exit_code is None:
            return self._killed_error()
        status = f"Exited with status {self.exit_code}"
        if self.stderr.strip():
            status += f": {self._last_stderr_line()}"
        if _OUT_OF_MEMORY.search(self.stderr):
            return f"Out of memory{self._memory_limit()}. {status}"
        return status

    def _killed_error(self) -> str:
        if self.killed_by == "memory":
            return f"Killed: out of memory{self._memory_limit()}"
        if self.killed_by == "cpu":
            limit = f" ({self.cpu_seconds} s)" if self.cpu_seconds is not None else ""
            return f"Killed: CPU time limit exceeded{limit}"
        match = re.fullmatch(r"signal (\d+)", self.killed_by or "")
        if match is None:
            return "Killed"
        number = int(match.group(1))
        if number == signal.SIGXFSZ:
            return f"Killed: file size limit exceeded ({FILE_SIZE_LIMIT_BYTES // MIB} MB)"
        message = f"Killed by signal {number} ({_signal_name(number)})"
        if number in _MEMORY_LIKE_SIGNALS:
            message += f", possibly the memory limit{self._memory_limit()}"
        return message

    def _memory_limit(self) -> str:
        return f" (limit {self.memory_mb} MB)" if self.memory_mb is not None else ""

    def _last_stderr_line(self) -> str:
        return self.stderr.strip().splitlines()[-1].strip()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


# --- network isolation --------------------------------------------------------------------------


@cache
def _unshare_prefix() -> tuple[str, ...]:
    """The argv prefix that starts a program in a new, empty network namespace; () when unavailable.
    Probed once per process (two threads probing at once is harmless). Root can unshare directly;
    other users need a user namespace too, which kernels or container runtimes may forbid."""
    unshare = shutil.which("unshare", path=SANDBOX_PATH)
    if unshare is None:
        logger.warning("Script sandbox: unshare not found; scripts run with the network")
        return ()
    for flags in (("--net",), ("--net", "--map-root-user")):
        prefix = (unshare, *flags)
        try:
            probe = subprocess.run([*prefix, "true"], env={"PATH": SANDBOX_PATH}, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    logger.warning("Script sandbox: network namespaces are not permitted here; scripts run with the network")
    return ()


def network_isolation_available() -> bool:
    return bool(_unshare_prefix())


# --- the working directory ----------------------------------------------------------------------


def _validate(job: ScriptJob) -> None:
    if (job.script is None) == (job.command is None):
        raise ValueError("A script job needs exactly one of script and command")
    if job.command is not None and not job.command:
        raise ValueError("A script job's command is empty")
    if job.timeout <= 0 or job.memory_mb <= 0 or job.cpu_limit <= 0:
        raise ValueError("A script job's timeout, memory and CPU limits must be positive")
    for name in job.env:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"Invalid environment variable name: {name!r}")
    for bundled in job.files:
        _relative_path(bundled.path)


def _relative_path(path: str) -> PurePosixPath:
    """A bundled file's path, refused when it would land outside the work directory."""
    relative = PurePosixPath(path)
    if not path or "\0" in path or relative.is_absolute() or ".." in relative.parts or relative == PurePosixPath("."):
        raise ValueError(f"Bundled file path must stay inside the workflow directory: {path!r}")
    return relative


def _workdir_make() -> Path:
    base = getattr(settings, "ATRIUM_SANDBOX_DIR", None) or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="atrium-script-", dir=base))
    (workdir / "tmp").mkdir()
    return workdir


def _files_write(workdir: Path, files: Sequence[BundledFile]) -> None:
    for bundled in files:
        target = workdir / _relative_path(bundled.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(bundled.content, encoding="utf-8")
        target.chmod(0o755 if bundled.executable else 0o644)


def _workdir_remove(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)
    if not workdir.exists():
        return
    # A script may have left directories without write or search permission, which stops rmtree for
    # any user but root. Symlinks are skipped so that chmod never reaches outside the directory.
    for root, dirs, _ in os.walk(workdir):
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(workdir, ignore_errors=True)
    if workdir.exists():
        logger.warning("Script sandbox: could not remove %s", workdir)


# --- the process --------------------------------------------------------------------------------


def _environment(job: ScriptJob, workdir: Path) -> dict[str, str]:
    env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": str(workdir / "tmp")}
    env.update(job.env)
    # Set last so a node's env cannot point the script at another directory.
    env.update(dict.fromkeys(PROTECTED_ENV, str(workdir)))
    return env


def _rlimits(job: ScriptJob) -> list[str]:
    memory = job.memory_mb * MIB
    cpu = job.cpu_limit
    return [
        f"RLIMIT_AS:{memory}:{memory}",
        # The hard limit is one second above the soft one: at the soft limit the kernel sends SIGXCPU,
        # which we can name; with equal limits SIGKILL arrives at the same moment and hides it.
        f"RLIMIT_CPU:{cpu}:{cpu + 1}",
        f"RLIMIT_NOFILE:{OPEN_FILES_LIMIT}:{OPEN_FILES_LIMIT}",
        f"RLIMIT_FSIZE:{FILE_SIZE_LIMIT_BYTES}:{FILE_SIZE_LIMIT_BYTES}",
        "RLIMIT_CORE:0:0",
        # No RLIMIT_NPROC: it counts every process of the user, the server's own included.
    ]


def _argv(job: ScriptJob, isolation: tuple[str, ...]) -> list[str]:
    program = ["/bin/sh", "-c", job.script] if job.script is not None else list(job.command or ())
    return [*isolation, sys.executable, "-I", "-S", "-c", _LAUNCHER, *_rlimits(job), "--", *program]


class _Capture:
    """One output stream: the first OUTPUT_CAP_BYTES are kept, the rest counted and dropped."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = OUTPUT_CAP_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]

    def text(self) -> str:
        text = self.head.decode("utf-8", errors="replace")
        if self.total > len(self.head):
            text += f"\n[output truncated: kept the first {len(self.head)} of {self.total} bytes]"
        return text


class _Pipes:
    """Reads stdout and stderr as data arrives, so a chatty process never blocks on a full pipe."""

    def __init__(self, streams: dict[str, IO[bytes]]) -> None:
        self.selector = selectors.DefaultSelector()
        self.captures = {name: _Capture() for name in streams}
        for name, stream in streams.items():
            self.selector.register(stream, selectors.EVENT_READ, name)

    @property
    def open(self) -> bool:
        return bool(self.selector.get_map())

    def pump(self, timeout: float) -> None:
        if not self.open:
            time.sleep(timeout)
            return
        for key, _ in self.selector.select(max(timeout, 0)):
            chunk = os.read(key.fd, 65536)
            if chunk:
                self.captures[key.data].feed(chunk)
            else:
                self.selector.unregister(key.fileobj)
                key.fileobj.close()

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.open and time.monotonic() < deadline:
            self.pump(deadline - time.monotonic())

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()


def _exited(pid: int) -> bool:
    """Whether the process has exited, without reaping it: while it is an unreaped zombie its pid,
    which is also its process group id, cannot be reused, so killing the group stays safe."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _terminate(proc: subprocess.Popen[bytes], pipes: _Pipes, poll_interval: float) -> None:
    """SIGTERM the group, then give the leader a short grace to exit (still reading its output)."""
    _kill_group(proc.pid, signal.SIGTERM)
    grace_end = time.monotonic() + TERM_GRACE_SECONDS
    while not _exited(proc.pid) and time.monotonic() < grace_end:
        pipes.pump(min(poll_interval, grace_end - time.monotonic()))


def _supervise(
    proc: subprocess.Popen[bytes],
    pipes: _Pipes,
    job: ScriptJob,
    should_cancel: Callable[[], bool] | None,
    poll_interval: float,
    cancel_check_every: float,
) -> str | None:
    """Wait for the process to exit; returns "timeout" or "cancel" when it has to be killed instead."""
    start = time.monotonic()
    deadline = start + job.timeout
    next_cancel_check = start + cancel_check_every
    while not _exited(proc.pid):
        now = time.monotonic()
        if now >= deadline:
            return "timeout"
        if should_cancel is not None and now >= next_cancel_check:
            next_cancel_check = now + cancel_check_every
            if should_cancel():
                return "cancel"
        pipes.pump(min(poll_interval, deadline - now))
    return None


def _killed_by(reason: str | None, returncode: int, stderr: str) -> str | None:
    if reason is not None:
        return reason
    if returncode >= 0:
        return None
    number = -returncode
    if number == signal.SIGXCPU:
        return "cpu"
    if number in _MEMORY_LIKE_SIGNALS and _OUT_OF_MEMORY.search(stderr):
        return "memory"
    return f"signal {number}"


def _execute(
    job: ScriptJob,
    workdir: Path,
    should_cancel: Callable[[], bool] | None,
    poll_interval: float,
    cancel_check_every: float,
) -> ScriptResult:
    isolation = () if job.network else _unshare_prefix()
    started = time.monotonic()
    proc = subprocess.Popen(
        _argv(job, isolation), cwd=workdir, env=_environment(job, workdir), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    pipes = _Pipes({"stdout": proc.stdout, "stderr": proc.stderr})
    reason = None
    try:
        reason = _supervise(proc, pipes, job, should_cancel, poll_interval, cancel_check_every)
        if reason is not None:
            _terminate(proc, pipes, poll_interval)
    finally:
        # Also when the leader exited on its own: background children it left would otherwise keep
        # running and keep the pipes open.
        _kill_group(proc.pid, signal.SIGKILL)
        pipes.drain(DRAIN_SECONDS)
        returncode = proc.wait()
        pipes.close()
    stdout, stderr = pipes.captures["stdout"].text(), pipes.captures["stderr"].text()
    return ScriptResult(
        exit_code=None if reason is not None or returncode < 0 else returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=reason == "timeout",
        cancelled=reason == "cancel",
        duration_ms=round((time.monotonic() - started) * 1000),
        killed_by=_killed_by(reason, returncode, stderr),
        network_isolated=bool(isolation),
        timeout=job.timeout,
        memory_mb=job.memory_mb,
        cpu_seconds=job.cpu_limit,
    )


def script_run(
    job: ScriptJob,
    *,
    should_cancel: Callable[[], bool] | None = None,
    poll_interval: float = 0.1,
    cancel_check_every: float = 0.5,
) -> ScriptResult:
    """Run a script node's job in a fresh work directory and separate process, and wait for it.
    Raises ValueError for an invalid job (including a bundled file path escaping the directory)."""
    _validate(job)
    workdir = _workdir_make()
    try:
        _files_write(workdir, job.files)
        return _execute(job, workdir, should_cancel, poll_interval, cancel_check_every)
    finally:
        _workdir_remove(workdir)
