"""A real Atrium server (gunicorn, as `make run` starts it) in a subprocess, sharing the test database."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from django.db import connection
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import TEST_BROKER_URL

BASE_DIR = Path(__file__).resolve().parents[2]


class Tools:
    """One SDK client session's calls, answered as (isError, the JSON payload)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def __call__(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        result = await self.session.call_tool(tool, arguments)
        payload = json.loads(result.content[0].text)
        if not result.isError:
            assert result.structuredContent == payload
        return bool(result.isError), payload

    async def ok(self, tool: str, **arguments: Any) -> Any:
        error, payload = await self(tool, **arguments)
        assert not error, (tool, payload)
        return payload


@asynccontextmanager
async def sdk_session(mcp_url: str, token: str) -> AsyncIterator[ClientSession]:
    """An initialized session of the official SDK client, over Streamable HTTP with a bearer token."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, streamable_http_client(mcp_url, http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database pytest-django made, for processes the tests start."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": test_database_url(), "DEBUG": "0",
           "SECRET_KEY": os.environ.get("SECRET_KEY", "test-only-not-secret")}
    env.update(extra)
    return env


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    log: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@contextmanager
def serve(tmp_path: Path, *, ready: tuple[int, ...] = (200,), **env: str) -> Iterator[LiveServer]:
    """A server, once /healthz answers with one of `ready` (a test of a dependency that is down
    expects 503)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / f"server-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"],
            cwd=BASE_DIR, env=child_env(PORT=str(port), ATRIUM_PUBLIC_URL=url, **env), stdout=out, stderr=out,
            # Its own process group: a worker stuck in a request must not outlive the test (and, on
            # SQLite, hold the database's lock through the test's teardown).
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code in ready:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield LiveServer(url=url, process=process, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # The arbiter is gone; any worker it could not stop goes with its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


# The servers run tasks (script nodes) in-process; tests/live/test_run_worker.py drives a real worker.
@pytest.fixture
def live_atrium(transactional_db, tmp_path):
    """A shared (hosted) server: it never reads paths on its own disk for a client."""
    with serve(tmp_path, CELERY_BROKER_URL="") as server:
        yield server


@pytest.fixture
def live_atrium_local(transactional_db, tmp_path):
    """A server run for one person on their machine: a workflow tool's cwd is looked up on its disk."""
    with serve(tmp_path, ATRIUM_SERVER_PATHS="1", CELERY_BROKER_URL="") as server:
        yield server


@pytest.fixture(scope="session")
def sdk_python() -> Path:
    """The python of a venv with the official MCP SDK client of the current major version."""
    from tests.live.sdk_current import current_sdk_python

    return current_sdk_python()


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def broker_url(monkeypatch) -> str:
    """The broker for tests that drive a real worker: CELERY_BROKER_URL, or where it is unset (CI's
    SQLite pass) TEST_BROKER_URL, by default the local Redis. This process sends to it too."""
    from config.celery import app

    url = settings.CELERY_BROKER_URL or TEST_BROKER_URL
    if not reachable(url):
        pytest.skip(f"no broker at {url}")
    assert app.conf.broker_url == url
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    return url
