"""What the benchmarks share: the project's paths, the servers' environment, free ports, process memory,
manage.py."""

import os
import socket
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

BASE_DIR = Path(__file__).resolve().parent.parent
# Without DEBUG a server refuses to start with no vault key. A benchmark seals nothing it keeps, so one
# key made for this run serves its processes unless the environment names one.
VAULT_KEYS = os.environ.get("ATRIUM_VAULT_KEYS") or Fernet.generate_key().decode()

# The workflow the run benchmarks drive: an AI step, a judge that approves it, the end.
REVIEW_LOOP = """\
name: Review loop
start: draft
nodes:
  draft: {type: ai_agent, prompt: "Write about {{ context.topic }}", transitions: {done: review}}
  review:
    type: ai_judge
    prompt: "Judge {{ draft.output }}"
    verdicts: [approve, revise]
    maxIterations: 3
    transitions: {approve: done, revise: draft}
  done: {type: end, output: "{{ draft.output }}"}
"""
APPROVE = '{"verdict": "approve", "reasoning": "fine"}'


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a benchmark's server processes: production settings (DEBUG off) on
    `database_url`, quiet logs, no per-user call limits, plus `extra`."""
    return {**os.environ, "SECRET_KEY": "bench-only", "DEBUG": "0", "LOG_LEVEL": "WARNING",
            "PYTHONWARNINGS": "ignore::UserWarning", "DATABASE_URL": database_url, "ATRIUM_VAULT_KEYS": VAULT_KEYS,
            "ATRIUM_AUTH_FAILURE_LIMIT": "1000000", "ATRIUM_TOOL_CALLS_PER_MINUTE": "0", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mib(pid: int, field: str = "VmRSS") -> float:
    """A /proc memory figure (VmRSS now, VmHWM peak) of a process and its children, in MiB.
    Children count because gunicorn's workers do the serving."""
    total = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            total += int(line.split()[1])
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += int(memory_mib(int(child), field) * 1024)
    return total / 1024


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True,
                          capture_output=True, text=True).stdout


def processes_stop(processes: list[subprocess.Popen]) -> None:
    """Ask every process to stop, then kill those still running after 20 seconds."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
