"""Running a workflow's script node inside a sandbox.

Every run gets a fresh private directory holding the workflow's bundled files (its working directory,
HOME and $ATRIUM_WORKFLOW_DIR), removed afterwards in every case, and the mode in force (`mode()`)
decides what surrounds it.

**bwrap** (the default, and the only mode a hosted server runs scripts in). bubblewrap starts the
script in fresh PID, mount, IPC, UTS and (unless the job asks for the network) network namespaces,
with --die-with-parent and --new-session, an environment built from nothing (--clearenv), and a
filesystem made only of read-only /usr, /bin, /lib*, the few /etc files that sh and common tools
need, a /proc of the sandbox's own PID namespace, a minimal /dev, small tmpfs /tmp and /dev/shm, and
the private directory. The project, var/, the database, the venv, /root, /home and other processes
do not exist in there; where the project or the venv lies under /usr it is covered by an empty tmpfs.
Inside, `prlimit` (util-linux) sets the resource limits (the server's Python is not in the sandbox to
do it) and a few lines of Perl (perl-base is part of every Debian system) start the program and
report its real wait status on a pipe: bwrap itself turns "killed by signal N" into exit status
128+N, which would make an `exit 137` and a SIGKILL look alike.

The uid outside the sandbox is never the server's. Running as root, bwrap creates no user namespace
(in one, the sandbox's uid would map back to root outside) and `setpriv` switches to a uid of its own,
with no groups, no capabilities, an empty bounding set and no_new_privs, just before the program
starts. With the server's uid, anything the mount namespace let through by mistake (a root-owned
0600 file, a socket) would be open to the script with the server's rights, and RLIMIT_NPROC would
not count at all for root. A uid that owns nothing on the host can read only world-readable files of
what is mounted, can signal nothing outside, and RLIMIT_NPROC counts its processes alone. Each
concurrent sandbox takes its own uid, UID_BASE + slot, claimed with flock on SLOT_DIR/<slot>.lock
across every server process on the host, so the process limit is per sandbox and two sandboxes can
never signal each other; a slot whose uid still has a process is skipped. UID_BASE lies in a range
systemd leaves unused (1879048192-2147483647): no system user, login user or container range owns it.

When the server does not run as root, bwrap uses an unprivileged user namespace (the kernel must allow
them: kernel.unprivileged_userns_clone, and on Ubuntu an AppArmor profile for bwrap). The namespaces,
the filesystem, the environment and the limits are the same, and RLIMIT_NPROC still counts only the
sandbox's processes (Linux 5.14 and later count it per user namespace); but outside the sandbox its
processes keep the server's uid, so the mount namespace alone keeps them from the server's files.

**subprocess**, only when ATRIUM_SCRIPT_SANDBOX=subprocess and DEBUG is on (a local, single-user
server, e.g. on a machine without bubblewrap): the script is a plain child process of the server with
a clean environment, the same limits, its own session and, where `unshare --net` works, no network.
It runs as the server's user and can read what that user can read, and a process that calls setsid
itself survives the kill. Limits are set by a tiny launcher (`_LAUNCHER`) run by the server's
interpreter with -I -S, not by preexec_fn, which can deadlock in a threaded parent.

Otherwise (no bubblewrap, or it cannot create namespaces here) script nodes are refused:
`unavailable_reason()` says why and what to install, and `script_run` returns a failed result with
that reason instead of running anything.

A job may carry an `rpc` handler: the one way out of the sandbox, for a program that needs the server
(a skill calling its caller's integrations). Before the sandbox starts, a Unix socket is made in the
private directory, so it is inside at the path $ATRIUM_RPC_SOCKET names, owned like the rest of the
directory by the sandbox's uid, mode 0600. (That path may be longer than a socket address allows:
clients connect through an O_PATH descriptor of its directory, /proc/self/fd/N/NAME, as the server
binds it.) The thread that runs the job serves it between reads of the program's output: each
newline-delimited JSON object goes to the handler, and its reply (a JSON object; the sandbox's own
refusals are `{"error": {"code", "message"}}`) is written back as one line. Served on that thread, the
handler runs where script_run was called, with that thread's database connection. Bounded:
RPC_REQUEST_BYTES per request, RPC_CALLS per run, RPC_CONNECTIONS at once, and no call after the job's
timeout; a call in progress is not interrupted, so the handler bounds its own calls, and the
timeout's kill waits for the call to end.

Timeout and cancel kill the sandbox's PID 1 (found through bwrap's --json-status-fd and held by a
pidfd, so the kill cannot reach a recycled pid), which ends every process in the PID namespace,
including those that called setsid. The same happens when the program exits on its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import resource
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
OUTPUT_CAP_BYTES = MIB  # per stream; the head is kept
FILE_SIZE_LIMIT_BYTES = 64 * MIB
OPEN_FILES_LIMIT = 256
# RLIMIT_NPROC counts threads too, so a JVM or a thread pool needs some room.
PROCESS_LIMIT = 128
TMPFS_BYTES = 64 * MIB  # each of the sandbox's /tmp and /dev/shm
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Where the server looks for bwrap, setpriv, prlimit and perl: the system's own directories only.
TOOLS_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
UID_BASE = 1_900_000_000
UID_SLOTS = 1000
SLOT_DIR = Path("/run/atrium-sandbox")
TERM_GRACE_SECONDS = 0.5
# After the kill, how long to wait for the pipes to close and the sandbox to be gone. Only a process
# that escaped (subprocess mode: setsid) can hold the pipes open longer, and it must not hang the caller.
DRAIN_SECONDS = 2.0
PROTECTED_ENV = ("ATRIUM_WORKFLOW_DIR", "ROSCOE_WORKFLOW_DIR", "HOME")
INSTALL_HINT = "apt-get install bubblewrap"
RPC_SOCKET = "atrium-rpc.sock"  # in the private directory
RPC_ENV = "ATRIUM_RPC_SOCKET"
RPC_REQUEST_BYTES = MIB
RPC_REPLY_BYTES = 8 * MIB
RPC_CALLS = 100
RPC_CONNECTIONS = 4
# How long a reply may wait for the program to read it before its connection is dropped.
RPC_SEND_SECONDS = 5.0

# The parts of /etc that the C library, sh and common tools read. Everything else there (shadow, ssh
# keys, the server's own configuration) stays out; passwd and group are written for the sandbox.
ETC_ENTRIES = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
    "host.conf", "hosts", "resolv.conf", "gai.conf", "services", "protocols", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates", "mime.types", "os-release", "debian_version", "perl", "python3", "inputrc", "shells",
)
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

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

# Inside bwrap: argv is STATUS_FD program args...  Resets every signal to its default (the same reason
# as in _LAUNCHER), runs the program as its child and writes the child's raw wait status to STATUS_FD,
# which the program itself never gets. exec failures read like a shell's.
_REPORTER = """\
my $fd = shift @ARGV;
open(my $status, ">&=", $fd) or die "status pipe: $!\\n";
$SIG{$_} = "DEFAULT" for keys %SIG;
my $pid = fork();
die "fork: $!\\n" unless defined $pid;
if ($pid == 0) {
    close($status);
    exec { $ARGV[0] } @ARGV;
    print STDERR "$ARGV[0]: $!\\n";
    exit($!{ENOENT} ? 127 : 126);
}
waitpid($pid, 0);
my $raw = $?;
print $status "$raw\\n";
close($status);
exit(($raw & 127) ? 128 + ($raw & 127) : $raw >> 8);
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
    # Serves the program's requests (see the module docstring). Jobs are never sent to a worker
    # (tasks take a row's id and build the job there), so it never needs to be serialisable.
    rpc: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, compare=False, repr=False)

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
    # Set when nothing ran because no sandbox is available here: the sentence saying why.
    refused: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled and self.refused is None

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
        if self.refused is not None:
            return self.refused
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


# --- which mode is in force -----------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxMode:
    name: str  # "bwrap", "subprocess" or "unavailable"
    reason: str  # one sentence: what scripts run under, or why they cannot run


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    prlimit: str
    perl: str
    setpriv: str | None  # None when the server is not root: bwrap then makes a user namespace


def mode() -> SandboxMode:
    """Which sandbox script nodes run in here, and why. Reads ATRIUM_SCRIPT_SANDBOX and DEBUG on every
    call; whether bubblewrap works is probed once per process."""
    if getattr(settings, "ATRIUM_SCRIPT_SANDBOX", "bwrap") == "subprocess":
        if settings.DEBUG:
            return SandboxMode("subprocess", "ATRIUM_SCRIPT_SANDBOX=subprocess with DEBUG on: scripts run as "
                                             "the server's user with a clean environment and limits, and can read "
                                             "what that user can read.")
        return SandboxMode("unavailable", "Script nodes cannot run: ATRIUM_SCRIPT_SANDBOX=subprocess is only for "
                                          "a local single-user server with DEBUG on. Install bubblewrap "
                                          f"({INSTALL_HINT}) and unset it.")
    tools = _tools()
    if isinstance(tools, str):
        return SandboxMode("unavailable", tools)
    failure = _bwrap_probe(tools)
    if failure is not None:
        return SandboxMode("unavailable", failure)
    if tools.setpriv is not None:
        return SandboxMode("bwrap", f"bubblewrap as root: each script runs as its own uid ({UID_BASE}+), without "
                                    "capabilities, in fresh namespaces on a read-only system.")
    return SandboxMode("bwrap", "bubblewrap in an unprivileged user namespace: the server is not root, so scripts "
                                f"keep its uid ({os.getuid()}) outside the sandbox; the namespaces and the read-only "
                                "filesystem contain them.")


def unavailable_reason() -> str | None:
    """None when script nodes can run here; otherwise the sentence a run that reaches one fails with."""
    current = mode()
    return current.reason if current.name == "unavailable" else None


def _tools() -> _Tools | str:
    """The programs the bwrap mode needs, or the sentence saying which to install."""
    def find(name: str) -> str | None:
        return shutil.which(name, path=TOOLS_PATH)

    bwrap = find("bwrap")
    if bwrap is None:
        return (f"Script nodes need bubblewrap, which is not installed: {INSTALL_HINT} "
                "(a local single-user server with DEBUG on may set ATRIUM_SCRIPT_SANDBOX=subprocess instead).")
    root = os.geteuid() == 0
    prlimit, setpriv, perl = find("prlimit"), find("setpriv") if root else None, find("perl")
    if prlimit is None or (root and setpriv is None):
        return "Script nodes need prlimit and setpriv from util-linux: apt-get install util-linux."
    if perl is None:
        return "Script nodes need perl: apt-get install perl-base."
    return _Tools(bwrap=bwrap, prlimit=prlimit, perl=perl, setpriv=setpriv)


@cache
def _bwrap_probe(tools: _Tools) -> str | None:
    """Start one trivial sandbox; None when it worked, else why not. Two threads probing at once is
    harmless."""
    workdir = Path(tempfile.mkdtemp(prefix="atrium-probe-"))
    try:
        job = ScriptJob(script=None, command=["true"], timeout=20, env={})
        result = _execute(job, workdir, None, 0.05, 1.0, tools)
    except OSError as exc:
        result = None
        detail = str(exc)
    finally:
        _workdir_remove(workdir)
    if result is not None:
        if result.exit_code == 0:
            return None
        detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.error() or ""
    logger.warning("Script sandbox: bubblewrap cannot start a sandbox here: %s", detail)
    return (f"Script nodes cannot run: bubblewrap is installed but cannot create the sandbox here ({detail}). "
            "Run the worker as root where namespaces are allowed, or as a user allowed unprivileged user "
            "namespaces.")


# --- the bwrap command line -----------------------------------------------------------------------


def _system_mounts() -> tuple[list[str], list[Path]]:
    """bwrap options for /usr, /bin, /lib* and the chosen /etc entries, and the trees they bind."""
    options, roots = ["--ro-bind", "/usr", "/usr"], [Path("/usr")]
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            options += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            options += ["--ro-bind", str(path), str(path)]
            roots.append(path)
    options += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/etc/ssl"]
    for entry in ETC_ENTRIES:
        options += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    options += ["--symlink", "../proc/self/mounts", "/etc/mtab"]
    return options, roots


def _masked(roots: Sequence[Path]) -> list[str]:
    """The server's own trees, when they lie under a bound system directory (a venv or a checkout in
    /usr/local), covered by an empty tmpfs."""
    hidden = {Path(settings.BASE_DIR).resolve()}
    if sys.prefix != sys.base_prefix:
        hidden.add(Path(sys.prefix).resolve())
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]).startswith("/"):
        hidden.add(Path(database["NAME"]).resolve().parent)
    options = []
    for path in sorted(hidden):
        if any(path.is_relative_to(root) for root in roots) and path.is_dir():
            options += ["--tmpfs", str(path)]
    return options


def _workdir_mount(workdir: Path) -> list[str]:
    """The private directory at its own path, its parents made as plain traversable directories."""
    options = []
    for parent in reversed(workdir.parents[:-1]):
        if parent != Path("/tmp"):
            options += ["--perms", "0755", "--dir", str(parent)]
    return [*options, "--bind", str(workdir), str(workdir), "--chdir", str(workdir)]


def _account_files(uid: int, home: Path) -> tuple[bytes, bytes]:
    passwd = (f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:Atrium script:{home}:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    group = f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n"
    return passwd.encode(), group.encode()


def _prlimit_options(job: ScriptJob) -> list[str]:
    """prlimit options; a hard limit is never asked above the current one, which only CAP_SYS_RESOURCE
    could raise. The sandbox inherits the server's limits."""
    memory = job.memory_mb * MIB
    cpu = job.cpu_limit
    wanted = [
        ("--as", resource.RLIMIT_AS, memory, memory),
        # Hard one second above soft: at the soft limit the kernel sends SIGXCPU, which we can name;
        # with equal limits SIGKILL arrives at the same moment and hides it.
        ("--cpu", resource.RLIMIT_CPU, cpu, cpu + 1),
        ("--nofile", resource.RLIMIT_NOFILE, OPEN_FILES_LIMIT, OPEN_FILES_LIMIT),
        ("--fsize", resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES),
        ("--core", resource.RLIMIT_CORE, 0, 0),
        # Per sandbox: its uid (as root) or its user namespace (otherwise) is its own.
        ("--nproc", resource.RLIMIT_NPROC, PROCESS_LIMIT, PROCESS_LIMIT),
    ]
    options = []
    for flag, which, soft, hard in wanted:
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY:
            hard = min(hard, current)
        options.append(f"{flag}={min(soft, hard)}:{hard}")
    return options


def _bwrap_options(job: ScriptJob, workdir: Path, env: dict[str, str], uid: int | None,
                   accounts: tuple[int, int]) -> list[str]:
    if uid is not None:
        # No user namespace: inside one, the sandbox's uid would be root's outside. setpriv (started
        # with just the capabilities it needs) switches to the sandbox's own uid instead.
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not job.network:
            namespaces.append("--unshare-net")
        capabilities = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                        "--cap-add", "CAP_SETPCAP"]
    else:
        namespaces = ["--unshare-all", *(["--share-net"] if job.network else [])]
        capabilities = ["--cap-drop", "ALL"]
    system, roots = _system_mounts()
    environment = ["--clearenv"]
    for name, value in env.items():
        environment += ["--setenv", name, value]
    return [
        *namespaces, "--die-with-parent", "--new-session", "--hostname", "sandbox", *capabilities, *environment,
        *system, "--perms", "0644", "--ro-bind-data", str(accounts[0]), "/etc/passwd",
        "--perms", "0644", "--ro-bind-data", str(accounts[1]), "/etc/group",
        *_masked(roots), "--proc", "/proc", "--dev", "/dev",
        "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
        "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm",
        *_workdir_mount(workdir), "--remount-ro", "/",
    ]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# --- uids, one per concurrent sandbox -------------------------------------------------------------


def _processes_of(uid: int) -> list[int]:
    """Live (not zombie) processes whose real uid is `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 ").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _uid_claimed() -> Iterator[int]:
    """A uid no other sandbox on this host holds while the block runs. The flock ends with the
    process, so a crashed server frees its slots."""
    SLOT_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    for slot in range(UID_SLOTS):
        fd = os.open(SLOT_DIR / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        uid = UID_BASE + slot
        if _processes_of(uid):
            # Left over by a run whose cleanup did not finish: its uid is not handed to another script.
            logger.warning("Script sandbox: uid %s still has processes; slot %s skipped", uid, slot)
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise OSError(f"all {UID_SLOTS} sandbox uids are in use")


def _chown_tree(root: Path, uid: int) -> None:
    """Hand the private directory to the sandbox's uid. bwrap, still uid 0 but without
    CAP_DAC_OVERRIDE, must enter it for --chdir, so its group stays root's and may traverse it."""
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(directory, name), uid, uid, follow_symlinks=False)
    os.chown(root, uid, 0)
    root.chmod(0o710)


# --- the working directory ----------------------------------------------------------------------


def _validate(job: ScriptJob) -> None:
    if (job.script is None) == (job.command is None):
        raise ValueError("A script job needs exactly one of script and command")
    if job.command is not None and not job.command:
        raise ValueError("A script job's command is empty")
    if job.timeout <= 0 or job.memory_mb <= 0 or job.cpu_limit <= 0:
        raise ValueError("A script job's timeout, memory and CPU limits must be positive")
    for name, value in job.env.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"Invalid environment variable name: {name!r}")
        if "\0" in value:
            raise ValueError(f"Environment variable {name} contains a NUL character")
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


# --- the process ----------------------------------------------------------------------------------


def _environment(job: ScriptJob, workdir: Path) -> dict[str, str]:
    env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": str(workdir / "tmp")}
    env.update(job.env)
    # Set last so a node's env cannot point the script at another directory.
    env.update(dict.fromkeys(PROTECTED_ENV, str(workdir)))
    if job.rpc is not None:
        env[RPC_ENV] = str(workdir / RPC_SOCKET)
    return env


def _program(job: ScriptJob) -> list[str]:
    return ["/bin/sh", "-c", job.script] if job.script is not None else list(job.command or ())


class _Bwrap:
    """One bubblewrap sandbox: the uid it runs as, its pipes, and its PID 1."""

    def __init__(self, job: ScriptJob, workdir: Path, tools: _Tools) -> None:
        self.job, self.workdir, self.tools = job, workdir, tools
        self.network_isolated = not job.network
        self.uid: int | None = None
        self.pidfd: int | None = None
        self.fds: list[int] = []  # ours to close at the end
        self.status_read = self.json_read = -1
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> _Bwrap:
        if self.tools.setpriv is not None:
            self.uid = self.stack.enter_context(_uid_claimed())
            _chown_tree(self.workdir, self.uid)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for fd in self.fds:
            os.close(fd)
        self.stack.close()

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self.fds.append(read)
        return read, write

    def start(self) -> subprocess.Popen[bytes]:
        job, workdir, tools = self.job, self.workdir, self.tools
        self.json_read, json_write = self._pipe()
        self.status_read, status_write = self._pipe()
        passwd, group = _account_files(self.uid if self.uid is not None else os.getuid(), workdir)
        accounts = (_memfd("passwd", passwd), _memfd("group", group))
        options = [*_bwrap_options(job, workdir, _environment(job, workdir), self.uid, accounts),
                   "--json-status-fd", str(json_write)]
        # Options, the node's env among them, go through a file descriptor rather than argv, which
        # every user of the host can read in /proc.
        args = _memfd("args", b"".join(option.encode() + b"\0" for option in options))
        switch = [] if self.uid is None else [
            tools.setpriv or "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        argv = [tools.bwrap, "--args", str(args), "--", *switch, tools.prlimit, *_prlimit_options(job), "--",
                tools.perl, "-e", _REPORTER, "--", str(status_write), *_program(job)]
        passed = (args, *accounts, json_write, status_write)
        try:
            proc = subprocess.Popen(argv, cwd="/", env={}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=passed)
        finally:
            for fd in passed:
                os.close(fd)
        self.pidfd = _pid1(self.json_read)
        if self.pidfd is not None:
            self.fds.append(self.pidfd)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], pipes: _Pipes, poll_interval: float) -> None:
        """Nothing to wait for: killing PID 1 gives no process in the namespace a grace anyway."""

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        # bwrap outside the namespace; --die-with-parent makes PID 1 follow it even without the pidfd.
        _kill_group(proc.pid, signal.SIGKILL)

    def settle(self) -> None:
        """Wait for PID 1 to be gone: the kernel ends every other process of the namespace first."""
        if self.pidfd is not None and not select.select([self.pidfd], [], [], DRAIN_SECONDS)[0]:
            logger.warning("Script sandbox: PID 1 of a sandbox was still running after the kill")
        if self.uid is not None and _processes_of(self.uid):
            logger.warning("Script sandbox: uid %s still has processes after its run", self.uid)

    def returncode(self, returncode: int) -> int:
        """The program's own status as the reporter saw it; bwrap's (128 + N for signal N) otherwise."""
        os.set_blocking(self.status_read, False)
        with contextlib.suppress(BlockingIOError):
            reported = os.read(self.status_read, 64).strip()
            if reported.isdigit():
                return os.waitstatus_to_exitcode(int(reported))
        return returncode


def _pid1(json_read: int, seconds: float = 10) -> int | None:
    """A pidfd for the sandbox's PID 1, from the first line bwrap writes to --json-status-fd (before the
    program starts). None when bwrap failed before that; the pipe stays open, bwrap writes to it again."""
    data = b""
    deadline = time.monotonic() + seconds
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([json_read], [], [], remaining)[0]:
            return None
        chunk = os.read(json_read, 4096)
        if not chunk:
            return None
        data += chunk
    try:
        pid = json.loads(data.split(b"\n", 1)[0]).get("child-pid")
    except (ValueError, AttributeError):
        return None
    if not isinstance(pid, int):
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


# --- subprocess mode ------------------------------------------------------------------------------


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


def _rlimits(job: ScriptJob) -> list[str]:
    memory = job.memory_mb * MIB
    cpu = job.cpu_limit
    return [
        f"RLIMIT_AS:{memory}:{memory}",
        f"RLIMIT_CPU:{cpu}:{cpu + 1}",
        f"RLIMIT_NOFILE:{OPEN_FILES_LIMIT}:{OPEN_FILES_LIMIT}",
        f"RLIMIT_FSIZE:{FILE_SIZE_LIMIT_BYTES}:{FILE_SIZE_LIMIT_BYTES}",
        "RLIMIT_CORE:0:0",
        # No RLIMIT_NPROC: here it counts every process of the server's user, the server's own included.
    ]


class _Plain:
    """A plain child process of the server (subprocess mode)."""

    def __init__(self, job: ScriptJob, workdir: Path) -> None:
        self.job, self.workdir = job, workdir
        self.isolation = () if job.network else _unshare_prefix()
        self.network_isolated = bool(self.isolation)

    def __enter__(self) -> _Plain:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def start(self) -> subprocess.Popen[bytes]:
        argv = [*self.isolation, sys.executable, "-I", "-S", "-c", _LAUNCHER, *_rlimits(self.job), "--",
                *_program(self.job)]
        return subprocess.Popen(argv, cwd=self.workdir, env=_environment(self.job, self.workdir),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)

    def stop(self, proc: subprocess.Popen[bytes], pipes: _Pipes, poll_interval: float) -> None:
        """SIGTERM the group, then give the leader a short grace to exit (still reading its output)."""
        _kill_group(proc.pid, signal.SIGTERM)
        grace_end = time.monotonic() + TERM_GRACE_SECONDS
        while not _exited(proc.pid) and time.monotonic() < grace_end:
            pipes.pump(min(poll_interval, grace_end - time.monotonic()))

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        # Also when the leader exited on its own: background children it left would otherwise keep
        # running and keep the pipes open.
        _kill_group(proc.pid, signal.SIGKILL)

    def settle(self) -> None:
        pass

    def returncode(self, returncode: int) -> int:
        return returncode


# --- running and watching -------------------------------------------------------------------------


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


def _rpc_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


_RPC_TOO_LARGE = _rpc_error("request_too_large", f"A request may be at most {RPC_REQUEST_BYTES} bytes of JSON.")


class _Rpc:
    """The host's end of a job's rpc channel: a listening Unix socket in the private directory and
    the connections the program made to it, served from _Pipes' selector."""

    def __init__(self, handler: Callable[[dict[str, Any]], dict[str, Any]], workdir: Path) -> None:
        self.handler = handler
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = workdir / RPC_SOCKET
        # Bound through the directory's descriptor: a socket's own path may have only 107 bytes.
        directory = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.listener.bind(f"/proc/self/fd/{directory}/{RPC_SOCKET}")
            # Only its owner may connect: once _chown_tree ran, the sandbox's uid (or, in a user
            # namespace, the server's own, which is the sandbox's inside).
            path.chmod(0o600)
            self.listener.listen(RPC_CONNECTIONS)
        except OSError:
            self.listener.close()
            raise
        finally:
            os.close(directory)
        self.listener.setblocking(False)
        self.buffers: dict[socket.socket, bytearray] = {}
        self.oversized: set[socket.socket] = set()  # discarding the rest of a too large request
        self.calls = 0
        self.deadline = math.inf
        self.selector: selectors.BaseSelector | None = None

    def attach(self, selector: selectors.BaseSelector, deadline: float) -> None:
        self.selector, self.deadline = selector, deadline
        selector.register(self.listener, selectors.EVENT_READ, self._accept)

    def close(self) -> None:
        """Stop serving (again: harmless); the program's connections read end of file."""
        for sock in [*self.buffers, self.listener]:
            if self.selector is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(sock)
            sock.close()
        self.buffers.clear()
        self.selector = None

    def _accept(self, listener: socket.socket) -> None:
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.buffers) >= RPC_CONNECTIONS or self.selector is None:
            connection.close()
            return
        connection.settimeout(RPC_SEND_SECONDS)  # recv runs only when readable; sendall may wait
        self.buffers[connection] = bytearray()
        self.selector.register(connection, selectors.EVENT_READ, self._read)

    def _drop(self, connection: socket.socket) -> None:
        if self.selector is not None:
            self.selector.unregister(connection)
        self.buffers.pop(connection, None)
        self.oversized.discard(connection)
        connection.close()

    def _read(self, connection: socket.socket) -> None:
        if connection not in self.buffers:  # dropped earlier in the same round of events
            return
        try:
            chunk = connection.recv(65536)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(connection)
            return
        buffer = self.buffers[connection]
        # Past the job's timeout nothing more is answered: the program is about to be killed.
        while chunk and connection in self.buffers and time.monotonic() < self.deadline:
            line, newline, chunk = chunk.partition(b"\n")
            if connection in self.oversized:
                if newline:
                    self.oversized.discard(connection)
                    self._reply(connection, _RPC_TOO_LARGE)
                continue
            buffer += line
            if len(buffer) > RPC_REQUEST_BYTES:
                buffer.clear()
                if newline:
                    self._reply(connection, _RPC_TOO_LARGE)
                else:
                    # The rest of the line is read and dropped, so the connection stays in step.
                    self.oversized.add(connection)
                continue
            if newline:
                request = bytes(buffer)
                buffer.clear()
                self._reply(connection, self._answer(request))

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return _rpc_error("invalid_request", "A request is one JSON object on one line.")
        if not isinstance(request, dict):
            return _rpc_error("invalid_request", "A request is one JSON object on one line.")
        if self.calls >= RPC_CALLS:
            return _rpc_error("too_many_calls", f"A run may make at most {RPC_CALLS} calls.")
        self.calls += 1
        return self.handler(request)

    def _reply(self, connection: socket.socket, reply: dict[str, Any]) -> None:
        data = json.dumps(reply, separators=(",", ":")).encode() + b"\n"
        if len(data) > RPC_REPLY_BYTES:
            data = json.dumps(_rpc_error("reply_too_large", f"The reply was larger than {RPC_REPLY_BYTES} bytes."))
            data = data.encode() + b"\n"
        try:
            connection.sendall(data)
        except OSError:  # the program stopped reading, or went away
            self._drop(connection)


class _Pipes:
    """Reads stdout and stderr as data arrives, so a chatty process never blocks on a full pipe.
    The selector also serves the job's rpc channel, whose entries carry the callable to run."""

    def __init__(self, streams: dict[str, IO[bytes]]) -> None:
        self.selector = selectors.DefaultSelector()
        self.captures = {name: _Capture() for name in streams}
        for name, stream in streams.items():
            self.selector.register(stream, selectors.EVENT_READ, name)

    @property
    def open(self) -> bool:
        return any(isinstance(key.data, str) for key in self.selector.get_map().values())

    def pump(self, timeout: float) -> None:
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.selector.select(max(timeout, 0)):
            if callable(key.data):
                key.data(key.fileobj)
                continue
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
    tools: _Tools | None,
    rpc: _Rpc | None = None,
) -> ScriptResult:
    """Run the job in bwrap with `tools`, or as a plain subprocess when `tools` is None."""
    box: _Bwrap | _Plain = _Bwrap(job, workdir, tools) if tools is not None else _Plain(job, workdir)
    started = time.monotonic()
    with box:
        proc = box.start()
        assert proc.stdout is not None and proc.stderr is not None
        pipes = _Pipes({"stdout": proc.stdout, "stderr": proc.stderr})
        if rpc is not None:
            rpc.attach(pipes.selector, deadline=started + job.timeout)
        reason = None
        try:
            reason = _supervise(proc, pipes, job, should_cancel, poll_interval, cancel_check_every)
            if rpc is not None:
                rpc.close()  # a program being stopped gets no more answers (stop pumps for a grace)
            if reason is not None:
                box.stop(proc, pipes, poll_interval)
        finally:
            if rpc is not None:
                rpc.close()
            box.kill(proc)
            pipes.drain(DRAIN_SECONDS)
            returncode = proc.wait()
            pipes.close()
            box.settle()
        returncode = box.returncode(returncode)
    stdout, stderr = pipes.captures["stdout"].text(), pipes.captures["stderr"].text()
    return ScriptResult(
        exit_code=None if reason is not None or returncode < 0 else returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=reason == "timeout",
        cancelled=reason == "cancel",
        duration_ms=round((time.monotonic() - started) * 1000),
        killed_by=_killed_by(reason, returncode, stderr),
        network_isolated=box.network_isolated,
        timeout=job.timeout,
        memory_mb=job.memory_mb,
        cpu_seconds=job.cpu_limit,
    )


def _refused(job: ScriptJob, reason: str) -> ScriptResult:
    return ScriptResult(exit_code=None, stdout="", stderr="", timed_out=False, cancelled=False, duration_ms=0,
                        killed_by=None, network_isolated=False, timeout=job.timeout, memory_mb=job.memory_mb,
                        cpu_seconds=job.cpu_limit, refused=reason)


def script_run(
    job: ScriptJob,
    *,
    should_cancel: Callable[[], bool] | None = None,
    poll_interval: float = 0.1,
    cancel_check_every: float = 0.5,
) -> ScriptResult:
    """Run a script node's job in a fresh work directory inside the sandbox in force, and wait for it.
    When no sandbox is available (see mode()), nothing runs and the result is refused with the reason.
    Raises ValueError for an invalid job (including a bundled file path escaping the directory)."""
    _validate(job)
    current = mode()
    if current.name == "unavailable":
        return _refused(job, current.reason)
    tools = _tools() if current.name == "bwrap" else None
    if isinstance(tools, str):
        return _refused(job, tools)
    workdir = _workdir_make()
    rpc = None
    try:
        _files_write(workdir, job.files)
        # Made before the sandbox's uid is given the directory, so the socket is handed over with it.
        rpc = _Rpc(job.rpc, workdir) if job.rpc is not None else None
        return _execute(job, workdir, should_cancel, poll_interval, cancel_check_every, tools, rpc)
    finally:
        if rpc is not None:
            rpc.close()
        _workdir_remove(workdir)
