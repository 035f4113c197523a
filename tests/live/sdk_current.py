"""The official MCP SDK client of the current major version, in a venv of its own under var/.

The suite itself runs mcp 1.x (django-mcp-server pins it); tests/live/sdk/walk.py runs in this
venv as a subprocess and reports what it saw as JSON, and bench/ drives its load with it. Imports
nothing of Atrium's, so benchmarks can use it too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parents[2]
SDK_DIR = BASE_DIR / "tests" / "live" / "sdk"
VENV = BASE_DIR / "var" / "sdk-current"


def _installed_marker() -> Path:
    return VENV / ".installed"


def current_sdk_python() -> Path:
    """The venv's python, made (once per requirements file) when missing."""
    requirements = (SDK_DIR / "requirements.txt").read_text()
    python = VENV / "bin" / "python"
    if not (_installed_marker().exists() and _installed_marker().read_text() == requirements):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r",
                        str(SDK_DIR / "requirements.txt")], check=True, timeout=600)
        _installed_marker().write_text(requirements)
    return python


def walk(python: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run tests/live/sdk/walk.py with `args`; what it saw."""
    done = subprocess.run([str(python), str(SDK_DIR / "walk.py"), *args], capture_output=True, text=True,
                          timeout=180, env=env, cwd=BASE_DIR)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
